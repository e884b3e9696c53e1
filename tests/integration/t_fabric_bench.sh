#!/usr/bin/env bash
# t_fabric_bench — `sockswitch bench --netns --quick --json` for the 64 B round
# trip, 64 KiB and 1 MiB streams, connect and the load family's pingpong and
# duplex (short windows): every case measured in both columns across the two
# namespaces the bench makes itself (JSON says netns and the server's
# 10.77.200.1), and the switched column was what SSW_NS_EXPECT says (netns.sh):
# its workers' stats (--stats-dir) show switched connections and no fallback —
# or, expecting fallback, the reverse.  Correctness only: the numbers are printed, not judged.
SSW_TIMEOUT=${SSW_TIMEOUT:-20}
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/netns.sh"
ssw_setup_preload
ssw_tmpdir
case "$SSW_NS_EXPECT" in fabric|fallback) ;; *) echo "FAIL: SSW_NS_EXPECT='$SSW_NS_EXPECT'"; exit 1 ;; esac
mkdir -p "$T/stats"

t0=$SECONDS
timeout -k 5 100 "$SSW_CLI" bench --netns --quick --json --duration 0.3 --sizes 64K,1M \
  --case latency,stream,connect,pingpong,duplex --stats-dir "$T/stats" >"$T/bench.json" 2>"$T/bench.err"
rc=$?
echo "# bench --netns took $((SECONDS - t0)) s"
ssw_assert_eq "bench --netns: exit status" "$rc" 0

# one line per JSON row: CASE NAME KERNEL SWITCHED (numbers, or - when missing)
"$SSW_PYTHON" - "$T/bench.json" >"$T/rows.txt" 2>"$T/rows.err" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
assert d["netns"] is True and d["address"] == "10.77.200.1", (d.get("netns"), d.get("address"))
for c in d["cases"]:
    num = lambda v: ("%.3f" % v) if isinstance(v, (int, float)) and v > 0 else "-"
    print(c["case"], c["name"].replace(" ", "_"), num(c["kernel"]), num(c["switched"]))
PY
ssw_assert_eq "JSON parsed, netns true, address 10.77.200.1" "$?" 0
ssw_assert_ge "rows reported" "$(wc -l <"$T/rows.txt")" 10
while read -r id name k s; do
  ssw_check "$name: kernel TCP measured ($k)" test "$k" != -
  ssw_check "$name: switched measured ($s)" test "$s" != -
  echo "#   ${name//_/ }: kernel $k, switched $s"
done <"$T/rows.txt"

for st in "$T"/stats/*.stats; do
  id=$(basename "$st" .stats)
  if [ "$SSW_NS_EXPECT" = fabric ]; then
    ssw_assert_ge "$id: switched connections" "$(ssw_stats_sum "$st" switched)" 1
    ssw_assert_eq "$id: connections fallen back to kernel TCP" "$(ssw_stats_sum "$st" fallback)" 0
  else
    ssw_assert_eq "$id: switched connections (expecting fallback)" "$(ssw_stats_sum "$st" switched)" 0
    ssw_assert_ge "$id: connections fallen back" "$(ssw_stats_sum "$st" fallback)" 1
  fi
done
ssw_assert_no_sanitizer_report "$T"/*.err
ssw_finish
