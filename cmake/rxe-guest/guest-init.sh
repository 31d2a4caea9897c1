#!/bin/bash
# Second stage of the rxe guest: PID 1 on the overlay (host root read-only over 9p + tmpfs).
# Mounts the pseudo filesystems and the writable results share, brings up eth0 (QEMU user-mode
# network, 10.0.2.15/24), creates rxe0 on it, runs the job described by /rxe-out/job.env under
# `timeout`, writes its exit code to /rxe-out/exit-code and powers off. Anything that goes wrong
# before the job powers off without an exit code or with a non-zero one: the host counts both as failure.
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export HOME=/root LANG=C.UTF-8 TERM=dumb
t0=${EPOCHREALTIME/./}
log() {
  local now=${EPOCHREALTIME/./} d
  d=$(( (now - t0) / 100000 ))
  printf '[guest %4d.%ds] %s\n' $((d / 10)) $((d % 10)) "$*"
}
poweroff_now() {
  sync
  umount /rxe-out 2>/dev/null
  echo o > /proc/sysrq-trigger
  sleep 30
}
finish() {
  local rc=$1
  log "exit code $rc, powering off"
  echo "$rc" > /rxe-out/exit-code.tmp && mv /rxe-out/exit-code.tmp /rxe-out/exit-code
  poweroff_now
}
die() {
  log "FAILED: $*"
  dmesg 2>/dev/null | tail -n 25
  finish 70
}

mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev 2>/dev/null || true
mkdir -p /dev/pts /dev/shm
ln -sfn /proc/self/fd /dev/fd; ln -sf /proc/self/fd/0 /dev/stdin
ln -sf /proc/self/fd/1 /dev/stdout; ln -sf /proc/self/fd/2 /dev/stderr
mount -t devpts -o gid=5,mode=620,ptmxmode=666 devpts /dev/pts
mount -t tmpfs -o mode=1777 tmpfs /dev/shm
mount -t tmpfs -o mode=0755 tmpfs /run
mkdir -p /rxe-out
if ! mount -t 9p -o trans=virtio,version=9p2000.L,msize=262144 out /rxe-out; then
  log "FAILED: cannot mount the results share"
  poweroff_now
fi
echo 1 > /proc/sys/kernel/sysrq
[ -r /rxe-out/job.env ] || die "no /rxe-out/job.env"
# shellcheck source=/dev/null
source /rxe-out/job.env     # ROCE_JOB_SCRIPT, ROCE_JOB_ARGS, ROCE_RXE_GUEST_TIMEOUT, exported env
log "userspace up (kernel $(uname -r), $(nproc) vCPUs)"

# Guest-level timeout: whatever hangs, the guest reports 124 and powers off before the host kills it.
( sleep "${ROCE_RXE_GUEST_TIMEOUT:-540}"
  log "GUEST TIMEOUT after ${ROCE_RXE_GUEST_TIMEOUT:-540}s"
  ps -eo pid,etime,args 2>/dev/null | tail -n 20
  finish 124 ) &

hostname rxe-guest
echo "10.0.2.15 rxe-guest" >> /etc/hosts
ip link set lo up
modprobe virtio_net || die "modprobe virtio_net"
for _ in $(seq 50); do [ -e /sys/class/net/eth0 ] && break; sleep 0.1; done
ip addr add 10.0.2.15/24 dev eth0 || die "no eth0"
ip link set eth0 up
ip route add default via 10.0.2.2 2>/dev/null || true
modprobe -a rdma_rxe rdma_ucm ib_uverbs || die "modprobe rdma_rxe"
rdma link add rxe0 type rxe netdev eth0 || die "rdma link add rxe0 type rxe netdev eth0"
state=""
for _ in $(seq 100); do
  read -r state < /sys/class/infiniband/rxe0/ports/1/state 2>/dev/null || true
  [[ $state == *ACTIVE* ]] && break
  sleep 0.1
done
[[ $state == *ACTIVE* ]] || die "rxe0 port 1 not ACTIVE (state '$state')"
log "rxe0 ready on eth0 ($state)"

cd /tmp || true
log "running: $ROCE_JOB_SCRIPT ${ROCE_JOB_ARGS[*]}"
timeout -k 10 "${ROCE_RXE_SCRIPT_TIMEOUT:-500}" bash "$ROCE_JOB_SCRIPT" "${ROCE_JOB_ARGS[@]}"
rc=$?
[ "$rc" = 124 ] && log "script TIMEOUT after ${ROCE_RXE_SCRIPT_TIMEOUT:-500}s"
finish "$rc"
