#!/usr/bin/env bash
# t_fabric_spawn — a program a switched server starts without fork
# (posix_spawn: no fork hooks run) inherits none of libfabric's sockets.
# libfabric opens its listening socket, its connections and its signalling
# socketpairs inheritable; a spawned program holding the fabric listening
# socket kept the port listening after the server was gone, so connects
# there were taken into a backlog nobody accepts instead of being refused.
# Also: fork+exec of other programs between the messages of a fabric
# connection leaves it to the process that goes on.
# Route 127.0.0.0/8 over fabric, inside the test's own network namespace.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/netns.sh"
ssw_need_fabric
ssw_setup_preload
ssw_tmpdir
ssw_ns_single sp
PORT=7466
cat >"$T/srv.py" <<'PY'
import os, socket, sys, time
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", int(sys.argv[1]))); s.listen(4)
fab = int(sys.argv[1]) + 10000
def fabric_listening():
    with open("/proc/net/tcp") as f:
        return [l.split()[9] for l in f.readlines()[1:]
                if l.split()[3] == "0A" and int(l.split()[1].split(":")[1], 16) == fab]
for _ in range(100):  # libfabric loads in ~0.3 s
    if fabric_listening(): break
    time.sleep(0.05)
print("fabric listening", len(fabric_listening()), flush=True)
# a connection too, so that libfabric's connection sockets exist as well
c = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
a, _ = s.accept(); c.sendall(b"x"); a.recv(1)
pid = os.posix_spawn("/bin/sleep", ["sleep", "3"], {"PATH": "/bin"})
time.sleep(0.2)
held = [os.readlink("/proc/%d/fd/%s" % (pid, fd)) for fd in os.listdir("/proc/%d/fd" % pid)]
print("spawned sockets", sum(h.startswith("socket:") for h in held), flush=True)
c.close(); a.close(); s.close()
print("server gone", flush=True)
PY
ip netns exec "$NS" timeout 20 env LD_PRELOAD="$SSW_PRELOAD" SOCKSWITCH_ROUTES="$ROUTES" \
  SOCKSWITCH_STATS_FILE="$T/srv.stats" python3 "$T/srv.py" $PORT >"$T/srv.out" 2>"$T/srv.err"
# the server has exited; the spawned sleep runs on: nothing listens on the fabric port
refused=$(ip netns exec "$NS" timeout 5 python3 -c '
import socket, sys
try: socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=2); print("connected")
except ConnectionRefusedError: print("refused")
except OSError as e: print(type(e).__name__)' $((PORT + 10000)))
ssw_assert_eq "the server made its fabric listener" "$(awk '/^fabric listening/ {print $3}' "$T/srv.out")" 1
ssw_assert_eq "the server's connection went over fabric" "$(ssw_stats_sum "$T/srv.stats" switched)" 2
ssw_assert_eq "sockets the spawned program inherited" "$(awk '/^spawned sockets/ {print $3}' "$T/srv.out")" 0
ssw_assert_eq "the fabric port once the server is gone (the spawned program still runs)" "$refused" refused

# fork+exec of another program (os.fork, then os.execv in the child) between the
# messages of a fabric connection, on both sides: the child's exec drops its
# hold, and the process that goes on must keep driving the connection (one
# process at a time drives a fabric connection after fork: the exec'd image
# keeps the pid and must not keep its parent off)
cat >"$T/fe.py" <<'PY'
import os, socket, sys, time
port = int(sys.argv[1])
if sys.argv[2] == "s":
    l = socket.socket(); l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    l.bind(("127.0.0.1", port)); l.listen(4)
    for _ in range(100):  # the fabric listener comes ~0.3 s after (libfabric loads)
        with open("/proc/net/tcp") as f:
            if any(x.split()[3] == "0A" and int(x.split()[1].split(":")[1], 16) == port + 10000
                   for x in f.readlines()[1:]): break
        time.sleep(0.05)
    open(sys.argv[3], "w").close()
    c, _ = l.accept()
    for i in range(5):
        d = c.recv(100)
        if os.fork() == 0: os.execv("/bin/sleep", ["sleep", "2"])  # runs on while the connection goes on
        c.sendall(d.upper())
    print("served", flush=True)
else:
    import os
    for _ in range(200):
        if os.path.exists(sys.argv[3]): break
        time.sleep(0.05)
    c = socket.create_connection(("127.0.0.1", port))
    got = []
    for i in range(5):
        c.sendall(b"hello%d" % i)
        if os.fork() == 0: os.execv("/bin/sleep", ["sleep", "2"])  # runs on while the connection goes on
        got.append(c.recv(100).decode())
    print(" ".join(got), flush=True)
PY
ip netns exec "$NS" timeout 20 env LD_PRELOAD="$SSW_PRELOAD" SOCKSWITCH_ROUTES="$ROUTES" \
  SOCKSWITCH_STATS_FILE="$T/fe-srv.stats" python3 "$T/fe.py" 7467 s "$T/fe.ready" >"$T/fe-srv.out" 2>"$T/fe-srv.err" &
fpid=$!
ip netns exec "$NS" timeout 20 env LD_PRELOAD="$SSW_PRELOAD" SOCKSWITCH_ROUTES="$ROUTES" \
  python3 "$T/fe.py" 7467 c "$T/fe.ready" >"$T/fe-cli.out" 2>"$T/fe-cli.err"
wait $fpid
ssw_assert_eq "fork+exec between messages: the replies" "$(cat "$T/fe-cli.out")" "HELLO0 HELLO1 HELLO2 HELLO3 HELLO4"
ssw_assert_eq "fork+exec between messages: the server" "$(cat "$T/fe-srv.out")" served
ssw_assert_ge "fork+exec between messages: over fabric" "$(ssw_stats_sum "$T/fe-srv.stats" switched)" 1
ssw_assert_no_sanitizer_report "$T"/*.err
ssw_finish
