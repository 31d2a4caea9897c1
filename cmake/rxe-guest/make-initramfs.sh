#!/usr/bin/env bash
# Builds the tiny first-stage initramfs of the rxe guest (~0.2 s): klibc's sh/mount/insmod/run-init
# and the modules needed to mount the host root over virtio-9p with a tmpfs overlay on top. Its /init
# then run-init's into the second-stage script named by the kernel parameter roce_init= (read from
# the host root, so editing guest-init.sh or the tests never needs a rebuild).
#
#   make-initramfs.sh <output.cpio.gz> <kernel-version>
set -euo pipefail
out=$1
kver=$2
moddir=/lib/modules/$kver
# Load order matters (klibc insmod does not resolve dependencies).
modules=(virtio_ring virtio virtio_pci_modern_dev virtio_pci_legacy_dev virtio_pci
         netfs fscache 9pnet 9pnet_virtio 9p overlay)

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp"/{bin,lib/mod,dev,proc,lower,ovl,newroot}
klibc_bin=/usr/lib/klibc/bin
for b in sh mount umount insmod run-init mkdir sleep poweroff cat; do
  cp "$klibc_bin/$b" "$tmp/bin/"
done
cp /usr/lib/klibc-*.so "$tmp/lib/"
n=0
for m in "${modules[@]}"; do
  f=$(modinfo -k "$kver" -F filename "$m" 2>/dev/null) || true
  if [ -z "$f" ] || [ ! -e "$f" ]; then
    # Built into the kernel ("(builtin)") or absent: only absence is an error.
    grep -q "/$m.ko" "$moddir/modules.builtin" 2>/dev/null && continue
    echo "make-initramfs: module $m not found for $kver" >&2; exit 1
  fi
  n=$((n + 1))
  dst=$(printf '%s/lib/mod/%02d-%s.ko' "$tmp" "$n" "$m")
  case $f in
    *.ko.xz)  xz -dc "$f" > "$dst" ;;
    *.ko.zst) zstd -qdc "$f" > "$dst" ;;
    *.ko.gz)  gzip -dc "$f" > "$dst" ;;
    *)        cp "$f" "$dst" ;;
  esac
done
mknod -m 600 "$tmp/dev/console" c 5 1
mknod -m 666 "$tmp/dev/null" c 1 3

cat > "$tmp/init" <<'INIT'
#!/bin/sh
# First stage (klibc). Kernel parameters of the form k=v arrive as environment variables.
PATH=/bin
export PATH
fail() { echo "rxe-initramfs: FAILED: $*"; poweroff -f; sleep 5; }
for m in /lib/mod/*.ko; do insmod "$m" || fail "insmod $m"; done
mount -t 9p -o ro,trans=virtio,version=9p2000.L,msize=262144,cache=loose host0 /lower \
  || fail "mount 9p host0"
mount -t tmpfs -o mode=0755,size=75% tmpfs /ovl || fail "mount tmpfs"
mkdir /ovl/upper /ovl/work
mount -t overlay -o lowerdir=/lower,upperdir=/ovl/upper,workdir=/ovl/work overlay /newroot \
  || fail "mount overlay"
[ -n "$roce_init" ] || fail "no roce_init= kernel parameter"
exec run-init /newroot "$roce_init"
fail "run-init $roce_init"
INIT
chmod 755 "$tmp/init"

mkdir -p "$(dirname "$out")"
(cd "$tmp" && find . -print0 | LC_ALL=C sort -z | cpio --null -o -H newc --quiet) | gzip -1 > "$out.tmp"
mv "$out.tmp" "$out"
