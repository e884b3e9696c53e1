#!/usr/bin/env bash
# t_hostile_registry — the stat registry against a hostile local user: as
# `nobody`, squat the directories before root's first switched program, try to
# remove or ring root's entries and doorbell, plant a FIFO named like an entry,
# truncate its own doorbell, hold a directory lock, forge entries (one claiming a root process, one
# full of terminal escapes); root's programs and root's `sockswitch stat`
# must survive, list root's sockets, never trust or print raw what nobody
# wrote; entries of dead processes and directories of dead namespaces go.
source "$(dirname "$0")/lib.sh"
if [ "$(id -u)" != 0 ]; then
  echo "SKIP: t_hostile_registry plays user nobody against root's programs: run it as root"
  exit 77
fi
command -v setpriv >/dev/null 2>&1 || { echo "SKIP: setpriv (util-linux) missing"; exit 77; }
getent passwd nobody >/dev/null && getent group nogroup >/dev/null ||
  { echo "SKIP: no user nobody / group nogroup"; exit 77; }
ssw_enter_netns "$@"
ssw_setup_preload
ssw_tmpdir

chmod 755 "$T"
mkdir -m 1777 "$T/shm" "$T/nb"   # a private /dev/shm, and a place nobody writes in
export SOCKSWITCH_STAT_DIR=$T/shm/sockswitch
BASE=$SOCKSWITCH_STAT_DIR
CLI=$SSW_BUILD/sockswitch
NS=$(readlink /proc/self/ns/net | tr -dc 0-9)
ROOTDIR=$BASE/uid-0/net-$NS
NBDIR=$BASE/uid-65534/net-$NS
Q() { "$SSW_PYTHON" "$SSW_PROGS/statq.py" "$@"; }
FORGE=("$SSW_PYTHON" "$SSW_PROGS/statforge.py")
nobody() { setpriv --reuid=nobody --regid=nogroup --clear-groups -- env -u LD_PRELOAD "$@"; }
# stat_run [ARGS] — root's stat, bounded: rc in $T/stat.rc, a hang is rc 124
stat_run() {
  timeout -k 2 10 "$CLI" stat "$@" >"$T/stat.out" 2>"$T/stat.err"
  echo $? >"$T/stat.rc"
}
stat_json() { stat_run --json "$@"; cp "$T/stat.out" "$T/stat.json"; }
wait_for() { # K=V… — poll stat until an object matches (≤ 10 s)
  local i
  for ((i = 0; i < 100; i++)); do
    stat_json
    [ "$(Q "$T/stat.json" count "$@" 2>/dev/null)" -ge 1 ] 2>/dev/null && return 0
    sleep 0.1
  done
  return 1
}

# ---- 1. nobody squats the directories before root's first switched program
nobody mkdir -m 0777 "$BASE"
nobody mkdir -m 0777 -p "$BASE/uid-0/net-$NS" "$BASE/net-$NS"
ssw_assert_eq "squat: nobody made the directories first" "$(stat -c %U:%a "$BASE/uid-0/net-$NS")" nobody:777

ssw_bg server switched -- "$SSW_PYTHON" "$SSW_PROGS/trickle.py" server --port-file "$T/p.port"
ssw_wait_file "$T/p.port" 10 || ssw_fail "server did not start"
PORT=$(cat "$T/p.port")
ssw_bg client switched -- "$SSW_PYTHON" "$SSW_PROGS/trickle.py" client --port "$PORT" \
  --stop-file "$T/p.stop" --max-s 25
if wait_for state=connected remote=127.0.0.1:$PORT provider=shm; then
  ssw_ok "squat: root's connection is listed"
else
  ssw_fail "squat: root's connection not listed: $(cat "$T/stat.json" "$T/stat.err" "$T"/server.err)"
fi
SPID=$(Q "$T/stat.json" get pid state=listening local=127.0.0.1:$PORT)
CPID=$(Q "$T/stat.json" get pid remote=127.0.0.1:$PORT)
ROWS0=$(Q "$T/stat.json" count)
ssw_assert_eq "squat: base taken back by root, sticky" "$(stat -c %u:%a "$BASE")" 0:1777
ssw_assert_eq "squat: root's user directory is root's, 0700" "$(stat -c %u:%a "$BASE/uid-0")" 0:700
ssw_assert_eq "squat: root's entry is root's, 0600" "$(stat -c %u:%a "$ROOTDIR/$SPID.stat" 2>&1)" 0:600
# nobody tries to delete, move or hide root's entries
nobody rm -rf "$BASE/uid-0" "$BASE/net-$NS" 2>/dev/null
nobody mv "$BASE/uid-0" "$BASE/uid-0.gone" 2>/dev/null
nobody rm -f "$ROOTDIR/$SPID.stat" "$ROOTDIR/$CPID.stat" 2>/dev/null
nobody mkdir "$BASE/uid-0" 2>/dev/null
stat_json
ssw_assert_eq "squat: root's sockets all still listed after nobody's rm/mv" "$(Q "$T/stat.json" count)" "$ROWS0"
ssw_check "squat: root's entry still there" test -f "$ROOTDIR/$SPID.stat"

# a link planted where the base directory goes (root must neither follow it
# nor give up: the link is moved aside)
mkdir -m 0777 "$T/nb/target"
nobody ln -s "$T/nb/target" "$T/shm/linked"
SOCKSWITCH_STAT_DIR=$T/shm/linked ssw_run switched -- "$SSW_PYTHON" -c \
  'import socket, sys; s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen(1); sys.stdin.read()' \
  </dev/null >/dev/null 2>"$T/linked.err"
ssw_check "planted link: root's program did not write through it" test -z "$(ls -A "$T/nb/target")"
ssw_check "planted link: moved aside, a real directory in its place" \
  test -d "$T/shm/linked" -a ! -L "$T/shm/linked"

# ---- 2. nobody rings and truncates root's doorbell
nobody truncate -s 0 "$ROOTDIR/doorbell" 2>/dev/null
nobody "$SSW_PYTHON" -c 'import sys; f = open(sys.argv[1], "r+b"); f.write(b"\xff\xff\xff\xff"); f.truncate(0)' \
  "$ROOTDIR/doorbell" 2>/dev/null
ssw_assert_eq "doorbell: still 4096 bytes" "$(stat -c %s "$ROOTDIR/doorbell")" 4096
stat_json
ssw_assert_eq "doorbell: root's stat survives (exit 0)" "$(cat "$T/stat.rc")" 0
ssw_assert_eq "doorbell: root's sockets listed" "$(Q "$T/stat.json" count)" "$ROWS0"
ssw_assert_eq "doorbell: root's listed sockets answered (not stale)" "$(Q "$T/stat.json" count stale=True)" 0
ssw_check "doorbell: root's server alive" kill -0 "$SPID"
ssw_check "doorbell: root's client alive" kill -0 "$CPID"

# ---- 3. nobody's own registry: FIFO, truncated doorbell, forged entries
ssw_bg nb-server switched -- setpriv --reuid=nobody --regid=nogroup --clear-groups -- \
  "$SSW_PYTHON" "$SSW_PROGS/trickle.py" server --port-file "$T/nb/nb.port"
ssw_wait_file "$T/nb/nb.port" 10 || ssw_fail "nobody's server did not start"
NBPORT=$(cat "$T/nb/nb.port")
if wait_for state=listening local=127.0.0.1:$NBPORT; then
  ssw_ok "nobody's own switched listener is listed for root"
else
  ssw_fail "nobody's listener not listed: $(cat "$T/stat.json" "$T/stat.err" "$T/nb-server.err")"
fi
NBPID=$(Q "$T/stat.json" get pid local=127.0.0.1:$NBPORT)
setpriv --reuid=nobody --regid=nogroup --clear-groups -- sleep 60 >/dev/null 2>&1 &
SLEEPPID=$!
SSW_BG_PIDS+=("$SLEEPPID")
sleep 0.1
nobody mkfifo "$NBDIR/$((SLEEPPID + 100000)).stat"
nobody truncate -s 0 "$NBDIR/doorbell"
# a forged entry claiming root's server, and one (nobody's own process) full of escapes
nobody "${FORGE[@]}" "$NBDIR/$SPID.stat" --pid "$SPID" --netns "$NS" --comm 'evil\x1b[2J' --local 10.9.9.9:1
nobody "${FORGE[@]}" "$NBDIR/$SLEEPPID.stat" --pid "$SLEEPPID" --netns "$NS" --comm 'x\x1b]0;pwned\x07' \
  --local '\x1b[31m1.2.3.4:5' --remote 'a\\b' --reason '\x1b[1Aevil\x9b'
stat_run
ssw_assert_eq "FIFO/truncated doorbell: root's stat finishes (exit 0, not a hang or a signal)" "$(cat "$T/stat.rc")" 0
ssw_check "FIFO: counted as skipped" grep -q "entries skipped: not owned by their uid" "$T/stat.err"
ssw_check "forged: the entry naming root's pid is refused and said so" \
  grep -q "1 entries skipped: they name a process that does not run as their uid" "$T/stat.err"
ssw_check "forged: nothing of it in the table" eval "! grep -q '10\.9\.9\.9' '$T/stat.out'"
ssw_check "escapes: no ESC, BEL or C1 byte reaches the terminal" \
  eval "! LC_ALL=C grep -q \$'[\\x1b\\x07\\x9b]' '$T/stat.out'"
ssw_check "escapes: shown as \\xNN" grep -qF 'x\x1b]0;pwned\x07' "$T/stat.out"
ssw_check "escapes: reason escaped" grep -qF '\x1b[1Aevil\x9b' "$T/stat.out"
ssw_check "escapes: backslash doubled" grep -qF 'a\\b' "$T/stat.out"
stat_json
ssw_check "escapes: --json is valid JSON" Q "$T/stat.json" check
ssw_check "escapes: --json keeps ASCII" eval "! LC_ALL=C grep -q \$'[\\x1b\\x07\\x80-\\xff]' '$T/stat.json'"
ssw_assert_eq "forged: not listed as root's pid in --json" "$(Q "$T/stat.json" count pid=$SPID local=10.9.9.9:1)" 0
ssw_assert_eq "root's listener still listed" "$(Q "$T/stat.json" count pid=$SPID local=127.0.0.1:$PORT state=listening)" 1
ssw_assert_eq "root's client still listed" "$(Q "$T/stat.json" count pid=$CPID remote=127.0.0.1:$PORT)" 1
ssw_check "nobody's server survived root's stat" kill -0 "$NBPID"
nobody timeout -k 2 10 "$CLI" stat --json >"$T/nb/stat.json" 2>"$T/nb/stat.err"
ssw_assert_eq "nobody's stat: its own listener" "$(Q "$T/nb/stat.json" count local=127.0.0.1:$NBPORT)" 1
ssw_assert_eq "nobody's stat: none of root's sockets" "$(Q "$T/nb/stat.json" count pid=$SPID)$(Q "$T/nb/stat.json" count pid=$CPID)" 00
ssw_check "nobody's stat: says it shows this user's programs only" grep -q "only this user's programs" "$T/nb/stat.err"

# a lock nobody holds forever on one of its directories (of another namespace)
nobody mkdir -m 0700 "$NBDIR/../net-2"
setpriv --reuid=nobody --regid=nogroup --clear-groups -- "$SSW_PYTHON" -c \
  'import fcntl, os, sys, time; fcntl.flock(os.open(sys.argv[1], os.O_RDONLY), fcntl.LOCK_SH); time.sleep(60)' \
  "$NBDIR/../net-2" >/dev/null 2>&1 &
SSW_BG_PIDS+=("$!")
sleep 0.2
stat_run
ssw_assert_eq "lock held by nobody: root's stat finishes" "$(cat "$T/stat.rc")" 0

# ---- 4. entries of dead processes, directories of dead namespaces
true & DEADPID=$!; wait "$DEADPID"
mkdir -m 0700 "$BASE/uid-0/net-1"
"${FORGE[@]}" "$BASE/uid-0/net-1/$DEADPID.stat" --pid "$DEADPID" --starttime 5 --netns 1
head -c 4096 /dev/zero >"$BASE/uid-0/net-1/doorbell"; chmod 600 "$BASE/uid-0/net-1/doorbell"
# a namespace inode reused: an old entry whose pid now belongs to another process
"${FORGE[@]}" "$ROOTDIR/$$.stat" --pid $$ --starttime 0 --netns "$NS" --local 6.6.6.6:6
stat_json
ssw_check "stale: the dead namespace's directory is gone" test ! -e "$BASE/uid-0/net-1"
ssw_assert_eq "stale: reused pid's old entry not listed" "$(Q "$T/stat.json" count local=6.6.6.6:6)" 0
ssw_check "stale: reused pid's old entry removed" test ! -e "$ROOTDIR/$$.stat"

# ---- the end: root's pair finishes its work
touch "$T/p.stop"
wait "${SSW_BG_PIDS[1]}" 2>/dev/null
ssw_check "root's client finished its transfer" grep -q '^RESULT ok' "$T/client.out"
for p in "${SSW_BG_PIDS[@]}"; do kill "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
SSW_BG_PIDS=()
ssw_assert_no_sanitizer_report "$T"/*.err
ssw_finish
