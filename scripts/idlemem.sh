#!/usr/bin/env bash
# idlemem.sh — the memory idle connections hold, kernel TCP and switched side by
# side: N connections to an epoll echo server, R round trips of S bytes on each,
# then W seconds idle (tests/progs/idlemem.c measures; README Limits quotes it).
#
#   bash scripts/idlemem.sh [-n CONNS] [-r ROUNDS] [-s SIZE] [-w IDLE_S] [LIB...]
#     (defaults: 1000 connections, 600 round trips of 1000 B, 3 s idle)
#
# Prints one line per run: kernel TCP (its socket buffers: /proc/net/sockstat
# "mem", host-wide), then the switch with each LIB given (default
# build/libsockswitch.so; give another build's library to compare them in one
# run): shared memory held by client and server together, busy (right after
# the last round trip) and idle (after W s), in all and per connection.
# Needs build/ (bash scripts/build.sh release); SSW_BUILD_DIR moves it.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${SSW_BUILD_DIR:-$PWD/build}
N=1000 R=600 S=1000 W=3
while getopts "n:r:s:w:" o; do
  case $o in
    n) N=$OPTARG ;; r) R=$OPTARG ;; s) S=$OPTARG ;; w) W=$OPTARG ;;
    *) sed -n '2,14p' "$0"; exit 2 ;;
  esac
done
shift $((OPTIND - 1))
LIBS=("$@")
[ ${#LIBS[@]} -gt 0 ] || LIBS=("$BUILD/libsockswitch.so")
PROG=$BUILD/tests/idlemem
[ -x "$PROG" ] || { echo "idlemem.sh: $PROG not built (bash scripts/build.sh release)" >&2; exit 1; }

show() { # LABEL RESULT-LINE
  local busy idle per tcp secs
  busy=$(sed -n 's/.* busy_shmem_kib=\([-0-9]*\).*/\1/p' <<<"$2")
  idle=$(sed -n 's/.* idle_shmem_kib=\([-0-9]*\).*/\1/p' <<<"$2")
  per=$(sed -n 's/.* per_conn_kib=\([-0-9.]*\).*/\1/p' <<<"$2")
  tcp=$(sed -n 's/.* tcp_mem_kib=\([-0-9]*\).*/\1/p' <<<"$2")
  secs=$(sed -n 's/.* secs=\([0-9.]*\).*/\1/p' <<<"$2")
  printf '%-44s shared memory busy %9s KiB, idle %9s KiB (%6s KiB a connection); TCP buffers %6s KiB; %6s s\n' \
    "$1" "$busy" "$idle" "$per" "$tcp" "$secs"
}

echo "# $N connections, $R round trips of $S B each, then $W s idle"
out=$("$PROG" -n "$N" -r "$R" -s "$S" -w "$W" | grep '^RESULT')
show "kernel TCP" "$out"
for lib in "${LIBS[@]}"; do
  [ -f "$lib" ] || { echo "idlemem.sh: no library $lib" >&2; exit 1; }
  out=$(SOCKSWITCH_LIB=$lib "$BUILD/sockswitch" run -- "$PROG" -n "$N" -r "$R" -s "$S" -w "$W" | grep '^RESULT')
  show "switched ($lib)" "$out"
done
