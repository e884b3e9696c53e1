#!/usr/bin/env bash
# build.sh — configure and build sockswitch.
#
#   bash scripts/build.sh [release] [asan] [fuzz]     (default: all three)
#
#   release  build/       the library and CLI users run (build/libsockswitch.so, build/sockswitch)
#   asan     build-asan/  the same with AddressSanitizer + UndefinedBehaviorSanitizer (-DSSW_SANITIZE=ON)
#   fuzz     build-fuzz/  libFuzzer targets, built with clang (-DSSW_FUZZ=ON); skipped without clang
#
# Directories can be moved with SSW_BUILD_DIR, SSW_ASAN_DIR, SSW_FUZZ_DIR;
# parallelism with SSW_JOBS (default 2). Re-running only rebuilds what changed.
set -euo pipefail
cd "$(dirname "$0")/.."
SRC=$PWD
JOBS=${SSW_JOBS:-2}
BUILD_DIR=${SSW_BUILD_DIR:-$SRC/build}
ASAN_DIR=${SSW_ASAN_DIR:-$SRC/build-asan}
FUZZ_DIR=${SSW_FUZZ_DIR:-$SRC/build-fuzz}

want=("$@")
[ ${#want[@]} -gt 0 ] || want=(release asan fuzz)

step() { printf '\n=== %s\n' "$*"; }

build() { # DIR CMAKE-ARGS…
  local dir=$1; shift
  mkdir -p "$dir"
  cmake -S "$SRC" -B "$dir" "$@" >"$dir/configure.log" 2>&1 || {
    cat "$dir/configure.log"; echo "build.sh: configure of $dir failed" >&2; return 1; }
  cmake --build "$dir" -j "$JOBS"
}

for w in "${want[@]}"; do
  case "$w" in
    release)
      step "release build → $BUILD_DIR"
      build "$BUILD_DIR" -DCMAKE_BUILD_TYPE=RelWithDebInfo
      ;;
    asan)
      step "ASan+UBSan build → $ASAN_DIR"
      # Debug keeps assert() on; -O1 keeps the integration tests quick
      build "$ASAN_DIR" -DCMAKE_BUILD_TYPE=Debug -DCMAKE_C_FLAGS_DEBUG="-g -O1" -DSSW_SANITIZE=ON
      ;;
    fuzz)
      if command -v clang >/dev/null 2>&1; then
        step "fuzz targets (clang, libFuzzer) → $FUZZ_DIR"
        build "$FUZZ_DIR" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_COMPILER=clang -DSSW_FUZZ=ON
      else
        step "fuzz targets skipped: clang not installed (bash scripts/setup.sh installs it)"
      fi
      ;;
    *) echo "build.sh: unknown build '$w' (release, asan, fuzz)" >&2; exit 2 ;;
  esac
done
step "build done"
