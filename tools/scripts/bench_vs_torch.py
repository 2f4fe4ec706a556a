#!/usr/bin/python3
"""ddpkit's DDP step against PyTorch's, same model, same loop, same world, interleaved.

For each workload (an MLP and a batch per rank) and each way of running it, the script runs
ddpkit and PyTorch back to back, --repeats times, and prints the median step time of each run,
then per row: the median over the repeats, its range, and the ratio of the medians.

  world 1   `ddpkit train --world-size 1` (DDP on one rank) vs PyTorch's plain step (no DDP)
  threads   `ddpkit train --world-size 2` (two rank threads)     vs PyTorch DDP, 2 processes, gloo
  gloo      `ddpkit train --backend gloo` under `ddpkit launch`  vs the same PyTorch job
  mpi       `ddpkit train --backend mpi` under `mpirun -np 2`    vs the same PyTorch job (Debian's
            PyTorch has no MPI backend; its CPU users run gloo)

Each step: zero grads (to none), forward, mean cross-entropy, backward (DDP's allreduces), SGD
step. ddpkit runs with its defaults (the thread budget, oneDNN for float32 GEMMs). PyTorch runs in
three settings and the fastest is the one compared:
  default   its own thread count, Debian's OpenBLAS as it detects this CPU
  1 thread  torch.set_num_threads(1) per process
  avx512    1 thread per process, and OPENBLAS_CORETYPE=SKYLAKEX: OpenBLAS 0.3.21 does not know
            newer AMD EPYCs and falls back to its AVX2 kernels; this forces its AVX-512 ones

Needs Debian's python3-torch (apt-get install python3-torch) and, for the mpi rows, mpirun
(Debian's openmpi-bin); an oracle for developers, not part of ddpkit's build or CI. Usage:
  tools/scripts/bench_vs_torch.py [--repeats 3] [--markdown] [--modes world1,threads,gloo,mpi]
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
MODES = {"world1": "world 1", "threads": "threads", "gloo": "gloo", "mpi": "mpi"}
TORCH_SETTINGS = {  # name -> (threads per process, extra environment)
    "default": (0, {}),
    "1 thread": (1, {}),
    "avx512": (1, {"OPENBLAS_CORETYPE": "SKYLAKEX"}),
}
MPI_ENV = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}


def ddpkit_step_ms(widths, batch, steps, mode):
    spec = "mlp:" + ",".join(map(str, widths))
    train = [DDPKIT, "train", "--model", spec, "--batch-size", str(batch), "--steps", str(steps),
             "--json"]
    if mode == "mpi":  # each rank's stdout to its own file: mpirun would split the long line
        with tempfile.TemporaryDirectory() as out:
            subprocess.run(["mpirun", "-np", "2", "--output-filename", out] + train +
                           ["--backend", "mpi"], check=True, capture_output=True,
                           env={**os.environ, **MPI_ENV})
            with open(os.path.join(out, "1", "rank.0", "stdout")) as f:
                return json.load(f)["median_step_ms"]
    if mode == "gloo":
        command = [DDPKIT, "launch", "--standalone", "--nproc-per-node", "2", "--"] + train + [
            "--backend", "gloo"]
    else:
        command = train + ["--world-size", "1" if mode == "world1" else "2"]
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


def torch_ddp_rank(rank, world, widths, batch, steps, port, threads, result_path):
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


def torch_worker(mode, widths, batch, steps, threads):
    """Runs in a fresh interpreter (so OPENBLAS_CORETYPE is read at load); prints the median."""
    import torch
    import torch.multiprocessing as mp
    if mode == "world1":
        if threads:
            torch.set_num_threads(threads)
        print(torch_loop(torch_mlp.sequential(widths), widths, batch, steps, 0))
        return
    with tempfile.NamedTemporaryFile(suffix=".json") as result:
        port = 29500 + (os.getpid() + int(time.time())) % 1000
        mp.spawn(torch_ddp_rank, args=(2, widths, batch, steps, port, threads, result.name),
                 nprocs=2)
        with open(result.name) as f:
            print(json.load(f))


def torch_step_ms(widths, batch, steps, mode, setting):
    threads, env = TORCH_SETTINGS[setting]
    command = [sys.executable, os.path.abspath(__file__), "--torch-worker", mode,
               ",".join(map(str, widths)), str(batch), str(steps), str(threads)]
    out = subprocess.run(command, check=True, capture_output=True, text=True,
                         env={**os.environ, **env}).stdout
    return float(out.strip().splitlines()[-1])


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
    if len(sys.argv) > 1 and sys.argv[1] == "--torch-worker":
        mode, widths, batch, steps, threads = sys.argv[2:7]
        torch_worker(mode, [int(w) for w in widths.split(",")], int(batch), int(steps),
                     int(threads))
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--markdown", action="store_true", help="also print a markdown table")
    parser.add_argument("--modes", default=",".join(MODES), help="a subset of " + ",".join(MODES))
    args = parser.parse_args()
    try:
        import torch
    except ImportError:
        sys.exit("bench_vs_torch: PyTorch is not installed (apt-get install python3-torch)")
    if not os.path.exists(DDPKIT):
        sys.exit(f"bench_vs_torch: {DDPKIT} not found; build first (tools/scripts/build.sh)")
    modes = args.modes.split(",")
    if any(m not in MODES for m in modes):
        sys.exit(f"bench_vs_torch: --modes takes a subset of {','.join(MODES)}")
    print(f"# {time.strftime('%Y-%m-%d')}, {machine()}, PyTorch {torch.__version__}, "
          f"{args.repeats} interleaved repeats; step medians in ms")
    rows = []
    for name, widths, batch, steps in WORKLOADS:
        for mode in modes:
            runs = {"ddpkit": []}
            runs.update({setting: [] for setting in TORCH_SETTINGS})
            for _ in range(args.repeats):
                runs["ddpkit"].append(ddpkit_step_ms(widths, batch, steps, mode))
                for setting in TORCH_SETTINGS:
                    runs[setting].append(torch_step_ms(widths, batch, steps, mode, setting))
            setting = min(TORCH_SETTINGS, key=lambda k: statistics.median(runs[k]))
            mine, theirs = summary(runs["ddpkit"]), summary(runs[setting])
            rows.append((name, MODES[mode], mine, theirs, setting))
            others = "  ".join(f"{k} {statistics.median(runs[k]):.3f}" for k in TORCH_SETTINGS)
            print(f"{name:32} {MODES[mode]:8} ddpkit {mine[0]:8.3f} ({mine[1]:.3f}-{mine[2]:.3f})  "
                  f"torch[{setting}] {theirs[0]:8.3f} ({theirs[1]:.3f}-{theirs[2]:.3f})  "
                  f"ratio {mine[0] / theirs[0]:.2f}   [torch: {others}]", flush=True)
    if args.markdown:
        print("\n| workload | run | ddpkit ms (range) | PyTorch ms (range) | PyTorch setting | "
              "ratio |\n|---|---|---|---|---|---|")
        for name, mode, mine, theirs, setting in rows:
            print(f"| {name} | {mode} | {mine[0]:.3f} ({mine[1]:.3f}-{mine[2]:.3f}) | "
                  f"{theirs[0]:.3f} ({theirs[1]:.3f}-{theirs[2]:.3f}) | "
                  f"{setting} | {mine[0] / theirs[0]:.2f} |")


if __name__ == "__main__":
    main()
