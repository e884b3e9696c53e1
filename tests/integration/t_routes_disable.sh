#!/usr/bin/env bash
# t_routes_disable — SOCKSWITCH_ROUTES='route 0.0.0.0/0 tcp;route ::/0 tcp'
# routes every destination to kernel TCP even though both sides run the switch:
# the program works, nothing is switched, OutSegs grows (IPv4 and IPv6).
source "$(dirname "$0")/lib.sh"
ssw_enter_netns "$@"
ssw_setup_preload
ssw_tmpdir

SIZES=1x50,64x50,102400x5,5242880x1
MIN_SEGS=50
ROUTES='route 0.0.0.0/0 tcp;route ::/0 tcp'

for fam in 4 6; do
  if [ $fam = 4 ]; then host=127.0.0.1; else host=::1; fi
  name=tcp-only-v$fam
  ssw_echo_pair "$name" switched switched "$host" "$SIZES" SOCKSWITCH_ROUTES="$ROUTES"
  [ "$ECHO_RC" = 0 ] || continue
  ssw_assert_ge "$name: kernel TCP segments during the payload phase" \
    "$(ssw_kv "$T/$name-client.out" outsegs_delta)" "$MIN_SEGS"
  ssw_assert_not_switched "$T/$name-client.stats"
  ssw_assert_not_switched "$T/$name-server.stats"
  ssw_assert_quiet "$T/$name-client.err" "$T/$name-server.err"
done

# control: the same pair without the routes is switched (so the check above
# tests the routes, not a switch that never switches)
ssw_echo_pair control switched switched 127.0.0.1 "$SIZES"
if [ "$ECHO_RC" = 0 ]; then
  ssw_assert_le "control: kernel TCP segments during the payload phase" \
    "$(ssw_kv "$T/control-client.out" outsegs_delta)" "$SSW_OUTSEGS_SLACK"
  ssw_assert_switched "$T/control-client.stats" "$(ssw_sizes_bytes "$SIZES")"
fi
ssw_assert_no_sanitizer_report "$T"/*.err
ssw_finish
