#!/usr/bin/env bash
# t_privdrop — a fork-per-connection server whose children drop privileges
# (setuid to nobody; tests/progs/privdrop.c), both ends switched:
#  - a child that dropped privileges after its parent forked it keeps
#    serving its connection, and the parent's close of its own copy after
#    the drop does not end the connection (the answer, then end-of-file);
#  - a child maps none of its parent's stat registry file (MADV_DONTFORK:
#    the parent loops over a slot count read there);
#  - a child that drops privileges and then scribbles over every shared
#    writable mapping it has (the connection's fork-shared state, the
#    segment, the user's spin-decision page) does
#    not reach the privileged parent: the parent's send on its copy reads as
#    a reset, its poll says so, its close succeeds, it neither crashes nor
#    hangs (without session_unshare.c the parent dies in glibc's mutex code
#    on the scribbled lock: mutation-checked), and its listener goes on
#    serving a connection of its own;
#  - a child that only switches its effective uid and back (saved uid 0)
#    gave nothing up: the connection stays shared, the parent answers on it;
#  - every connection switched;
#  - over fabric, the first (legit) case.
source "$(dirname "$0")/lib.sh"
[ "$(id -u)" = 0 ] || { echo "SKIP: must run as root (the children setuid to nobody)"; exit 77; }
ssw_enter_netns "$@"
ssw_setup_preload
ssw_tmpdir

for round in 1 2 3; do
  ssw_step "round $round: fork, setuid(nobody), serve; then a hostile child"
  ssw_run switched SOCKSWITCH_STATS_FILE="$T/$round.stats" -- "$SSW_BUILD/tests/privdrop" \
    >"$T/$round.out" 2>"$T/$round.err"
  ssw_assert_eq "round $round: privdrop exit status" "$?" 0
  cat "$T/$round.out"
  grep -v '^sockswitch\[' "$T/$round.err" | head -5
  ssw_assert_eq "round $round: the child that dropped privileges serves" "$(ssw_kv "$T/$round.out" legit)" ok
  ssw_assert_eq "round $round: the parent survives a hostile child" "$(ssw_kv "$T/$round.out" hostile)" ok
  ssw_assert_eq "round $round: the parent's listener still serves" "$(ssw_kv "$T/$round.out" after)" ok
  ssw_assert_eq "round $round: the parent says once that its copy went with the child" \
    "$(grep -c 'went with pid [0-9]*, which gave up a user id' "$T/$round.err")" 1
  ssw_assert_eq "round $round: a child's seteuid and back leaves the connection shared" \
    "$(ssw_kv "$T/$round.out" toggle)" ok
  ssw_assert_ge "round $round: switched connections" "$(ssw_stats_sum "$T/$round.stats" switched)" 4
  ssw_assert_eq "round $round: fallback connections" "$(ssw_stats_sum "$T/$round.stats" fallback)" 0
done
# Over fabric (libfabric's tcp provider on loopback): the legit case only.
# A fabric listener whose process hands a connection to a forked child
# takes the next ones on kernel TCP (README Limits, issue 20.3), so the
# hostile child's connection is a kernel socket there: nothing to check.
if [ -z "$(ssw_fabric_left_out)" ]; then
  ssw_step "over fabric: fork, setuid(nobody), serve"
  ssw_run switched SOCKSWITCH_ROUTES='route 127.0.0.0/8 fabric provider=tcp' \
    SOCKSWITCH_STATS_FILE="$T/fab.stats" -- "$SSW_BUILD/tests/privdrop" >"$T/fab.out" 2>"$T/fab.err"
  cat "$T/fab.out"
  ssw_assert_eq "fabric: the child that dropped privileges serves" "$(ssw_kv "$T/fab.out" legit)" ok
  ssw_assert_eq "fabric: the parent's listener still serves" "$(ssw_kv "$T/fab.out" after)" ok
  ssw_assert_ge "fabric: switched connections (the first)" "$(ssw_stats_sum "$T/fab.stats" switched)" 1
else
  echo "# no fabric provider in this build: the fabric case left out"
fi
ssw_assert_no_sanitizer_report "$T"/*.err
ssw_finish
