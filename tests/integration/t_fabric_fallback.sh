#!/usr/bin/env bash
# t_fabric_fallback — across two namespaces with the route `10.77.0.0/16 fabric
# provider=tcp`, a switched program meets a host that does not run the switch
# (the peer is not preloaded), both ways round:
#   - switched client, plain server: the echo pair's frames come back intact
#     over kernel TCP on the application's port; a plain server that speaks
#     first (a banner) and records every byte it receives gets exactly the
#     client's bytes, no byte of the switch's in the stream; connecting costs
#     at most one extra round trip (the refused fabric connect: at most two
#     more kernel TCP segments out of the client's namespace per connection
#     than a plain client, and no wait worth a timeout);
#   - plain client, switched server: the switched listener takes the plain
#     kernel TCP connection like any other, frames intact.
# a hang must cost seconds, not minutes: every command is bounded
SSW_TIMEOUT=${SSW_TIMEOUT:-20}
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/netns.sh"
ssw_fabric_pair_setup
A=$SSW_NS_A B=$SSW_NS_B HA=$SSW_NS_ADDR_A

# fb.py — the plain programs of this test (they know nothing of the switch)
cat >"$T/fb.py" <<'EOF'
import os, socket, sys, time
role = sys.argv[1]
if role == "banner-server":     # PORTFILE OUTFILE: greet first, record every byte received
    l = socket.socket(); l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    l.bind((sys.argv[4], 0)); l.listen(4)
    open(sys.argv[2] + ".tmp", "w").write("%d\n" % l.getsockname()[1]); os.rename(sys.argv[2] + ".tmp", sys.argv[2])
    c, peer = l.accept()
    c.sendall(b"220 plain server ready\r\n")
    got = bytearray()
    while True:
        d = c.recv(65536)
        if not d: break
        got += d
    c.sendall(b"221 got %d bytes\r\n" % len(got)); c.close()
    open(sys.argv[3], "wb").write(got)
    print("SERVER ok bytes=%d peer=%s" % (len(got), peer[0]), flush=True)
elif role == "banner-client":   # HOST PORT INFILE: read the banner, send the file, read the reply
    data = open(sys.argv[4], "rb").read()
    s = socket.create_connection((sys.argv[2], int(sys.argv[3])), timeout=30)
    banner = b""
    while not banner.endswith(b"\r\n"):
        d = s.recv(1)
        if not d: sys.exit("EOF inside the banner")
        banner += d
    if banner != b"220 plain server ready\r\n": sys.exit("banner changed: %r" % banner)
    s.sendall(data); s.shutdown(socket.SHUT_WR)
    reply = b""
    while True:
        d = s.recv(4096)
        if not d: break
        reply += d
    want = b"221 got %d bytes\r\n" % len(data)
    if reply != want: sys.exit("reply %r, want %r" % (reply, want))
    print("RESULT ok bytes=%d" % len(data), flush=True)
elif role == "accept-server":   # PORTFILE N HOST: accept N connections, read each to EOF
    l = socket.socket(); l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    l.bind((sys.argv[4], 0)); l.listen(64)
    open(sys.argv[2] + ".tmp", "w").write("%d\n" % l.getsockname()[1]); os.rename(sys.argv[2] + ".tmp", sys.argv[2])
    for _ in range(int(sys.argv[3])):
        c, _ = l.accept()
        while c.recv(4096): pass
        c.close()
    print("SERVER ok", flush=True)
elif role == "connect-loop":    # HOST PORT N: N connects, 1 byte each, close; p50/max seconds
    def segs():
        rows = [x.split() for x in open("/proc/net/snmp") if x.startswith("Tcp:")]
        return int(rows[1][rows[0].index("OutSegs")])
    ts = []; s0 = segs()
    for _ in range(int(sys.argv[4])):
        t0 = time.perf_counter()
        s = socket.create_connection((sys.argv[2], int(sys.argv[3])), timeout=30)
        ts.append(time.perf_counter() - t0)
        s.sendall(b"x"); s.close()
    time.sleep(0.3)   # let the closes' last segments go
    ts.sort()
    print("RESULT ok p50_us=%d max_us=%d segs=%d" % (ts[len(ts) // 2] * 1e6, ts[-1] * 1e6, segs() - s0), flush=True)
EOF
FB=("$SSW_PYTHON" "$T/fb.py")

# ---- switched client → plain server: the echo pair
SIZES=1x50,64x50,102400x5,5242880x1
PAYLOAD=$(ssw_sizes_bytes "$SIZES")
ssw_ns_wire_start echo "$B"
ssw_ns_echo_pair echo plain switched "$SIZES"
ssw_ns_wire_stop echo "$B"
ssw_assert_ge "echo: client fell back (fallback connections)" "$(ssw_stats_sum "$T/echo-client.stats" fallback)" 1
ssw_assert_eq "echo: client switched connections" "$(ssw_stats_sum "$T/echo-client.stats" switched)" 0
ssw_assert_ge "echo: the payload went over kernel TCP on the application's port" \
  "$(ssw_ns_wire_bytes "$T/echo.wire" "$ECHO_PORT" IN)" "$PAYLOAD"

# ---- switched client → plain server that speaks first: every byte is the client's
head -c $((1 << 20)) /dev/urandom >"$T/in.bin"
ssw_ns_bg banner-server "$A" plain -- "${FB[@]}" banner-server "$T/banner.port" "$T/banner.got" "$HA"
spid=$SSW_BG_PID
ssw_wait_file "$T/banner.port" 20 || ssw_fail "banner: plain server did not start"
ssw_ns_run "$B" switched SOCKSWITCH_STATS_FILE="$T/banner-client.stats" -- \
  "${FB[@]}" banner-client "$HA" "$(cat "$T/banner.port")" "$T/in.bin" >"$T/banner-client.out" 2>"$T/banner-client.err"
ssw_assert_eq "banner: switched client read the banner, sent 1 MiB, got the reply" $? 0
wait "$spid"; ssw_assert_eq "banner: plain server exit status" $? 0
ssw_check "banner: the plain server received exactly the client's bytes (nothing of the switch's)" \
  cmp -s "$T/banner.got" "$T/in.bin"
ssw_assert_eq "banner: the plain server saw the client's own address" \
  "$(sed -n 's/.*peer=\([^ ]*\).*/\1/p' "$T/banner-server.out")" "$SSW_NS_ADDR_B"
ssw_assert_ge "banner: client fell back" "$(ssw_stats_sum "$T/banner-client.stats" fallback)" 1

# ---- the price of finding out: connects to a plain server, switched vs plain
# client, in the same run.  The fallback may cost the refused fabric connect
# (a SYN answered by a RST: one segment out, one round trip); a second try, a
# wait on a timer or a byte sent to the peer would show here.
N=20
declare -A SEGS P50
for mode in plain switched; do
  ssw_ns_bg "conn-$mode-server" "$A" plain -- "${FB[@]}" accept-server "$T/conn-$mode.port" $N "$HA"
  spid=$SSW_BG_PID
  ssw_wait_file "$T/conn-$mode.port" 20 || ssw_fail "connect $mode: server did not start"
  ssw_ns_run "$B" "$mode" SOCKSWITCH_STATS_FILE="$T/conn-$mode.stats" -- \
    "${FB[@]}" connect-loop "$HA" "$(cat "$T/conn-$mode.port")" $N >"$T/conn-$mode.out" 2>"$T/conn-$mode.err"
  ssw_assert_eq "connect $mode: $N connections made" $? 0
  wait "$spid"; ssw_assert_eq "connect $mode: server accepted all $N" $? 0
  SEGS[$mode]=$(ssw_kv "$T/conn-$mode.out" segs); P50[$mode]=$(ssw_kv "$T/conn-$mode.out" p50_us)
done
ssw_assert_eq "connect switched: every connection fell back" "$(ssw_stats_sum "$T/conn-switched.stats" fallback)" $N
ssw_assert_le "connect switched: kernel TCP segments out of B (plain client: ${SEGS[plain]:-?}; <= 2 more per connection)" \
  "${SEGS[switched]:-999999}" $(( ${SEGS[plain]:-0} + 2 * N ))
# one veth round trip is tens of microseconds; 20 ms is far below any
# retry or timer and far above scheduling noise on a shared machine
ssw_assert_le "connect switched: p50 connect time in us (plain client: ${P50[plain]:-?} us; <= plain + 20 ms)" \
  "${P50[switched]:-999999999}" $(( ${P50[plain]:-0} + 20000 ))
echo "# connect to a plain server, $N connections: plain p50 ${P50[plain]:-?} us, ${SEGS[plain]:-?} segments; switched p50 ${P50[switched]:-?} us, ${SEGS[switched]:-?} segments"

# ---- plain client → switched server
ssw_ns_wire_start rev "$B"
ssw_ns_echo_pair rev switched plain "$SIZES"
ssw_ns_wire_stop rev "$B"
# (with no fabric provider the listener itself is not switched: nothing to count)
[ "$SSW_NS_EXPECT" = fabric ] &&
  ssw_assert_ge "rev: switched listener counted a fallback connection" "$(ssw_stats_sum "$T/rev-server.stats" fallback)" 1
ssw_assert_eq "rev: server switched connections" "$(ssw_stats_sum "$T/rev-server.stats" switched)" 0
ssw_assert_ge "rev: the payload went over kernel TCP on the application's port" \
  "$(ssw_ns_wire_bytes "$T/rev.wire" "$ECHO_PORT" IN)" "$PAYLOAD"

ssw_assert_quiet "$T/echo-client.err" "$T/banner-client.err" "$T/rev-server.err" "$T/conn-switched.err"
ssw_assert_no_sanitizer_report "$T"/*.err
ssw_finish
