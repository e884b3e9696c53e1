#!/usr/bin/env bash
# demo.sh — the main job: a real, unmodified program pair (python3 TCP client and
# server, tests/progs/pingpong.py) runs once on kernel TCP and once under
# `sockswitch run --`; both results are printed side by side with the speedup,
# with the switch's own statistics proving the second run used shared memory.
#
#   bash scripts/demo.sh [--rounds N] [--bulk-mib M]     (defaults: 20000 round trips of 64 B, 256 MiB)
#
# Needs build/ (bash scripts/build.sh release). SSW_BUILD_DIR moves it. As root,
# each run gets its own network namespace, so the kernel TCP segments it cost are
# counted exactly; otherwise both runs use 127.0.0.1 of the current namespace.
# Exits 1 if either run fails or the switched run was not carried by shared memory.
set -euo pipefail
cd "$(dirname "$0")/.."
SRC=$PWD
BUILD=${SSW_BUILD_DIR:-$SRC/build}
SSW=$BUILD/sockswitch
PROG=$SRC/tests/progs/pingpong.py
if [ -z "${SSW_PYTHON:-}" ]; then
  if [ -x /usr/bin/python3 ]; then SSW_PYTHON=/usr/bin/python3; else SSW_PYTHON=$(command -v python3); fi
fi
ROUNDS=20000
BULK_MIB=256
SIZE=64
LIMIT=${SSW_DEMO_TIMEOUT:-300}

# ---- internal: one run of the pair (possibly inside its own network namespace)
if [ "${1:-}" = __pair ]; then
  mode=$2 out=$3 ROUNDS=$4 BULK_MIB=$5
  [ "${SSW_DEMO_NETNS:-0}" = 1 ] && ip link set lo up
  wrap=()
  [ "$mode" = switched ] && wrap=("$SSW" run --)
  rm -f "$out/$mode.port"
  timeout -k 5 "$LIMIT" env -u LD_PRELOAD SOCKSWITCH_STATS_FILE="$out/$mode.stats" "${wrap[@]}" \
    "$SSW_PYTHON" "$PROG" server --port-file "$out/$mode.port" >"$out/$mode-server.log" 2>&1 &
  spid=$!
  for _ in $(seq 300); do [ -s "$out/$mode.port" ] && break; sleep 0.1; done
  if [ ! -s "$out/$mode.port" ]; then
    echo "demo: the $mode server did not start:"; cat "$out/$mode-server.log"; kill $spid 2>/dev/null; exit 1
  fi
  rc=0
  timeout -k 5 "$LIMIT" env -u LD_PRELOAD SOCKSWITCH_STATS_FILE="$out/$mode.stats" "${wrap[@]}" \
    "$SSW_PYTHON" "$PROG" client --port "$(cat "$out/$mode.port")" --size $SIZE \
    --rounds "$ROUNDS" --bulk-mib "$BULK_MIB" >"$out/$mode.json" 2>"$out/$mode-client.log" || rc=$?
  wait $spid || rc=$?
  if [ $rc != 0 ]; then
    echo "demo: the $mode run failed (status $rc):"; cat "$out/$mode-client.log" "$out/$mode-server.log"; exit 1
  fi
  exit 0
fi

while [ $# -gt 0 ]; do
  case "$1" in
    --rounds) ROUNDS=$2; shift 2 ;;
    --bulk-mib) BULK_MIB=$2; shift 2 ;;
    -h|--help) sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "demo.sh: unknown argument $1 (try --help)" >&2; exit 2 ;;
  esac
done
for f in "$SSW" "$BUILD/libsockswitch.so"; do
  [ -e "$f" ] || { echo "demo.sh: $f is missing — run: bash scripts/build.sh release" >&2; exit 1; }
done

OUT=$(mktemp -d "${TMPDIR:-/tmp}/ssw-demo.XXXXXX")
trap 'rm -rf "$OUT"' EXIT
netns=0
if [ "${SSW_DEMO_NO_NETNS:-0}" != 1 ] && unshare -n true 2>/dev/null; then netns=1; fi

echo "sockswitch demo: python3 TCP client/server ($(basename "$PROG")) on 127.0.0.1,"
echo "  $ROUNDS round trips of $SIZE B, then $BULK_MIB MiB in one stream; the programs are not modified."
for mode in kernel switched; do
  if [ $mode = kernel ]; then echo "  run 1: kernel TCP ..."; else echo "  run 2: under '$SSW run --' ..."; fi
  if [ $netns = 1 ]; then
    unshare -n -- env SSW_DEMO_NETNS=1 SSW_PYTHON="$SSW_PYTHON" SSW_BUILD_DIR="$BUILD" \
      bash "$0" __pair $mode "$OUT" "$ROUNDS" "$BULK_MIB"
  else
    SSW_PYTHON="$SSW_PYTHON" SSW_BUILD_DIR="$BUILD" bash "$0" __pair $mode "$OUT" "$ROUNDS" "$BULK_MIB"
  fi
done
echo

"$SSW_PYTHON" - "$OUT" "$netns" <<'PY'
import json, sys
out, netns = sys.argv[1], sys.argv[2] == "1"
k = json.load(open(out + "/kernel.json"))
s = json.load(open(out + "/switched.json"))
size = k["size"]
rows = [
    ("%d B round trip, mean" % size, "rtt_mean_us", "us", False),
    ("%d B round trip, p50" % size, "rtt_p50_us", "us", False),
    ("%d B round trip, p99" % size, "rtt_p99_us", "us", False),
    ("round trips per second", "round_trips_per_s", "/s", True),
    ("%d MiB bulk stream" % k["bulk_mib"], "bulk_mib_per_s", "MiB/s", True),
]
def fmt(v, unit):
    if unit == "us":
        return "%.1f µs" % v
    if unit == "/s":
        return "%.0f" % v
    return "%.0f %s" % (v, unit)
print("%-28s %14s %14s %9s" % ("", "kernel TCP", "sockswitch", "speedup"))
for label, key, unit, higher_better in rows:
    kv, sv = k[key], s[key]
    if kv and sv:
        sp = (sv / kv) if higher_better else (kv / sv)
        sps = "%.1fx" % sp
    else:
        sps = "-"
    print("%-28s %14s %14s %9s" % (label, fmt(kv, unit), fmt(sv, unit), sps))
if netns:
    for label, key in (("kernel TCP segments, ping-pong", "pingpong_outsegs"),
                       ("kernel TCP segments, bulk", "bulk_outsegs")):
        print("%-28s %14s %14s" % (label, k.get(key), s.get(key)))
PY

echo
echo "switch statistics of the sockswitch run (one line per process, written at exit):"
if [ -s "$OUT/switched.stats" ]; then sed 's/^/  /' "$OUT/switched.stats"; else echo "  (none written)"; fi
switched=$(awk '/^sockswitch-stats / { for (i = 2; i <= NF; i++) { split($i, kv, "="); if (kv[1] == "switched") s += kv[2]; if (kv[1] == "bytes_sent") b += kv[2] } } END { printf "%d %d\n", s, b }' "$OUT/switched.stats" 2>/dev/null || echo "0 0")
read -r nsw nbytes <<<"$switched"
if [ "${nsw:-0}" -ge 1 ]; then
  echo "=> the sockswitch run went over shared memory: switched=$nsw (each end counts its connection), $nbytes bytes sent."
else
  echo "=> WARNING: the sockswitch run was NOT switched (it fell back to kernel TCP)." >&2
  exit 1
fi
