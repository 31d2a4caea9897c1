# shellcheck shell=bash
# Helpers for test batches run inside the rxe guest (sourced by the scripts in this directory).
# Every fork+exec costs ~0.1 s in the guest (binaries come over 9p), so parsing and waiting use
# bash builtins only.
#
#   step <name> <cmd...>          run one command under the step timeout, log to $ROCE_RXE_OUT/logs
#                                 (T=<seconds> step ... overrides the timeout for one step)
#   SRV=(...) CLI=(...); pair <name> <port>   server in the background, client once it listens
#   result <name> <value> <unit>  print and record "rxe-result name=... value=... unit=..."
#   summary                       print "rxe-summary ..." and return non-zero if any step failed
# After step/pair, $LOG (and $LOG.server for pair) hold the output of the command.

OUT=${ROCE_RXE_OUT:-/tmp/rxe-out}
LOGDIR=$OUT/logs
mkdir -p "$LOGDIR"
STEP_TIMEOUT=${ROCE_RXE_STEP_TIMEOUT:-60}
RESULTS=$OUT/results.txt
: > "$RESULTS"
declare -a FAILED=() PASSED=()
_t0=${EPOCHREALTIME/./}
exec {_sleepfd}<> <(:)          # never readable: read -t on it sleeps without forking

nap() { read -r -t "$1" -u "$_sleepfd" _ || true; }
elapsed() { local d=$(( (${EPOCHREALTIME/./} - _t0) / 100000 )); printf '%d.%d' $((d / 10)) $((d % 10)); }
say() { printf '[suite %6ss] %s\n' "$(elapsed)" "$*"; }

result() {
  local line="rxe-result name=$1 value=$2 unit=$3"
  printf '%s\n' "$line"
  printf '%s\n' "$line" >> "$RESULTS"
}

# Error/retransmission counters of the RDMA device ($COUNTERS_DEV, e.g. rxe0) are read before and
# after every step; non-zero changes are appended to its rxe-step line (hw=name:+n,...), so a figure
# spoilt by retransmissions can be recognised.
COUNTERS_DEV=${COUNTERS_DEV:-}
declare -A _hw0=()
_hw_read() {   # fills the associative array named $1
  local -n _a=$1; local f v
  _a=()
  [ -n "$COUNTERS_DEV" ] || return 0
  for f in /sys/class/infiniband/"$COUNTERS_DEV"/ports/1/hw_counters/*; do
    case ${f##*/} in *pkts|rdma_sends|rdma_recvs|lifespan) continue ;; esac
    read -r v < "$f" 2>/dev/null && _a[${f##*/}]=$v
  done
}
_hw_delta() {
  local -A now=(); local k out=""
  _hw_read now
  for k in "${!now[@]}"; do
    [ "${now[$k]}" != "${_hw0[$k]:-0}" ] && out+="${out:+,}$k:+$(( now[$k] - ${_hw0[$k]:-0} ))"
  done
  [ -n "$out" ] && printf ' hw=%s' "$out"
}

_step_start=0
_begin() { _step_start=${EPOCHREALTIME/./}; _hw_read _hw0; say "step $1 ..."; }
_end() {      # <name> <rc> [reason]
  local name=$1 rc=$2 d=$(( (${EPOCHREALTIME/./} - _step_start) / 100000 ))
  local secs="$((d / 10)).$((d % 10))" hw
  hw=$(_hw_delta)
  if [ "$rc" = 0 ]; then
    PASSED+=("$name")
    printf 'rxe-step name=%s status=pass seconds=%s%s\n' "$name" "$secs" "$hw" | tee -a "$RESULTS"
  else
    FAILED+=("$name")
    printf 'rxe-step name=%s status=fail rc=%s seconds=%s%s %s\n' "$name" "$rc" "$secs" "$hw" "${3:-}" | tee -a "$RESULTS"
    local f
    for f in "$LOGDIR/$name.server" "$LOGDIR/$name"; do
      [ -s "$f" ] || continue
      echo "---- last lines of ${f#"$OUT"/} ----"
      tail -n 25 "$f"
    done
    echo "----"
  fi
  return "$rc"
}
# fail_step <name> <reason>: mark a step failed after its command succeeded (e.g. bad output).
fail_step() { FAILED+=("$1"); printf 'rxe-step name=%s status=fail reason="%s"\n' "$1" "$2" | tee -a "$RESULTS"; }

step() {
  local name=$1; shift
  LOG=$LOGDIR/$name
  _begin "$name"
  timeout -k 5 "${T:-$STEP_TIMEOUT}" "$@" > "$LOG" 2>&1
  local rc=$?
  [ "$rc" = 124 ] && { _end "$name" "$rc" "reason=timeout(${T:-$STEP_TIMEOUT}s)"; return; }
  _end "$name" "$rc"
}

# wait_port <port>: until something listens on TCP <port> (IPv4 or IPv6), at most 15 s.
wait_port() {
  local hex i f local_addr st
  printf -v hex '%04X' "$1"
  for ((i = 0; i < 300; i++)); do
    for f in /proc/net/tcp /proc/net/tcp6; do
      while read -r _ local_addr _ st _; do
        [ "$st" = 0A ] && [ "${local_addr##*:}" = "$hex" ] && return 0
      done < "$f"
    done
    nap 0.05
  done
  return 1
}

# pair <name> <port>: runs "${SRV[@]}" in the background and "${CLI[@]}" once port <port> listens.
pair() {
  local name=$1 port=$2 rc src spid
  LOG=$LOGDIR/$name
  _begin "$name"
  timeout -k 5 "${T:-$STEP_TIMEOUT}" "${SRV[@]}" > "$LOG.server" 2>&1 &
  spid=$!
  if ! wait_port "$port"; then
    kill "$spid" 2>/dev/null; wait "$spid" 2>/dev/null
    _end "$name" 1 "reason=server-not-listening(port=$port)"; return
  fi
  timeout -k 5 "${T:-$STEP_TIMEOUT}" "${CLI[@]}" > "$LOG" 2>&1
  rc=$?
  if [ "$rc" != 0 ]; then
    # Do not wait a whole step timeout for a server whose client is gone.
    nap 1; kill "$spid" 2>/dev/null
  fi
  wait "$spid"; src=$?
  [ "$rc" = 124 ] && { _end "$name" "$rc" "reason=client-timeout(${T:-$STEP_TIMEOUT}s)"; return; }
  [ "$rc" != 0 ] && { _end "$name" "$rc" "reason=client-failed"; return; }
  [ "$src" != 0 ] && { _end "$name" "$src" "reason=server-failed"; return; }
  _end "$name" 0
}

# field_after <file> <first-word> <index>: word <index> (0-based) of the last line starting with <first-word>.
field_after() {
  local -a w; local line v=""
  while read -r -a w; do
    [ "${w[0]:-}" = "$2" ] && v=${w[$3]:-}
  done < "$1"
  printf '%s' "$v"
}

# median <values...>: median of decimal numbers (printed with 2 decimals), bash arithmetic only.
median() {
  local -a c=() s=(); local v i x ip fp
  for v in "$@"; do
    ip=${v%%.*}; fp=${v#"$ip"}; fp=${fp#.}00; fp=${fp:0:2}
    c+=($(( 10#${ip:-0} * 100 + 10#$fp )))
  done
  [ ${#c[@]} = 0 ] && return 1
  for x in "${c[@]}"; do          # insertion sort (a handful of values)
    for ((i = ${#s[@]}; i > 0 && s[i-1] > x; i--)); do s[i]=${s[i-1]}; done
    s[i]=$x
  done
  x=${s[$(( ${#s[@]} / 2 ))]}
  printf '%d.%02d' $((x / 100)) $((x % 100))
}

summary() {
  local IFS=,
  local total=$(( ${#PASSED[@]} + ${#FAILED[@]} ))
  printf 'rxe-summary steps=%d passed=%d failed=%d seconds=%s%s\n' "$total" "${#PASSED[@]}" "${#FAILED[@]}" \
    "$(elapsed)" "${FAILED[*]:+ failed_steps=${FAILED[*]}}" | tee -a "$RESULTS"
  [ ${#FAILED[@]} = 0 ] && [ "$total" -gt 0 ]
}
