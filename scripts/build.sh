#!/usr/bin/env bash
# build.sh — configure and build sockswitch.
#
#   bash scripts/build.sh [release] [asan] [fuzz] [package]   (default: the first three)
#
#   release  build/       the library and CLI users run (build/libsockswitch.so, build/sockswitch),
#                         configured for /usr (where the package installs; `cmake --install build
#                         --prefix DIR` installs elsewhere)
#   asan     build-asan/  the same with AddressSanitizer + UndefinedBehaviorSanitizer (-DSSW_SANITIZE=ON)
#   fuzz     build-fuzz/  libFuzzer targets, built with clang (-DSSW_FUZZ=ON); skipped without clang
#   package  build/       the release build, then its Debian package (cpack -G DEB):
#                         build/sockswitch_VERSION_ARCH.deb (cmake/package.cmake)
#
# The fabric provider needs libfabric's headers (libfabric-dev): these builds
# require them (-DSSW_FABRIC=ON) unless SSW_FABRIC=OFF (no fabric provider;
# the core, shm and their tests need no libfabric) or AUTO (built if found).
# Directories can be moved with SSW_BUILD_DIR, SSW_ASAN_DIR, SSW_FUZZ_DIR;
# parallelism with SSW_JOBS (default 2). Re-running only rebuilds what changed.
set -euo pipefail
cd "$(dirname "$0")/.."
SRC=$PWD
JOBS=${SSW_JOBS:-2}
BUILD_DIR=${SSW_BUILD_DIR:-$SRC/build}
ASAN_DIR=${SSW_ASAN_DIR:-$SRC/build-asan}
FUZZ_DIR=${SSW_FUZZ_DIR:-$SRC/build-fuzz}
FABRIC=${SSW_FABRIC:-ON}

want=("$@")
[ ${#want[@]} -gt 0 ] || want=(release asan fuzz)

step() { printf '\n=== %s\n' "$*"; }

build() { # DIR CMAKE-ARGS…
  local dir=$1; shift
  mkdir -p "$dir"
  cmake -S "$SRC" -B "$dir" -DSSW_FABRIC="$FABRIC" "$@" >"$dir/configure.log" 2>&1 || {
    cat "$dir/configure.log"; echo "build.sh: configure of $dir failed" >&2; return 1; }
  cmake --build "$dir" -j "$JOBS"
}

for w in "${want[@]}"; do
  case "$w" in
    release|package)
      step "release build → $BUILD_DIR"
      build "$BUILD_DIR" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_INSTALL_PREFIX=/usr
      if [ "$w" = package ]; then
        step "Debian package (cpack -G DEB) → $BUILD_DIR"
        (cd "$BUILD_DIR" && cpack -G DEB >"$BUILD_DIR/package.log" 2>&1) || {
          cat "$BUILD_DIR/package.log"; echo "build.sh: cpack failed" >&2; exit 1; }
        grep -o "package: .*\.deb generated" "$BUILD_DIR/package.log"
      fi
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
    *) echo "build.sh: unknown build '$w' (release, asan, fuzz, package)" >&2; exit 2 ;;
  esac
done
step "build done"
