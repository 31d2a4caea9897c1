#!/usr/bin/env bash
# Runs one libFuzzer target for a bounded time from the corpus kept in the repo (read only: new
# inputs go to a scratch directory) and reports what it did. A crash, a leak, a sanitizer report or
# an oracle failure (abort) fails the test; the input that caused it is kept under $TMPDIR.
# Usage: run_fuzz.sh <fuzz binary> <corpus dir> <seconds>
set -uo pipefail
bin=$1 corpus=$2 secs=$3
work=$(mktemp -d "${TMPDIR:-/tmp}/roce-fuzz.XXXXXX")
mkdir -p "$work/new"
echo "[fuzz] ${bin##*/}: ${secs}s from $(find "$corpus" -type f | wc -l) corpus inputs"
"$bin" -max_total_time="$secs" -print_final_stats=1 -rss_limit_mb=2048 -timeout=10 \
       -artifact_prefix="$work/" "$work/new" "$corpus" > "$work/log" 2>&1
rc=$?
grep -E "^#[0-9]+.*(DONE|pulse)|stat::number_of_executed_(runs|units)|stat::new_units_added|cov:" "$work/log" | tail -4
if [ $rc -ne 0 ]; then
  echo "[fuzz] FAIL (exit $rc):"; grep -vE "^#[0-9]+" "$work/log" | tail -40
  ls "$work"/crash-* "$work"/leak-* "$work"/timeout-* 2>/dev/null | sed 's/^/[fuzz] input kept: /'
  exit 1
fi
echo "[fuzz] ok: $(grep -oE 'stat::number_of_executed_(runs|units): *[0-9]*' "$work/log" | grep -o '[0-9]*$') inputs, no failure"
rm -rf "$work"
