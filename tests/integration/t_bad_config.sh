#!/usr/bin/env bash
# t_bad_config — SOCKSWITCH_CONF names a file with an invalid line: each process
# prints exactly one warning naming the file and the line number, and the program
# still works — on plain kernel TCP, as DESIGN.md says (never break the app
# because of the switch).
source "$(dirname "$0")/lib.sh"
ssw_enter_netns "$@"
ssw_setup_preload
ssw_tmpdir

CONF="$T/bad-sockswitch.conf"
cat >"$CONF" <<'CONF'
# sockswitch routes for the bad-config test
route local shm
route 10.1.2.0/33 shm-this-line-is-wrong
port-exclude 22
CONF
BAD_LINE=3
SIZES=1x50,64x50,102400x5,5242880x1

ssw_echo_pair badconf switched switched 127.0.0.1 "$SIZES" SOCKSWITCH_CONF="$CONF"
if [ "$ECHO_RC" = 0 ]; then
  ssw_assert_ge "badconf: kernel TCP segments during the payload phase (plain TCP)" \
    "$(ssw_kv "$T/badconf-client.out" outsegs_delta)" 50
  ssw_assert_not_switched "$T/badconf-client.stats"
fi
for side in client server; do
  err="$T/badconf-$side.err"
  ssw_assert_eq "badconf-$side: stderr lines" "$(grep -c . "$err")" 1
  ssw_assert_eq "badconf-$side: warnings naming $(basename "$CONF") and line $BAD_LINE" \
    "$(grep -cE "$(basename "$CONF")(:$BAD_LINE\b|.*line $BAD_LINE\b)" "$err")" 1
done

# the unreadable/missing-file case: also one warning, program works
ssw_echo_pair noconf switched switched 127.0.0.1 64x10 SOCKSWITCH_CONF="$T/does-not-exist.conf"
for side in client server; do
  err="$T/noconf-$side.err"
  ssw_assert_eq "noconf-$side: stderr lines naming the missing file" \
    "$(grep -c "does-not-exist.conf" "$err")" 1
done
# a route option its provider refuses: the same, naming file and line
printf '# options\nroute local shm ring=64k\n' >"$T/opt.conf"
ssw_echo_pair badopt switched switched 127.0.0.1 64x10 SOCKSWITCH_CONF="$T/opt.conf"
for side in client server; do
  err="$T/badopt-$side.err"
  ssw_assert_eq "badopt-$side: stderr lines" "$(grep -c . "$err")" 1
  ssw_assert_eq "badopt-$side: one warning naming opt.conf:2 and the option" \
    "$(grep -c "opt.conf:2: provider shm takes no options (got 'ring=64k')" "$err")" 1
done
if [ "$ECHO_RC" = 0 ]; then ssw_assert_not_switched "$T/badopt-client.stats"; fi
# a bad wait policy: one line naming the variable and the accepted values
ssw_echo_pair badwait switched switched 127.0.0.1 64x10 SOCKSWITCH_WAIT=fast
for side in client server; do
  err="$T/badwait-$side.err"
  ssw_assert_eq "badwait-$side: stderr lines naming SOCKSWITCH_WAIT=fast and the values" \
    "$(grep -c "SOCKSWITCH_WAIT=fast: expected auto, spin, yield or sleep" "$err")" 1
done
ssw_assert_no_sanitizer_report "$T"/*.err
ssw_finish
