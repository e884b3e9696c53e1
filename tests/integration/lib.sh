# lib.sh — shared helpers for the integration tests (source it, don't run it).
#
# Every t_*.sh test runs real programs under the switch inside its own fresh
# network namespace, so that /proc/net/snmp's Tcp OutSegs counts only the test's
# own kernel TCP segments and the switch's per-netns rendezvous is private.
#
# Environment (set by tests/CMakeLists.txt, or by hand):
#   SSW_BUILD    build directory holding libsockswitch.so   (default: $SSW_SRC/build)
#   SSW_SRC      source directory                           (default: derived from this file)
#   SSW_PRELOAD  LD_PRELOAD value that loads the switch; computed by ssw_preload_for
#                (sanitizer runtimes first for an ASan build) unless already set
#   SSW_TIMEOUT  per-command timeout in seconds              (default 60)
#   SSW_KEEP=1   keep the test's temp directory
#   SSW_OUTSEGS_SLACK   kernel segments tolerated during a payload phase (default 0)
#   SSW_CONN_SEGS       kernel segments allowed per switched connection over a whole
#                       run that includes set-up and tear-down (default 10: the idle
#                       companion TCP connection's 3-way handshake and FIN/ACK close,
#                       ≤ 7 segments, plus slack; a 10 MiB payload over kernel TCP
#                       costs > 150 segments on loopback)
# Exit codes of a test: 0 pass, 1 fail, 77 skip.

set -uo pipefail

SSW_SRC=${SSW_SRC:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}
SSW_BUILD=${SSW_BUILD:-$SSW_SRC/build}
SSW_PROGS=$SSW_SRC/tests/progs
SSW_TIMEOUT=${SSW_TIMEOUT:-60}
SSW_OUTSEGS_SLACK=${SSW_OUTSEGS_SLACK:-0}
SSW_CONN_SEGS=${SSW_CONN_SEGS:-10}
# The Debian interpreter when there is one (CI), else whatever python3 is on PATH.
if [ -z "${SSW_PYTHON:-}" ]; then
  if [ -x /usr/bin/python3 ]; then SSW_PYTHON=/usr/bin/python3; else SSW_PYTHON=$(command -v python3 || echo python3); fi
fi
export SSW_SRC SSW_BUILD SSW_PYTHON

# ---------------------------------------------------------------- preload ---

# ssw_preload_for BUILD_DIR — print the LD_PRELOAD value that loads the switch
# from BUILD_DIR. An ASan/UBSan build of libsockswitch.so needs the sanitizer
# runtimes loaded before anything else in an uninstrumented program, so they go
# first (the ones the library was linked against, as ldd resolves them; the
# compiler's copies if ldd cannot tell).
ssw_preload_for() {
  local lib="$1/libsockswitch.so" rts="" asan="" ubsan="" cc
  [ -f "$lib" ] || return 1
  if command -v ldd >/dev/null 2>&1; then
    asan=$(ldd "$lib" 2>/dev/null | awk '$1 ~ /^libasan\.so/ {print $3; exit}')
    ubsan=$(ldd "$lib" 2>/dev/null | awk '$1 ~ /^libubsan\.so/ {print $3; exit}')
  fi
  if [ -z "$asan" ] && grep -q '^SSW_SANITIZE:BOOL=ON' "$1/CMakeCache.txt" 2>/dev/null; then
    cc=$(sed -n 's/^CMAKE_C_COMPILER:[A-Z]*=//p' "$1/CMakeCache.txt"); cc=${cc:-gcc}
    asan=$("$cc" -print-file-name=libasan.so); ubsan=$("$cc" -print-file-name=libubsan.so)
  fi
  [ -n "$asan" ] && rts="$asan:"
  [ -n "$ubsan" ] && rts="$rts$ubsan:"
  echo "$rts$lib"
}

# ssw_is_sanitized BUILD_DIR — true for an SSW_SANITIZE=ON build
ssw_is_sanitized() { grep -q '^SSW_SANITIZE:BOOL=ON' "$1/CMakeCache.txt" 2>/dev/null; }

ssw_setup_preload() {
  if [ -z "${SSW_PRELOAD:-}" ]; then
    SSW_PRELOAD=$(ssw_preload_for "$SSW_BUILD") || {
      echo "FAIL: $SSW_BUILD/libsockswitch.so not found (build first, or set SSW_BUILD)"; exit 1; }
  fi
  export SSW_PRELOAD
  if [[ "$SSW_PRELOAD" == *asan* ]]; then
    # Real programs (python, curl, socat) leak at exit and are not ours to fix;
    # everything else ASan/UBSan finds aborts the program, and the test fails.
    export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=0:abort_on_error=1}
    export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
    # sanitizer builds are slower; give commands more time
    SSW_TIMEOUT=$((SSW_TIMEOUT * 2))
  fi
}

# ssw_need_fabric — first thing in a test of the fabric provider: a build that
# left the provider out (cmake/fabric.cmake: -DSSW_FABRIC=OFF, or AUTO where
# libfabric's headers were not found) skips the test (77), saying why.
# scripts/build.sh, and so CI, configures with SSW_FABRIC=ON: there the
# provider is always built and these tests always run.  SSW_NS_EXPECT=fallback
# (netns.sh) runs them anyway, expecting kernel TCP.
ssw_need_fabric() {
  local why
  [ "${SSW_NS_EXPECT:-}" != fallback ] || return 0
  why=$(ssw_fabric_left_out) || exit 1
  [ -z "$why" ] || { echo "SKIP: this build has no fabric provider ($why)"; exit 77; }
}

# ssw_fabric_left_out — print why this build has no fabric provider (nothing
# when it has one)
ssw_fabric_left_out() {
  local cache="$SSW_BUILD/CMakeCache.txt"
  [ -f "$cache" ] || { echo "FAIL: $cache missing: cannot tell whether this build has the fabric provider" >&2; return 1; }
  sed -n 's/^SSW_FABRIC_LEFT_OUT:INTERNAL=//p' "$cache"
}

# ---------------------------------------------------------------- netns -----

# ssw_enter_netns "$@" — call first thing in a test: re-executes the test inside
# a fresh network namespace (root: unshare -n; otherwise a user namespace) and
# brings lo up. Skips (77) when no namespace can be made.
ssw_enter_netns() {
  if [ "${SSW_IN_NETNS_CHILD:-}" != 1 ]; then
    export SSW_IN_NETNS_CHILD=1
    if unshare -n true 2>/dev/null; then
      exec unshare -n -- bash "$0" "$@"
    elif unshare -r -n true 2>/dev/null; then
      exec unshare -r -n -- bash "$0" "$@"
    fi
    echo "SKIP: cannot create a network namespace (need root or unprivileged user namespaces)"
    exit 77
  fi
  unset SSW_IN_NETNS_CHILD
  command -v ip >/dev/null 2>&1 || { echo "FAIL: ip (iproute2) missing"; exit 1; }
  ip link set lo up || { echo "FAIL: cannot bring up lo in the test namespace"; exit 1; }
  # A fresh namespace starts with zero counters; anything else means we are not
  # in a private one and the OutSegs checks would be meaningless.
  local s; s=$(ssw_outsegs)
  [ "$s" = 0 ] || { echo "FAIL: not in a fresh network namespace (OutSegs=$s)"; exit 1; }
}

# ---------------------------------------------------------------- temp dir --

ssw_tmpdir() {
  T=$(mktemp -d "${TMPDIR:-/tmp}/ssw-$(basename "$0" .sh).XXXXXX")
  export T
  SSW_BG_PIDS=()
  trap ssw_cleanup EXIT
}

ssw_cleanup() {
  local p
  for p in "${SSW_BG_PIDS[@]}"; do
    kill "$p" 2>/dev/null && wait "$p" 2>/dev/null
  done
  if [ "${SSW_KEEP:-0}" = 1 ] || [ "${SSW_FAILS:-0}" -gt 0 ]; then
    echo "# logs kept in $T"
  else
    rm -rf "$T"
  fi
}

# ---------------------------------------------------------------- counters --

# ssw_outsegs — Tcp OutSegs of the current network namespace (IPv4 and IPv6 TCP
# share this counter)
ssw_outsegs() {
  awk '$1 == "Tcp:" { if (!h) { for (i = 2; i <= NF; i++) if ($i == "OutSegs") c = i; h = 1 } else { print $c; exit } }' /proc/net/snmp
}

# ssw_stats_sum FILE FIELD — sum FIELD (switched, fallback, bytes_sent,
# bytes_received) over every sockswitch-stats line of FILE (0 if none)
ssw_stats_sum() {
  [ -f "$1" ] || { echo 0; return; }
  awk -v f="$2" '/^sockswitch-stats / { for (i = 2; i <= NF; i++) { split($i, kv, "="); if (kv[1] == f) s += kv[2] } } END { printf "%.0f\n", s + 0 }' "$1"
}

# ssw_stats_lines FILE — number of processes that reported
ssw_stats_lines() {
  [ -f "$1" ] || { echo 0; return; }
  grep -c '^sockswitch-stats ' "$1" || true
}

# ssw_kv FILE KEY — value of KEY=value on the RESULT line a test program printed
ssw_kv() {
  sed -n "s/^RESULT .*\b$2=\([^ ]*\).*/\1/p" "$1" | tail -n 1
}

# ---------------------------------------------------------------- running ---

# ssw_cmd MODE [VAR=VAL…] -- CMD… : put into the array SSW_CMD the command line
# that runs CMD with a timeout, MODE "switched" (under the switch) or "plain"
# (kernel TCP, LD_PRELOAD removed); VAR=VAL words go into CMD's environment.
# Run it with "${SSW_CMD[@]}" (foreground) or ssw_bg (background).
ssw_cmd() {
  local mode=$1; shift
  local envs=()
  while [ $# -gt 0 ] && [ "$1" != -- ]; do envs+=("$1"); shift; done
  shift
  SSW_CMD=(timeout -k 5 "$SSW_TIMEOUT" env -u LD_PRELOAD)
  [ "$mode" = switched ] && SSW_CMD+=(LD_PRELOAD="$SSW_PRELOAD")
  SSW_CMD+=("${envs[@]}" "$@")
}

# The test's own stdout, kept when a command's output goes to a file: what
# was running must show in ctest's log even when ctest kills the test.
exec {SSW_LOG_FD}>&1

# ssw_step TEXT — say what runs next (before it runs: a hang is then named)
ssw_step() { echo "# $*" >&"$SSW_LOG_FD"; }

# ssw_run MODE [VAR=VAL…] -- CMD… : run in the foreground (stdio inherited);
# a command its timeout killed is named on the test's stdout
ssw_run() {
  ssw_cmd "$@"
  "${SSW_CMD[@]}"
  local rc=$?
  if [ $rc = 124 ] || [ $rc = 137 ]; then
    local args=("$@") i=0
    while [ $i -lt ${#args[@]} ] && [ "${args[$i]}" != -- ]; do i=$((i + 1)); done
    echo "TIMEOUT - killed after ${SSW_TIMEOUT}s ($1): ${args[*]:$((i + 1))}" >&"$SSW_LOG_FD"
  fi
  return $rc
}

# ssw_prog NAME — the path of the test program NAME (tests/progs) in the
# build; says FAIL and fails when it is not built: PROG=$(ssw_prog x) || exit 1
ssw_prog() {
  local p=$SSW_BUILD/tests/$1
  [ -x "$p" ] || p=$(find "$SSW_BUILD" -name "$1" -type f -perm -u+x | head -1)
  [ -x "$p" ] || { echo "FAIL: $1 not built" >&2; return 1; }
  echo "$p"
}

# ssw_bg NAME MODE [VAR=VAL…] -- CMD… : start in the background, stdout/stderr
# to $T/NAME.out and $T/NAME.err; its pid (the timeout process, which forwards
# signals to CMD) is in SSW_BG_PID and is killed at exit if still running.
ssw_bg() {
  local name=$1; shift
  ssw_step "start $name ($1)"
  ssw_cmd "$@"
  ssw_bg_start "$name"
}

# ssw_bg_start NAME — run SSW_CMD in the background, as ssw_bg says
ssw_bg_start() {
  "${SSW_CMD[@]}" >"$T/$1.out" 2>"$T/$1.err" &
  SSW_BG_PID=$!
  SSW_BG_PIDS+=("$SSW_BG_PID")
}

# ssw_wait_file FILE [SECONDS] — wait until FILE exists (non-empty)
ssw_wait_file() {
  local i n=$(( ${2:-$SSW_TIMEOUT} * 10 ))
  for ((i = 0; i < n; i++)); do [ -s "$1" ] && return 0; sleep 0.1; done
  return 1
}

# ssw_wait_listen PORT [SECONDS] — wait until a TCP socket listens on PORT
ssw_wait_listen() {
  local i n=$(( ${2:-$SSW_TIMEOUT} * 10 ))
  for ((i = 0; i < n; i++)); do
    [ -n "$(ss -Hltn "sport = :$1" 2>/dev/null)" ] && return 0
    sleep 0.1
  done
  return 1
}

# ---------------------------------------------------------------- asserts ---

SSW_FAILS=0
ssw_ok()   { echo "ok   - $*"; }
ssw_fail() { echo "FAIL - $*"; SSW_FAILS=$((SSW_FAILS + 1)); }

# ssw_check DESC CMD… — pass if CMD succeeds
ssw_check() { local d=$1; shift; if "$@"; then ssw_ok "$d"; else ssw_fail "$d"; fi; }
ssw_assert_eq() { if [ "$2" = "$3" ]; then ssw_ok "$1 ($2)"; else ssw_fail "$1: got '$2', want '$3'"; fi; }
ssw_assert_ge() { if [ "${2:-0}" -ge "$3" ] 2>/dev/null; then ssw_ok "$1 ($2 >= $3)"; else ssw_fail "$1: got '$2', want >= $3"; fi; }
ssw_assert_le() { if [ -n "$2" ] && [ "$2" -le "$3" ] 2>/dev/null; then ssw_ok "$1 ($2 <= $3)"; else ssw_fail "$1: got '$2', want <= $3"; fi; }
ssw_assert_gt() { if [ "${2:-0}" -gt "$3" ] 2>/dev/null; then ssw_ok "$1 ($2 > $3)"; else ssw_fail "$1: got '$2', want > $3"; fi; }

# ssw_assert_no_sanitizer_report FILE… — no ASan/UBSan/LSan report in the files
SSW_SANITIZER_RE='ERROR: (Address|Leak|Undefined)Sanitizer|runtime error:|SUMMARY: (Address|Undefined)Sanitizer'
ssw_assert_no_sanitizer_report() {
  local f bad=0
  for f in "$@"; do
    if [ -f "$f" ] && grep -qE "$SSW_SANITIZER_RE" "$f"; then
      ssw_fail "sanitizer report in $(basename "$f")"; bad=1
    fi
  done
  [ $bad = 0 ] && ssw_ok "no sanitizer reports"
  return 0
}

# ssw_assert_quiet FILE… — the switch writes nothing to stderr by default
ssw_assert_quiet() {
  local f
  for f in "$@"; do
    if [ -s "$f" ]; then ssw_fail "stderr of $(basename "$f" .err) not empty: $(head -c 300 "$f")"
    else ssw_ok "stderr of $(basename "$f" .err) empty"; fi
  done
}

# ssw_assert_switched STATS PAYLOAD [MIN_SWITCHED] — the processes that wrote STATS
# carried ≥ MIN_SWITCHED (default 1) connections and ≥ PAYLOAD bytes each way over
# shared memory.
ssw_assert_switched() {
  local st=$1 payload=$2 min=${3:-1} tag
  tag=$(basename "$st")
  ssw_assert_ge "$tag: processes reported stats" "$(ssw_stats_lines "$st")" 1
  ssw_assert_ge "$tag: switched connections" "$(ssw_stats_sum "$st" switched)" "$min"
  ssw_assert_ge "$tag: bytes_sent over shm" "$(ssw_stats_sum "$st" bytes_sent)" "$payload"
  ssw_assert_ge "$tag: bytes_received over shm" "$(ssw_stats_sum "$st" bytes_received)" "$payload"
}

# ssw_assert_not_switched STATS — nothing went over shared memory
ssw_assert_not_switched() {
  local st=$1 tag
  tag=$(basename "$st")
  ssw_assert_ge "$tag: processes reported stats" "$(ssw_stats_lines "$st")" 1
  ssw_assert_eq "$tag: switched connections" "$(ssw_stats_sum "$st" switched)" 0
  ssw_assert_eq "$tag: bytes_sent over shm" "$(ssw_stats_sum "$st" bytes_sent)" 0
}

# ssw_finish — print logs of a failed test and exit 0/1
ssw_finish() {
  if [ "$SSW_FAILS" -gt 0 ]; then
    local f
    for f in "$T"/*; do
      [ -f "$f" ] || continue
      case "$f" in *.bin|*.dat|*.port|*.got) continue ;; esac
      if grep -qE "$SSW_SANITIZER_RE" "$f"; then
        # the report's head (what, and the stacks), not its shadow-byte tail
        echo "----- $(basename "$f") (sanitizer report, first 40 lines)"
        grep -m1 -A39 -E "$SSW_SANITIZER_RE" "$f" | cut -c1-400
        continue
      fi
      echo "----- $(basename "$f") (last 30 lines)"
      tail -n 30 "$f" | cut -c1-400
    done
    echo "$(basename "$0"): $SSW_FAILS check(s) failed"
    exit 1
  fi
  echo "$(basename "$0"): all checks passed"
  exit 0
}

# ---------------------------------------------------------------- echo pair -

# ssw_echo_pair NAME SERVER_MODE CLIENT_MODE HOST SIZES [VAR=VAL…]
# Runs tests/progs/echo.py server and client (MODE: switched|plain), extra
# VAR=VAL go to both. Sets ECHO_RC (0 = both sides succeeded). Output in
# $T/NAME-server.{out,err}, $T/NAME-client.{out,err}; stats in
# $T/NAME-server.stats and $T/NAME-client.stats; whole-run OutSegs delta in
# ECHO_RUN_SEGS.
ssw_echo_pair() {
  local name=$1 smode=$2 cmode=$3 host=$4 sizes=$5; shift 5
  local portf="$T/$name.port" spid port rc_s rc_c seg0 swrap=() cwrap=()
  ssw_step "echo pair $name ($smode server, $cmode client, $sizes)"
  rm -f "$portf"
  if [ -n "${SSW_ECHO_TRACE:-}" ]; then
    # strace each side; the switch is preloaded into the tracee only
    [ "$smode" = switched ] && swrap=("${SSW_STRACE[@]}" -o "$T/$name-server.strace" -E LD_PRELOAD="$SSW_PRELOAD")
    [ "$cmode" = switched ] && cwrap=("${SSW_STRACE[@]}" -o "$T/$name-client.strace" -E LD_PRELOAD="$SSW_PRELOAD")
    smode=plain cmode=plain
  fi
  seg0=$(ssw_outsegs)
  ssw_bg "$name-server" "$smode" SOCKSWITCH_STATS_FILE="$T/$name-server.stats" "$@" -- \
    "${swrap[@]}" "$SSW_PYTHON" "$SSW_PROGS/echo.py" server --host "$host" --port-file "$portf"
  spid=$SSW_BG_PID
  if ! ssw_wait_file "$portf"; then
    ssw_fail "$name: server did not start"; ECHO_RC=1; kill "$spid" 2>/dev/null; wait "$spid" 2>/dev/null; return
  fi
  port=$(cat "$portf")
  ssw_run "$cmode" SOCKSWITCH_STATS_FILE="$T/$name-client.stats" "$@" -- \
    "${cwrap[@]}" "$SSW_PYTHON" "$SSW_PROGS/echo.py" client --host "$host" --port "$port" --sizes "$sizes" \
    >"$T/$name-client.out" 2>"$T/$name-client.err"
  rc_c=$?
  wait "$spid"; rc_s=$?
  ECHO_RUN_SEGS=$(( $(ssw_outsegs) - seg0 ))
  ECHO_RC=$(( rc_c || rc_s ))
  if [ "$rc_c" = 0 ] && grep -q '^RESULT ok' "$T/$name-client.out"; then
    ssw_ok "$name: client exchanged and verified all frames ($(grep '^RESULT' "$T/$name-client.out"))"
  else
    ssw_fail "$name: client failed (rc=$rc_c): $(tail -n 2 "$T/$name-client.err")"
  fi
  if [ "$rc_s" = 0 ] && grep -q '^SERVER ok' "$T/$name-server.out"; then
    ssw_ok "$name: server verified all frames"
  else
    ssw_fail "$name: server failed (rc=$rc_s): $(tail -n 2 "$T/$name-server.err")"
  fi
}

# ssw_strace_usable — strace exists and may trace here (ptrace allowed); sets
# SSW_STRACE to the strace command line used for copy-path checks
ssw_strace_usable() {
  command -v strace >/dev/null 2>&1 || return 1
  local base=(strace -f -qq -e trace=process_vm_readv,process_vm_writev)
  if strace --seccomp-bpf "${base[@]:1}" -o /dev/null true 2>/dev/null; then
    SSW_STRACE=(strace --seccomp-bpf "${base[@]:1}")
  elif "${base[@]}" -o /dev/null true 2>/dev/null; then
    SSW_STRACE=("${base[@]}")
  else
    return 1
  fi
}

# ssw_echo_pair_traced NAME SIZES [VAR=VAL…] — ssw_echo_pair (both switched,
# 127.0.0.1) with each side under strace, tracing process_vm_readv/writev
ssw_echo_pair_traced() {
  local name=$1 sizes=$2; shift 2
  SSW_ECHO_TRACE=1 ssw_echo_pair "$name" switched switched 127.0.0.1 "$sizes" "$@"
}

# ssw_syscalls PREFIX SYSCALL — calls of SYSCALL in PREFIX-{server,client}.strace
ssw_syscalls() {
  cat "$1"-server.strace "$1"-client.strace 2>/dev/null | grep -c "\b$2(" || true
}

# ssw_sizes_bytes SIZES — total payload bytes of an echo.py --sizes spec
ssw_sizes_bytes() {
  local total=0 item
  IFS=, read -ra items <<<"$1"
  for item in "${items[@]}"; do total=$(( total + ${item%x*} * ${item#*x} )); done
  echo "$total"
}
