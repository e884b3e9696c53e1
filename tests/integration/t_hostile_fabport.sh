#!/usr/bin/env bash
# t_hostile_fabport — the fabric port (P + offset) as a hostile local user
# plays it (issue 17, case 3), across two network namespaces joined by a veth:
#  (a) nobody's switched server listens first on [::]:P with IPV6_V6ONLY=1.
#      It holds IPv6 P only, so its fabric listener must hold IPv6 P + offset
#      only; root's switched server then listens on 0.0.0.0:P and gets its
#      fabric listener; root's switched client on the other host dials P: its
#      bytes reach root's server over fabric, never nobody's.
#  (b) nobody squats 0.0.0.0:P2 + offset with a plain socket before root's
#      switched server listens on 0.0.0.0:P2: root's server warns (a warning,
#      not an info line) and `sockswitch stat` says why its listener has no
#      fabric half.
#  (c) the fabric's listening sockets are SO_REUSEPORT (pre-forked workers
#      each listen there): nobody cannot join root's, with or without it.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/netns.sh"
ssw_need_fabric
[ "$(id -u)" = 0 ] || { echo "SKIP: must run as root"; exit 77; }
id nobody >/dev/null 2>&1 || { echo "SKIP: no user nobody"; exit 77; }
ssw_setup_preload
ssw_tmpdir
chmod 755 "$T"; mkdir -m 1777 "$T/n"
ssw_ns_pair
PY=$SSW_PYTHON
NOBODY=(setpriv --reuid=nobody --regid="$(id -g nobody)" --clear-groups)
ROUTES="route 10.77.0.0/16 fabric provider=tcp;route ::/0 fabric provider=tcp"
fabport() { echo $(( ($1 + 10000 - 1) % 65535 + 1 )); }
SSW_FAILS=0

# server NAME PORT FAMILY [RUN-AS…]: a switched server in A; logs peers and data
server() {
  local n=$1 port=$2 fam=$3; shift 3
  ip netns exec "$SSW_NS_A" "$@" env LD_PRELOAD="$SSW_PRELOAD" SOCKSWITCH_ROUTES="$ROUTES" SOCKSWITCH_LOG=info \
    timeout 40 "$PY" - "$port" "$fam" "$T/n/$n.srv" 2>"$T/n/$n.srv.err" <<'PYEOF' &
import os, select, socket, sys, time
port, fam, out = int(sys.argv[1]), sys.argv[2], sys.argv[3]
if fam == "v6only":
    s = socket.socket(socket.AF_INET6); s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1); s.bind(("::", port))
else:
    s = socket.socket(); s.bind(("0.0.0.0", port))
s.listen(16)
f = open(out, "w"); f.write("ready\n"); f.flush()
end = time.time() + 35
while time.time() < end and not os.path.exists(out + ".stop"):
    if not select.select([s], [], [], 0.1)[0]:
        continue
    c, peer = s.accept()
    c.settimeout(2)
    d = c.recv(100)
    f.write("peer=%s data=%s\n" % (peer[0], d.decode(errors="replace"))); f.flush()
    c.sendall(b"ack"); c.close()
PYEOF
  SSW_BG_PIDS+=($!)
  ssw_wait_file "$T/n/$n.srv" 10
}

wait_fab() { # PORT: a fabric listener on P + offset (libfabric loads first)
  local i
  for ((i = 0; i < 50; i++)); do
    [ -n "$(ip netns exec "$SSW_NS_A" ss -Hltn "sport = :$(fabport "$1")")" ] && return 0; sleep 0.1
  done
  return 1
}

P=7901
ssw_step "(a) nobody listens on [::]:$P v6-only, then root on 0.0.0.0:$P"
server nobody $P v6only "${NOBODY[@]}"
wait_fab $P
server root $P v4
sleep 1
ip netns exec "$SSW_NS_A" ss -Hltnpe "sport = :$(fabport $P)" >"$T/fab-a.ss"
sed 's/^/# /' "$T/fab-a.ss"
ssw_check "(a) root's server has its IPv4 fabric listener" bash -c "grep -E '(0\.0\.0\.0|\*):$(fabport $P) ' '$T/fab-a.ss' | grep -qv 'uid:65534'"
ssw_check "(a) root's server did not lose its fabric half" bash -c "! grep -q 'taken by uid' '$T/n/root.srv.err'"
ip netns exec "$SSW_NS_B" env LD_PRELOAD="$SSW_PRELOAD" SOCKSWITCH_ROUTES="$ROUTES" SOCKSWITCH_LOG=info \
  SOCKSWITCH_STATS_FILE="$T/cli.stats" timeout 20 "$PY" -c '
import socket, sys
c = socket.create_connection((sys.argv[1], int(sys.argv[2])))
c.sendall(b"root-secret"); print("reply=%s" % c.recv(10).decode())' "$SSW_NS_ADDR_A" $P >"$T/cli.out" 2>"$T/cli.err"
ssw_check "(a) root's client went over fabric" grep -q "connected to .* over fabric" "$T/cli.err"
ssw_check "(a) its bytes reached root's server" grep -q "data=root-secret" "$T/n/root.srv"
ssw_check "(a) nobody's server got nothing" bash -c "! grep -q 'peer=' '$T/n/nobody.srv'"
ssw_check "(a) the client got root's reply" grep -q "reply=ack" "$T/cli.out"

ssw_step "(c) nobody joins root's fabric port $(fabport $P) with SO_REUSEPORT (the fabric's listeners use it)"
ip netns exec "$SSW_NS_A" "${NOBODY[@]}" timeout 10 "$PY" -c '
import errno, socket, sys
res = []
for reuse in (1, 0):
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, reuse)
    try:
        s.bind(("0.0.0.0", int(sys.argv[1]))); s.listen(1); res.append("bound")
    except OSError as e:
        res.append(errno.errorcode.get(e.errno, str(e.errno)))
print(" ".join(res))' "$(fabport $P)" >"$T/n/join.out" 2>&1
ssw_assert_eq "(c) nobody's binds, with and without SO_REUSEPORT" "$(cat "$T/n/join.out")" "EADDRINUSE EADDRINUSE"

P2=7902
ssw_step "(b) nobody squats 0.0.0.0:$(fabport $P2) with a plain socket, then root listens on $P2"
ip netns exec "$SSW_NS_A" "${NOBODY[@]}" timeout 30 "$PY" -c '
import socket, sys, time
s = socket.socket(); s.bind(("0.0.0.0", int(sys.argv[1]))); s.listen(1)
open(sys.argv[2], "w").write("1"); time.sleep(25)' "$(fabport $P2)" "$T/n/squat.ready" &
SSW_BG_PIDS+=($!)
ssw_wait_file "$T/n/squat.ready" 5
server root2 $P2 v4
sleep 1
ip netns exec "$SSW_NS_A" "$SSW_CLI" stat --json >"$T/stat.json" 2>/dev/null
ssw_check "(b) root's server warned that uid 65534 holds its fabric port" \
  grep -q "warn: listen on port $P2: its fabric port $(fabport $P2) is taken by uid 65534" "$T/n/root2.srv.err"
ssw_check "(b) stat says why" "$PY" -c '
import json, sys
rows = [r for r in json.load(open(sys.argv[1])) if r["local"].endswith(":" + sys.argv[2]) and r["state"] == "listening"]
sys.exit(0 if any("taken by uid 65534" in (r["note"] or "") for r in rows) else 1)' "$T/stat.json" $P2

touch "$T/n/nobody.srv.stop" "$T/n/root.srv.stop" "$T/n/root2.srv.stop"
ssw_assert_no_sanitizer_report "$T"/n/*.err "$T"/*.err
ssw_finish
