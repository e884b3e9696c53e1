#!/usr/bin/env bash
# t_python_echo — a python3 socket server and client, both under the switch,
# exchange frames of 1 B, 64 B, 100 KiB and 5 MiB (sha256-verified both ways),
# over IPv4 (127.0.0.1) and IPv6 (::1). The payload must go over shared memory:
# no kernel TCP segment while the frames are exchanged, the stats show the
# connection switched and carrying at least the payload, and the switch prints
# nothing by default.
source "$(dirname "$0")/lib.sh"
ssw_enter_netns "$@"
ssw_setup_preload
ssw_tmpdir

SIZES=1x100,64x100,102400x10,5242880x2
PAYLOAD=$(ssw_sizes_bytes "$SIZES")

for fam in 4 6; do
  if [ $fam = 4 ]; then host=127.0.0.1; else host=::1; fi
  name=v$fam
  ssw_echo_pair "$name" switched switched "$host" "$SIZES"
  [ "$ECHO_RC" = 0 ] || continue
  ssw_assert_le "$name: kernel TCP segments during the payload phase" \
    "$(ssw_kv "$T/$name-client.out" outsegs_delta)" "$SSW_OUTSEGS_SLACK"
  ssw_assert_le "$name: kernel TCP segments over the whole run (1 connection)" \
    "$ECHO_RUN_SEGS" "$SSW_CONN_SEGS"
  ssw_assert_switched "$T/$name-client.stats" "$PAYLOAD"
  ssw_assert_switched "$T/$name-server.stats" "$PAYLOAD"
  ssw_assert_quiet "$T/$name-client.err" "$T/$name-server.err"
done
ssw_assert_no_sanitizer_report "$T"/*.err
ssw_finish
