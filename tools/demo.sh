#!/usr/bin/env bash
# Builds build/bin/ddpkit — only the binary: no tests, no benchmarks, no debug information, the
# libraries' common headers precompiled (DDPKIT_LIB_PCH), and
# no CUDA unless a GPU is usable here (nvidia-smi lists one) or DDPKIT_CUDA=ON asks for it — then
# runs its main job, `ddpkit train`: DDP on 4 in-process ranks, on a model large enough for several
# gradient buckets, so the story shows the allreduce overlapping backward. Extra arguments go to
# `ddpkit train` and override the demo's (`tools/demo.sh --bucket-cap-mb 25`: one big bucket).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cuda="${DDPKIT_CUDA:-}"
if [ -z "$cuda" ]; then
  cuda=OFF
  if command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; then cuda=AUTO; fi
fi
DDPKIT_DEPS=build DDPKIT_TARGETS=ddpkit bash "$root/tools/scripts/build.sh" "$root/build" \
  -DDDPKIT_CUDA="$cuda" -DDDPKIT_BUILD_TESTS=OFF -DDDPKIT_BUILD_BENCHMARKS=OFF -DDDPKIT_DEBUG_INFO=OFF \
  -DDDPKIT_LIB_PCH=ON
exec "$root/build/bin/ddpkit" train --model mlp:256,512,512,512,512,10 --bucket-cap-mb 0.5 \
  --steps 30 "$@"
