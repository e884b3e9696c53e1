#!/usr/bin/env bash
# setup.sh — install the Debian 12 packages sockswitch needs to build, test and benchmark.
set -euo pipefail
if [ "$(id -u)" != 0 ]; then SUDO=sudo; else SUDO=; fi
export DEBIAN_FRONTEND=noninteractive
PKGS=(
  build-essential cmake pkg-config clang libclang-rt-14-dev   # compilers, sanitizers, libFuzzer
  libcmocka-dev                                               # unit tests
  libfabric-dev rdma-core                                     # fabric provider (SSW_FABRIC=OFF builds without)
  python3 socat curl iproute2 procps util-linux strace        # integration tests
  redis-server redis-tools iperf3 sockperf                    # real programs under the switch
  nginx-light apache2-utils memcached postgresql              # real programs under the switch
  gnuplot-nox                                                 # bench --plot
)
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
# redis-server's, nginx's, memcached's and postgresql's packages start system
# instances; the tests run their own.
if command -v systemctl >/dev/null 2>&1; then
  $SUDO systemctl disable --now redis-server postgresql >/dev/null 2>&1 || true
  $SUDO systemctl disable --now nginx memcached >/dev/null 2>&1 || true
fi
