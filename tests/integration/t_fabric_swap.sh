#!/usr/bin/env bash
# t_fabric_swap — seed 000's control swap over fabric, across two network
# namespaces: a connection shared by fork, whose endpoint lives in each
# process's memory, moves with control (session/session_move.c: the peer,
# suspended, offers a listener of its own; the old controller's last
# message is MOVED; the new controller connects there and its first
# message is RESUME).  Before, the process not in control saw a reset.
# A client in B connects to a server in A and forks:
#  (a) turns: parent and child send in turn, each reads its own answer:
#      every answer right, a swap (and a transport move) each turn;
#  (b) exit: the child drives the connection, then exits while the parent
#      keeps it (its transport is parked with the server), then the parent
#      goes on: every answer right;
#  (c) both: parent and child write 400 lines each at once: every line
#      whole, each answered once, the parent reads all the answers;
#  (d) split: the child writes, the parent reads in an epoll loop (its
#      reads and the child's writes take control from each other).
#  (e) watch: the child sends a line (it drives the connection now) and
#      waits, in no socket call; the parent's epoll must report the
#      answer within 4 s (over fabric a look of a process not in control
#      sees nothing of the transport, in the driver's memory: the look
#      asks for control, and the child's helper hands it over), not when
#      the child ends.
# Each: data checked, the swaps counted (client stats) and the server's
# suspensions (server stats), every connection switched over fabric.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/netns.sh"
ssw_fabric_pair_setup
A=$SSW_NS_A B=$SSW_NS_B HA=$SSW_NS_ADDR_A

cat >"$T/client.py" <<'PY'
import os, socket, sys, time
mode, host, port, n = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
s = socket.create_connection((host, port))
def recv_line():
    d = b""
    while not d.endswith(b"\n"):
        x = s.recv(1)
        if not x: raise EOFError
        d += x
    return d
def ask(line):
    s.sendall(line + b"\n")
    return recv_line() == line.upper() + b"\n"
bad = 0
ask(b"hello") or sys.exit(3)
if mode == "turns":
    r1, w1 = os.pipe(); r2, w2 = os.pipe()
    kid = os.fork()
    me, rdp, wrp = (b"b", r2, w1) if kid == 0 else (b"a", r1, w2)
    for i in range(n):
        if not (me == b"a" and i == 0): os.read(rdp, 1)
        try: bad += not ask(me + b"%05d" % i)
        except (OSError, EOFError): bad += 1
        os.write(wrp, b"x")
    if kid == 0: os._exit(min(bad, 100)) # (_exit: the switch hands its transport back all the same)
    os.read(rdp, 1)
    bad += os.waitpid(kid, 0)[1] >> 8
elif mode == "exit":
    r1, w1 = os.pipe()
    kid = os.fork()
    if kid == 0:
        os.read(r1, 1) # the parent drove it after the fork: the child's first send is a swap
        k = 0
        for i in range(n):
            try: k += not ask(b"child%04d" % i)
            except (OSError, EOFError): k += 1
        os._exit(min(k, 100))
    bad += not ask(b"first")
    os.write(w1, b"g")
    bad += os.waitpid(kid, 0)[1] >> 8 # the child exited: its transport was parked
    for i in range(n):
        try: bad += not ask(b"parent%04d" % i)
        except (OSError, EOFError): bad += 1
elif mode == "both": # both write at once, no turns; the server counts whole lines
    kid = os.fork()
    me = b"b" if kid == 0 else b"a"
    for i in range(n):
        s.sendall(me + b"%06d" % i + b"." * 90 + b"\n")
        if i % 50 == 49: time.sleep(0.002) # they interleave even on a loaded host
    if kid == 0: os._exit(0)
    os.waitpid(kid, 0)
    s.shutdown(socket.SHUT_WR) # the answers: the parent reads them all
    got = b""
    while True:
        d = s.recv(65536)
        if not d: break
        got += d
    lines = got.split(b"\n")[:-1]
    want = sorted([b"A%06d" % i + b"." * 90 for i in range(n)] + [b"B%06d" % i + b"." * 90 for i in range(n)])
    bad += sorted(lines) != want
elif mode == "split": # the child writes, the parent reads in an epoll loop
    import selectors
    kid = os.fork()
    if kid == 0:
        for i in range(n):
            s.sendall(b"req%06d\n" % i)
            if i % 50 == 49: time.sleep(0.002)
        os._exit(0)
    sel = selectors.DefaultSelector(); sel.register(s, selectors.EVENT_READ)
    got = b""; end = time.time() + 60
    while got.count(b"\n") < n and time.time() < end:
        if sel.select(1):
            d = s.recv(65536)
            if not d: break
            got += d
    os.waitpid(kid, 0)
    bad += got != b"".join(b"REQ%06d\n" % i for i in range(n))
elif mode == "watch":
    r1, w1 = os.pipe(); r2, w2 = os.pipe()
    kid = os.fork()
    if kid == 0:
        s.sendall(b"child\n")
        os.write(w1, b"x")
        os.read(r2, 1) # (no socket call: the helper thread serves the swap)
        os._exit(0)
    os.read(r1, 1)
    import selectors
    sel = selectors.DefaultSelector(); sel.register(s, selectors.EVENT_READ)
    t0 = time.time()
    ready = sel.select(4)
    took = time.time() - t0
    got = recv_line() if ready else b""
    os.write(w2, b"x")
    os.waitpid(kid, 0)
    print("watch ready=%d took=%.3f got=%r" % (bool(ready), took, got), flush=True)
    bad += got != b"CHILD\n"
s.close()
print("RESULT mode=%s bad=%d" % (mode, bad), flush=True)
PY

run() { # NAME MODE N
  local name=$1 mode=$2 n=$3
  rm -f "$T/$name.port"
  ssw_ns_bg "$name-server" "$A" switched SOCKSWITCH_STATS_FILE="$T/$name-server.stats" \
    SOCKSWITCH_LOG_FILE="$T/$name-server.log" SOCKSWITCH_LOG=${TLOG:-warn} -- "$SSW_PYTHON" "$SSW_PROGS/upper_server.py" "$HA" "$T/$name.port"
  local spid=$SSW_BG_PID
  ssw_wait_file "$T/$name.port" 20 || ssw_fail "$name: the server did not start"
  ssw_step "$name: $mode, $n"
  ssw_ns_run "$B" switched SOCKSWITCH_STATS_FILE="$T/$name-client.stats" SOCKSWITCH_LOG_FILE="$T/$name-client.log" SOCKSWITCH_LOG=${TLOG:-warn} -- \
    "$SSW_PYTHON" "$T/client.py" "$mode" "$HA" "$(cat "$T/$name.port" 2>/dev/null)" "$n" \
    >"$T/$name.out" 2>"$T/$name.err"
  echo "$?" >"$T/$name.rc"
  wait "$spid"
}

run turns turns 40
ssw_assert_eq "(a) turns: exit status" "$(cat "$T/turns.rc")" 0
ssw_assert_eq "(a) turns: wrong answers" "$(ssw_kv "$T/turns.out" bad)" 0
ssw_assert_eq "(a) turns: lines the server answered" "$(ssw_kv "$T/turns-server.out" server_lines)" 81
# the child's first turn takes a connection nobody drove since the fork:
# every later turn is a swap, with the transport
ssw_assert_ge "(a) turns: control swaps (the parent's: the child's _exit writes no stats line)" \
  "$(ssw_stats_sum "$T/turns-client.stats" swaps)" 39
ssw_assert_ge "(a) turns: the server suspended for each" "$(ssw_stats_sum "$T/turns-server.stats" suspended)" 78
# lanes: each process connects once, then goes on with its own transport
ssw_assert_le "(a) turns: transports the server took new (one per client process)" \
  "$(ssw_stats_sum "$T/turns-server.stats" moved_in)" 2
ssw_assert_ge "(a) turns: turns on a process's own transport again (lanes)" \
  "$(ssw_stats_sum "$T/turns-server.stats" moved_back)" 76
ssw_assert_eq "(a) turns: client switched" "$(ssw_stats_sum "$T/turns-client.stats" switched)" 1
ssw_assert_eq "(a) turns: server switched" "$(ssw_stats_sum "$T/turns-server.stats" switched)" 1
ssw_assert_eq "(a) turns: fallback" "$(ssw_stats_sum "$T/turns-client.stats" fallback)" 0
ssw_assert_quiet "$T/turns.err"

run exit exit 20
ssw_assert_eq "(b) exit: exit status" "$(cat "$T/exit.rc")" 0
ssw_assert_eq "(b) exit: wrong answers" "$(ssw_kv "$T/exit.out" bad)" 0
ssw_assert_eq "(b) exit: lines the server answered" "$(ssw_kv "$T/exit-server.out" server_lines)" 42
ssw_assert_ge "(b) exit: the server suspended (the child's turn, its exit)" \
  "$(ssw_stats_sum "$T/exit-server.stats" suspended)" 2
ssw_assert_eq "(b) exit: fallback" "$(ssw_stats_sum "$T/exit-client.stats" fallback)" 0
ssw_assert_quiet "$T/exit.err"
run both both 400
ssw_assert_eq "(c) both: exit status" "$(cat "$T/both.rc")" 0
ssw_assert_eq "(c) both: every line whole, each answered once" "$(ssw_kv "$T/both.out" bad)" 0
ssw_assert_eq "(c) both: lines the server answered" "$(ssw_kv "$T/both-server.out" server_lines)" 801
ssw_assert_ge "(c) both: control swaps (the parent's)" "$(ssw_stats_sum "$T/both-client.stats" swaps)" 1
ssw_assert_eq "(c) both: fallback" "$(ssw_stats_sum "$T/both-client.stats" fallback)" 0
ssw_assert_quiet "$T/both.err"

run split split 400
ssw_assert_eq "(d) split: exit status" "$(cat "$T/split.rc")" 0
ssw_assert_eq "(d) split: answers read by the parent, in order" "$(ssw_kv "$T/split.out" bad)" 0
ssw_assert_ge "(d) split: control swaps (the parent's)" "$(ssw_stats_sum "$T/split-client.stats" swaps)" 1
ssw_assert_quiet "$T/split.err"

run watch watch 1
ssw_assert_eq "(e) watch: exit status" "$(cat "$T/watch.rc")" 0
ssw_assert_eq "(e) watch: the parent's epoll saw the answer the child's line drew, while the child held control" \
  "$(ssw_kv "$T/watch.out" bad)" 0
ssw_assert_ge "(e) watch: control swaps (the parent's look took it back)" "$(ssw_stats_sum "$T/watch-client.stats" swaps)" 1
ssw_assert_quiet "$T/watch.err"
ssw_assert_no_sanitizer_report "$T"/*.err
ssw_finish
