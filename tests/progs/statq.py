#!/usr/bin/env python3
"""statq.py - queries the JSON of `sockswitch stat --json` for the tests.

  statq.py FILE.json check            exit 0 if FILE is a JSON array of objects with
                                      every required key, else print why, exit 1
  statq.py FILE.json get KEY [K=V...] print KEY of the first object matching every
                                      K=V (values compared as strings), or nothing
  statq.py FILE.json count [K=V...]   number of objects matching
"""
import json
import sys

REQUIRED = ["pid", "fd", "local", "remote", "provider", "state", "bytes_sent",
            "bytes_received", "ring_resident", "shared", "driver", "fallback_reason", "regcache_hits", "regcache_misses",
            "regcache_evictions", "regcache_invalidations"]


def match(o, conds):
    for c in conds:
        k, v = c.split("=", 1)
        x = o.get(k)
        if str(x if x is not None else "null") != v:
            return False
    return True


def main():
    with open(sys.argv[1]) as f:
        data = json.load(f)
    op = sys.argv[2]
    if op == "check":
        if not isinstance(data, list):
            print("not an array")
            return 1
        for o in data:
            missing = [k for k in REQUIRED if k not in o]
            if missing:
                print("object without %s: %s" % (missing, o))
                return 1
        return 0
    if op == "get":
        for o in data:
            if match(o, sys.argv[4:]):
                print(o[sys.argv[3]])
                break
        return 0
    if op == "count":
        print(sum(1 for o in data if match(o, sys.argv[3:])))
        return 0
    return 2


if __name__ == "__main__":
    sys.exit(main())
