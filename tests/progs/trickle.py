#!/usr/bin/env python3
"""trickle.py - a plain python TCP pair that keeps one connection busy at a low
rate, so that a test can watch it live (sockswitch stat) while it runs.

  trickle.py server --host 127.0.0.1 --port-file F
      accepts one connection, reads until EOF, prints "SERVER ok bytes=N"
  trickle.py client --host 127.0.0.1 --port P --stop-file F [--chunk 4096] [--max-s 25]
      sends CHUNK bytes every 10 ms until STOP-FILE exists (or MAX-S passed),
      prints "RESULT ok bytes=N"; with --half-close-file H, once H exists it
      stops sending and shuts down its sending side, keeping the socket open
Nothing in here knows about sockswitch.
"""
import argparse
import os
import socket
import sys
import time


def server(a):
    s = socket.socket(socket.AF_INET6 if ":" in a.host else socket.AF_INET)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((a.host, 0))
    s.listen(4)
    tmp = a.port_file + ".tmp"
    with open(tmp, "w") as f:
        f.write("%d\n" % s.getsockname()[1])
    os.rename(tmp, a.port_file)
    c, _ = s.accept()
    total = 0
    while True:
        d = c.recv(65536)
        if not d:
            break
        total += len(d)
    c.close()
    print("SERVER ok bytes=%d" % total, flush=True)


def client(a):
    c = socket.create_connection((a.host, a.port))
    chunk = b"t" * a.chunk
    total = 0
    end = time.time() + a.max_s
    half = False
    while not os.path.exists(a.stop_file) and time.time() < end:
        if a.half_close_file and os.path.exists(a.half_close_file):
            if not half:
                c.shutdown(socket.SHUT_WR)  # half-closed: still open for reading
                half = True
        else:
            c.sendall(chunk)
            total += len(chunk)
        time.sleep(0.01)
    c.close()
    print("RESULT ok bytes=%d" % total, flush=True)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("role", choices=["server", "client"])
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int)
    p.add_argument("--port-file")
    p.add_argument("--stop-file")
    p.add_argument("--half-close-file", help="when it exists: shutdown(SHUT_WR), keep the socket")
    p.add_argument("--chunk", type=int, default=4096)
    p.add_argument("--max-s", type=float, default=25.0)
    a = p.parse_args()
    server(a) if a.role == "server" else client(a)


if __name__ == "__main__":
    sys.exit(main())
