#!/usr/bin/env bash
# Run HERE (not on the device machine) before a device run, when the device image lacks libcheck
# (env.log says "libcheck: missing"): copies the static libcheck and libsubunit, their headers and
# pkg-config files into third_party/gpu-deps/check, which travels with carry ["third_party"].
# run.sh adds it to PKG_CONFIG_PATH when pkg-config does not find check by itself. Static archives
# only, so nothing needs to be installed on the device machine.
set -euo pipefail
cd "$(dirname "$0")/../.."
dest=third_party/gpu-deps/check
multiarch=$(gcc -print-multiarch 2>/dev/null || echo x86_64-linux-gnu)
libdir=/usr/lib/$multiarch
for f in "$libdir/libcheck_pic.a" "$libdir/libcheck.a" "$libdir/libsubunit.a" /usr/include/check.h; do
  [ -f "$f" ] || { echo "stage_deps: $f missing; install check and libsubunit-dev here first" >&2; exit 1; }
done
rm -rf "$dest"
mkdir -p "$dest/include" "$dest/lib/pkgconfig"
cp /usr/include/check.h /usr/include/check_stdint.h "$dest/include/" 2>/dev/null ||
  cp /usr/include/check.h "$dest/include/"
[ -f /usr/include/subunit/child.h ] && cp -r /usr/include/subunit "$dest/include/"
cp "$libdir/libcheck_pic.a" "$libdir/libcheck.a" "$libdir/libsubunit.a" "$dest/lib/"
for pc in check libsubunit; do
  src=$libdir/pkgconfig/$pc.pc
  [ -f "$src" ] || continue
  # Relocatable: the prefix becomes the folder the .pc file lands in, two levels up.
  # shellcheck disable=SC2016  # ${pcfiledir} and ${prefix} are pkg-config's, not the shell's
  sed -e 's|^prefix=.*|prefix=${pcfiledir}/../..|' -e 's|^libdir=.*|libdir=${prefix}/lib|' \
    -e 's|^includedir=.*|includedir=${prefix}/include|' -e 's|^exec_prefix=.*|exec_prefix=${prefix}|' \
    "$src" >"$dest/lib/pkgconfig/$pc.pc"
done
PKG_CONFIG_PATH=$PWD/$dest/lib/pkgconfig pkg-config --libs --cflags check
du -sh "$dest"
