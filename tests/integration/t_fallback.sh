#!/usr/bin/env bash
# t_fallback — a switched program talking to a plain (not preloaded) one falls
# back to kernel TCP transparently, in both directions: switched client → plain
# server, plain client → switched server. The data arrives intact, the switched
# side counts a fallback connection and nothing over shared memory, and the
# payload really went over kernel TCP (OutSegs grows).
source "$(dirname "$0")/lib.sh"
ssw_enter_netns "$@"
ssw_setup_preload
ssw_tmpdir

SIZES=1x50,64x50,102400x5,5242880x1
# 100 small round trips alone cost >= 100 kernel segments on TCP
MIN_SEGS=50

for dir in client server; do
  if [ $dir = client ]; then smode=plain cmode=switched; else smode=switched cmode=plain; fi
  for fam in 4 6; do
    if [ $fam = 4 ]; then host=127.0.0.1; else host=::1; fi
    name=switched-$dir-v$fam
    ssw_echo_pair "$name" $smode $cmode "$host" "$SIZES"
    [ "$ECHO_RC" = 0 ] || continue
    ssw_assert_ge "$name: kernel TCP segments during the payload phase (really TCP)" \
      "$(ssw_kv "$T/$name-client.out" outsegs_delta)" "$MIN_SEGS"
    st="$T/$name-$dir.stats"
    ssw_assert_ge "$name: switched side reported stats" "$(ssw_stats_lines "$st")" 1
    ssw_assert_ge "$name: fallback connections" "$(ssw_stats_sum "$st" fallback)" 1
    ssw_assert_eq "$name: switched connections" "$(ssw_stats_sum "$st" switched)" 0
    ssw_assert_eq "$name: bytes over shm" "$(ssw_stats_sum "$st" bytes_sent)" 0
    ssw_assert_quiet "$T/$name-client.err" "$T/$name-server.err"
  done
done
ssw_assert_no_sanitizer_report "$T"/*.err
ssw_finish
