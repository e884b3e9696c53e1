#!/usr/bin/env bash
# t_regcache_stale — the registration cache never sends stale bytes (seed
# 002), on shm (loopback in one namespace) and over fabric (across two
# namespaces): tests/progs/stale_send's sender changes the mappings of its
# buffers between sends (munmap and a new mapping at the same address, free
# and malloc of large blocks, realloc that moves, a heap top given back by
# malloc_trim, madvise(DONTNEED)) and sends from one buffer ten times; the
# receiver checks every byte.  Large sends go by the rendezvous (the
# receiver reads the sender's buffer), and the sender's registrations pin
# pages as RDMA hardware does (SOCKSWITCH_FAULT=pin: neither Cross Memory
# Attach nor libfabric's tcp provider would show a stale registration by
# themselves), so a cache entry that outlived its mapping would move the old
# pages' bytes.  Checks: 0 stale bytes, every frame by the rendezvous, the
# mappings really reused, the cache's invalidations and hits in the
# sender's counters; and with SOCKSWITCH_REGCACHE=0 no hit at all.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/netns.sh"
ssw_setup_preload
ssw_tmpdir
ssw_ns_pair
PROG=$SSW_BUILD/tests/stale_send
[ -x "$PROG" ] || { echo "FAIL: stale_send not built"; exit 1; }
FRAMES=42 # 2 rounds of 2+2+3+2+2+10
# scenarios whose second buffer must land where the first was: all five
# twice, less a few (the fabric provider's own allocations may take one);
# under AddressSanitizer malloc is ASan's, which never gives an address
# back: only the mmap and madvise scenarios then
REUSE_MIN=6
[[ "$SSW_PRELOAD" == *asan* ]] && REUSE_MIN=4
RNDV=(SOCKSWITCH_RDMA=read SOCKSWITCH_RNDV_THRESHOLD=64K SOCKSWITCH_RNDV_MAX=0)

# run NAME ADDR CLIENT-NS [CLIENT-ENV…]: the receiver in A on ADDR, the sender in CLIENT-NS
run() {
  local name=$1 addr=$2 cns=$3; shift 3
  ssw_ns_bg "$name-server" "$SSW_NS_A" switched SOCKSWITCH_LOG=info SOCKSWITCH_STATS_FILE="$T/$name-server.stats" \
    "${RNDV[@]}" -- "$PROG" server "$T/$name.port" "$addr"
  ssw_wait_file "$T/$name.port" || { ssw_fail "$name: receiver did not start"; return; }
  local port spid=$!
  port=$(cat "$T/$name.port")
  [ "$cns" = "$SSW_NS_A" ] || ssw_ns_wait_listen "$SSW_NS_A" "$port" 10
  ssw_ns_run "$cns" switched SOCKSWITCH_LOG=info SOCKSWITCH_STATS_FILE="$T/$name-client.stats" "${RNDV[@]}" \
    SOCKSWITCH_FAULT=pin "$@" -- "$PROG" client "$addr" "$port" >"$T/$name-client.out" 2>"$T/$name-client.err"
  ssw_assert_eq "$name: sender exit status" $? 0
  local i
  for ((i = 0; i < 100; i++)); do grep -q '^RESULT server' "$T/$name-server.out" 2>/dev/null && break; sleep 0.1; done
  for ((i = 0; i < 50; i++)); do [ -s "$T/$name-server.stats" ] && break; sleep 0.1; done
  sed "s/^/# $name: /" "$T/$name-client.out" "$T/$name-server.out" "$T/$name-client.stats"
  ssw_assert_eq "$name: frames the receiver checked" "$(ssw_kv "$T/$name-server.out" frames)" "$FRAMES"
  ssw_assert_eq "$name: stale bytes" "$(ssw_kv "$T/$name-server.out" stale)" 0
  ssw_assert_eq "$name: frames sent by the rendezvous" "$(ssw_stats_sum "$T/$name-client.stats" rndv)" "$FRAMES"
  ssw_assert_eq "$name: rendezvous refused" "$(ssw_stats_sum "$T/$name-client.stats" rndv_fallback)" 0
  ssw_assert_ge "$name: buffers that came back at a freed buffer's address" "$(ssw_kv "$T/$name-client.out" reused)" "$REUSE_MIN"
  ssw_assert_eq "$name: the sender's connection was switched" "$(ssw_stats_sum "$T/$name-client.stats" switched)" 1
}

ssw_step "shm: sender and receiver on 127.0.0.1 in $SSW_NS_A"
run shm 127.0.0.1 "$SSW_NS_A"
ssw_assert_ge "shm: cache entries dropped for unmapped memory" "$(ssw_stats_sum "$T/shm-client.stats" regcache_invalidations)" 8
ssw_assert_ge "shm: cache hits (ten sends from one buffer, twice)" "$(ssw_stats_sum "$T/shm-client.stats" regcache_hits)" 18

ssw_step "fabric: the receiver in $SSW_NS_A, the sender in $SSW_NS_B"
run fab "$SSW_NS_ADDR_A" "$SSW_NS_B"
ssw_check "fab: the sender connected over fabric" grep -q "over fabric" "$T/fab-client.err"
ssw_assert_ge "fab: cache entries dropped for unmapped memory" "$(ssw_stats_sum "$T/fab-client.stats" regcache_invalidations)" 8
ssw_assert_ge "fab: cache hits (ten sends from one buffer, twice)" "$(ssw_stats_sum "$T/fab-client.stats" regcache_hits)" 18

ssw_step "fabric, the cache off (SOCKSWITCH_REGCACHE=0)"
run fab-off "$SSW_NS_ADDR_A" "$SSW_NS_B" SOCKSWITCH_REGCACHE=0
ssw_assert_eq "fab-off: cache hits" "$(ssw_stats_sum "$T/fab-off-client.stats" regcache_hits)" 0

ssw_assert_no_sanitizer_report "$T"/*.err
ssw_finish
