#!/usr/bin/env bash
# t_fabric_bench — `sockswitch bench --netns --quick --json` for the 64 B round
# trip, 64 KiB and 1 MiB streams, connect and the load family's pingpong and
# duplex (short windows): every case measured in both columns across the two
# namespaces the bench makes itself (JSON says netns and the server's
# 10.77.200.1), and the switched column was what SSW_NS_EXPECT says (netns.sh):
# its workers' stats (--stats-dir) show switched connections and no fallback —
# or, expecting fallback, the reverse; routed to tcp, the report notes that the
# switched column is kernel TCP.  Then `bench --serve` in namespace A of
# netns.sh and `bench --peer A` in B: the round trip and a 1 MiB stream
# measured in both columns across the test's own veth, the server workers
# on the far side.  Correctness only: the numbers are printed, not judged.
SSW_TIMEOUT=${SSW_TIMEOUT:-20}
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/netns.sh"
ssw_need_fabric
ssw_setup_preload
ssw_tmpdir
case "$SSW_NS_EXPECT" in fabric|fallback) ;; *) echo "FAIL: SSW_NS_EXPECT='$SSW_NS_EXPECT'"; exit 1 ;; esac
mkdir -p "$T/stats"

t0=$SECONDS
SOCKSWITCH_ROUTES="$SSW_NS_ROUTES" timeout -k 5 100 "$SSW_CLI" bench --netns --quick --json --duration 0.3 --sizes 64K,1M \
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
    ssw_assert_eq "$id: switched connections (expecting kernel TCP)" "$(ssw_stats_sum "$st" switched)" 0
  fi
done
# ---- a switched column that is kernel TCP says so: routed to tcp, the round
# trip's switched workers all fall back, and the report notes it
SOCKSWITCH_ROUTES='route 10.77.0.0/16 tcp' timeout -k 5 60 "$SSW_CLI" bench --netns --quick --json \
  --case latency >"$T/tcp.json" 2>"$T/tcp.err"
ssw_assert_eq "bench --netns, route tcp: exit status" $? 0
note=$("$SSW_PYTHON" -c 'import json, sys
print(json.load(open(sys.argv[1]))["cases"][0].get("switched_note", ""))' "$T/tcp.json" 2>&1)
ssw_check "bench --netns, route tcp: the switched column is noted as kernel TCP ($note)" \
  grep -q "no connection switched (0 fell back): this column is kernel TCP" <<<"$note"

# ---- --peer / --serve across the test's own namespaces
ssw_ns_pair
mkdir -p "$T/peer-stats"
ssw_ns_bg serve "$SSW_NS_A" plain SOCKSWITCH_ROUTES="$SSW_NS_ROUTES" -- "$SSW_CLI" bench --serve=7390
ssw_ns_wait_listen "$SSW_NS_A" 7390 10 || ssw_fail "bench --serve did not listen on 7390"
SSW_TIMEOUT=60 ssw_ns_run "$SSW_NS_B" plain SOCKSWITCH_ROUTES="$SSW_NS_ROUTES" -- "$SSW_CLI" bench \
  --peer "$SSW_NS_ADDR_A:7390" --quick --json --duration 0.3 --sizes 1M --case latency,stream \
  --stats-dir "$T/peer-stats" >"$T/peer.json" 2>"$T/peer.err"
ssw_assert_eq "bench --peer: exit status" $? 0
"$SSW_PYTHON" - "$T/peer.json" "$SSW_NS_ADDR_A" >"$T/peer-rows.txt" 2>"$T/peer-rows.err" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
assert d["peer"] is True and d["address"] == sys.argv[2], (d.get("peer"), d.get("address"))
for c in d["cases"]:
    num = lambda v: ("%.3f" % v) if isinstance(v, (int, float)) and v > 0 else "-"
    print(c["name"].replace(" ", "_"), num(c["kernel"]), num(c["switched"]))
PY
ssw_assert_eq "bench --peer: JSON parsed, peer true, the peer's address" "$?" 0
ssw_assert_eq "bench --peer: rows (round trip p50, p99; stream, exec'd and passed stream MB/s, msg/s)" "$(wc -l <"$T/peer-rows.txt")" 8
while read -r name k s; do
  ssw_check "peer $name: both columns measured (kernel $k, switched $s)" test "$k" != - -a "$s" != -
done <"$T/peer-rows.txt"
for st in "$T"/peer-stats/*.stats; do
  if [ "$SSW_NS_EXPECT" = fabric ]; then
    ssw_assert_ge "peer $(basename "$st" .stats): the client worker switched" "$(ssw_stats_sum "$st" switched)" 1
    ssw_assert_eq "peer $(basename "$st" .stats): no fallback" "$(ssw_stats_sum "$st" fallback)" 0
  else
    ssw_assert_eq "peer $(basename "$st" .stats): the client worker not switched" "$(ssw_stats_sum "$st" switched)" 0
  fi
done
ssw_assert_no_sanitizer_report "$T"/*.err
ssw_finish
