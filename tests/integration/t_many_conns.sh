#!/usr/bin/env bash
# t_many_conns — 10,000 concurrent switched connections in one process: a
# client opens them all to one epoll echo server (tests/progs/manyconn.c), runs
# a 64 B round trip on every one, then times round trips on a sample while all
# stay open. Every connection must be switched (stats of both processes), the
# round trips must send no kernel TCP segment, an epoll_wait must not cost in
# proportion to the set (a 64 B round trip stays far below the milliseconds a
# scan of 10,000 members takes), and the idle server must sleep.
# A switched connection costs 2 descriptors per process (the kernel socket and
# the rendezvous socket): with a hard RLIMIT_NOFILE below 20,256 the test runs
# as many connections as the limit allows (at least 1,000, else it skips).
source "$(dirname "$0")/lib.sh"
ssw_enter_netns "$@"
ssw_setup_preload
ssw_tmpdir

WANT=10000
hard=$(ulimit -Hn)
[ "$hard" = unlimited ] && hard=1048576
fit=$(( (hard - 256) / 2 ))
N=$(( fit < WANT ? fit : WANT ))
if [ "$N" -lt 1000 ]; then
  echo "SKIP: hard RLIMIT_NOFILE $hard allows only $N switched connections (2 descriptors each)"
  exit 77
fi
[ "$N" -lt "$WANT" ] && echo "# hard RLIMIT_NOFILE $hard: $N connections (2 descriptors each), not $WANT"
# the old scan of every member cost ~2 us per member and round trip
RT_MAX_US=${SSW_MANY_RT_MAX_US:-2000}
$(ssw_is_sanitized "$SSW_BUILD") && RT_MAX_US=$((RT_MAX_US * 3))

t0=$(date +%s)
ssw_run switched SOCKSWITCH_STATS_FILE="$T/stats" -- "$SSW_BUILD/tests/manyconn" -n "$N" -r 2000 -k 16 \
  >"$T/client.out" 2>"$T/client.err"
rc=$?
t1=$(date +%s)
ssw_assert_eq "manyconn exit status" "$rc" 0
ssw_check "RESULT line" grep -q '^RESULT ' "$T/client.out"
ssw_assert_eq "connections" "$(ssw_kv "$T/client.out" conns)" "$N"
ssw_assert_le "kernel TCP segments during the round trips" "$(ssw_kv "$T/client.out" outsegs_delta)" "$SSW_OUTSEGS_SLACK"
ssw_assert_eq "switched connections (client and server)" "$(ssw_stats_sum "$T/stats" switched)" $((2 * N))
ssw_assert_eq "fallback connections" "$(ssw_stats_sum "$T/stats" fallback)" 0
p50=$(ssw_kv "$T/client.out" rt_p50_us); p50=${p50%.*}
ssw_assert_le "64 B round trip p50 with $N connections open (us)" "$p50" "$RT_MAX_US"
ssw_assert_le "idle server CPU over 0.5 s (ms)" "$(ssw_kv "$T/client.out" idle_cpu_ms)" 30
ssw_assert_le "run time (s)" $((t1 - t0)) 30
ssw_assert_no_sanitizer_report "$T"/*.err
ssw_finish
