#!/usr/bin/env bash
# t_hostile_src — spoofed source addresses and a one-message accept DoS, as a
# hostile local user (nobody) plays them against switched servers of root and
# of another user (issue 17, second security round):
#  (a) nobody's own socket bound with IP_FREEBIND to 10.9.9.9:4444 (kernel TCP
#      refuses to connect from it: ENETUNREACH) named in a hand-made request
#      claiming that address: root's server (which looks at the named socket)
#      and daemon's (which asks the kernel's bind table) never accept it.
#  (b) nobody's IP_FREEBIND + SO_REUSEPORT *listener* on 10.9.9.9:5556 as a
#      "listening proof": daemon's server never accepts 10.9.9.9:5556.
#  (c) a socket nobody made in a user and network namespace of its own, bound
#      there to 127.0.0.1:22 and passed back with SCM_RIGHTS: root's server
#      never accepts 127.0.0.1:22 (a privileged port only root holds here);
#  (c2) the same with a port root holds in this namespace (bound in nobody's).
#  (d) the unmodified library: nobody's switched client bound with IP_FREEBIND
#      to 10.9.9.9 fails to connect as kernel TCP does (ENETUNREACH).
#  (e) a request whose INIT carries a wrong wire version: the server's accept
#      loop, which dies on any accept error, goes on; the request is dropped
#      and counted (stat's refused, the stats file), an honest connection
#      after it is served.
# Honest controls: the same spoofer claiming its own plain socket is accepted.
source "$(dirname "$0")/lib.sh"
[ "$(id -u)" = 0 ] || { echo "SKIP: must run as root (plays nobody against root's servers)"; exit 77; }
id nobody >/dev/null 2>&1 || { echo "SKIP: no user nobody"; exit 77; }
id daemon >/dev/null 2>&1 || { echo "SKIP: no user daemon"; exit 77; }
ssw_enter_netns "$@"
ssw_setup_preload
ssw_tmpdir
chmod 755 "$T"; mkdir -m 1777 "$T/n"
PY=$SSW_PYTHON
NOBODY=(setpriv --reuid=nobody --regid="$(id -g nobody)" --clear-groups)
DAEMON=(setpriv --reuid=daemon --regid="$(id -g daemon)" --clear-groups)
export SOCKSWITCH_STATS_FILE=$T/n/stats
SSW_FAILS=0

# server NAME PORT [RUN-AS…]: a switched accept loop that dies on any accept
# error (as Python's socketserver with a plain loop does); logs each peer
server() {
  local n=$1 port=$2; shift 2
  "$@" env LD_PRELOAD="$SSW_PRELOAD" SOCKSWITCH_LOG=info timeout 90 "$PY" - "$port" "$T/n/$n.srv" 2>"$T/n/$n.srv.err" <<'PYEOF' &
import select, socket, sys, time
port, out = int(sys.argv[1]), sys.argv[2]
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", port)); s.listen(64)
f = open(out, "w"); f.write("ready\n"); f.flush()
import os
end = time.time() + 80
while time.time() < end and not os.path.exists(out + ".stop"):
    if not select.select([s], [], [], 0.1)[0]:
        continue
    try:
        c, peer = s.accept()
    except BlockingIOError:
        continue   # readable, then taken by nobody: what kernel TCP may say too
    f.write("peer=%s:%d\n" % peer); f.flush()
    c.settimeout(1)
    try:
        d = c.recv(100)
        f.write("data=%s\n" % d.decode(errors="replace")); f.flush()
    except OSError:
        pass
    c.close()
PYEOF
  SSW_BG_PIDS+=($!)
  ssw_wait_file "$T/n/$n.srv" 10
}

# spoof NAME PORT CLAIM_IP CLAIM_PORT [ENV…]: nobody's hand-made request
spoof() {
  local n=$1 port=$2 ip=$3 cport=$4; shift 4
  "${NOBODY[@]}" env "$@" timeout 10 "$SSW_BUILD/tests/rdv_spoof" "$port" "$ip" "$cport" >"$T/n/$n.out" 2>&1
  ssw_check "$n: the request went out ($(tail -1 "$T/n/$n.out"))" grep -q "^sent" "$T/n/$n.out"
}

wait_for_socket() { # OUT: the spoofer listens for the namespace's socket
  for _ in $(seq 50); do grep -q "^waiting for a socket" "$1" 2>/dev/null && return 0; sleep 0.1; done
}

never() { # NAME SERVER PATTERN WHAT
  ssw_check "$1: accept never returned $4" bash -c "[ -f '$T/n/$2.srv' ] && ! grep -q '$3' '$T/n/$2.srv'"
}

server root 7701
server daemon 7702 "${DAEMON[@]}"

ssw_step "(a) a socket bound with IP_FREEBIND to 10.9.9.9:4444"
spoof a-root 7701 10.9.9.9 4444 SPOOF_BIND=10.9.9.9:4444 SPOOF_FREEBIND=1
spoof a-daemon 7702 10.9.9.9 4444 SPOOF_BIND=10.9.9.9:4444 SPOOF_FREEBIND=1

ssw_step "(b) a listening proof bound with IP_FREEBIND + SO_REUSEPORT on 10.9.9.9:5556"
spoof b-daemon 7702 10.9.9.9 5556 SPOOF_BIND=10.9.9.9:5556 SPOOF_FREEBIND=1 SPOOF_LISTEN=1

ssw_step "(c) a socket bound to 127.0.0.1:22 in nobody's own namespaces, passed back"
rm -f "$T/n/c.sock"
"${NOBODY[@]}" env SPOOF_FD="$T/n/c.sock" timeout 10 "$SSW_BUILD/tests/rdv_spoof" 7701 127.0.0.1 22 >"$T/n/c-root.out" 2>&1 &
spoofer=$!
wait_for_socket "$T/n/c-root.out"
"${NOBODY[@]}" unshare -Urn sh -c "ip link set lo up && exec '$PY' -c '
import array, socket, sys
s = socket.socket(); s.bind((\"127.0.0.1\", 22))
u = socket.socket(socket.AF_UNIX); u.connect(sys.argv[1])
u.sendmsg([b\"s\"], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array(\"i\", [s.fileno()]))])
print(\"passed\", s.getsockname())' '$T/n/c.sock'" >"$T/n/c-ns.out" 2>&1
ssw_check "(c) the namespace bound 127.0.0.1:22 and passed it ($(cat "$T/n/c-ns.out"))" grep -q "passed" "$T/n/c-ns.out"
wait "$spoofer"
ssw_check "(c) the request went out" grep -q "^sent" "$T/n/c-root.out"

ssw_step "(c2) the same with a port root holds here (no privilege needed in the namespace)"
"$PY" -c '
import socket, time
s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1], flush=True); time.sleep(80)' >"$T/held" &
SSW_BG_PIDS+=($!)
ssw_wait_file "$T/held" 5; held=$(head -1 "$T/held")
rm -f "$T/n/c2.sock"
"${NOBODY[@]}" env SPOOF_FD="$T/n/c2.sock" timeout 10 "$SSW_BUILD/tests/rdv_spoof" 7701 127.0.0.1 "$held" >"$T/n/c2-root.out" 2>&1 &
spoofer=$!
wait_for_socket "$T/n/c2-root.out"
"${NOBODY[@]}" unshare -Urn sh -c "ip link set lo up && exec '$PY' -c '
import array, socket, sys
s = socket.socket(); s.bind((\"127.0.0.1\", int(sys.argv[2])))
u = socket.socket(socket.AF_UNIX); u.connect(sys.argv[1])
u.sendmsg([b\"s\"], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array(\"i\", [s.fileno()]))])
print(\"passed\", s.getsockname())' '$T/n/c2.sock' $held" >"$T/n/c2-ns.out" 2>&1
ssw_check "(c2) the namespace bound 127.0.0.1:$held and passed it" grep -q "passed" "$T/n/c2-ns.out"
wait "$spoofer"
ssw_check "(c2) the request went out" grep -q "^sent" "$T/n/c2-root.out"

ssw_step "(d) nobody's switched client bound with IP_FREEBIND to 10.9.9.9"
"${NOBODY[@]}" env LD_PRELOAD="$SSW_PRELOAD" SOCKSWITCH_LOG=info timeout 10 "$PY" -c '
import socket
c = socket.socket(); c.setsockopt(socket.IPPROTO_IP, 15, 1)   # IP_FREEBIND
c.bind(("10.9.9.9", 4446))
try:
    c.connect(("127.0.0.1", 7701)); print("connected")
except OSError as e:
    print("refused", e.errno)' >"$T/n/d.out" 2>"$T/n/d.err"
ssw_check "(d) the connect failed as kernel TCP's does ($(cat "$T/n/d.out"))" grep -q "^refused 101" "$T/n/d.out"
ssw_check "(d) and went to kernel TCP" grep -q "kernel TCP (source address not provable" "$T/n/d.err"

ssw_step "(e) a request with a wrong wire version, then an honest one"
spoof e-bad 7701 127.0.0.1 0 SPOOF_VERSION=99
spoof e-honest 7701 127.0.0.1 0
"$SSW_BUILD/sockswitch" stat --json >"$T/n/stat.json" 2>/dev/null

ssw_step "honest controls: the spoofer's own plain socket is accepted"
spoof ok-root 7701 127.0.0.1 0
spoof ok-daemon 7702 127.0.0.1 0
sleep 1

never "(a) root" root 10.9.9.9 "10.9.9.9 (freebind socket named)"
never "(a) daemon" daemon 10.9.9.9 "10.9.9.9 (freebind socket in the bind table)"
never "(b) daemon" daemon ":5556" "10.9.9.9:5556 (freebind listening proof)"
never "(c) root" root ":22$" "127.0.0.1:22 (a socket of another namespace)"
never "(c2) root" root ":$held$" "127.0.0.1:$held (root's port, bound in another namespace)"
never "(d) root" root "4446" "the freebind client's address"
for n in ok-root:root ok-daemon:daemon e-honest:root; do
  out=${n%%:*} srv=${n#*:}
  a=$(sed -n 's/^claim //p' "$T/n/$out.out")
  ssw_check "$out: the honest claim ($a) was accepted" grep -q "peer=$a$" "$T/n/$srv.srv"
done
bad=$(sed -n 's/^claim //p' "$T/n/e-bad.out")
ssw_check "(e) the bad request ($bad) was not accepted" bash -c "! grep -q 'peer=$bad$' '$T/n/root.srv'"
ssw_check "(e) the server's accept loop did not die" bash -c "! grep -q Traceback '$T/n/root.srv.err'"
ssw_check "(e) stat counts the dropped requests of root's listener" \
  "$PY" -c '
import json, sys
rows = [r for r in json.load(open(sys.argv[1])) if r["local"] == "127.0.0.1:7701" and r["state"] == "listening"]
sys.exit(0 if rows and rows[0]["refused"] >= 4 and rows[0]["note"] else 1)' "$T/n/stat.json"
ssw_check "(e) and of daemon's" "$PY" -c '
import json, sys
rows = [r for r in json.load(open(sys.argv[1])) if r["local"] == "127.0.0.1:7702" and r["state"] == "listening"]
sys.exit(0 if rows and rows[0]["refused"] >= 2 else 1)' "$T/n/stat.json"
ssw_check "the servers warned of the refusals" grep -q "refused a switched connection" "$T/n/root.srv.err" "$T/n/daemon.srv.err"
touch "$T/n/root.srv.stop" "$T/n/daemon.srv.stop"; sleep 0.5  # an orderly exit writes the stats line
ssw_assert_ge "the stats file counts root's dropped requests" "$(ssw_stats_sum "$SOCKSWITCH_STATS_FILE" refused)" 4

ssw_finish
