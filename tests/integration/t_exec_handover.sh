#!/usr/bin/env bash
# t_exec_handover — a connected switched socket carried across exec is taken
# over by the new image itself (issue 20, case 2: seed 000's duplicate and
# adopt), not relayed: a server that re-execs itself with a client's
# connection goes on with it at full speed, both ends switched.
#  (a) stream: bytes the client sent before the exec and the server had not
#      read are read after it, then 4 MiB more, echoed back upper-cased;
#  (b) abort: after the exec SO_LINGER {1, 0} and close: the client's read
#      says ECONNRESET (a relay made it end-of-file);
#  (c) urgent data sent after the exec arrives out of band (a relay dropped it);
#  (d) a wrapper script (`#!/bin/sh`, command substitutions, then `exec
#      python`): the commands it runs share the connection through relays
#      that take nothing they do not read, a command that reads what it is
#      given (`head -c`) gets it and answers, and the final program takes the
#      connection over with every other byte there;
#  (e) an exec that fails leaves the connection working in the old image.
# Each: data checked, `adopted` in the exec'd image's stats, no relay where
# none is needed (the switch's log), kernel TCP segments flat.
source "$(dirname "$0")/lib.sh"
ssw_enter_netns "$@"
ssw_setup_preload
ssw_tmpdir
PY=$SSW_PYTHON
export SOCKSWITCH_LOG=${EH_LOG:-info}

cp "$SSW_PROGS/handover_roles.py" "$T/"
cat >"$T/srv.py" <<'PY'
import os, select, socket, struct, sys
from handover_roles import echo_upper, recv_exact, serve
mode, port = sys.argv[1], int(sys.argv[2])
here = os.path.abspath(__file__)

if mode == "after":          # the new image: argv[3] the connection's fd, argv[4] what to do
    s = socket.socket(fileno=int(sys.argv[3]))
    what = sys.argv[4]
    if what == "stream":
        n = serve(s, "stream")
        print("after-stream bytes=%d" % n, flush=True)
    elif what == "abort":
        serve(s, "abort")
        print("after-abort closed", flush=True)
    elif what == "urg":
        serve(s, "urg")
    elif what == "wrapped":
        n = echo_upper(s)
        print("after-wrapped bytes=%d" % n, flush=True)
    sys.exit(0)

l = socket.socket()
l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
l.bind(("127.0.0.1", port))
l.listen(8)
open(sys.argv[3] + ".ready", "w").write("1")
c, _ = l.accept()
l.close()
fd = c.fileno()
os.set_inheritable(fd, True)
if mode in ("stream", "abort", "urg"):
    if mode == "stream":
        pre = recv_exact(c, 6)             # "hello:" read here, the rest left unread
        assert pre == b"hello:", pre
        select.select([], [], [], 0.2)     # more is waiting when the exec comes
    os.execv(sys.executable, [sys.executable, here, "after", "0", str(fd), mode])
elif mode == "wrapped":
    os.execv("/bin/sh", ["/bin/sh", sys.argv[4], str(fd), sys.executable, here])
elif mode == "failing":
    try:
        os.execv("/nonexistent/program", ["x"])
    except OSError:
        pass
    n = echo_upper(c)
    print("failed-exec bytes=%d" % n, flush=True)
PY

cat >"$T/wrap.sh" <<'SH'
#!/bin/sh
# a launcher as many are: look around, then become the real program
fd=$1
X=$(readlink -f /bin/sh)
Y=$(date +%s)
# a command that reads what it is given and answers, on the connection
eval "head -c 1000 <&$fd | tr a-z A-Z >&$fd"
exec "$2" "$3" after 0 "$fd" wrapped
SH

cat >"$T/cli.py" <<'PY'
import os, socket, sys, time
from handover_roles import read_abort, recv_all, send_stream, send_urg
mode, port = sys.argv[1], int(sys.argv[2])
c = socket.create_connection(("127.0.0.1", port))
if mode == "stream":
    body = os.urandom(2 << 20).hex().encode()
    # part of it waits in the connection at the exec
    got, rate = send_stream(c, b"hello:" + body[:65536], body[65536:], 0.5, False)
    print("stream ok=%d len=%d MiB/s=%.0f" % (got == body.upper(), len(got), rate))
elif mode == "abort":
    print("abort %s" % read_abort(c))
elif mode == "urg":
    print("urg %s" % send_urg(c, False))
elif mode == "wrapped":
    first = bytes(range(97, 123)) * 38 + b"abcdefghijkl"   # 1000 bytes, lower case
    c.sendall(first)
    echo = b""
    while len(echo) < 1000:
        d = c.recv(1000 - len(echo))
        if not d:
            break
        echo += d
    body = b"the-rest-" * 100000
    import threading
    t = threading.Thread(target=lambda: (c.sendall(body), c.shutdown(socket.SHUT_WR)))
    t.start()
    got = recv_all(c); t.join()
    print("wrapped head=%d rest=%d" % (echo == first.upper(), got == body.upper()))
elif mode == "failing":
    body = b"after-a-failed-exec " * 5000
    c.sendall(body); c.shutdown(socket.SHUT_WR)
    print("failing ok=%d" % (recv_all(c) == body.upper()))
PY

run_case() { # mode port
  local mode=$1 port=$2
  rm -f "$T/$mode.ready"
  ssw_bg "srv-$mode" switched SOCKSWITCH_STATS_FILE="$T/$mode-srv.stats" -- \
    "$PY" "$T/srv.py" "$mode" "$port" "$T/$mode" "$T/wrap.sh"
  local spid=$SSW_BG_PID
  ssw_wait_file "$T/$mode.ready" 10 || ssw_fail "($mode) the server did not listen"
  ssw_run switched SOCKSWITCH_STATS_FILE="$T/$mode-cli.stats" -- "$PY" "$T/cli.py" "$mode" "$port" \
    >"$T/$mode-cli.out" 2>"$T/$mode-cli.err"
  ssw_assert_eq "($mode) client exit status" $? 0
  wait "$spid" 2>/dev/null
}

seg0=$(ssw_outsegs)
ssw_step "(a) a server re-execs itself with a client's connection: unread bytes and a 4 MiB stream"
run_case stream 7961
ssw_assert_eq "(a) the client got its bytes back upper-cased" "$(grep -c '^stream ok=1 ' "$T/stream-cli.out")" 1
ssw_assert_eq "(a) the new image read every byte the old one left" "$(cat "$T/srv-stream.out")" "after-stream bytes=$((4 << 20))"
ssw_assert_eq "(a) the new image took the connection over" "$(ssw_stats_sum "$T/stream-srv.stats" adopted)" 1
ssw_assert_eq "(a) no relay" "$(grep -c 'relay process' "$T/srv-stream.err")" 0
grep -o 'MiB/s=[0-9]*' "$T/stream-cli.out" | sed 's/^/# (a) stream after the exec: /' >&"$SSW_LOG_FD"

ssw_step "(b) SO_LINGER {1, 0} and close after the exec: the peer sees a reset"
run_case abort 7962
ssw_assert_eq "(b) the client's read" "$(cat "$T/abort-cli.out")" "abort ECONNRESET"
ssw_assert_eq "(b) the new image took the connection over" "$(ssw_stats_sum "$T/abort-srv.stats" adopted)" 1

ssw_step "(c) urgent data after the exec"
run_case urg 7963
ssw_assert_eq "(c) the new image read the urgent byte out of band" "$(cat "$T/urg-cli.out")" "urg got:abc/!"
ssw_assert_eq "(c) the new image took the connection over" "$(ssw_stats_sum "$T/urg-srv.stats" adopted)" 1

ssw_step "(d) a wrapper script runs commands with the connection, then execs the program"
run_case wrapped 7964
ssw_assert_eq "(d) head answered its 1000 bytes, the program every other byte" "$(cat "$T/wrapped-cli.out")" "wrapped head=1 rest=1"
ssw_assert_eq "(d) the program read exactly the bytes head left" "$(cat "$T/srv-wrapped.out")" "after-wrapped bytes=900000"
ssw_assert_eq "(d) the program took the connection over" "$(ssw_stats_sum "$T/wrapped-srv.stats" adopted)" 1
ssw_assert_eq "(d) so did the shell before it" "$(grep -c 'taken over across exec' "$T/srv-wrapped.err")" 2
ssw_assert_ge "(d) the commands had it through relays" "$(grep -c 'relay process' "$T/srv-wrapped.err")" 3

ssw_step "(e) an exec that fails"
run_case failing 7965
ssw_assert_eq "(e) the old image goes on with the connection" "$(cat "$T/failing-cli.out")" "failing ok=1"
ssw_assert_eq "(e) its server read everything" "$(cat "$T/srv-failing.out")" "failed-exec bytes=100000"

segs=$(( $(ssw_outsegs) - seg0 ))
ssw_assert_le "kernel TCP segments (5 connections' set-up and end)" "$segs" $((5 * SSW_CONN_SEGS))
for m in stream abort urg wrapped failing; do
  ssw_assert_ge "($m) client switched" "$(ssw_stats_sum "$T/$m-cli.stats" switched)" 1
  ssw_assert_eq "($m) client fallback" "$(ssw_stats_sum "$T/$m-cli.stats" fallback)" 0
done
ssw_assert_no_sanitizer_report "$T"/*.err
ssw_finish
