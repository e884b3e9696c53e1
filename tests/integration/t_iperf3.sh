#!/usr/bin/env bash
# t_iperf3 — iperf3 server and client (select event loop, a control connection
# beside the data connections), unmodified: one stream, reverse (-R, the
# server sends) and four parallel streams (-P 4), each a fixed byte count
# (-n), once under the switch and once on kernel TCP in the same run.  Checks:
# both sides exit 0 and agree on the bytes moved (JSON output); under the
# switch every connection (control and data) went over shared memory, the
# payload is in the switch's byte counters and the kernel's TCP segment
# counter stays flat (idle companion connections only).  Gbit/s printed side
# by side for information.
source "$(dirname "$0")/lib.sh"
ssw_enter_netns "$@"
ssw_setup_preload
ssw_tmpdir
command -v iperf3 >/dev/null || { echo "SKIP: iperf3 not installed"; exit 77; }

BYTES=${SSW_IPERF_BYTES:-2G}
BYTES_N=$(numfmt --from=iec "$BYTES")
PORT=5301
declare -A GBPS

# jfield FILE EXPR — a value out of iperf3's JSON
jfield() { "$SSW_PYTHON" -c 'import json, sys
d = json.load(open(sys.argv[1])); print(eval(sys.argv[2], {"d": d}))' "$1" "$2" 2>/dev/null; }

# one MODE NAME ARGS… — one iperf3 run
one() {
  local mode=$1 name=$2; shift 2
  local tag="$mode-$name" seg0 segs rc streams=1 sent rcvd
  [[ " $* " == *" -P 4 "* ]] && streams=4
  rm -f "$T/$tag-"*.stats
  ssw_bg "$tag-server" "$mode" SOCKSWITCH_STATS_FILE="$T/$tag-server.stats" -- \
    iperf3 -s -1 -p $PORT -B 127.0.0.1
  local spid=$SSW_BG_PID
  ssw_wait_listen $PORT 10 || { ssw_fail "$tag: iperf3 -s did not listen"; return; }
  seg0=$(ssw_outsegs)
  ssw_run "$mode" SOCKSWITCH_STATS_FILE="$T/$tag-client.stats" -- \
    iperf3 -c 127.0.0.1 -p $PORT -n "$BYTES" -J "$@" >"$T/$tag.json" 2>"$T/$tag-client.err"
  rc=$?
  wait "$spid"
  local rs=$?
  segs=$(( $(ssw_outsegs) - seg0 ))
  ssw_assert_eq "$tag: iperf3 client exit status" "$rc" 0
  ssw_assert_eq "$tag: iperf3 server exit status" "$rs" 0
  sent=$(jfield "$T/$tag.json" 'd["end"]["sum_sent"]["bytes"]')
  rcvd=$(jfield "$T/$tag.json" 'd["end"]["sum_received"]["bytes"]')
  ssw_assert_ge "$tag: bytes sent" "${sent:-0}" "$BYTES_N"
  # with -P, iperf3 may stop the receiving side's count before the last bytes
  # of a stream are in: kernel TCP shows that too; demand 95 %
  ssw_assert_ge "$tag: bytes received (>= 95 % of sent)" "${rcvd:-0}" $(( ${sent:-0} / 100 * 95 ))
  GBPS[$tag]=$(jfield "$T/$tag.json" '"%.1f" % (d["end"]["sum_received"]["bits_per_second"] / 1e9)')
  if [ "$mode" = switched ]; then
    local conns=$((1 + streams)) sender=client receiver=server
    [[ " $* " == *" -R "* ]] && sender=server receiver=client
    ssw_assert_eq "$tag: client connections over shared memory (control + $streams data)" \
      "$(ssw_stats_sum "$T/$tag-client.stats" switched)" $conns
    ssw_assert_eq "$tag: server connections over shared memory" "$(ssw_stats_sum "$T/$tag-server.stats" switched)" $conns
    ssw_assert_ge "$tag: $sender bytes_sent over shm" "$(ssw_stats_sum "$T/$tag-$sender.stats" bytes_sent)" "$BYTES_N"
    # the receiver may close a data stream with its last bytes unread (see above)
    ssw_assert_ge "$tag: $receiver bytes_received over shm (>= 95 %)" \
      "$(ssw_stats_sum "$T/$tag-$receiver.stats" bytes_received)" $(( BYTES_N / 100 * 95 ))
    ssw_assert_le "$tag: kernel TCP segments ($conns idle companion connections)" "$segs" $((conns * SSW_CONN_SEGS))
    ssw_assert_quiet "$T/$tag-client.err" "$T/$tag-server.err"
  else
    echo "# $tag: $segs kernel TCP segments"
  fi
}

for mode in switched plain; do
  one $mode fwd
  one $mode rev -R
  one $mode par4 -P 4
done
printf '# iperf3 -n %s (Gbit/s)   switched   kernel\n' "$BYTES"
for n in fwd rev par4; do
  printf '#   %-20s %8s %8s\n' "$n" "${GBPS[switched-$n]:-?}" "${GBPS[plain-$n]:-?}"
done
ssw_assert_no_sanitizer_report "$T"/*.err
ssw_finish
