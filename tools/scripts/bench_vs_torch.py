#!/usr/bin/python3
"""ddpkit's DDP step against PyTorch's, same model, same loop, same world, interleaved.

For each workload (an MLP and a batch per rank) and each way of running it, the script runs
ddpkit and PyTorch back to back, --repeats times, and prints the median step time of each run,
then per row: the median over the repeats, its range, and the ratio of the medians.

  world 1   `ddpkit train --world-size 1` (DDP on one rank) vs PyTorch's plain step (no DDP)
  threads   `ddpkit train --world-size 2` (two rank threads) vs PyTorch DDP, 2 processes, gloo
  gloo      `ddpkit train --backend gloo` under `ddpkit launch` vs the same PyTorch job

Each step: zero grads (to none), forward, mean cross-entropy, backward (DDP allreduces), SGD
step. ddpkit runs with its defaults (the thread budget: cores / ranks BLAS threads per rank);
PyTorch runs in both its default threads and one thread per rank, and the faster setting's
figures are the ones compared.

Needs Debian's python3-torch (apt-get install python3-torch); it is an oracle for developers,
not a requirement of ddpkit's build or CI. Usage:
  tools/scripts/bench_vs_torch.py [--repeats 3] [--markdown]
"""
import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time

import torch_mlp

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DDPKIT = os.path.join(ROOT, "build", "bin", "ddpkit")

WORKLOADS = [  # (name, widths, batch per rank, steps)
    ("MLP 784-2048-2048-10, batch 64", [784, 2048, 2048, 10], 64, 30),
    ("MLP 64-128x8-10, batch 32", [64] + [128] * 8 + [10], 32, 300),
]
MODES = ["world 1", "threads", "gloo"]


def ddpkit_step_ms(widths, batch, steps, mode):
    spec = "mlp:" + ",".join(map(str, widths))
    train = [DDPKIT, "train", "--model", spec, "--batch-size", str(batch), "--steps", str(steps),
             "--json"]
    if mode == "gloo":
        command = [DDPKIT, "launch", "--standalone", "--nproc-per-node", "2", "--"] + train + [
            "--backend", "gloo"]
    else:
        command = train + ["--world-size", "1" if mode == "world 1" else "2"]
    out = subprocess.run(command, check=True, capture_output=True, text=True).stdout
    if mode == "gloo":  # the launcher prefixes each line with "[rank r] "; rank 0 reports
        out = "\n".join(line.split("] ", 1)[1] for line in out.splitlines()
                        if line.startswith("[rank 0] "))
    return json.loads(out)["median_step_ms"]


def torch_loop(model, widths, batch, steps, seed):
    import torch
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(batch, widths[0], generator=gen)
    y = torch.randint(0, widths[-1], (batch,), generator=gen)
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times[2:])


def torch_worker(rank, world, widths, batch, steps, port, threads, result_path):
    import torch
    import torch.distributed as dist
    if threads:
        torch.set_num_threads(threads)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    model = torch.nn.parallel.DistributedDataParallel(torch_mlp.sequential(widths))
    median = torch_loop(model, widths, batch, steps, rank)
    if rank == 0:
        with open(result_path, "w") as f:
            json.dump(median, f)
    dist.destroy_process_group()


def torch_step_ms(widths, batch, steps, mode, threads):
    """PyTorch's median step; threads 0: its default thread count."""
    import torch
    import torch.multiprocessing as mp
    if mode == "world 1":
        default = torch.get_num_threads()
        torch.set_num_threads(threads or default)
        try:
            return torch_loop(torch_mlp.sequential(widths), widths, batch, steps, 0)
        finally:
            torch.set_num_threads(default)
    with tempfile.NamedTemporaryFile(suffix=".json") as result:
        port = 29500 + (os.getpid() + int(time.time())) % 1000
        mp.spawn(torch_worker, args=(2, widths, batch, steps, port, threads, result.name),
                 nprocs=2)
        with open(result.name) as f:
            return json.load(f)


def summary(values):
    return statistics.median(values), min(values), max(values)


def machine():
    model = platform.processor() or "unknown CPU"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return f"{model}, {os.cpu_count()} cores"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--markdown", action="store_true", help="also print a markdown table")
    args = parser.parse_args()
    try:
        import torch
    except ImportError:
        sys.exit("bench_vs_torch: PyTorch is not installed (apt-get install python3-torch)")
    if not os.path.exists(DDPKIT):
        sys.exit(f"bench_vs_torch: {DDPKIT} not found; build first (tools/scripts/build.sh)")
    print(f"# {time.strftime('%Y-%m-%d')}, {machine()}, PyTorch {torch.__version__}, "
          f"{args.repeats} interleaved repeats; step medians in ms")
    rows = []
    for name, widths, batch, steps in WORKLOADS:
        for mode in MODES:
            runs = {"ddpkit": [], "torch default": [], "torch 1 thread": []}
            for _ in range(args.repeats):
                runs["ddpkit"].append(ddpkit_step_ms(widths, batch, steps, mode))
                runs["torch default"].append(torch_step_ms(widths, batch, steps, mode, 0))
                runs["torch 1 thread"].append(torch_step_ms(widths, batch, steps, mode, 1))
            setting = min(("torch default", "torch 1 thread"),
                          key=lambda k: statistics.median(runs[k]))
            mine, theirs = summary(runs["ddpkit"]), summary(runs[setting])
            rows.append((name, mode, mine, theirs, setting))
            print(f"{name:32} {mode:8} ddpkit {mine[0]:8.3f} ({mine[1]:.3f}-{mine[2]:.3f})  "
                  f"{setting:14} {theirs[0]:8.3f} ({theirs[1]:.3f}-{theirs[2]:.3f})  "
                  f"ratio {mine[0] / theirs[0]:.2f}", flush=True)
    if args.markdown:
        print("\n| workload | run | ddpkit ms (range) | PyTorch ms (range) | PyTorch setting | "
              "ratio |\n|---|---|---|---|---|---|")
        for name, mode, mine, theirs, setting in rows:
            print(f"| {name} | {mode} | {mine[0]:.3f} ({mine[1]:.3f}-{mine[2]:.3f}) | "
                  f"{theirs[0]:.3f} ({theirs[1]:.3f}-{theirs[2]:.3f}) | "
                  f"{setting.removeprefix('torch ')} | {mine[0] / theirs[0]:.2f} |")


if __name__ == "__main__":
    main()
