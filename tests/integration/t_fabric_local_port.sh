#!/usr/bin/env bash
# t_fabric_local_port — a fabric connection from this host: the acceptor does
# not take the connector's claimed port.  Another user here could claim a port
# some other user holds (kernel TCP would never let it); so the peer's port is
# the fabric connection's own source port, which the kernel gave the
# connector: a socket of the client process.  Route 127.0.0.0/8 over fabric,
# inside the test's own network namespace.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/netns.sh"
ssw_need_fabric
ssw_setup_preload
ssw_tmpdir
ssw_ns_single lp
PORT=7455
cat >"$T/srv.py" <<'PY'
import socket, sys
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", int(sys.argv[1]))); s.listen(4)
open(sys.argv[2] + ".tmp", "w").write("1"); __import__("os").rename(sys.argv[2] + ".tmp", sys.argv[2])
c, a = s.accept()
print("peer", a[1], flush=True)
c.sendall(c.recv(16)); c.recv(16)
PY
cat >"$T/cli.py" <<'PY'
import socket, sys, time
c = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
print("local", c.getsockname()[1], flush=True)
c.sendall(b"x"); c.recv(16)
open(sys.argv[2], "w").write("1")
while not __import__("os").path.exists(sys.argv[3]): time.sleep(0.05)
c.close()
PY
run() { ip netns exec "$NS" timeout 20 env LD_PRELOAD="$SSW_PRELOAD" SOCKSWITCH_ROUTES="$ROUTES" "$@"; }
run python3 "$T/srv.py" $PORT "$T/listening" >"$T/srv.out" 2>"$T/srv.err" &
spid=$!
ssw_wait_file "$T/listening" 20 || ssw_fail "server did not listen"
# the fabric listener comes ~0.3 s after the kernel's (libfabric loads)
for ((i = 0; i < 50; i++)); do
  [ -n "$(ip netns exec "$NS" ss -Hltn "sport = :$((PORT + 10000))")" ] && break; sleep 0.1
done
run env SOCKSWITCH_STATS_FILE="$T/cli.stats" python3 "$T/cli.py" $PORT "$T/talked" "$T/checked" >"$T/cli.out" 2>"$T/cli.err" &
cpid=$!
ssw_wait_file "$T/talked" 20 || ssw_fail "client did not talk"
sleep 0.2
seen=$(awk '/^peer/ {print $2}' "$T/srv.out"); mine=$(awk '/^local/ {print $2}' "$T/cli.out")
owner=$(ip netns exec "$NS" ss -Htnp state established "sport = :${seen:-0}" | grep -o 'pid=[0-9]*' | head -1)
clipid=$(ip netns pids "$NS" | while read -r p; do
  [ "$(cat /proc/$p/comm 2>/dev/null)" = python3 ] && grep -q cli.py /proc/$p/cmdline 2>/dev/null && echo $p; done | head -1)
touch "$T/checked"
wait $cpid; wait $spid
ssw_assert_eq "the client's connection went over fabric" "$(ssw_stats_sum "$T/cli.stats" switched)" 1
ssw_check "the acceptor saw a port ($seen), the client's application port is $mine" test -n "$seen" -a -n "$mine"
ssw_check "the acceptor does not take the claimed port from this host ($seen vs $mine)" test "$seen" != "$mine"
ssw_assert_eq "the port the acceptor saw is a socket of the client process" "$owner" "pid=$clipid"
ssw_assert_no_sanitizer_report "$T"/*.err
ssw_finish
