#!/usr/bin/env bash
# Boots Debian's kernel in a QEMU guest (TCG unless KVM works), creates soft-RoCE rxe0 on the
# guest's NIC and runs <script> [args] inside it with bash; returns the script's exit code.
#
#   cmake/rxe-guest/run-in-guest.sh cmake/rxe-guest/tests/suite.sh
#
# The guest's root is the host's root, read-only over 9p with a tmpfs overlay, as it was at boot:
# build first. A writable share (the run directory) carries job.env in and exit-code/results out.
# Exit codes: the script's; 77 = QEMU or the guest kernel is not installed (unless
# ROCE_REQUIRE_RXE=1, then 1); 1 = the guest did not report (no exit-code file) or was killed.
#
# Environment:
#   ROCE_BUILD_DIR           build tree the tests use (default <repo>/build); passed to the guest
#   ROCE_RXE_WORK            initramfs cache and run directories (default $ROCE_BUILD_DIR/rxe-guest)
#   ROCE_RXE_RUN_DIR         the writable share, emptied first (default $ROCE_RXE_WORK/run-<script name>):
#                            job.env, console.log, exit-code, and what the script writes to
#                            $ROCE_RXE_OUT (the suite: results.txt, logs/)
#   ROCE_RXE_HOST_TIMEOUT    seconds before the host kills QEMU (default 600)
#   ROCE_RXE_GUEST_TIMEOUT   seconds before the guest powers itself off (default host - 30)
#   ROCE_RXE_SCRIPT_TIMEOUT  seconds the script may run (default guest - 30)
#   ROCE_RXE_STEP_TIMEOUT    per-step timeout the test scripts use (default 60)
#   ROCE_RXE_ACCEL           QEMU accelerator list (default kvm:tcg, tcg where a probe finds KVM broken)
#   ROCE_RXE_SMP, ROCE_RXE_MEM   vCPUs and memory (default 2, 4G)
#   ROCE_RXE_KERNEL          kernel version under /boot (default: newest with rdma_rxe)
#   ROCE_RXE_QEMU            QEMU binary (default qemu-system-x86_64 from PATH)
#   ROCE_REQUIRE_RXE=1       missing QEMU/kernel is a failure instead of a skip
# Every ROCE_*, UCX_* and OMPI_* variable is passed into the guest.
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
t0=${EPOCHREALTIME/./}
log() {
  local now=${EPOCHREALTIME/./} d
  d=$(( (now - t0) / 100000 ))
  printf '[rxe-guest %(%H:%M:%S)T +%d.%ds] %s\n' -1 $((d / 10)) $((d % 10)) "$*"
}
skip() {
  if [ "${ROCE_REQUIRE_RXE:-0}" = 1 ]; then
    log "FAILED (ROCE_REQUIRE_RXE=1): $*"; exit 1
  fi
  log "SKIPPED: $* (install with: bash cmake/rxe-guest/setup-deps.sh; set ROCE_REQUIRE_RXE=1 to make this a failure)"
  exit 77
}

[ $# -ge 1 ] || { echo "usage: $0 <script> [args...]" >&2; exit 2; }
script=$(realpath -e "$1") || { log "no such script: $1"; exit 2; }
shift

export ROCE_BUILD_DIR=${ROCE_BUILD_DIR:-$repo/build}
export ROCE_RXE_DIR=$here
host_timeout=${ROCE_RXE_HOST_TIMEOUT:-600}
export ROCE_RXE_GUEST_TIMEOUT=${ROCE_RXE_GUEST_TIMEOUT:-$((host_timeout - 30))}
export ROCE_RXE_SCRIPT_TIMEOUT=${ROCE_RXE_SCRIPT_TIMEOUT:-$((ROCE_RXE_GUEST_TIMEOUT - 30))}
export ROCE_RXE_STEP_TIMEOUT=${ROCE_RXE_STEP_TIMEOUT:-60}
work=${ROCE_RXE_WORK:-$ROCE_BUILD_DIR/rxe-guest}

# ---- prerequisites ---------------------------------------------------------------------------
qemu=${ROCE_RXE_QEMU:-$(command -v qemu-system-x86_64)}
[ -n "$qemu" ] && [ -x "$qemu" ] || skip "qemu-system-x86_64 not installed"
kver=${ROCE_RXE_KERNEL:-}
if [ -z "$kver" ]; then
  for k in /boot/vmlinuz-*; do
    [ -e "$k" ] || continue
    v=${k#/boot/vmlinuz-}
    compgen -G "/lib/modules/$v/kernel/drivers/infiniband/sw/rxe/rdma_rxe.ko*" >/dev/null && kver=$v
  done
fi
[ -n "$kver" ] && [ -r "/boot/vmlinuz-$kver" ] || skip "no readable /boot/vmlinuz-* with an rdma_rxe module"
for t in /usr/lib/klibc/bin/run-init modinfo cpio; do
  command -v "$t" >/dev/null || skip "$t not installed (klibc-utils, kmod, cpio)"
done
command -v rdma >/dev/null && command -v ibv_devinfo >/dev/null || skip "rdma/ibv_devinfo not installed"

mkdir -p "$work" || { log "cannot create $work"; exit 1; }
# One guest at a time on this machine (CPU is scarce): wait for any other run to finish.
exec 9>"$work/lock"
flock -w "$host_timeout" 9 || { log "another guest is still running (lock $work/lock)"; exit 1; }

# ---- initramfs (cached; rebuilt when the builder, the kernel or klibc change) ---------------------
key=$( { cat "$here/make-initramfs.sh"; echo "$kver"; ls -l --time-style=+%s /usr/lib/klibc-*.so \
        "/lib/modules/$kver/modules.dep"; } | sha256sum | cut -c1-16)
initrd=$work/initramfs-$kver-$key.cpio.gz
if [ ! -s "$initrd" ]; then
  log "building initramfs $initrd"
  rm -f "$work"/initramfs-*.cpio.gz
  bash "$here/make-initramfs.sh" "$initrd" "$kver" || { log "FAILED: initramfs build"; exit 1; }
fi

# ---- run directory: job in, exit code and results out -------------------------------------------
name=$(basename "$script" .sh)
out=${ROCE_RXE_RUN_DIR:-$work/run-$name}
rm -rf "$out"; mkdir -p "$out" || { log "cannot create $out"; exit 1; }
{
  printf 'ROCE_JOB_SCRIPT=%q\n' "$script"
  printf 'ROCE_JOB_ARGS=('; [ $# = 0 ] || printf '%q ' "$@"; printf ')\n'
  printf 'export ROCE_RXE_OUT=/rxe-out\n'
  # ROCE_*/UCX_*/OMPI_* for the tests, AB_* for abperf.sh (rounds, the builds compared)
  for var in $(compgen -e); do
    case $var in ROCE_JOB_*|ROCE_RXE_OUT) ;; ROCE_*|UCX_*|OMPI_*|AB_*) printf 'export %s=%q\n' "$var" "${!var}" ;; esac
  done
} > "$out/job.env"

# Whether KVM really works (probed once per host kernel/QEMU/guest kernel, cached): on some hosts
# /dev/kvm exists but QEMU asserts ("failed to set MSR 0x10a") or hangs, and -machine accel=kvm:tcg
# does not fall back then. The probe boots the guest kernel into a panic (no init) under KVM.
kvm_usable() {
  [ -w /dev/kvm ] || return 1
  local f
  f="$work/kvm-probe-$( { uname -r; "$qemu" --version; echo "$kver"; } | sha256sum | cut -c1-16)"
  if [ ! -e "$f" ]; then
    log "probing KVM"
    if timeout -k 5 30 "$qemu" -machine accel=kvm -cpu max -smp 1 -m 512M -kernel "/boot/vmlinuz-$kver" \
         -append "console=ttyS0 panic=-1 rdinit=/nonexistent" -nodefaults -display none \
         -serial stdio -no-reboot </dev/null 2>&1 | grep -q "Kernel panic"; then
      echo yes > "$f"
    else
      echo no > "$f"
    fi
    log "KVM usable: $(cat "$f")"
  fi
  [ "$(cat "$f")" = yes ]
}
accel=${ROCE_RXE_ACCEL:-kvm:tcg}
if [[ $accel == kvm* ]] && ! kvm_usable; then accel=tcg; fi
accel_args=(-machine "accel=$accel")
[ "$accel" = tcg ] && accel_args=(-accel tcg,thread=multi)
args=(
  "${accel_args[@]}" -cpu max -smp "${ROCE_RXE_SMP:-2}" -m "${ROCE_RXE_MEM:-4G}"
  -kernel "/boot/vmlinuz-$kver" -initrd "$initrd"
  -append "console=ttyS0 quiet panic=-1 rdinit=/init roce_init=$here/guest-init.sh"
  -nodefaults -display none -serial stdio -no-reboot
  -virtfs local,path=/,mount_tag=host0,security_model=none,readonly=on,multidevs=remap
  -virtfs "local,path=$out,mount_tag=out,security_model=none,multidevs=remap"
  -netdev user,id=n0,restrict=on -device virtio-net-pci,netdev=n0 -device virtio-rng-pci
)

log "booting kernel $kver ($accel, ${ROCE_RXE_SMP:-2} vCPUs, ${ROCE_RXE_MEM:-4G}), host timeout ${host_timeout}s: $script $*"
log "build dir $ROCE_BUILD_DIR, results in $out"
# Stream the console with the host's clock; keep a copy. QEMU runs in the background so that an
# interrupt (Ctrl-C, kill) stops the guest at once instead of leaving it running.
exec 8> >(
  while IFS= read -r line; do
    line=${line%$'\r'}
    printf '%s\n' "$line" >> "$out/console.log"
    printf '%(%H:%M:%S)T | %s\n' -1 "$line"
  done
)
streampid=$!
timeout -k 10 "$host_timeout" "$qemu" "${args[@]}" </dev/null >&8 2>&8 &
qpid=$!
trap 'log "interrupted: stopping the guest"; kill -TERM "$qpid" 2>/dev/null; wait "$qpid"; exit 130' INT TERM HUP
wait "$qpid"
qrc=$?
trap - INT TERM HUP
exec 8>&-
wait "$streampid" 2>/dev/null
if [ "$qrc" = 124 ] || [ "$qrc" = 137 ]; then
  log "FAILED: guest killed after the host timeout of ${host_timeout}s"
  exit 1
fi
if [ ! -s "$out/exit-code" ]; then
  log "FAILED: the guest did not report an exit code (qemu exit $qrc); console in $out/console.log"
  exit 1
fi
read -r rc < "$out/exit-code"
[[ $rc =~ ^[0-9]+$ ]] || { log "FAILED: bad exit code '$rc'"; exit 1; }
log "guest finished: exit code $rc (qemu exit $qrc)"
if [ "$rc" = 77 ]; then
  log "the script exited 77 inside the guest: reported as failure (skips are decided on the host)"
  rc=1
fi
exit "$rc"
