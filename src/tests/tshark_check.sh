#!/usr/bin/env bash
# Decodes packet traces of the userspace device (UCX_RC_ROCE_PCAP) with tshark and fails on any
# frame that is not RoCEv2, any Malformed packet or any expert info of severity error.
# Usage: tshark_check.sh FILE.pcap...      Exit 77 (ctest SKIP_RETURN_CODE) without tshark.
#
# Our devices use ephemeral UDP ports (several per host), not 4791: every UDP port of a trace is
# decoded as RoCEv2 with `-d udp.port==P,infiniband` (Debian 12's tshark 4.0 decodes only 4791
# by default). Wireshark's RPC-over-RDMA heuristic claims an empty SEND and throws (a false
# "Malformed"), so it is disabled. tshark 4.0 shows the ICRC but does not verify it; the gtest
# SwPcapTraffic.TracedWithValidIcrc verifies every frame's ICRC with the project's reader.
set -uo pipefail
command -v tshark >/dev/null || { echo "tshark not installed: skipped"; exit 77; }
[ $# -gt 0 ] || { echo "usage: $0 FILE.pcap..."; exit 2; }
fail=0
for f in "$@"; do
  ports=$(tshark -r "$f" -T fields -e udp.srcport -e udp.dstport 2>/dev/null | tr '\t' '\n' | sort -un)
  args=(-r "$f" --disable-heuristic rpcrdma_infiniband)
  for p in $ports; do args+=(-d "udp.port==$p,infiniband"); done
  total=$(tshark "${args[@]}" 2>/dev/null | wc -l)
  roce=$(tshark "${args[@]}" -Y infiniband 2>/dev/null | wc -l)
  # (its status counts: a filter tshark rejects would otherwise find nothing bad)
  errs=$(mktemp)
  if ! bad=$(tshark "${args[@]}" -Y '_ws.malformed || _ws.expert.severity == error' 2>"$errs"); then
    echo "[tshark] FAIL: $f: the malformed/expert-error filter did not run:"; head -5 "$errs"
    fail=1; bad=""
  fi
  rm -f "$errs"
  echo "[tshark] $f: $total frames, $roce RoCEv2"
  tshark "${args[@]}" 2>/dev/null | awk '{ $1=$2=$3=$4=$5=""; sub(/QP=.*/, ""); print }' | sort | uniq -c | sort -rn | head -8
  if [ "$total" -eq 0 ] || [ "$roce" -ne "$total" ]; then
    echo "[tshark] FAIL: $f: $((total - roce)) of $total frames not decoded as RoCEv2"; fail=1
  fi
  if [ -n "$bad" ]; then
    echo "[tshark] FAIL: $f: malformed frames / expert errors:"; echo "$bad" | head -20; fail=1
  fi
done
exit $fail
