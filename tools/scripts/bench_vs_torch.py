#!/usr/bin/python3
"""ddpkit's DDP step against PyTorch's, same model, same loop, same world (gloo, CPU).

Runs, for each configuration, `ddpkit train --backend gloo` under `ddpkit launch` and an
equivalent torch.nn.parallel.DistributedDataParallel job (torch.multiprocessing, gloo), and
prints both median step times and their ratio. Each step: zero grads (to none), forward,
mean cross-entropy, backward (DDP allreduces), SGD step. One compute thread per rank on both
sides, so neither oversubscribes the cores.

Needs Debian's python3-torch (apt-get install python3-torch); it is an oracle for developers,
not a requirement of ddpkit's build or CI. Usage: tools/scripts/bench_vs_torch.py [--steps N]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import torch_mlp

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DDPKIT = os.path.join(ROOT, "build", "bin", "ddpkit")

CONFIGS = [  # (model widths, batch per rank, world size, target ratio from the reducer issue)
    ([784, 2048, 2048, 10], 64, 2, 0.7),
    ([64] + [128] * 8 + [10], 32, 2, 0.3),
]


def ddpkit_step_ms(widths, batch, world, steps):
    spec = "mlp:" + ",".join(map(str, widths))
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1")
    out = subprocess.run(
        [DDPKIT, "launch", "--standalone", "--nproc-per-node", str(world), "--",
         DDPKIT, "train", "--backend", "gloo", "--model", spec, "--batch-size", str(batch),
         "--steps", str(steps), "--json"],
        env=env, check=True, capture_output=True, text=True).stdout
    # The launcher prefixes each line with "[rank r] "; rank 0 prints the report.
    body = "\n".join(line.split("] ", 1)[1] for line in out.splitlines()
                     if line.startswith("[rank 0] "))
    return json.loads(body)["median_step_ms"]


def torch_worker(rank, world, widths, batch, steps, port, result_path):
    import torch
    import torch.distributed as dist
    torch.set_num_threads(1)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    model = torch.nn.parallel.DistributedDataParallel(torch_mlp.sequential(widths))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    gen = torch.Generator().manual_seed(rank)
    x = torch.randn(batch, widths[0], generator=gen)
    y = torch.randint(0, widths[-1], (batch,), generator=gen)
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
        times.append((time.perf_counter() - start) * 1e3)
    if rank == 0:
        with open(result_path, "w") as f:
            json.dump(statistics.median(times[2:]), f)
    dist.destroy_process_group()


def torch_step_ms(widths, batch, world, steps):
    import torch.multiprocessing as mp
    with tempfile.NamedTemporaryFile(suffix=".json") as result:
        port = 29500 + os.getpid() % 1000
        mp.spawn(torch_worker, args=(world, widths, batch, steps, port, result.name), nprocs=world)
        with open(result.name) as f:
            return json.load(f)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=30)
    args = parser.parse_args()
    try:
        import torch  # noqa: F401
    except ImportError:
        sys.exit("bench_vs_torch: PyTorch is not installed (apt-get install python3-torch)")
    if not os.path.exists(DDPKIT):
        sys.exit(f"bench_vs_torch: {DDPKIT} not found; build first (tools/scripts/build.sh)")
    print(f"{'model':32} {'batch':>5} {'world':>5} {'ddpkit ms':>10} {'torch ms':>10} "
          f"{'ratio':>7} {'target':>7}")
    for widths, batch, world, target in CONFIGS:
        mine = ddpkit_step_ms(widths, batch, world, args.steps)
        theirs = torch_step_ms(widths, batch, world, args.steps)
        spec = "-".join(map(str, widths))
        print(f"{spec:32} {batch:5d} {world:5d} {mine:10.3f} {theirs:10.3f} "
              f"{mine / theirs:7.2f} {'<= ' + str(target):>7}")


if __name__ == "__main__":
    main()
