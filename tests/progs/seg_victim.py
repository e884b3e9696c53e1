#!/usr/bin/env python3
"""seg_victim.py — the root process at the other end of hostile_seg (t_hostile_seg.sh): it touches the connection after the attack and must live to say so.

  seg_victim.py server --port-file F --dir D   accept one connection, write D/accepted
  seg_victim.py client --port P --dir D        connect to 127.0.0.1:P

Then both wait for D/go (the attack was made), send a few bytes (the ring is
touched: a truncated segment would kill the process with SIGBUS here), write
D/sent and read until the peer goes.  Prints "VICTIM outcome=eof|reset|data|
timeout|error:NAME" and exits 0: an exit by signal is what the test looks for.
"""
import argparse
import errno
import os
import socket
import sys
import time

WAIT_S = 10


def wait_file(path):
    t0 = time.monotonic()
    while time.monotonic() - t0 < WAIT_S:
        if os.path.exists(path):
            return True
        time.sleep(0.01)
    return False


def touch(path):
    with open(path, "w"):
        pass


def touch_the_ring(conn, d):
    ok = wait_file(os.path.join(d, "go"))
    conn.settimeout(WAIT_S)
    outcome = "timeout"
    try:
        conn.sendall(b"hello\n")
        touch(os.path.join(d, "sent"))
        got = b""
        while True:
            b = conn.recv(4096)
            if not b:
                break
            got += b
        outcome = "data" if got else "eof"
    except socket.timeout:
        outcome = "timeout"
    except OSError as e:
        outcome = "reset" if e.errno == errno.ECONNRESET else "error:" + errno.errorcode.get(e.errno, str(e.errno))
    touch(os.path.join(d, "sent"))
    print("VICTIM outcome=%s go=%d" % (outcome, ok), flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("role", choices=["server", "client"])
    ap.add_argument("--port-file")
    ap.add_argument("--port", type=int)
    ap.add_argument("--dir", required=True)
    a = ap.parse_args()
    if a.role == "server":
        ls = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        ls.bind(("127.0.0.1", 0))
        ls.listen(16)
        ls.settimeout(3 * WAIT_S)
        with open(a.port_file + ".tmp", "w") as f:
            f.write("%d\n" % ls.getsockname()[1])
        os.rename(a.port_file + ".tmp", a.port_file)
        conn, peer = ls.accept()
        touch(os.path.join(a.dir, "accepted"))
        print("VICTIM accepted peer=%s:%d" % peer, flush=True)
    else:
        conn = socket.create_connection(("127.0.0.1", a.port), timeout=WAIT_S)
        print("VICTIM connected", flush=True)
    touch_the_ring(conn, a.dir)
    conn.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
