#!/usr/bin/env bash
# t_socat — socat TCP-LISTEN receives a 10 MiB random file from a socat TCP
# client, both under the switch; the copy's sha256 matches, both processes were
# switched and carried the file over shared memory, and the kernel saw no more
# TCP segments than one idle connection's set-up and tear-down.
source "$(dirname "$0")/lib.sh"
ssw_enter_netns "$@"
ssw_setup_preload
ssw_tmpdir
command -v socat >/dev/null || { echo "SKIP: socat not installed"; exit 77; }

SIZE=$((10 * 1024 * 1024))
head -c "$SIZE" /dev/urandom >"$T/in.bin"

run_socat() { # NAME PORT LISTEN-ADDRESS CONNECT-ADDRESS
  local name=$1 port=$2 spid rc seg0
  seg0=$(ssw_outsegs)
  ssw_bg "$name-server" switched SOCKSWITCH_STATS_FILE="$T/$name-server.stats" -- \
    socat -u "$3" "CREATE:$T/$name-out.bin"
  spid=$SSW_BG_PID
  ssw_wait_listen $port || { ssw_fail "$name: socat did not listen"; return; }
  ssw_run switched SOCKSWITCH_STATS_FILE="$T/$name-client.stats" -- \
    socat -u "OPEN:$T/in.bin" "$4" >"$T/$name-client.out" 2>"$T/$name-client.err"
  rc=$?
  ssw_assert_eq "$name: socat client exit status" $rc 0
  wait $spid; rc=$?
  ssw_assert_eq "$name: socat server exit status" $rc 0
  local segs=$(( $(ssw_outsegs) - seg0 ))
  ssw_assert_eq "$name: sha256 of the received file" \
    "$(sha256sum <"$T/$name-out.bin" | cut -d' ' -f1)" "$(sha256sum <"$T/in.bin" | cut -d' ' -f1)"
  ssw_assert_le "$name: kernel TCP segments for the whole run (1 connection)" "$segs" "$SSW_CONN_SEGS"
  ssw_assert_ge "$name: client switched connections" "$(ssw_stats_sum "$T/$name-client.stats" switched)" 1
  ssw_assert_ge "$name: client bytes_sent over shm" "$(ssw_stats_sum "$T/$name-client.stats" bytes_sent)" "$SIZE"
  ssw_assert_ge "$name: server switched connections" "$(ssw_stats_sum "$T/$name-server.stats" switched)" 1
  ssw_assert_ge "$name: server bytes_received over shm" "$(ssw_stats_sum "$T/$name-server.stats" bytes_received)" "$SIZE"
  ssw_assert_quiet "$T/$name-client.err" "$T/$name-server.err"
  rm -f "$T/$name-out.bin"
}

run_socat v4 5001 TCP4-LISTEN:5001,bind=127.0.0.1,reuseaddr TCP4:127.0.0.1:5001
# wildcard IPv6 listener, client to ::1
run_socat v6 5002 TCP6-LISTEN:5002,reuseaddr TCP6:[::1]:5002
ssw_assert_no_sanitizer_report "$T"/*.err
ssw_finish
