#!/usr/bin/env python3
# gen_seeds.py — writes the fuzz targets' seed inputs (run from anywhere; the files are checked in).
"""Each seed is a short, well-formed script in the target's input format, so a
fuzzing run starts from inputs that reach deep states (windows full, data
staged, credits coming back, half-close) instead of finding them by chance."""
import os
import struct

REC_MSG, REC_PAD = 1, 2  # providers/shm/shm_priv.h
HERE = os.path.dirname(os.path.abspath(__file__))


def u16(v):
    return struct.pack('<H', v)


def u32(v):
    return struct.pack('<I', v)


def write(target, name, data):
    d = os.path.join(HERE, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), 'wb') as f:
        f.write(data)


# ---- fuzz_session_rx: header, then ops (see the target's switch) ----------
def rx_header(rcvbuf, peer_window, oobinline=0, caps=3):
    return u16(rcvbuf >> 2) + bytes([oobinline]) + u16((peer_window - 4096) // 16) + bytes([caps])


def data(n):            # op 2: in-window DATA of n bytes (1..1023)
    return bytes([0x02]) + u16(n - 1)


def recv(n, flags=0):   # op 6: flags index 0 plain, 1 PEEK, 4 WAITALL
    return bytes([0x06 | (flags << 4)]) + u16(n - 1)


def send(n, oob=False):  # op 7
    return bytes([0x07 | (0x10 if oob else 0)]) + u16(n - 1)


QUERY = bytes([0x08])        # op 8: FIONREAD, SIOCATMARK, poll, take_error, stats, state
CREDIT = bytes([0x05, 0])    # op 5: the peer returns credits for what we sent
FIN = bytes([0x25, 0])       # op 5 with 0x20: the peer's FIN
SHUT_WR = bytes([0x39])      # op 9, shutdown((0x39 >> 5) % 3 == 1)


def window(rcvbuf, sndbuf):  # op 9 without 0x10: set_opts
    return bytes([0x09]) + u16(rcvbuf >> 4) + u16(sndbuf >> 4)


def rx_seeds():
    w = 8192
    fill = data(1000) * 8
    write('fuzz_session_rx', 'stage_query', rx_header(w, 65536) + fill + QUERY + fill + recv(3000) + QUERY + fill
          + recv(20000))
    write('fuzz_session_rx', 'stage_send', rx_header(w, 8192) + send(4000) * 3 + fill + send(4000) + fill + CREDIT
          + send(4000) + recv(5000) + fill + QUERY + recv(20000))
    write('fuzz_session_rx', 'peek_waitall_fin', rx_header(w, 16384) + data(700) * 3 + recv(100, 1) + recv(5000, 4)
          + fill + QUERY + FIN + recv(20000) + recv(10))
    write('fuzz_session_rx', 'window_change', rx_header(65536, 1 << 20) + data(1000) * 20 + window(4096, 4096)
          + fill + QUERY + recv(20000) + fill + send(3000) + SHUT_WR + recv(20000))
    write('fuzz_session_rx', 'oob', rx_header(w, 65536, oobinline=1) + data(10) + bytes([0x15, ord('!')]) + QUERY
          + recv(100) + send(1, oob=True) + recv(100))


# ---- fuzz_ring: struct hdr {pos, tail, head: u64; closed, flags: u32}, then ring bytes
def ring_seeds():
    def hdr(pos, tail, head, closed=0, flags=0):
        return struct.pack('<QQQII', pos, tail, head, closed, flags)
    # a record: {len, kind} then the payload padded to 8 bytes; the input
    # after the header repeats over the whole ring
    rec = u32(16) + u32(REC_MSG) + b'0123456789abcdef'
    write('fuzz_ring', 'one_record', hdr(0, len(rec), 0, flags=(64 << 8)) + rec)
    write('fuzz_ring', 'several', hdr(0, 4 * len(rec), 0, flags=(200 << 8)) + rec)
    write('fuzz_ring', 'wrapped', hdr(16 * 1024 - 24, 3 * len(rec), 0, flags=(100 << 8)) + rec)
    write('fuzz_ring', 'pad_closed', hdr(0, 2 * len(rec), 0, closed=1) + u32(16) + u32(REC_PAD) + bytes(16))
    # the producer rewound at our index 800: its records go on at the next
    # lap's start (skip defaults to our index); held and skip fields after
    # the header, then the ring's bytes; our sends find the ring empty
    def hdr2(pos, tail, head, flags=0, held=0, skip=0):
        return struct.pack('<QQQIIQQ', pos, tail, head, 0, flags, held, skip)
    write('fuzz_ring', 'rewind', hdr2(800, 16 * 1024 - 800 + 2 * len(rec), 0, flags=(3000 << 8)) + rec)


# ---- fuzz_handshake: struct in_hdr, the record's bytes, the segment's bytes
HS_SIZE = 216  # sizeof(struct shm_hs)


def hs_seeds():
    def hdr(mode, fix, nfds, fdkind, msg_len, cap=0, seg_size=0, seg_off=0, seg_len=0):
        return struct.pack('<BBBBIHHHH', mode, fix, nfds, fdkind, seg_size, seg_off, seg_len, msg_len, cap)
    record = bytes(HS_SIZE)  # magic, type and ring size fixed up by `fix`; no private data
    write('fuzz_handshake', 'hello_accept', hdr(0, 7, 1, 0, HS_SIZE) + record)
    write('fuzz_handshake', 'hello_eventfds', hdr(2, 7, 3, 0b010100, HS_SIZE) + record)
    write('fuzz_handshake', 'hello_bad_segment', hdr(0, 5, 1, 0, HS_SIZE, seg_off=0, seg_len=64) + record
          + bytes(range(64)))
    write('fuzz_handshake', 'doorbell', hdr(1, 0, 0, 0, 1) + b'\x01')
    write('fuzz_handshake', 'refusal', hdr(1, 1, 0, 0, HS_SIZE, cap=64) + record)


if __name__ == '__main__':
    rx_seeds()
    ring_seeds()
    hs_seeds()
