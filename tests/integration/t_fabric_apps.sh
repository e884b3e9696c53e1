#!/usr/bin/env bash
# t_fabric_apps — unmodified programs between two network namespaces joined by
# a veth pair (server in A, client in B), both under the switch with the route
# `10.77.0.0/16 fabric provider=tcp`: `sockswitch stat` on a live connection,
# the python echo pair, iperf3 both directions, redis (1 MiB SET/GET, a short
# redis-benchmark), sockperf ping-pong, socat, curl against http.server.  Each
# checks its data (sha256, echo verification, counts) and which path carried
# it (netns.sh: ssw_ns_assert_path — over fabric the application's own port
# carries no kernel TCP payload and the provider's connections carry it).
# a hang must cost seconds, not minutes: every command is bounded
SSW_TIMEOUT=${SSW_TIMEOUT:-20}
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/netns.sh"
ssw_fabric_pair_setup
for b in iperf3 redis-server redis-cli redis-benchmark sockperf socat curl; do
  command -v $b >/dev/null || { echo "FAIL: $b not installed (the cross-host suite needs it)"; exit 1; }
done
A=$SSW_NS_A B=$SSW_NS_B HA=$SSW_NS_ADDR_A
Q() { "$SSW_PYTHON" "$SSW_PROGS/statq.py" "$@"; }
sha() { sha256sum <"$1" | cut -d' ' -f1; }

# ---- a live connection as `sockswitch stat` shows it on both hosts
ssw_ns_bg stat-server "$A" switched -- "$SSW_PYTHON" "$SSW_PROGS/trickle.py" server --host "$HA" --port-file "$T/stat.port"
ssw_wait_file "$T/stat.port" 20 || ssw_fail "stat: trickle server did not start"
P=$(cat "$T/stat.port" 2>/dev/null)
ssw_ns_bg stat-client "$B" switched -- "$SSW_PYTHON" "$SSW_PROGS/trickle.py" client --host "$HA" --port "$P" \
  --stop-file "$T/stat.stop" --max-s 20
want=fabric; [ "$SSW_NS_EXPECT" = fabric ] || want=tcp
for ((i = 0; i < 100; i++)); do
  ssw_ns_stat "$B" "$T/statB.json"
  [ "$(Q "$T/statB.json" count state=connected remote="$HA:$P" 2>/dev/null)" -ge 1 ] 2>/dev/null && break
  sleep 0.1
done
ssw_ns_stat "$A" "$T/statA.json"
pB=$(Q "$T/statB.json" get provider remote="$HA:$P")
pA=$(Q "$T/statA.json" get provider state=connected local="$HA:$P")
ssw_assert_eq "stat in B: provider of the client's connection" "${pB%% *}" "$want"
if [ "$want" = fabric ]; then
  ssw_assert_eq "stat in A: provider of the server's end" "${pA%% *}" fabric
  ssw_assert_eq "stat in B: no fallback reason" "$(Q "$T/statB.json" get fallback_reason remote="$HA:$P")" None
  ssw_assert_eq "stat in A: listener over fabric listed" \
    "$(Q "$T/statA.json" count state=listening local="$HA:$P" provider=fabric)" 1
fi
touch "$T/stat.stop"
wait

# ---- python echo pair
SIZES=1x100,64x100,102400x10,5242880x2
PAYLOAD=$(ssw_sizes_bytes "$SIZES")
ssw_ns_wire_start echo "$B"
ssw_ns_echo_pair echo switched switched "$SIZES"
ssw_ns_wire_stop echo "$B"
ssw_ns_assert_path echo "$T/echo.wire" "$ECHO_PORT" "$PAYLOAD" 1 "$T/echo-client.stats" "$T/echo-server.stats"

# ---- iperf3, the client sending, then the server (-R); control + data connection
PORT=5301 BYTES=256M BYTES_N=$((256 << 20))
jfield() { "$SSW_PYTHON" -c 'import json, sys
d = json.load(open(sys.argv[1])); print(eval(sys.argv[2], {"d": d}))' "$1" "$2" 2>/dev/null; }
for dir in fwd rev; do
  flag=(); [ $dir = rev ] && flag=(-R)
  rm -f "$T/iperf-$dir-"*.stats
  ssw_ns_bg "iperf-$dir-server" "$A" switched SOCKSWITCH_STATS_FILE="$T/iperf-$dir-server.stats" -- \
    iperf3 -s -1 -p $PORT -B "$HA"
  spid=$SSW_BG_PID
  ssw_ns_wait_listen "$A" $PORT 10 || ssw_fail "iperf3 $dir: server did not listen"
  ssw_ns_wire_start "iperf-$dir" "$B"
  ssw_ns_run "$B" switched SOCKSWITCH_STATS_FILE="$T/iperf-$dir-client.stats" -- \
    iperf3 -c "$HA" -p $PORT -n $BYTES -J "${flag[@]}" >"$T/iperf-$dir.json" 2>"$T/iperf-$dir-client.err"
  ssw_assert_eq "iperf3 $dir: client exit status" $? 0
  wait "$spid"; ssw_assert_eq "iperf3 $dir: server exit status" $? 0
  ssw_ns_wire_stop "iperf-$dir" "$B"
  ssw_assert_ge "iperf3 $dir: bytes sent" "$(jfield "$T/iperf-$dir.json" 'd["end"]["sum_sent"]["bytes"]')" "$BYTES_N"
  # iperf3 may stop the receiver's count before the last bytes are in (kernel
  # TCP shows it too, see t_iperf3.sh): 95 %
  ssw_assert_ge "iperf3 $dir: bytes received (>= 95 %)" \
    "$(jfield "$T/iperf-$dir.json" 'd["end"]["sum_received"]["bytes"]')" $(( BYTES_N / 100 * 95 ))
  ssw_ns_assert_path "iperf3 $dir" "$T/iperf-$dir.wire" $PORT "$BYTES_N" 2 \
    "$T/iperf-$dir-client.stats" "$T/iperf-$dir-server.stats"
  echo "# iperf3 $dir: $(jfield "$T/iperf-$dir.json" '"%.2f" % (d["end"]["sum_received"]["bits_per_second"] / 1e9)') Gbit/s"
done

# ---- redis: a 1 MiB value, then a short redis-benchmark
RPORT=6391 N=2000
head -c 786432 /dev/urandom | base64 -w0 >"$T/big.val"
ssw_ns_bg redis-server "$A" switched SOCKSWITCH_STATS_FILE="$T/redis-server.stats" -- \
  redis-server --port $RPORT --bind "$HA" --protected-mode no --save '' --appendonly no --daemonize no --loglevel warning
spid=$SSW_BG_PID
ssw_ns_wait_listen "$A" $RPORT 10 || ssw_fail "redis-server did not listen"
ssw_ns_wire_start redis "$B"
cli() { ssw_ns_run "$B" switched SOCKSWITCH_STATS_FILE="$T/redis-client.stats" -- redis-cli -h "$HA" -p $RPORT "$@"; }
ssw_assert_eq "redis: SET of a 1 MiB value" "$(cli -x SET big <"$T/big.val" 2>&1)" OK
cli GET big >"$T/big.got" 2>"$T/redis-cli.err"
ssw_assert_eq "redis: GET returns the value unchanged" "$(head -c -1 "$T/big.got" | sha256sum | cut -d' ' -f1)" "$(sha "$T/big.val")"
cli CONFIG RESETSTAT >/dev/null 2>&1
ssw_ns_run "$B" switched SOCKSWITCH_STATS_FILE="$T/redis-client.stats" -- \
  redis-benchmark -h "$HA" -p $RPORT -q -n $N -c 10 -t set,get -d 64 >"$T/redis-bench.out" 2>"$T/redis-bench.err"
ssw_assert_eq "redis-benchmark exit status" $? 0
out=$(cli INFO commandstats 2>&1 | tr -d '\r')
ssw_assert_eq "redis: server executed $N SETs" "$(sed -n 's/^cmdstat_set:calls=\([0-9]*\),.*/\1/p' <<<"$out")" $N
ssw_assert_eq "redis: server executed $N GETs" "$(sed -n 's/^cmdstat_get:calls=\([0-9]*\),.*/\1/p' <<<"$out")" $N
cli SHUTDOWN NOSAVE >/dev/null 2>&1
wait "$spid"; ssw_assert_eq "redis-server exit status after SHUTDOWN" $? 0
ssw_ns_wire_stop redis "$B"
ssw_ns_assert_path redis "$T/redis.wire" $RPORT $((2 * 1048576)) 10 "$T/redis-client.stats" "$T/redis-server.stats"
echo "# redis-benchmark -c 10 -n $N: $(tr '\r' '\n' <"$T/redis-bench.out" | grep -E '^(SET|GET): [0-9]' | tr '\n' ' ')"

# ---- sockperf ping-pong, 64 B, epoll
SPORT=11311
# -F (the I/O multiplexer) needs a feed file; "T:" = TCP
echo "T:$HA:$SPORT" >"$T/sockperf.feed"
ssw_ns_bg sockperf-server "$A" switched SOCKSWITCH_STATS_FILE="$T/sockperf-server.stats" -- \
  sockperf server -f "$T/sockperf.feed" -F epoll
spid=$SSW_BG_PID
ssw_ns_wait_listen "$A" $SPORT 10 || ssw_fail "sockperf server did not listen"
ssw_ns_wire_start sockperf "$B"
ssw_ns_run "$B" switched SOCKSWITCH_STATS_FILE="$T/sockperf-client.stats" -- \
  sockperf ping-pong -f "$T/sockperf.feed" -F epoll -t 1 -m 64 >"$T/sockperf-client.out" 2>"$T/sockperf-client.err"
ssw_assert_eq "sockperf ping-pong exit status" $? 0
sleep 0.2; kill -INT "$spid" 2>/dev/null; wait "$spid"
ssw_assert_eq "sockperf server exit status (SIGINT)" $? 0
ssw_ns_wire_stop sockperf "$B"
line=$(grep -a 'SentMessages=' "$T/sockperf-client.out" | tail -n 1)
sent=$(sed -n 's/.*SentMessages=\([0-9]*\).*/\1/p' <<<"$line")
rcvd=$(sed -n 's/.*ReceivedMessages=\([0-9]*\).*/\1/p' <<<"$line")
ssw_assert_ge "sockperf: messages sent" "${sent:-0}" 1000
ssw_assert_ge "sockperf: replies received (all but the last)" "${rcvd:-0}" $(( ${sent:-0} - 1 ))
ssw_ns_assert_path sockperf "$T/sockperf.wire" $SPORT $(( ${sent:-1} * 64 )) 1 \
  "$T/sockperf-client.stats" "$T/sockperf-server.stats"
echo "# sockperf 64 B: $(grep -a 'percentile 50.000' "$T/sockperf-client.out" | tail -n 1 | tr -s ' ')"

# ---- socat: 10 MiB file from B to A
XPORT=5001 SIZE=$((10 << 20))
head -c $SIZE /dev/urandom >"$T/in.bin"
ssw_ns_bg socat-server "$A" switched SOCKSWITCH_STATS_FILE="$T/socat-server.stats" -- \
  socat -u "TCP4-LISTEN:$XPORT,bind=$HA,reuseaddr" "CREATE:$T/socat-out.bin"
spid=$SSW_BG_PID
ssw_ns_wait_listen "$A" $XPORT 10 || ssw_fail "socat did not listen"
ssw_ns_wire_start socat "$B"
ssw_ns_run "$B" switched SOCKSWITCH_STATS_FILE="$T/socat-client.stats" -- \
  socat -u "OPEN:$T/in.bin" "TCP4:$HA:$XPORT" 2>"$T/socat-client.err"
ssw_assert_eq "socat client exit status" $? 0
wait "$spid"; ssw_assert_eq "socat server exit status" $? 0
ssw_ns_wire_stop socat "$B"
ssw_assert_eq "socat: sha256 of the received file ($(stat -c %s "$T/socat-out.bin" 2>/dev/null) of $SIZE bytes)" \
  "$(sha "$T/socat-out.bin")" "$(sha "$T/in.bin")"
ssw_ns_assert_path socat "$T/socat.wire" $XPORT $SIZE 1 "$T/socat-client.stats" "$T/socat-server.stats"
cmp -s "$T/socat-out.bin" "$T/in.bin" && rm -f "$T/socat-out.bin"   # kept when it differs

# ---- curl against python's http.server: 20 MiB and a small file
HPORT=8081 BIG=$((20 << 20))
mkdir -p "$T/www"
head -c $BIG /dev/urandom >"$T/www/big.bin"
printf 'hello from sockswitch\n%.0s' {1..10} >"$T/www/small.txt"
ssw_ns_bg http-server "$A" switched SOCKSWITCH_STATS_FILE="$T/http-server.stats" -- \
  "$SSW_PYTHON" -c 'import functools, http.server as h, sys
s = h.HTTPServer((sys.argv[3], int(sys.argv[1])),
                 functools.partial(h.SimpleHTTPRequestHandler, directory=sys.argv[2]))
for _ in range(2):
    s.handle_request()
s.server_close()' $HPORT "$T/www" "$HA"
spid=$SSW_BG_PID
ssw_ns_wait_listen "$A" $HPORT 10 || ssw_fail "http.server did not listen"
CLIENT=(curl -s -S -f -o)
if [[ "$SSW_PRELOAD" == *libasan* ]]; then
  # curl deadlocks in setlocale() under a preloaded libasan (see t_curl_http.sh)
  CLIENT=("$SSW_PYTHON" -c 'import sys, shutil, urllib.request
with urllib.request.urlopen(sys.argv[2], timeout=60) as r, open(sys.argv[1], "wb") as f:
    shutil.copyfileobj(r, f, 1 << 20)')
fi
ssw_ns_wire_start http "$B"
for f in big.bin small.txt; do
  ssw_ns_run "$B" switched SOCKSWITCH_STATS_FILE="$T/http-client.stats" -- \
    "${CLIENT[@]}" "$T/$f.got" "http://$HA:$HPORT/$f" 2>"$T/curl-$f.err"
  ssw_assert_eq "curl $f: exit status" $? 0
  ssw_assert_eq "curl $f: sha256" "$(sha "$T/$f.got")" "$(sha "$T/www/$f")"
done
wait "$spid"; ssw_assert_eq "http.server exit status" $? 0
ssw_ns_wire_stop http "$B"
ssw_ns_assert_path http "$T/http.wire" $HPORT $BIG 2 "$T/http-client.stats" "$T/http-server.stats"

ssw_assert_quiet "$T/echo-client.err" "$T/echo-server.err" "$T/socat-client.err" "$T/socat-server.err"
ssw_assert_no_sanitizer_report "$T"/*.err
ssw_finish
