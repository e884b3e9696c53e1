# netns.sh — two network namespaces joined by a veth pair, for the cross-host tests (source after lib.sh).
#
# A test that sources this calls ssw_ns_pair (or ssw_ns_single, below, for one
# namespace with lo only): ssw_ns_pair makes namespaces A (servers)
# and B (clients), each with lo and one end of a veth pair up, addresses
# $SSW_NS_ADDR_A and $SSW_NS_ADDR_B (10.77.N.1 and .2 /24), and removes them
# at exit.  The test itself stays in the namespace it was started in (not
# ssw_enter_netns): every program runs in A or B through `ip netns exec`.
# Those namespaces cannot be made without root: then the test FAILS, naming
# the problem — CI runs as root, and a cross-host suite that skips itself
# there would prove nothing.
#
# Environment:
#   SSW_NS_ROUTES   SOCKSWITCH_ROUTES of the switched programs
#                   (default: route 10.77.0.0/16 fabric provider=tcp)
#   SSW_NS_EXPECT   what a switched pair across the veth must use: fabric (the
#                   default) or fallback (kernel TCP: for a build whose fabric
#                   provider is missing, or with SSW_NS_ROUTES='route
#                   10.77.0.0/16 tcp', to check the tests themselves)
#   SSW_NS_APP_SLACK  kernel TCP bytes tolerated on the application's own port
#                   per connection when the path is fabric (default 16)

SSW_NS_ROUTES=${SSW_NS_ROUTES:-route 10.77.0.0/16 fabric provider=tcp}
SSW_NS_EXPECT=${SSW_NS_EXPECT:-fabric}
SSW_NS_APP_SLACK=${SSW_NS_APP_SLACK:-16}
SSW_CLI=${SSW_CLI:-$SSW_BUILD/sockswitch}

# ---------------------------------------------------------------- pair ------

# ssw_fabric_pair_setup — the start of a test across the veth over fabric:
# skip without libfabric's tcp provider, the preload, the temporary
# directory (whose exit trap removes the namespaces too), then the pair.
ssw_fabric_pair_setup() {
  ssw_need_fabric
  ssw_setup_preload
  ssw_tmpdir
  ssw_ns_pair
}

# ssw_ns_pair — make the two namespaces and the veth between them; sets
# SSW_NS_A, SSW_NS_B, SSW_NS_ADDR_A, SSW_NS_ADDR_B.  Call after ssw_tmpdir
# (the exit trap cleans up both).
ssw_ns_pair() {
  case "$SSW_NS_EXPECT" in fabric|fallback) ;; *)
    echo "FAIL: SSW_NS_EXPECT='$SSW_NS_EXPECT' (expected fabric or fallback)"; exit 1 ;;
  esac
  command -v ip >/dev/null 2>&1 || { echo "FAIL: ip (iproute2) missing: cannot make the test's network namespaces"; exit 1; }
  ssw_ns_reap_stale
  local n=$(( $$ % 250 + 1 ))
  SSW_NS_A=ssw-g$$-a SSW_NS_B=ssw-g$$-b
  SSW_NS_ADDR_A=10.77.$n.1 SSW_NS_ADDR_B=10.77.$n.2
  SSW_NS_VETH_A=vg$$a SSW_NS_VETH_B=vg$$b
  export SSW_NS_A SSW_NS_B SSW_NS_ADDR_A SSW_NS_ADDR_B
  trap ssw_ns_cleanup EXIT
  trap 'exit 130' INT TERM
  local err="$T/netns-setup.err"
  if ! { ip netns add "$SSW_NS_A" && ip netns add "$SSW_NS_B" &&
         ip link add "$SSW_NS_VETH_A" type veth peer name "$SSW_NS_VETH_B" &&
         ip link set "$SSW_NS_VETH_A" netns "$SSW_NS_A" && ip link set "$SSW_NS_VETH_B" netns "$SSW_NS_B" &&
         ip -n "$SSW_NS_A" addr add "$SSW_NS_ADDR_A/24" dev "$SSW_NS_VETH_A" &&
         ip -n "$SSW_NS_B" addr add "$SSW_NS_ADDR_B/24" dev "$SSW_NS_VETH_B" &&
         ip -n "$SSW_NS_A" link set lo up && ip -n "$SSW_NS_B" link set lo up &&
         ip -n "$SSW_NS_A" link set "$SSW_NS_VETH_A" up && ip -n "$SSW_NS_B" link set "$SSW_NS_VETH_B" up; } 2>"$err"; then
    echo "FAIL: cannot make two network namespaces joined by a veth pair (needs root and ip netns): $(head -c 300 "$err")"
    exit 1
  fi
  # the veth carrier comes up asynchronously (no ping here: the link state)
  local i
  for ((i = 0; i < 50; i++)); do
    [ "$(ip netns exec "$SSW_NS_B" cat "/sys/class/net/$SSW_NS_VETH_B/operstate" 2>/dev/null)" = up ] &&
      [ "$(ip netns exec "$SSW_NS_A" cat "/sys/class/net/$SSW_NS_VETH_A/operstate" 2>/dev/null)" = up ] && break
    sleep 0.1
  done
  [ $i -lt 50 ] || { echo "FAIL: the veth pair $SSW_NS_VETH_A/$SSW_NS_VETH_B did not come up"; exit 1; }
  ssw_step "namespaces $SSW_NS_A ($SSW_NS_ADDR_A) and $SSW_NS_B ($SSW_NS_ADDR_B), expecting $SSW_NS_EXPECT"
}

# Removes namespaces of earlier runs of these tests whose process is gone (a
# test killed by ctest's timeout gets no exit trap); never anyone else's.
ssw_ns_reap_stale() {
  local ns pid
  for ns in $(ip netns list 2>/dev/null | awk '{print $1}'); do
    [[ "$ns" =~ ^ssw-g([0-9]+)-[ab]$ ]] || continue
    pid=${BASH_REMATCH[1]}
    [ -d "/proc/$pid" ] && continue
    ip netns del "$ns" 2>/dev/null
  done
}

ssw_ns_cleanup() {
  local ns p
  for p in "${SSW_NS_WATCH_PIDS[@]}"; do kill "$p" 2>/dev/null; done
  # the test's own programs (lib.sh's list), then anything left inside our
  # namespaces: they were all started by this test
  ssw_cleanup
  for ns in "$SSW_NS_A" "$SSW_NS_B"; do
    [ -n "$ns" ] || continue
    for p in $(ip netns pids "$ns" 2>/dev/null); do kill -9 "$p" 2>/dev/null; done
    ip netns del "$ns" 2>/dev/null
  done
}

# ---------------------------------------------------------------- running ---

# ssw_ns_cmd NS MODE [VAR=VAL…] -- CMD… : ssw_cmd run inside NS; a switched
# program gets SOCKSWITCH_ROUTES=$SSW_NS_ROUTES (a VAR=VAL may override it)
ssw_ns_cmd() {
  local ns=$1 mode=$2; shift 2
  if [ "$mode" = switched ]; then
    ssw_cmd "$mode" SOCKSWITCH_ROUTES="$SSW_NS_ROUTES" "$@"
  else
    ssw_cmd "$mode" "$@"
  fi
  SSW_CMD=(ip netns exec "$ns" "${SSW_CMD[@]}")
}

# ssw_ns_run NS MODE [VAR=VAL…] -- CMD… : foreground, stdio inherited
ssw_ns_run() {
  ssw_ns_cmd "$@"
  "${SSW_CMD[@]}"
  local rc=$?
  [ $rc = 124 ] || [ $rc = 137 ] && echo "TIMEOUT - killed after ${SSW_TIMEOUT}s in $1 ($2)" >&"$SSW_LOG_FD"
  return $rc
}

# ssw_ns_bg NAME NS MODE [VAR=VAL…] -- CMD… : background, output in $T/NAME.{out,err}
ssw_ns_bg() {
  local name=$1; shift
  ssw_step "start $name (in $1, $2)"
  ssw_ns_cmd "$@"
  ssw_bg_start "$name"
}

# ssw_ns_wait_listen NS PORT [SECONDS]
ssw_ns_wait_listen() {
  local i j n=$(( ${3:-$SSW_TIMEOUT} * 10 )) fab=$(( ($2 + 10000 - 1) % 65535 + 1 ))
  for ((i = 0; i < n; i++)); do
    if [ -n "$(ip netns exec "$1" ss -Hltn "sport = :$2" 2>/dev/null)" ]; then
      # a switched listener listens on the fabric port some 0.3 s later
      # (libfabric loads at the first fabric listen): a connect before
      # that goes to kernel TCP.  Give it that time when fabric is
      # expected (a plain server never gets there: 3 s at most).
      [ "$SSW_NS_EXPECT" = fabric ] || return 0
      for ((j = 0; j < 30; j++)); do
        [ -n "$(ip netns exec "$1" ss -Hltn "sport = :$fab" 2>/dev/null)" ] && return 0
        sleep 0.1
      done
      return 0
    fi
    sleep 0.1
  done
  return 1
}

# ssw_ns_outsegs NS — Tcp OutSegs of NS
ssw_ns_outsegs() { ip netns exec "$1" bash -c "$(declare -f ssw_outsegs); ssw_outsegs"; }

# ssw_ns_stat NS FILE — `sockswitch stat --json` as seen inside NS
ssw_ns_stat() { ip netns exec "$1" "$SSW_CLI" stat --json >"$2" 2>"$2.err"; }

# ---------------------------------------------------------------- wire ------
#
# Which kernel TCP connections carried the bytes.  The libfabric tcp provider
# runs over kernel TCP itself, so between namespaces a fabric connection DOES
# make kernel TCP segments (Tcp OutSegs grows): "no kernel segments" is the
# shm test's proof and is wrong here.  What tells the paths apart is WHICH
# connection carried the payload: on the fabric path the application's own
# socket (its port, P) carries nothing (the switch makes no kernel TCP
# connection for a switched socket), and connections on other ports (the
# provider's) carry the bytes; on the fallback path the connection on P
# carries them.  `ss -E` (sock_diag destroy events) reports every socket of
# the namespace as it is destroyed, with its final bytes_acked and
# bytes_received, so a short connection cannot slip between two samples.

SSW_NS_WATCH_PIDS=()

# ssw_ns_wire_start NAME NS — record the TCP sockets of NS destroyed from now
# on in $T/NAME.wire (returns once the recorder provably sees events)
ssw_ns_wire_start() {
  local name=$1 ns=$2 probe=$(( 20000 + $$ % 10000 )) i
  ip netns exec "$ns" stdbuf -oL ss -EtinH >"$T/$name.wire" 2>"$T/$name.wire.err" &
  SSW_NS_WATCH_PIDS+=($!)
  eval "SSW_NS_WATCH_$name=$!"
  # a throw-away connection on lo until the recorder reports one: from then
  # on it is subscribed
  for ((i = 0; i < 50; i++)); do
    ip netns exec "$ns" "$SSW_PYTHON" -c 'import socket, sys
l = socket.socket(); l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
l.bind(("127.0.0.1", int(sys.argv[1]))); l.listen(1)
c = socket.create_connection(("127.0.0.1", int(sys.argv[1]))); a, _ = l.accept()
c.close(); a.close(); l.close()' "$probe" 2>/dev/null
    grep -q ":$probe " "$T/$name.wire" 2>/dev/null && return 0
    sleep 0.1
  done
  ssw_fail "$name: ss -E records no socket events in $ns: $(head -c 200 "$T/$name.wire.err")"
  return 1
}

# ssw_ns_wire_stop NAME NS — stop the recorder, adding the sockets still alive
ssw_ns_wire_stop() {
  local name=$1 ns=$2 pid
  eval "pid=\${SSW_NS_WATCH_$name:-}"
  sleep 0.2
  [ -n "$pid" ] && { kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null; }
  ip netns exec "$ns" ss -tinH >>"$T/$name.wire" 2>/dev/null
}

# ssw_ns_wire_bytes FILE PORTS IN|OUT — payload bytes (bytes_acked +
# bytes_received, less the SYN and FIN each counts) of the sockets recorded
# in FILE whose local or peer port is (IN) or is not (OUT) one of PORTS
# (comma-separated); the recorder's own probe connections never count
ssw_ns_wire_bytes() {
  awk -v ports="$2" -v sel="$3" -v probe=$(( 20000 + $$ % 10000 )) '
    BEGIN { n = split(ports, p, ","); for (i = 1; i <= n; i++) want[p[i]] = 1 }
    function port(a) { sub(/.*:/, "", a); return a }
    /^[A-Z]/ || /^[a-z]/ {
      lp = port($4); pp = port($5)
      hit = (lp in want) || (pp in want); skip = (lp == probe || pp == probe)
      next_is_info = 1; next
    }
    next_is_info {
      next_is_info = 0
      if (skip || (sel == "IN") != hit) next
      b = 0
      if (match($0, /bytes_acked:[0-9]+/)) { v = substr($0, RSTART + 12, RLENGTH - 12) - 1; if (v > 0) b += v }
      if (match($0, /bytes_received:[0-9]+/)) { v = substr($0, RSTART + 15, RLENGTH - 15) - 1; if (v > 0) b += v }
      s += b
    }
    END { printf "%.0f\n", s + 0 }' "$1"
}

# ---------------------------------------------------------------- asserts ---

# ssw_ns_assert_path TAG WIRE APP_PORTS PAYLOAD CONNS STATS… — the switched
# programs that wrote STATS (both ends' files) carried PAYLOAD bytes over CONNS
# connections (each counted by both ends) the way SSW_NS_EXPECT says: fabric (switched, payload in the switch's counters
# and on the provider's connections, nothing on the application's ports) or
# fallback (kernel TCP on the application's ports, nothing switched).
ssw_ns_assert_path() {
  local tag=$1 wire=$2 ports=$3 payload=$4 conns=$5; shift 5
  local st sw=0 fb=0 sent=0 rcvd=0 app other
  for st in "$@"; do
    sw=$(( sw + $(ssw_stats_sum "$st" switched) )); fb=$(( fb + $(ssw_stats_sum "$st" fallback) ))
    sent=$(( sent + $(ssw_stats_sum "$st" bytes_sent) )); rcvd=$(( rcvd + $(ssw_stats_sum "$st" bytes_received) ))
    ssw_assert_ge "$tag: $(basename "$st") written (processes reported)" "$(ssw_stats_lines "$st")" 1
  done
  app=$(ssw_ns_wire_bytes "$wire" "$ports" IN)
  other=$(ssw_ns_wire_bytes "$wire" "$ports" OUT)
  if [ "$SSW_NS_EXPECT" = fabric ]; then
    ssw_assert_ge "$tag: switched connections (both ends)" "$sw" $(( 2 * conns ))
    ssw_assert_eq "$tag: fallback connections" "$fb" 0
    ssw_assert_ge "$tag: payload in the switch's counters (sent+received)" $(( sent + rcvd )) "$payload"
    ssw_assert_le "$tag: kernel TCP bytes on the application's port(s) $ports" "$app" $(( conns * SSW_NS_APP_SLACK ))
    # every byte an application received crossed the provider's connections;
    # bytes sent but never read (iperf3 stops reading at its end) may still
    # sit in the sender's transmit slots when the reader closes, where kernel
    # TCP would have them in its send buffer: count what was received
    ssw_assert_ge "$tag: kernel TCP bytes on the provider's connections (fabric over tcp)" "$other" "$rcvd"
  else
    # (a build without fabric counts fallbacks; a route to tcp counts none)
    ssw_assert_eq "$tag: switched connections (expecting kernel TCP)" "$sw" 0
    ssw_assert_ge "$tag: kernel TCP bytes on the application's port(s) $ports" "$app" "$payload"
  fi
}

# ---------------------------------------------------------------- echo pair -

# ssw_ns_echo_pair NAME SMODE CMODE SIZES [VAR=VAL…] — tests/progs/echo.py
# server in A on $SSW_NS_ADDR_A, client in B; like lib.sh's ssw_echo_pair:
# ECHO_RC, ECHO_PORT, $T/NAME-{server,client}.{out,err,stats}
ssw_ns_echo_pair() {
  local name=$1 smode=$2 cmode=$3 sizes=$4; shift 4
  local portf="$T/$name.port" spid rc_s rc_c
  ssw_step "echo pair $name ($smode server in A, $cmode client in B, $sizes)"
  rm -f "$portf"
  ssw_ns_bg "$name-server" "$SSW_NS_A" "$smode" SOCKSWITCH_STATS_FILE="$T/$name-server.stats" "$@" -- \
    "$SSW_PYTHON" "$SSW_PROGS/echo.py" server --host "$SSW_NS_ADDR_A" --port-file "$portf"
  spid=$SSW_BG_PID
  if ! ssw_wait_file "$portf" 20; then
    ssw_fail "$name: server did not start"; ECHO_RC=1; kill "$spid" 2>/dev/null; wait "$spid" 2>/dev/null; return
  fi
  ECHO_PORT=$(cat "$portf")
  ssw_ns_run "$SSW_NS_B" "$cmode" SOCKSWITCH_STATS_FILE="$T/$name-client.stats" "$@" -- \
    "$SSW_PYTHON" "$SSW_PROGS/echo.py" client --host "$SSW_NS_ADDR_A" --port "$ECHO_PORT" --sizes "$sizes" \
    >"$T/$name-client.out" 2>"$T/$name-client.err"
  rc_c=$?
  wait "$spid"; rc_s=$?
  ECHO_RC=$(( rc_c || rc_s ))
  if [ "$rc_c" = 0 ] && grep -q '^RESULT ok' "$T/$name-client.out"; then
    ssw_ok "$name: client exchanged and verified all frames ($(grep '^RESULT' "$T/$name-client.out"))"
  else
    ssw_fail "$name: client failed (rc=$rc_c): $(tail -n 2 "$T/$name-client.err")"
  fi
  if [ "$rc_s" = 0 ] && grep -q '^SERVER ok' "$T/$name-server.out"; then
    ssw_ok "$name: server verified all frames"
  else
    ssw_fail "$name: server failed (rc=$rc_s): $(tail -n 2 "$T/$name-server.err")"
  fi
}

# ---------------------------------------------------------------- single ----

# ssw_ns_single TAG — one network namespace with only lo up, for a test that
# routes 127.0.0.0/8 over fabric inside it (both ends on one "host"); sets
# NS and ROUTES, removes the namespace and its processes at exit.  Call
# after ssw_tmpdir.
ssw_ns_single() {
  NS=ssw-$1-$$
  ip netns add "$NS" 2>"$T/ns.err" && ip -n "$NS" link set lo up ||
    { echo "FAIL: cannot make a network namespace: $(cat "$T/ns.err")"; exit 1; }
  trap 'ip netns pids "$NS" 2>/dev/null | xargs -r kill 2>/dev/null; ip netns del "$NS" 2>/dev/null; ssw_cleanup' EXIT
  ROUTES='route 127.0.0.0/8 fabric provider=tcp'
}
