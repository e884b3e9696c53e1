#!/usr/bin/env bash
# t_postgres — PostgreSQL (a fork-per-connection server: the postmaster
# accepts, a forked backend serves) run as the user postgres, with psql and
# pgbench as root, all unmodified, once under the switch and once on kernel
# TCP in the same run.  Checks: a 1 MiB text value and 2,000 rows copied in
# with COPY read back identical; pgbench's select-only transactions on
# persistent connections (-S) and with a new connection per transaction
# (-S -C) all processed, none failed; the server counted the connections.
# Switched: every connection over shared memory (stats of both sides, no
# fallback), the kernel saw no more TCP segments than the connections'
# set-up and tear-down, and the server, another user than its clients,
# checked most of the per-transaction connections by their listening proof
# (README Security) rather than by walking the kernel's bind table.
# Transactions/s are printed side by side, for information only.
source "$(dirname "$0")/lib.sh"
ssw_enter_netns "$@"
ssw_setup_preload
ssw_tmpdir
PGBIN=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)
for b in postgres initdb pgbench psql pg_isready; do
  [ -x "$PGBIN/$b" ] || { echo "SKIP: PostgreSQL ($b) not installed"; exit 77; }
done
id postgres >/dev/null 2>&1 || { echo "SKIP: no user postgres"; exit 77; }
# PostgreSQL itself hangs at start-up under the ASan runtime (postgres -V
# too, without sockswitch: a futex wait right after it looks up its own
# path); the sanitizer build's checks run on the other programs' tests
if [[ "$SSW_PRELOAD" == *asan* ]]; then
  rts=${SSW_PRELOAD%:*}
  timeout 10 env LD_PRELOAD="$rts" "$PGBIN/postgres" -V >/dev/null 2>&1 ||
    { echo "SKIP: postgres does not run under the sanitizer runtime alone ($rts)"; exit 77; }
fi
AS_PG=(setpriv --reuid=postgres --regid=postgres --init-groups)

TX=${SSW_PG_TX:-2000}    # per client, persistent connections
CTX=${SSW_PG_CTX:-150}   # per client, a connection each
chmod 755 "$T"
mkdir -m 1777 "$T/st"    # the server's processes (user postgres) write stats here
head -c 786432 /dev/urandom | base64 -w0 >"$T/big.val"    # 1 MiB of text
seq 1 2000 | awk '{ printf "%d\trow-%d-%d\n", $1, $1, ($1 * 7919) % 100003 }' >"$T/rows.tsv"

# initdb once: both servers start from a copy of it
ssw_step "initdb"
mkdir -m 700 "$T/pg0" && chown postgres: "$T/pg0"
"${AS_PG[@]}" "$PGBIN/initdb" -D "$T/pg0" -A trust -U postgres >"$T/initdb.log" 2>&1 ||
  { ssw_fail "initdb failed"; ssw_finish; }

declare -A TPS TPS_C

# run_mode MODE PORT — one server, the checks, pgbench
run_mode() {
  local mode=$1 port=$2 seg0 segs out rc spid n conns
  local data="$T/pg-$mode" stc="$T/$mode-client.stats" sts="$T/st/$mode-server.stats"
  cp -a "$T/pg0" "$data"
  ssw_bg "$mode-server" "$mode" SOCKSWITCH_STATS_FILE="$sts" SOCKSWITCH_LOG=debug -- \
    "${AS_PG[@]}" "$PGBIN/postgres" -D "$data" -h 127.0.0.1 -p "$port" -k "$data" \
      -c max_connections=40 -c fsync=off -c log_min_messages=warning
  spid=$SSW_BG_PID
  if ! ssw_wait_listen "$port" 20; then ssw_fail "$mode: postgres did not listen"; return; fi
  seg0=$(ssw_outsegs)
  psql_() { ssw_run "$mode" SOCKSWITCH_STATS_FILE="$stc" -- "$PGBIN/psql" -h 127.0.0.1 -p "$port" -U postgres \
              -X -q -At -v ON_ERROR_STOP=1 "$@" postgres; }

  # a 1 MiB value in, and out unchanged
  { printf 'CREATE TABLE big (v text);\n\\set v `cat %s`\nINSERT INTO big VALUES (:'"'"'v'"'"');\n' "$T/big.val"; } |
    psql_ >"$T/$mode-big-in.out" 2>&1
  psql_ -c "SELECT v FROM big" >"$T/$mode-big.got" 2>>"$T/$mode-psql.err"
  # psql ends the value with a newline
  ssw_assert_eq "$mode: a 1 MiB value read back unchanged" \
    "$(head -c -1 "$T/$mode-big.got" | sha256sum | cut -d' ' -f1)" "$(sha256sum <"$T/big.val" | cut -d' ' -f1)"
  # 2,000 rows by COPY in one connection, back by COPY in another
  psql_ -c "CREATE TABLE rows (id int PRIMARY KEY, v text)" >>"$T/$mode-psql.out" 2>&1
  psql_ -c "\\copy rows FROM '$T/rows.tsv'" >>"$T/$mode-psql.out" 2>&1
  psql_ -c "\\copy (SELECT id, v FROM rows ORDER BY id) TO STDOUT" >"$T/$mode-rows.got" 2>>"$T/$mode-psql.err"
  ssw_check "$mode: 2,000 rows by COPY read back in order" cmp -s "$T/$mode-rows.got" "$T/rows.tsv"

  ssw_run "$mode" SOCKSWITCH_STATS_FILE="$stc" -- "$PGBIN/pgbench" -i -s 1 -q \
    -h 127.0.0.1 -p "$port" -U postgres postgres >"$T/$mode-init.out" 2>&1
  ssw_assert_eq "$mode: pgbench -i exit status" $? 0

  ssw_step "$mode: pgbench -S, 4 clients x $TX transactions"
  ssw_run "$mode" SOCKSWITCH_STATS_FILE="$stc" -- "$PGBIN/pgbench" -S -c 4 -j 2 -t "$TX" \
    -h 127.0.0.1 -p "$port" -U postgres postgres >"$T/$mode-bench.out" 2>"$T/$mode-bench.err"
  ssw_assert_eq "$mode: pgbench -S exit status" $? 0
  ssw_assert_eq "$mode: pgbench -S transactions processed" \
    "$(sed -n 's/^number of transactions actually processed: \([0-9]*\).*/\1/p' "$T/$mode-bench.out")" $((4 * TX))
  ssw_assert_eq "$mode: pgbench -S failed transactions" \
    "$(sed -n 's/^number of failed transactions: \([0-9]*\).*/\1/p' "$T/$mode-bench.out")" 0
  TPS[$mode]=$(sed -n 's/^tps = \([0-9.]*\).*/\1/p' "$T/$mode-bench.out")

  ssw_step "$mode: pgbench -S -C, 2 clients x $CTX transactions, a connection each"
  ssw_run "$mode" SOCKSWITCH_STATS_FILE="$stc" -- "$PGBIN/pgbench" -S -C -c 2 -j 2 -t "$CTX" \
    -h 127.0.0.1 -p "$port" -U postgres postgres >"$T/$mode-benchC.out" 2>"$T/$mode-benchC.err"
  ssw_assert_eq "$mode: pgbench -S -C exit status" $? 0
  ssw_assert_eq "$mode: pgbench -S -C transactions processed" \
    "$(sed -n 's/^number of transactions actually processed: \([0-9]*\).*/\1/p' "$T/$mode-benchC.out")" $((2 * CTX))
  TPS_C[$mode]=$(sed -n 's/^tps = \([0-9.]*\).*/\1/p' "$T/$mode-benchC.out")

  # the server saw every connection (pg_stat_database counts sessions)
  n=$(psql_ -c "SELECT sessions FROM pg_stat_database WHERE datname = 'postgres'" 2>>"$T/$mode-psql.err")
  ssw_assert_ge "$mode: sessions the server counted" "${n:-0}" $((2 * CTX + 4))

  kill -INT "$spid" 2>/dev/null    # SIGINT to timeout: forwarded; postgres's fast shutdown
  wait "$spid"
  rc=$?
  ssw_assert_eq "$mode: postgres exit status after a fast shutdown" "$rc" 0
  segs=$(( $(ssw_outsegs) - seg0 ))
  if [ "$mode" = switched ]; then
    conns=$(ssw_stats_sum "$stc" switched)
    ssw_assert_ge "switched: client connections over shared memory" "$conns" $((2 * CTX + 4 + 6))
    ssw_assert_eq "switched: client fallback connections" "$(ssw_stats_sum "$stc" fallback)" 0
    # counted once, by the postmaster that accepted them (a forked
    # backend starts its counts from zero)
    n=$(ssw_stats_sum "$sts" switched)
    ssw_assert_ge "switched: server connections over shared memory" "$n" "$conns"
    ssw_assert_le "switched: server connections, each counted once" "$n" $((conns + 5))
    ssw_assert_ge "switched: server bytes_received over shm (1 MiB value + rows)" \
      "$(ssw_stats_sum "$sts" bytes_received)" $((1048576 + 40000))
    ssw_assert_le "switched: kernel TCP segments ($conns connections)" "$segs" $((conns * SSW_CONN_SEGS))
    # clients of another user: the first connection of each pgbench thread
    # walks the bind table, the later ones bring a listening proof
    ssw_assert_ge "switched: connections proven by their listening proof" \
      "$(grep -c 'proven by its listening proof' "$T/$mode-server.err")" $((2 * CTX - 20))
    # pgbench's own progress line is all its stderr may hold
    sed -i '/^starting vacuum\.\.\.end\.$/d' "$T/switched-bench.err" "$T/switched-benchC.err"
    ssw_assert_quiet "$T/switched-bench.err" "$T/switched-benchC.err" "$T/switched-psql.err"
  else
    echo "# kernel run: $segs kernel TCP segments"
  fi
}

run_mode switched 15441
run_mode plain 15442

printf '# pgbench select-only (tps)                switched     kernel\n'
printf '#   4 clients, persistent connections   %10s %10s\n' "${TPS[switched]:-?}" "${TPS[plain]:-?}"
printf '#   2 clients, a connection each        %10s %10s\n' "${TPS_C[switched]:-?}" "${TPS_C[plain]:-?}"
ssw_assert_no_sanitizer_report "$T"/*.err
ssw_finish
