#!/usr/bin/env bash
# t_fabric_exit — a writer that exits without closing its fabric connection
# while megabytes it wrote are still queued (in its own process, or in the
# reader's kernel) must not lose them: exit() waits until the reader, across
# the veth, has taken them all, as kernel TCP delivers a dead process's
# socket buffer.  Two readers: one stopped while the writer fills what it
# can and exits (the provider's backlog), one reading slowly all along (the
# credits it returns are unread at the writer when it exits: a close then
# resets the transport, and the reader's kernel drops what it held).  The
# switch closes such connections in its own atexit handler, and the
# provider's wait must run after it: registered at the process's first
# connect it ran before (the provider's thread starts there now), and the
# slow reader got a reset (socat lost its last 176 KiB of 10 MiB in
# t_fabric_apps once).
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/netns.sh"
ssw_fabric_pair_setup
PROG=$(ssw_prog fillexit) || exit 1

ssw_ns_bg server "$SSW_NS_A" switched SOCKSWITCH_STATS_FILE="$T/server.stats" -- "$PROG" server "$T/port"
ssw_wait_file "$T/port" || { ssw_fail "server did not start"; ssw_finish; }
PORT=$(cat "$T/port")
ssw_ns_wait_listen "$SSW_NS_A" "$PORT" 10 || { ssw_fail "no fabric listener on $PORT"; ssw_finish; }

# run NAME MAX CHUNK MIN PACE [block]: the writer queues up to MAX bytes in
# CHUNK writes (at least MIN); PACE: the reader's pause between reads (0:
# it stops itself until the writer is at its exit)
run() {
  local name=$1 max=$2 chunk=$3 pace=$5 cpid spid= i p
  ssw_ns_bg "$name-server" "$SSW_NS_A" switched SOCKSWITCH_STATS_FILE="$T/$name-server.stats" -- \
    "$PROG" server "$T/$name.port" "$pace"
  ssw_wait_file "$T/$name.port" || { ssw_fail "$name: server did not start"; return; }
  local port
  port=$(cat "$T/$name.port")
  ssw_ns_wait_listen "$SSW_NS_A" "$port" 10 || { ssw_fail "$name: no fabric listener on $port"; return; }
  ssw_ns_cmd "$SSW_NS_B" switched SOCKSWITCH_STATS_FILE="$T/$name-client.stats" -- \
    "$PROG" client "$SSW_NS_ADDR_A" "$port" "$max" "$chunk" ${6:-}
  "${SSW_CMD[@]}" >"$T/$name-client.out" 2>"$T/$name-client.err" &
  cpid=$!
  if [ "$pace" = 0 ]; then
  # the reader stops itself once it has accepted; the writer then fills
  # all it can and goes to its exit, with what it wrote queued at home
  for ((i = 0; i < 100; i++)); do
    for p in $(ip netns pids "$SSW_NS_A" 2>/dev/null); do
      [ "$(cat "/proc/$p/comm" 2>/dev/null)" = fillexit ] && [ "$(awk '{print $3}' "/proc/$p/stat" 2>/dev/null)" = T ] && spid=$p
    done
    [ -n "$spid" ] && break
    sleep 0.05
  done
  ssw_check "$name: the reader stopped itself after accepting" test -n "$spid"
  for ((i = 0; i < 100; i++)); do grep -q '^WROTE' "$T/$name-client.out" 2>/dev/null && break; sleep 0.05; done
  sleep 1 # the writer sits in its exit
  [ -n "$spid" ] && kill -CONT "$spid"
  fi
  wait "$cpid"
  ssw_assert_eq "$name: writer exit status" $? 0
  # the reader's line, then its stats (written at its exit)
  for ((i = 0; i < 200; i++)); do grep -q '^READ' "$T/$name-server.out" 2>/dev/null && break; sleep 0.05; done
  for ((i = 0; i < 100; i++)); do [ -s "$T/$name-server.stats" ] && break; sleep 0.05; done
  local wrote read_
  wrote=$(awk '/^WROTE/{print $2}' "$T/$name-client.out")
  read_=$(awk '/^READ/{print $2}' "$T/$name-server.out")
  echo "# $name: wrote ${wrote:-?}, read ${read_:-?}"
  ssw_assert_ge "$name: bytes the writer queued" "${wrote:-0}" "$4"
  ssw_assert_eq "$name: bytes the reader got after the writer's exit" "${read_:-none}" "${wrote:-?}"
  ssw_assert_eq "$name: the writer's connection went over fabric" "$(ssw_stats_sum "$T/$name-client.stats" switched)" 1
  ssw_assert_eq "$name: the reader's connection went over fabric" "$(ssw_stats_sum "$T/$name-server.stats" switched)" 1
}

# megabytes in the provider's backlog (beyond the reader's buffers) at the exit
run stopped 16777216 16384 1048576 0
# 8 MiB to a reader taking 16 KiB every 0.5 ms, the writer blocking
run slow 8388608 65536 8388608 500 block
ssw_assert_no_sanitizer_report "$T"/*.err
ssw_finish
