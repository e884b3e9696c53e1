# upper_server.py — one connection, each line answered upper-cased, in an
# epoll loop (t_fabric_swap, t_hostile_move: the server whose peer's
# processes take turns on the connection).
# usage: upper_server.py HOST PORTFILE   (binds HOST, port of the kernel's
# choice, written to PORTFILE; prints "RESULT server_lines=N" at the end)
import os, selectors, socket, sys
host, portfile = sys.argv[1], sys.argv[2]
ls = socket.socket(); ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
ls.bind((host, 0)); ls.listen(4)
open(portfile + ".tmp", "w").write("%d\n" % ls.getsockname()[1])
os.rename(portfile + ".tmp", portfile)
c, _ = ls.accept(); ls.close()
sel = selectors.DefaultSelector(); sel.register(c, selectors.EVENT_READ)
buf = b""; lines = 0
while True:
    sel.select(30)
    d = c.recv(65536)
    if not d: break
    buf += d
    while b"\n" in buf:
        l, buf = buf.split(b"\n", 1)
        lines += 1
        c.sendall(l.upper() + b"\n")
print("RESULT server_lines=%d" % lines, flush=True)
