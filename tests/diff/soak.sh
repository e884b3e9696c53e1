#!/usr/bin/env bash
# soak.sh — the differential tester on new seeds, for as long as asked.
#
#   bash tests/diff/soak.sh [--profile shm|fabric|both] [--seconds N | --count N]
#                           [--from SEED] [--chunk N]
#
# Seeds go up from --from (default: a base taken from the clock, far from
# the fixed seeds CI runs) in chunks of --chunk (default 50 on shm, 20 on
# fabric); "both" alternates the profiles chunk by chunk.  It stops after
# --seconds (default 600) or --count seeds, whichever is given, at the end
# of a chunk.  One line per chunk, then a summary: seeds run, the same,
# known differences (README Limits), differences and tester faults, and
# for each of the last two its seed and the command that replays it.  The
# full reports (minimal program, diff of the transcripts) are in the log
# ($SSW_SOAK_LOG, default /tmp/ssw-soak.PID.log).  Exit 1 if any difference
# or fault was found.  Needs root (network namespaces), like CTest's runs.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
profile=shm seconds= count= from= chunk=
while [ $# -gt 0 ]; do
  case "$1" in
    --profile) profile=$2; shift 2 ;;
    --seconds) seconds=$2; shift 2 ;;
    --count) count=$2; shift 2 ;;
    --from) from=$2; shift 2 ;;
    --chunk) chunk=$2; shift 2 ;;
    *) echo "usage: soak.sh [--profile shm|fabric|both] [--seconds N | --count N] [--from SEED] [--chunk N]" >&2; exit 2 ;;
  esac
done
case "$profile" in shm|fabric|both) ;; *) echo "soak.sh: --profile shm, fabric or both" >&2; exit 2 ;; esac
[ -n "$seconds$count" ] || seconds=600
[ -n "$from" ] || from=$(( 1000000 + $(date +%s) % 1000000 * 1000 ))
log=${SSW_SOAK_LOG:-/tmp/ssw-soak.$$.log}
: >"$log"

declare -A seeds same known diffs faults
for p in shm fabric; do seeds[$p]=0 same[$p]=0 known[$p]=0 diffs[$p]=0 faults[$p]=0; done
start=$SECONDS next=$from turn=0 total=0
echo "# soak: profile $profile, from seed $from, $( [ -n "$count" ] && echo "$count seeds" || echo "$seconds s"), log $log"
while :; do
  if [ -n "$count" ]; then [ "$total" -ge "$count" ] && break
  else [ $((SECONDS - start)) -ge "$seconds" ] && break; fi
  p=$profile
  [ "$profile" = both ] && { [ $((turn % 2)) = 0 ] && p=shm || p=fabric; }
  n=${chunk:-$([ "$p" = shm ] && echo 50 || echo 20)}
  [ -n "$count" ] && [ $((count - total)) -lt "$n" ] && n=$((count - total))
  out=$(bash "$here/diff.sh" "$p" --from "$next" --count "$n" --shrink-runs 60 2>&1)
  printf '%s\n' "$out" >>"$log"
  sum=$(printf '%s\n' "$out" | grep -E "^# $p: [0-9]+ seeds" | tail -n 1)
  if [ -z "$sum" ]; then
    echo "chunk $p $next..$((next + n - 1)): no summary (the run broke; see $log)"
    faults[$p]=$(( ${faults[$p]} + 1 ))
  else
    read -r s sa kn df ft < <(sed -E 's/^# [a-z]+: ([0-9]+) seeds .*: ([0-9]+) same, ([0-9]+) known differences, ([0-9]+) differences, ([0-9]+) tester faults/\1 \2 \3 \4 \5/' <<<"$sum")
    seeds[$p]=$(( ${seeds[$p]} + s )) same[$p]=$(( ${same[$p]} + sa )) known[$p]=$(( ${known[$p]} + kn ))
    diffs[$p]=$(( ${diffs[$p]} + df )) faults[$p]=$(( ${faults[$p]} + ft ))
    echo "chunk $p $next..$((next + n - 1)): $s seeds, $sa same, $kn known, $df differences, $ft tester faults ($((SECONDS - start)) s)"
  fi
  next=$((next + n)) total=$((total + n)) turn=$((turn + 1))
done

echo "# soak summary ($((SECONDS - start)) s, seeds $from..$((next - 1))):"
bad=0
for p in shm fabric; do
  [ "${seeds[$p]}" -gt 0 ] || [ "${faults[$p]}" -gt 0 ] || continue
  echo "#   $p: ${seeds[$p]} seeds, ${same[$p]} same, ${known[$p]} known differences (README Limits), ${diffs[$p]} differences, ${faults[$p]} tester faults"
  [ $(( ${diffs[$p]} + ${faults[$p]} )) -gt 0 ] && bad=1
done
if [ $bad = 1 ]; then
  echo "# differences and faults (full reports in $log):"
  grep -E "^(DIFF|TESTER) seed|^  (minimal )?replay" "$log" | sed 's/^/#   /'
fi
exit $bad
