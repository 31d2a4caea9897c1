#!/usr/bin/env bash
# Scale benchmark (issue 5): memory per connected peer and ep_create time, rc_roce vs ud_roce.
# Usage: bench/scale.sh [build-dir (build)] [device (lo)] [counts... (10 100 1000 10000)]
# Builds nothing: needs <build>/bench/scale_eps and the plugin (cmake --build <build> --target
# uct_roce scale_eps). Writes <build>/bench-results/scale.csv and prints a Markdown table.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build}
dev=${2:-lo}
shift $(( $# > 2 ? 2 : $# ))
counts=("$@")

bin=$build/bench/scale_eps
if [ ! -f "$build/roce-env.sh" ] || [ ! -x "$bin" ]; then
  echo "scale.sh: $build/roce-env.sh or $bin missing; build the uct_roce and scale_eps targets" >&2
  exit 1
fi
# shellcheck disable=SC1091
source "$build/roce-env.sh"

# Only transports the preloaded plugin registers (ud_roce may not be built yet).
available=$(ucx_info -d 2>/dev/null | awk '/Transport:/ {print $3}' | sort -u)
out=$build/bench-results
mkdir -p "$out"
csv=$out/scale.csv
: >"$csv"
ran=()
failed=()
for tl in rc_roce ud_roce; do
  if ! grep -qx "$tl" <<<"$available"; then
    echo "$tl: not available"
    continue
  fi
  echo "== $tl on $dev" >&2
  # The CSV header comes once, from the first run; the human-readable lines go to stderr.
  first=1; [ -s "$csv" ] && first=2
  if ! "$bin" "$tl" "$dev" "${counts[@]}" | tail -n +"$first" >>"$csv"; then
    echo "$tl: scale_eps failed (see above)" >&2
    failed+=("$tl")
    continue
  fi
  ran+=("$tl")
done
if [ ${#ran[@]} -eq 0 ]; then
  echo "scale.sh: no transport ran" >&2
  exit 1
fi
echo "CSV: $csv"
echo

# Markdown table, one row per peer count: time and RSS per ep of each transport, and the ud/rc
# memory ratio. A count that did not complete shows its status instead of figures.
awk -F, '
  NR == 1 { next }
  {
    key = $1 SUBSEP $2
    if (!($2 in seen)) { seen[$2] = 1; order[++n] = $2 }
    if ($NF == "OK") { us[key] = $4; mem[key] = $5; memp[key] = $6 } else { err[key] = $NF }
  }
  function cell(tl, p,    k) {
    k = tl SUBSEP p
    if (k in err) return "failed: " err[k] " | – | –"
    if (!(k in us)) return "n/a | n/a | n/a"
    return sprintf("%.2f | %.0f | %.0f", us[k], mem[k], memp[k])
  }
  END {
    print "| peers | rc_roce us/ep | rc_roce B/ep | rc_roce B/ep after progress | ud_roce us/ep | ud_roce B/ep | ud_roce B/ep after progress | ud/rc memory |"
    print "|---:|---:|---:|---:|---:|---:|---:|---:|"
    for (i = 1; i <= n; i++) {
      p = order[i]; r = "rc_roce" SUBSEP p; u = "ud_roce" SUBSEP p
      ratio = (r in mem && u in mem && mem[r] > 0) ? sprintf("%.2f", mem[u] / mem[r]) : "n/a"
      print "| " p " | " cell("rc_roce", p) " | " cell("ud_roce", p) " | " ratio " |"
    }
  }' "$csv"
# A transport that failed, or a count that did not complete, fails the run (the table shows it).
bad_rows=$(awk -F, 'NR > 1 && $NF != "OK"' "$csv" | wc -l)
if [ ${#failed[@]} -gt 0 ] || [ "$bad_rows" -gt 0 ]; then
  echo "scale.sh: failed: ${failed[*]:-} ($bad_rows counts did not complete)" >&2
  exit 1
fi
exit 0
