#!/usr/bin/env bash
# t_fabric_idle_send — bytes that send() accepted reach the reader across the
# veth even when the sender then stays away from the switch (blocked reading
# a pipe), as kernel TCP delivers its socket buffer whatever its process does.
#
# Over fabric, libfabric's tcp provider writes a message to its socket inside
# fi_send and keeps what the socket would not take; it asks for POLLOUT only
# at its next progress (a completion queue read), and it wakes sleepers for
# that through the queue's signal, which the provider detaches (fab_hub.c).
# With the sender away nobody read the queue: the rest of a ~110 KiB write
# stayed in the sender's process for good (the differential tester's `xfer`,
# 3 of 6 runs of seed 500344 step 31).  The provider's thread now watches
# every connection's socket for room (EPOLLOUT, edge-triggered: the kernel
# reports it after a write that found the socket full) and progresses it.
#
# Each round: the writer sends ~110 KiB in pieces of 1 B to 64 KiB, says so on
# a fifo and blocks on another; the reader reads (after the writer's word, or
# all along) and must get everything (10 s without a byte is a stall).  The
# libfabric sockets' buffers are made small (tcp_wmem/tcp_rmem of the two
# namespaces) so that every round's writes fill them.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/netns.sh"
ssw_fabric_pair_setup
PROG=$(ssw_prog idlesend) || exit 1

# small socket buffers: a round's writes fill the writer's socket
ip netns exec "$SSW_NS_B" sysctl -qw net.ipv4.tcp_wmem="4096 16384 16384" &&
  ip netns exec "$SSW_NS_A" sysctl -qw net.ipv4.tcp_rmem="4096 32768 32768" ||
  { echo "FAIL: cannot set the namespaces' TCP buffer sizes"; exit 1; }

ROUNDS=${IDLE_ROUNDS:-6}

# run NAME MODE BYTES PIECE: one connection, ROUNDS rounds of BYTES (within
# the session's window: every send returns before the reader reads) in
# send()s of PIECE bytes (0: random sizes up to 64 KiB)
run() {
  local name=$1 mode=$2 BYTES=$3 piece=$4
  rm -f "$T/$name.sent" "$T/$name.done"
  mkfifo "$T/$name.sent" "$T/$name.done"
  ssw_ns_bg "$name-server" "$SSW_NS_A" switched SOCKSWITCH_STATS_FILE="$T/$name-server.stats" -- \
    "$PROG" server "$T/$name.port" "$T/$name.sent" "$T/$name.done" "$ROUNDS" "$BYTES" "$mode"
  local spid=$SSW_BG_PID
  ssw_wait_file "$T/$name.port" || { ssw_fail "$name: server did not start"; return; }
  local port
  port=$(cat "$T/$name.port")
  ssw_ns_wait_listen "$SSW_NS_A" "$port" 10 || { ssw_fail "$name: no fabric listener on $port"; return; }
  ssw_step "client ($name)"
  ssw_ns_run "$SSW_NS_B" switched SOCKSWITCH_STATS_FILE="$T/$name-client.stats" -- \
    "$PROG" client "$SSW_NS_ADDR_A" "$port" "$T/$name.sent" "$T/$name.done" "$ROUNDS" "$BYTES" "$piece" \
    >"$T/$name-client.out" 2>"$T/$name-client.err"
  ssw_assert_eq "$name: writer exit status" $? 0
  wait "$spid"
  ssw_assert_eq "$name: reader exit status" $? 0
  local wrote read_
  wrote=$(awk '/^WROTE/{print $2, $3}' "$T/$name-client.out")
  read_=$(awk '/^READ/{print $2, $3}' "$T/$name-server.out")
  echo "# $name: wrote ${wrote:-?}, read ${read_:-?}"
  grep '^STALL\|^END\|^SLOWEST' "$T/$name-server.out" | sed 's/^/# /'
  ssw_assert_eq "$name: bytes (and checksum) the reader got" "${read_:-none}" "$((ROUNDS * BYTES)) ${wrote#* }"
  ssw_assert_eq "$name: the writer's connection went over fabric" "$(ssw_stats_sum "$T/$name-client.stats" switched)" 1
  ssw_assert_eq "$name: the reader's connection went over fabric" "$(ssw_stats_sum "$T/$name-server.stats" switched)" 1
}

# one message a round, which fills the writer's socket: nothing after it
# reads the completion queue (the reader waits for the writer's word)
run one after 61440 61440
run small after 112640 100
# the reader waits for the writer to be idle, then reads
run after after 112640 0
# the reader reads all along (the differential tester's xfer)
run during during 112640 0
ssw_assert_no_sanitizer_report "$T"/*.err
ssw_finish
