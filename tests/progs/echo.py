#!/usr/bin/env python3
"""echo.py - a plain python TCP echo pair used by the integration tests.

Nothing in here knows about sockswitch: it is an ordinary socket program that
the tests run under the switch (LD_PRELOAD) and compare with kernel TCP.

Wire format, both directions:  u64 length (network order) | payload | sha256(payload)
A length of 2**64-1 is the "bye" frame (no payload, no digest). The server
verifies each digest, echoes the frame back unchanged, and the client checks
that the echo equals what it sent.

  echo.py server --host 127.0.0.1 --port-file F [--conns N]
  echo.py client --host 127.0.0.1 --port P --sizes 1x100,64x100,102400x10,5242880x2

The client measures Tcp OutSegs (/proc/net/snmp, i.e. of its network namespace)
from just after connect() returned to just before it says bye, so the tests can
check that the payload phase created no kernel TCP segments. It prints one line
  RESULT ok frames=N bytes=B outsegs_delta=D
and exits 0; on any error it prints "ERROR ..." to stderr and exits 1.
"""
import argparse
import hashlib
import os
import socket
import struct
import sys
import time

BYE = (1 << 64) - 1
HDR = struct.Struct("!Q")


def outsegs():
    with open("/proc/net/snmp") as f:
        rows = [line.split() for line in f if line.startswith("Tcp:")]
    return int(rows[1][rows[0].index("OutSegs")])


def recv_exact(sock, n):
    buf = bytearray(n)
    view = memoryview(buf)
    got = 0
    while got < n:
        k = sock.recv_into(view[got:], n - got)
        if k == 0:
            raise ConnectionError("unexpected EOF after %d of %d bytes" % (got, n))
        got += k
    return bytes(buf)


def family_of(host):
    return socket.AF_INET6 if ":" in host else socket.AF_INET


def serve_one(conn):
    frames = nbytes = 0
    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    while True:
        (n,) = HDR.unpack(recv_exact(conn, HDR.size))
        if n == BYE:
            conn.sendall(HDR.pack(BYE))
            break
        payload = recv_exact(conn, n)
        digest = recv_exact(conn, 32)
        if hashlib.sha256(payload).digest() != digest:
            raise ValueError("server: checksum mismatch in frame %d (%d bytes)" % (frames, n))
        conn.sendall(HDR.pack(n) + payload + digest)
        frames += 1
        nbytes += n
    # wait for the client's close so neither side resets the other
    conn.settimeout(30)
    while conn.recv(4096):
        pass
    return frames, nbytes


def server(args):
    fam = family_of(args.host)
    ls = socket.socket(fam, socket.SOCK_STREAM)
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind((args.host, args.port))
    ls.listen(16)
    port = ls.getsockname()[1]
    if args.port_file:
        tmp = args.port_file + ".tmp"
        with open(tmp, "w") as f:
            f.write("%d\n" % port)
        os.rename(tmp, args.port_file)
    for i in range(args.conns):
        conn, peer = ls.accept()
        with conn:
            frames, nbytes = serve_one(conn)
        print("SERVER ok conn=%d frames=%d bytes=%d" % (i, frames, nbytes), flush=True)
    ls.close()
    return 0


def parse_sizes(spec):
    out = []
    for item in spec.split(","):
        size, _, count = item.partition("x")
        out.append((int(size), int(count or 1)))
    return out


def client(args):
    fam = family_of(args.host)
    s = socket.socket(fam, socket.SOCK_STREAM)
    s.settimeout(args.timeout)
    s.connect((args.host, args.port))
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    seg0 = outsegs()
    frames = nbytes = 0
    t0 = time.perf_counter()
    for size, count in parse_sizes(args.sizes):
        payload = os.urandom(size)
        digest = hashlib.sha256(payload).digest()
        frame = HDR.pack(size) + payload + digest
        for _ in range(count):
            s.sendall(frame)
            (n,) = HDR.unpack(recv_exact(s, HDR.size))
            if n != size:
                raise ValueError("client: echo length %d != %d" % (n, size))
            echo = recv_exact(s, n)
            edig = recv_exact(s, 32)
            if echo != payload or edig != digest or hashlib.sha256(echo).digest() != digest:
                raise ValueError("client: echo of a %d-byte frame differs" % size)
            frames += 1
            nbytes += size
    seg1 = outsegs()
    elapsed = time.perf_counter() - t0
    s.sendall(HDR.pack(BYE))
    (n,) = HDR.unpack(recv_exact(s, HDR.size))
    if n != BYE:
        raise ValueError("client: bad bye reply")
    s.close()
    print("RESULT ok frames=%d bytes=%d outsegs_delta=%d seconds=%.3f"
          % (frames, nbytes, seg1 - seg0, elapsed), flush=True)
    return 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=["server", "client"])
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--port-file")
    ap.add_argument("--conns", type=int, default=1)
    ap.add_argument("--sizes", default="1x100,64x100,102400x10,5242880x2")
    ap.add_argument("--timeout", type=float, default=60)
    args = ap.parse_args()
    try:
        return server(args) if args.mode == "server" else client(args)
    except Exception as e:  # noqa: BLE001 - report any failure as a test failure
        print("ERROR %s: %s: %s" % (args.mode, type(e).__name__, e), file=sys.stderr, flush=True)
        return 1


if __name__ == "__main__":
    sys.exit(main())
