#!/usr/bin/env bash
# t_hostile_swap — the control swap's messages (session/session_swap.c) sent
# out of turn by a hostile local user (nobody) to root's switched server, the
# library itself playing the attacker (SOCKSWITCH_FAULT=swap-*: each of its
# connections' first send goes after the message):
#  (a) swap-suspend: SUSPEND, then RESUME only at a send 1.2 s later.  The
#      server (one thread, an epoll loop, blocking sendall for its replies)
#      is suspended on that connection: its replies are staged, as a kernel
#      socket buffer takes them (session/session_stage.c), so its sendall
#      returns at once and a root client served by the same loop meanwhile
#      sees no stall; at RESUME every staged reply reaches the attacker, in
#      order.  Before the stage, the loop blocked in sendall until RESUME.
#  (b) swap-resume: RESUME while not suspended; (c) swap-suspended:
#      SUSPENDED not asked for: that one connection is reset (the attacker
#      reads ECONNRESET), the server goes on serving root's client.
# Every connection switched (the attack really goes through the switch),
# kernel TCP segments flat, the server's log names each violation.
source "$(dirname "$0")/lib.sh"
[ "$(id -u)" = 0 ] || { echo "SKIP: must run as root (plays nobody against root's server)"; exit 77; }
id nobody >/dev/null 2>&1 || { echo "SKIP: no user nobody"; exit 77; }
command -v setpriv >/dev/null 2>&1 || { echo "FAIL: setpriv (util-linux) missing"; exit 1; }
ssw_enter_netns "$@"
ssw_setup_preload
ssw_tmpdir
chmod 755 "$T"; mkdir -m 1777 "$T/n" # nobody writes its findings there
PY=$SSW_PYTHON
NOBODY=(setpriv --reuid=nobody --regid="$(id -g nobody)" --clear-groups)
PORT=$((45000 + RANDOM % 2000))

cat >"$T/server.py" <<'PY'
# one thread: an epoll loop over every connection, replies by blocking sendall
import selectors, socket, sys, time
port, secs = int(sys.argv[1]), float(sys.argv[2])
ls = socket.socket(); ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
ls.bind(("127.0.0.1", port)); ls.listen(16)
sel = selectors.DefaultSelector(); sel.register(ls, selectors.EVENT_READ)
resets = 0; send_ms_max = 0.0; end = time.time() + secs
while time.time() < end:
    for key, _ in sel.select(0.2):
        if key.fileobj is ls:
            c, _ = ls.accept(); sel.register(c, selectors.EVENT_READ); continue
        c = key.fileobj
        try:
            d = c.recv(65536)
            if d:
                t0 = time.time(); c.sendall(d.upper())
                send_ms_max = max(send_ms_max, (time.time() - t0) * 1000)
                continue
        except ConnectionResetError:
            resets += 1
        sel.unregister(c); c.close()
print("RESULT resets=%d send_ms_max=%d" % (resets, send_ms_max), flush=True)
PY

cat >"$T/client.py" <<'PY'
import socket, sys, time
role, port = sys.argv[1], int(sys.argv[2])
s = socket.create_connection(("127.0.0.1", port))
if role == "root": # round trips while the attacker works: none may stall
    worst = 0.0; bad = 0; n = int(sys.argv[3])
    for i in range(n):
        t0 = time.time(); s.sendall(b"r%04d\n" % i)
        d = b""
        while not d.endswith(b"\n"): d += s.recv(64)
        worst = max(worst, time.time() - t0); bad += d != b"R%04d\n" % i
        time.sleep(0.005)
    print("RESULT rounds=%d bad=%d worst_ms=%d" % (n, bad, worst * 1000), flush=True)
elif role == "suspend": # the library sent SUSPEND before the first line
    t0 = time.time()
    for i in range(10): s.sendall(b"h%d\n" % i)
    s.settimeout(0.5)
    try: early = len(s.recv(4096))
    except socket.timeout: early = 0
    time.sleep(max(0.0, t0 + 1.2 - time.time()))
    s.sendall(b"last\n") # the library resumes the server first
    s.settimeout(10); got = b""
    want = b"".join(b"H%d\n" % i for i in range(10)) + b"LAST\n"
    while len(got) < len(want):
        d = s.recv(4096)
        if not d: break
        got += d
    print("RESULT early=%d in_order=%d" % (early, got == want), flush=True)
else: # resume, suspended: the server resets this connection
    s.settimeout(10); r = "none"
    try: s.sendall(b"x\n"); r = "data" if s.recv(64) else "eof"
    except ConnectionResetError: r = "reset"
    except socket.timeout: r = "timeout"
    print("RESULT outcome=%s" % r, flush=True)
PY

segs0=$(ssw_outsegs)
ssw_bg server switched SOCKSWITCH_STATS_FILE="$T/server.stats" SOCKSWITCH_LOG_FILE="$T/server.log" \
  -- "$PY" "$T/server.py" "$PORT" 9
SPID=$SSW_BG_PID
ssw_wait_listen "$PORT"

attack() { # MODE: nobody's switched client with SOCKSWITCH_FAULT=swap-MODE, root's client beside it
  ssw_step "($1) nobody sends the swap message out of turn; root's client meanwhile"
  ssw_cmd switched SOCKSWITCH_STATS_FILE="$T/root.$1.stats" -- "$PY" "$T/client.py" root "$PORT" 150
  "${SSW_CMD[@]}" >"$T/root.$1.out" 2>"$T/root.$1.err" &
  local rpid=$!
  ssw_cmd switched SOCKSWITCH_FAULT="swap-$1" SOCKSWITCH_STATS_FILE="$T/n/$1.stats" -- "${NOBODY[@]}" \
    "$PY" "$T/client.py" "$1" "$PORT"
  "${SSW_CMD[@]}" >"$T/n/$1.out" 2>"$T/n/$1.err"
  wait "$rpid"
  ssw_assert_eq "($1) root's client: wrong answers" "$(ssw_kv "$T/root.$1.out" bad)" 0
  ssw_assert_eq "($1) root's client: rounds" "$(ssw_kv "$T/root.$1.out" rounds)" 150
  # one scheduling hiccup may take tens of ms on a loaded host; a stall
  # behind the suspended connection takes the attacker's 1.2 s
  ssw_assert_le "($1) root's client: worst round trip, ms" "$(ssw_kv "$T/root.$1.out" worst_ms)" 500
  ssw_assert_eq "($1) the attacker's connection went through the switch" "$(ssw_stats_sum "$T/n/$1.stats" switched)" 1
}

attack suspend
ssw_assert_eq "(a) suspend: the server sent nothing while suspended" "$(ssw_kv "$T/n/suspend.out" early)" 0
ssw_assert_eq "(a) suspend: every staged reply after RESUME, in order" "$(ssw_kv "$T/n/suspend.out" in_order)" 1

attack resume
ssw_assert_eq "(b) resume out of turn: the attacker's connection reset" "$(ssw_kv "$T/n/resume.out" outcome)" reset
attack suspended
ssw_assert_eq "(c) SUSPENDED unasked: the attacker's connection reset" "$(ssw_kv "$T/n/suspended.out" outcome)" reset

wait "$SPID"
ssw_assert_eq "server: connections it saw reset" "$(ssw_kv "$T/server.out" resets)" 2
ssw_assert_le "server: longest sendall, ms (staged, not blocked behind the suspended peer)" \
  "$(ssw_kv "$T/server.out" send_ms_max)" 300
ssw_assert_ge "server: suspended by a peer" "$(ssw_stats_sum "$T/server.stats" suspended)" 1
ssw_assert_ge "server: bytes staged meanwhile" "$(ssw_stats_sum "$T/server.stats" staged_bytes)" 30
ssw_assert_eq "server: fallback connections" "$(ssw_stats_sum "$T/server.stats" fallback)" 0
ssw_assert_ge "server: switched connections" "$(ssw_stats_sum "$T/server.stats" switched)" 6
ssw_check "server log: RESUME while not suspended" grep -q 'RESUME while not suspended' "$T/server.log"
ssw_check "server log: SUSPENDED not asked for" grep -q 'SUSPENDED not asked for' "$T/server.log"
ssw_assert_le "kernel TCP segments" "$(( $(ssw_outsegs) - segs0 ))" 20
ssw_assert_no_sanitizer_report "$T"/*.err "$T"/n/*.err
ssw_finish
