#!/usr/bin/env bash
# t_scm_handover — a switched connection sent to another process over
# SCM_RIGHTS is taken over by that process's switch from the relay that
# carried it (issue 20, case 2: share/handover_pass.c), not relayed for ever:
# a master accepts, reads a little, sends the connection to a worker over a
# Unix socket and closes its copy, as pre-forked servers and fd-passing
# supervisors do.  Both ends switched.
#  (a) stream: bytes the client sent before the pass and the master had not
#      read (the relay had already handed them to the application's end)
#      are read by the worker first, then 4 MiB more, echoed back upper-cased;
#  (b) abort: the worker sets SO_LINGER {1, 0} and closes: the client's
#      read says ECONNRESET (a relay made it end-of-file);
#  (c) urgent data sent after the pass arrives out of band;
#  (d) the master keeps its copy open for a while after sending (its later
#      close ends nothing: the worker owns the connection);
#  (e) a worker without the switch: the relay carries the connection, and
#      nobody (another user) asking the relay for it, with a descriptor that
#      is not the application's end or with none, is refused: data checked.
# Each: data checked, `adopted` in the worker's stats, no relay left behind,
# kernel TCP segments flat.
source "$(dirname "$0")/lib.sh"
[ "$(id -u)" = 0 ] || { echo "SKIP: must run as root (plays nobody)"; exit 77; }
id nobody >/dev/null 2>&1 || { echo "SKIP: no user nobody"; exit 77; }
ssw_enter_netns "$@"
ssw_setup_preload
ssw_tmpdir
chmod 755 "$T"; mkdir -m 1777 "$T/n"
PY=$SSW_PYTHON
export SOCKSWITCH_LOG=${SH_LOG:-info}
NOBODY=(setpriv --reuid=nobody --regid="$(id -g nobody)" --clear-groups)

cp "$SSW_PROGS/handover_roles.py" "$T/"
cat >"$T/master.py" <<'PY'
import os, select, socket, subprocess, sys, time
from handover_roles import recv_exact
mode, port, tag, worker = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]

a, b = socket.socketpair()
env = dict(os.environ)
env["SOCKSWITCH_STATS_FILE"] = tag + "-worker.stats"
if mode == "plain":           # a worker without the switch
    env.pop("LD_PRELOAD", None)
w = subprocess.Popen([sys.executable, worker, mode, str(b.fileno()), tag], pass_fds=[b.fileno()], env=env,
                     stdout=open(tag + "-worker.out", "w"), stderr=open(tag + "-worker.err", "w"))
b.close()
l = socket.socket()
l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
l.bind(("127.0.0.1", port))
l.listen(8)
open(tag + ".ready", "w").write("1")
c, _ = l.accept()
l.close()
if mode in ("stream", "keep"):
    pre = recv_exact(c, 6)             # "hello:" read here, the rest left unread
    assert pre == b"hello:", pre
    select.select([], [], [], 0.2)     # more is waiting when the connection is sent
socket.send_fds(a, [b"c"], [c.fileno()])
if mode == "keep":
    time.sleep(0.5)                    # the worker is busy with it meanwhile
c.close()
w.wait()
print("master worker-exit=%d" % w.returncode, flush=True)
PY

cat >"$T/worker.py" <<'PY'
import os, select, socket, sys
from handover_roles import serve
mode, sfd, tag = sys.argv[1], int(sys.argv[2]), sys.argv[3]
u = socket.socket(fileno=sfd)
msg, fds, _, _ = socket.recv_fds(u, 10, 4)
s = socket.socket(fileno=fds[0])

if mode in ("stream", "keep", "plain"):
    if mode == "plain":
        # tell nobody where the relay listens (the name its end is connected to)
        open(os.path.dirname(tag) + "/n/relay.name", "w").write(s.getpeername().hex())
        while not os.path.exists(os.path.dirname(tag) + "/n/done"):
            select.select([], [], [], 0.05)
    family = s.family
    print("worker-%s bytes=%d family=%d" % (mode, serve(s, "stream"), family), flush=True)
elif mode == "abort":
    serve(s, "abort")
    print("worker-abort closed", flush=True)
elif mode == "urg":
    serve(s, "urg")
    print("worker-urg done", flush=True)
PY

cat >"$T/cli.py" <<'PY'
import os, socket, sys
from handover_roles import read_abort, send_stream, send_urg
mode, port = sys.argv[1], int(sys.argv[2])
c = socket.create_connection(("127.0.0.1", port))
if mode in ("stream", "keep", "plain"):
    body = os.urandom(2 << 20).hex().encode()
    got, rate = send_stream(c, b"hello:" + body[:65536] if mode != "plain" else body[:65536], body[65536:], 0.5, False)
    print("%s ok=%d len=%d MiB/s=%.0f" % (mode, got == body.upper(), len(got), rate))
elif mode == "abort":
    print("abort %s" % read_abort(c))
elif mode == "urg":
    print("urg %s" % send_urg(c, False))
PY

# nobody asks a relay for a connection it does not hold: with its own
# socket's descriptor, then with none (the name: what the worker wrote).
cat >"$T/n/ask.py" <<'PY'
import array, socket, sys
name = bytes.fromhex(open(sys.argv[1]).read().strip())
res = []
for fds in ([socket.socketpair()[0].fileno()], []):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.connect(name)
    except OSError as e:
        res.append("connect:%s" % e.errno); continue
    req = array.array("I", [0x53505353, 1]).tobytes()
    try:
        if fds:
            socket.send_fds(s, [req], fds)
        else:
            s.sendall(req)
        s.settimeout(3)
        d = s.recv(100)
        res.append("answer:%d" % len(d))
    except OSError as e:
        res.append("err:%s" % e.errno)
print("ask " + " ".join(res))
PY

run_case() { # mode port
  local mode=$1 port=$2
  rm -f "$T/$mode.ready"
  local keep=0
  [ "$mode" = plain ] && keep=1 # its worker's environment drops the switch: not given back
  ssw_bg "master-$mode" switched SOCKSWITCH_STATS_FILE="$T/$mode-master.stats" SOCKSWITCH_NO_EXEC_KEEP=$keep -- \
    "$PY" "$T/master.py" "$mode" "$port" "$T/$mode" "$T/worker.py"
  local mpid=$SSW_BG_PID
  ssw_wait_file "$T/$mode.ready" 10 || ssw_fail "($mode) the master did not listen"
  if [ "$mode" = plain ]; then
    ( ssw_wait_file "$T/n/relay.name" 10 && "${NOBODY[@]}" "$PY" "$T/n/ask.py" "$T/n/relay.name" >"$T/n/ask.out" 2>&1;
      touch "$T/n/done" ) &
  fi
  ssw_run switched SOCKSWITCH_STATS_FILE="$T/$mode-cli.stats" -- "$PY" "$T/cli.py" "$mode" "$port" \
    >"$T/$mode-cli.out" 2>"$T/$mode-cli.err"
  ssw_assert_eq "($mode) client exit status" $? 0
  wait "$mpid" 2>/dev/null
  ssw_assert_eq "($mode) the worker ended well" "$(cat "$T/master-$mode.out")" "master worker-exit=0"
}

# relays in this test's network namespace (other tests' relays come and go)
relays() {
  local me n=0 p
  me=$(readlink /proc/self/ns/net)
  for p in $(pgrep -x ssw-relay); do
    [ "$(readlink "/proc/$p/ns/net" 2>/dev/null)" = "$me" ] && n=$((n + 1))
  done
  echo "$n"
}
r0=$(relays)
seg0=$(ssw_outsegs)
ssw_step "(a) a master sends a client's connection to a worker: unread bytes and a 4 MiB stream"
run_case stream 7971
ssw_assert_eq "(a) the client got its bytes back upper-cased" "$(grep -c '^stream ok=1 ' "$T/stream-cli.out")" 1
ssw_assert_eq "(a) the worker read every byte the master left, as a TCP socket" "$(cat "$T/stream-worker.out")" "worker-stream bytes=$((4 << 20)) family=2"
ssw_assert_eq "(a) the worker took the connection over" "$(ssw_stats_sum "$T/stream-worker.stats" adopted)" 1
ssw_assert_eq "(a) from its relay" "$(grep -c 'taken over from its relay' "$T/stream-worker.err")" 1
grep -o 'MiB/s=[0-9]*' "$T/stream-cli.out" | sed 's/^/# (a) stream after the pass: /' >&"$SSW_LOG_FD"

ssw_step "(b) SO_LINGER {1, 0} and close in the worker: the peer sees a reset"
run_case abort 7972
ssw_assert_eq "(b) the client's read" "$(cat "$T/abort-cli.out")" "abort ECONNRESET"
ssw_assert_eq "(b) the worker took the connection over" "$(ssw_stats_sum "$T/abort-worker.stats" adopted)" 1

ssw_step "(c) urgent data after the pass"
run_case urg 7973
ssw_assert_eq "(c) the worker read the urgent byte out of band" "$(cat "$T/urg-cli.out")" "urg got:abc/!"
ssw_assert_eq "(c) the worker took the connection over" "$(ssw_stats_sum "$T/urg-worker.stats" adopted)" 1

ssw_step "(d) the master keeps its copy for a while after sending"
run_case keep 7974
ssw_assert_eq "(d) the client got its bytes back" "$(grep -c '^keep ok=1 ' "$T/keep-cli.out")" 1
ssw_assert_eq "(d) the worker read every byte" "$(cat "$T/keep-worker.out")" "worker-keep bytes=$((4 << 20)) family=2"
ssw_assert_eq "(d) the worker took the connection over" "$(ssw_stats_sum "$T/keep-worker.stats" adopted)" 1

segs=$(( $(ssw_outsegs) - seg0 ))
ssw_assert_le "kernel TCP segments (4 connections' set-up and end)" "$segs" $((4 * SSW_CONN_SEGS))
for i in $(seq 20); do [ "$(relays)" = "$r0" ] && break; sleep 0.1; done
ps -o pid,ppid,etimes,args -C ssw-relay >&"$SSW_LOG_FD" 2>&1 || true
ssw_assert_eq "no relay left behind" "$(relays)" "$r0"

ssw_step "(e) a worker without the switch keeps the relay; nobody asking the relay is refused"
run_case plain 7975
ssw_assert_eq "(e) the client got its bytes back (through the relay)" "$(grep -c '^plain ok=1 ' "$T/plain-cli.out")" 1
ssw_assert_eq "(e) the worker read every byte (a relay: a Unix socket underneath)" "$(cat "$T/plain-worker.out")" "worker-plain bytes=$((4 << 20)) family=1"
ssw_assert_eq "(e) nobody's requests: refused without an answer" "$(cat "$T/n/ask.out")" "ask answer:0 answer:0"
ssw_assert_eq "(e) the worker took nothing over" "$(ssw_stats_sum "$T/plain-worker.stats" adopted)" 0

for m in stream abort urg keep plain; do
  ssw_assert_ge "($m) client switched" "$(ssw_stats_sum "$T/$m-cli.stats" switched)" 1
  ssw_assert_eq "($m) client fallback" "$(ssw_stats_sum "$T/$m-cli.stats" fallback)" 0
done
ssw_assert_no_sanitizer_report "$T"/*.err
ssw_finish
