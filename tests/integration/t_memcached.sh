#!/usr/bin/env bash
# t_memcached — memcached (libevent, 2 worker threads, started as root and
# running as nobody) with a python client speaking the text protocol (plain
# socket module, threads), both unmodified, once under the switch and once
# on kernel TCP in the same run.  The server runs as another user than the
# client, so every switched connection passes the cross-user check.
# Checks: 500 keys of random values of varied sizes (0 B to 512 KiB) and
# flags set and read back exactly; one multi-get of 100 keys; incr/decr
# (with the floor at 0 and a missing key); delete; 8 threads, each with its
# own connection, doing 500 set/get pairs; every reply compared byte for
# byte.  The server's `stats` count exactly the gets and sets the client
# sent.  Under the switch: every connection was switched on both sides, none
# fell back, the values went over shared memory (stats), and the kernel saw
# no more TCP segments than the connections' set-up and tear-down.  The
# operations/s are printed side by side, for information only (the machine
# is shared: the test passes on correctness).
source "$(dirname "$0")/lib.sh"
ssw_enter_netns "$@"
ssw_setup_preload
ssw_tmpdir
command -v memcached >/dev/null || { echo "SKIP: memcached not installed"; exit 77; }
[ "$(id -u)" = 0 ] || { echo "SKIP: needs root (memcached runs as nobody)"; exit 77; }
MUSER=nobody
MGROUP=$(id -gn "$MUSER" 2>/dev/null) || { echo "SKIP: no user $MUSER"; exit 77; }

NKEYS=500
NMULTI=100
THREADS=8
PAIRS=500
BIGVAL=524288
chmod 755 "$T"
mkdir -p "$T/srv"

cat >"$T/mc_client.py" <<'EOF'
# mc_client.py PORT run|stats — memcached text-protocol client (see t_memcached.sh)
import os, random, socket, sys, threading, time

PORT = int(sys.argv[1])
NKEYS, NMULTI, THREADS, PAIRS, BIGVAL = (int(x) for x in sys.argv[3:8]) if len(sys.argv) > 3 else (0,) * 5


class Conn:
    def __init__(self):
        self.s = socket.create_connection(("127.0.0.1", PORT), timeout=60)
        self.buf = bytearray()

    cmds = 0  # commands sent by the main thread's connection

    def send(self, data):
        Conn.cmds += 1 if threading.current_thread() is threading.main_thread() else 0
        self.s.sendall(data)

    def _fill(self):
        d = self.s.recv(1 << 20)
        if not d:
            raise EOFError("connection closed by the server")
        self.buf += d

    def line(self):
        while True:
            i = self.buf.find(b"\r\n")
            if i >= 0:
                l = bytes(self.buf[:i])
                del self.buf[:i + 2]
                return l
            self._fill()

    def exactly(self, n):
        while len(self.buf) < n:
            self._fill()
        d = bytes(self.buf[:n])
        del self.buf[:n]
        return d

    def expect(self, want, what):
        got = self.line()
        if got != want:
            raise AssertionError(f"{what}: got {got[:200]!r}, want {want!r}")

    def set(self, key, val, flags=0):
        self.send(b"set %s %d 0 %d\r\n%s\r\n" % (key, flags, len(val), val))
        self.expect(b"STORED", b"set " + key)

    def get_multi(self, keys):
        """{key: (flags, value)} of one get command, the reply parsed strictly"""
        self.send(b"get " + b" ".join(keys) + b"\r\n")
        out = {}
        while True:
            l = self.line()
            if l == b"END":
                return out
            f = l.split(b" ")
            if len(f) != 4 or f[0] != b"VALUE":
                raise AssertionError(f"get: unexpected line {l[:200]!r}")
            val = self.exactly(int(f[3]))
            if self.exactly(2) != b"\r\n":
                raise AssertionError(f"get {f[1]!r}: value not followed by CRLF")
            out[f[1]] = (int(f[2]), val)
            # values come back in the order asked (memcached skips misses)
            if f[1] not in keys:
                raise AssertionError(f"get: key {f[1]!r} was not asked for")

    def close(self):
        self.s.close()


def check(cond, msg):
    if not cond:
        raise AssertionError(msg)


def run():
    rnd = random.Random(1234)
    sets = gets = 0
    c = Conn()
    t0 = time.monotonic()
    # 500 keys, values of varied sizes, key 0 at 512 KiB
    sizes = [0, 1, 2, 7, 100, 1000, 1400, 4096, 10000, 65536, 65537, 200000]
    vals = {}
    for i in range(NKEYS):
        n = BIGVAL if i == 0 else rnd.choice(sizes)
        k = b"key:%d" % i
        vals[k] = (rnd.randrange(1 << 32), os.urandom(n))
        c.set(k, vals[k][1], vals[k][0])
        sets += 1
    total = sum(len(v) for _, v in vals.values())
    for k, want in vals.items():
        got = c.get_multi([k])
        gets += 1
        check(got == {k: want}, f"get {k!r}: wrong value (len {len(got.get(k, (0, b''))[1])}, want {len(want[1])})")
    # one multi-get of 100 keys (including the 512 KiB value)
    keys = list(vals)[:NMULTI]
    got = c.get_multi(keys)
    gets += len(keys)
    check(got == {k: vals[k] for k in keys}, "multi-get of %d keys: wrong reply" % len(keys))
    # incr/decr
    c.set(b"counter", b"10"); sets += 1
    for cmd, want in ((b"incr counter 5", b"15"), (b"decr counter 3", b"12"), (b"incr counter 18446744073709551600", b"18446744073709551612"),
                      (b"incr counter 4", b"0"), (b"decr counter 100", b"0"), (b"incr counter 41", b"41"),
                      (b"incr nosuchkey 1", b"NOT_FOUND"), (b"decr nosuchkey 1", b"NOT_FOUND")):
        c.send(cmd + b"\r\n")
        c.expect(want, cmd)
    got = c.get_multi([b"counter"]); gets += 1
    # a number that got shorter in place is space-padded (protocol.txt: "MAY be space-padded")
    check(list(got) == [b"counter"] and got[b"counter"][0] == 0 and got[b"counter"][1].rstrip(b" ") == b"41",
          f"get counter: {got!r}")
    # delete
    c.send(b"delete key:1\r\n"); c.expect(b"DELETED", b"delete key:1")
    got = c.get_multi([b"key:1"]); gets += 1
    check(got == {}, "get of a deleted key returned a value")
    c.send(b"delete key:1\r\n"); c.expect(b"NOT_FOUND", b"delete key:1 again")
    got = c.get_multi([b"key:2"]); gets += 1
    check(got == {b"key:2": vals[b"key:2"]}, "get key:2 after deleting key:1")
    t1 = time.monotonic()
    single = Conn.cmds

    # 8 threads, each with its own connection: set/get pairs
    errors = []

    def worker(t):
        try:
            r = random.Random(t)
            w = Conn()
            for j in range(PAIRS):
                k = b"t%d:%d" % (t, j)
                v = os.urandom(r.choice((1, 16, 100, 1000, 3000)))
                w.set(k, v, j)
                g = w.get_multi([k])
                if g != {k: (j, v)}:
                    raise AssertionError(f"thread {t}: get {k!r} wrong")
            w.close()
        except Exception as e:  # reported below
            errors.append(f"thread {t}: {e!r}")

    ths = [threading.Thread(target=worker, args=(t,)) for t in range(THREADS)]
    t2 = time.monotonic()
    for th in ths:
        th.start()
    for th in ths:
        th.join()
    t3 = time.monotonic()
    check(not errors, "; ".join(errors))
    sets += THREADS * PAIRS
    gets += THREADS * PAIRS
    c.close()
    print(f"RESULT ok sets={sets} gets={gets} bytes={total} commands={single + THREADS * PAIRS * 2} "
          f"single_ops_s={single / (t1 - t0):.0f} threads_ops_s={THREADS * PAIRS * 2 / (t3 - t2):.0f} "
          f"secs={t3 - t0:.2f}", flush=True)


def stats():
    c = Conn()
    c.send(b"stats\r\n")
    while True:
        l = c.line()
        if l == b"END":
            break
        print(l.decode())
    c.close()


{"run": run, "stats": stats}[sys.argv[2]]()
EOF

declare -A OPS_SINGLE OPS_THREADS

# run_mode MODE PORT — one memcached, the client, the server's stats
run_mode() {
  local mode=$1 port=$2 seg0 segs conns rc out sst=$T/srv/$1-server.stats cst=$T/$1-client.stats
  rm -f "$sst" "$cst"
  # opened at start by root, appended to at exit by nobody
  install -m 644 -o "$MUSER" -g "$MGROUP" /dev/null "$sst"
  ssw_bg "$mode-server" "$mode" SOCKSWITCH_STATS_FILE="$sst" -- \
    memcached -u "$MUSER" -l 127.0.0.1 -p "$port" -t 2 -U 0
  local spid=$SSW_BG_PID
  if ! ssw_wait_listen "$port" 10; then ssw_fail "$mode: memcached did not listen"; return; fi
  seg0=$(ssw_outsegs)
  ssw_step "$mode: client"
  ssw_run "$mode" SOCKSWITCH_STATS_FILE="$cst" -- "$SSW_PYTHON" "$T/mc_client.py" "$port" run \
    $NKEYS $NMULTI $THREADS $PAIRS $BIGVAL >"$T/$mode-client.out" 2>"$T/$mode-client.err"
  rc=$?
  if [ $rc = 0 ] && grep -q '^RESULT ok' "$T/$mode-client.out"; then
    ssw_ok "$mode: client verified every reply ($(grep '^RESULT' "$T/$mode-client.out"))"
  else
    ssw_fail "$mode: client failed (rc=$rc): $(tail -n 3 "$T/$mode-client.err")"
  fi
  OPS_SINGLE[$mode]=$(ssw_kv "$T/$mode-client.out" single_ops_s)
  OPS_THREADS[$mode]=$(ssw_kv "$T/$mode-client.out" threads_ops_s)
  ssw_run "$mode" SOCKSWITCH_STATS_FILE="$cst" -- "$SSW_PYTHON" "$T/mc_client.py" "$port" stats \
    >"$T/$mode-stats.out" 2>"$T/$mode-stats.err"
  ssw_assert_eq "$mode: stats: cmd_set is what the client sent" \
    "$(sed -n 's/^STAT cmd_set \([0-9]*\)$/\1/p' "$T/$mode-stats.out")" "$(ssw_kv "$T/$mode-client.out" sets)"
  ssw_assert_eq "$mode: stats: cmd_get is what the client sent" \
    "$(sed -n 's/^STAT cmd_get \([0-9]*\)$/\1/p' "$T/$mode-stats.out")" "$(ssw_kv "$T/$mode-client.out" gets)"
  ssw_assert_eq "$mode: stats: no evictions" "$(sed -n 's/^STAT evictions \([0-9]*\)$/\1/p' "$T/$mode-stats.out")" 0

  # SIGTERM (forwarded by timeout): memcached exits, the switch writes its stats
  ssw_step "$mode: stop memcached"
  kill -TERM "$spid"
  wait "$spid"
  ssw_assert_eq "$mode: memcached exit status after SIGTERM" $? 0
  segs=$(( $(ssw_outsegs) - seg0 ))
  if [ "$mode" = switched ]; then
    conns=$(ssw_stats_sum "$cst" switched)
    ssw_assert_ge "switched: client connections over shared memory" "$conns" $((THREADS + 2))
    ssw_assert_eq "switched: client fallback connections" "$(ssw_stats_sum "$cst" fallback)" 0
    ssw_assert_ge "switched: memcached reported (stats)" "$(ssw_stats_lines "$sst")" 1
    ssw_assert_ge "switched: server connections over shared memory" "$(ssw_stats_sum "$sst" switched)" "$conns"
    ssw_assert_eq "switched: server fallback connections" "$(ssw_stats_sum "$sst" fallback)" 0
    # every value crossed twice each way (set, then get), the multi-get again
    out=$(ssw_kv "$T/$mode-client.out" bytes)
    ssw_assert_ge "switched: server bytes_received over shm (the values set)" \
      "$(ssw_stats_sum "$sst" bytes_received)" "${out:-1}"
    ssw_assert_ge "switched: client bytes_received over shm (the values read)" \
      "$(ssw_stats_sum "$cst" bytes_received)" "$(( ${out:-1} + BIGVAL ))"
    ssw_assert_le "switched: kernel TCP segments ($((THREADS + 2)) connections)" "$segs" $(((THREADS + 2) * SSW_CONN_SEGS))
    ssw_assert_quiet "$T/switched-client.err" "$T/switched-stats.err" "$T/switched-server.err"
    echo "# switched run: $segs kernel TCP segments"
  else
    echo "# kernel run: $segs kernel TCP segments"
  fi
}

run_mode switched 11311
run_mode plain 11312

printf '# memcached, python text-protocol client (ops/s)     switched    kernel\n'
printf '#   one connection, set+get of %d keys       %10s %10s\n' $NKEYS "${OPS_SINGLE[switched]:-?}" "${OPS_SINGLE[plain]:-?}"
printf '#   %d threads x %d set/get pairs, own connections %10s %10s\n' $THREADS $PAIRS \
  "${OPS_THREADS[switched]:-?}" "${OPS_THREADS[plain]:-?}"
ssw_assert_no_sanitizer_report "$T"/*.err
ssw_finish
