#!/usr/bin/env bash
# ctest sw.pcap_tshark: the traces of the gtest SwPcapTraffic.TracedWithValidIcrc (SEND with GSO,
# WRITE, READ, atomics, CM) decoded by tshark (tshark_check.sh). Exit 77 without tshark.
# Usage: pcap_tshark.sh ROCE_SW_TESTS WORKDIR
set -uo pipefail
command -v tshark >/dev/null || { echo "tshark not installed: skipped"; exit 77; }
bin=$1 dir=$2
rm -rf "$dir" && mkdir -p "$dir"
ROCE_PCAP_KEEP_DIR="$dir" "$bin" --gtest_filter='Loopback/SwPcapTraffic.*' || exit 1
exec "$(dirname "$0")/tshark_check.sh" "$dir"/*.pcap
