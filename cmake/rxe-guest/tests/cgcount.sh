#!/bin/bash
# User-space instructions per ping-pong iteration, counted inside the rxe guest: the client of
# ucx_perftest runs under valgrind's callgrind on rxe0 twice (n = ROCE_CG_N, default 1000 and
# 3000 iterations); the difference over the extra iterations is the cost of one iteration with
# start-up cancelled out. Deterministic where TCG timings swing by 2x; valgrind slows the client
# so much that nearly every poll finds the reply, so the counts are the messages' own costs, not
# idle polling. (now_ns() takes its slow path on every call under valgrind: ~150-250 of ud_roce's
# count per iteration are that, not real.)
#
#   cmake/rxe-guest/run-in-guest.sh cmake/rxe-guest/tests/cgcount.sh
#
# Environment (ROCE_* reach the guest): ROCE_CG_TLS (default "rc_verbs rc_roce ud_verbs ud_roce"),
# ROCE_CG_TEST (am_lat, add_lat: UCT level, -x <tl>; tag_lat: UCP level, UCX_TLS=<tl>,self;
# default am_lat), ROCE_CG_N (two counts, default "1000 3000"). Prints
# "cg tl=<tl> test=<test> per_iteration=<instructions>" per transport and writes the callgrind
# files and a per-function table (bench/cg_per_iteration.py) to $ROCE_RXE_OUT.
set -u
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../../.." && pwd)
BUILD=${ROCE_BUILD_DIR:-$repo/build}
OUT=${ROCE_RXE_OUT:-/tmp}
PLUGIN=$BUILD/uct/libuct_roce.so.0
export UCX_UD_VERBS_ETH_DGID_CHECK=n UCX_NET_DEVICES=rxe0:1
test=${ROCE_CG_TEST:-am_lat}
read -r n1 n2 <<< "${ROCE_CG_N:-1000 3000}"
command -v valgrind > /dev/null || { echo "cgcount: valgrind is not installed"; exit 1; }
port=15300 rc=0
for tl in ${ROCE_CG_TLS:-rc_verbs rc_roce ud_verbs ud_roce}; do
  case $test in
    tag_lat) envs=("UCX_TLS=$tl,self"); args=(-t tag_lat) ;;
    am_lat|add_lat) envs=(); args=(-t "$test" -x "$tl" -d rxe0:1) ;;
    *) echo "cgcount: unknown test $test"; exit 1 ;;
  esac
  declare -A refs=()
  for n in "$n1" "$n2"; do
    port=$((port + 1))
    env LD_PRELOAD="$PLUGIN" "${envs[@]}" timeout 300 ucx_perftest -p "$port" > "$OUT/cg-server.$tl.$n" 2>&1 &
    sleep 3
    echo "[cgcount] $tl $test n=$n ..."
    env LD_PRELOAD="$PLUGIN" "${envs[@]}" timeout 600 valgrind --tool=callgrind \
        --callgrind-out-file="$OUT/cg.$tl.$test.$n" ucx_perftest -p "$port" localhost "${args[@]}" \
        -n "$n" -w 0 > "$OUT/cg-client.$tl.$n" 2>&1 || { echo "[cgcount] $tl n=$n failed"; rc=1; }
    wait
    refs[$n]=$(sed -n 's/.*I *refs: *\([0-9,]*\).*/\1/p' "$OUT/cg-client.$tl.$n" | tr -d ,)
  done
  if [ -n "${refs[$n1]}" ] && [ -n "${refs[$n2]}" ]; then
    echo "cg tl=$tl test=$test per_iteration=$(( (refs[$n2] - refs[$n1]) / (n2 - n1) ))"
    python3 "$repo/bench/cg_per_iteration.py" "$OUT/cg.$tl.$test.$n1" "$OUT/cg.$tl.$test.$n2" \
        "$((n2 - n1))" --inclusive > "$OUT/cg.$tl.$test.functions.txt" 2>&1 || true
  fi
  unset refs
done
exit $rc
