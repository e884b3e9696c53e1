#!/usr/bin/env bash
# t_hostile_rdv — the rendezvous as a hostile local user (nobody) plays it:
#  (a) hijack: nobody binds the abstract rendezvous name of root's switched
#      server's port (the specific form beside a wildcard server, the wildcard
#      form and the specific form before the server starts); root's switched
#      client sends a secret.  The squatter must receive no byte and no fd, the
#      secret must reach the real server, and the switch must warn.
#  (b) spoof: nobody speaks the rendezvous itself (tests/progs/rdv_spoof) and
#      claims to connect from 10.9.9.9:1023, then from 127.0.0.1:<a port root
#      holds>: root's accept() must never return the forged address.  The same
#      program claiming its own bound address is accepted (the attacker speaks
#      the protocol well enough: the refusals are the check's doing).
source "$(dirname "$0")/lib.sh"
[ "$(id -u)" = 0 ] || { echo "SKIP: must run as root (plays nobody against root's servers)"; exit 77; }
id nobody >/dev/null 2>&1 || { echo "SKIP: no user nobody"; exit 77; }
ssw_enter_netns "$@"
ssw_setup_preload
ssw_tmpdir
chmod 755 "$T"; mkdir -m 1777 "$T/n" # nobody writes its findings there
PY=$SSW_PYTHON
NOBODY=(setpriv --reuid=nobody --regid="$(id -g nobody)" --clear-groups)
SERVER_AS=()
SSW_FAILS=0

# squatter NAME OUT SECONDS: nobody listens on the abstract NAME and writes what it got
squatter() {
  "${NOBODY[@]}" timeout 20 "$PY" - "$1" "$2" "$3" <<'PYEOF' &
import array, select, socket, sys, time
name, out, secs = sys.argv[1], sys.argv[2], float(sys.argv[3])
s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
s.bind("\0" + name); s.listen(64)
open(out + ".ready", "w").write("1")
conns = nbytes = nfds = 0
end = time.time() + secs
while time.time() < end:
    if not select.select([s], [], [], 0.05)[0]:
        continue
    c, _ = s.accept(); conns += 1
    t = time.time() + 0.5
    while time.time() < t:
        if not select.select([c], [], [], 0.05)[0]:
            continue
        try:
            d, anc, _, _ = c.recvmsg(65536, socket.CMSG_SPACE(64 * 4))
        except OSError:
            break
        nbytes += len(d)
        for lv, ty, data in anc:
            if lv == socket.SOL_SOCKET and ty == socket.SCM_RIGHTS:
                nfds += len(data) // 4
        if not d and not anc:
            break
    c.close()
open(out, "w").write("conns=%d bytes=%d fds=%d\n" % (conns, nbytes, nfds))
PYEOF
  SSW_BG_PIDS+=($!)
}

# server HOST PORT OUT: root's switched server; logs each accepted peer and what it read
server() {
  "${SERVER_AS[@]}" env LD_PRELOAD="$SSW_PRELOAD" SOCKSWITCH_LOG="${SERVER_LOG:-info}" timeout 20 "$PY" - "$1" "$2" "$3" 2>"$3.err" <<'PYEOF' &
import select, socket, sys, time
host, port, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((host, port)); s.listen(64)
open(out + ".ready", "w").write("1")
f = open(out, "w")
time.sleep(float(__import__("os").environ.get("ACCEPT_DELAY", "0")))
end = time.time() + 5
while time.time() < end:
    if not select.select([s], [], [], 0.1)[0]:
        continue
    try:
        c, peer = s.accept()
    except OSError:
        continue
    f.write("peer=%s:%d getpeername=%s:%d\n" % (peer + c.getpeername())); f.flush()
    c.settimeout(1)
    data = b""
    try:
        while True:
            d = c.recv(4096)
            if not d:
                break
            data += d
    except OSError:
        pass
    f.write("data=%s\n" % data.decode(errors="replace")); f.flush()
    c.close()
PYEOF
  SSW_BG_PIDS+=($!)
}

client() { # HOST PORT ERRFILE: root's switched client sends the secret
  env LD_PRELOAD="$SSW_PRELOAD" timeout 20 "$PY" -c '
import socket, sys
c = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=5)
c.sendall(b"root-secret-password"); c.shutdown(socket.SHUT_WR); c.recv(1); c.close()' "$1" "$2" 2>"$3"
}

hijack() { # NAME SQUAT_FORM SERVER_HOST PORT ORDER(before|after)
  local n=$1 form=$2 shost=$3 port=$4 order=$5 rname
  if [ "$form" = wild ]; then rname="sockswitch.v3:4*:$port"; else rname="sockswitch.v3:4:127.0.0.1:$port"; fi
  ssw_step "hijack $n: nobody squats $rname $order root's server on $shost:$port"
  if [ "$order" = after ]; then server "$shost" "$port" "$T/$n.srv"; ssw_wait_file "$T/$n.srv.ready" 10; fi
  squatter "$rname" "$T/n/$n.sq" 3; ssw_wait_file "$T/n/$n.sq.ready" 10
  if [ "$order" = before ]; then server "$shost" "$port" "$T/$n.srv"; ssw_wait_file "$T/$n.srv.ready" 10; fi
  client 127.0.0.1 "$port" "$T/$n.cli.err"
  ssw_wait_file "$T/n/$n.sq" 15
  ssw_check "$n: the squatter got no byte and no fd ($(cat "$T/n/$n.sq" 2>/dev/null))" \
    grep -q "bytes=0 fds=0" "$T/n/$n.sq"
  ssw_check "$n: the secret reached root's server" grep -q "data=root-secret-password" "$T/$n.srv"
  ssw_check "$n: root's client or server warned of uid 65534" \
    grep -qE "uid 65534.*(kernel TCP|taken)|taken by uid 65534" "$T/$n.cli.err" "$T/$n.srv.err"
}

hijack spec-beside-wild spec 0.0.0.0 7101 after
hijack wild-before wild 0.0.0.0 7102 before
hijack spec-before spec 127.0.0.1 7103 before

# the listener that found its name taken says so in `sockswitch stat` (checked
# while a server stands on a squatted name)
squatter "sockswitch.v3:4:127.0.0.1:7104" "$T/n/st.sq" 5; ssw_wait_file "$T/n/st.sq.ready" 10
server 127.0.0.1 7104 "$T/st.srv"; ssw_wait_file "$T/st.srv.ready" 10
sleep 0.5
"$SSW_BUILD/sockswitch" stat -a >"$T/stat.out" 2>&1 || "$SSW_BUILD/sockswitch" stat >"$T/stat.out" 2>&1
ssw_check "stat shows the squatted rendezvous name" grep -q "taken by uid 65534" "$T/stat.out"

# (b) spoofed connector addresses, against a root server (the acceptor looks
# at the socket the connector names: pidfd_getfd) and a server of another
# user (no rights over nobody's process: the kernel's list of bound sockets)
# a port root holds: root's own bound socket, kept open while the attacker claims it
"$PY" -c '
import socket, time, sys
s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1], flush=True); time.sleep(12)' >"$T/held" &
SSW_BG_PIDS+=($!)
ssw_wait_file "$T/held" 5; held=$(head -1 "$T/held")
# a port root listens on (a listening proof is looked up there: root's, not nobody's)
"$PY" -c '
import socket, time, sys
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen(1); print(s.getsockname()[1], flush=True); time.sleep(12)' >"$T/heldl" &
SSW_BG_PIDS+=($!)
ssw_wait_file "$T/heldl" 5; heldl=$(head -1 "$T/heldl")

spoof() { # NAME PORT [RUN-AS…]: the server runs as RUN-AS (default root)
  local n=$1 port=$2; shift 2
  SERVER_AS=("$@"); server 127.0.0.1 "$port" "$T/n/$n.srv"; SERVER_AS=()
  ssw_check "spoof $n: the server is up" ssw_wait_file "$T/n/$n.srv.ready" 10
  for claim in "127.0.0.1 0" "10.9.9.9 1023" "127.0.0.1 $held" "127.0.0.1 $heldl"; do
    set -- $claim
    ssw_step "spoof $n: nobody claims $1:$2"
    "${NOBODY[@]}" timeout 10 "$SSW_BUILD/tests/rdv_spoof" "$port" "$1" "$2" >"$T/$n-$1-$2.out" 2>&1
    ssw_check "spoof $n $1:$2: the HELLO went out" grep -q "^sent" "$T/$n-$1-$2.out"
  done
  sleep 0.5
  local honest; honest=$(sed -n 's/^claim \(127.0.0.1:[0-9]*\)$/\1/p' "$T/$n-127.0.0.1-0.out")
  ssw_check "spoof $n: the honest claim ($honest) was accepted" grep -q "peer=$honest " "$T/n/$n.srv"
  ssw_check "spoof $n: accept never returned 10.9.9.9" bash -c "[ -f '$T/n/$n.srv' ] && ! grep -q 10.9.9.9 '$T/n/$n.srv'"
  ssw_check "spoof $n: accept never returned root's port $held" bash -c "[ -f '$T/n/$n.srv' ] && ! grep -q ':$held ' '$T/n/$n.srv'"
  ssw_check "spoof $n: nor root's listening port $heldl" bash -c "[ -f '$T/n/$n.srv' ] && ! grep -q ':$heldl ' '$T/n/$n.srv'"
  ssw_check "spoof $n: the server warned of the refusal" grep -q "refused a switched connection" "$T/n/$n.srv.err"
}
spoof root-server 7201
if id daemon >/dev/null 2>&1; then
  spoof daemon-server 7202 setpriv --reuid=daemon --regid="$(id -g daemon)" --clear-groups
else
  ssw_fail "no user daemon to run the second server as"
fi

# a genuine client of another user that closes before the server accepts:
# its address is still provable then (proof.c), the data arrives
ssw_step "nobody's switched client connects, writes and closes before root's server accepts"
ACCEPT_DELAY=1 server 127.0.0.1 7301 "$T/n/late.srv"; ssw_wait_file "$T/n/late.srv.ready" 10
"${NOBODY[@]}" env LD_PRELOAD="$SSW_PRELOAD" SOCKSWITCH_LOG=info timeout 10 "$PY" -c '
import socket
c = socket.create_connection(("127.0.0.1", 7301)); print("local=%s:%d" % c.getsockname(), flush=True)
c.sendall(b"early-bird"); c.close()
import time; time.sleep(3)' >"$T/late.cli" 2>"$T/late.cli.err"
late=$(sed -n 's/^local=//p' "$T/late.cli")
ssw_check "the early-closing client went over shm" grep -q "over shm" "$T/late.cli.err"
ssw_check "root's server got its data" grep -q "data=early-bird" "$T/n/late.srv"
ssw_check "and its real address ($late)" grep -q "peer=$late " "$T/n/late.srv"

# (c) listening proofs: a genuine client of another user than the server's
# workers connects again and again; after the first connection (checked by
# walking the bind table) the server's INIT asks for a listening proof, and
# the next ones are proven by the kernel's O(1) lookup of it
ssw_step "nobody's switched client connects three times to the daemon user's server"
SERVER_AS=(setpriv --reuid=daemon --regid="$(id -g daemon)" --clear-groups)
SERVER_LOG=debug server 127.0.0.1 7401 "$T/n/lp.srv"; SERVER_AS=()
ssw_wait_file "$T/n/lp.srv.ready" 10
"${NOBODY[@]}" env LD_PRELOAD="$SSW_PRELOAD" SOCKSWITCH_LOG=debug timeout 10 "$PY" -c '
import socket, time
for i in range(3):
    c = socket.create_connection(("127.0.0.1", 7401)); print("local=%s:%d" % c.getsockname(), flush=True)
    print("reuseport=%d" % c.getsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT), flush=True)
    c.sendall(b"lp%d" % i); c.shutdown(socket.SHUT_WR); c.recv(1); c.close()
' >"$T/lp.cli" 2>"$T/lp.cli.err"
sleep 0.5
for i in 1 2 3; do
  a=$(sed -n 's/^local=//p' "$T/lp.cli" | sed -n "${i}p")
  ssw_check "connection $i arrived with its real address ($a)" grep -q "peer=$a " "$T/n/lp.srv"
done
for i in 0 1 2; do ssw_check "its data lp$i arrived" grep -q "data=lp$i" "$T/n/lp.srv"; done
ssw_check "the client made listening proofs (after the first connection)" \
  bash -c "[ \$(grep -c 'a listening proof' '$T/lp.cli.err') -ge 2 ]"
ssw_check "the server proved them by the lookup" \
  bash -c "[ \$(grep -c 'proven by its listening proof' '$T/n/lp.srv.err') -ge 2 ]"
ssw_check "the proof's SO_REUSEPORT is not seen by the application" \
  bash -c "[ \$(grep -c '^reuseport=0' '$T/lp.cli') -eq 3 ]"
ssw_check "the client went over shm each time" bash -c "[ \$(grep -c 'over shm' '$T/lp.cli.err') -ge 3 ]"

ssw_finish
