#!/usr/bin/env bash
# t_hostile_cma — Cross Memory Attach across a privilege drop (issue 17, case 4).
# A root master listens and forks a worker that becomes nobody and accepts
# (tests/progs/cma_forge: nginx, apache prefork and postgres do this); the
# worker forges rendezvous descriptors naming the master's pid and buffers in
# its heap.  A root client under the switch (unmodified library) must never
# read the master's memory into its stream (default settings, its
# rendezvous forced on, or off), nor write its bytes into the master's
# memory (its rendezvous on, write mode).  The kernel must refuse the worker credentials
# that name the master.  Control: a worker that stays root and offers its own
# registered buffer is read by CMA when the client's rendezvous is on (the
# attack path is the one the protection closes; it is on by default from
# 4 MiB, and the receiver accepts whatever size the sender offers), and
# refused when it is off (SOCKSWITCH_RDMA=none).
source "$(dirname "$0")/lib.sh"
[ "$(id -u)" = 0 ] || { echo "SKIP: must run as root (the master is root, its worker nobody)"; exit 77; }
id nobody >/dev/null 2>&1 || { echo "SKIP: no user nobody"; exit 77; }
ssw_enter_netns "$@"
ssw_setup_preload
ssw_tmpdir
chmod 755 "$T"
PY=$SSW_PYTHON
SSW_FAILS=0

# run NAME MODE PORT CLIENT-MODE [CLIENT-ENV…]: the forging server and a root client
run() {
  local n=$1 mode=$2 port=$3 cmode=$4; shift 4
  mkdir -p "$T/$n"
  timeout 20 "$SSW_BUILD/tests/cma_forge" "$port" "$mode" "$T/$n" >"$T/$n/server.out" 2>&1 &
  local srv=$!
  ssw_wait_file "$T/$n/port" 5
  env "$@" LD_PRELOAD="$SSW_PRELOAD" SOCKSWITCH_LOG=info timeout 15 "$PY" - "$port" "$cmode" >"$T/$n/client.out" 2>"$T/$n/client.err" <<'PYEOF'
import socket, sys
port, mode = int(sys.argv[1]), sys.argv[2]
c = socket.create_connection(("127.0.0.1", port))   # blocking: large sends may use the rendezvous
if mode == "read":
    d = b""
    while True:
        x = c.recv(65536)
        if not x:
            break
        d += x
    print("got=%d secret=%s offer=%s after=%s tail=%s" % (len(d), b"MASTER-SECRET" in d, b"WORKER-OFFER" in d, b"AFTER-DEREG" in d, d.endswith(b"TAIL")))
else:
    c.sendall(b"C" * (128 << 10)); c.shutdown(socket.SHUT_WR)
    c.recv(1)
    print("sent")
PYEOF
  wait "$srv"
  cat "$T/$n/server.out" "$T/$n/client.out" | sed "s/^/# $n: /"
}

ssw_step "forged RNDV_READ naming the master's heap, client with default settings"
run read-default forge-read 7801 read
ssw_check "the client went over shm" grep -q "over shm" "$T/read-default/client.err"
ssw_check "the client read none of the master's memory" grep -q "secret=False" "$T/read-default/client.out"
ssw_check "and refused the descriptor (no vouch from that pid)" grep -q "done_status=-1 " "$T/read-default/server.out"
ssw_check "the kernel refused credentials naming the master" grep -q "cred_spoof=EPERM" "$T/read-default/server.out"
ssw_check "the stream went on inline" grep -q "tail=True" "$T/read-default/client.out"

ssw_step "the same against a client whose rendezvous is off"
run read-off forge-read 7807 read SOCKSWITCH_RDMA=none
ssw_check "the client read none of the master's memory" grep -q "secret=False" "$T/read-off/client.out"
ssw_check "and refused the descriptor (its rendezvous is off)" grep -q "done_status=-1 " "$T/read-off/server.out"
ssw_check "the stream went on inline" grep -q "tail=True" "$T/read-off/client.out"

ssw_step "the same against a client whose rendezvous is forced on (read)"
run read-on forge-read 7802 read SOCKSWITCH_RDMA=read
ssw_check "the client read none of the master's memory" grep -q "secret=False" "$T/read-on/client.out"
ssw_check "and refused the descriptor (no vouch from that pid)" grep -q "done_status=-1 " "$T/read-on/server.out"
ssw_check "the stream went on inline" grep -q "tail=True" "$T/read-on/client.out"

ssw_step "forged SINK naming the master's buffer, client's rendezvous on (write)"
run sink-on forge-sink 7803 write SOCKSWITCH_RDMA=write
ssw_check "the client asked for sinks and refused the forged one" grep -q "done_status=-1 " "$T/sink-on/server.out"
ssw_check "the master's memory is intact" grep -q "victim=intact" "$T/sink-on/server.out"
ssw_check "the bytes went inline instead" grep -q "inline=131072" "$T/sink-on/server.out"

ssw_step "control: a root worker offers its own registered buffer"
run honest-on honest-read 7804 read SOCKSWITCH_RDMA=read
ssw_check "a client whose rendezvous is on reads it by CMA" grep -q "offer=True" "$T/honest-on/client.out"
ssw_check "and says done" grep -q "done_status=0 " "$T/honest-on/server.out"
run honest-default honest-read 7808 read
ssw_check "a client with default settings (rendezvous on) reads it too" grep -q "offer=True" "$T/honest-default/client.out"
run honest-off honest-read 7805 read SOCKSWITCH_RDMA=none
ssw_check "a client whose rendezvous is off (SOCKSWITCH_RDMA=none) refuses it" grep -q "done_status=-1 " "$T/honest-off/server.out"
ssw_check "and reads none of it" grep -q "offer=False" "$T/honest-off/client.out"

ssw_step "revocation: the worker's descriptor offered again after its deregistration"
run stale-on stale-read 7806 read SOCKSWITCH_RDMA=read
ssw_check "the first offer was read by CMA" grep -q "first_status=0" "$T/stale-on/server.out"
ssw_check "the old descriptor was refused" grep -q "done_status=-1 " "$T/stale-on/server.out"
ssw_check "and what the buffer held after deregistration never reached the client" grep -q "after=False" "$T/stale-on/client.out"
ssw_check "the stream went on inline" grep -q "tail=True" "$T/stale-on/client.out"

ssw_finish
