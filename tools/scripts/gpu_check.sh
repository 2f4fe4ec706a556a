#!/usr/bin/env bash
# The GPU checks, for a machine with an NVIDIA GPU but none of ddpkit's Debian packages (a lent
# GPU machine, a cluster node). Build and pack here, carry the bundle, run this there:
#
#   here:   tools/bundle.sh --tar build/bin/{ddpkit,cuda_test,cuda_reducer_test,nccl_test,cuda_tools_test}
#   there:  tools/scripts/gpu_check.sh [BUNDLE_DIR] [OUT_DIR]    (default build/bundle, .)
#
# Runs the gpu-labelled test binaries, `ddpkit train` on the GPU against the same run on the
# CPU (4 threads ranks), NCCL world 1 through `ddpkit launch`, checkpoints and join and
# contrastive on the GPU, the allreduce benchmark on both GPU backends, a traced GPU run drawn
# as a timeline, DDP on the GPU against PyTorch on the GPU (tools/scripts/check_gpu_torch.py),
# and ddpkit's DDP step against PyTorch's (tools/scripts/bench_gpu_vs_torch.py).
# Logs and pictures go to OUT_DIR.
set -uo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
bundle="${1:-$root/build/bundle}"
out="${2:-.}"
mkdir -p "$out"
if [ ! -d "$bundle" ] && [ -f "$bundle.tar.gz" ]; then
  tar -C "$(dirname "$bundle")" -xzf "$bundle.tar.gz"
fi
# shellcheck source=/dev/null
source "$bundle/env.sh"
failed=0
step() {
  echo "== $*" >&2
  "$@" || { echo "FAILED: $*" >&2; failed=1; }
}

nvidia-smi -L
for t in cuda_test cuda_reducer_test nccl_test cuda_tools_test; do
  step "$t" --gtest_brief=1
done

# The same training on the CPU and on one GPU (threads ranks, each on its own stream): the
# losses agree to float32 rounding (cuBLAS/cuDNN against OpenBLAS/oneDNN). RTOL bounds the
# largest loss difference over the run, relative to the loss.
same_on_cpu_and_gpu() {  # NAME RTOL TRAIN-ARGS...
  local name="$1" rtol="$2"
  shift 2
  step ddpkit train "$@" --json >"$out/${name}_cpu.json"
  step ddpkit train "$@" --json --device cuda >"$out/${name}_gpu.json"
  python3 - "$name" "$rtol" "$out/${name}_cpu.json" "$out/${name}_gpu.json" <<'PY' || failed=1
import json, sys
name, rtol = sys.argv[1], float(sys.argv[2])
cpu, gpu = (json.load(open(p)) for p in sys.argv[3:5])
worst = max(abs(a - b) / max(abs(a), 1e-12) for a, b in zip(cpu["losses"], gpu["losses"]))
print(f"{name} cpu vs cuda: final loss {cpu['losses'][-1]:.6f} vs {gpu['losses'][-1]:.6f}, "
      f"largest relative loss difference over {len(cpu['losses'])} steps {worst:.2e} "
      f"(bound {rtol:.0e}), accuracy {cpu['final_accuracy']:.4f} vs {gpu['final_accuracy']:.4f}")
sys.exit(0 if worst < rtol else 1)
PY
}
same_on_cpu_and_gpu train 1e-4 --model mlp:32,64,64,10 --world-size 4 --steps 40
# The vision ops (cuDNN conv2d, batch_norm and pool kernels), both ResNet stems, and the
# transformer's (embedding, layer_norm, attention, GELU) on a GPU.
same_on_cpu_and_gpu resnet 1e-3 --world-size 2 --model resnet:1,1,1,1,width=8,in=3,classes=10 \
  --steps 12
same_on_cpu_and_gpu resnet_small 1e-3 --model resnet:1,1,1,1,width=8,in=3,classes=10,stem=small \
  --steps 12
same_on_cpu_and_gpu gpt 1e-3 --world-size 2 --model gpt:layers=2,heads=2,dim=32,ctx=16,vocab=64 \
  --steps 12

step ddpkit launch --standalone --nproc-per-node 1 -- \
  ddpkit train --backend nccl --device cuda --steps 20
step ddpkit train --device cuda --world-size 2 --steps 12 --checkpoint-dir "$out/ckpt" \
  --checkpoint-every 5
step ddpkit join --inputs 5,8,3,6 --device cuda
step ddpkit contrastive --device cuda --world-size 4 --steps 100
step ddpkit launch --standalone --nproc-per-node 1 -- \
  ddpkit bench allreduce --backend nccl --device cuda --max-bytes $((256 << 20))
step ddpkit bench allreduce --backend threads --world-size 4 --device cuda --max-bytes $((256 << 20))
step ddpkit train --device cuda --world-size 2 --model mlp:1024,4096,4096,1024 --batch-size 256 \
  --steps 12 --bucket-cap-mb 8 --trace "$out/gpu_trace.json"
step ddpkit trace svg "$out/gpu_trace.json" --out "$out/gpu_timeline.svg" --iterations 6:8
step ddpkit trace stats "$out/gpu_trace.json"
step python3 "$root/tools/scripts/check_gpu_torch.py"
step python3 "$root/tools/scripts/bench_gpu_vs_torch.py"
echo "gpu_check: $([ $failed = 0 ] && echo all passed || echo SOME FAILED)"
exit $failed
