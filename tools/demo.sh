#!/usr/bin/env bash
# Builds ddpkit and runs its main job: `ddpkit train` on the default synthetic task.
# Extra arguments are passed to `ddpkit train`.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
bash "$root/tools/scripts/build.sh" "$root/build"
exec "$root/build/bin/ddpkit" train "$@"
