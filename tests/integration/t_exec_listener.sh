#!/usr/bin/env bash
# t_exec_listener — a listening socket inherited across exec stays switched,
# and a connection waiting in it when the exec happens is accepted by the
# new image (issue 20, case 1), both ends switched:
#  (a) socket activation: systemd-socket-activate listens, waits for the first
#      connection, then execs the server, which takes fd 3;
#  (b) a binary upgrade: a server re-execs itself keeping its listener, while
#      a client's connection waits in the backlog.
# Every reply checked, every connection switched on both sides (stats), no
# reset.  Before this, (a)'s first client and (b)'s waiting client saw
# ECONNRESET on their first read.
source "$(dirname "$0")/lib.sh"
ssw_enter_netns "$@"
ssw_setup_preload
ssw_tmpdir
PY=$SSW_PYTHON
export SOCKSWITCH_LOG=info

cat >"$T/client.py" <<'PY'
import socket, sys, os
port, tag = int(sys.argv[1]), sys.argv[2]
c = socket.create_connection(("127.0.0.1", port))
if len(sys.argv) > 3:
    open(sys.argv[3], "w").write("1")   # connected: the test may let the server exec now
msg = ("hello-%s-" % tag).encode() * 1000
c.sendall(msg)
got = b""
while len(got) < len(msg):
    d = c.recv(65536)
    if not d:
        break
    got += d
print("%s %s" % (tag, "ok" if got == msg else "BAD(%d)" % len(got)), flush=True)
PY

# (a) socket activation
cat >"$T/activated.py" <<'PY'
import socket, sys
s = socket.socket(fileno=3)
for i in range(int(sys.argv[1])):
    c, _ = s.accept()
    d = b""
    while True:
        x = c.recv(65536)
        d += x
        if not x or len(d) >= 9000:
            break
    c.sendall(d); c.close()
PY
PA=7950
ssw_step "(a) systemd-socket-activate execs the server at the first connection"
# it gives the server a fresh environment: the sanitizer's settings go along by name
keepenv=()
for v in ASAN_OPTIONS UBSAN_OPTIONS; do [ -n "${!v:-}" ] && keepenv+=(-E "$v"); done
ssw_bg activate switched SOCKSWITCH_STATS_FILE="$T/a-server.stats" -- \
  systemd-socket-activate "${keepenv[@]}" -l 127.0.0.1:$PA "$PY" "$T/activated.py" 4
ssw_wait_listen $PA 10 || ssw_fail "(a) the supervisor did not listen"
for i in 1 2 3 4; do
  ssw_run switched SOCKSWITCH_STATS_FILE="$T/a-client.stats" -- "$PY" "$T/client.py" $PA a$i >>"$T/a-client.out" 2>>"$T/a-client.err"
done
wait "$SSW_BG_PID"
ssw_assert_eq "(a) every reply intact" "$(grep -c ' ok$' "$T/a-client.out")" 4
ssw_assert_eq "(a) the clients' connections were switched" "$(ssw_stats_sum "$T/a-client.stats" switched)" 4
ssw_assert_eq "(a) the server (after the exec) accepted them switched" "$(ssw_stats_sum "$T/a-server.stats" switched)" 4
ssw_check "(a) the new image took the listener back" grep -q "listener inherited across exec" "$T/activate.err"
ssw_check "(a) no reset" bash -c "! grep -qi 'reset' '$T/a-client.err'"

# (b) binary upgrade: generation 1 serves two, then re-execs itself (the
# listener inherited) once a third client is waiting; generation 2 serves
# the waiting one and one more
cat >"$T/upgrade.py" <<'PY'
import os, socket, sys, time
gen, port, d = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
if gen == 1:
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("127.0.0.1", port)); s.listen(16)
    open(d + "/listening", "w").write("1")
else:
    s = socket.socket(fileno=int(sys.argv[4]))
def serve():
    c, _ = s.accept()
    b = b""
    while len(b) < 9000:
        x = c.recv(65536)
        if not x:
            break
        b += x
    c.sendall(b); c.close()
for i in range(2):
    serve()
if gen == 1:
    while not os.path.exists(d + "/go"):
        time.sleep(0.01)
    os.set_inheritable(s.fileno(), True)
    os.execv(sys.executable, [sys.executable, sys.argv[0], "2", str(port), d, str(s.fileno())])
PY
PB=7951
ssw_step "(b) a server re-execs itself while a client waits in its backlog"
ssw_bg upgrade switched SOCKSWITCH_STATS_FILE="$T/b-server.stats" -- "$PY" "$T/upgrade.py" 1 $PB "$T"
ssw_wait_file "$T/listening" 10 || ssw_fail "(b) the server did not listen"
for i in 1 2; do
  ssw_run switched SOCKSWITCH_STATS_FILE="$T/b-client.stats" -- "$PY" "$T/client.py" $PB b$i >>"$T/b-client.out" 2>>"$T/b-client.err"
done
ssw_bg waiter switched SOCKSWITCH_STATS_FILE="$T/b-client.stats" -- "$PY" "$T/client.py" $PB b3 "$T/connected"
waiter=$SSW_BG_PID
ssw_wait_file "$T/connected" 10 || ssw_fail "(b) the waiting client did not connect"
touch "$T/go"
wait "$waiter"
ssw_run switched SOCKSWITCH_STATS_FILE="$T/b-client.stats" -- "$PY" "$T/client.py" $PB b4 >>"$T/b-client.out" 2>>"$T/b-client.err"
cat "$T/waiter.out" >>"$T/b-client.out"; cat "$T/waiter.err" >>"$T/b-client.err"
wait
ssw_assert_eq "(b) every reply intact" "$(grep -c ' ok$' "$T/b-client.out")" 4
ssw_check "(b) the client waiting through the exec was served" grep -q "^b3 ok$" "$T/b-client.out"
ssw_assert_eq "(b) the clients' connections were switched" "$(ssw_stats_sum "$T/b-client.stats" switched)" 4
ssw_assert_eq "(b) generation 2 accepted its two switched" "$(ssw_stats_sum "$T/b-server.stats" switched)" 2
ssw_check "(b) no reset" bash -c "! grep -qi 'reset' '$T/b-client.err'"

ssw_assert_no_sanitizer_report "$T"/*.err
ssw_finish
