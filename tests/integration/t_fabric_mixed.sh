#!/usr/bin/env bash
# t_fabric_mixed — one listening socket, two providers: a server in namespace
# A bound to the wildcard address listens over shm and fabric at once (stat
# shows `shm+fabric`); a client in A (127.0.0.1) is accepted over shm and a
# client in B (across the veth) over fabric, on the same listener, with the
# peer address the fabric connection gives (B's address).  Then fork: a
# fork-per-connection server keeps its fabric listener across its forks (it
# accepts; a child's copy is closed, not the parent's, so nothing queued is
# reset), and after it has handed a connection to a child the next client
# from B is switched too, each child serving its own over fabric.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/netns.sh"
ssw_fabric_pair_setup
A=$SSW_NS_A B=$SSW_NS_B HA=$SSW_NS_ADDR_A HB=$SSW_NS_ADDR_B
Q() { "$SSW_PYTHON" "$SSW_PROGS/statq.py" "$@"; }
SIZES=1x50,64x50,102400x5,1048576x2

# ---- one wildcard listener: shm for the local client, fabric for the remote one
ssw_ns_bg mixed-server "$A" switched SOCKSWITCH_LOG=info SOCKSWITCH_STATS_FILE="$T/mixed-server.stats" -- \
  "$SSW_PYTHON" "$SSW_PROGS/echo.py" server --host 0.0.0.0 --port-file "$T/mixed.port" --conns 2
spid=$SSW_BG_PID
ssw_wait_file "$T/mixed.port" 20 || ssw_fail "mixed: server did not start"
P=$(cat "$T/mixed.port" 2>/dev/null)
ssw_ns_stat "$A" "$T/mixedA.json"
ssw_assert_eq "mixed: the wildcard listener listens on shm and fabric" \
  "$(Q "$T/mixedA.json" count state=listening local="0.0.0.0:$P" provider=shm+fabric)" 1
ssw_ns_run "$A" switched SOCKSWITCH_STATS_FILE="$T/mixed-local.stats" -- \
  "$SSW_PYTHON" "$SSW_PROGS/echo.py" client --host 127.0.0.1 --port "$P" --sizes "$SIZES" \
  >"$T/mixed-local.out" 2>"$T/mixed-local.err"
ssw_check "mixed: local client's echo verified" grep -q "^RESULT ok" "$T/mixed-local.out"
ssw_ns_run "$B" switched SOCKSWITCH_STATS_FILE="$T/mixed-remote.stats" -- \
  "$SSW_PYTHON" "$SSW_PROGS/echo.py" client --host "$HA" --port "$P" --sizes "$SIZES" \
  >"$T/mixed-remote.out" 2>"$T/mixed-remote.err"
ssw_check "mixed: remote client's echo verified" grep -q "^RESULT ok" "$T/mixed-remote.out"
wait "$spid"
ssw_assert_eq "mixed: server verified both connections" "$(grep -c '^SERVER ok' "$T/mixed-server.out")" 2
ssw_assert_eq "mixed: the local client accepted over shm" \
  "$(grep -cE "accepted 127\.0\.0\.1:[0-9]+ over shm" "$T/mixed-server.err")" 1
ssw_assert_eq "mixed: the remote client accepted over fabric, with B's address (peer_addr)" \
  "$(grep -cE "accepted ${HB//./\\.}:[0-9]+ over fabric" "$T/mixed-server.err")" 1
ssw_assert_eq "mixed: local client switched" "$(ssw_stats_sum "$T/mixed-local.stats" switched)" 1
ssw_assert_eq "mixed: remote client switched" "$(ssw_stats_sum "$T/mixed-remote.stats" switched)" 1
ssw_assert_eq "mixed: server switched both" "$(ssw_stats_sum "$T/mixed-server.stats" switched)" 2

# ---- fork per connection: the accepting parent keeps its fabric listener
cat >"$T/forksrv.py" <<'EOF'
import os, socket, sys
ls = socket.socket(); ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
ls.bind((sys.argv[1], 0)); ls.listen(8)
open(sys.argv[2] + ".tmp", "w").write("%d\n" % ls.getsockname()[1]); os.rename(sys.argv[2] + ".tmp", sys.argv[2])
kids = []
for i in range(int(sys.argv[3])):
    c, peer = ls.accept()
    pid = os.fork()
    if pid == 0:
        ls.close()
        while True:
            b = c.recv(65536)
            if not b:
                break
            c.sendall(b)
        c.close()
        os._exit(0)
    c.close()
    kids.append(pid)
for k in kids:
    _, st = os.waitpid(k, 0)
    if st:
        sys.exit(1)
print("FORKSRV ok", flush=True)
EOF
# the client closes first, once it has its echo back: the child's close then
# has nothing left to send (what a close with unsent data does is not this
# test's business)
cat >"$T/forkcli.py" <<'EOF'
import os, socket, sys, threading
s = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=20)
data = os.urandom(1 << 20); got = bytearray()
t = threading.Thread(target=s.sendall, args=(data,)); t.start()
while len(got) < len(data):
    b = s.recv(65536)
    if not b:
        break
    got += b
t.join(); s.close()
print("FORKCLI", "ok" if bytes(got) == data else "bad", len(got), flush=True)
EOF
ssw_ns_bg fork-server "$A" switched SOCKSWITCH_LOG=info -- "$SSW_PYTHON" "$T/forksrv.py" "$HA" "$T/fork.port" 2
fpid=$SSW_BG_PID
ssw_wait_file "$T/fork.port" 20 || ssw_fail "fork: server did not start"
FP=$(cat "$T/fork.port" 2>/dev/null)
for k in 1 2; do
  ssw_ns_run "$B" switched SOCKSWITCH_STATS_FILE="$T/fork-c$k.stats" -- "$SSW_PYTHON" "$T/forkcli.py" "$HA" "$FP" \
    >"$T/fork-c$k.out" 2>"$T/fork-c$k.err"
  ssw_check "fork: client $k's 1 MiB came back intact" grep -q "^FORKCLI ok 1048576" "$T/fork-c$k.out"
done
wait "$fpid"
ssw_check "fork: server and children ended cleanly" grep -q "^FORKSRV ok" "$T/fork-server.out"
ssw_assert_eq "fork: client 1 switched (fabric, before any fork)" "$(ssw_stats_sum "$T/fork-c1.stats" switched)" 1
ssw_assert_eq "fork: client 2 switched too (after the server handed client 1 to a child)" \
  "$(ssw_stats_sum "$T/fork-c2.stats" switched)" 1
ssw_assert_eq "fork: no fallback" "$(( $(ssw_stats_sum "$T/fork-c1.stats" fallback) + $(ssw_stats_sum "$T/fork-c2.stats" fallback) ))" 0
ssw_assert_eq "fork: no listener closed" "$(grep -c "stop listening on fabric" "$T/fork-server.err")" 0
ssw_assert_no_sanitizer_report "$T"/*.err
ssw_finish
