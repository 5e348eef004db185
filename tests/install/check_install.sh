#!/bin/sh
# check_install.sh BUILD_DIR WHICH_NCCL_C CC (see CMakeLists.txt)
set -u
build=$1 src=$2 cc=$3
work=$(mktemp -d /tmp/baton_install_XXXXXX) || exit 1
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

cmake --install "$build" --prefix "$work/stage" >"$work/install.log" 2>&1 ||
  { cat "$work/install.log"; fail "cmake --install"; }
mv "$work/stage" "$work/moved" || fail "mv"   # the .pc file must follow the tree
pc=$(find "$work/moved" -name nccl.pc | head -1)
[ -n "$pc" ] || fail "no nccl.pc installed"
export PKG_CONFIG_PATH="$(dirname "$pc")"
flags=$(pkg-config --cflags --libs nccl) || fail "pkg-config --cflags --libs nccl"
echo "pkg-config: $flags"
case "$flags" in *"$work/moved"*) ;; *) fail "pkg-config does not point into the moved prefix: $flags" ;; esac
"$cc" -o "$work/which_nccl" "$src" $flags -ldl || fail "building with pkg-config's flags"

# CUDA's lib directory holds stock's libnccl.so.2: put it first; the rpath must still win.
stock_dirs=""
for d in /usr/local/cuda/lib64 /usr/local/cuda/lib; do [ -d "$d" ] && stock_dirs="$stock_dirs:$d"; done
out=$(LD_LIBRARY_PATH="${stock_dirs#:}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" NCCL_DEBUG=VERSION \
  "$work/which_nccl" 2>&1) || { echo "$out"; fail "which_nccl failed"; }
echo "$out"
loaded=$(echo "$out" | sed -n 's/^LOADED //p')
real=$(readlink -f "$loaded")
case "$real" in "$work/moved"/*) ;; *) fail "the program loaded $loaded, not the installed Baton" ;; esac
echo "$out" | grep -q "^NCCL version 2\.32\.3+baton-" || fail "no Baton version banner"

# baton-info from the same prefix, pointed at the installed library, says Baton.
info=$("$work/moved/bin/baton-info" "$real" 2>&1)
status=$?
echo "$info" | head -3
[ "$status" = 0 ] && echo "$info" | grep -q "Library: .*: Baton " || fail "baton-info does not report Baton ($status)"

# baton-sim is installed beside it and runs from the moved prefix.
sim=$("$work/moved/bin/baton-sim" --topo h200x2 --op allreduce --bytes 1M 2>&1) ||
  { echo "$sim"; fail "the installed baton-sim failed"; }
echo "$sim" | grep -q "^op=allreduce .*algo=.* proto=.* channels=.* predicted_us=" ||
  { echo "$sim"; fail "the installed baton-sim printed no operation line"; }

# Control: the same program linked without the rpath gets whatever the search path gives.
"$cc" -o "$work/which_plain" "$src" $(pkg-config --cflags nccl) -L"$(dirname "$real")" -lnccl -ldl ||
  fail "building the control"
plain=$(LD_LIBRARY_PATH="${stock_dirs#:}" "$work/which_plain" 2>/dev/null | sed -n 's/^LOADED //p')
echo "control (no rpath, stock first on LD_LIBRARY_PATH): $plain"
if [ -n "$stock_dirs" ] && [ "$(readlink -f "$plain")" = "$real" ]; then
  echo "note: no stock libnccl.so.2 found in$stock_dirs: the rpath check above had no rival"
fi
echo PASS
