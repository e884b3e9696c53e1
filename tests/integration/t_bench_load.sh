#!/usr/bin/env bash
# t_bench_load — `sockswitch bench --load --quick --json`: every load case is
# measured in both columns (numbers > 0; only a manyconns case may be skipped,
# for RLIMIT_NOFILE, with the reason), and the switched column really was
# switched: the per-case stats of its workers (--stats-dir) show at least one
# switched connection per connection the case makes and none that fell back
# to kernel TCP; the per-client figures (the worst client's p99, the slowest
# client, min/max) agree with the overall ones.  Correctness only: no timing
# is checked.
source "$(dirname "$0")/lib.sh"
ssw_enter_netns "$@"
ssw_setup_preload
ssw_tmpdir

CLI=$SSW_BUILD/sockswitch
mkdir -p "$T/stats"

t0=$(date +%s)
timeout -k 5 100 "$CLI" bench --load --quick --json --stats-dir "$T/stats" >"$T/bench.json" 2>"$T/bench.err"
rc=$?
echo "# bench --load --quick took $(( $(date +%s) - t0 )) s"
ssw_assert_eq "bench --load --quick: exit" "$rc" 0

# One line per JSON row: CASE NAME KERNEL_OK SWITCHED_OK SKIP_REASON
"$SSW_PYTHON" - "$T/bench.json" >"$T/rows.txt" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
for c in d["cases"]:
    if c.get("family") != "load":
        continue
    pos = lambda v: int(isinstance(v, (int, float)) and v > 0)
    skip = c.get("kernel_skipped") or c.get("switched_skipped") or ""
    print(c["case"], c["name"], pos(c["kernel"]), pos(c["switched"]), skip.replace(" ", "_") or "-")
PY
ssw_assert_eq "JSON parsed, load rows only" "$?" 0
# a worker that had to be killed is a hang, whatever the figures say (an
# epoll server with 5,000 connections once hung at their close: a corrupt
# table of kept mappings, shm_maps.c)
hung=$("$SSW_PYTHON" -c 'import json, sys
d = json.load(open(sys.argv[1]))
print(sum("hung" in (c.get("kernel_note", "") + c.get("switched_note", "")) for c in d["cases"]))' "$T/bench.json")
ssw_assert_eq "rows whose worker hung and was killed" "$hung" 0
ssw_assert_eq "load cases reported" "$(cut -d' ' -f1 "$T/rows.txt" | sort -u | wc -l)" 16
ssw_assert_eq "default cases not run with --load" "$(grep -c '"family": "default"' "$T/bench.json")" 0

while read -r id name k s skip; do
  if [ "$skip" != - ]; then
    case "$id" in
      load_manyconns_*) ssw_ok "$name: skipped (${skip//_/ })" ;;
      *) ssw_fail "$name: skipped, but only manyconns may be: $skip" ;;
    esac
    continue
  fi
  ssw_assert_eq "$name: kernel TCP number > 0" "$k" 1
  ssw_assert_eq "$name: switched number > 0" "$s" 1
done <"$T/rows.txt"

# How the clients fared each (pingpong, forkserver, sendfile): the worst
# client's own p99, the slowest client's rate, min/max of the clients' rates;
# in both columns, consistent with the overall figures of the same rounds:
# the worst client's p99 at least the overall p99 (2% histogram buckets), the
# slowest client at most the mean client, min/max in (0, 1].
"$SSW_PYTHON" - "$T/bench.json" >"$T/clients.txt" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
rows = {}
for c in d["cases"]:
    rows.setdefault(c["case"], {})[c["name"][len(c["case"]) + 1:]] = c
conns = {"load_sendfile_4KiB": 2, "load_sendfile_64KiB": 2}  # client processes
for case, r in rows.items():
    if not case.startswith(("load_pingpong_", "load_forkserver_", "load_sendfile_")):
        continue
    n = conns.get(case) or int(case.rsplit("_", 1)[1])
    for side in ("kernel", "switched"):
        get = lambda k: (r.get(k) or {}).get(side)
        rate, p99, worst, slow, mm = (get(k) for k in ("rate", "p99", "p99_worst_client", "slowest_client_rate", "client_min_max"))
        ok = all(isinstance(v, (int, float)) for v in (rate, p99, worst, slow, mm))
        ok = ok and worst >= p99 * 0.97 and 0 < slow <= rate / n * 1.001 and 0 < mm <= 1
        print(case, side, int(ok), rate, p99, worst, slow, mm)
PY
ssw_assert_eq "per-client figures parsed" "$?" 0
ssw_assert_eq "cases with per-client figures, both columns" "$(wc -l <"$T/clients.txt")" 14
while read -r id side ok rest; do
  ssw_assert_eq "$id $side: worst client p99 >= p99, slowest <= mean client, 0 < min/max <= 1 ($rest)" "$ok" 1
done <"$T/clients.txt"

# connections each case makes at the least (client side; the servers count theirs too)
min_conns() {
  case "$1" in
    load_pingpong_*|load_forkserver_*|load_manyconns_*) echo "${1##*_}" ;;
    load_sendfile_*) echo 32 ;;
    *) echo 1 ;;
  esac
}
for id in $(awk '$5 == "-" {print $1}' "$T/rows.txt" | sort -u); do
  st="$T/stats/$id.stats"
  ssw_assert_ge "$id: switched workers reported stats" "$(ssw_stats_lines "$st")" 2
  ssw_assert_ge "$id: switched connections" "$(ssw_stats_sum "$st" switched)" "$(min_conns "$id")"
  ssw_assert_eq "$id: connections fallen back to kernel TCP" "$(ssw_stats_sum "$st" fallback)" 0
  ssw_assert_gt "$id: bytes sent over shm" "$(ssw_stats_sum "$st" bytes_sent)" 0
done

# A window of 1 s or more: 5 alternating rounds per side, p99 the median of
# the rounds' p99s (the progress line lists them), throughput their mean.
timeout -k 5 60 "$CLI" bench --load --case duplex,pingpong --duration 1 --json >"$T/rounds.json" 2>"$T/rounds.err"
ssw_assert_eq "bench --load --duration 1: exit" "$?" 0
"$SSW_PYTHON" - "$T/rounds.json" "$T/rounds.err" >"$T/rounds.txt" <<'PY'
import json, re, statistics, sys
d = json.load(open(sys.argv[1]))
# the p99 rows in case order, kernel then switched, as the progress lines come
p99 = [c.get(side) for c in d["cases"] if c["name"].endswith("_p99") for side in ("kernel", "switched")]
rounds = []
for line in open(sys.argv[2]):
    m = re.search(r"\(p99 us by round: ([0-9. ]+)\)", line)
    if m:
        rounds.append([float(x) for x in m.group(1).split()])
print("lines", len(rounds), "five", sum(len(v) == 5 for v in rounds))
bad = sum(1 for r, v in zip(rounds, p99) if abs(statistics.median(r) - v) > 1) + abs(len(rounds) - len(p99))
print("median_mismatch", bad, "p99_rows", len(p99))
PY
ssw_assert_eq "progress lines with 5 rounds each" "$(awk '$1 == "lines" {print $2 == $4}' "$T/rounds.txt")" 1
ssw_assert_ge "progress lines with rounds" "$(awk '$1 == "lines" {print $2}' "$T/rounds.txt")" 8
ssw_assert_ge "p99 rows checked" "$(awk '$1 == "median_mismatch" {print $4}' "$T/rounds.txt")" 8
ssw_assert_eq "p99 = median of the rounds' p99s" "$(awk '$1 == "median_mismatch" {print $2}' "$T/rounds.txt")" 0

ssw_assert_no_sanitizer_report "$T"/*.err
ssw_finish
