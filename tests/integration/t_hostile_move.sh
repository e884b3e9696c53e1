#!/usr/bin/env bash
# t_hostile_move — a hostile local user (nobody) against the listener that
# a suspended peer opens for a transport moving with control over fabric
# (switch/setup/move.c, session/session_move.c).  A client in B connects to
# root's server in A; in each of 50 rounds the parent asks, then a new
# child asks twice and exits (a control swap with a new transport, which
# the server takes through its move listener, then the parent's own lane
# again) while tests/progs/move_spoof, as nobody, dials every root listener it finds in A (the
# server's move listener: /proc/net/tcp shows it to anyone), and a second
# one in B dials the same listener from the client's host, each with:
# kernel TCP garbage, fabric connects under the move protocol with random
# tokens (guesses), and with random private data; in A it also tries to
# listen on the same port itself (plain, SO_REUSEADDR, SO_REUSEPORT,
# IP_FREEBIND, the wildcard, IPv6 dual-stack), to take the next transport.
# Checked: every answer right, one new transport per child and none
# more (no attacker's connect taken as a transport), no
# message ever reaches an attacker's connect, the server's log says it
# refused such connects, the server ends normally.
source "$(dirname "$0")/lib.sh"
[ "$(id -u)" = 0 ] || { echo "SKIP: must run as root (plays nobody against root's server)"; exit 77; }
id nobody >/dev/null 2>&1 || { echo "SKIP: no user nobody"; exit 77; }
command -v setpriv >/dev/null 2>&1 || { echo "FAIL: setpriv (util-linux) missing"; exit 1; }
source "$(dirname "$0")/netns.sh"
ssw_fabric_pair_setup
[ "${SSW_NS_EXPECT:-fabric}" = fabric ] || { echo "SKIP: needs fabric between the namespaces"; exit 77; }
A=$SSW_NS_A B=$SSW_NS_B HA=$SSW_NS_ADDR_A
chmod 755 "$T"
NOBODY=(setpriv --reuid=nobody --regid="$(id -g nobody)" --clear-groups)
SPOOF=$SSW_BUILD/tests/move_spoof
[ -x "$SPOOF" ] || { echo "FAIL: $SPOOF missing"; exit 1; }
ROUNDS=50

cat >"$T/client.py" <<'PY'
# rounds: the parent asks, then a new child asks twice and exits, so that
# each round the server takes a new transport through its move listener
# (the child's), while the attack runs; the parent goes on with its own
import os, socket, sys, time
host, port, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
s = socket.create_connection((host, port))
def ask(line):
    s.sendall(line + b"\n")
    d = b""
    while not d.endswith(b"\n"):
        x = s.recv(1)
        if not x: raise EOFError
        d += x
    return d == line.upper() + b"\n"
bad = 0
for r in range(n):
    rp, wp = os.pipe()
    kid = os.fork()
    if kid == 0:
        os.read(rp, 1) # the parent drives it after the fork: the child's turn is a swap
        k = 0
        for i in range(2):
            try: k += not ask(b"c%04d.%d" % (r, i))
            except (OSError, EOFError): k += 1
        os._exit(k)
    try: bad += not ask(b"p%04d" % r)
    except (OSError, EOFError): bad += 1
    os.write(wp, b"g")
    bad += os.waitpid(kid, 0)[1] >> 8
    os.close(rp); os.close(wp)
    time.sleep(0.03)
s.close()
print("RESULT bad=%d" % bad, flush=True)
PY

rm -f "$T/port"
ssw_ns_bg server "$A" switched SOCKSWITCH_STATS_FILE="$T/server.stats" SOCKSWITCH_LOG_FILE="$T/server.log" \
  SOCKSWITCH_LOG=${TLOG:-warn} -- "$SSW_PYTHON" "$SSW_PROGS/upper_server.py" "$HA" "$T/port"
SPID=$SSW_BG_PID
ssw_wait_file "$T/port" 20 || ssw_fail "the server did not start"
PORT=$(cat "$T/port" 2>/dev/null)

# nobody in A: every root listener but the application's own (and its
# fabric twin, port + 10000) — the move listener appears at the first swap
ssw_step "nobody in $A attacks root's listeners while the turns run"
ip netns exec "$A" "${NOBODY[@]}" timeout 20 "$SPOOF" 3 "$PORT" "$((PORT + 10000))" >"$T/spoof-a.out" 2>"$T/spoof-a.err" &
APID=$!
ssw_step "client: $ROUNDS rounds, each a new child"
ssw_ns_bg client "$B" switched SOCKSWITCH_STATS_FILE="$T/client.stats" SOCKSWITCH_LOG_FILE="$T/client.log" \
  SOCKSWITCH_LOG=${TLOG:-warn} -- "$SSW_PYTHON" "$T/client.py" "$HA" "$PORT" "$ROUNDS"
CPID=$SSW_BG_PID
# the same listener dialed from the client's host (B), where it is not
# listed: the test reads its address in A
MOVE=""
for _ in $(seq 50); do
  MOVE=$(ip netns exec "$A" ss -Hltn 2>/dev/null | awk -v p="$PORT" -v q="$((PORT + 10000))" \
    '{n=split($4, x, ":"); if (x[n] != p && x[n] != q) {print $4; exit}}')
  [ -n "$MOVE" ] && break
  sleep 0.1
done
ssw_check "the server's move listener found (in $A: ${MOVE:-none})" test -n "$MOVE"
ip netns exec "$B" "${NOBODY[@]}" env MOVE_SPOOF_TARGETS="$MOVE" timeout 20 "$SPOOF" 2 >"$T/spoof-b.out" 2>"$T/spoof-b.err" &
BPID=$!
wait "$APID" "$BPID"
wait "$CPID"; echo "$?" >"$T/client.rc"
wait "$SPID"; echo "$?" >"$T/server.rc"

ssw_step "attacker in A: $(cat "$T/spoof-a.out" 2>/dev/null)"
ssw_step "attacker in B: $(cat "$T/spoof-b.out" 2>/dev/null)"
ssw_assert_eq "client exit status" "$(cat "$T/client.rc")" 0
ssw_assert_eq "wrong answers" "$(ssw_kv "$T/client.out" bad)" 0
ssw_assert_eq "lines the server answered" "$(ssw_kv "$T/server.out" server_lines)" $((3 * ROUNDS))
ssw_assert_eq "server exit status" "$(cat "$T/server.rc")" 0
# each child's transport came through the listener under attack (and
# the parent's, when its own lane was closed: about one round in two, as
# without the attack), never one of the attacker's
ssw_assert_ge "transports the server took new (one per child at least)" "$(ssw_stats_sum "$T/server.stats" moved_in)" "$ROUNDS"
ssw_assert_le "transports the server took new (two a round at most)" \
  "$(ssw_stats_sum "$T/server.stats" moved_in)" $((2 * ROUNDS))
ssw_assert_eq "client switched" "$(ssw_stats_sum "$T/client.stats" switched)" 1
ssw_assert_eq "client fallback" "$(ssw_stats_sum "$T/client.stats" fallback)" 0
for side in a b; do
  ssw_assert_ge "attacker in ${side^^}: listeners dialed" "$(ssw_kv "$T/spoof-$side.out" ports)" 1
  ssw_assert_ge "attacker in ${side^^}: kernel TCP connects with garbage" "$(ssw_kv "$T/spoof-$side.out" raw)" 10
  ssw_assert_ge "attacker in ${side^^}: fabric connects with guessed tokens" "$(ssw_kv "$T/spoof-$side.out" forged)" 10
  ssw_assert_ge "attacker in ${side^^}: fabric connects with garbage" "$(ssw_kv "$T/spoof-$side.out" garbage)" 10
  ssw_assert_eq "attacker in ${side^^}: messages received on its connects" "$(ssw_kv "$T/spoof-$side.out" leaked)" 0
done
ssw_assert_ge "attacker in A: listens tried on the move listener's port" "$(ssw_kv "$T/spoof-a.out" squats)" 6
ssw_assert_eq "attacker in A: listens that took the port (kernel port ownership)" "$(ssw_kv "$T/spoof-a.out" squatted)" 0
ssw_check "the server's log names the refused connects" grep -q "refused a connection to this process's transport-move listener" "$T/server.log"
ssw_assert_quiet "$T/client.err"
ssw_assert_no_sanitizer_report "$T"/*.err
ssw_finish
