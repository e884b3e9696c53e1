#!/usr/bin/env bash
# t_fabric_many — thousands of concurrent fabric connections in one process:
# an epoll echo server in one network namespace, a client opening N
# connections from the other across the veth (tests/progs/manyconn.c), a
# 64 B round trip on every one, then timed round trips on a sample while
# all stay open.  Every connection must go over the fabric provider (stats of
# both processes: N switched, none fallen back), each must cost at most 3.5
# descriptors per process (the program's socket, libfabric's socket, the
# provider's eventfd, and a share of the queues several connections use:
# a domain, event and completion queue of its own made 9), and the idle
# server must sleep.  N = 2500: at 9 descriptors a connection that is past a
# 20,000 descriptor limit.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/netns.sh"
ssw_fabric_pair_setup
PROG=$(ssw_prog manyconn) || exit 1

N=${SSW_FABRIC_MANY:-2500}
FDS_MAX=3.5
hard=$(ulimit -Hn)
[ "$hard" = unlimited ] && hard=1048576
[ $(( N * 4 + 256 )) -le "$hard" ] || N=$(( (hard - 256) / 4 ))
[ "$N" -ge 500 ] || { echo "SKIP: hard RLIMIT_NOFILE $hard allows only $N fabric connections"; exit 77; }

ssw_ns_bg server "$SSW_NS_A" switched SOCKSWITCH_STATS_FILE="$T/server.stats" -- \
  "$PROG" -s "$T/server.port" -a "$SSW_NS_ADDR_A" -n "$N" -f 4
ssw_wait_file "$T/server.port" || { ssw_fail "server did not start"; ssw_finish; }
read -r PORT SPID <"$T/server.port"
ssw_ns_wait_listen "$SSW_NS_A" "$PORT" 10 || { ssw_fail "no fabric listener on $PORT"; ssw_finish; }

t0=$(date +%s)
ssw_ns_run "$SSW_NS_B" switched SOCKSWITCH_STATS_FILE="$T/client.stats" -- \
  "$PROG" -a "$SSW_NS_ADDR_A" -p "$PORT" -P "$SPID" -n "$N" -r 500 -k 16 -f 4 >"$T/client.out" 2>"$T/client.err"
rc=$?
t1=$(date +%s)
kill -TERM "$SPID" 2>/dev/null
for ((i = 0; i < 100; i++)); do kill -0 "$SPID" 2>/dev/null || break; sleep 0.1; done
cat "$T/client.out" "$T/server.out" 2>/dev/null | sed 's/^/# /'
ssw_assert_eq "manyconn exit status ($(head -c 200 "$T/client.err"))" "$rc" 0
ssw_assert_eq "connections" "$(ssw_kv "$T/client.out" conns)" "$N"
ssw_assert_eq "switched connections (client)" "$(ssw_stats_sum "$T/client.stats" switched)" "$N"
ssw_assert_eq "fallback connections (client)" "$(ssw_stats_sum "$T/client.stats" fallback)" 0
ssw_assert_eq "switched connections (server)" "$(ssw_stats_sum "$T/server.stats" switched)" "$N"
cf=$(ssw_kv "$T/client.out" fds_per_conn)
sf=$(awk '/^SERVER /{for (i = 2; i <= NF; i++) if ($i ~ /^fds_per_conn=/) print substr($i, 14)}' "$T/server.out")
ssw_check "client: descriptors per fabric connection ($cf) <= $FDS_MAX" awk -v x="${cf:-99}" -v m=$FDS_MAX 'BEGIN { exit !(x <= m) }'
ssw_check "server: descriptors per fabric connection ($sf) <= $FDS_MAX" awk -v x="${sf:-99}" -v m=$FDS_MAX 'BEGIN { exit !(x <= m) }'
ssw_assert_le "idle server CPU over 0.5 s (ms)" "$(ssw_kv "$T/client.out" idle_cpu_ms)" 30
ssw_assert_le "run time (s)" $((t1 - t0)) 60
ssw_assert_no_sanitizer_report "$T"/*.err
ssw_finish
