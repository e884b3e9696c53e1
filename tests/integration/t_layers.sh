#!/usr/bin/env bash
# t_layers — the layers call only downwards: interpose → switch → session →
# SPI → providers, with src/common under all of them.  Two checks:
#  - includes: no file includes a header of a layer above its own, the
#    interposition layer sees the switch through src/switch/api.h alone, and
#    the switch sees the session through session/session.h alone
#    and providers through the SPI, include/sockswitch/provider.h;
#  - calls: nothing below the interposition layer calls an interposed libc
#    name (close, send, fcntl …): inside libsockswitch.so such a call goes to
#    our own wrapper, i.e. back up through interpose.  Below it, code calls
#    the kernel (common/sys.h), the real function (common/real.h) or the
#    switch itself.
source "$(dirname "$0")/lib.sh"

command -v nm >/dev/null || { echo "SKIP: nm not installed"; exit 77; }
ssw_tmpdir
cd "$SSW_SRC" || exit 1

# dir  includes it must not make (prefixes of "…" includes)
bad_includes=0
check_dir() {
  local dir=$1; shift
  local pat
  pat=$(printf '%s\\|' "$@"); pat=${pat%\\|}
  local hits
  hits=$(grep -rn "^#include \"\\($pat\\)" "$dir" --include='*.c' --include='*.h' || true)
  if [ -n "$hits" ]; then
    echo "$hits" | sed "s|^|    |"
    bad_includes=$((bad_includes + $(echo "$hits" | wc -l)))
  fi
}
check_dir src/common    switch/ session/ interpose/ providers/ regcache/
check_dir src/regcache  switch/ session/ interpose/ providers/
check_dir src/providers switch/ session/ interpose/
check_dir src/session   switch/ interpose/ providers/
check_dir src/switch    interpose/ providers/
# the switch sees the session through session.h alone (the connect
# request carries the session's INIT as opaque bytes: SSW_SESSION_INIT_BYTES)
hits=$(grep -rn '^#include "session/' src/switch --include='*.c' --include='*.h' |
  grep -v '#include "session/session\.h"' || true)
if [ -n "$hits" ]; then
  echo "$hits" | sed "s|^|    |"
  bad_includes=$((bad_includes + $(echo "$hits" | wc -l)))
fi
# interpose: its own headers, common/, and the switch's narrow API only
hits=$(grep -rn '^#include "' src/interpose --include='*.c' --include='*.h' |
  grep -v '#include "\(interpose/\|common/\|switch/api\.h"\)' || true)
if [ -n "$hits" ]; then
  echo "$hits" | sed "s|^|    |"
  bad_includes=$((bad_includes + $(echo "$hits" | wc -l)))
fi
ssw_assert_eq "includes that reach a higher layer or past a public header" "$bad_includes" 0

# connection set-up has one owner: only src/switch/setup calls a provider's
# set-up ops (listen, accept, connect and their fds, connect_complete, the
# peer's address and credentials for a claim); the session uses the
# endpoint it is given (close, ep_caps, peer_cred for SIGURG's owner)
setup_ops='listen\|listener_fd\|listener_close\|listener_ready\|accept\|connect\|connect_fd\|connect_complete\|peer_addr'
hits=$(grep -rn "conn->\($setup_ops\)(" src --include='*.c' | grep -v '^src/switch/setup/' || true)
if [ -n "$hits" ]; then echo "$hits" | sed "s|^|    |"; fi
ssw_assert_eq "calls of provider set-up ops outside src/switch/setup" "$(printf '%s' "$hits" | grep -c .)" 0
hits=$(grep -rln "conn->peer_cred(" src --include='*.c' | grep -v '^src/switch/setup/\|^src/session/session_urg.c' || true)
ssw_assert_eq "peer credentials asked outside the set-up (and SIGURG's owner check)" "$(printf '%s' "$hits" | grep -c .)" 0

# The interposed names are what libsockswitch.so exports; ssw_core is
# everything below the interposition layer (CMakeLists.txt).
nm -D --defined-only "$SSW_BUILD/libsockswitch.so" | awk '{print $3}' | sed 's/@.*//' | sort -u >"$T/exported.dat"
nm -u "$SSW_BUILD/libssw_core.a" | awk '{print $2}' | sed 's/@.*//' | sort -u >"$T/core_undef.dat"
ssw_assert_ge "interposed names exported" "$(wc -l <"$T/exported.dat")" 40
comm -12 "$T/exported.dat" "$T/core_undef.dat" >"$T/upcalls"
if [ -s "$T/upcalls" ]; then
  echo "    called below the interposition layer: $(tr '\n' ' ' <"$T/upcalls")"
  for f in $(cat "$T/upcalls"); do
    nm -A -u "$SSW_BUILD/libssw_core.a" 2>/dev/null | awk -v f="$f" '$NF == f {print "    " $1}'
  done
fi
ssw_assert_eq "interposed libc names called from below the interposition layer" "$(wc -l <"$T/upcalls")" 0

ssw_finish
