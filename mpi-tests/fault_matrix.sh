#!/usr/bin/env bash
# The fault matrix (ctest faults.matrix): MPI data-verifying workloads under real mpirun over
# rc_roce and ud_roce on the userspace device, one injected fault at a time (and all at once),
# both processes injecting on transmit. Each run must end with every byte verified and nothing
# lost (mpi_pingpong: 1 B..1 MiB ping-pong and streaming, each message's pattern checked; with
# rc_roce and all faults also mpi_rma), and the counter files must show the fault was really
# injected (and, where the receiver can see it, detected). Prints a Markdown table (also written
# to OUT) for the README.
# Usage: fault_matrix.sh <roce-mpirun> <mpi_pingpong> <mpi_rma> <roce_doctor> <OUT.md>
set -uo pipefail
launcher=$1 pingpong=$2 rma=$3 doctor=$4 out=$5
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
fail=0
rows=()

# sum NAME...: the sum of counters NAME over every interface of the last run (JSON on stdin).
sum() {
  python3 -c '
import json, sys
ifs = json.load(sys.stdin)["interfaces"]
print(sum(i["counters"].get(n, 0) for i in ifs for n in sys.argv[1:]))' "$@"
}

run() {   # run <transport> <fault label> <injected counter> <detected counters> VAR=VALUE...
          # (VAR: a FAULT_ setting without its prefix, or @NAME for UCX_<TL>_NAME; STALL=N: SIGSTOP
          #  the second rank N times for 300 ms while it runs, the count is the injected figure)
  local tl=$1 label=$2 injected_ctr=$3 detected_ctrs=$4; shift 4
  local TL=${tl^^} dir=$work/$tl.$label env=() kv transfers=0 mism=0 rc errors=0 rma_ok=""
  mkdir -p "$dir"
  local stalls=0
  for kv in "$@"; do
    case $kv in
      STALL=*) stalls=${kv#STALL=} ;;
      @*) env+=("UCX_${TL}_${kv#@}") ;;
      *) env+=("UCX_${TL}_FAULT_${kv}") ;;
    esac
  done
  env+=("UCX_${TL}_STATS_DIR=$dir" "UCX_${TL}_FAULT_SEED=$RANDOM" "UCX_TLS=$tl,self")
  echo "[faults] $tl: $label (${*})"
  env "${env[@]}" timeout -k 10 300 "$launcher" -np 2 "$pingpong" --max-size 1048576 --iters 20 --bw-iters 2 \
    > "$dir/log" 2>&1 &
  local job=$! done_stalls=0 victim=""
  if [ "$stalls" -gt 0 ]; then   # a responder that stops answering for a while (descheduled, swapped)
    for _ in $(seq 1 100); do
      victim=$(pgrep -f "^$pingpong" | sort -n | tail -1); [ -n "$victim" ] && break; sleep 0.05
    done
    for _ in $(seq 1 "$stalls"); do
      sleep 0.2
      kill -STOP "$victim" 2>/dev/null || break
      sleep 0.3
      kill -CONT "$victim"
      done_stalls=$((done_stalls + 1))
    done
  fi
  wait $job
  rc=$?
  read -r transfers mism < <(sed -n 's/^# mpi_pingpong: \([0-9]*\) transfers, \([0-9]*\) mismatches$/\1 \2/p' "$dir/log")
  if [ "$tl" = rc_roce ] && [ "$label" = all ]; then   # one-sided too: results must stay exact
    env "${env[@]}" timeout -k 10 300 "$launcher" -np 2 "$rma" 20000 20 > "$dir/rma.log" 2>&1 || rc=$?
    grep -q "^# mpi_rma: 0 errors" "$dir/rma.log" && rma_ok=" + mpi_rma" || { rma_ok=" + mpi_rma FAILED"; rc=1; }
  fi
  [ $rc -eq 0 ] || errors=1
  local json injected detected
  json=$("$doctor" counters "$dir" --json)
  if [ "$injected_ctr" = stalls ]; then injected=$done_stalls; else injected=$(sum $injected_ctr <<<"$json"); fi
  detected=$( [ -n "$detected_ctrs" ] && echo "$(sum $detected_ctrs <<<"$json") (${detected_ctrs// / + })" || echo "-")
  local verdict=ok
  # (an empty count - the doctor or its JSON failed - is no proof of injection: it fails)
  if [ $rc -ne 0 ] || [ -z "$transfers" ] || [ "${mism:-1}" != 0 ] || [ "${injected:-0}" -le 0 ]; then
    verdict=FAIL; fail=1
    echo "[faults] FAIL: exit $rc, transfers ${transfers:-?}, mismatches ${mism:-?}, injected $injected"
    tail -n 15 "$dir/log"; [ -f "$dir/rma.log" ] && tail -n 5 "$dir/rma.log"
  fi
  rows+=("| $tl | $label | $injected | $detected | ${transfers:-0}$rma_ok | $errors | ${mism:-?} | $verdict |")
  echo "[faults]   injected $injected, detected $detected, verified ${transfers:-0} transfers$rma_ok, mismatches ${mism:-?}: $verdict"
}

for tl in rc_roce ud_roce; do
  run $tl "drop 2%"       faults_dropped    "retransmits"                 DROP=0.02
  run $tl "duplicate 2%"  faults_duplicated "duplicates"                  DUPLICATE=0.02
  run $tl "reorder 2%"    faults_reordered  ""                            REORDER=0.02   # invisible: arrives later
  run $tl "corrupt 1%"    faults_corrupted  "icrc_errors malformed"       CORRUPT=0.01
  run $tl "truncate 1%"   faults_truncated  "icrc_errors malformed"       TRUNCATE=0.01
  run $tl "delay 2% by 3 ms" faults_delayed  "retransmits duplicates"      DELAY=0.02 DELAY_TIME=3ms
done
run rc_roce "ACK/NAK drop 5%" faults_acks_dropped "retransmits duplicates" DROP_ACKS=0.05
run rc_roce "ECN CE 2%"       faults_ce           "ce_received"               CE=0.02
run rc_roce "receive queue of 4 (RNR)" naks_sent_rnr "rnr_naks"              @RX_QUEUE_LEN=4
run rc_roce "responder SIGSTOPped 300 ms (up to 4x)" stalls   "timeouts retransmits"      STALL=4
run ud_roce "responder SIGSTOPped 300 ms (up to 4x)" stalls   "timeouts retransmits"      STALL=4
run rc_roce all "faults_dropped faults_duplicated faults_reordered faults_corrupted faults_truncated faults_acks_dropped faults_delayed" \
  "retransmits duplicates icrc_errors malformed" DROP=0.01 DUPLICATE=0.01 REORDER=0.01 CORRUPT=0.005 TRUNCATE=0.005 DROP_ACKS=0.02 DELAY=0.01
run ud_roce all "faults_dropped faults_duplicated faults_reordered faults_corrupted faults_truncated faults_delayed" \
  "retransmits duplicates icrc_errors malformed" DROP=0.01 DUPLICATE=0.01 REORDER=0.01 CORRUPT=0.005 TRUNCATE=0.005 DELAY=0.01

{
  echo "| transport | fault (each side, on transmit) | packets injected | seen in the counters | transfers verified | errors reported | bytes lost | result |"
  echo "|---|---|---|---|---|---|---|---|"
  printf '%s\n' "${rows[@]}"
} | tee "$out"
[ $fail -eq 0 ] || { echo "[faults] FAIL"; exit 1; }
# ROCE_FAULT_MATRIX_README=README.md: put this table between the README's fault-matrix markers.
if [ -n "${ROCE_FAULT_MATRIX_README:-}" ]; then
  python3 - "$ROCE_FAULT_MATRIX_README" "$out" <<'PY'
import re, sys
readme, table = sys.argv[1], open(sys.argv[2]).read().rstrip("\n")
s = open(readme).read()
s2 = re.sub(r"(<!-- fault-matrix:begin -->\n).*?(\n<!-- fault-matrix:end -->)", lambda m: m.group(1) + table + m.group(2), s, flags=re.S)
open(readme, "w").write(s2)
print("[faults] table written to", readme)
PY
fi
echo "[faults] ok"
