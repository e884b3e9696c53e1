#!/usr/bin/env bash
# t_stat — `sockswitch stat` against live programs: a switched python pair
# shows up (listener + both ends, provider shm, connected) with byte counters
# that grow while the client keeps sending; -p keeps one process; connections
# that fell back to kernel TCP show provider tcp and the reason (no switched
# listener, route says tcp, peer not switched); a process killed with -9 and
# the ones that exit leave nothing behind; 5,000 connections of one process
# are all listed (past the first 4,096-slot table); -p of a missing pid fails;
# a process whose large sends go by the rendezvous shows its registration
# cache's counters (per process) growing.
source "$(dirname "$0")/lib.sh"
ssw_enter_netns "$@"
ssw_setup_preload
ssw_tmpdir

CLI=$SSW_BUILD/sockswitch
Q() { "$SSW_PYTHON" "$SSW_PROGS/statq.py" "$@"; }
stat_json() { "$CLI" stat --json "$@" >"$T/stat.json" 2>"$T/stat.err"; }
# wait_for DESC K=V… — poll stat until an object matches (≤ 10 s)
wait_for() {
  local i
  for ((i = 0; i < 100; i++)); do
    stat_json
    [ "$(Q "$T/stat.json" count "$@")" -ge 1 ] 2>/dev/null && return 0
    sleep 0.1
  done
  return 1
}
start_pair() { # NAME SERVER_MODE CLIENT_MODE [VAR=VAL for the client]
  local name=$1 smode=$2 cmode=$3; shift 3
  ssw_bg "$name-server" "$smode" -- "$SSW_PYTHON" "$SSW_PROGS/trickle.py" server --port-file "$T/$name.port"
  ssw_wait_file "$T/$name.port" 10 || { ssw_fail "$name: server did not start"; return 1; }
  PORT=$(cat "$T/$name.port")
  ssw_bg "$name-client" "$cmode" "$@" -- "$SSW_PYTHON" "$SSW_PROGS/trickle.py" client \
    --port "$PORT" --stop-file "$T/$name.stop" --half-close-file "$T/$name.half" --max-s 25
}

NS=$(readlink /proc/self/ns/net | tr -dc 0-9)
DIR=/dev/shm/sockswitch/uid-$(id -u)/net-$NS

# nothing runs yet
stat_json
ssw_check "empty: stat --json is valid JSON" Q "$T/stat.json" check
ssw_assert_eq "empty: no sockets" "$(Q "$T/stat.json" count)" 0

# ---- a live switched connection
start_pair sw switched switched
P1=$PORT
if wait_for provider=shm state=connected remote=127.0.0.1:$P1; then
  ssw_ok "switched: client connection listed (provider shm, connected)"
  ssw_check "switched: stat --json has every required key" Q "$T/stat.json" check
  ssw_assert_eq "switched: listener listed" \
    "$(Q "$T/stat.json" count state=listening local=127.0.0.1:$P1 provider=shm)" 1
  ssw_assert_eq "switched: server end listed" \
    "$(Q "$T/stat.json" count state=connected local=127.0.0.1:$P1 provider=shm)" 1
  ssw_assert_eq "switched: no fallback reason" \
    "$(Q "$T/stat.json" get fallback_reason remote=127.0.0.1:$P1)" None
  CPID=$(Q "$T/stat.json" get pid remote=127.0.0.1:$P1)
  s1=$(Q "$T/stat.json" get bytes_sent remote=127.0.0.1:$P1)
  r1=$(Q "$T/stat.json" get bytes_received local=127.0.0.1:$P1 state=connected)
  sleep 0.5
  stat_json
  s2=$(Q "$T/stat.json" get bytes_sent remote=127.0.0.1:$P1)
  r2=$(Q "$T/stat.json" get bytes_received local=127.0.0.1:$P1 state=connected)
  ssw_assert_gt "switched: client bytes_sent grows ($s1 -> $s2)" "$s2" "$s1"
  ssw_assert_gt "switched: server bytes_received grows ($r1 -> $r2)" "$r2" "$r1"
  # both ends map one segment: its header page at least, both rings at most
  rc=$(Q "$T/stat.json" get ring_resident remote=127.0.0.1:$P1)
  rs=$(Q "$T/stat.json" get ring_resident local=127.0.0.1:$P1 state=connected)
  ssw_check "switched: client's ring memory shown ($rc bytes)" test "$rc" -ge 4096 -a "$rc" -le $((4096 + 2 * 512 * 1024))
  ssw_check "switched: server's ring memory shown ($rs bytes)" test "$rs" -ge 4096 -a "$rs" -le $((4096 + 2 * 512 * 1024))
  ssw_assert_eq "switched: the listener has no ring memory" \
    "$(Q "$T/stat.json" get ring_resident state=listening local=127.0.0.1:$P1)" None
  stat_json -p "$CPID"
  ssw_assert_eq "-p $CPID: only that process" "$(Q "$T/stat.json" count)" "$(Q "$T/stat.json" count pid=$CPID)"
  ssw_assert_eq "-p $CPID: its connection" "$(Q "$T/stat.json" count pid=$CPID remote=127.0.0.1:$P1)" 1
  "$CLI" stat >"$T/stat.txt" 2>&1
  ssw_check "table: header and a connected shm row" \
    grep -qE "^$CPID +python3? +[0-9]+ +shm +connected +127\.0\.0\.1:[0-9]+ +127\.0\.0\.1:$P1 " "$T/stat.txt"
  ssw_check "table: a RING column, in KiB for the connection" \
    grep -qE "^PID .* CREDITS +RING +REASON" "$T/stat.txt"
  ssw_check "table: the connection's ring memory in KiB" \
    grep -qE "^$CPID +python3? .*127\.0\.0\.1:$P1 .* [0-9.]+ KiB *$" "$T/stat.txt"
  ssw_check "registry file of the client exists" test -f "$DIR/$CPID.stat"
  # half-close: the client's end is in a closing state (FIN_WAIT2); the
  # server reads its EOF and leaves
  touch "$T/sw.half"
  if wait_for state=closing remote=127.0.0.1:$P1 provider=shm; then
    ssw_ok "switched: after shutdown(SHUT_WR) the client's end shows state closing"
  else
    ssw_fail "switched: half-closed connection not shown as closing: $(cat "$T/stat.json")"
  fi
else
  ssw_fail "switched: connection not listed by stat: $(cat "$T/stat.json" "$T/stat.err")"
fi

# ---- kernel TCP: the server is not under the switch
start_pair fb plain switched
P2=$PORT
if wait_for provider=tcp remote=127.0.0.1:$P2 state=connected; then
  ssw_assert_eq "fallback: reason" "$(Q "$T/stat.json" get fallback_reason remote=127.0.0.1:$P2)" \
    "no switched listener"
  b1=$(Q "$T/stat.json" get bytes_sent remote=127.0.0.1:$P2)
  sleep 0.3
  stat_json
  b2=$(Q "$T/stat.json" get bytes_sent remote=127.0.0.1:$P2)
  ssw_assert_gt "fallback: kernel TCP bytes_sent grows ($b1 -> $b2)" "$b2" "$b1"
  ssw_assert_eq "fallback: no ring memory" "$(Q "$T/stat.json" get ring_resident remote=127.0.0.1:$P2)" None
else
  ssw_fail "fallback: connection not listed: $(cat "$T/stat.json")"
fi

# ---- route says tcp (client), and the server sees a peer not switched
start_pair rt switched switched SOCKSWITCH_ROUTES='route 127.0.0.0/8 tcp'
P3=$PORT
if wait_for provider=tcp remote=127.0.0.1:$P3; then
  ssw_assert_eq "route tcp: client reason" "$(Q "$T/stat.json" get fallback_reason remote=127.0.0.1:$P3)" \
    "route says tcp (SOCKSWITCH_ROUTES rule 1)"
  wait_for provider=tcp local=127.0.0.1:$P3 state=connected
  ssw_assert_eq "route tcp: server reason" \
    "$(Q "$T/stat.json" get fallback_reason local=127.0.0.1:$P3 state=connected)" "peer not switched"
else
  ssw_fail "route tcp: connection not listed: $(cat "$T/stat.json")"
fi

# ---- the registration cache's counters (per process): 256 KiB sends from
# one buffer by the rendezvous, registrations pinned (SOCKSWITCH_FAULT=pin:
# shm itself registers nothing)
RV=(SOCKSWITCH_RDMA=read SOCKSWITCH_RNDV_THRESHOLD=64K)
ssw_bg rc-server switched "${RV[@]}" -- "$SSW_PYTHON" "$SSW_PROGS/trickle.py" server --port-file "$T/rc.port"
ssw_wait_file "$T/rc.port" 10
P5=$(cat "$T/rc.port")
ssw_bg rc-client switched "${RV[@]}" SOCKSWITCH_FAULT=pin -- "$SSW_PYTHON" "$SSW_PROGS/trickle.py" client \
  --port "$P5" --stop-file "$T/rc.stop" --chunk 262144 --max-s 25
if wait_for provider=shm state=connected remote=127.0.0.1:$P5; then
  RPID=$(Q "$T/stat.json" get pid remote=127.0.0.1:$P5)
  h1=$(Q "$T/stat.json" get regcache_hits pid=$RPID)
  for ((i = 0; i < 50; i++)); do
    stat_json -p "$RPID"
    h2=$(Q "$T/stat.json" get regcache_hits pid=$RPID)
    [ "${h2:-0}" -gt "${h1:-0}" ] && break
    sleep 0.1
  done
  ssw_check "regcache: stat --json has the cache's keys" Q "$T/stat.json" check
  ssw_assert_gt "regcache: hits of the sender grow ($h1 -> $h2)" "${h2:-0}" "${h1:-0}"
  ssw_assert_ge "regcache: the sender's misses (its buffer registered once)" \
    "$(Q "$T/stat.json" get regcache_misses pid=$RPID)" 1
  stat_json
  ssw_assert_eq "regcache: the receiver (nothing of its own exposed) has none" \
    "$(Q "$T/stat.json" get regcache_misses local=127.0.0.1:$P5 state=connected)" 0
else
  ssw_fail "regcache: connection not listed: $(cat "$T/stat.json")"
fi

# ---- everything ends: nothing listed, nothing left behind
touch "$T/sw.stop" "$T/fb.stop" "$T/rt.stop" "$T/rc.stop"
for p in "${SSW_BG_PIDS[@]}"; do wait "$p" 2>/dev/null; done
SSW_BG_PIDS=()
ssw_check "switched pair: server read everything" grep -q '^SERVER ok' "$T/sw-server.out"
stat_json
ssw_assert_eq "after exit: no sockets" "$(Q "$T/stat.json" count)" 0
ssw_check "after exit: the namespace's registry directory is gone" test ! -e "$DIR"

# ---- a process killed with -9 leaves a file: stat skips and removes it
ssw_bg kill-server switched -- "$SSW_PYTHON" "$SSW_PROGS/trickle.py" server --port-file "$T/kill.port"
ssw_wait_file "$T/kill.port" 10
P4=$(cat "$T/kill.port")
if wait_for state=listening local=127.0.0.1:$P4; then
  KPID=$(Q "$T/stat.json" get pid local=127.0.0.1:$P4)
  kill -9 "$KPID"
  wait "$SSW_BG_PID" 2>/dev/null
  ssw_check "killed: its file is still there" test -f "$DIR/$KPID.stat"
  stat_json
  ssw_assert_eq "killed: not listed" "$(Q "$T/stat.json" count pid=$KPID)" 0
  ssw_check "killed: stat removed its file" test ! -e "$DIR/$KPID.stat"
else
  ssw_fail "kill: listener not listed"
fi
# ---- files of another version of the library (programs started before an
# upgrade): a dead one's is removed, a live one is said not shown, neither is
# counted as untrusted
mkdir -p "$DIR"
true & OLD_DEAD=$!; wait "$OLD_DEAD"
sleep 30 & OLD_LIVE=$!
SSW_BG_PIDS+=("$OLD_LIVE")
"$SSW_PYTHON" "$SSW_PROGS/statforge.py" "$DIR/$OLD_DEAD.stat" --pid "$OLD_DEAD" --starttime 1 --netns "$NS" --version 1
"$SSW_PYTHON" "$SSW_PROGS/statforge.py" "$DIR/$OLD_LIVE.stat" --pid "$OLD_LIVE" --netns "$NS" --version 1
stat_json
ssw_check "another version, process gone: its file removed" test ! -e "$DIR/$OLD_DEAD.stat"
ssw_check "another version, process alive: said not shown" \
  grep -q "1 processes not shown: they run another version" "$T/stat.err"
ssw_check "another version: not counted as untrusted" eval "! grep -q 'entries skipped' '$T/stat.err'"
kill "$OLD_LIVE" 2>/dev/null; wait "$OLD_LIVE" 2>/dev/null
rm -f "$DIR/$OLD_LIVE.stat"
SSW_BG_PIDS=()

# ---- more sockets than a first table holds (4,096): every one is listed
ssw_bg many-server plain -- "$SSW_PYTHON" "$SSW_PROGS/holdconns.py" server --port-file "$T/many.port" \
  --stop-file "$T/many.stop"
ssw_wait_file "$T/many.port" 10
ssw_bg many-client switched -- "$SSW_PYTHON" "$SSW_PROGS/holdconns.py" client --port-file "$T/many.port" \
  --stop-file "$T/many.stop" -n 5000
if ssw_wait_file "$T/many.stop.ready" 30; then
  stat_json
  ssw_assert_eq "5,000 kernel TCP connections of one process: all listed" \
    "$(Q "$T/stat.json" count provider=tcp state=connected)" 5000
  ssw_check "5,000 connections: nothing said missing" test ! -s "$T/stat.err"
else
  ssw_fail "5,000 connections: client did not get them open: $(tail -3 "$T/many-client.err")"
fi
touch "$T/many.stop"
for p in "${SSW_BG_PIDS[@]}"; do wait "$p" 2>/dev/null; done
SSW_BG_PIDS=()

# ---- -p of a process that does not exist
true & GONE=$!; wait "$GONE"
"$CLI" stat -p "$GONE" >"$T/gone.out" 2>&1
ssw_assert_eq "-p of a missing pid: exit status 1" "$?" 1
ssw_check "-p of a missing pid: says no such process" grep -q "no such process" "$T/gone.out"
ssw_assert_no_sanitizer_report "$T"/*.err
ssw_finish
