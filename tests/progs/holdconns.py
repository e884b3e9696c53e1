#!/usr/bin/env python3
"""holdconns.py - many TCP connections held open, for tests that count them
(sockswitch stat past its first table of 4,096 slots).

  holdconns.py server --port-file F --stop-file S
      listens on 127.0.0.1, accepts and keeps every connection until S exists
  holdconns.py client --port-file F --stop-file S -n N
      opens N connections to the server, writes S.ready, keeps them until S
Both give up after 60 s.  Nothing in here knows about sockswitch.
"""
import argparse
import os
import resource
import socket
import time


def main():
    p = argparse.ArgumentParser()
    p.add_argument("mode", choices=["server", "client"])
    p.add_argument("--port-file", required=True)
    p.add_argument("--stop-file", required=True)
    p.add_argument("-n", type=int, default=1)
    a = p.parse_args()
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    keep = []
    t0 = time.time()
    if a.mode == "server":
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        s.listen(4096)
        s.settimeout(0.2)
        with open(a.port_file + ".tmp", "w") as f:
            f.write("%d\n" % s.getsockname()[1])
        os.rename(a.port_file + ".tmp", a.port_file)
        while not os.path.exists(a.stop_file) and time.time() - t0 < 60:
            try:
                keep.append(s.accept()[0])
            except socket.timeout:
                pass
        return
    port = int(open(a.port_file).read())
    for _ in range(a.n):
        keep.append(socket.create_connection(("127.0.0.1", port)))
    with open(a.stop_file + ".ready", "w") as f:
        f.write("%d\n" % len(keep))
    while not os.path.exists(a.stop_file) and time.time() - t0 < 60:
        time.sleep(0.05)


if __name__ == "__main__":
    main()
