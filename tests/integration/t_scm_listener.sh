#!/usr/bin/env bash
# t_scm_listener — a listening socket sent to another process with
# SCM_RIGHTS (a supervisor handing its listener to a worker, a hot restart
# handing listeners to the new binary) while the sender keeps it open and
# never accepts: the worker's accept must serve the clients, as on kernel
# TCP.  The sender's listener lets go of its provider listeners when it
# sends it (share/relay.c; before, a switched client reached the sender's
# provider listener and waited for an accept that never came), and the
# worker's switch takes the received listener up on every provider
# (setup/exec.c: ssw_setup_listener_received), so the clients that come
# after are switched again.  Also: the sender that closes its copy after
# sending (the common case) works the same.
source "$(dirname "$0")/lib.sh"
ssw_enter_netns "$@"
ssw_setup_preload
ssw_tmpdir
PY=$SSW_PYTHON
export SOCKSWITCH_LOG=info

cat >"$T/pass.py" <<'PY'
import array, os, socket, sys
a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
l = socket.socket(); l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
l.bind(("127.0.0.1", 0)); l.listen(16); port = l.getsockname()[1]
n = 3
pid = os.fork()
if pid == 0:                      # the worker: gets the listener by SCM_RIGHTS
    l.close(); a.close()
    msg, anc, flags, addr = b.recvmsg(1, socket.CMSG_SPACE(4))
    ls = socket.socket(fileno=array.array("i", anc[0][2][:4])[0])
    ls.settimeout(20)
    for i in range(n):
        c, _ = ls.accept(); c.settimeout(20)
        d = c.recv(100); c.sendall(b"echo:" + d); c.close()
    os._exit(0)
b.close()
a.sendmsg([b"x"], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [l.fileno()]))])
if sys.argv[1] == "close":
    l.close()
import time; time.sleep(0.3)       # the worker has it (its recvmsg took it up)
for i in range(n):                 # the sender's own clients, switched too
    s = socket.create_connection(("127.0.0.1", port), timeout=20)
    s.sendall(b"hi%d" % i)
    try:
        print("got", s.recv(100).decode(), flush=True)
    except Exception as e:
        print("error", e, flush=True)
os.waitpid(pid, 0)
PY

for mode in keep close; do
  ssw_step "sender ${mode}s its copy"
  ssw_run switched SOCKSWITCH_STATS_FILE="$T/$mode.stats" -- "$PY" "$T/pass.py" $mode >"$T/$mode.out" 2>"$T/$mode.err"
  ssw_assert_eq "($mode) every client served by the worker" "$(grep -c '^got echo:hi[0-9]$' "$T/$mode.out")" 3
  ssw_assert_eq "($mode) the worker took the listener up" "$(grep -c 'listener received over SCM_RIGHTS' "$T/$mode.err")" 1
  ssw_assert_ge "($mode) the clients were switched" "$(ssw_stats_sum "$T/$mode.stats" switched)" 3
  ssw_assert_eq "($mode) none fell back to kernel TCP" "$(ssw_stats_sum "$T/$mode.stats" fallback)" 0
done
ssw_check "(keep) the sender's listener went to kernel TCP, said at info" \
  grep -q "listener sent to another process with SCM_RIGHTS" "$T/keep.err"
ssw_assert_no_sanitizer_report "$T"/*.err
ssw_finish
