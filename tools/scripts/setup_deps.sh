#!/usr/bin/env bash
# Installs the Debian 12 packages ddpkit builds against, skipping those already present.
#   setup_deps.sh build   what building build/bin/ddpkit needs (tools/demo.sh)
#   setup_deps.sh [test]  that and what the tests, benchmarks, format check and fuzzers need
# Run by tools/scripts/build.sh (its DDPKIT_DEPS picks the set); safe to run on its own.
set -euo pipefail

# What building build/bin/ddpkit needs (tools/demo.sh installs only these) ...
DDPKIT_BUILD_PACKAGES=(
  build-essential cmake ninja-build pkg-config
  libabsl-dev                          # flags, strings, containers, Status
  libprotobuf-dev protobuf-compiler    # typed reports
  nlohmann-json3-dev                   # safetensors headers
  zlib1g-dev                           # checkpoint checksums (crc32)
  libopenblas-dev                      # float64 GEMMs, LAPACK (autograd/gemm.h)
  libdnnl-dev                          # float32 GEMMs: oneDNN (autograd/gemm.h)
  libgloo-dev                          # the gloo backend
  libopenmpi-dev openmpi-bin           # the mpi backend, and mpirun for its tests
  jq                                   # the README tour's `train --json | jq`
)
# ... and what the test suite adds (tools/test.sh).
DDPKIT_TEST_PACKAGES=(
  libgtest-dev libgmock-dev            # tests
  libbenchmark-dev                     # benchmarks
  clang-format                         # the format check (tools/scripts/check_format.sh)
  clang libclang-rt-14-dev             # the fuzz build: clang and libFuzzer (tools/scripts/fuzz.sh)
  libomp-dev                           # ... and clang's OpenMP (autograd's elementwise loops)
  iproute2 nftables                    # the netns tests' hosts (tools/scripts/netns_hosts.sh)
  python3-sklearn                      # the tour's digits (make_digits.py), run by the tour test
)

case "${1:-test}" in
  build) DDPKIT_DEBIAN_PACKAGES=("${DDPKIT_BUILD_PACKAGES[@]}") ;;
  test) DDPKIT_DEBIAN_PACKAGES=("${DDPKIT_BUILD_PACKAGES[@]}" "${DDPKIT_TEST_PACKAGES[@]}") ;;
  *) echo "usage: setup_deps.sh [build|test]   (default: test, everything)" >&2; exit 2 ;;
esac

missing=()
for pkg in "${DDPKIT_DEBIAN_PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed'; then
    missing+=("$pkg")
  fi
done

if ((${#missing[@]})); then
  echo "ddpkit: installing missing Debian packages: ${missing[*]}" >&2
  sudo=""
  if [ "$(id -u)" -ne 0 ]; then
    if ! command -v sudo >/dev/null; then
      echo "ddpkit: need root or sudo to install: ${missing[*]}" >&2
      exit 1
    fi
    sudo="sudo"
  fi
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
