#!/usr/bin/env bash
# t_params_doc — the settings table (src/common/params.c, as `sockswitch params
# --json` lists it) and the documentation agree: every variable has a row in
# the README's configuration table with the same default, every row there is
# a variable of the table, every one is in sockswitch(1)'s ENVIRONMENT, and
# no code reads a SOCKSWITCH_* variable the table does not declare.
source "$(dirname "$0")/lib.sh"
ssw_tmpdir
for v in $(env | sed -n 's/^\(SOCKSWITCH_[A-Z_]*\)=.*/\1/p'); do unset "$v"; done

"$SSW_BUILD/sockswitch" params --json >"$T/params.json" 2>"$T/params.err"
ssw_assert_eq "params --json: exit (no variable set)" "$?" 0
"$SSW_PYTHON" - "$T/params.json" "$SSW_SRC" >"$T/check.out" 2>&1 <<'PY'
import json, re, sys, pathlib
table = {p["name"]: p for p in json.load(open(sys.argv[1]))}
src = pathlib.Path(sys.argv[2])
readme = (src / "README.md").read_text()
man = (src / "man/sockswitch.1").read_text()
env = man[man.index(".SH ENVIRONMENT"):man.index(".SH EXIT STATUS")]
rows = {}
for line in readme.splitlines():
    m = re.match(r"\| `(SOCKSWITCH_[A-Z_]+)[^|]*(?:\\\|[^|]*)*\| ([^|]*) \|", line)
    if m:
        rows[m.group(1)] = m.group(2).strip().strip("`")
bad = 0
def fail(msg):
    global bad
    bad += 1
    print("FAIL - " + msg)
for name, p in table.items():
    if name not in rows:
        fail(f"{name}: no row in the README's configuration table")
    elif not (p["default"] == rows[name] or p["default"].startswith(rows[name] + " ")):
        fail(f"{name}: README default '{rows[name]}', table default '{p['default']}'")
    if not re.search(r"^\.BR? " + name + r"\b", env, re.M):
        fail(f"{name}: not in sockswitch(1) ENVIRONMENT")
for name in rows:
    if name not in table:
        fail(f"{name}: README row for a variable the settings table does not declare")
for d in ("src", "cli", "bench"):
    for f in (src / d).rglob("*.c"):
        for name in re.findall(r'getenv\("(SOCKSWITCH_[A-Z_]+)"\)', f.read_text()):
            if name not in table:
                fail(f"{f.relative_to(src)} reads {name}, which the settings table does not declare")
print(f"checked {len(table)} settings, {len(rows)} README rows")
sys.exit(1 if bad else 0)
PY
rc=$?
cat "$T/check.out"
ssw_assert_eq "settings table, README, sockswitch(1) and code agree" "$rc" 0
ssw_finish
