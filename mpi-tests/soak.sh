#!/usr/bin/env bash
# Soak (ctests soak.<transport>): one long-lived MPI job of mixed traffic (mpi_pingpong's sweep,
# 1 B..256 KiB ping-pong and streaming, every message's pattern checked, repeated for SECONDS)
# with faults injected on both sides, sampling both ranks' RSS after every round. Fails on any
# mismatch or error, or when memory keeps growing: the largest RSS of the last quarter of the
# rounds may exceed that of the second quarter (after warm-up) by at most max(8 MiB, 5%).
# Usage: soak.sh <roce-mpirun> <mpi_pingpong> <transport> <seconds>
set -uo pipefail
launcher=$1 pingpong=$2 tl=$3 secs=$4
TL=${tl^^}
log=$(mktemp) stats=$(mktemp -d); trap 'rm -f "$log"; rm -rf "$stats"' EXIT
export "UCX_${TL}_STATS_DIR=$stats" UCX_TLS=$tl,self "UCX_${TL}_FAULT_DROP=0.01" "UCX_${TL}_FAULT_DUPLICATE=0.01" \
       "UCX_${TL}_FAULT_REORDER=0.01" "UCX_${TL}_FAULT_CORRUPT=0.002" "UCX_${TL}_FAULT_SEED=$RANDOM"
echo "[soak] $tl for ${secs}s, 1% drop/duplicate/reorder + 0.2% corruption on both sides"
timeout -k 10 $((secs + 120)) "$launcher" -np 2 "$pingpong" --max-size 262144 --iters 20 --bw-iters 4 \
  --seconds "$secs" > "$log" 2>&1
rc=$?
doctor=${ROCE_DOCTOR:-$(dirname "$launcher")/src/gid/roce_doctor}
python3 - "$log" "$rc" "$stats" "$doctor" <<'PY'
import re, subprocess, sys
log, rc, stats, doctor = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
text = open(log).read()
rounds = [(float(t), int(n), int(a), int(b)) for t, n, a, b in
          re.findall(r"^# round \d+ t=([\d.]+) transfers=(\d+) rss_kib=(\d+),(\d+)$", text, re.M)]
m = re.search(r"^# mpi_pingpong: (\d+) transfers, (\d+) mismatches$", text, re.M)
if rc != 0 or not m or len(rounds) < 8:
    print(text[-3000:])
    sys.exit(f"[soak] FAIL: exit {rc}, {len(rounds)} rounds, summary {'found' if m else 'missing'}")
transfers, mism = int(m.group(1)), int(m.group(2))
q = len(rounds) // 4
bad = mism != 0
for r in (0, 1):
    rss = [x[2 + r] for x in rounds]
    base, last = max(rss[q:2 * q]), max(rss[-q:])
    growth = last - base
    limit = max(8192, base // 20)
    print(f"[soak] rank {r}: RSS {rss[0] // 1024} MiB after round 1, {base // 1024} MiB at 25-50%, "
          f"{last // 1024} MiB at the end: growth {growth} KiB (limit {limit})")
    bad |= growth > limit
print(f"[soak] {len(rounds)} rounds in {rounds[-1][0]:.0f} s, {transfers} transfers verified, {mism} mismatches")
# The faults must have happened and been repaired (counter files of both ranks): a soak whose
# injection silently stopped working would pass on clean traffic.
names = ("faults_dropped", "faults_duplicated", "faults_reordered", "faults_corrupted", "retransmits")
try:
    r = subprocess.run([doctor, "counters", stats, "--sum", ",".join(names)], capture_output=True, text=True)
except OSError as e:
    sys.exit(f"[soak] FAIL: {doctor}: {e}")
if r.returncode != 0:
    sys.exit(f"[soak] FAIL: {doctor} counters {stats} --sum exited {r.returncode}: {r.stderr.strip()}")
counts = {k: int(v) for k, v in (line.split() for line in r.stdout.splitlines()) if v.isdigit()}
for k in names:
    print(f"[soak] {k}: {counts.get(k, 0)}")
    bad |= counts.get(k, 0) == 0
sys.exit("[soak] FAIL" if bad else 0)
PY
st=$?
[ $st -eq 0 ] && echo "[soak] ok" || exit 1
