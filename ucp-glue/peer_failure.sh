#!/usr/bin/env bash
# Runs ucp_peer_failure (issue 5: a killed rank gives the survivor a UCP peer-failure error)
# with the plugin preloaded. Usage: peer_failure.sh <env-file> <program> [program args...]
# UCX_TLS comes from the caller (ctest: <tl>,self); UCX_NET_DEVICES defaults to lo as in the
# other UCP tests. The program bounds the error itself; `timeout` only backs it up against a
# hang in UCX teardown, which the program cannot bound.
# PF_EXPECT_COUNTER=<name> (rc_roce): the survivor's counter file (UCX_RC_ROCE_STATS_DIR, a
# temporary directory) must show that counter above 0 when it exits.
set -uo pipefail
envfile=$1 prog=$2; shift 2
# shellcheck disable=SC1090
source "$envfile"
export UCX_NET_DEVICES="${UCX_NET_DEVICES:-lo}"
counter=${PF_EXPECT_COUNTER:-}
if [ -n "$counter" ]; then
  stats=$(mktemp -d); trap 'rm -rf "$stats"' EXIT
  export UCX_RC_ROCE_STATS_DIR=$stats
fi
timeout --kill-after=5 100 "$prog" "$@"
rc=$?
[ $rc -eq 124 ] && echo "[peer_failure] FAIL: hung (killed by timeout after 100 s)"
if [ $rc -eq 0 ] && [ -n "$counter" ]; then
  # The victim was killed: its file (if it wrote one) stops before; the survivor's is written at close.
  doctor=${ROCE_DOCTOR:-$(dirname "$(dirname "$prog")")/src/gid/roce_doctor}
  # (without the plugin roce-env.sh preloads: the doctor is no UCX program)
  n=$(env -u LD_PRELOAD "$doctor" counters "$stats" --sum "$counter" | awk '{ print $2 }')
  echo "[peer_failure] counter $counter: ${n:-?} (files: $(ls "$stats" | tr '\n' ' '))"
  if ! [[ $n =~ ^[0-9]+$ ]]; then
    echo "[peer_failure] FAIL: $doctor counters $stats --sum $counter gave '$n'"
    rc=1
  elif [ "$n" -lt 1 ]; then
    echo "[peer_failure] FAIL: no rc_roce counter file shows $counter above 0"
    rc=1
  fi
fi
exit $rc
