/* The ABI probe built as C++: the header must compile cleanly as C++, and the probe adds the
 * exact (mangled) type of every entry point. */
#include "abi_probe.c"
