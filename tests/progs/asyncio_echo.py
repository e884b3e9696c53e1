#!/usr/bin/env python3
"""asyncio_echo.py - an asyncio TCP echo server and client for the integration
tests (t_asyncio.sh).  Nothing in here knows about sockswitch: it is an
ordinary asyncio program (default event loop: selectors + epoll) that the test
runs under the switch and on kernel TCP.

Two APIs, chosen with --api:
  streams   asyncio.start_server / asyncio.open_connection (StreamReader/Writer,
            drain, write_eof, wait_closed)
  sock      the low-level loop.sock_accept / sock_connect / sock_recv /
            sock_recv_into / sock_sendall on non-blocking sockets

Wire format each way: u32 length (network order) | payload.  The client runs
--conns connections concurrently; each sends its frames (--sizes, e.g.
1x50,4096x20,1048576x2, payload from a per-connection seed), reads every echo
and compares it byte for byte, then half-closes (write_eof / shutdown(SHUT_WR))
and expects EOF from the server.  The server echoes frames until EOF, counts
bytes, closes; after --conns connections it stops listening and exits 0.

  asyncio_echo.py server --api streams|sock --port-file F --conns N
  asyncio_echo.py client --api streams|sock --port P --conns N --sizes SPEC
  asyncio_echo.py selfloop --sizes SPEC

selfloop: one event loop holds both ends of a connection whose client has
SO_SNDBUF 1024; sock_sendall of every frame races a task that sock_recv's
them on the accepted end (the client is writable again only after its own
loop drained the peer).  Prints "SELFLOOP ok bytes=B".

The client prints "RESULT ok conns=N frames=F bytes=B seconds=S" and exits 0;
the server "SERVER ok conns=N bytes=B".  Any error: "ERROR ..." on stderr,
exit 1.  A whole run is bounded by --timeout seconds.
"""
import argparse
import asyncio
import hashlib
import socket
import struct
import sys
import time

HDR = struct.Struct("!I")


def payload(seed, i, n):
    """Deterministic bytes for frame i of connection `seed`."""
    block = hashlib.sha256(b"%d:%d" % (seed, i)).digest()
    return (block * (n // len(block) + 1))[:n]


def parse_sizes(spec):
    out = []
    for item in spec.split(","):
        size, count = item.split("x")
        out += [int(size)] * int(count)
    return out


# ---------------------------------------------------------------- streams ---

async def streams_server(args):
    done = asyncio.Event()
    state = {"conns": 0, "bytes": 0}

    async def handle(reader, writer):
        try:
            while True:
                try:
                    hdr = await reader.readexactly(HDR.size)
                except asyncio.IncompleteReadError as e:
                    if e.partial:
                        raise
                    break  # clean EOF between frames
                (n,) = HDR.unpack(hdr)
                data = await reader.readexactly(n)
                writer.write(hdr + data)
                await writer.drain()
                state["bytes"] += n
            writer.close()
            await writer.wait_closed()
        finally:
            state["conns"] += 1
            if state["conns"] >= args.conns:
                done.set()

    server = await asyncio.start_server(handle, args.host, 0)
    port = server.sockets[0].getsockname()[1]
    with open(args.port_file + ".tmp", "w") as f:
        f.write("%d\n" % port)
    import os
    os.rename(args.port_file + ".tmp", args.port_file)
    await done.wait()
    server.close()
    await server.wait_closed()
    return state


async def streams_client_one(args, seed, sizes):
    reader, writer = await asyncio.open_connection(args.host, args.port)
    # a writer and a reader task: the echo of a large frame must be read while
    # the frame is still being sent (no program may count on the socket
    # buffers holding a whole frame)
    async def send_all():
        for i, n in enumerate(sizes):
            writer.write(HDR.pack(n) + payload(seed, i, n))
            await writer.drain()
        writer.write_eof()

    async def check_all():
        for i, n in enumerate(sizes):
            await streams_check(reader, payload(seed, i, n), seed)

    await asyncio.gather(send_all(), check_all())
    rest = await reader.read()
    if rest:
        raise RuntimeError("conn %d: %d stray bytes before EOF" % (seed, len(rest)))
    writer.close()
    await writer.wait_closed()
    return sum(sizes)


async def streams_check(reader, want, seed):
    (n,) = HDR.unpack(await reader.readexactly(HDR.size))
    if n != len(want):
        raise RuntimeError("conn %d: echo frame length %d, sent %d" % (seed, n, len(want)))
    got = await reader.readexactly(n)
    if got != want:
        raise RuntimeError("conn %d: echo of a %d byte frame differs" % (seed, n))


# ------------------------------------------------------------- sock_* API ---

async def sock_recv_exact(loop, s, n):
    buf = bytearray(n)
    view = memoryview(buf)
    got = 0
    while got < n:
        # both receive calls of the low-level API
        if got % 2:
            k = await loop.sock_recv_into(s, view[got:])
        else:
            chunk = await loop.sock_recv(s, min(n - got, 65536))
            k = len(chunk)
            view[got:got + k] = chunk
        if k == 0:
            return bytes(buf[:got])
        got += k
    return bytes(buf)


async def sock_server(args):
    loop = asyncio.get_running_loop()
    lsock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    lsock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    lsock.bind((args.host, 0))
    lsock.listen(128)
    lsock.setblocking(False)
    with open(args.port_file + ".tmp", "w") as f:
        f.write("%d\n" % lsock.getsockname()[1])
    import os
    os.rename(args.port_file + ".tmp", args.port_file)
    state = {"conns": 0, "bytes": 0}

    async def handle(s):
        try:
            while True:
                hdr = await sock_recv_exact(loop, s, HDR.size)
                if not hdr:
                    break
                if len(hdr) != HDR.size:
                    raise RuntimeError("EOF inside a frame header")
                (n,) = HDR.unpack(hdr)
                data = await sock_recv_exact(loop, s, n)
                if len(data) != n:
                    raise RuntimeError("EOF inside a frame")
                await loop.sock_sendall(s, hdr + data)
                state["bytes"] += n
        finally:
            s.close()

    tasks = []
    for _ in range(args.conns):
        s, _addr = await loop.sock_accept(lsock)
        s.setblocking(False)
        tasks.append(asyncio.ensure_future(handle(s)))
    lsock.close()
    await asyncio.gather(*tasks)
    state["conns"] = len(tasks)
    return state


async def sock_client_one(args, seed, sizes):
    loop = asyncio.get_running_loop()
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setblocking(False)
    await loop.sock_connect(s, (args.host, args.port))
    total = 0
    try:
        for i, n in enumerate(sizes):
            p = payload(seed, i, n)
            # sender and receiver concurrently: a large frame does not fit in
            # the socket buffers, so the echo must be read while sending
            send = asyncio.ensure_future(loop.sock_sendall(s, HDR.pack(n) + p))
            hdr = await sock_recv_exact(loop, s, HDR.size)
            await send
            if len(hdr) != HDR.size or HDR.unpack(hdr)[0] != n:
                raise RuntimeError("conn %d: bad echo header" % seed)
            got = await sock_recv_exact(loop, s, n)
            if got != p:
                raise RuntimeError("conn %d: echo of a %d byte frame differs" % (seed, n))
            total += n
        s.shutdown(socket.SHUT_WR)
        rest = await loop.sock_recv(s, 1)
        if rest:
            raise RuntimeError("conn %d: stray bytes before EOF" % seed)
    finally:
        s.close()
    return total


# ------------------------------------------------------------------- main ---

async def client(args):
    sizes = parse_sizes(args.sizes)
    one = streams_client_one if args.api == "streams" else sock_client_one
    t0 = time.monotonic()
    totals = await asyncio.gather(*(one(args, seed, sizes) for seed in range(args.conns)))
    dt = time.monotonic() - t0
    print("RESULT ok conns=%d frames=%d bytes=%d seconds=%.3f"
          % (args.conns, len(sizes) * args.conns, sum(totals), dt), flush=True)


async def selfloop(args):
    loop = asyncio.get_running_loop()
    lsn = socket.socket()
    lsn.bind((args.host, 0))
    lsn.listen(1)
    lsn.setblocking(False)
    cli = socket.socket()
    cli.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1024)
    cli.setblocking(False)
    await loop.sock_connect(cli, lsn.getsockname())
    srv, _ = await loop.sock_accept(lsn)
    data = b"".join(payload(7, i, n) for i, n in enumerate(parse_sizes(args.sizes)))

    async def reader():
        got = bytearray()
        while len(got) < len(data):
            chunk = await loop.sock_recv(srv, 65536)
            if not chunk:
                break
            got += chunk
        return bytes(got)

    rd = asyncio.ensure_future(reader())
    await loop.sock_sendall(cli, data)
    got = await rd
    if got != data:
        raise RuntimeError("selfloop: %d of %d bytes, content %s"
                           % (len(got), len(data), "differs" if len(got) == len(data) else "short"))
    for s in (cli, srv, lsn):
        s.close()
    print("SELFLOOP ok bytes=%d" % len(data), flush=True)


async def server(args):
    fn = streams_server if args.api == "streams" else sock_server
    st = await fn(args)
    print("SERVER ok conns=%d bytes=%d" % (st["conns"], st["bytes"]), flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("role", choices=["server", "client", "selfloop"])
    ap.add_argument("--api", choices=["streams", "sock"], default="streams")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int)
    ap.add_argument("--port-file")
    ap.add_argument("--conns", type=int, default=8)
    ap.add_argument("--sizes", default="1x50,4096x20,1048576x2")
    ap.add_argument("--timeout", type=float, default=30)
    args = ap.parse_args()
    coro = {"server": server, "client": client, "selfloop": selfloop}[args.role](args)
    try:
        asyncio.run(asyncio.wait_for(coro, args.timeout))
    except Exception as e:  # noqa: BLE001 - any failure is a test failure
        print("ERROR %s: %r" % (args.role, e), file=sys.stderr, flush=True)
        sys.exit(1)


if __name__ == "__main__":
    main()
