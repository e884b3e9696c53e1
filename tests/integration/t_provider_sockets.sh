#!/usr/bin/env bash
# t_provider_sockets — a provider's own library (libfabric's tcp provider)
# makes its transport's sockets through the same interposed calls as the
# application; the switch must stay out of them.  Were the fabric listener's
# own listen() switched, it would open a fabric listener of its own (port
# P + 10000, then P + 20000 … until the port space ends), each a provider
# call from inside the provider.  Here: one switched listener on P over
# fabric gives exactly two kernel listening sockets (P and the provider's
# P + 10000), and a switched client's echo through it comes back intact.
source "$(dirname "$0")/lib.sh"
ssw_need_fabric
ssw_enter_netns "$@"
ssw_setup_preload
ssw_tmpdir

# both ends of a veth pair in this test's private namespace: an address the
# fabric route takes (the loopback's is not)
V=vpe$$
ip link add "${V}a" type veth peer name "${V}b" &&
  ip addr add 10.77.99.1/24 dev "${V}a" && ip addr add 10.77.99.2/24 dev "${V}b" &&
  ip link set "${V}a" up && ip link set "${V}b" up ||
  { echo "FAIL: cannot make a veth pair in the test namespace"; exit 1; }
export SOCKSWITCH_ROUTES="route 10.77.0.0/16 fabric provider=tcp"

cat >"$T/ps.py" <<'EOF'
import os, socket, sys
role = sys.argv[1]
if role == "server":            # PORTFILE: listen, echo one connection (no fork: a fork closes a fabric listener)
    l = socket.socket(); l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    l.bind(("10.77.99.1", 0)); l.listen(4)
    open(sys.argv[2] + ".tmp", "w").write("%d\n" % l.getsockname()[1]); os.rename(sys.argv[2] + ".tmp", sys.argv[2])
    l.settimeout(30)
    c, _ = l.accept()
    c.settimeout(30)
    while True:
        d = c.recv(65536)
        if not d: break
        c.sendall(d)
    c.close()
else:                           # PORT: send 1 MiB, read it back (the server closes last)
    import threading
    data = os.urandom(1 << 20)
    s = socket.create_connection(("10.77.99.1", int(sys.argv[2])), timeout=30)
    t = threading.Thread(target=s.sendall, args=(data,)); t.start()
    got = bytearray()
    while len(got) < len(data):
        d = s.recv(65536)
        if not d: break
        got += d
    t.join(); s.close()
    print("ECHO %s" % ("intact" if got == data else "differs (%d of %d bytes)" % (len(got), len(data))), flush=True)
EOF

ssw_bg server switched SOCKSWITCH_LOG=info -- "$SSW_PYTHON" "$T/ps.py" server "$T/port"
ssw_wait_file "$T/port" || ssw_fail "server did not start"
port=$(cat "$T/port" 2>/dev/null)
# the kernel's listening sockets in this namespace, as offsets from P
listeners=$(ss -Hltn | awk -v p="$port" '{n = split($4, a, ":"); d = a[n] - p; print d ? "P+" d : "P"}' | sort | tr '\n' ' ')
ssw_run switched -- "$SSW_PYTHON" "$T/ps.py" client "$port" >"$T/client.out" 2>"$T/client.err"
ssw_assert_eq "client exit status" "$?" 0
wait "$SSW_BG_PID"
ssw_assert_eq "server exit status" "$?" 0
ssw_assert_eq "the application's listener is switched over fabric" \
  "$(grep -c "listening on 10.77.99.1:$port (kernel TCP + fabric)" "$T/server.err")" 1
ssw_assert_eq "the connection is accepted over fabric" "$(grep -c 'accepted .* over fabric' "$T/server.err")" 1
ssw_assert_eq "kernel listeners for one switched listener over fabric" \
  "${listeners% }" "P P+10000"
ssw_assert_eq "echo over the switch" "$(sed -n 's/^ECHO //p' "$T/client.out")" "intact"
ssw_assert_no_sanitizer_report "$T"/*.err
ssw_finish
