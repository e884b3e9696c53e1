#!/usr/bin/env bash
# t_log — SOCKSWITCH_LOG / SOCKSWITCH_LOG_FILE: silent by default; at info,
# exactly one line per connection decision (listening, switched over shm on
# each side, or kernel TCP and why); to a file with SOCKSWITCH_LOG_FILE;
# debug says more, error says nothing here; a bad level is one warning.
source "$(dirname "$0")/lib.sh"
ssw_enter_netns "$@"
ssw_setup_preload
ssw_tmpdir
unset SOCKSWITCH_LOG SOCKSWITCH_LOG_FILE SOCKSWITCH_CONF SOCKSWITCH_ROUTES

count() { grep -cE "$2" "$1" 2>/dev/null || true; }

# ---- default: quiet
ssw_echo_pair quiet switched switched 127.0.0.1 64x10
ssw_assert_quiet "$T/quiet-client.err" "$T/quiet-server.err"

# ---- info to a file: one line per decision
LOG="$T/sw.log"
ssw_echo_pair sw switched switched 127.0.0.1 64x10,102400x2 SOCKSWITCH_LOG=info SOCKSWITCH_LOG_FILE="$LOG"
ssw_assert_quiet "$T/sw-client.err" "$T/sw-server.err"
PORT=$(cat "$T/sw.port")
ssw_assert_eq "info: one 'listening' line" "$(count "$LOG" "info: fd [0-9]+: listening on 127\.0\.0\.1:$PORT \(kernel TCP \+ shm\)$")" 1
ssw_assert_eq "info: one 'connected over shm' line (client)" "$(count "$LOG" "info: fd [0-9]+: connected to 127\.0\.0\.1:$PORT over shm$")" 1
ssw_assert_eq "info: one 'accepted over shm' line (server)" "$(count "$LOG" "info: fd [0-9]+: accepted 127\.0\.0\.1:[0-9]+ over shm$")" 1
ssw_assert_eq "info: nothing else" "$(grep -c . "$LOG")" 3
ssw_assert_eq "info: every line tagged with pid and level" "$(count "$LOG" '^sockswitch\[[0-9]+\] info: ')" 3

# ---- info: kernel TCP because the server is not switched
ssw_echo_pair fb plain switched 127.0.0.1 64x10 SOCKSWITCH_LOG=info
ssw_assert_eq "info fallback: one line, with the reason" \
  "$(count "$T/fb-client.err" 'info: fd [0-9]+: connect 127\.0\.0\.1:[0-9]+: kernel TCP \(no switched listener\)$')" 1
ssw_assert_eq "info fallback: nothing else" "$(grep -c . "$T/fb-client.err")" 1

# ---- info: kernel TCP because a rule says so; the server sees a peer not switched
ssw_bg rt-server switched SOCKSWITCH_LOG=info -- "$SSW_PYTHON" "$SSW_PROGS/echo.py" server --host 127.0.0.1 --port-file "$T/rt.port"
if ssw_wait_file "$T/rt.port" 10; then
  ssw_run switched SOCKSWITCH_LOG=info SOCKSWITCH_ROUTES='route 127.0.0.0/8 tcp' -- "$SSW_PYTHON" "$SSW_PROGS/echo.py" \
    client --host 127.0.0.1 --port "$(cat "$T/rt.port")" --sizes 64x10 >"$T/rt-client.out" 2>"$T/rt-client.err"
  wait "$SSW_BG_PID"
  ssw_assert_eq "info route: client line names the rule" \
    "$(count "$T/rt-client.err" 'kernel TCP \(route says tcp: SOCKSWITCH_ROUTES rule 1\)$')" 1
  ssw_assert_eq "info route: server line (peer not switched)" \
    "$(count "$T/rt-server.err" 'accepted fd [0-9]+ over kernel TCP \(peer not switched\)$')" 1
else
  ssw_fail "route: server did not start"
fi

# ---- debug says more; error says nothing
ssw_echo_pair dbg switched switched 127.0.0.1 64x10 SOCKSWITCH_LOG=debug
ssw_assert_gt "debug: more than the info lines" "$(cat "$T"/dbg-*.err | grep -c .)" 3
ssw_echo_pair err plain switched 127.0.0.1 64x10 SOCKSWITCH_LOG=error
ssw_assert_quiet "$T/err-client.err"

# ---- a bad level: one warning, the program works
ssw_echo_pair badlvl switched switched 127.0.0.1 64x10 SOCKSWITCH_LOG=verbose
ssw_assert_eq "bad level: one warning naming the variable (client)" \
  "$(count "$T/badlvl-client.err" 'warn: SOCKSWITCH_LOG=verbose: expected error, warn, info or debug')" 1
ssw_assert_eq "bad level: nothing else (client)" "$(grep -c . "$T/badlvl-client.err")" 1
ssw_assert_no_sanitizer_report "$T"/*.err
ssw_finish
