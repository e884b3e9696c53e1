#!/usr/bin/env bash
# t_package — the Debian package (cmake/package.cmake; `bash scripts/build.sh
# package` makes the same from the release build).  cpack makes it from this
# build into the test's directory; its control fields say what it needs
# (Depends from dpkg-shlibdeps: libc6, satisfied here, nothing of libfabric;
# Recommends libfabric1 where the build has the fabric provider, which opens
# it at first use); it holds the library, the CLI, the SPI header and the man
# pages where Debian keeps them.  Unpacked into a temporary root (dpkg -x:
# nothing is installed on the host), its sockswitch finds its own library:
# --version and doctor name the build's providers and that library, `run`
# preloads it and nothing else, and a python echo pair under the packaged
# `sockswitch run` goes over shm (switched, every byte carried, no kernel TCP
# segment while the frames flow).
source "$(dirname "$0")/lib.sh"
ssw_enter_netns "$@"
ssw_tmpdir
if ssw_is_sanitized "$SSW_BUILD"; then
  echo "SKIP: a package is made from the release build (this is a sanitizer build; the release build's ctest runs it)"
  exit 77
fi
for c in cpack dpkg-deb dpkg-shlibdeps; do
  command -v "$c" >/dev/null || { echo "FAIL: $c missing (cmake, dpkg-dev: scripts/setup.sh)"; exit 1; }
done
[ -f "$SSW_BUILD/CPackConfig.cmake" ] || { echo "FAIL: $SSW_BUILD/CPackConfig.cmake missing (configure the build)"; exit 1; }
unset SOCKSWITCH_LIB LD_PRELOAD

cache() { sed -n "s/^$1:[A-Z]*=//p" "$SSW_BUILD/CMakeCache.txt"; }
LIBDIR=$(cache CMAKE_INSTALL_LIBDIR)
LEFT_OUT=$(cache SSW_FABRIC_LEFT_OUT)
VERSION=$(sed -n 's/^#define SSW_VERSION "\(.*\)"/\1/p' "$SSW_SRC/cli/cli.h")
if [ -z "$LEFT_OUT" ]; then FACTS="providers built in: shm fabric"; else FACTS="providers built in: shm; left out: fabric ($LEFT_OUT)"; fi

# ---- make it
ssw_step "cpack -G DEB in $SSW_BUILD"
t0=$SECONDS
(cd "$SSW_BUILD" && timeout 120 cpack -G DEB -B "$T/pkg") >"$T/cpack.log" 2>&1
rc=$?
debs=("$T"/pkg/*.deb)
if [ "$rc" != 0 ] || [ ${#debs[@]} != 1 ] || [ ! -s "${debs[0]}" ]; then
  ssw_fail "cpack made one package (rc=$rc): $(tail -n 3 "$T/cpack.log")"
  ssw_finish
fi
DEB=${debs[0]}
ssw_ok "cpack made $(basename "$DEB") ($(stat -c %s "$DEB") bytes, $((SECONDS - t0)) s)"

# ---- what it says
field() { dpkg-deb -f "$DEB" "$1"; }
ssw_assert_eq "Package" "$(field Package)" sockswitch
ssw_assert_eq "Version: the CLI's" "$(field Version)" "$VERSION"
ssw_assert_eq "Architecture: this host's" "$(field Architecture)" "$(dpkg --print-architecture)"
depends=$(field Depends)
ssw_check "Depends: libc6 ($depends)" grep -qE '(^|, )libc6( \(|,|$)' <<<"$depends"
ssw_check "Depends: nothing of libfabric ($depends)" bash -c '! grep -q fabric <<<"$1"' _ "$depends"
# every dependency is met on this host (where the tests below run it)
IFS=',' read -ra deps <<<"$depends"
for d in "${deps[@]}"; do
  d=${d# }
  name=${d%% *} have=$(dpkg-query -W -f='${Version}' "${d%% *}" 2>/dev/null)
  if [[ "$d" =~ \((..?)\ ([^\)]*)\) ]]; then
    op=${BASH_REMATCH[1]} want=${BASH_REMATCH[2]}
    case "$op" in '>=') op=ge ;; '<=') op=le ;; '>>') op=gt ;; '<<') op=lt ;; '=') op=eq ;; esac
    ssw_check "Depends $d: met here ($name $have)" dpkg --compare-versions "${have:-0}" "$op" "$want"
  else
    ssw_check "Depends $d: met here" test -n "$have"
  fi
done
if [ -z "$LEFT_OUT" ]; then
  ssw_assert_eq "Recommends: libfabric1 (the fabric provider opens it at first use)" "$(field Recommends)" libfabric1
else
  ssw_assert_eq "Recommends: nothing (no fabric provider)" "$(field Recommends)" ""
fi

# ---- what it holds
dpkg-deb -c "$DEB" >"$T/contents.txt"
for f in usr/bin/sockswitch "usr/$LIBDIR/libsockswitch.so" usr/include/sockswitch/provider.h \
         usr/share/man/man1/sockswitch.1.gz usr/share/man/man5/sockswitch.conf.5.gz; do
  ssw_check "holds /$f" grep -qE " \./$f\$" "$T/contents.txt"
done
ssw_assert_eq "every file root's" "$(awk '$2 != "root/root"' "$T/contents.txt" | wc -l)" 0

# ---- unpacked into a root of its own: what its sockswitch does
ROOT=$T/root
dpkg -x "$DEB" "$ROOT" || { ssw_fail "dpkg -x"; ssw_finish; }
CLI=$ROOT/usr/bin/sockswitch
LIB=$ROOT/usr/$LIBDIR/libsockswitch.so
ssw_assert_eq "--version: the build's providers" "$("$CLI" --version 2>&1)" "sockswitch $VERSION ($FACTS)"
"$CLI" doctor >"$T/doctor.out" 2>&1; rc=$?
ssw_assert_eq "doctor: exit 0 (the switch can work)" "$rc" 0
ssw_check "doctor: finds the package's library" grep -qxF "ok    library: $LIB" "$T/doctor.out"
ssw_check "doctor: the providers built in" grep -qxF "ok    $FACTS" "$T/doctor.out"
ssw_check "doctor: the library is the same build" bash -c '! grep -q "another build\|does not say which providers" "$1"' _ "$T/doctor.out"
ssw_check "doctor: 127.0.0.1 goes over shm" grep -qE '^  127\.0\.0\.1 +-> shm$' "$T/doctor.out"
# `run` preloads the package's library, and only that one
ssw_run plain -- "$CLI" run -- cat /proc/self/maps >"$T/maps.txt" 2>"$T/maps.err"
ssw_assert_eq "run: the program maps the package's library" \
  "$(grep -o '/[^ ]*libsockswitch[^ ]*' "$T/maps.txt" | sort -u)" "$(realpath "$LIB")"

# a switched echo pair, both ends under the package's `sockswitch run`
SIZES=1x100,64x100,102400x10,1048576x4
PAYLOAD=$(ssw_sizes_bytes "$SIZES")
seg0=$(ssw_outsegs)
ssw_bg server plain SOCKSWITCH_STATS_FILE="$T/server.stats" -- \
  "$CLI" run -- "$SSW_PYTHON" "$SSW_PROGS/echo.py" server --host 127.0.0.1 --port-file "$T/echo.port"
spid=$SSW_BG_PID
if ssw_wait_file "$T/echo.port"; then
  ssw_step "client"
  ssw_run plain SOCKSWITCH_STATS_FILE="$T/client.stats" -- \
    "$CLI" run -- "$SSW_PYTHON" "$SSW_PROGS/echo.py" client --host 127.0.0.1 --port "$(cat "$T/echo.port")" \
    --sizes "$SIZES" >"$T/client.out" 2>"$T/client.err"
  rc_c=$?
  wait "$spid"; rc_s=$?
  ssw_assert_eq "echo client: every frame back intact ($(grep '^RESULT' "$T/client.out"))" \
    "$rc_c $(grep -c '^RESULT ok' "$T/client.out")" "0 1"
  ssw_assert_eq "echo server: every frame verified" "$rc_s $(grep -c '^SERVER ok' "$T/server.out")" "0 1"
  ssw_assert_le "kernel TCP segments while the frames flowed" "$(ssw_kv "$T/client.out" outsegs_delta)" "$SSW_OUTSEGS_SLACK"
  ssw_assert_le "kernel TCP segments over the whole run (1 connection)" "$(( $(ssw_outsegs) - seg0 ))" "$SSW_CONN_SEGS"
  ssw_assert_switched "$T/client.stats" "$PAYLOAD"
  ssw_assert_switched "$T/server.stats" "$PAYLOAD"
  ssw_assert_quiet "$T/client.err" "$T/server.err"
else
  ssw_fail "echo server under the package's sockswitch run did not start: $(tail -n 3 "$T/server.err")"
fi
ssw_finish
