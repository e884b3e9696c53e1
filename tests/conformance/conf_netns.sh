#!/usr/bin/env bash
# conf_netns.sh — conformance.fabric-netns: the fabric conformance suite across two network
# namespaces joined by a veth pair (listeners in A; every connect, and the killed peers, from B).
source "$SSW_SRC/tests/integration/lib.sh"
source "$SSW_SRC/tests/integration/netns.sh"
ssw_tmpdir
[ "$(id -u)" = 0 ] || { echo "FAIL: needs root (ip netns, veth): the cross-host suite cannot run here"; exit 1; }
ssw_ns_pair
bin=$SSW_BUILD/tests/conformance_fabric
[ -x "$bin" ] || { echo "FAIL: $bin not built"; exit 1; }
out=$T/conformance.out
ip netns exec "$SSW_NS_A" env CONF_NETNS_B="$SSW_NS_B" CONF_ADDR_A="$SSW_NS_ADDR_A" CONF_ADDR_B="$SSW_NS_ADDR_B" \
  timeout 100 "$bin" >"$out" 2>&1
rc=$?
cat "$out"
# the acceptor saw the connector at B's address: the cases really crossed the veth
grep -q "^peer_addr: $SSW_NS_ADDR_B\$" "$out" || { echo "FAIL: no connection came from $SSW_NS_ADDR_B"; rc=1; }
[ $rc = 0 ] && echo "ok - conformance.fabric across $SSW_NS_A ($SSW_NS_ADDR_A) and $SSW_NS_B ($SSW_NS_ADDR_B)"
exit $rc
