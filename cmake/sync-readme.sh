#!/usr/bin/env bash
# Keeps README.md's configuration table equal to the config table compiled into the plugin.
# Usage: cmake/sync-readme.sh <roce_config_doc binary> [--check]
#   without --check: rewrites the block between the config-table markers
#   with --check:    fails (and shows the diff) if the README is out of date
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
doc=$1 mode=${2:-write}
readme="$here/README.md"
new=$(mktemp); trap 'rm -f "$new"' EXIT
table=$("$doc")
awk -v table="$table" '
  /<!-- config-table:begin/ { print; print table; skip = 1; next }
  /<!-- config-table:end/   { skip = 0 }
  !skip { print }' "$readme" >"$new"
if [ "$mode" = --check ]; then
  if ! diff -u "$readme" "$new"; then
    echo "README.md's configuration table is out of date: run cmake/sync-readme.sh $doc" >&2
    exit 1
  fi
  echo "README configuration table in sync ($(grep -c '^| `UCX_' <<<"$table") variables)"
else
  cp "$new" "$readme"
fi
