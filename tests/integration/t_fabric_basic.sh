#!/usr/bin/env bash
# t_fabric_basic — two network namespaces joined by a veth pair, the route
# `10.99.0.0/16 fabric provider=tcp`: the python echo pair (frames of 1 B to
# 5 MiB, sha256-verified both ways) goes over the fabric provider (both
# sides switched, the acceptor names the client's host from the fabric
# connection); a server without the switch is reached over kernel TCP; a
# port nobody listens on is refused at once.
source "$(dirname "$0")/lib.sh"
ssw_need_fabric
ssw_setup_preload
ssw_tmpdir
[ "$(id -u)" = 0 ] || { echo "FAIL: needs root (ip netns, veth): a cross-host test that skips proves nothing"; exit 1; }
command -v ip >/dev/null 2>&1 || { echo "FAIL: ip (iproute2) missing"; exit 1; }

NS_S=ssw-A-srv-$$ NS_C=ssw-A-cli-$$ VS=vAs$$ VC=vAc$$
SRV=10.99.0.2 CLI=10.99.0.1
cleanup_ns() {
  ip netns pids "$NS_S" 2>/dev/null | xargs -r kill 2>/dev/null
  ip netns pids "$NS_C" 2>/dev/null | xargs -r kill 2>/dev/null
  ip netns del "$NS_S" 2>/dev/null
  ip netns del "$NS_C" 2>/dev/null
  ip link del "$VS" 2>/dev/null
  ssw_cleanup
}
trap cleanup_ns EXIT
ip netns add "$NS_S" && ip netns add "$NS_C" &&
  ip link add "$VS" type veth peer name "$VC" &&
  ip link set "$VS" netns "$NS_S" && ip link set "$VC" netns "$NS_C" &&
  ip -n "$NS_S" addr add $SRV/24 dev "$VS" && ip -n "$NS_C" addr add $CLI/24 dev "$VC" &&
  ip -n "$NS_S" link set "$VS" up && ip -n "$NS_C" link set "$VC" up &&
  ip -n "$NS_S" link set lo up && ip -n "$NS_C" link set lo up ||
  { echo "FAIL: cannot build the two namespaces"; exit 1; }

ROUTES='route 10.99.0.0/16 fabric provider=tcp'
SIZES=1x100,64x100,102400x10,5242880x2
PAYLOAD=$(ssw_sizes_bytes "$SIZES")

# in NS: timeout, environment (LD_PRELOAD when switched), command
in_ns() { # NS MODE VAR=VAL… -- CMD…
  local ns=$1 mode=$2; shift 2
  local envs=()
  while [ "$1" != -- ]; do envs+=("$1"); shift; done
  shift
  [ "$mode" = switched ] && envs+=(LD_PRELOAD="$SSW_PRELOAD")
  ip netns exec "$ns" timeout -k 5 "$SSW_TIMEOUT" env -u LD_PRELOAD SOCKSWITCH_ROUTES="$ROUTES" "${envs[@]}" "$@"
}

pair() { # NAME SERVER_MODE
  local name=$1 smode=$2 portf="$T/$1.port" spid
  ssw_step "echo pair $name ($smode server in $NS_S, switched client in $NS_C)"
  in_ns "$NS_S" "$smode" SOCKSWITCH_LOG=info SOCKSWITCH_STATS_FILE="$T/$name-server.stats" -- \
    "$SSW_PYTHON" "$SSW_PROGS/echo.py" server --host $SRV --port-file "$portf" \
    >"$T/$name-server.out" 2>"$T/$name-server.err" &
  spid=$!
  SSW_BG_PIDS+=("$spid")
  ssw_wait_file "$portf" || { ssw_fail "$name: server did not start"; return 1; }
  in_ns "$NS_C" switched SOCKSWITCH_LOG=info SOCKSWITCH_STATS_FILE="$T/$name-client.stats" -- \
    "$SSW_PYTHON" "$SSW_PROGS/echo.py" client --host $SRV --port "$(cat "$portf")" --sizes "$SIZES" \
    >"$T/$name-client.out" 2>"$T/$name-client.err"
  local rc_c=$?
  wait "$spid"; local rc_s=$?
  ssw_check "$name: client exchanged and verified all frames" \
    test "$rc_c" = 0 -a -n "$(grep '^RESULT ok' "$T/$name-client.out")"
  ssw_check "$name: server verified all frames" test "$rc_s" = 0 -a -n "$(grep '^SERVER ok' "$T/$name-server.out")"
}

# 1. both sides switched: over fabric
pair fab switched
ssw_assert_switched "$T/fab-client.stats" "$PAYLOAD"
ssw_assert_switched "$T/fab-server.stats" "$PAYLOAD"
ssw_assert_eq "fab: client fallbacks" "$(ssw_stats_sum "$T/fab-client.stats" fallback)" 0
ssw_check "fab: the client connected over fabric" grep -q "connected to $SRV:[0-9]* over fabric" "$T/fab-client.err"
ssw_check "fab: the server listened on kernel TCP + fabric" grep -q "listening on $SRV:[0-9]* (kernel TCP + fabric)" "$T/fab-server.err"
# the acceptor's view of the client comes from the fabric connection: the client's host
ssw_check "fab: the server accepted $CLI over fabric" grep -q "accepted $CLI:[0-9]* over fabric" "$T/fab-server.err"

# 2. a server without the switch: the switched client falls back to kernel TCP
pair plain plain
ssw_assert_eq "plain: client switched connections" "$(ssw_stats_sum "$T/plain-client.stats" switched)" 0
ssw_assert_ge "plain: client fallbacks" "$(ssw_stats_sum "$T/plain-client.stats" fallback)" 1

# 3. nobody listens: refused, and at once
ssw_step "refused"
t0=$(date +%s%N)
out=$(in_ns "$NS_C" switched -- "$SSW_PYTHON" -c "
import socket
try:
    socket.create_connection(('$SRV', 9))
    print('connected')
except ConnectionRefusedError:
    print('refused')
" 2>&1)
ms=$(( ($(date +%s%N) - t0) / 1000000 ))
ssw_assert_eq "refused: connect to a closed port" "$out" refused
ssw_assert_le "refused: milliseconds taken" "$ms" 3000

# 4. loading libfabric (at the first fabric connect) keeps the application's
# signal handlers (a dependency of it resets SIGINT/SIGTERM/... to SIG_DFL)
ssw_step "signal handlers"
out=$(in_ns "$NS_C" switched -- "$SSW_PYTHON" -c "
import os, signal, socket
signal.signal(signal.SIGTERM, lambda *a: print('handled'))
try:
    socket.create_connection(('$SRV', 9))
except OSError:
    pass
os.kill(os.getpid(), signal.SIGTERM)
print('alive')
" 2>&1 | tr '\n' ' ')
ssw_assert_eq "signals: SIGTERM after the first fabric connect" "$out" "handled alive "

ssw_assert_no_sanitizer_report "$T"/*.err
ssw_finish
