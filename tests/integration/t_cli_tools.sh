#!/usr/bin/env bash
# t_cli_tools — the operator commands without traffic: `routes` names the rule
# (file:line, SOCKSWITCH_ROUTES rule, built-in default), the provider and why;
# a bad configuration is one line naming file and line with exit 1 for the CLI
# (routes, run — the command is not started — and doctor); `doctor` passes on
# this host; every command answers --help; the man pages install with
# `cmake --install` and render without warnings.
source "$(dirname "$0")/lib.sh"
ssw_enter_netns "$@"
ssw_setup_preload
ssw_tmpdir

CLI=$SSW_BUILD/sockswitch
unset SOCKSWITCH_CONF SOCKSWITCH_ROUTES SOCKSWITCH_DISABLE

# ---- routes
"$CLI" routes 127.0.0.1:6379 >"$T/r1.out" 2>&1; rc=$?
ssw_assert_eq "routes local: exit" "$rc" 0
ssw_check "routes local: provider shm" grep -qE '^  provider +shm$' "$T/r1.out"
ssw_check "routes local: built-in default" grep -qE '^  from +built-in default$' "$T/r1.out"
ssw_check "routes local: why (address of this host)" grep -q 'is an address of this host' "$T/r1.out"

"$CLI" routes 192.0.2.55 >"$T/r2.out" 2>&1
ssw_check "routes remote: kernel TCP, no rule" grep -qE '^  provider +tcp \(kernel TCP\)$' "$T/r2.out"
ssw_check "routes remote: why" grep -q 'no rule matches 192.0.2.55' "$T/r2.out"

CONF="$T/ops.conf"
printf '# test\nroute 10.0.0.0/8 tcp\n\nroute local shm\nport-exclude 22,5432\n' >"$CONF"
"$CLI" routes --conf "$CONF" 10.9.8.7:80 '[::1]:5432' 127.0.0.1:8080 >"$T/r3.out" 2>&1; rc=$?
ssw_assert_eq "routes --conf: exit" "$rc" 0
ssw_check "routes --conf: 10/8 rule by file:line" grep -qE "^  from +$CONF:2$" "$T/r3.out"
ssw_check "routes --conf: port 5432 excluded by file:line" grep -qE "^  port +excluded by $CONF:5$" "$T/r3.out"
ssw_check "routes --conf: 127.0.0.1:8080 by line 4" grep -qE "^  from +$CONF:4$" "$T/r3.out"
SOCKSWITCH_ROUTES='route 127.0.0.2/32 tcp' "$CLI" routes 127.0.0.2 >"$T/r4.out" 2>&1
ssw_check "routes env: SOCKSWITCH_ROUTES rule 1" grep -qE '^  from +SOCKSWITCH_ROUTES rule 1$' "$T/r4.out"
"$CLI" routes --conf "$CONF" >"$T/r5.out" 2>&1
ssw_check "routes table: rules in order" grep -qE '^ +1 +route 10\.0\.0\.0/8 tcp ' "$T/r5.out"
# --json: the same answers for machines
"$CLI" routes --json --conf "$CONF" 10.9.8.7:80 '[::1]:5432' 127.0.0.1:6379 >"$T/r6.json" 2>"$T/r6.err"; rc=$?
ssw_assert_eq "routes --json: exit" "$rc" 0
ssw_assert_eq "routes --json: three answers with their rule origin, exclusion and provider" \
  "$("$SSW_PYTHON" -c 'import json, sys
a = json.load(open(sys.argv[1]))
print(len(a), a[0]["origin"] == sys.argv[2] + ":2", a[1]["port_excluded_by"] == sys.argv[2] + ":5",
      a[2]["provider"], a[0]["provider"])' "$T/r6.json" "$CONF" 2>&1)" "3 True True shm tcp"
"$CLI" routes --json --conf "$CONF" >"$T/r7.json" 2>&1
ssw_assert_eq "routes --json table: first rule" \
  "$("$SSW_PYTHON" -c 'import json, sys; a = json.load(open(sys.argv[1])); print(a[0]["index"], a[0]["rule"])' "$T/r7.json" 2>&1)" \
  "1 route 10.0.0.0/8 tcp"
ssw_check "routes table: excluded ports" grep -q "22 ($CONF:5), 5432 ($CONF:5)" "$T/r5.out"
"$CLI" routes 1.2.3.4:99999 >/dev/null 2>&1; rc=$?
ssw_assert_eq "routes: bad port is a usage error" "$rc" 2

# ---- configuration errors: one line, file and line, exit 1
BAD="$T/bad.conf"
printf 'route local shm\nroute 10.0.0.0/33 shm\n' >"$BAD"
"$CLI" routes --conf "$BAD" 127.0.0.1 >"$T/b1.out" 2>"$T/b1.err"; rc=$?
ssw_assert_eq "bad conf: routes exits 1" "$rc" 1
ssw_assert_eq "bad conf: routes prints one line" "$(wc -l <"$T/b1.err")" 1
ssw_check "bad conf: names file:line and the problem" \
  grep -qE "^sockswitch routes: $BAD:2: bad prefix length '/33'" "$T/b1.err"
SOCKSWITCH_ROUTES='route local nosuch' "$CLI" routes 127.0.0.1 >/dev/null 2>"$T/b2.err"; rc=$?
ssw_assert_eq "bad env: exit 1" "$rc" 1
ssw_check "bad env: names the rule" grep -q "SOCKSWITCH_ROUTES rule 1: unknown provider 'nosuch'" "$T/b2.err"
"$CLI" run --conf "$BAD" -- touch "$T/ran" >/dev/null 2>"$T/b3.err"; rc=$?
ssw_assert_eq "bad conf: run exits 1" "$rc" 1
ssw_check "bad conf: run did not start the command" test ! -e "$T/ran"
ssw_check "bad conf: run names file:line" grep -q "^sockswitch run: $BAD:2: " "$T/b3.err"
# (an ASan build's library is preloaded ahead of its runtime by `run`)
ASAN_OPTIONS=${ASAN_OPTIONS:-}:verify_asan_link_order=0 "$CLI" run --conf "$CONF" -- touch "$T/ran" >/dev/null 2>&1; rc=$?
ssw_assert_eq "good conf: run runs the command" "$rc$(test -e "$T/ran" && echo +ran)" "0+ran"

# ---- doctor
"$CLI" doctor >"$T/d1.out" 2>&1; rc=$?
ssw_assert_eq "doctor: exit 0 on this host" "$rc" 0
for what in library configuration memfd eventfd rendezvous CMA limits namespace; do
  ssw_check "doctor: checks $what" grep -qE "^(ok  |warn)  $what" "$T/d1.out"
done
ssw_check "doctor: says what is switched" grep -qE '^  127\.0\.0\.1 +-> shm$' "$T/d1.out"
# the providers this build has: fabric unless the build left it out (cmake/fabric.cmake)
left_out=$(sed -n 's/^SSW_FABRIC_LEFT_OUT:INTERNAL=//p' "$SSW_BUILD/CMakeCache.txt")
if [ -z "$left_out" ]; then want="providers built in: shm fabric"; else want="providers built in: shm; left out: fabric ($left_out)"; fi
ssw_assert_eq "doctor: the providers built in" "$(grep -E '^ok    providers built in' "$T/d1.out")" "ok    $want"
# a library of another build (its facts say other providers): doctor warns
"$SSW_PYTHON" - "$SSW_BUILD/libsockswitch.so" "$T/other.so" <<'EOF'
import sys
b = open(sys.argv[1], "rb").read()
tag = b"\nsockswitch build: providers built in: "
i = b.index(tag) + len(tag)
open(sys.argv[2], "wb").write(b[:i] + b"shX" + b[i + 3:])
EOF
SOCKSWITCH_LIB=$T/other.so "$CLI" doctor >"$T/d5.out" 2>&1
ssw_check "doctor: a library of another build is named" \
  grep -qE "^warn  library: $T/other.so is another build: providers built in: shX" "$T/d5.out"
ssw_assert_eq "--version: the providers built in" "$("$CLI" --version)" "sockswitch $(sed -n 's/^#define SSW_VERSION "\(.*\)"/\1/p' "$SSW_SRC/cli/cli.h") ($want)"
"$CLI" doctor --conf "$BAD" >"$T/d2.out" 2>&1; rc=$?
ssw_assert_eq "doctor bad conf: exit 1" "$rc" 1
ssw_check "doctor bad conf: FAIL line with file:line" grep -qE "^FAIL  configuration: $BAD:2: " "$T/d2.out"
"$CLI" doctor --json --conf "$BAD" >"$T/d4.json" 2>&1; rc=$?
ssw_assert_eq "doctor --json bad conf: exit 1" "$rc" 1
ssw_assert_eq "doctor --json: can_work false, the configuration check failed naming file:line" \
  "$("$SSW_PYTHON" -c 'import json, sys
d = json.load(open(sys.argv[1]))
c = [x for x in d["checks"] if x["check"] == "configuration"]
print(d["can_work"], d["failures"] >= 1, c[0]["level"], (sys.argv[2] + ":2:") in c[0]["message"])' "$T/d4.json" "$BAD" 2>&1)" \
  "False True fail True"
SOCKSWITCH_LIB=/nonexistent/libsockswitch.so "$CLI" doctor >"$T/d3.out" 2>&1; rc=$?
ssw_assert_eq "doctor without the library: exit 1" "$rc" 1

# ---- --help everywhere
for cmd in run bench stat routes doctor help; do
  out=$("$CLI" "$cmd" --help 2>&1); rc=$?
  if [ "$rc" = 0 ] && [[ "$out" == "usage: sockswitch $cmd"* ]]; then ssw_ok "$cmd --help"
  else ssw_fail "$cmd --help (rc=$rc): $(head -n 2 <<<"$out")"; fi
  out=$("$CLI" help "$cmd" 2>&1)
  [[ "$out" == "usage: sockswitch $cmd"* ]] && ssw_ok "help $cmd" || ssw_fail "help $cmd"
done
out=$("$CLI" --help 2>&1)
for cmd in run bench stat routes doctor; do
  grep -qE "^  $cmd " <<<"$out" && ssw_ok "usage lists $cmd" || ssw_fail "usage lists $cmd"
done
"$CLI" stat --bogus >/dev/null 2>&1; ssw_assert_eq "stat: unknown option is a usage error" "$?" 2

# ---- man pages
if command -v cmake >/dev/null 2>&1 && [ -f "$SSW_BUILD/cmake_install.cmake" ]; then
  cmake --install "$SSW_BUILD" --prefix "$T/inst" >"$T/install.log" 2>&1
  for m in man1/sockswitch.1.gz man5/sockswitch.conf.5.gz; do
    ssw_check "installed: share/man/$m" test -s "$T/inst/share/man/$m"
  done
  if command -v man >/dev/null 2>&1; then
    for m in man1/sockswitch.1.gz man5/sockswitch.conf.5.gz; do
      out=$(MANWIDTH=80 man --warnings -l "$T/inst/share/man/$m" 2>&1 >/dev/null)
      [ -z "$out" ] && ssw_ok "$m renders without warnings" || ssw_fail "$m: $out"
    done
    MANWIDTH=80 man -l "$T/inst/share/man/man1/sockswitch.1.gz" 2>/dev/null | grep -q 'sockswitch stat' &&
      ssw_ok "sockswitch(1) documents stat" || ssw_fail "sockswitch(1) documents stat"
  fi
else
  ssw_fail "cmake or $SSW_BUILD/cmake_install.cmake missing"
fi
ssw_assert_no_sanitizer_report "$T"/*.err "$T"/*.out
ssw_finish
