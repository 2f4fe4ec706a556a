#!/usr/bin/env bash
# Configures and builds ddpkit into a build folder with all cores.
#   tools/scripts/build.sh [BUILD_DIR [extra cmake args...]]     (default BUILD_DIR: build)
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
build_dir="${1:-$root/build}"
shift || true
bash "$root/tools/scripts/setup_deps.sh"
cmake -S "$root" -B "$build_dir" -G Ninja "$@" >/dev/null
cmake --build "$build_dir" --parallel "$(nproc)"
