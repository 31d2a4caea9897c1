#!/usr/bin/env bash
# Runs ucp_peer_failure (issue 5: a killed rank gives the survivor a UCP peer-failure error)
# with the plugin preloaded. Usage: peer_failure.sh <env-file> <program> [program args...]
# UCX_TLS comes from the caller (ctest: <tl>,self); UCX_NET_DEVICES defaults to lo as in the
# other UCP tests. The program bounds the error itself; `timeout` only backs it up against a
# hang in UCX teardown, which the program cannot bound.
set -uo pipefail
envfile=$1 prog=$2; shift 2
# shellcheck disable=SC1090
source "$envfile"
export UCX_NET_DEVICES="${UCX_NET_DEVICES:-lo}"
timeout --kill-after=5 100 "$prog" "$@"
rc=$?
[ $rc -eq 124 ] && echo "[peer_failure] FAIL: hung (killed by timeout after 100 s)"
exit $rc
