#!/usr/bin/env bash
# t_fabric_fail — failures across two namespaces (route `10.77.0.0/16 fabric
# provider=tcp`), each run with plain and with switched programs in the same
# run, kernel TCP being the reference:
#   - a port nothing listens on: connect fails with ECONNREFUSED at once,
#     blocking and non-blocking (poll, then SO_ERROR); "at once" is 0.5 s for
#     the second attempt, 5 s for a process's first, which loads libfabric
#     (0.3 s on a quiet host, over 1 s on a loaded one);
#   - a port whose switched listener was closed (after one connection over it
#     worked): ECONNREFUSED at once, no fallback that hangs or connects;
#   - a peer killed mid-transfer (SIGKILL): the receiver killed while the
#     sender streams — the sender's send fails (ECONNRESET or EPIPE); the
#     sender killed while the receiver reads — the receiver sees EOF or
#     ECONNRESET after the bytes that arrived; the server killed while the
#     client waits for a reply — EOF or ECONNRESET.  Each within 10 s, never a
#     hang; nothing received that was not sent (the stream is a prefix).
# a hang must cost seconds, not minutes: every command is bounded
SSW_TIMEOUT=${SSW_TIMEOUT:-20}
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/netns.sh"
ssw_fabric_pair_setup
A=$SSW_NS_A B=$SSW_NS_B HA=$SSW_NS_ADDR_A
BOUND=10

# ff.py — the plain programs of this test (nothing in them knows the switch)
cat >"$T/ff.py" <<'EOF'
import errno, os, select, socket, sys, time
role = sys.argv[1]
def ename(e): return errno.errorcode.get(e, str(e))
def portfile(path, l):
    open(path + ".tmp", "w").write("%d\n" % l.getsockname()[1]); os.rename(path + ".tmp", path)
def wait_file(path, limit=20):
    end = time.time() + limit
    while not os.path.exists(path):
        if time.time() > end: sys.exit("waited in vain for " + path)
        time.sleep(0.01)
if role == "connect":           # HOST PORT: blocking then non-blocking connect, print the outcomes
    host, port = sys.argv[2], int(sys.argv[3])
    t0 = time.perf_counter()
    s = socket.socket()
    try:
        s.connect((host, port)); r1 = "connected"
    except OSError as e:
        r1 = ename(e.errno)
    t1 = time.perf_counter()
    s.close()
    s = socket.socket(); s.setblocking(False)
    e = s.connect_ex((host, port))
    if e == errno.EINPROGRESS:
        p = select.poll(); p.register(s, select.POLLOUT); p.poll(15000)
        e = s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
    r2 = "connected" if e == 0 else ename(e)
    t2 = time.perf_counter()
    # the first attempt of a process may load libfabric (its dependencies
    # libinfinipath and libpsm2 calibrate a clock for 100 ms each at load)
    print("RESULT blocking=%s nonblocking=%s ms=%d first_ms=%d" % (r1, r2, (t2 - t1) * 1000, (t1 - t0) * 1000), flush=True)
elif role == "closing-server":  # PORTFILE CLOSEFILE CLOSEDFILE HOST: serve one, close the listener
    l = socket.socket(); l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    l.bind((sys.argv[5], 0)); l.listen(4); portfile(sys.argv[2], l)
    c, _ = l.accept(); c.sendall(b"hi"); c.close()
    wait_file(sys.argv[3]); l.close(); open(sys.argv[4], "w").write("closed\n")
    time.sleep(30)              # alive, listener closed, until killed
elif role == "sink":            # PORTFILE HOST READ_SLOWLY: accept one, read (slowly: stall after 64 KiB)
    l = socket.socket(); l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    l.bind((sys.argv[3], 0)); l.listen(4); portfile(sys.argv[2], l)
    c, _ = l.accept()
    got = 0; t0 = None; res = None
    while True:
        if sys.argv[4] == "1" and got >= 65536:
            time.sleep(30)      # stops reading: killed here
        try:
            d = c.recv(65536)
        except OSError as e:
            res = ename(e.errno); break
        if t0 is None: print("READY", flush=True)
        t0 = t0 or time.perf_counter()
        if not d: res = "EOF"; break
        if d.strip(b"s"): res = "GARBAGE"; break
        got += len(d)
    print("RESULT end=%s bytes=%d" % (res, got), flush=True)
elif role == "source":          # HOST PORT: send until the send fails; say how and after how long past READYFILE
    s = socket.create_connection((sys.argv[2], int(sys.argv[3])), timeout=60)
    chunk = b"s" * 65536; sent = 0; res = None; tk = None
    while True:
        if tk is None and os.path.exists(sys.argv[4]): tk = time.perf_counter()
        try:
            sent += s.send(chunk)
        except OSError as e:
            res = ename(e.errno); break
        if sent > (8 << 30): res = "NEVER_FAILED"; break
    ms = (time.perf_counter() - tk) * 1000 if tk else -1
    print("RESULT end=%s sent=%d ms_after_kill=%d" % (res, sent, ms), flush=True)
elif role == "talker":          # HOST PORT: send 1 MiB, then keep sending slowly until killed
    s = socket.create_connection((sys.argv[2], int(sys.argv[3])), timeout=60)
    s.sendall(b"s" * (1 << 20)); print("SENT", flush=True)
    while True:
        time.sleep(0.05); s.sendall(b"s" * 100)
elif role == "reply-server":    # PORTFILE HOST: accept, read a request, never answer (killed)
    l = socket.socket(); l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    l.bind((sys.argv[3], 0)); l.listen(4); portfile(sys.argv[2], l)
    c, _ = l.accept(); c.recv(100); print("READY", flush=True); time.sleep(60)
elif role == "waiter":          # HOST PORT: send a request, wait for the reply that never comes
    s = socket.create_connection((sys.argv[2], int(sys.argv[3])), timeout=60)
    s.sendall(b"request"); res = None
    try:
        d = s.recv(100); res = "EOF" if not d else "DATA"
    except OSError as e:
        res = ename(e.errno)
    print("RESULT end=%s" % res, flush=True)
EOF
FF=("$SSW_PYTHON" "$T/ff.py")

# kill_prog BGPID — SIGKILL the program under the timeout process ssw_ns_bg started (by pid)
kill_prog() { # BGPID
  local p; p=$(pgrep -P "$1" 2>/dev/null | head -n 1)
  kill -9 "${p:-$1}" 2>/dev/null
}

# await_end BGPID WHAT — the survivor must end within BOUND s (never a hang)
await_end() {
  local t0=$SECONDS
  while kill -0 "$1" 2>/dev/null && [ $((SECONDS - t0)) -lt $BOUND ]; do sleep 0.1; done
  if kill -0 "$1" 2>/dev/null; then
    ssw_fail "$2 after ${BOUND} s"; kill_prog "$1"
  fi
}

for mode in plain switched; do
  # ---- refused: nothing listens
  ssw_ns_run "$B" "$mode" SOCKSWITCH_STATS_FILE="$T/refused-$mode.stats" -- \
    "${FF[@]}" connect "$HA" 7 >"$T/refused-$mode.out" 2>"$T/refused-$mode.err"
  ssw_assert_eq "$mode refused: connect to a port nobody listens on" \
    "$(sed -n 's/^RESULT \(blocking=[^ ]* nonblocking=[^ ]*\).*/\1/p' "$T/refused-$mode.out")" \
    "blocking=ECONNREFUSED nonblocking=ECONNREFUSED"
  ssw_assert_le "$mode refused: at once (ms)" "$(ssw_kv "$T/refused-$mode.out" ms)" 500
  ssw_assert_le "$mode refused: first attempt, with the library load (ms)" "$(ssw_kv "$T/refused-$mode.out" first_ms)" 5000

  # ---- refused: the switched listener was closed
  rm -f "$T/closing-$mode".*
  ssw_ns_bg "closing-$mode-server" "$A" "$mode" -- \
    "${FF[@]}" closing-server "$T/closing-$mode.port" "$T/closing-$mode.close" "$T/closing-$mode.closed" "$HA"
  spid=$SSW_BG_PID
  ssw_wait_file "$T/closing-$mode.port" 20 || ssw_fail "$mode closed listener: server did not start"
  P=$(cat "$T/closing-$mode.port")
  got=$(ssw_ns_run "$B" "$mode" SOCKSWITCH_STATS_FILE="$T/closing-client-$mode.stats" -- "$SSW_PYTHON" -c 'import socket, sys
s = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=20); print(s.recv(10).decode())' "$HA" "$P" 2>&1)
  ssw_assert_eq "$mode closed listener: a connection while it listened" "$got" hi
  touch "$T/closing-$mode.close"
  ssw_wait_file "$T/closing-$mode.closed" 20
  ssw_ns_run "$B" "$mode" -- "${FF[@]}" connect "$HA" "$P" >"$T/closed-$mode.out" 2>"$T/closed-$mode.err"
  ssw_assert_eq "$mode closed listener: connect after the close" \
    "$(sed -n 's/^RESULT \(blocking=[^ ]* nonblocking=[^ ]*\).*/\1/p' "$T/closed-$mode.out")" \
    "blocking=ECONNREFUSED nonblocking=ECONNREFUSED"
  ssw_assert_le "$mode closed listener: at once (ms)" "$(ssw_kv "$T/closed-$mode.out" ms)" 500
  ssw_assert_le "$mode closed listener: first attempt, with the library load (ms)" "$(ssw_kv "$T/closed-$mode.out" first_ms)" 5000
  kill_prog "$spid"; wait "$spid" 2>/dev/null

  # ---- the receiver killed while the sender streams
  rm -f "$T/rk-$mode".*
  ssw_ns_bg "rk-$mode-server" "$A" "$mode" -- "${FF[@]}" sink "$T/rk-$mode.port" "$HA" 1
  spid=$SSW_BG_PID
  ssw_wait_file "$T/rk-$mode.port" 20 || ssw_fail "$mode receiver killed: server did not start"
  ssw_ns_bg "rk-$mode-client" "$B" "$mode" SOCKSWITCH_STATS_FILE="$T/survivors-$mode.stats" -- "${FF[@]}" source "$HA" "$(cat "$T/rk-$mode.port")" "$T/rk-$mode.killed"
  cpid=$SSW_BG_PID
  ssw_wait_file "$T/rk-$mode-server.out" 20 || ssw_fail "$mode receiver killed: no data arrived"
  sleep 0.3                      # the sender fills the buffers and blocks
  kill_prog "$spid"; touch "$T/rk-$mode.killed"
  await_end "$cpid" "$mode receiver killed: the sender still blocked"
  wait "$cpid" 2>/dev/null; wait "$spid" 2>/dev/null
  end=$(ssw_kv "$T/rk-$mode-client.out" end)
  ssw_check "$mode receiver killed: the sender's send failed with ECONNRESET or EPIPE (got '${end}')" \
    test "$end" = ECONNRESET -o "$end" = EPIPE

  # ---- the sender killed while the receiver reads
  rm -f "$T/sk-$mode".*
  ssw_ns_bg "sk-$mode-server" "$A" "$mode" SOCKSWITCH_STATS_FILE="$T/survivors-$mode.stats" -- "${FF[@]}" sink "$T/sk-$mode.port" "$HA" 0
  spid=$SSW_BG_PID
  ssw_wait_file "$T/sk-$mode.port" 20 || ssw_fail "$mode sender killed: server did not start"
  ssw_ns_bg "sk-$mode-client" "$B" "$mode" -- "${FF[@]}" talker "$HA" "$(cat "$T/sk-$mode.port")"
  cpid=$SSW_BG_PID
  ssw_wait_file "$T/sk-$mode-client.out" 20 || ssw_fail "$mode sender killed: the 1 MiB was not sent"
  sleep 0.2
  kill_prog "$cpid"
  await_end "$spid" "$mode sender killed: the receiver still blocked"
  wait "$spid" 2>/dev/null; wait "$cpid" 2>/dev/null
  end=$(ssw_kv "$T/sk-$mode-server.out" end)
  ssw_check "$mode sender killed: the receiver saw EOF or ECONNRESET (got '${end}')" test "$end" = EOF -o "$end" = ECONNRESET
  ssw_assert_ge "$mode sender killed: the receiver got the 1 MiB sent before" "$(ssw_kv "$T/sk-$mode-server.out" bytes)" $((1 << 20))

  # ---- the server killed while the client waits for its reply
  rm -f "$T/wk-$mode".*
  ssw_ns_bg "wk-$mode-server" "$A" "$mode" -- "${FF[@]}" reply-server "$T/wk-$mode.port" "$HA"
  spid=$SSW_BG_PID
  ssw_wait_file "$T/wk-$mode.port" 20 || ssw_fail "$mode server killed: server did not start"
  ssw_ns_bg "wk-$mode-client" "$B" "$mode" SOCKSWITCH_STATS_FILE="$T/survivors-$mode.stats" -- "${FF[@]}" waiter "$HA" "$(cat "$T/wk-$mode.port")"
  cpid=$SSW_BG_PID
  ssw_wait_file "$T/wk-$mode-server.out" 20 || ssw_fail "$mode server killed: no request arrived"
  sleep 0.2
  kill_prog "$spid"
  await_end "$cpid" "$mode server killed: the client still waiting"
  wait "$cpid" 2>/dev/null; wait "$spid" 2>/dev/null
  end=$(ssw_kv "$T/wk-$mode-client.out" end)
  ssw_check "$mode server killed: the waiting client saw EOF or ECONNRESET (got '${end}')" test "$end" = EOF -o "$end" = ECONNRESET
done

# the switched runs of the killed-peer cases went over the route: the
# survivors (the killed side writes no stats) switched or fell back
if [ "$SSW_NS_EXPECT" = fabric ]; then
  ssw_assert_eq "switched: the 3 surviving sides were switched" "$(ssw_stats_sum "$T/survivors-switched.stats" switched)" 3
  ssw_assert_eq "switched closed listener: the connection made while it listened was switched" \
    "$(ssw_stats_sum "$T/closing-client-switched.stats" switched)" 1
else
  ssw_assert_eq "switched: the 3 surviving sides were not switched (expecting kernel TCP)" \
    "$(ssw_stats_sum "$T/survivors-switched.stats" switched)" 0
fi
ssw_assert_no_sanitizer_report "$T"/*.err
ssw_finish
