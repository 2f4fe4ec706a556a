#!/usr/bin/env python3
"""ddpkit's DDP step on a GPU against PyTorch's DDP (NCCL, world 1), same model and loop.

For one model (default: an MLP of 4 hidden layers of 4096, about 59 M parameters, batch 256;
or any `resnet:` or `gpt:` spec, torch_zoo.py's twins on the PyTorch side), float32:
runs `ddpkit train --backend nccl --device cuda` under `ddpkit launch --nproc-per-node 1`,
and torch.nn.parallel.DistributedDataParallel on NCCL with the same step (zero grads to none,
forward, mean cross-entropy, backward with the bucket allreduces, SGD, the loss read on the host).
Repeats both `--repeats` times, interleaved, and prints each side's median step time, the range
of the per-run medians, and the ratio ddpkit / torch. For the lent GPU machine: `ddpkit` is
found on PATH (source the bundle's env.sh, tools/bundle.sh) or in build/bin.

ddpkit reads a ResNet's or GPT's batch from a safetensors file of random rows this script writes
(bench_vs_torch.write_data). PyTorch runs with TF32 off, as ddpkit computes (full float32
GEMMs and convolutions); its cuDNN picks algorithms by its own heuristics (benchmark off), as
ddpkit's does, but ddpkit asks for deterministic ones.

Usage: tools/scripts/bench_gpu_vs_torch.py [--model SPEC] [--batch 256] [--side 32] [--steps 40]
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import tempfile
import time

import bench_vs_torch
import torch_zoo

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def ddpkit_binary():
    return shutil.which("ddpkit") or os.path.join(ROOT, "build", "bin", "ddpkit")


def ddpkit_step_ms(spec, batch, steps, backend, data):
    ddpkit = ddpkit_binary()
    train = [ddpkit, "train", "--device", "cuda", "--model", spec, "--batch-size", str(batch),
             "--steps", str(steps), "--json"] + (["--data", data] if data else [])
    if backend == "nccl":
        cmd = [ddpkit, "launch", "--standalone", "--nproc-per-node", "1", "--"] + train + [
            "--backend", "nccl"]
    else:
        cmd = train + ["--world-size", "1"]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    lines = [line.split("] ", 1)[1] if line.startswith("[rank 0] ") else line
             for line in out.splitlines()]
    return json.loads("\n".join(lines))["median_step_ms"]


def torch_step_ms(spec, batch, side, steps):
    import torch
    import torch.distributed as dist
    torch.backends.cuda.matmul.allow_tf32 = False  # ddpkit's GEMMs and convolutions are float32
    torch.backends.cudnn.allow_tf32 = False
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", str(29600 + os.getpid() % 1000))
    if not dist.is_initialized():
        dist.init_process_group("nccl", rank=0, world_size=1)
    torch.manual_seed(0)
    model = torch.nn.parallel.DistributedDataParallel(torch_zoo.model_of(spec).cuda(),
                                                      device_ids=[0])
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = (t.cuda() for t in torch_zoo.batch_of(spec, batch, side, torch.Generator()))
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        logits = model(x)
        loss = torch.nn.functional.cross_entropy(logits.view(-1, logits.size(-1)), y.view(-1))
        loss.backward()
        opt.step()
        loss.item()  # ddpkit reads each step's loss on the host too
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times[3:])


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="mlp:1024,4096,4096,4096,4096,1024")
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--side", type=int, default=32, help="a ResNet's image size")
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    family = torch_zoo.parse(args.model)[0]
    side = args.side if family == "resnet" else 0
    params = sum(p.numel() for p in torch_zoo.model_of(args.model).parameters())
    runs = {"ddpkit nccl": [], "ddpkit threads": [], "torch nccl": []}
    with tempfile.TemporaryDirectory() as folder:
        data = None
        if family != "mlp":
            data = os.path.join(folder, "rows.safetensors")
            bench_vs_torch.write_data(data, args.model, args.batch, side)
        for _ in range(args.repeats):
            for backend in ("nccl", "threads"):
                runs[f"ddpkit {backend}"].append(
                    ddpkit_step_ms(args.model, args.batch, args.steps, backend, data))
            runs["torch nccl"].append(torch_step_ms(args.model, args.batch, side, args.steps))
    torch_ms = statistics.median(runs["torch nccl"])
    shape = f", {side}x{side} images" if side else ""
    print(f"model {args.model} ({params / 1e6:.1f} M parameters), batch {args.batch}{shape}, "
          f"{args.steps} steps, {args.repeats} runs each")
    print(f"{'run':<16}{'median ms':>12}{'range':>20}{'vs torch':>10}")
    for name, values in runs.items():
        med = statistics.median(values)
        print(f"{name:<16}{med:>12.3f}{f'{min(values):.3f}-{max(values):.3f}':>20}"
              f"{med / torch_ms:>9.2f}x")
    print(json.dumps({k: v for k, v in runs.items()}))


if __name__ == "__main__":
    main()
