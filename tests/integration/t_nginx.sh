#!/usr/bin/env bash
# t_nginx — nginx (master as root, 2 workers as nobody, sendfile + tcp_nopush,
# epoll) with curl and ab (ApacheBench) as root, all unmodified, once under the
# switch and once on kernel TCP in the same run.  The workers run as another
# user than the clients, as nginx is usually deployed, so every switched
# connection passes the switch's cross-user check of the connector's address.
# Checks: curl (python's urllib in the sanitizer build) fetches a 4 KiB and a
# 1 MiB file with the right sha256; ab with a new connection per request (-n
# 5000 -c 8) and with keep-alive (-k -n 20000 -c 8) completes every request,
# none failed, none non-2xx; both workers take their user; nginx exits cleanly
# on "quit" within 20 s (processes still there are named) and logs no alert.
# Under the switch: every client connection was switched (server side too),
# none fell back, the files' bytes went over shared memory (stats), the
# kernel saw no more TCP segments than the connections' set-up and tear-down
# (the fetches, the keep-alive run, the whole run), and the workers' debug
# log says that most new connections (>= half of ab's 5000) were proven by
# the connector's listening proof (the fast check; the first connections of
# a client process go through the walk of the kernel's bind table).  The
# requests/s are printed side by side, for information only (the machine is
# shared: the test passes on correctness).
source "$(dirname "$0")/lib.sh"
ssw_enter_netns "$@"
ssw_setup_preload
ssw_tmpdir
for b in nginx ab curl; do
  command -v $b >/dev/null || { echo "SKIP: $b not installed"; exit 77; }
done
[ "$(id -u)" = 0 ] || { echo "SKIP: needs root (nginx's workers run as nobody)"; exit 77; }
WUSER=nobody
WGROUP=$(id -gn "$WUSER" 2>/dev/null) || { echo "SKIP: no user $WUSER"; exit 77; }

N_AB=${SSW_NGINX_N:-5000}          # ab, a new connection per request
N_ABK=${SSW_NGINX_NK:-20000}       # ab -k, keep-alive
C=8
SMALL=4096
BIG=1048576

# The workers (nobody) read the files and write their stats at exit.
chmod 755 "$T"
mkdir -p "$T/www" "$T/nginx" "$T/srv"
head -c $SMALL /dev/urandom >"$T/www/small.bin"
head -c $BIG /dev/urandom >"$T/www/big.bin"
chmod 755 "$T/www"; chmod 644 "$T/www/"*.bin
SUM_SMALL=$(sha256sum <"$T/www/small.bin" | cut -d' ' -f1)
SUM_BIG=$(sha256sum <"$T/www/big.bin" | cut -d' ' -f1)

FETCH=(curl -sS -f -o) FETCH_NAME=curl
if [[ "$SSW_PRELOAD" == *libasan* ]]; then
  # curl deadlocks in setlocale() under a preloaded libasan (see t_curl_http.sh):
  # python's urllib stands in for it in the sanitizer build
  echo "# sanitizer build: python urllib stands in for curl (curl hangs under a preloaded libasan)"
  FETCH_NAME=urllib
  FETCH=("$SSW_PYTHON" -c 'import sys, shutil, urllib.request
with urllib.request.urlopen(sys.argv[2], timeout=60) as r, open(sys.argv[1], "wb") as f:
    shutil.copyfileobj(r, f, 1 << 20)')
fi

declare -A RPS_AB RPS_ABK

# conf MODE PORT — the nginx configuration of one run, all its files in $T
conf() {
  local d=$T/nginx
  cat <<EOF
daemon off;
master_process on;
user $WUSER $WGROUP;
worker_processes 2;
pid $d/$1.pid;
error_log $T/$1-error.log notice;
events { worker_connections 1024; }
http {
  access_log off;
  client_body_temp_path $d/body;
  proxy_temp_path $d/proxy;
  fastcgi_temp_path $d/fastcgi;
  uwsgi_temp_path $d/uwsgi;
  scgi_temp_path $d/scgi;
  default_type application/octet-stream;
  sendfile on;
  tcp_nopush on;
  keepalive_requests 1000000;
  keepalive_timeout 60s;
  server {
    listen 127.0.0.1:$2;
    root $T/www;
    location / { }
  }
}
EOF
}

# ab_check MODE NAME N OUT — ab's report says every request completed and succeeded
ab_check() {
  local mode=$1 name=$2 n=$3 out=$4
  ssw_assert_eq "$mode: $name: Complete requests" "$(sed -n 's/^Complete requests: *\([0-9]*\).*/\1/p' "$out")" "$n"
  local failed; failed=$(sed -n 's/^Failed requests: *\([0-9]*\).*/\1/p' "$out")
  if [ "$failed" = 0 ]; then ssw_ok "$mode: $name: Failed requests (0)"
  else ssw_fail "$mode: $name: Failed requests: got '$failed', want 0 $(grep -A1 '^Failed requests' "$out" | tail -n 1 | tr -s ' ')"; fi
  ssw_check "$mode: $name: no non-2xx responses" bash -c "! grep -q '^Non-2xx' '$out'"
  ssw_assert_eq "$mode: $name: bytes of the file per response" \
    "$(sed -n 's/^Document Length: *\([0-9]*\) bytes.*/\1/p' "$out")" $SMALL
}

# stuck PID… — how nginx's processes stand (for a failure message)
stuck() {
  local p
  for p in "$@"; do
    echo "pid $p: $(ps -o user=,stat=,wchan:24=,cmd= -p "$p" 2>/dev/null)"
    head -n 4 "/proc/$p/stack" 2>/dev/null | sed 's/^/    /'
  done
}

# workers_up MODE MASTER — both workers have taken the workers' user (a worker
# stuck between fork and setuid stays root and never serves)
workers_up() {
  local i n
  for ((i = 0; i < 100; i++)); do
    n=$(ps -o user= --ppid "$2" 2>/dev/null | grep -cx "$WUSER")
    [ "$n" -ge 2 ] && break
    sleep 0.1
  done
  if [ "$n" -ge 2 ]; then ssw_ok "$1: nginx's 2 workers run as $WUSER"
  else ssw_fail "$1: nginx's workers did not all become $WUSER in 10 s: $(stuck $(pgrep -P "$2"))"; fi
}

# stop MODE MASTER SPID — graceful stop (SIGQUIT: the workers finish, exit and
# write their stats), bounded: processes still there are named and killed
stop() {
  local mode=$1 master=$2 spid=$3 i left
  kill -QUIT "$master" || kill "$spid"
  for ((i = 0; i < 20 * 10; i++)); do kill -0 "$spid" 2>/dev/null || break; sleep 0.1; done
  if kill -0 "$spid" 2>/dev/null; then
    left=$(pgrep -P "$master")
    ssw_fail "$mode: nginx did not exit within 20 s of quit: $(stuck "$master" $left)"
    kill -9 $left "$master" 2>/dev/null
  fi
  wait "$spid"
}

# run_mode MODE PORT — one nginx, the fetches, the two ab runs
run_mode() {
  local mode=$1 port=$2 seg0 s0 segs conns rc sst=$T/srv/$1-server.stats cst=$T/$1-client.stats
  local url=http://127.0.0.1:$2 seg_curl seg_ab seg_abk log=()
  conf "$mode" "$port" >"$T/nginx/$mode.conf"
  rm -f "$sst" "$cst" "$T/$mode-error.log"
  # the master (root) opens the stats file at start, the workers (nobody)
  # append to it at exit
  install -m 644 -o "$WUSER" -g "$WGROUP" /dev/null "$sst"
  # the workers' debug lines go to the error log (nginx's stderr)
  [ "$mode" = switched ] && log=(SOCKSWITCH_LOG=debug)
  ssw_bg "$mode-server" "$mode" SOCKSWITCH_STATS_FILE="$sst" "${log[@]}" -- \
    nginx -p "$T/nginx/" -e "$T/$mode-error.log" -c "$T/nginx/$mode.conf"
  local spid=$SSW_BG_PID
  if ! ssw_wait_listen "$port" 10; then ssw_fail "$mode: nginx did not listen"; return; fi
  ssw_wait_file "$T/nginx/$mode.pid" 10
  local master; master=$(cat "$T/nginx/$mode.pid")
  workers_up "$mode" "$master"
  seg0=$(ssw_outsegs)
  client() { ssw_run "$mode" SOCKSWITCH_STATS_FILE="$cst" -- "$@"; }

  s0=$(ssw_outsegs)
  ssw_step "$mode: $FETCH_NAME"
  client "${FETCH[@]}" "$T/$mode-small.got" "$url/small.bin" 2>"$T/$mode-curl.err"
  ssw_assert_eq "$mode: $FETCH_NAME gets the 4 KiB file (sha256)" "$(sha256sum <"$T/$mode-small.got" | cut -d' ' -f1)" "$SUM_SMALL"
  client "${FETCH[@]}" "$T/$mode-big.got" "$url/big.bin" 2>>"$T/$mode-curl.err"
  ssw_assert_eq "$mode: $FETCH_NAME gets the 1 MiB file (sha256)" "$(sha256sum <"$T/$mode-big.got" | cut -d' ' -f1)" "$SUM_BIG"
  seg_curl=$(( $(ssw_outsegs) - s0 ))

  s0=$(ssw_outsegs)
  ssw_step "$mode: ab -n $N_AB -c $C"
  client ab -n "$N_AB" -c $C "$url/small.bin" >"$T/$mode-ab.out" 2>"$T/$mode-ab.err"
  rc=$?
  seg_ab=$(( $(ssw_outsegs) - s0 ))
  ssw_assert_eq "$mode: ab (new connection per request) exit status" "$rc" 0
  ab_check "$mode" "ab -n $N_AB -c $C" "$N_AB" "$T/$mode-ab.out"
  RPS_AB[$mode]=$(sed -n 's/^Requests per second: *\([0-9.]*\).*/\1/p' "$T/$mode-ab.out")

  s0=$(ssw_outsegs)
  ssw_step "$mode: ab -k -n $N_ABK -c $C"
  client ab -k -n "$N_ABK" -c $C "$url/small.bin" >"$T/$mode-abk.out" 2>"$T/$mode-abk.err"
  rc=$?
  seg_abk=$(( $(ssw_outsegs) - s0 ))
  ssw_assert_eq "$mode: ab -k (keep-alive) exit status" "$rc" 0
  ab_check "$mode" "ab -k -n $N_ABK -c $C" "$N_ABK" "$T/$mode-abk.out"
  ssw_assert_eq "$mode: ab -k: keep-alive requests" \
    "$(sed -n 's/^Keep-Alive requests: *\([0-9]*\).*/\1/p' "$T/$mode-abk.out")" "$N_ABK"
  RPS_ABK[$mode]=$(sed -n 's/^Requests per second: *\([0-9.]*\).*/\1/p' "$T/$mode-abk.out")

  ssw_step "$mode: nginx -s quit"
  stop "$mode" "$master" "$spid"
  ssw_assert_eq "$mode: nginx exit status after quit" $? 0
  segs=$(( $(ssw_outsegs) - seg0 ))
  ssw_check "$mode: nginx logged no alert, crash or error" \
    bash -c "! grep -E '\[(emerg|alert|crit|error)\]|exited on signal' '$T/$mode-error.log'"

  if [ "$mode" = switched ]; then
    ssw_check "switched: the switch logged no warning or error in nginx's processes" \
      bash -c "! grep -E 'sockswitch\[[0-9]+\] (warn|error):' '$T/$mode-error.log' '$T/$mode-server.err'"
    ssw_assert_ge "switched: nginx's master and 2 workers reported (stats)" "$(ssw_stats_lines "$sst")" 3
    conns=$(ssw_stats_sum "$cst" switched)
    ssw_assert_ge "switched: client connections over shared memory" "$conns" $((2 + N_AB + C))
    ssw_assert_eq "switched: client fallback connections" "$(ssw_stats_sum "$cst" fallback)" 0
    ssw_assert_ge "switched: server connections over shared memory" "$(ssw_stats_sum "$sst" switched)" "$conns"
    ssw_assert_eq "switched: server fallback connections" "$(ssw_stats_sum "$sst" fallback)" 0
    ssw_assert_ge "switched: server bytes_sent over shm (the files)" \
      "$(ssw_stats_sum "$sst" bytes_sent)" $((BIG + SMALL * (1 + N_AB + N_ABK)))
    ssw_assert_ge "switched: client bytes_received over shm (the files)" \
      "$(ssw_stats_sum "$cst" bytes_received)" $((BIG + SMALL * (1 + N_AB + N_ABK)))
    ssw_assert_le "switched: kernel TCP segments, $FETCH_NAME (2 connections, 1 MiB + 4 KiB)" \
      "$seg_curl" $((2 * SSW_CONN_SEGS))
    ssw_assert_le "switched: kernel TCP segments, ab -k ($C connections, $N_ABK requests)" \
      "$seg_abk" $((C * SSW_CONN_SEGS))
    ssw_assert_le "switched: kernel TCP segments, whole run ($((2 + N_AB + C)) connections)" \
      "$segs" $(((2 + N_AB + C) * SSW_CONN_SEGS))
    # the cross-user check of the connector (root) by the workers (nobody)
    local proven
    proven=$(grep 'proven by its listening proof' "$T/$mode-error.log" | grep -vc "^sockswitch\[$master\] ")
    ssw_assert_ge "switched: connections proven by the listening proof (workers' debug log)" \
      "$proven" $((N_AB / 2))
    ssw_assert_quiet "$T/switched-curl.err"
    echo "# switched run: $segs kernel TCP segments ($FETCH_NAME $seg_curl, ab $seg_ab, ab -k $seg_abk)"
  else
    echo "# kernel run: $segs kernel TCP segments ($FETCH_NAME $seg_curl, ab $seg_ab, ab -k $seg_abk)"
  fi
}

run_mode switched 18080
run_mode plain 18081

printf '# nginx, ab -c %d, 4 KiB file (requests/s)      switched    kernel\n' $C
printf '#   new connection per request (-n %5d) %10s %10s\n' "$N_AB" "${RPS_AB[switched]:-?}" "${RPS_AB[plain]:-?}"
printf '#   keep-alive (-k -n %5d)              %10s %10s\n' "$N_ABK" "${RPS_ABK[switched]:-?}" "${RPS_ABK[plain]:-?}"
ssw_assert_no_sanitizer_report "$T"/*.err "$T"/*-error.log
ssw_finish
