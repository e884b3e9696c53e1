#!/usr/bin/env bash
# t_fabric_exec — a connected fabric socket carried across exec is taken
# over by the new image itself (issue 20, case 2), not relayed: its
# endpoint lives in process memory, so the transport moves, as with
# control between processes (session_move.c): before the exec the image
# suspends the peer, takes in what it sent and parks the transport; the
# new image connects to the peer's offer at load and resumes it.  Server
# in A re-execs itself with a client's connection, client in B:
#  (a) stream: bytes the client sent before the exec and the server had
#      not read are read after it, then 2 MiB more, echoed back upper-cased;
#  (b) abort: after the exec SO_LINGER {1, 0} and close: the client's read
#      says ECONNRESET (a relay made it end-of-file);
#  (c) urgent data sent after the exec arrives out of band (a relay
#      dropped it);
#  (d) an exec that fails (E2BIG, after the transport was parked for it)
#      leaves the connection to the old image, which takes its transport
#      back: 2 MiB echoed;
#  (f) a peer in no call at the exec (it sleeps) cannot answer: the exec
#      waits 200 ms at most for it, then relays the connection, which
#      goes on (the peer answers and is resumed when it wakes): data
#      checked, the exec's delay bounded;
#  (e) SCM_RIGHTS: the server sends the connection to a worker process and
#      closes its copy; the worker's switch takes it from the relay that
#      carried it (share/handover_pass.c), the transport moving to the
#      worker: 2 MiB echoed by the worker.
# Each: data checked, `adopted` in the exec'd image's stats and a new
# transport taken by the client (`moved_in`), no relay (the server's log),
# the client switched with no fallback.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/netns.sh"
ssw_fabric_pair_setup
[ "${SSW_NS_EXPECT:-fabric}" = fabric ] || { echo "SKIP: needs fabric between the namespaces"; exit 77; }
A=$SSW_NS_A B=$SSW_NS_B HA=$SSW_NS_ADDR_A
chmod 755 "$T"

cp "$SSW_PROGS/handover_roles.py" "$T/"
cat >"$T/srv.py" <<'PY'
import os, select, socket, subprocess, sys, time
from handover_roles import recv_exact, serve
mode, host, portfile = sys.argv[1], sys.argv[2], sys.argv[3]
here = os.path.abspath(__file__)

if mode == "worker":         # (e): the connection comes over argv[4], a Unix socket
    u = socket.socket(fileno=int(sys.argv[4]))
    _, fds, _, _ = socket.recv_fds(u, 16, 1)
    print("RESULT worker_bytes=%d" % serve(socket.socket(fileno=fds[0]), "stream"), flush=True)
    sys.exit(0)
if mode == "after":          # the new image: argv[4] the connection's fd, argv[5] what to do
    if len(sys.argv) > 6:
        print("RESULT exec_ms=%d" % ((time.time() - float(sys.argv[6])) * 1000), flush=True)
    n = serve(socket.socket(fileno=int(sys.argv[4])), sys.argv[5])
    print("RESULT after=%s bytes=%d" % (sys.argv[5], n), flush=True)
    sys.exit(0)

l = socket.socket()
l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
l.bind((host, 0))
l.listen(8)
with open(portfile + ".tmp", "w") as f:
    f.write(str(l.getsockname()[1]))
os.rename(portfile + ".tmp", portfile)
c, _ = l.accept()
l.close()
fd = c.fileno()
os.set_inheritable(fd, True)
if mode in ("stream", "idle", "failing", "pass"):
    pre = recv_exact(c, 6)               # "hello:" read here, the rest left unread
    assert pre == b"hello:", pre
    select.select([], [], [], 0.2)       # more is waiting at the hand-over
if mode == "pass":
    a, b = socket.socketpair()
    w = subprocess.Popen([sys.executable, here, "worker", host, portfile, str(b.fileno())], pass_fds=[b.fileno()])
    b.close()
    socket.send_fds(a, [b"c"], [fd])
    c.close()
    sys.exit(w.wait())
if mode == "failing":
    try:                                 # a program that loads the switch, one argument too long: E2BIG
        os.execv(sys.executable, [sys.executable, "x" * 300000])
    except OSError:
        pass
    print("RESULT failed_exec_bytes=%d" % serve(c, "stream"), flush=True)
    sys.exit(0)
os.execv(sys.executable, [sys.executable, here, "after", host, portfile, str(fd), mode, str(time.time())])
PY

cat >"$T/cli.py" <<'PY'
import os, socket, sys
from handover_roles import read_abort, send_stream, send_urg
mode, host, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
c = socket.create_connection((host, port))
if mode in ("stream", "failing", "pass", "idle"):
    # stream, failing, pass: a reader in recv all along (a client awaiting
    # its answer answers the server's SUSPEND at once); idle: in no call
    # at all while the server execs, it cannot answer
    body = os.urandom(1 << 20).hex().encode()
    got, _ = send_stream(c, b"hello:" + body[:65536], body[65536:], 1.5 if mode == "idle" else 0.5, mode != "idle")
    print("RESULT stream_ok=%d len=%d" % (got == body.upper(), len(got)), flush=True)
elif mode == "abort":
    print("RESULT abort=%s" % read_abort(c), flush=True)
elif mode == "urg":
    print("RESULT urg=%s" % send_urg(c, True), flush=True)
PY

run_case() { # MODE
  local m=$1
  rm -f "$T/port"
  ssw_ns_bg "srv-$m" "$A" switched SOCKSWITCH_STATS_FILE="$T/srv-$m.stats" SOCKSWITCH_LOG_FILE="$T/srv-$m.log" \
    SOCKSWITCH_LOG=${TLOG:-info} -- "$SSW_PYTHON" "$T/srv.py" "$m" "$HA" "$T/port"
  local spid=$SSW_BG_PID
  ssw_wait_file "$T/port" 20 || { ssw_fail "$m: the server did not start"; return; }
  ssw_ns_wait_listen "$A" "$(cat "$T/port")" 10
  ssw_ns_bg "cli-$m" "$B" switched SOCKSWITCH_STATS_FILE="$T/cli-$m.stats" SOCKSWITCH_LOG_FILE="$T/cli-$m.log" \
    SOCKSWITCH_LOG=${TLOG:-info} -- "$SSW_PYTHON" "$T/cli.py" "$m" "$HA" "$(cat "$T/port")"
  local cpid=$SSW_BG_PID
  wait "$cpid"; echo "$?" >"$T/cli-$m.rc"
  wait "$spid"; echo "$?" >"$T/srv-$m.rc"
  ssw_assert_eq "$m: client exit status" "$(cat "$T/cli-$m.rc")" 0
  ssw_assert_eq "$m: server exit status" "$(cat "$T/srv-$m.rc")" 0
  ssw_assert_eq "$m: client switched" "$(ssw_stats_sum "$T/cli-$m.stats" switched)" 1
  ssw_assert_eq "$m: client fallback" "$(ssw_stats_sum "$T/cli-$m.stats" fallback)" 0
  if [ "$m" = idle ]; then
    ssw_check "$m: relayed (the server's log)" grep -q 'handed to a relay' "$T/srv-$m.log"
    return
  fi
  ssw_assert_ge "$m: the client took the new transport (moved_in)" "$(ssw_stats_sum "$T/cli-$m.stats" moved_in)" 1
  if [ "$m" = pass ]; then
    ssw_assert_eq "$m: taken over by the worker (adopted)" "$(ssw_stats_sum "$T/srv-$m.stats" adopted)" 1
    ssw_check "$m: the worker's log says it took the connection from the relay" \
      grep -q "taken over from its relay (SCM_RIGHTS) (fabric)" "$T/srv-$m.log"
    return
  fi
  ssw_check "$m: no relay (the server's log)" bash -c "! grep -q 'handed to a relay' '$T/srv-$m.log'"
  [ "$m" = failing ] && return
  ssw_assert_eq "$m: taken over by the exec'd image (adopted)" "$(ssw_stats_sum "$T/srv-$m.stats" adopted)" 1
  ssw_check "$m: the server's log says the connection was taken over across exec" \
    grep -q "taken over across exec (fabric)" "$T/srv-$m.log"
}

check_echo() { # MODE OUT-KEY DESCRIPTION: the client's data came back, all of it echoed
  ssw_assert_eq "$1: data $3" "$(ssw_kv "$T/cli-$1.out" stream_ok)" 1
  ssw_assert_eq "$1: bytes echoed $3" "$(ssw_kv "$T/srv-$1.out" "$2")" $((2 << 20))
}

ssw_step "(a) stream across the exec"
run_case stream
check_echo stream bytes "after the exec (the new image)"

ssw_step "(b) abort after the exec"
run_case abort
ssw_assert_eq "abort: the client's read" "$(ssw_kv "$T/cli-abort.out" abort)" ECONNRESET

ssw_step "(c) urgent data after the exec"
run_case urg
ssw_assert_eq "urg: what the new image got" "$(ssw_kv "$T/cli-urg.out" urg)" "got:abc/!"

ssw_step "(d) an exec that fails"
run_case failing
check_echo failing failed_exec_bytes "through the old image"

ssw_step "(f) a peer in no call at the exec"
run_case idle
check_echo idle bytes "through the relay"
ssw_assert_le "idle: the exec's delay in ms (the wait for the peer: 200 at most)" "$(ssw_kv "$T/srv-idle.out" exec_ms)" 1000

ssw_step "(e) passed to a worker with SCM_RIGHTS"
run_case pass
check_echo pass worker_bytes "through the worker"

ssw_assert_no_sanitizer_report "$T"/*.err
ssw_finish
