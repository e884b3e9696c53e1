#!/usr/bin/env bash
# t_idle_mem — memory like kernel TCP's: switched connections that idle hold
# little shared memory (tests/progs/idlemem.c: an epoll echo server, round
# trips on every connection, then all idle; it sums the shared memory both
# processes hold, over what they held before connecting).
#  - ping-pong: 500 connections, 600 round trips of 1,000 B each: at most
#    32 KiB a connection (a ring rewinds to its start whenever its reader
#    has read everything, so ping-pong keeps to one page a ring; before,
#    both 512 KiB rings were touched in full: about 1 MiB a connection);
#  - streams: 50 connections, 20 round trips of 200 KB (the rings fill),
#    then 3 s idle: the housekeeping thread gave back all but the rings'
#    floors (at most 64 KiB a connection, a quarter of what they held busy).
# Every connection switched, none fell back.
source "$(dirname "$0")/lib.sh"
ssw_enter_netns "$@"
ssw_setup_preload
ssw_tmpdir

# kb FILE KEY: an integer field of the RESULT line
kb() { local v; v=$(ssw_kv "$1" "$2"); echo "${v%.*}"; }

ssw_step "ping-pong: 500 connections x 600 round trips of 1,000 B"
ssw_run switched SOCKSWITCH_STATS_FILE="$T/pp.stats" -- "$SSW_BUILD/tests/idlemem" -n 500 -r 600 -s 1000 -w 1 \
  >"$T/pp.out" 2>"$T/pp.err"
ssw_assert_eq "ping-pong: idlemem exit status" "$?" 0
cat "$T/pp.out"
ssw_assert_le "ping-pong: shared memory a connection, idle (KiB)" "$(kb "$T/pp.out" per_conn_kib)" 32
ssw_assert_eq "ping-pong: switched connections" "$(ssw_stats_sum "$T/pp.stats" switched)" 1000
ssw_assert_eq "ping-pong: fallback connections" "$(ssw_stats_sum "$T/pp.stats" fallback)" 0

ssw_step "streams: 50 connections x 20 round trips of 200 KB, then 3 s idle"
ssw_run switched SOCKSWITCH_STATS_FILE="$T/st.stats" -- "$SSW_BUILD/tests/idlemem" -n 50 -r 20 -s 200000 -w 3 \
  >"$T/st.out" 2>"$T/st.err"
ssw_assert_eq "streams: idlemem exit status" "$?" 0
cat "$T/st.out"
busy=$(kb "$T/st.out" busy_shmem_kib) idle=$(kb "$T/st.out" idle_shmem_kib)
ssw_assert_ge "streams: shared memory while busy (KiB: the rings filled)" "$busy" $((50 * 256))
ssw_assert_le "streams: shared memory a connection after 3 s idle (KiB)" "$(kb "$T/st.out" per_conn_kib)" 64
ssw_assert_le "streams: idle is at most a quarter of busy (KiB)" "$idle" $((busy / 4))
ssw_assert_eq "streams: switched connections" "$(ssw_stats_sum "$T/st.stats" switched)" 100
ssw_assert_eq "streams: fallback connections" "$(ssw_stats_sum "$T/st.stats" fallback)" 0
ssw_assert_no_sanitizer_report "$T"/*.err
ssw_finish
