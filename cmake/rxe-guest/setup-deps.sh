#!/usr/bin/env bash
# Installs what the rxe QEMU guest suite needs on Debian 12 (host side; the guest shares the host's
# root read-only, so everything the guest runs comes from here too). Idempotent: when everything is
# installed it only checks (no apt-get update, no network).
#
#   bash cmake/rxe-guest/setup-deps.sh          # as root
set -euo pipefail

packages=(
  linux-image-amd64          # Debian kernel with rdma_rxe as a module (/boot/vmlinuz-*, /lib/modules/*)
  qemu-system-x86            # TCG guest
  klibc-utils kmod cpio      # tiny initramfs: klibc sh/mount/run-init, modprobe/insmod, cpio
  rdma-core ibverbs-providers ibverbs-utils rdmacm-utils perftest iproute2   # rdma tool, rxe provider, pingpongs
  ucx-utils libucx0          # ucx_perftest / ucx_info (rc_verbs, ud_verbs baselines)
  openmpi-bin netpipe-openmpi   # mpirun, NPopenmpi
)

need=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || need+=("$p")
done
if [ ${#need[@]} -gt 0 ]; then
  echo "[rxe-setup] installing: ${need[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q
  apt-get install -y -q --no-install-recommends "${need[@]}"
fi

# The kernel image and its module tree must both be there (linux-image-amd64 is a metapackage).
kver=""
for k in /boot/vmlinuz-*; do
  [ -e "$k" ] || continue
  v=${k#/boot/vmlinuz-}
  [ -e "/lib/modules/$v/kernel/drivers/infiniband/sw/rxe/rdma_rxe.ko" ] || \
    compgen -G "/lib/modules/$v/kernel/drivers/infiniband/sw/rxe/rdma_rxe.ko*" >/dev/null || continue
  kver=$v
done
if [ -z "$kver" ]; then
  echo "[rxe-setup] ERROR: no /boot/vmlinuz-* with an rdma_rxe module under /lib/modules" >&2
  exit 1
fi
echo "[rxe-setup] guest kernel $kver, $(qemu-system-x86_64 --version | head -1)"
echo "[rxe-setup] ok"
