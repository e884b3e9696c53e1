#!/usr/bin/env python3
"""pingpong.py - the demo's program pair: an ordinary python TCP server and client.

It knows nothing about sockswitch; scripts/demo.sh runs it once on kernel TCP
and once under `sockswitch run`.

  pingpong.py server --port-file F           (127.0.0.1, port chosen by the kernel)
  pingpong.py client --port P [--rounds 20000] [--size 64] [--bulk-mib 256]

The client does ROUNDS blocking round trips of SIZE bytes (the server echoes
each message), then streams BULK MiB to the server in 1 MiB writes and waits for
its byte count. It prints one JSON line: round-trip latency (mean, p50, p99 in
microseconds), round trips per second, bulk throughput in MiB/s, and the Tcp
OutSegs of its network namespace spent in each phase.
"""
import argparse
import json
import os
import socket
import struct
import sys
import time

CHUNK = 1 << 20


def outsegs():
    try:
        with open("/proc/net/snmp") as f:
            rows = [line.split() for line in f if line.startswith("Tcp:")]
        return int(rows[1][rows[0].index("OutSegs")])
    except (OSError, ValueError, IndexError):
        return -1


def recv_exact_into(sock, view):
    got, n = 0, len(view)
    while got < n:
        k = sock.recv_into(view[got:])
        if k == 0:
            raise ConnectionError("peer closed after %d of %d bytes" % (got, n))
        got += k


def server(args):
    ls = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind(("127.0.0.1", args.port))
    ls.listen(4)
    tmp = args.port_file + ".tmp"
    with open(tmp, "w") as f:
        f.write("%d\n" % ls.getsockname()[1])
    os.rename(tmp, args.port_file)
    conn, _ = ls.accept()
    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    hdr = bytearray(13)
    hv = memoryview(hdr)
    big = bytearray(CHUNK)
    bv = memoryview(big)
    while True:
        recv_exact_into(conn, hv[:1])
        cmd = hdr[0:1]
        if cmd == b"P":                      # ping-pong: u32 size, u32 rounds
            recv_exact_into(conn, hv[1:9])
            size, rounds = struct.unpack("!II", hdr[1:9])
            msg = memoryview(bytearray(size))
            for _ in range(rounds):
                recv_exact_into(conn, msg)
                conn.sendall(msg)
        elif cmd == b"B":                    # bulk: u64 total
            recv_exact_into(conn, hv[1:9])
            (total,) = struct.unpack("!Q", hdr[1:9])
            left = total
            while left:
                k = conn.recv_into(bv[:min(left, CHUNK)])
                if k == 0:
                    raise ConnectionError("bulk: peer closed with %d bytes left" % left)
                left -= k
            conn.sendall(struct.pack("!Q", total))
        elif cmd == b"Q":
            break
        else:
            raise ValueError("unknown command %r" % cmd)
    conn.close()
    ls.close()
    return 0


def pct(sorted_vals, p):
    return sorted_vals[min(len(sorted_vals) - 1, int(len(sorted_vals) * p))]


def client(args):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.connect(("127.0.0.1", args.port))
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    res = {"rounds": args.rounds, "size": args.size, "bulk_mib": args.bulk_mib}

    # ping-pong (with a short warm-up that is not measured)
    msg = memoryview(bytearray(os.urandom(args.size)))
    back = memoryview(bytearray(args.size))
    warm = min(1000, args.rounds)
    s.sendall(b"P" + struct.pack("!II", args.size, warm + args.rounds))
    for _ in range(warm):
        s.sendall(msg)
        recv_exact_into(s, back)
    lat = [0] * args.rounds
    clock = time.perf_counter_ns
    seg0 = outsegs()
    t0 = clock()
    for i in range(args.rounds):
        a = clock()
        s.sendall(msg)
        recv_exact_into(s, back)
        lat[i] = clock() - a
    t1 = clock()
    res["pingpong_outsegs"] = outsegs() - seg0 if seg0 >= 0 else None
    if bytes(back) != bytes(msg):
        raise ValueError("ping-pong: echo differs")
    lat.sort()
    res["rtt_mean_us"] = (t1 - t0) / args.rounds / 1000.0
    res["rtt_p50_us"] = pct(lat, 0.50) / 1000.0
    res["rtt_p99_us"] = pct(lat, 0.99) / 1000.0
    res["round_trips_per_s"] = args.rounds / ((t1 - t0) / 1e9)

    # bulk
    total = args.bulk_mib * CHUNK
    buf = memoryview(bytearray(os.urandom(CHUNK)))
    seg0 = outsegs()
    t0 = clock()
    s.sendall(b"B" + struct.pack("!Q", total))
    for _ in range(args.bulk_mib):
        s.sendall(buf)
    ack = bytearray(8)
    recv_exact_into(s, memoryview(ack))
    t1 = clock()
    res["bulk_outsegs"] = outsegs() - seg0 if seg0 >= 0 else None
    if struct.unpack("!Q", ack)[0] != total:
        raise ValueError("bulk: server counted a different number of bytes")
    res["bulk_mib_per_s"] = args.bulk_mib / ((t1 - t0) / 1e9)

    s.sendall(b"Q")
    s.close()
    print(json.dumps(res), flush=True)
    return 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=["server", "client"])
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--port-file", default="pingpong.port")
    ap.add_argument("--rounds", type=int, default=20000)
    ap.add_argument("--size", type=int, default=64)
    ap.add_argument("--bulk-mib", type=int, default=256)
    args = ap.parse_args()
    if args.rounds < 1 or args.size < 1 or args.bulk_mib < 0:
        ap.error("rounds and size must be >= 1, bulk-mib >= 0")
    try:
        return server(args) if args.mode == "server" else client(args)
    except Exception as e:  # noqa: BLE001
        print("ERROR %s: %s: %s" % (args.mode, type(e).__name__, e), file=sys.stderr, flush=True)
        return 1


if __name__ == "__main__":
    sys.exit(main())
