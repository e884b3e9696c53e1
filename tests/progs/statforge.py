#!/usr/bin/env python3
"""statforge.py - writes a registry file as `sockswitch stat` reads them
(src/switch/statreg.h), with one socket slot, for the tests that play a
hostile user forging entries.

  statforge.py FILE --pid P [--starttime auto|N] [--netns N] [--comm S]
               [--local S] [--remote S] [--reason S] [--kind switched|tcp]

Strings take Python escapes (\\x1b, \\x07): raw terminal sequences go into
the file as bytes.  --starttime auto copies the start time of process P.
"""
import argparse
import codecs
import os
import struct

MAGIC = 0x3154415453575353
HDR_SIZE = 4096
SLOTS = 4096
SLOT = struct.Struct("<IBBHi12s9Q64s64s96s64s")
HDR = struct.Struct("<QIIIIiIQQQII16s")
assert SLOT.size == 384


def raw(s):
    return codecs.decode(s, "unicode_escape").encode("latin-1")


def starttime(pid):
    with open("/proc/%d/stat" % pid) as f:
        rest = f.read().rsplit(")", 1)[1].split()
    return int(rest[19])  # field 22; rest starts at field 3


def main():
    p = argparse.ArgumentParser()
    p.add_argument("file")
    p.add_argument("--pid", type=int, required=True)
    p.add_argument("--starttime", default="auto")
    p.add_argument("--netns", type=int, default=0)
    p.add_argument("--comm", default="forged")
    p.add_argument("--local", default="127.0.0.1:1")
    p.add_argument("--remote", default="127.0.0.1:2")
    p.add_argument("--reason", default="forged")
    p.add_argument("--kind", default="tcp")
    p.add_argument("--version", type=int, default=2)
    a = p.parse_args()
    st = starttime(a.pid) if a.starttime == "auto" else int(a.starttime)
    hdr = HDR.pack(MAGIC, a.version, SLOTS, SLOT.size, HDR_SIZE, a.pid, 0, st, a.netns, 0, 0, 1, raw(a.comm)[:15])
    kind = 1 if a.kind == "switched" else 2
    slot = SLOT.pack(2, kind, 3, 0, 7, b"tcp" if kind == 2 else b"shm", 1, 2, 3, 4, 0, 0, 0, 0, 0,
                     raw(a.local)[:63], raw(a.remote)[:63], raw(a.reason)[:95], b"")
    fd = os.open(a.file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(hdr.ljust(HDR_SIZE, b"\0"))
        f.write(slot)
        f.truncate(HDR_SIZE + SLOTS * SLOT.size)


if __name__ == "__main__":
    main()
