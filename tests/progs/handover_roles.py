"""handover_roles.py — what the two ends of a connection handed over to
another image or process do in the hand-over tests (t_exec_handover,
t_scm_handover, t_fabric_exec).  Each test copies this file beside its own
scripts, which import it; the test keeps its set-up and its checks.

The end that takes the connection over (the exec'd image, the worker):
    serve(s, what)      stream modes: echo upper-cased to EOF, then SHUT_WR,
                        returns the bytes read; "abort": read 5 bytes, close
                        with SO_LINGER {1, 0}; "urg": read 3 bytes and the
                        urgent byte, answer "got:<3>/<byte>".
The client:
    send_stream(c, ...) the stream: part first, a pause (the hand-over
                        happens meanwhile), the rest; what came back.
    read_abort(c)       "ECONNRESET", or what the read got instead.
    send_urg(c, ...)    "abc", then "!" out of band; what came back.
"""
import select
import socket
import struct
import threading
import time


def recv_exact(s, n):
    d = b""
    while len(d) < n:
        x = s.recv(n - len(d))
        if not x:
            break
        d += x
    return d


def recv_all(c):
    got = bytearray()
    while True:
        d = c.recv(1 << 16)
        if not d:
            return bytes(got)
        got += d


def echo_upper(s):
    n = 0
    while True:
        d = s.recv(1 << 16)
        if not d:
            break
        n += len(d)
        s.sendall(d.upper())
    s.shutdown(socket.SHUT_WR)
    return n


def serve(s, what):
    if what == "abort":
        recv_exact(s, 5)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        s.close()
        return 0
    if what == "urg":
        d = recv_exact(s, 3)
        select.select([], [], [s], 10)
        o = s.recv(1, socket.MSG_OOB)
        s.sendall(b"got:" + d + b"/" + o)
        s.shutdown(socket.SHUT_WR)
        while s.recv(100):  # to the client's end (past the urgent byte, as TCP)
            pass
        s.close()
        return 0
    return echo_upper(s)


def send_stream(c, first, rest, pause, reader):
    """Sends first, waits pause seconds (the hand-over happens meanwhile),
    sends rest and SHUT_WR; returns (what came back, MiB/s from the
    rest's start).  reader: a thread in recv all along (a client awaiting
    its answer: in a call on the connection); else the reading starts
    after the pause (in no call meanwhile)."""
    got = []
    r = None
    if reader:
        r = threading.Thread(target=lambda: got.append(recv_all(c)))
        r.start()
    c.sendall(first)
    time.sleep(pause)
    t0 = time.time()
    t = threading.Thread(target=lambda: (c.sendall(rest), c.shutdown(socket.SHUT_WR)))
    t.start()
    if r:
        r.join()
    else:
        got.append(recv_all(c))
    t.join()
    return got[0], len(got[0]) / (time.time() - t0) / 2**20


def read_abort(c):
    c.sendall(b"12345")
    try:
        d = c.recv(10)
        return "read:%r" % d
    except ConnectionResetError:
        return "ECONNRESET"


def send_urg(c, reader):
    """After a pause (the hand-over happens meanwhile): "abc", then "!" out
    of band; returns what came back.  reader: as for send_stream."""
    got = []
    r = None
    if reader:
        r = threading.Thread(target=lambda: got.append(recv_all(c)))
        r.start()
    time.sleep(0.5)
    c.sendall(b"abc")
    time.sleep(0.1)
    c.send(b"!", socket.MSG_OOB)
    if r:
        r.join()
    else:
        got.append(recv_all(c))
    c.shutdown(socket.SHUT_WR)
    return got[0].decode()
