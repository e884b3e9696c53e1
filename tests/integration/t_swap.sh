#!/usr/bin/env bash
# t_swap — seed 000's control swap (session/session_swap.c): a connection
# shared by fork, under a provider without shared context, is driven by one
# process at a time, and control moves to another live process that sends
# or reads, by suspending the peer (SUSPEND, SUSPENDED, RESUME) — before,
# that process saw a reset.  shm with SOCKSWITCH_SHARED_CONTEXT=0 walks that
# road on one host.  A client connects, forks, and:
#  (a) turns: parent and child write in turn (a pipe passes the turn), each
#      reads its own answer: every answer right, one swap per turn, most
#      of them driven by the asker (the controller idle: swaps_driven);
#  (b) both at once: parent and child write 2,000 lines each without turns:
#      the server receives every line whole;
#  (c) split: the child writes requests, the parent reads the answers in
#      an epoll loop (its reads and the child's writes take control from
#      each other, the parent asleep in epoll_wait is served by its helper
#      thread): every answer, in order;
#  (d) the controller stopped (SIGSTOP) while the child waits for control,
#      then killed: the child takes the connection over (no hang), and its
#      requests are answered;
#  (e) the same program with shared context (the default): no swap at all;
#  (f) an idle peer (asleep, in no call on its socket): parent and child
#      write in turn without waiting for its answer to SUSPEND (a shared
#      transport needs none), and it reads every line in order later;
#  (g) `sockswitch stat` names the process driving the connection (JSON
#      `driver`, the table's "driven by pid N"): the parent, then the child.
# Each: data checked, swaps counted in the stats lines, every connection
# switched, kernel TCP segments flat.
source "$(dirname "$0")/lib.sh"
ssw_enter_netns "$@"
ssw_setup_preload
ssw_tmpdir
PY=$SSW_PYTHON

cat >"$T/swap.py" <<'PY'
import os, select, selectors, signal, socket, sys, time
mode, port, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])

def server(ls):
    c, _ = ls.accept(); ls.close()
    if mode == "idle": time.sleep(2) # not in any call on the socket meanwhile
    buf = b""; lines = []
    while True:
        d = c.recv(65536)
        if not d: break
        buf += d
        while b"\n" in buf:
            l, buf = buf.split(b"\n", 1)
            lines.append(l)
            if mode not in ("both", "idle"): c.sendall(l.upper() + b"\n")
    if mode == "idle":
        want = [b"t%04d" % i for i in range(n)]
        print("RESULT server_lines=%d in_order=%d" % (len(lines), lines == want), flush=True)
    if mode == "both":
        want = sorted([b"a%06d" % i + b"." * 90 for i in range(n)] + [b"b%06d" % i + b"." * 90 for i in range(n)])
        print("RESULT server_lines=%d whole=%d" % (len(lines), sorted(lines) == want), flush=True)
    os._exit(0)

ls = socket.socket(); ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
ls.bind(("127.0.0.1", port)); ls.listen(8)
rd, wr = os.pipe()
srv = os.fork()
if srv == 0:
    select.select([ls], [], [], 0) # listens on its own from now (its copies went at fork)
    os.write(wr, b"r")
    server(ls)
ls.close(); os.read(rd, 1)
s = socket.create_connection(("127.0.0.1", port))

def recv_line(s):
    d = b""
    while not d.endswith(b"\n"):
        x = s.recv(1)
        if not x: raise EOFError
        d += x
    return d

def finish(bad):
    s.close()
    st = os.waitpid(srv, 0)[1]
    print("RESULT mode=%s bad=%d server_status=%d" % (mode, bad, st), flush=True)
    sys.exit(0)

if mode == "turns":
    r1, w1 = os.pipe(); r2, w2 = os.pipe()
    kid = os.fork()
    me, rdp, wrp = (b"b", r2, w1) if kid == 0 else (b"a", r1, w2)
    bad = 0
    for i in range(n):
        if not (me == b"a" and i == 0): os.read(rdp, 1)
        s.sendall(me + b"%05d\n" % i)
        if recv_line(s) != (me + b"%05d\n" % i).upper(): bad += 1
        os.write(wrp, b"x")
    if kid == 0: sys.exit(bad)
    os.read(rdp, 1)
    bad += os.waitpid(kid, 0)[1] >> 8
    finish(bad)
elif mode == "both":
    kid = os.fork()
    me = b"b" if kid == 0 else b"a"
    for i in range(n):
        s.sendall(me + b"%06d" % i + b"." * 90 + b"\n")
        if i % 100 == 99: time.sleep(0.002) # the other gets the CPU even on a loaded host: they interleave
    if kid == 0: os._exit(0)
    finish(os.waitpid(kid, 0)[1])
elif mode == "split":
    kid = os.fork()
    if kid == 0:
        for i in range(n):
            s.sendall(b"req%06d\n" % i)
            if i % 100 == 99: time.sleep(0.002) # the parent reads meanwhile, even on a loaded host
        os._exit(0)
    got = b""; sel = selectors.DefaultSelector(); sel.register(s, selectors.EVENT_READ)
    end = time.time() + 60
    while got.count(b"\n") < n and time.time() < end:
        if sel.select(1):
            d = s.recv(65536)
            if not d: break
            got += d
    os.waitpid(kid, 0)
    finish(0 if got == b"".join(b"REQ%06d\n" % i for i in range(n)) else 1)
elif mode == "idle":
    # the peer sleeps, in no call on its socket: parent and child write in
    # turn (each turn a swap) without waiting for it to answer SUSPEND
    r1, w1 = os.pipe(); r2, w2 = os.pipe()
    t0 = time.time()
    kid = os.fork()
    me, rdp, wrp = (1, r2, w1) if kid == 0 else (0, r1, w2)
    for i in range(me, n, 2):
        if i > 0: os.read(rdp, 1)
        s.sendall(b"t%04d\n" % i)
        os.write(wrp, b"x")
    if kid == 0: sys.exit(0)
    os.waitpid(kid, 0)
    print("RESULT writes_ms=%d" % ((time.time() - t0) * 1000), flush=True)
    finish(0)
elif mode == "stat":
    # `sockswitch stat` names the process driving the connection: the
    # parent once it sent, then the child
    T = os.environ["SWAP_T"]
    # waits are selects on the socket (a look: no control moves), where
    # a process answers stat's request for fresh rows
    def say_wait(name, pids):
        with open(T + "/" + name + ".tmp", "w") as f: f.write("%d %d %d\n" % pids)
        os.rename(T + "/" + name + ".tmp", T + "/" + name)
        end = time.time() + 20
        while not os.path.exists(T + "/" + name + ".go") and time.time() < end: select.select([s], [], [], 0.02)
    r1, w1 = os.pipe()
    kid = os.fork()
    if kid == 0:
        end = time.time() + 60
        while r1 not in select.select([s, r1], [], [], 0.02)[0] and time.time() < end: pass
        os.read(r1, 1)
        s.sendall(b"c\n"); bad = recv_line(s) != b"C\n"
        say_wait("stat2", (os.getppid(), os.getpid(), s.getsockname()[1]))
        os._exit(bad)
    # a child publishes its rows from its first call 100 ms after the fork
    end = time.time() + 0.25
    while time.time() < end: select.select([s], [], [], 0.02)
    s.sendall(b"p\n"); bad = recv_line(s) != b"P\n"
    say_wait("stat1", (os.getpid(), kid, s.getsockname()[1]))
    os.write(w1, b"x")
    end = time.time() + 30
    while not os.path.exists(T + "/stat2.go") and time.time() < end: select.select([s], [], [], 0.02)
    finish(bad + (os.waitpid(kid, 0)[1] >> 8))
elif mode == "kill":
    # the parent drives the connection, then stops: the child asks for it
    s.sendall(b"first\n"); assert recv_line(s) == b"FIRST\n"
    r1, w1 = os.pipe()
    kid = os.fork()
    if kid == 0:
        os.read(r1, 1) # the parent is stopped now
        bad = 0
        for i in range(n):
            s.sendall(b"k%04d\n" % i)
            if recv_line(s) != b"K%04d\n" % i: bad += 1
        with open(os.environ["SWAP_T"] + "/kill.res.tmp", "w") as f: f.write("RESULT answered=%d bad=%d\n" % (n, bad))
        os.rename(os.environ["SWAP_T"] + "/kill.res.tmp", os.environ["SWAP_T"] + "/kill.res")
        os._exit(0)
    s.sendall(b"again\n"); assert recv_line(s) == b"AGAIN\n" # control is the parent's
    killer = os.fork()
    if killer == 0:
        os.kill(os.getppid(), signal.SIGSTOP)
        os.write(w1, b"g")
        time.sleep(0.5) # the child asks, and waits for the stopped parent
        with open(os.environ["SWAP_T"] + "/kill.mark", "w") as f: f.write("%d\n" % kid)
        os.kill(os.getppid(), signal.SIGKILL)
        os._exit(0)
    while True: time.sleep(1) # stopped, then killed: the test reaps the rest
PY

run() { # NAME MODE N [VAR=VAL...]
  local name=$1 mode=$2 n=$3; shift 3
  ssw_step "$name: $mode, $n"
  local segs0; segs0=$(ssw_outsegs)
  ssw_run switched SOCKSWITCH_STATS_FILE="$T/$name.stats" SWAP_T="$T" "$@" -- "$PY" "$T/swap.py" "$mode" \
    "$((47000 + RANDOM % 2000))" "$n" >"$T/$name.out" 2>"$T/$name.err"
  echo "$?" >"$T/$name.rc"
  SEGS=$(( $(ssw_outsegs) - segs0 ))
}

NSC=SOCKSWITCH_SHARED_CONTEXT=0
run turns turns 300 $NSC
ssw_assert_eq "(a) turns: exit status" "$(cat "$T/turns.rc")" 0
ssw_assert_eq "(a) turns: wrong answers" "$(ssw_kv "$T/turns.out" bad)" 0
ssw_assert_eq "(a) turns: server exit" "$(ssw_kv "$T/turns.out" server_status)" 0
# the child's first turn takes a connection nobody drove since the fork:
# every later turn is a swap
ssw_assert_ge "(a) turns: control swaps (one a turn)" "$(ssw_stats_sum "$T/turns.stats" swaps)" 598
# the controller waits on its pipe, in no call on the connection: the
# asker suspends the peer itself (most turns; the others by the
# controller's helper thread)
ssw_assert_ge "(a) turns: swaps the asker drove itself" "$(ssw_stats_sum "$T/turns.stats" swaps_driven)" 300
ssw_assert_eq "(a) turns: fallback connections" "$(ssw_stats_sum "$T/turns.stats" fallback)" 0
ssw_assert_le "(a) turns: kernel TCP segments" "$SEGS" 20
ssw_assert_quiet "$T/turns.err"

run both both 2000 $NSC
ssw_assert_eq "(b) both: exit status" "$(cat "$T/both.rc")" 0
ssw_assert_eq "(b) both: lines the server received" "$(ssw_kv "$T/both.out" server_lines)" 4000
ssw_assert_eq "(b) both: every line whole" "$(ssw_kv "$T/both.out" whole)" 1
ssw_assert_ge "(b) both: control swaps" "$(ssw_stats_sum "$T/both.stats" swaps)" 1
ssw_assert_le "(b) both: kernel TCP segments" "$SEGS" 20
ssw_assert_quiet "$T/both.err"

run split split 2000 $NSC
ssw_assert_eq "(c) split: exit status" "$(cat "$T/split.rc")" 0
ssw_assert_eq "(c) split: answers read by the parent, in order" "$(ssw_kv "$T/split.out" bad)" 0
ssw_assert_ge "(c) split: control swaps" "$(ssw_stats_sum "$T/split.stats" swaps)" 1
ssw_assert_le "(c) split: kernel TCP segments" "$SEGS" 20
ssw_assert_quiet "$T/split.err"

run idle idle 40 $NSC
ssw_assert_eq "(f) idle peer: exit status" "$(cat "$T/idle.rc")" 0
ssw_assert_le "(f) idle peer: 40 writes in turn while the peer sleeps 2 s, ms (no wait for its answer)" \
  "$(ssw_kv "$T/idle.out" writes_ms)" 1500
ssw_assert_eq "(f) idle peer: lines the server read, in order" "$(ssw_kv "$T/idle.out" in_order)" 1
ssw_assert_ge "(f) idle peer: control swaps" "$(ssw_stats_sum "$T/idle.stats" swaps)" 30
ssw_assert_quiet "$T/idle.err"

ssw_step "(d) the controller stopped, then killed, while the child waits"
segs0=$(ssw_outsegs)
ssw_cmd switched SOCKSWITCH_STATS_FILE="$T/kill.stats" SWAP_T="$T" $NSC -- "$PY" "$T/swap.py" kill \
  "$((47000 + RANDOM % 2000))" 50
"${SSW_CMD[@]}" >"$T/kill.out" 2>"$T/kill.err" &
KPID=$!
ssw_wait_file "$T/kill.mark" 20
KID=$(cat "$T/kill.mark" 2>/dev/null)
ssw_wait_file "$T/kill.res" 15
ssw_check "(d) kill: the child took the connection over within 15 s of the controller's death" test -f "$T/kill.res"
[ -n "$KID" ] && kill -9 "$KID" 2>/dev/null
wait "$KPID" 2>/dev/null
ssw_assert_eq "(d) kill: the child's requests answered" "$(ssw_kv "$T/kill.res" answered)" 50
ssw_assert_eq "(d) kill: wrong answers" "$(ssw_kv "$T/kill.res" bad)" 0
ssw_assert_le "(d) kill: kernel TCP segments" "$(( $(ssw_outsegs) - segs0 ))" 20

ssw_step "(g) stat names the process driving a shared connection"
ssw_cmd switched SOCKSWITCH_STATS_FILE="$T/stat.stats" SWAP_T="$T" $NSC -- "$PY" "$T/swap.py" stat \
  "$((47000 + RANDOM % 2000))" 1
"${SSW_CMD[@]}" >"$T/stat.out" 2>"$T/stat.err" &
GPID=$!
# drivers STEP: the client's rows (both processes') whose driver is the
# process that sent last, and the server's rows with no driver
drivers() {
  ssw_wait_file "$T/$1" 20
  read -r PAR KID CPORT <"$T/$1" 2>/dev/null
  local who=$PAR; [ "$1" = stat2 ] && who=$KID
  "$SSW_BUILD/sockswitch" stat --json >"$T/$1.json" 2>"$T/$1.json.err"
  DRV=$("$PY" "$SSW_PROGS/statq.py" "$T/$1.json" count local=127.0.0.1:"${CPORT:-0}" shared=True driver="$who")
  SRV=$("$PY" "$SSW_PROGS/statq.py" "$T/$1.json" count remote=127.0.0.1:"${CPORT:-0}" driver=null)
  "$SSW_BUILD/sockswitch" stat >"$T/$1.table" 2>&1
  touch "$T/$1.go"
}
drivers stat1
ssw_assert_eq "(g) stat: both processes' rows name the parent as driver (it sent last)" "$DRV" 2
ssw_check "(g) stat: the table says it (driven by pid $PAR)" grep -q "driven by pid $PAR" "$T/stat1.table"
drivers stat2
ssw_assert_eq "(g) stat: after the child's line, both rows name the child" "$DRV" 2
# (the server, asleep in a blocking recv, shows its rows once it answered:
# by the second look, stale)
ssw_assert_eq "(g) stat: the server's row names none (not shared)" "$SRV" 1
wait "$GPID"
ssw_assert_eq "(g) stat: exit status" "$?" 0
ssw_assert_eq "(g) stat: wrong answers" "$(ssw_kv "$T/stat.out" bad)" 0
ssw_assert_quiet "$T/stat.err"

run shared turns 300
ssw_assert_eq "(e) shared context: exit status" "$(cat "$T/shared.rc")" 0
ssw_assert_eq "(e) shared context: wrong answers" "$(ssw_kv "$T/shared.out" bad)" 0
ssw_assert_eq "(e) shared context: control swaps (none: both drive it)" "$(ssw_stats_sum "$T/shared.stats" swaps)" 0
ssw_assert_no_sanitizer_report "$T"/*.err
ssw_finish
