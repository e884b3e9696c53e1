#!/usr/bin/env bash
# t_sockperf — sockperf (Mellanox's latency tool) server and ping-pong client
# over TCP, in its select, poll and epoll I/O-multiplexing modes (-F), two
# connections each (a feed file of two TCP endpoints), once under the switch
# and once on kernel TCP in the same run.  Checks: the client ends normally
# and got an answer to (nearly) every message it sent, it reports a latency;
# the server handled what the client sent; under the switch both connections
# went over shared memory with the payload in the switch's counters and the
# kernel's TCP segment counter flat.  The 64 B round-trip latencies are
# printed side by side (informational).
source "$(dirname "$0")/lib.sh"
ssw_enter_netns "$@"
ssw_setup_preload
ssw_tmpdir
command -v sockperf >/dev/null || { echo "SKIP: sockperf not installed"; exit 77; }

DUR=${SSW_SOCKPERF_SECONDS:-1}
MSG=64
# sockperf -f: one endpoint a line, "T:" = TCP (--tcp does not combine with -f)
printf 'T:127.0.0.1:11311\nT:127.0.0.1:11312\n' >"$T/feed"
declare -A P50 AVG

one() { # MODE IOMUX
  local mode=$1 mux=$2 tag="$1-$2" seg0 segs rc sent rcvd
  rm -f "$T/$tag-"*.stats
  ssw_bg "$tag-server" "$mode" SOCKSWITCH_STATS_FILE="$T/$tag-server.stats" -- \
    sockperf server -f "$T/feed" -F "$mux" --timeout 100
  local spid=$SSW_BG_PID
  ssw_wait_listen 11312 10 || { ssw_fail "$tag: sockperf server did not listen"; return; }
  seg0=$(ssw_outsegs)
  ssw_run "$mode" SOCKSWITCH_STATS_FILE="$T/$tag-client.stats" -- \
    sockperf ping-pong -f "$T/feed" -F "$mux" -t "$DUR" -m $MSG --timeout 100 \
    >"$T/$tag-client.out" 2>"$T/$tag-client.err"
  rc=$?
  # the server runs until interrupted; SIGINT makes it print its totals and exit
  sleep 0.2
  kill -INT "$spid" 2>/dev/null
  wait "$spid"
  local rs=$?
  segs=$(( $(ssw_outsegs) - seg0 ))
  ssw_assert_eq "$tag: sockperf ping-pong exit status" "$rc" 0
  ssw_assert_eq "$tag: sockperf server exit status (SIGINT)" "$rs" 0
  local line; line=$(grep -a 'SentMessages=' "$T/$tag-client.out" | tail -n 1)
  sent=$(sed -n 's/.*SentMessages=\([0-9]*\).*/\1/p' <<<"$line")
  rcvd=$(sed -n 's/.*ReceivedMessages=\([0-9]*\).*/\1/p' <<<"$line")
  # the kernel run is the baseline: it only has to work (a loaded CI machine
  # once gave it 170 round trips); the switched run must really go
  local min=1000
  [ "$mode" = switched ] || min=10
  ssw_assert_ge "$tag: messages sent" "${sent:-0}" "$min"
  # the last message may still be in flight when the run stops
  ssw_assert_ge "$tag: replies received (all but the last)" "${rcvd:-0}" $(( ${sent:-0} - 1 ))
  local handled; handled=$(grep -a 'messages received and handled' "$T/$tag-server.out" | sed -n 's/.*Total \([0-9]*\) messages.*/\1/p' | tail -n 1)
  ssw_assert_ge "$tag: server handled every message the client sent" "${handled:-0}" "${sent:-1}"
  AVG[$tag]=$(sed -n 's/.*Summary: Latency is \([0-9.]*\) usec.*/\1/p' "$T/$tag-client.out" | tail -n 1)
  P50[$tag]=$(sed -n 's/.*percentile 50.000 = *\([0-9.]*\).*/\1/p' "$T/$tag-client.out" | tail -n 1)
  ssw_check "$tag: latency reported (avg ${AVG[$tag]:-?} us, p50 ${P50[$tag]:-?} us)" test -n "${AVG[$tag]}" -a -n "${P50[$tag]}"
  if [ "$mode" = switched ]; then
    ssw_assert_eq "$tag: client connections over shared memory" "$(ssw_stats_sum "$T/$tag-client.stats" switched)" 2
    ssw_assert_eq "$tag: server connections over shared memory" "$(ssw_stats_sum "$T/$tag-server.stats" switched)" 2
    ssw_assert_ge "$tag: client bytes_sent over shm" "$(ssw_stats_sum "$T/$tag-client.stats" bytes_sent)" $(( ${sent:-1} * MSG ))
    ssw_assert_ge "$tag: server bytes_received over shm" "$(ssw_stats_sum "$T/$tag-server.stats" bytes_received)" $(( ${sent:-1} * MSG ))
    ssw_assert_le "$tag: kernel TCP segments (2 idle companion connections)" "$segs" $((2 * SSW_CONN_SEGS))
    ssw_assert_quiet "$T/$tag-client.err"
  else
    echo "# $tag: $segs kernel TCP segments"
  fi
}

for mux in select poll epoll; do
  one switched $mux
  one plain $mux
done
printf '# sockperf ping-pong %d B, TCP (usec)   switched p50 / avg     kernel p50 / avg\n' $MSG
for mux in select poll epoll; do
  printf '#   %-8s                        %8s / %-8s   %8s / %-8s\n' "$mux" \
    "${P50[switched-$mux]:-?}" "${AVG[switched-$mux]:-?}" "${P50[plain-$mux]:-?}" "${AVG[plain-$mux]:-?}"
done
ssw_assert_no_sanitizer_report "$T"/*.err
ssw_finish
