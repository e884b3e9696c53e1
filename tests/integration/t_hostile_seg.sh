#!/usr/bin/env bash
# t_hostile_seg — a hostile local user (nobody) cannot kill a root process by shrinking the shared segment of a switched connection (issue 9, attack 3).
#
# tests/progs/hostile_seg speaks the rendezvous itself as nobody; the root side
# is tests/progs/seg_victim.py under the switch, which touches the connection
# after the attack (a segment shrunk under its mapping would end it with SIGBUS,
# exit 135).  Cases:
#   server-unsealed  nobody connects with a memfd it did not seal and truncates
#                    it: the root server refuses the request (no mapping), says
#                    why at info, and goes on serving (a kernel TCP client next)
#   server-small     the memfd is sealed but smaller than its ring size needs:
#                    refused the same way
#   server-sealed    sealed as agreed, so accepted; the creator's truncation
#                    after the handshake fails (EPERM), it zeroes the segment
#                    instead (allowed); the server sees the connection end
#                    (reset or end of file), not a signal
#   server-skip      sealed and accepted, then the creator lies in the rings'
#                    indices: the server starts reading mid-ring, is told a
#                    rewind (skip) leads to a garbage record, and its own ring
#                    is claimed read past its end: the connection ends (reset
#                    or end of file), the server lives
#   client           nobody listens (kernel socket and rendezvous name) and gets
#                    root's client's memfd: shrinking, growing and resealing it
#                    all fail; zeroing it (a punched hole, allowed) leaves the
#                    rings garbage; root's client sees the connection end
source "$(dirname "$0")/lib.sh"
if [ "$(id -u)" != 0 ]; then
  echo "SKIP: t_hostile_seg runs the hostile side as the user nobody, which needs root (run as root: setpriv --reuid=nobody)"
  exit 77
fi
command -v setpriv >/dev/null 2>&1 || { echo "FAIL: setpriv (util-linux) missing"; exit 1; }
ssw_enter_netns "$@"
ssw_setup_preload
ssw_tmpdir
chmod 711 "$T" # nobody reaches its own directories below, nothing else

HOSTILE=(setpriv --reuid=nobody --regid=nogroup --clear-groups "$SSW_BUILD/tests/hostile_seg")
VICTIM=("$SSW_PYTHON" "$SSW_PROGS/seg_victim.py")

# case_dir NAME — a directory nobody can write its signal files in
case_dir() {
  D=$T/$1
  mkdir -p "$D" && chown nobody:nogroup "$D" && chmod 755 "$D"
}

# kv FILE KEY — KEY=value on the last RESULT/VICTIM line of FILE
kv() { sed -n "s/^\(RESULT\|VICTIM\) .*\b$2=\([^ ]*\).*/\2/p" "$1" | tail -n 1; }

# survived NAME RC — the root process ended by itself, not by a signal
survived() {
  if [ "$2" = 0 ]; then ssw_ok "$1: root process exited 0"
  elif [ "$2" -gt 128 ]; then ssw_fail "$1: root process killed by signal $(( $2 - 128 )) (exit $2)"
  else ssw_fail "$1: root process failed (exit $2): $(tail -n 2 "$T/$1-victim.err")"; fi
}

# server_case KIND — nobody connects to root's switched server with a KIND memfd
server_case() {
  local kind=$1 name=server-$1 vpid vrc hrc out
  case_dir "$name"
  ssw_bg "$name-victim" switched SOCKSWITCH_LOG=info SOCKSWITCH_LOG_FILE="$T/$name-victim.log" -- \
    "${VICTIM[@]}" server --port-file "$D/vport" --dir "$D"
  vpid=$SSW_BG_PID
  if ! ssw_wait_file "$D/vport" 20; then ssw_fail "$name: root server did not start"; return; fi
  ssw_step "$name: nobody connects with a $kind memfd"
  out=$T/$name-hostile.out
  ssw_run plain -- "${HOSTILE[@]}" connect "$(cat "$D/vport")" "$kind" "$D" >"$out" 2>"$T/$name-hostile.err"
  hrc=$?
  ssw_assert_eq "$name: the attack ran as nobody (exit $hrc)" "$(kv "$out" uid)" 65534
  if [ "$kind" = sealed ]; then
    ssw_assert_eq "$name: a sealed segment is accepted" "$(kv "$out" outcome)" accepted
    ssw_assert_eq "$name: its creator cannot truncate it after the handshake" "$(kv "$out" truncate)" EPERM
    ssw_assert_eq "$name: it can zero it (a punched hole)" "$(kv "$out" punch)" ok
  elif [ "$kind" = skip ]; then
    ssw_assert_eq "$name: a sealed segment is accepted" "$(kv "$out" outcome)" accepted
    ssw_assert_eq "$name: it lied in the rings' indices (a rewind to garbage, ours read past the end)" \
      "$(kv "$out" lie)" ok
  else
    ssw_assert_eq "$name: the request is refused" "$(kv "$out" outcome)" refused
    ssw_step "$name: a kernel TCP client next"
    ssw_run plain -- "$SSW_PYTHON" -c '
import socket, sys
c = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=10)
b = c.recv(100)
print("CLIENT got=%r" % b)
sys.exit(0 if b == b"hello\n" else 1)' "$(cat "$D/vport")" >"$T/$name-client.out" 2>&1
    ssw_check "$name: the server goes on serving (a kernel TCP client got its greeting)" test $? = 0
  fi
  wait "$vpid"; vrc=$?
  survived "$name" "$vrc"
  case "$kind" in
    unsealed) why="not sealed against resizing" ;;
    small) why="smaller than its ring size needs" ;;
    sealed|skip) why="" ;;
  esac
  if [ -n "$why" ]; then
    ssw_check "$name: the server said why at info ($why)" grep -q "refused a peer's segment: $why" "$T/$name-victim.log"
    ssw_assert_eq "$name: the server served the next client" "$(kv "$T/$name-victim.out" outcome)" eof
  else
    out=$(kv "$T/$name-victim.out" outcome)
    ssw_check "$name: the server saw the connection end ($out)" test "$out" = reset -o "$out" = eof
    [ "$kind" = skip ] && ssw_check "$name: the server followed the rewind to the garbage record (logged)" \
      grep -q "connection reset: malformed message from peer" "$T/$name-victim.log"
  fi
}

# client_case — root's switched client connects to nobody's listener
client_case() {
  local name=client hpid vrc out seals
  case_dir "$name"
  ssw_bg "$name-hostile" plain -- "${HOSTILE[@]}" accept 0 "$D"
  hpid=$SSW_BG_PID
  if ! ssw_wait_file "$D/port" 20; then ssw_fail "$name: nobody's listener did not start"; return; fi
  ssw_step "$name: root's client connects to nobody's listener"
  ssw_run switched SOCKSWITCH_LOG=info -- "${VICTIM[@]}" client --port "$(cat "$D/port")" --dir "$D" \
    >"$T/$name-victim.out" 2>"$T/$name-victim.err"
  vrc=$?
  wait "$hpid"
  out=$T/$name-hostile.out
  ssw_assert_eq "$name: nobody received root's memfd" "$(kv "$out" outcome)" received
  ssw_assert_eq "$name: the attack ran as nobody" "$(kv "$out" uid)" 65534
  seals=$(kv "$out" seals)
  # F_SEAL_SEAL|SHRINK|GROW (0x7), with F_SEAL_EXEC (0x20) where the system adds it
  ssw_check "$name: sealed against resizing and resealing ($seals)" test "$(( ${seals:-0} & ~0x20 ))" = 7
  ssw_assert_eq "$name: nobody cannot truncate it" "$(kv "$out" truncate)" EPERM
  ssw_assert_eq "$name: nobody can zero it (a punched hole: no SIGBUS, just garbage)" "$(kv "$out" punch)" ok
  ssw_assert_eq "$name: nobody cannot grow it" "$(kv "$out" grow)" EPERM
  ssw_assert_eq "$name: nobody cannot add a write seal" "$(kv "$out" addseal)" EPERM
  survived "$name" "$vrc"
  out=$(kv "$T/$name-victim.out" outcome)
  ssw_check "$name: the client saw the connection end ($out)" test "$out" = reset -o "$out" = eof
}

server_case unsealed
server_case small
server_case sealed
server_case skip
client_case
ssw_assert_no_sanitizer_report "$T"/*.err
ssw_finish
