#!/bin/bash
# Interleaved A/B rounds on rxe0: UCX's rc_verbs against one or more builds of the rc_roce plugin
# (AB_TL=ud: ud_verbs against ud_roce),
# same guest boot, each measurement run once per round in turn, medians at the end. TCG timing
# swings by 2x from one run to the next; a single suite run cannot tell a 10% change, interleaved
# rounds can.
#
#   cmake/rxe-guest/run-in-guest.sh cmake/rxe-guest/tests/abperf.sh [test ...]
#
# Tests (default: am_lat add_lat get_bw put_bw tag_lat tag_bw ucp_put_bw; also am_bw, 512 B bcopy): UCT am_lat/add_lat/
# get_bw/put_bw (zcopy 64 KiB) and UCP tag_lat/tag_bw/ucp_put_bw (1 MiB) as in suite.sh.
# Environment:
#   AB_ROUNDS    rounds (default 5)
#   AB_PLUGINS   "label=/path/libuct_roce.so.0 ..." (default: new=$ROCE_BUILD_DIR/uct/libuct_roce.so.0)
#   AB_VERBS=0   leave rc_verbs (ud_verbs) out
#   AB_TL=ud     the datagram transports: ud_verbs against ud_roce, UCP with UCX_TLS=ud_*,self
#   AB_ENV_<label>  extra "VAR=value ..." for that label's runs (e.g. AB_ENV_new="UCX_RC_ROCE_X=1")
# Prints "ab name=<label>.<test> round=<i> value=<v> unit=<u>" per run (the average latency, or
# the bandwidth) and "ab-median name=<label>.<test>[.p50] ..." lines (.p50: ucx_perftest's typical
# latency, which rxe's retry stalls move less), also in $ROCE_RXE_OUT/results.txt.
set -u
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=lib.sh
source "$here/lib.sh"

BUILD=${ROCE_BUILD_DIR:-/work/main/build}
DEV=rxe0
COUNTERS_DEV=$DEV   # lib.sh: rxe0's counter deltas per step (retries show up there)
export UCX_UD_VERBS_ETH_DGID_CHECK=n
export UCX_NET_DEVICES=$DEV:1
rounds=${AB_ROUNDS:-5}
read -r -a plugins <<< "${AB_PLUGINS:-new=$BUILD/uct/libuct_roce.so.0}"
tests=("$@")
[ ${#tests[@]} = 0 ] && tests=(am_lat add_lat get_bw put_bw tag_lat tag_bw ucp_put_bw)
labels=()
[ "${AB_VERBS:-1}" = 1 ] && labels+=(verbs)
declare -A so=()
for p in "${plugins[@]}"; do labels+=("${p%%=*}"); so[${p%%=*}]=${p#*=}; done
read -r cs < /sys/devices/system/clocksource/clocksource0/current_clocksource
say "transports ${AB_TL:-rc}, rounds $rounds, labels ${labels[*]}, tests ${tests[*]}, clocksource $cs"

port=14000
declare -A vals=() units=()
kind_tl=${AB_TL:-rc}
run_one() {   # run_one <label> <test>
  local label=$1 t=$2 tl args=() kind field unit v
  if [ "$label" = verbs ]; then tl=${kind_tl}_verbs; else tl=${kind_tl}_roce; fi
  case $t in
    am_lat) args=(-t am_lat -x "$tl" -d "$DEV:1" -n 5000 -w 500); kind=uct; field=3; unit=us ;;
    am_bw) args=(-t am_bw -x "$tl" -d "$DEV:1" -D bcopy -s 512 -n 5000 -w 500); kind=uct; field=6; unit=MB/s ;;
    add_lat) args=(-t add_lat -x "$tl" -d "$DEV:1" -n 2000 -w 200); kind=uct; field=3; unit=us ;;
    get_bw) args=(-t get -x "$tl" -d "$DEV:1" -D zcopy -s 65536 -n 300 -w 30); kind=uct; field=6; unit=MB/s ;;
    put_bw) args=(-t put_bw -x "$tl" -d "$DEV:1" -D zcopy -s 65536 -n 300 -w 30); kind=uct; field=6; unit=MB/s ;;
    tag_lat) args=(-t tag_lat -n 5000 -w 500); kind=ucp; field=3; unit=us ;;
    tag_bw) args=(-t tag_bw -s 1048576 -n 30 -w 3); kind=ucp; field=6; unit=MB/s ;;
    ucp_put_bw) args=(-t ucp_put_bw -s 1048576 -n 30 -w 3); kind=ucp; field=6; unit=MB/s ;;
    *) say "unknown test $t"; return 1 ;;
  esac
  port=$((port + 1))
  local -a envs=()
  if [ "$label" = verbs ]; then
    if [ "$kind_tl" = ud ]; then
      [ $kind = ucp ] && envs+=("UCX_TLS=ud_verbs,self")
    else
      [ $kind = ucp ] && envs+=("UCX_TLS=rc_verbs,ud_verbs:aux,self")
    fi
  else
    envs+=(LD_PRELOAD="${so[$label]}")
    [ $kind = ucp ] && envs+=("UCX_TLS=${kind_tl}_roce,self")
    local extra="AB_ENV_$label"
    [ -n "${!extra:-}" ] && read -r -a more <<< "${!extra}" && envs+=("${more[@]}")
  fi
  SRV=(env "${envs[@]}" ucx_perftest -p "$port")
  CLI=(env "${envs[@]}" ucx_perftest -p "$port" localhost "${args[@]}")
  pair "ab.$label.$t.$3" "$port" || return 0
  v=$(field_after "$LOG" Final: "$field")
  [ -n "$v" ] || return 0
  printf 'ab name=%s.%s round=%s value=%s unit=%s\n' "$label" "$t" "$3" "$v" "$unit" | tee -a "$RESULTS"
  vals[$label.$t]+="$v "
  units[$t]=$unit
  if [ "$unit" = us ]; then   # also the typical (median) latency: robust against rxe retry stalls
    v=$(field_after "$LOG" Final: 2)
    vals[$label.$t.p50]+="$v "
    units[$t.p50]=$unit
  fi
}

for ((r = 1; r <= rounds; r++)); do
  for t in "${tests[@]}"; do
    # Alternate the order per round so that neither side always runs first.
    if ((r % 2)); then order=("${labels[@]}"); else order=(); for ((i = ${#labels[@]} - 1; i >= 0; i--)); do order+=("${labels[i]}"); done; fi
    for l in "${order[@]}"; do run_one "$l" "$t" "$r"; done
  done
done
for t in "${tests[@]}"; do
  keys=("$t"); [ -n "${units[$t.p50]:-}" ] && keys+=("$t.p50")
  for k in "${keys[@]}"; do
    for l in "${labels[@]}"; do
      # shellcheck disable=SC2086
      m=$(median ${vals[$l.$k]:-}) || m=n/a
      printf 'ab-median name=%s.%s value=%s unit=%s runs=%s\n' "$l" "$k" "$m" "${units[$k]:-}" "${vals[$l.$k]:-}" | tee -a "$RESULTS"
    done
  done
done
summary
