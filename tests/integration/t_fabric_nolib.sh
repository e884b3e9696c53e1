#!/usr/bin/env bash
# t_fabric_nolib — a host without libfabric.so.1 (the package only recommends
# libfabric1): hidden for this test alone by a bind mount in a mount
# namespace of its own.  Both users of the one loader (fab_dl.c) cope:
#   - `sockswitch doctor` says libfabric is not installed, as information,
#     and prints nothing else (the probe loads quietly);
#   - a switched program whose routes send 127.0.0.0/8 over fabric warns
#     once for two listeners and a connect, and its connection works over
#     kernel TCP.
source "$(dirname "$0")/lib.sh"
ssw_need_fabric
ssw_enter_netns "$@"
ssw_setup_preload
ssw_tmpdir
[ "$(id -u)" = 0 ] || { echo "SKIP: hiding libfabric.so.1 takes root (a mount namespace)"; exit 77; }
FAB=$(ldconfig -p | awk '$1 == "libfabric.so.1" { print $NF; exit }')
[ -n "$FAB" ] || { echo "FAIL: libfabric.so.1 is not installed: nothing to hide (scripts/setup.sh)"; exit 1; }

# without_libfabric CMD… — CMD where libfabric.so.1 is an empty file
without_libfabric() {
  unshare -m --propagation private -- bash -c 'mount --bind /dev/null "$1" && shift && exec "$@"' _ "$FAB" "$@"
}

without_libfabric "$SSW_BUILD/sockswitch" doctor >"$T/doctor.out" 2>"$T/doctor.err"
ssw_assert_eq "doctor: exit 0 (shm is unaffected)" "$?" 0
ssw_check "doctor: libfabric not installed, as information" \
  grep -qxF '      libfabric: not installed (libfabric1): `route ... fabric` rules use kernel TCP' "$T/doctor.out"
ssw_assert_quiet "$T/doctor.err"

ssw_cmd switched SOCKSWITCH_ROUTES='route 127.0.0.0/8 fabric provider=tcp' -- "$SSW_PYTHON" -c '
import socket
ls = [socket.create_server(("127.0.0.1", 0)) for _ in range(2)]
c = socket.create_connection(ls[0].getsockname())
s, _ = ls[0].accept()
c.sendall(b"over kernel TCP")
print(s.recv(64).decode())'
without_libfabric "${SSW_CMD[@]}" >"$T/prog.out" 2>"$T/prog.err"
ssw_assert_eq "program: its connection works" "$?:$(cat "$T/prog.out")" "0:over kernel TCP"
ssw_assert_eq "program: one warning, naming libfabric.so.1" \
  "$(grep -c 'warn: fabric: cannot load libfabric.so.1 (.*): fabric routes use kernel TCP$' "$T/prog.err"):$(wc -l <"$T/prog.err")" "1:1"
ssw_assert_no_sanitizer_report "$T"/*.err
ssw_finish
