#!/usr/bin/env bash
# t_redis — redis-server (epoll event loop) with redis-cli and redis-benchmark,
# all unmodified, once under the switch and once on kernel TCP in the same run.
# Checks: a 1 MiB value written with SET and read back with GET is identical;
# a few hundred keys written in one pipelined redis-cli session read back right;
# redis-benchmark (-c 50, GET and SET) completes every request and the server
# counted them; every switched connection went over shared memory (stats) and
# the kernel saw no more TCP segments than the idle companion connections'
# set-up and tear-down.  The requests/s are printed side by side, for
# information only (the machine is shared: the test passes on correctness).
source "$(dirname "$0")/lib.sh"
ssw_enter_netns "$@"
ssw_setup_preload
ssw_tmpdir
for b in redis-server redis-cli redis-benchmark; do
  command -v $b >/dev/null || { echo "SKIP: $b not installed"; exit 77; }
done

N=${SSW_REDIS_N:-50000}
CONNS=50
head -c 786432 /dev/urandom | base64 -w0 >"$T/big.val"    # 1 MiB of text
for i in $(seq 1 300); do echo "SET key:$i value-$i-$RANDOM$RANDOM"; done >"$T/keys.cmd"
sed -n 's/^SET \([^ ]*\) \(.*\)/\2/p' "$T/keys.cmd" >"$T/keys.want"

declare -A RPS_GET RPS_SET

# run_mode MODE PORT — one redis-server, the checks, the benchmark
run_mode() {
  local mode=$1 port=$2 seg0 segs conns out rc
  rm -f "$T/$mode-"*.stats
  ssw_bg "$mode-server" "$mode" SOCKSWITCH_STATS_FILE="$T/$mode-server.stats" -- \
    redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no --daemonize no \
      --maxclients 200 --loglevel warning
  local spid=$SSW_BG_PID
  if ! ssw_wait_listen "$port" 10; then ssw_fail "$mode: redis-server did not listen"; return; fi
  seg0=$(ssw_outsegs)
  cli() { ssw_run "$mode" SOCKSWITCH_STATS_FILE="$T/$mode-client.stats" -- redis-cli -p "$port" "$@"; }

  out=$(cli -x SET big <"$T/big.val" 2>&1)
  ssw_assert_eq "$mode: SET of a 1 MiB value" "$out" OK
  cli GET big >"$T/$mode-big.got" 2>"$T/$mode-cli.err"
  # redis-cli ends the value with a newline
  ssw_assert_eq "$mode: GET returns the 1 MiB value unchanged" \
    "$(head -c -1 "$T/$mode-big.got" | sha256sum | cut -d' ' -f1)" "$(sha256sum <"$T/big.val" | cut -d' ' -f1)"
  out=$(cli STRLEN big 2>&1)
  ssw_assert_eq "$mode: STRLEN big" "$out" "$(stat -c %s "$T/big.val")"

  # one connection, 300 commands pipelined from stdin, then MGET in one reply
  cli <"$T/keys.cmd" >"$T/$mode-set.out" 2>&1
  ssw_assert_eq "$mode: 300 pipelined SETs answered OK" "$(grep -c '^OK$' "$T/$mode-set.out")" 300
  cli MGET $(seq -f 'key:%g' 1 300) >"$T/$mode-mget.got" 2>&1
  ssw_check "$mode: MGET of 300 keys returns every value in order" cmp -s "$T/$mode-mget.got" "$T/keys.want"

  cli CONFIG RESETSTAT >/dev/null 2>&1
  ssw_run "$mode" SOCKSWITCH_STATS_FILE="$T/$mode-client.stats" -- \
    redis-benchmark -p "$port" -q -n "$N" -c $CONNS -t set,get -d 64 >"$T/$mode-bench.out" 2>"$T/$mode-bench.err"
  rc=$?
  ssw_assert_eq "$mode: redis-benchmark exit status" "$rc" 0
  RPS_SET[$mode]=$(tr '\r' '\n' <"$T/$mode-bench.out" | sed -n 's/^SET: \([0-9.]*\) requests per second.*/\1/p' | tail -n 1)
  RPS_GET[$mode]=$(tr '\r' '\n' <"$T/$mode-bench.out" | sed -n 's/^GET: \([0-9.]*\) requests per second.*/\1/p' | tail -n 1)
  ssw_check "$mode: redis-benchmark reported SET and GET rates" test -n "${RPS_SET[$mode]}" -a -n "${RPS_GET[$mode]}"
  # the server counted every benchmark request (+1: this INFO itself)
  out=$(cli INFO commandstats 2>&1 | tr -d '\r')
  ssw_assert_eq "$mode: server executed $N SETs" "$(sed -n 's/^cmdstat_set:calls=\([0-9]*\),.*/\1/p' <<<"$out")" "$N"
  ssw_assert_eq "$mode: server executed $N GETs" "$(sed -n 's/^cmdstat_get:calls=\([0-9]*\),.*/\1/p' <<<"$out")" "$N"

  out=$(cli SHUTDOWN NOSAVE 2>&1)
  wait "$spid"
  ssw_assert_eq "$mode: redis-server exit status after SHUTDOWN" $? 0
  segs=$(( $(ssw_outsegs) - seg0 ))
  if [ "$mode" = switched ]; then
    conns=$(ssw_stats_sum "$T/$mode-client.stats" switched)
    ssw_assert_ge "switched: client connections over shared memory" "$conns" $((2 * CONNS + 8))
    ssw_assert_eq "switched: client fallback connections" "$(ssw_stats_sum "$T/$mode-client.stats" fallback)" 0
    ssw_assert_ge "switched: server connections over shared memory" "$(ssw_stats_sum "$T/$mode-server.stats" switched)" "$conns"
    ssw_assert_ge "switched: server bytes_received over shm (1 MiB value + requests)" \
      "$(ssw_stats_sum "$T/$mode-server.stats" bytes_received)" $((1048576 + 40 * N))
    ssw_assert_ge "switched: client bytes_received over shm" \
      "$(ssw_stats_sum "$T/$mode-client.stats" bytes_received)" $((1048576 + 5 * N))
    ssw_assert_le "switched: kernel TCP segments ($conns connections, $((4 * N)) requests+replies)" \
      "$segs" $((conns * SSW_CONN_SEGS))
    ssw_assert_quiet "$T/switched-bench.err" "$T/switched-cli.err"
  else
    echo "# kernel run: $segs kernel TCP segments"
  fi
}

run_mode switched 6391
run_mode plain 6392

printf '# redis-benchmark -c %d -n %d (requests/s)   switched    kernel\n' $CONNS "$N"
printf '#   SET                                  %10s %10s\n' "${RPS_SET[switched]:-?}" "${RPS_SET[plain]:-?}"
printf '#   GET                                  %10s %10s\n' "${RPS_GET[switched]:-?}" "${RPS_GET[plain]:-?}"
ssw_assert_no_sanitizer_report "$T"/*.err
ssw_finish
