#!/usr/bin/env bash
# t_asyncio — a python asyncio echo server and client (tests/progs/asyncio_echo.py;
# asyncio's default selector event loop, i.e. epoll), both with the streams API
# (start_server / open_connection, drain, write_eof) and with the low-level
# loop.sock_accept / sock_connect / sock_recv / sock_recv_into / sock_sendall.
# 8 concurrent connections each echo 1 B … 1 MiB frames, verified byte for byte,
# then half-close and expect EOF.  Run under the switch and on kernel TCP in the
# same run; under the switch every connection went over shared memory, the
# payload is in the switch's counters and the kernel's TCP segment counter
# stays flat (idle companion connections only).
source "$(dirname "$0")/lib.sh"
ssw_enter_netns "$@"
ssw_setup_preload
ssw_tmpdir

CONNS=8
SIZES=1x50,100x50,4096x20,65536x10,1048576x2
PAYLOAD=$(( CONNS * $(ssw_sizes_bytes "$SIZES") ))
PROG=$SSW_PROGS/asyncio_echo.py
declare -A SECS

for api in streams sock; do
  for mode in switched plain; do
    tag=$mode-$api
    rm -f "$T/$tag.port"
    seg0=$(ssw_outsegs)
    ssw_bg "$tag-server" "$mode" SOCKSWITCH_STATS_FILE="$T/$tag-server.stats" -- \
      "$SSW_PYTHON" "$PROG" server --api $api --port-file "$T/$tag.port" --conns $CONNS
    spid=$SSW_BG_PID
    if ! ssw_wait_file "$T/$tag.port" 20; then ssw_fail "$tag: server did not start"; continue; fi
    ssw_run "$mode" SOCKSWITCH_STATS_FILE="$T/$tag-client.stats" -- \
      "$SSW_PYTHON" "$PROG" client --api $api --port "$(cat "$T/$tag.port")" --conns $CONNS --sizes "$SIZES" \
      >"$T/$tag-client.out" 2>"$T/$tag-client.err"
    rc=$?
    wait "$spid"; rs=$?
    segs=$(( $(ssw_outsegs) - seg0 ))
    ssw_assert_eq "$tag: client exit status" $rc 0
    ssw_assert_eq "$tag: server exit status" $rs 0
    ssw_assert_eq "$tag: client verified every echo" \
      "$(sed -n 's/^RESULT \(ok\) .*bytes=\([0-9]*\).*/\1 \2/p' "$T/$tag-client.out")" "ok $PAYLOAD"
    ssw_assert_eq "$tag: server echoed every byte" \
      "$(sed -n 's/^SERVER \(ok\) conns=\([0-9]*\) bytes=\([0-9]*\).*/\1 \2 \3/p' "$T/$tag-server.out")" "ok $CONNS $PAYLOAD"
    SECS[$tag]=$(sed -n 's/^RESULT .*seconds=\([0-9.]*\).*/\1/p' "$T/$tag-client.out")
    if [ $mode = switched ]; then
      ssw_assert_eq "$tag: client connections over shared memory" "$(ssw_stats_sum "$T/$tag-client.stats" switched)" $CONNS
      ssw_assert_eq "$tag: client fallback connections" "$(ssw_stats_sum "$T/$tag-client.stats" fallback)" 0
      ssw_assert_switched "$T/$tag-client.stats" "$PAYLOAD" $CONNS
      ssw_assert_switched "$T/$tag-server.stats" "$PAYLOAD" $CONNS
      ssw_assert_le "$tag: kernel TCP segments ($CONNS idle companion connections)" "$segs" $((CONNS * SSW_CONN_SEGS))
      ssw_assert_quiet "$T/$tag-client.err" "$T/$tag-server.err"
    else
      echo "# $tag: $segs kernel TCP segments"
    fi
  done
done
# One event loop, both ends, a client with SO_SNDBUF 1024: sock_sendall must
# finish (its socket becomes writable once the same loop drained the peer).
SELF_SIZES=1x10,4096x20,65536x8,1048576x1
SELF_BYTES=$(ssw_sizes_bytes "$SELF_SIZES")
for mode in switched plain; do
  ssw_run "$mode" SOCKSWITCH_STATS_FILE="$T/selfloop-$mode.stats" -- \
    "$SSW_PYTHON" "$PROG" selfloop --sizes "$SELF_SIZES" --timeout 20 >"$T/selfloop-$mode.out" 2>"$T/selfloop-$mode.err"
  ssw_assert_eq "selfloop $mode: exit status" $? 0
  ssw_assert_eq "selfloop $mode: sock_sendall with SO_SNDBUF 1024 drained by its own loop" \
    "$(cat "$T/selfloop-$mode.out")" "SELFLOOP ok bytes=$SELF_BYTES"
done
ssw_assert_ge "selfloop switched: over shared memory" "$(ssw_stats_sum "$T/selfloop-switched.stats" switched)" 1
ssw_assert_quiet "$T/selfloop-switched.err"

printf '# asyncio echo, %d connections, %d bytes (seconds)   switched   kernel\n' $CONNS "$PAYLOAD"
for api in streams sock; do
  printf '#   %-8s                                        %8s %8s\n' $api "${SECS[switched-$api]:-?}" "${SECS[plain-$api]:-?}"
done
ssw_assert_no_sanitizer_report "$T"/*.err
ssw_finish
