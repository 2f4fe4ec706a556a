#!/usr/bin/env bash
# Configures and builds ddpkit into a build folder with all cores.
#   tools/scripts/build.sh [BUILD_DIR [extra cmake args...]]     (default BUILD_DIR: build)
# Environment:
#   DDPKIT_DEPS=build|test   which Debian packages to make sure of first (setup_deps.sh; default test)
#   DDPKIT_TARGETS="a b"     build only these targets (default: everything the configuration has)
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
build_dir="${1:-$root/build}"
shift || true
bash "$root/tools/scripts/setup_deps.sh" "${DDPKIT_DEPS:-test}"
cmake -S "$root" -B "$build_dir" -G Ninja "$@" >/dev/null
targets=()
for target in ${DDPKIT_TARGETS:-}; do targets+=(--target "$target"); done
cmake --build "$build_dir" --parallel "$(nproc)" "${targets[@]}"
