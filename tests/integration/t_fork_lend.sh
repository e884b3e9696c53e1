#!/usr/bin/env bash
# t_fork_lend — a fork-per-connection server (tests/progs/forklend.c: the
# parent accepts, forks a child per connection, closes its copy; the child
# answers one request and ends with _exit, or exit with -x) keeps its copy
# of each child's segment until the child has exited (shm_lend.c), then
# releases it to the client, which recycles it.  Checked:
#  - every answer right, 4 clients x 150 requests, both endings;
#  - no child maps more than its own connection's segment (the kept copies
#    are out of later children: MADV_DONTFORK);
#  - every connection switched, none fell back;
#  - a child that leaves a grandchild serving the connection (which then
#    writes once more after its answer): the server waits until nobody
#    holds the connection's rendezvous socket (sock_diag), so those late
#    bytes never reach another connection;
#  - the clients recycled segments: the children name at most 150 segments
#    for 600 connections (without the release by the server, a child's
#    _exit left none to recycle: one new segment a connection).
source "$(dirname "$0")/lib.sh"
ssw_enter_netns "$@"
ssw_setup_preload
ssw_tmpdir

for mode in _exit exit; do
  flag=; [ "$mode" = exit ] && flag=-x
  ssw_step "fork-per-connection server, children end with $mode()"
  ssw_run switched SOCKSWITCH_STATS_FILE="$T/$mode.stats" -- "$SSW_BUILD/tests/forklend" -n 150 -c 4 $flag \
    >"$T/$mode.out" 2>"$T/$mode.err"
  ssw_assert_eq "$mode: forklend exit status" "$?" 0
  cat "$T/$mode.out"
  ssw_assert_eq "$mode: requests answered right" "$(ssw_kv "$T/$mode.out" requests)" 600
  ssw_assert_eq "$mode: bad answers" "$(ssw_kv "$T/$mode.out" bad)" 0
  ssw_assert_eq "$mode: segments a child maps (its own only)" "$(ssw_kv "$T/$mode.out" max_segments)" 1
  ssw_assert_le "$mode: distinct segments for 600 connections (recycled)" "$(ssw_kv "$T/$mode.out" distinct_segments)" 150
  ssw_assert_ge "$mode: switched connections" "$(ssw_stats_sum "$T/$mode.stats" switched)" 600
  ssw_assert_eq "$mode: fallback connections" "$(ssw_stats_sum "$T/$mode.stats" fallback)" 0
done
ssw_step "children that leave a grandchild serving the connection (double fork)"
ssw_run switched SOCKSWITCH_STATS_FILE="$T/grand.stats" -- "$SSW_BUILD/tests/forklend" -n 60 -c 2 -g \
  >"$T/grand.out" 2>"$T/grand.err"
ssw_assert_eq "grandchild: forklend exit status" "$?" 0
cat "$T/grand.out"
ssw_assert_eq "grandchild: requests answered right" "$(ssw_kv "$T/grand.out" requests)" 120
ssw_assert_eq "grandchild: bad answers (a grandchild's late bytes in another connection)" \
  "$(ssw_kv "$T/grand.out" bad)" 0
ssw_assert_eq "grandchild: fallback connections" "$(ssw_stats_sum "$T/grand.stats" fallback)" 0
ssw_assert_no_sanitizer_report "$T"/*.err
ssw_finish
