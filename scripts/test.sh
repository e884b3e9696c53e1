#!/usr/bin/env bash
# test.sh — the full test suite, as CI runs it (.ci/run):
#
#   1. scripts/setup.sh   install missing Debian packages (quick when all are there)
#   2. scripts/build.sh   release (build/), ASan+UBSan (build-asan/), fuzz (build-fuzz/, clang)
#   3. ctest in build/       unit + integration tests against the release library
#      ctest in build-asan/  the same against the sanitizer build (integration tests
#                            preload the ASan runtime first; see tests/integration/lib.sh),
#                            but the differential tester's seeds (release only)
#      ctest in build-fuzz/  every fuzz target for a short time
#
# Exits non-zero if any step or test fails; ends with ctest's summary lines.
# Knobs: SSW_SKIP_SETUP=1, SSW_CTEST_JOBS (default 2), SSW_BUILD_DIR / SSW_ASAN_DIR /
# SSW_FUZZ_DIR (build locations, as in build.sh), SSW_TEST_BUILDS (default
# "release asan fuzz").
set -uo pipefail
exec </dev/null
cd "$(dirname "$0")/.."
SRC=$PWD
export SSW_BUILD_DIR=${SSW_BUILD_DIR:-$SRC/build}
export SSW_ASAN_DIR=${SSW_ASAN_DIR:-$SRC/build-asan}
export SSW_FUZZ_DIR=${SSW_FUZZ_DIR:-$SRC/build-fuzz}
JOBS=${SSW_CTEST_JOBS:-2}
read -ra BUILDS <<<"${SSW_TEST_BUILDS:-release asan fuzz}"
LOGDIR=$(mktemp -d "${TMPDIR:-/tmp}/ssw-test-logs.XXXXXX")
START=$SECONDS
failed=0
summary=()

step() { printf '\n======== %s\n' "$*"; }

if [ "${SSW_SKIP_SETUP:-0}" != 1 ]; then
  step "setup (scripts/setup.sh)"
  bash scripts/setup.sh || { echo "test.sh: setup.sh failed"; exit 1; }
fi

step "build (scripts/build.sh ${BUILDS[*]})"
if ! bash scripts/build.sh "${BUILDS[@]}"; then
  echo "test.sh: build failed"
  exit 1
fi

# run_ctest NAME DIR [CTEST-ARGS…]
run_ctest() {
  local name=$1 dir=$2; shift 2
  local log="$LOGDIR/$name.log" rc
  step "ctest: $name ($dir)"
  (cd "$dir" && ctest --output-on-failure -j "$JOBS" "$@") 2>&1 | tee "$log"
  rc=${PIPESTATUS[0]}
  [ "$rc" = 0 ] || failed=1
  local lines
  lines=$(grep -E 'tests passed|tests failed out of|Total Test time|No tests were found' "$log")
  [ -n "$lines" ] || lines="ctest exited with status $rc"
  summary+=("[$name] ${lines//$'\n'/$'\n'"[$name] "}")
  if grep -q 'The following tests FAILED' "$log"; then
    summary+=("$(sed -n '/The following tests FAILED/,$p' "$log" | grep -E '^\s+[0-9]+ - ' | sed "s/^/[$name] /")")
  fi
}

for b in "${BUILDS[@]}"; do
  case "$b" in
    release) run_ctest release "$SSW_BUILD_DIR" ;;
    asan)
      # Unit tests keep ASan's leak checker. The integration tests preload the
      # sanitizer runtimes + library into real programs (python, curl, socat),
      # which leak at exit: tests/integration/lib.sh computes SSW_PRELOAD and sets
      # ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 for them.
      # The differential tester runs against the release library only: its
      # seeds compare semantics, which the sanitizer build shares, and under
      # ASan they would double CI's time (sem and t_semantics still run here).
      # The benchmark tests (bench --load, bench over fabric, the plot) run
      # the paths other integration tests run here, for a minute and a half
      # of CI's 20: the release build runs them.
      run_ctest asan "$SSW_ASAN_DIR" -E '^diff\.|^integ\.t_(bench_load|bench_plot|fabric_bench)$'
      ;;
    fuzz)
      if [ -f "$SSW_FUZZ_DIR/CMakeCache.txt" ]; then
        run_ctest fuzz "$SSW_FUZZ_DIR" -R '^fuzz\.'
      else
        summary+=("[fuzz] skipped: no fuzz build (clang missing)")
      fi
      ;;
  esac
done

if [ $failed = 0 ]; then verdict="ALL PASSED"; else verdict="FAILURES"; fi
step "summary: $verdict ($(( SECONDS - START )) s, logs in $LOGDIR)"
printf '%s\n' "${summary[@]}"
exit $failed
