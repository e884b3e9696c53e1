#!/usr/bin/env bash
# t_hostile_config — settings and the files they name, as a hostile local user
# would set them up: a FIFO as SOCKSWITCH_CONF (`run --conf`, `routes --conf`,
# `doctor --conf`, a preloaded program), as SOCKSWITCH_STATS_FILE and as
# SOCKSWITCH_LOG_FILE hangs nothing and earns one line naming the file and
# what is wrong, the program working on plain TCP; a symlink `nobody` planted
# in a sticky world-writable directory is not followed by root's stats and
# log writing (nor a planted file read as root's configuration, nor a planted
# library preloaded by `sockswitch run`), while
# root's own link there is; garbage in each setting is one line naming the
# variable, the value and what is accepted (`sockswitch params` agrees).
SSW_TIMEOUT=${SSW_TIMEOUT:-15}
source "$(dirname "$0")/lib.sh"
ssw_enter_netns "$@"
ssw_setup_preload
ssw_tmpdir

CLI=$SSW_BUILD/sockswitch
for v in $(env | sed -n 's/^\(SOCKSWITCH_[A-Z_]*\)=.*/\1/p'); do unset "$v"; done

# prog NAME [VAR=VAL…] — a preloaded program that starts the switch (a
# connect to a closed port) and reports; stderr in $T/NAME.err
prog() {
  local name=$1; shift
  ssw_step "program $name: $*"
  ssw_run switched "$@" -- "$SSW_PYTHON" -c '
import socket
s = socket.socket()
print("RESULT refused=%d" % (s.connect_ex(("127.0.0.1", 9)) != 0))' >"$T/$name.out" 2>"$T/$name.err"
  PROG_RC=$?
}

# assert_prog NAME PATTERN — exited in time and worked; stderr is one line matching PATTERN
assert_prog() {
  ssw_assert_eq "$1: exit status (124: hung)" "$PROG_RC" 0
  ssw_check "$1: program worked" grep -q '^RESULT refused=1' "$T/$1.out"
  ssw_assert_eq "$1: stderr lines" "$(grep -c . "$T/$1.err")" 1
  ssw_assert_eq "$1: one line: $2" "$(grep -cE -- "$2" "$T/$1.err")" 1
}

# ---- a FIFO as the configuration file
FIFO=$T/fifo.conf
mkfifo "$FIFO"
FIFO_MSG="fifo.conf: cannot read: is a FIFO, not a regular file"
ssw_echo_pair fifoconf switched switched 127.0.0.1 64x10 SOCKSWITCH_CONF="$FIFO"
if [ "$ECHO_RC" = 0 ]; then ssw_assert_not_switched "$T/fifoconf-client.stats"; fi
for side in client server; do
  ssw_assert_eq "fifoconf-$side: one line naming the FIFO" "$(grep -c "$FIFO_MSG; switch off, using kernel TCP" "$T/fifoconf-$side.err")" 1
  ssw_assert_eq "fifoconf-$side: stderr lines" "$(grep -c . "$T/fifoconf-$side.err")" 1
done

# cli NAME CMD… — a command of the CLI under a timeout; output in $T/NAME.{out,err}
cli() {
  local name=$1; shift
  ssw_step "cli $name: $*"
  timeout -k 2 "$SSW_TIMEOUT" "$@" >"$T/$name.out" 2>"$T/$name.err"
  CLI_RC=$?
}
cli run-conf "$CLI" run --conf "$FIFO" -- true
ssw_assert_eq "run --conf FIFO: exit 1 (124: hung)" "$CLI_RC" 1
ssw_check "run --conf FIFO: says so" grep -q "^sockswitch run: .*$FIFO_MSG" "$T/run-conf.err"
cli run-env env SOCKSWITCH_CONF="$FIFO" "$CLI" run -- true
ssw_assert_eq "SOCKSWITCH_CONF=FIFO run: exit 1" "$CLI_RC" 1
ssw_check "SOCKSWITCH_CONF=FIFO run: says so" grep -q "^sockswitch run: .*$FIFO_MSG" "$T/run-env.err"
cli routes-conf "$CLI" routes --conf "$FIFO" 127.0.0.1
ssw_assert_eq "routes --conf FIFO: exit 1 (124: hung)" "$CLI_RC" 1
ssw_check "routes --conf FIFO: says so" grep -q "^sockswitch routes: .*$FIFO_MSG" "$T/routes-conf.err"
cli routes-env env SOCKSWITCH_CONF="$FIFO" "$CLI" routes 127.0.0.1
ssw_assert_eq "SOCKSWITCH_CONF=FIFO routes: exit 1" "$CLI_RC" 1
cli doctor-conf "$CLI" doctor --conf "$FIFO"
ssw_assert_eq "doctor --conf FIFO: exit 1 (124: hung)" "$CLI_RC" 1
ssw_check "doctor --conf FIFO: says so" grep -q "$FIFO_MSG" "$T/doctor-conf.out" "$T/doctor-conf.err"

# ---- a FIFO as the stats file and as the log file: no hang, one warning
mkfifo "$T/stats.fifo" "$T/log.fifo"
prog fifo-stats SOCKSWITCH_STATS_FILE="$T/stats.fifo"
assert_prog fifo-stats "warn: SOCKSWITCH_STATS_FILE=$T/stats.fifo: is a FIFO, not a regular file \(no statistics written\)$"
prog fifo-log SOCKSWITCH_LOG_FILE="$T/log.fifo" SOCKSWITCH_LOG=info
ssw_assert_eq "fifo-log: exit status (124: hung)" "$PROG_RC" 0
ssw_assert_eq "fifo-log: one line naming the FIFO" \
  "$(grep -c "SOCKSWITCH_LOG_FILE=$T/log.fifo: is a FIFO, not a regular file (logging to stderr)" "$T/fifo-log.err")" 1
# an unwritable stats file: said once, at start
prog nodir-stats SOCKSWITCH_STATS_FILE="$T/no/such/dir/ssw.stats"
assert_prog nodir-stats "SOCKSWITCH_STATS_FILE=$T/no/such/dir/ssw.stats: No such file or directory \(no statistics written\)"

# ---- garbage in each setting: one line naming it, the value and what is accepted
check_garbage() {  # VAR VALUE CONSEQUENCE
  local tag=garbage-${1#SOCKSWITCH_}
  prog "$tag" "$1=$2"
  assert_prog "$tag" "warn: $1=$2: expected .*; $3"
}
OFF="switch off, using kernel TCP"
for v in SOCKSWITCH_SPIN_US SOCKSWITCH_RNDV_THRESHOLD SOCKSWITCH_RNDV_MAX SOCKSWITCH_SHM_RING; do
  check_garbage "$v" 12abc "$OFF"
done
check_garbage SOCKSWITCH_SHM_RING 100000 "$OFF"   # not a power of two
check_garbage SOCKSWITCH_RNDV_THRESHOLD -1 "$OFF"
for v in SOCKSWITCH_CMA SOCKSWITCH_RDMA SOCKSWITCH_WAIT SOCKSWITCH_DISABLE SOCKSWITCH_FAULT; do
  check_garbage "$v" abc "$OFF"
done
check_garbage SOCKSWITCH_LOG abc 'using the default \(warn\)'
check_garbage SOCKSWITCH_STAT abc 'using the default \(1\)'
check_garbage SOCKSWITCH_NO_EXEC_KEEP abc 'using the default \(0\)'
check_garbage SOCKSWITCH_STAT_DIR rel/dir 'using the default \(/dev/shm/sockswitch\)'
# the switch really is off after a refused value: nothing goes over shm
ssw_echo_pair ringbad switched switched 127.0.0.1 64x10 SOCKSWITCH_SHM_RING=garbage
if [ "$ECHO_RC" = 0 ]; then ssw_assert_not_switched "$T/ringbad-client.stats"; fi
# and `sockswitch params` shows the same verdict, exit 1
SOCKSWITCH_SHM_RING=garbage SOCKSWITCH_CMA=abc "$CLI" params --set >"$T/params.out" 2>&1; rc=$?
ssw_assert_eq "params --set with rejected values: exit" "$rc" 1
ssw_assert_eq "params --set: both rejected" "$(grep -c '^    REJECTED: SOCKSWITCH_\(SHM_RING\|CMA\)=' "$T/params.out")" 2
SOCKSWITCH_CMA=abc "$CLI" params --json >"$T/params.json" 2>&1
ssw_check "params --json: valid JSON, CMA rejected, every setting listed" "$SSW_PYTHON" -c '
import json, sys
a = json.load(open(sys.argv[1]))
cma = [x for x in a if x["name"] == "SOCKSWITCH_CMA"][0]
sys.exit(not (cma["valid"] is False and cma["value"] == "abc" and "expected 0 or 1" in cma["error"] and len(a) >= 15))' "$T/params.json"

# ---- links and files planted by another user in a sticky world-writable directory
planted_part() {
  local sticky=$T/sticky victim=$T/victim
  chmod 711 "$T"
  mkdir "$sticky" && chmod 1777 "$sticky"
  printf 'precious\n' >"$victim"; chmod 644 "$victim"
  local sum0; sum0=$(md5sum <"$victim")
  local as_nobody=(setpriv --reuid=nobody --regid=nogroup --clear-groups)
  "${as_nobody[@]}" ln -s "$victim" "$sticky/ssw.stats" &&
  "${as_nobody[@]}" ln -s "$victim" "$sticky/ssw.log" &&
  "${as_nobody[@]}" sh -c "printf 'route local tcp\n' >'$sticky/ssw.conf'" || {
    ssw_fail "planting as nobody failed"; return; }
  ssw_echo_pair planted switched switched 127.0.0.1 64x10 SOCKSWITCH_LOG=info \
    SOCKSWITCH_LOG_FILE="$sticky/ssw.log"
  ssw_assert_eq "planted: root's log did not go through nobody's link" "$(md5sum <"$victim")" "$sum0"
  prog planted-stats SOCKSWITCH_STATS_FILE="$sticky/ssw.stats"
  assert_prog planted-stats "SOCKSWITCH_STATS_FILE=$sticky/ssw.stats: is a symlink of uid 65534 in a sticky world-writable directory: not followed"
  ssw_assert_eq "planted: root's stats did not go through nobody's link" "$(md5sum <"$victim")" "$sum0"
  for side in client server; do
    ssw_assert_eq "planted-$side: log link refused, one line" "$(grep -c "SOCKSWITCH_LOG_FILE=$sticky/ssw.log: is a symlink of uid 65534 in a sticky world-writable directory: not followed" "$T/planted-$side.err")" 1
  done
  prog planted-conf SOCKSWITCH_CONF="$sticky/ssw.conf"
  assert_prog planted-conf "ssw.conf: cannot read: is a file of uid 65534 in a sticky world-writable directory: not used"
  # `run --conf` judges the name as given (resolving it first would hand the
  # library the link's target)
  printf 'route local tcp\n' >"$T/root.conf"
  "${as_nobody[@]}" ln -s "$T/root.conf" "$sticky/link.conf"
  cli planted-run-link "$CLI" run --conf "$sticky/link.conf" -- true
  ssw_assert_eq "run --conf nobody's link: exit 1" "$CLI_RC" 1
  ssw_check "run --conf nobody's link: says so" grep -q "link.conf: cannot read: is a symlink of uid 65534 in a sticky world-writable directory: not followed" "$T/planted-run-link.err"
  cli planted-run-file "$CLI" run --conf "$sticky/ssw.conf" -- true
  ssw_assert_eq "run --conf nobody's file: exit 1" "$CLI_RC" 1
  ssw_check "run --conf nobody's file: says so" grep -q "ssw.conf: cannot read: is a file of uid 65534" "$T/planted-run-file.err"
  # nor the library `sockswitch run` preloads (that would run nobody's code as root)
  "${as_nobody[@]}" ln -s "${SSW_BUILD}/libsockswitch.so" "$sticky/libsockswitch.so"
  cli planted-lib env SOCKSWITCH_LIB="$sticky/libsockswitch.so" "$CLI" run -- true
  ssw_assert_eq "SOCKSWITCH_LIB via nobody's link: not run (127)" "$CLI_RC" 127
  ssw_check "SOCKSWITCH_LIB via nobody's link: says so" grep -q "SOCKSWITCH_LIB=$sticky/libsockswitch.so: is a symlink of uid 65534" "$T/planted-lib.err"
  # root's own link in the same directory is followed: the rule is about who planted it
  ln -s "$T/own.stats" "$sticky/own.stats"
  prog own-link SOCKSWITCH_STATS_FILE="$sticky/own.stats"
  ssw_assert_eq "own-link: exit" "$PROG_RC" 0
  ssw_assert_eq "own-link: stats written through root's own link" "$(ssw_stats_lines "$T/own.stats")" 1
}
SKIP_MSG=""
if [ "$(id -u)" != 0 ]; then
  SKIP_MSG="SKIP: the planted-symlink part needs root (to plant as nobody and write as root)"
elif ! command -v setpriv >/dev/null || ! getent passwd nobody >/dev/null || ! getent group nogroup >/dev/null; then
  SKIP_MSG="SKIP: the planted-symlink part needs setpriv, user nobody and group nogroup"
else
  planted_part
fi

ssw_assert_no_sanitizer_report "$T"/*.err
if [ -n "$SKIP_MSG" ] && [ "$SSW_FAILS" = 0 ]; then echo "$SKIP_MSG"; exit 77; fi
ssw_finish
