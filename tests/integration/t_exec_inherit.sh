#!/usr/bin/env bash
# t_exec_inherit — inetd style: `socat TCP-LISTEN,fork EXEC:prog,nofork` forks
# per connection and execs a python program with the switched connection as
# its stdin/stdout.  The exec'd program must see a TCP socket (family, peer
# address = the client's own address) and exchange data both ways until EOF;
# the client, under the switch, sees its upper-cased data come back.  The
# bytes went over shared memory (client counters) and the kernel saw no more
# TCP segments than the connections' set-up and tear-down; the exec'd
# programs took the connections over themselves (their `adopted` counters).
# Knobs for chasing flakes: EI_ROUNDS (connections, default 2; the checks
# below expect 2), EI_LOG (server's SOCKSWITCH_LOG), EI_SOCAT_OPTS (-d -d).
source "$(dirname "$0")/lib.sh"
ssw_enter_netns "$@"
ssw_setup_preload
ssw_tmpdir
command -v socat >/dev/null || { echo "SKIP: socat not installed"; exit 77; }

PORT=5003
SIZE=$((4 * 1024 * 1024))
cp "$SSW_PROGS/handover_roles.py" "$T/"
cat >"$T/child.py" <<'PY'
import socket, sys
from handover_roles import echo_upper
s = socket.socket(fileno=0)   # the inherited connection (socat put it on 0 and 1)
peer = f"{s.getpeername()[0]}:{s.getpeername()[1]}"
with open(sys.argv[1], "a") as f:
    print(f"family={s.family.name} type={s.type.name} peer={peer}", file=f)
n = echo_upper(s)
with open(sys.argv[1] + ".bytes", "a") as f:
    print(n, file=f)
PY
cat >"$T/client.py" <<'PY'
import os, socket, sys, threading
port, size, rounds = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
for r in range(rounds):
    data = os.urandom(size // 2).hex().encode()
    c = socket.create_connection(("127.0.0.1", port))
    me = c.getsockname()
    t = threading.Thread(target=lambda: (c.sendall(data), c.shutdown(socket.SHUT_WR)))
    t.start()
    got = bytearray()
    while True:
        d = c.recv(1 << 16)
        if not d:
            break
        got += d
    t.join()
    c.close()
    print(f"round={r} me={me[0]}:{me[1]} ok={int(bytes(got) == data.upper())} len={len(got)}", flush=True)
PY

seg0=$(ssw_outsegs)
ssw_bg server switched SOCKSWITCH_LOG=${EI_LOG:-warn} SOCKSWITCH_STATS_FILE="$T/server.stats" -- \
  socat ${EI_SOCAT_OPTS:-} "TCP4-LISTEN:$PORT,bind=127.0.0.1,reuseaddr,fork" "EXEC:$SSW_PYTHON $T/child.py $T/child.log,nofork"
spid=$SSW_BG_PID
ssw_wait_listen $PORT || ssw_fail "socat did not listen on $PORT"
ssw_run switched SOCKSWITCH_STATS_FILE="$T/client.stats" -- \
  "$SSW_PYTHON" "$T/client.py" $PORT $SIZE ${EI_ROUNDS:-2} >"$T/client.out" 2>"$T/client.err"
ssw_assert_eq "client exit status" $? 0
kill "$spid" 2>/dev/null; wait "$spid" 2>/dev/null
segs=$(( $(ssw_outsegs) - seg0 ))

ssw_assert_eq "rounds with the upper-cased data back" "$(grep -c ' ok=1 ' "$T/client.out")" 2
for r in 0 1; do
  me=$(sed -n "s/^round=$r me=\([^ ]*\) .*/\1/p" "$T/client.out")
  line=$(sed -n "$((r + 1))p" "$T/child.log")
  ssw_assert_eq "exec'd program $r sees a TCP socket and the client as its peer" "$line" "family=AF_INET type=SOCK_STREAM peer=$me"
done
ssw_assert_le "kernel TCP segments (2 connections)" "$segs" $((2 * SSW_CONN_SEGS))
ssw_assert_ge "client switched connections" "$(ssw_stats_sum "$T/client.stats" switched)" 2
ssw_assert_eq "client fallback connections" "$(ssw_stats_sum "$T/client.stats" fallback)" 0
ssw_assert_ge "client bytes_sent over shm" "$(ssw_stats_sum "$T/client.stats" bytes_sent)" $((2 * SIZE))
ssw_assert_ge "client bytes_received over shm" "$(ssw_stats_sum "$T/client.stats" bytes_received)" $((2 * SIZE))
# the exec'd programs took their connections over (not relayed): socat's
# child execs once its parent has closed its copy, which it does at once
# after the fork; a child that execs first has its connection relayed while
# the parent still holds it (README Limits), so one of the two is enough
ssw_assert_ge "exec'd programs that took the connection over" "$(ssw_stats_sum "$T/server.stats" adopted)" 1
ssw_assert_ge "bytes the exec'd programs received themselves" "$(ssw_stats_sum "$T/server.stats" bytes_received)" "$SIZE"
ssw_assert_quiet "$T/client.err"

# the same through relays (SOCKSWITCH_FAULT=relay: what an exec'd program
# without the switch gets): data intact, nothing taken over
ssw_bg server2 switched SOCKSWITCH_LOG=${EI_LOG:-warn} SOCKSWITCH_FAULT=relay SOCKSWITCH_STATS_FILE="$T/server2.stats" -- \
  socat ${EI_SOCAT_OPTS:-} "TCP4-LISTEN:$((PORT + 1)),bind=127.0.0.1,reuseaddr,fork" "EXEC:$SSW_PYTHON $T/child.py $T/child2.log,nofork"
spid=$SSW_BG_PID
ssw_wait_listen $((PORT + 1)) || ssw_fail "socat did not listen on $((PORT + 1))"
ssw_run switched -- "$SSW_PYTHON" "$T/client.py" $((PORT + 1)) $SIZE 1 >"$T/client2.out" 2>"$T/client2.err"
ssw_assert_eq "relayed: client exit status" $? 0
kill "$spid" 2>/dev/null; wait "$spid" 2>/dev/null
ssw_assert_eq "relayed: the upper-cased data back" "$(grep -c ' ok=1 ' "$T/client2.out")" 1
ssw_assert_eq "relayed: nothing taken over" "$(ssw_stats_sum "$T/server2.stats" adopted)" 0
ssw_assert_no_sanitizer_report "$T"/*.err
ssw_finish
