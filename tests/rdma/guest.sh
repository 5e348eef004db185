#!/usr/bin/env bash
# The Soft-RoCE guest: a throw-away QEMU virtual machine that boots Debian's own kernel (which has
# rdma_rxe), sees this machine's root filesystem read-only and the working directory and this
# checkout read-write at the same paths (wherever they are: the guest's /root, /tmp, /run and
# /var/tmp are fresh tmpfs, and these directories are mounted again on top), and has an RDMA device
# "rxe0" on its loopback interface. It is how the IB network runs for
# real without RDMA hardware.
#
#   tests/rdma/guest.sh setup          install qemu and rdma-core (apt, as root), download Debian's
#                                      kernel package and unpack it (not installed) into the cache
#   tests/rdma/guest.sh check          exit 0 when the guest can start, else print why and exit 77
#   tests/rdma/guest.sh run CMD...     run CMD (a shell command line) in the guest; exit status is
#                                      CMD's (77: the guest cannot start, with the reason)
#
# Environment: BATON_RDMA_DIR (cache: kernel and initramfs; default ~/.cache/baton-rdma),
# GUEST_WORKDIR (the read-write directory the command starts in, default $PWD; the checkout that
# holds this script is shared too, so a command may run its scripts), GUEST_TIMEOUT (seconds, default 900),
# GUEST_MEM (default 3G), GUEST_SMP (default 2), GUEST_KEEP=1 keeps the control directory,
# BATON_RDMA_REQUIRED=1 (CI) makes "cannot start" a failure (exit 1) instead of a skip.
# The machine is emulated (TCG): KVM cannot run Debian's stock kernel on the CI machines. Expect
# ~10 s to boot and about 40 MB/s through rxe.
set -euo pipefail
SKIP=77
DIR=${BATON_RDMA_DIR:-${HOME:-/root}/.cache/baton-rdma}
KROOT=$DIR/kroot

die_skip() {
  if [ "${BATON_RDMA_REQUIRED:-0}" = 1 ]; then
    echo "rdma guest: FAILED: $* (BATON_RDMA_REQUIRED=1)" >&2
    exit 1
  fi
  echo "rdma guest: SKIP: $*" >&2
  exit "$SKIP"
}

kernel_version() { find "$KROOT/lib/modules" -mindepth 1 -maxdepth 1 -printf '%f\n' 2>/dev/null | sort -V | tail -1; }

cmd_setup() {
  local sudo=""
  [ "$(id -u)" = 0 ] || sudo=sudo
  local need=()
  for p in qemu-system-x86 busybox-static kmod rdma-core ibverbs-providers ibverbs-utils iproute2 cpio; do
    dpkg -s "$p" >/dev/null 2>&1 || need+=("$p")
  done
  if [ "${#need[@]}" -gt 0 ]; then
    $sudo env DEBIAN_FRONTEND=noninteractive timeout 600 apt-get update -qq
    $sudo env DEBIAN_FRONTEND=noninteractive timeout 900 apt-get install -y -qq \
      --no-install-recommends "${need[@]}" >/dev/null
  fi
  if [ -z "$(kernel_version)" ]; then
    mkdir -p "$DIR"
    local pkg
    pkg=$(apt-cache depends linux-image-amd64 | awk '/Depends: linux-image-[0-9]/{print $2; exit}')
    [ -n "$pkg" ] || { echo "setup: no linux-image package found (apt-get update?)" >&2; exit 1; }
    (cd "$DIR" && rm -f ./*.deb && timeout 600 apt-get download -qq -o APT::Sandbox::User=root "$pkg" &&
      dpkg-deb -x "$pkg"_*.deb "$KROOT" && rm -f "$pkg"_*.deb)
  fi
  local kver
  kver=$(kernel_version)
  [ -s "$KROOT/lib/modules/$kver/modules.dep" ] || depmod -b "$KROOT" "$kver"
  echo "rdma guest: kernel $kver in $KROOT"
}

# Why the guest cannot start, or nothing.
why_not() {
  command -v qemu-system-x86_64 >/dev/null || { echo "qemu-system-x86_64 is not installed (tests/rdma/guest.sh setup)"; return; }
  [ -x /bin/busybox ] || { echo "busybox-static is not installed (tests/rdma/guest.sh setup)"; return; }
  command -v cpio >/dev/null || { echo "cpio is not installed (tests/rdma/guest.sh setup)"; return; }
  local kver
  kver=$(kernel_version)
  if [ -z "$kver" ] || [ ! -r "$KROOT/boot/vmlinuz-$kver" ]; then
    echo "no guest kernel in $KROOT (tests/rdma/guest.sh setup downloads Debian's, ~100 MB)"
    return
  fi
  [ -s "$KROOT/lib/modules/$kver/modules.dep" ] || { echo "no modules.dep in $KROOT (run setup again)"; return; }
  [ -x /sbin/modprobe ] || [ -x /usr/sbin/modprobe ] || { echo "kmod (modprobe) is not installed"; return; }
  command -v rdma >/dev/null || { echo "iproute2's rdma tool is missing"; return; }
}

# initramfs: static busybox, the virtio/9p modules, /init. Built once per kernel.
make_initrd() {
  local kver=$1 out=$2 r
  r=$(mktemp -d)
  mkdir -p "$r"/{bin,sbin,dev,proc,sys,root,ctl,mods}
  cp /bin/busybox "$r/bin/busybox"
  ln -s busybox "$r/bin/sh"
  # The kernel's module requests (rxe needs crypto and udp tunnel modules; veth...) run
  # /sbin/modprobe here: pass them on to the host's modprobe over the unpacked kernel's modules.
  printf '#!/bin/sh\nexec /bin/busybox chroot /root /sbin/modprobe -d /tmp/.kmods "$@"\n' > "$r/sbin/modprobe"
  chmod +x "$r/sbin/modprobe"
  modprobe -a -d "$KROOT" -S "$kver" --show-depends virtio_pci 9pnet_virtio 9p |
    awk '$1 == "insmod" { print $2 }' | awk '!seen[$0]++' | while read -r m; do
      cp "$m" "$r/mods/"
      basename "$m" >> "$r/mods/order"
    done
  cat > "$r/init" <<'INIT'
#!/bin/sh
export PATH=/bin
B=/bin/busybox
$B mount -t proc proc /proc; $B mount -t sysfs sys /sys; $B mount -t devtmpfs dev /dev
for m in $($B cat /mods/order); do $B insmod /mods/$m || echo "guest: insmod $m failed"; done
O="trans=virtio,version=9p2000.L,msize=262144"
$B mount -t 9p -o $O,ro,cache=loose hostroot /root || { echo "guest: 9p root mount failed"; $B poweroff -f; }
$B mount -t 9p -o $O ctl /ctl
for d in tmp run var/tmp var/lib/rdma root; do [ -d /root/$d ] && $B mount -t tmpfs tmpfs /root/$d; done
$B mount -t proc proc /root/proc; $B mount -t sysfs sys /root/sys
$B mount -t devtmpfs dev /root/dev; $B mkdir -p /root/dev/pts /root/dev/shm
$B mount -t devpts devpts /root/dev/pts; $B mount -t tmpfs tmpfs /root/dev/shm
K=$($B cat /ctl/kver)
$B mkdir -p /root/tmp/.kmods/lib/modules/$K
$B mount -t 9p -o $O,ro,cache=loose kmods /root/tmp/.kmods/lib/modules/$K
WD=$($B cat /ctl/workdir)
# Each shared directory at its host path, on top of the tmpfs mounts (under /root or /tmp the
# host's path does not exist there until made).
while read -r tag dir; do
  $B mkdir -p "/root$dir" 2>/dev/null
  $B mount -t 9p -o $O "$tag" "/root$dir" || echo "guest: mount of $dir failed"
done < /ctl/shares
$B cp /ctl/cmd.sh /root/tmp/.guest_cmd.sh
echo "guest: up after $($B cut -d' ' -f1 /proc/uptime) s"
{ $B chroot /root /bin/sh -c "cd '$WD' && exec /bin/sh /tmp/.guest_cmd.sh"; echo $? > /ctl/rc; } 2>&1 | $B tee /ctl/guest.log
echo "guest: done after $($B cut -d' ' -f1 /proc/uptime) s, status $($B cat /ctl/rc)"
$B sync; while read -r tag dir; do $B umount "/root$dir"; done < /ctl/shares 2>/dev/null
$B umount /ctl 2>/dev/null; $B poweroff -f
INIT
  chmod +x "$r/init"
  (cd "$r" && find . | cpio -o -H newc --quiet | gzip -1) > "$out.tmp" && mv "$out.tmp" "$out"
  rm -rf "$r"
}

cmd_run() {
  local why
  why=$(why_not)
  [ -z "$why" ] || die_skip "$why"
  local kver initrd ctl workdir
  kver=$(kernel_version)
  # Named for this script too: a changed /init makes a new one.
  initrd=$DIR/initrd-$kver-$(sha256sum "$0" | cut -c1-12).cpio.gz
  [ -s "$initrd" ] || make_initrd "$kver" "$initrd"
  workdir=$(realpath "${GUEST_WORKDIR:-$PWD}")
  ctl=$(mktemp -d /tmp/baton-rdma-guest.XXXXXX)
  echo "$workdir" > "$ctl/workdir"
  # The working directory and this checkout, each shared unless inside the other.
  local checkout shares=() fsdevs=() i=0 d
  checkout=$(realpath "$(dirname "$0")/../..")
  for d in "$workdir" "$checkout"; do
    case "$d/" in "$checkout"/*) [ "$d" = "$checkout" ] || continue ;; esac
    case "$d/" in "$workdir"/*) [ "$d" = "$workdir" ] || continue ;; esac
    shares+=("$d")
  done
  : > "$ctl/shares"
  while IFS= read -r d; do
    echo "work$i $d" >> "$ctl/shares"
    fsdevs+=(-fsdev "local,id=w$i,path=$d,security_model=none,multidevs=remap"
      -device "virtio-9p-pci,fsdev=w$i,mount_tag=work$i")
    i=$((i + 1))
  done < <(printf '%s\n' "${shares[@]}" | sort -u)
  echo "$kver" > "$ctl/kver"
  {
    echo 'export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root'
    echo 'export MODPROBE_OPTIONS="-d /tmp/.kmods"'
    echo 'ulimit -l unlimited 2>/dev/null'
    echo 'modprobe rdma_rxe || { echo "guest: modprobe rdma_rxe failed"; exit 90; }'
    echo 'hostname baton-guest 2>/dev/null; ip link set lo up'
    echo 'rdma link add rxe0 type rxe netdev lo || { echo "guest: rdma link add failed"; exit 91; }'
    printf '%s\n' "$*"
  } > "$ctl/cmd.sh"
  local t0 t1 qrc rc
  t0=$(date +%s)
  set +e
  timeout --kill-after=10 "${GUEST_TIMEOUT:-900}" qemu-system-x86_64 \
    -nodefaults -no-user-config -display none -no-reboot \
    -accel tcg,thread=multi -cpu max -smp "${GUEST_SMP:-2}" -m "${GUEST_MEM:-3G}" \
    -kernel "$KROOT/boot/vmlinuz-$kver" -initrd "$initrd" \
    -append "console=ttyS0 panic=-1 quiet loglevel=3 rdinit=/init mitigations=off" \
    -serial "file:$ctl/console.log" \
    -fsdev local,id=r,path=/,security_model=none,readonly=on,multidevs=remap \
    -device virtio-9p-pci,fsdev=r,mount_tag=hostroot \
    "${fsdevs[@]}" \
    -fsdev "local,id=c,path=$ctl,security_model=none" \
    -device virtio-9p-pci,fsdev=c,mount_tag=ctl \
    -fsdev "local,id=k,path=$(realpath "$KROOT/lib/modules/$kver"),security_model=none,readonly=on" \
    -device virtio-9p-pci,fsdev=k,mount_tag=kmods </dev/null
  qrc=$?
  set -e
  t1=$(date +%s)
  cat "$ctl/console.log"
  rc=$(cat "$ctl/rc" 2>/dev/null || echo 255)
  if [ "$qrc" = 124 ] || [ "$qrc" = 137 ]; then
    echo "rdma guest: timed out after ${GUEST_TIMEOUT:-900} s" >&2
    rc=124
  fi
  echo "rdma guest: qemu exit $qrc, command status $rc, $((t1 - t0)) s"
  if [ "${GUEST_KEEP:-0}" = 1 ]; then echo "control directory kept: $ctl"; else rm -rf "$ctl"; fi
  exit "$rc"
}

case "${1:-}" in
  setup) shift; cmd_setup "$@" ;;
  check) why=$(why_not); [ -z "$why" ] || die_skip "$why"; echo "rdma guest: ready (kernel $(kernel_version))" ;;
  run) shift; cmd_run "$@" ;;
  *) echo "usage: $0 setup | check | run CMD..." >&2; exit 2 ;;
esac
