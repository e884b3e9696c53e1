#!/usr/bin/env bash
# diff.sh — run the differential tester (ssw_diff check) where it belongs:
#
#   bash tests/diff/diff.sh shm    [ssw_diff check args…]   one host: a private network namespace
#   bash tests/diff/diff.sh fabric [ssw_diff check args…]   two namespaces joined by a veth (root),
#                                                            the switched runs over libfabric's tcp
#
# e.g. diff.sh shm --from 1 --count 100, or a replay that a failure printed:
# diff.sh shm --seed 1234 --steps 3,7,9 --show.  The switched runs preload
# $SSW_BUILD/libsockswitch.so (with the sanitizer runtimes for an ASan
# build, whose deadlines are then stretched); exit 1 on any difference that
# README Limits does not explain (a KNOWN one is counted, not failed).
#   SSW_DIFF_SLOW=K   deadline multiplier (default 1, 3 for a sanitizer build)
profile=${1:-}
case "$profile" in
  shm|fabric) shift ;;
  *) echo "usage: diff.sh shm|fabric [ssw_diff check args…]" >&2; exit 2 ;;
esac
SSW_TIMEOUT=${SSW_TIMEOUT:-60}
source "$(dirname "$0")/../integration/lib.sh"
[ "$profile" = shm ] && ssw_enter_netns "$profile" "$@"
ssw_setup_preload
BIN=$SSW_BUILD/tests/diff/ssw_diff
[ -x "$BIN" ] || { echo "FAIL: $BIN not built (cmake --build $SSW_BUILD)"; exit 1; }
slow=${SSW_DIFF_SLOW:-1}
[[ "$SSW_PRELOAD" == *asan* ]] && slow=${SSW_DIFF_SLOW:-3}
replay="SSW_BUILD=$SSW_BUILD bash $SSW_SRC/tests/diff/diff.sh $profile"
args=(check --profile "$profile" --preload "$SSW_PRELOAD" --slow "$slow" --replay "$replay")

if [ "$profile" = fabric ]; then
  source "$SSW_SRC/tests/integration/netns.sh"
  ssw_tmpdir
  ssw_ns_pair >/dev/null
  export SOCKSWITCH_ROUTES="$SSW_NS_ROUTES"
  args+=(--netns "/run/netns/$SSW_NS_A,/run/netns/$SSW_NS_B" --addr "$SSW_NS_ADDR_A")
fi
"$BIN" "${args[@]}" "$@"
