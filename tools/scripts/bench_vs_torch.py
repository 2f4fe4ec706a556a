#!/usr/bin/python3
"""ddpkit's DDP step against PyTorch's, same model, same loop, same world, interleaved.

For each workload (a model spec and a batch per rank: two MLPs, a small ResNet on 8x8 and on
32x32 images, a 4-layer GPT) and each way of running it, the script runs ddpkit and PyTorch back
to back, --repeats times, and prints the median step time of each run, then per row: the median
over the repeats, its range, and the ratio of the medians.

  world 1   `ddpkit train --world-size 1` (DDP on one rank) vs PyTorch's plain step (no DDP)
  threads   `ddpkit train --world-size 2` (two rank threads)     vs PyTorch DDP, 2 processes, gloo
  gloo      `ddpkit train --backend gloo` under `ddpkit launch`  vs the same PyTorch job
  mpi       `ddpkit train --backend mpi` under `mpirun -np 2`    vs the same PyTorch job (Debian's
            PyTorch has no MPI backend; its CPU users run gloo)
  hosts     one gloo rank on each of two test hosts (network namespaces, netns_hosts.sh; run the
            script under `netns_hosts.sh run 2 ...`, as netns_vs_torch.sh does): `ddpkit launch
            --nnodes 2` inside each vs PyTorch DDP with MASTER_ADDR host 0's address and
            GLOO_SOCKET_IFNAME its eth0; one compute thread per process on both sides (each
            host's cores are the machine's); `bench allreduce` across the hosts before and after
            the rows says what the link delivered

Each step: zero grads (to none), forward, mean cross-entropy, backward (DDP's allreduces), SGD
step (mean cross-entropy over every position for the GPT). ddpkit runs with its defaults (the
thread budget, oneDNN for float32 GEMMs). The PyTorch side runs under each --torch-python
interpreter (default: this one; give it twice to compare Debian's 1.13 with a pip-installed 2.x),
each in these settings, and the fastest (interpreter, setting) is the one compared:
  default   its own thread count
  1 thread  torch.set_num_threads(1) per process
  avx512    1 thread per process, and OPENBLAS_CORETYPE=SKYLAKEX: OpenBLAS 0.3.21 does not know
            newer AMD EPYCs and falls back to its AVX2 kernels; this forces its AVX-512 ones
            (not for a PyTorch built with MKL, as pip's)
The PyTorch models are torch_zoo.py's twins of the ddpkit specs (torchvision's ResNet with
BasicBlock; nanoGPT's GPT, dropout 0, tied lm_head). ddpkit reads the ResNets' and the GPT's
rows from a small safetensors file of random images or tokens the script writes (its synthetic
images are 8x8 for the small stem, and its closing accuracy pass over 4096 synthetic rows would
take longer than the steps); PyTorch's batch is random too.

Needs Debian's python3-torch (apt-get install python3-torch) and, for the mpi rows, mpirun
(Debian's openmpi-bin); an oracle for developers, not part of ddpkit's build or CI. Usage:
  tools/scripts/bench_vs_torch.py [--repeats 3] [--markdown] [--modes world1,threads,gloo,mpi]
      [--workloads mlp-large,mlp-small,resnet8,resnet32,gpt] [--torch-settings default,...]
      [--torch-python PATH]...
"""
import argparse
import array
import json
import math
import os
import platform
import random
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import time

import torch_zoo

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DDPKIT = os.path.join(ROOT, "build", "bin", "ddpkit")

WORKLOADS = {  # key -> (name, spec, batch per rank, steps, image side or 0)
    "mlp-large": ("MLP 784-2048-2048-10, batch 64", "mlp:784,2048,2048,10", 64, 30, 0),
    "mlp-small": ("MLP 64-128x8-10, batch 32", "mlp:" + ",".join(["64"] + ["128"] * 8 + ["10"]),
                  32, 300, 0),
    "resnet8": ("ResNet 1,1,1,1 w16, 1x8x8, batch 32",
                "resnet:1,1,1,1,width=16,in=1,classes=10,stem=small", 32, 40, 8),
    "resnet32": ("ResNet 1,1,1,1 w16, 3x32x32, batch 32",
                 "resnet:1,1,1,1,width=16,in=3,classes=10,stem=small", 32, 15, 32),
    "gpt": ("GPT 4 layers, dim 128, ctx 64, batch 8", "gpt:layers=4,heads=4,dim=128,ctx=64,vocab=65",
            8, 20, 0),
}
MODES = {"world1": "world 1", "threads": "threads", "gloo": "gloo", "mpi": "mpi",
         "hosts": "2 hosts"}
TORCH_SETTINGS = {  # name -> (threads per process, extra environment)
    "default": (0, {}),
    "1 thread": (1, {}),
    "avx512": (1, {"OPENBLAS_CORETYPE": "SKYLAKEX"}),
}
RUN_TIMEOUT_S = 120  # one run; a hung rendezvous fails the row instead of the whole script
MPI_ENV = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}
HOSTS_SH = os.path.join(ROOT, "tools", "scripts", "netns_hosts.sh")
HOSTS = 2
next_port = [29700]  # a fresh port per cross-host run: no wait for the last one's TIME_WAIT


def host_addr(k):
    """Test host k's address (netns_hosts.sh)."""
    return f"10.77.0.{k + 1}"


def on_hosts(commands, env=None):
    """commands[k] inside test host k (the hosts of $DDPKIT_NETNS_PREFIX), all at once; host 0's
    stdout. Every process is killed when one fails or the run takes RUN_TIMEOUT_S."""
    procs = [subprocess.Popen([HOSTS_SH, "exec", f"h{k}"] + c, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env={**os.environ, **(env or {})})
             for k, c in enumerate(commands)]
    deadline = time.monotonic() + RUN_TIMEOUT_S
    try:
        outs = [p.communicate(timeout=max(1, deadline - time.monotonic())) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    for p, (out, err) in zip(procs, outs):
        if p.returncode:
            raise subprocess.CalledProcessError(p.returncode, p.args, out, err)
    return outs[0][0]


def ddpkit_across_hosts(args):
    """`ddpkit ARGS --backend gloo`, rank k on host k under `ddpkit launch`; rank 0's stdout."""
    port = next_port[0] = next_port[0] + 1
    env = {"OMP_NUM_THREADS": "1", "DDPKIT_STORE_TOKEN": f"bench-vs-torch-{os.getpid()}-{port}"}
    commands = [[DDPKIT, "launch", "--nnodes", str(HOSTS), "--node-rank", str(k),
                 "--master-addr", host_addr(0), "--master-port", str(port),
                 "--local-addr", host_addr(k), "--", DDPKIT] + args + ["--backend", "gloo"]
                for k in range(HOSTS)]
    out = on_hosts(commands, env)
    return "\n".join(line.split("] ", 1)[1] for line in out.splitlines()
                     if line.startswith("[rank 0] "))


def link_report():
    """What the link between the hosts delivers: `ddpkit bench allreduce` across them."""
    points = json.loads(ddpkit_across_hosts(
        ["bench", "allreduce", "--min-bytes", "4096", "--max-bytes", "16777216", "--iters", "20",
         "--warmup-iters", "3", "--json"]))["points"]
    at = {int(q["bytes"]): q for q in points}
    return (f"allreduce across the hosts: 4 KiB {at[4096]['time_us']:.0f} us, bus bandwidth "
            f"1 MiB {at[1 << 20]['busbw_gbps']:.3f} GB/s, 16 MiB {at[1 << 24]['busbw_gbps']:.3f} "
            f"GB/s")


def write_data(path, spec, rows, side):
    """A safetensors file of `rows` random rows for `spec`: float32 images x [rows, C, S, S] and
    int64 labels y [rows] for a ResNet, int64 tokens x and targets y [rows, T] for a GPT."""
    _, _, keys = torch_zoo.parse(spec)
    rng = random.Random(7)
    if side:
        shape, classes = [rows, int(keys.get("in", 3)), side, side], int(keys.get("classes", 1000))
        x = array.array("f", (rng.gauss(0, 1) for _ in range(math.prod(shape))))
        y, y_shape = array.array("q", (rng.randrange(classes) for _ in range(rows))), [rows]
    else:
        shape, vocab = [rows, int(keys["ctx"])], int(keys["vocab"])
        x = array.array("q", (rng.randrange(vocab) for _ in range(math.prod(shape))))
        y, y_shape = array.array("q", (rng.randrange(vocab) for _ in range(len(x)))), shape
    nx, ny = len(x) * x.itemsize, len(y) * 8
    header = {"x": {"dtype": "F32" if side else "I64", "shape": shape, "data_offsets": [0, nx]},
              "y": {"dtype": "I64", "shape": y_shape, "data_offsets": [nx, nx + ny]}}
    text = json.dumps(header)
    text += " " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text.encode() + x.tobytes() + y.tobytes())


def ddpkit_step_ms(spec, batch, steps, mode, data):
    train = [DDPKIT, "train", "--model", spec, "--batch-size", str(batch), "--steps", str(steps),
             "--json"] + (["--data", data] if data else [])
    if mode == "hosts":
        return json.loads(ddpkit_across_hosts(train[1:]))["median_step_ms"]
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
    out = subprocess.run(command, check=True, capture_output=True, text=True,
                         timeout=RUN_TIMEOUT_S).stdout
    if mode == "gloo":  # the launcher prefixes each line with "[rank r] "; rank 0 reports
        out = "\n".join(line.split("] ", 1)[1] for line in out.splitlines()
                        if line.startswith("[rank 0] "))
    return json.loads(out)["median_step_ms"]


def torch_loop(model, spec, batch, steps, side, seed):
    import torch
    import torch.nn.functional as F
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = torch_zoo.batch_of(spec, batch, side, torch.Generator().manual_seed(seed))
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        logits = model(x)
        F.cross_entropy(logits.view(-1, logits.size(-1)), y.view(-1)).backward()
        opt.step()
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times[2:])


def torch_ddp_rank(rank, world, job, addr, port, threads, result_path):
    import torch
    import torch.distributed as dist
    if threads:
        torch.set_num_threads(threads)
    os.environ.update(MASTER_ADDR=addr, MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    spec, batch, steps, side = job
    model = torch.nn.parallel.DistributedDataParallel(torch_zoo.model_of(spec))
    median = torch_loop(model, spec, batch, steps, side, rank)
    if rank == 0:
        with open(result_path, "w") as f:
            json.dump(median, f)
    dist.destroy_process_group()


def torch_worker(mode, job, threads):
    """Runs in a fresh interpreter (so OPENBLAS_CORETYPE is read at load); prints the median."""
    import torch
    import torch.multiprocessing as mp
    if mode == "world1":
        if threads:
            torch.set_num_threads(threads)
        print(torch_loop(torch_zoo.model_of(job[0]), *job, 0))
        return
    with tempfile.NamedTemporaryFile(suffix=".json") as result:
        with socket.socket() as probe:  # a free port: a fixed range collides with other jobs
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        mp.spawn(torch_ddp_rank, args=(2, job, "127.0.0.1", port, threads, result.name), nprocs=2)
        with open(result.name) as f:
            print(json.load(f))


def torch_across_hosts(python, job, threads, env):
    """PyTorch DDP, rank k in test host k (gloo over its eth0); rank 0's median."""
    port = next_port[0] = next_port[0] + 1
    with tempfile.NamedTemporaryFile(suffix=".json") as result:  # the hosts share the files
        on_hosts([[python, os.path.abspath(__file__), "--torch-rank", str(k), str(HOSTS),
                   host_addr(0), str(port), *map(str, job), str(threads), result.name]
                  for k in range(HOSTS)], {**env, "GLOO_SOCKET_IFNAME": "eth0"})
        with open(result.name) as f:
            return json.load(f)


def torch_step_ms(python, job, mode, setting):
    threads, env = TORCH_SETTINGS[setting]
    if mode == "hosts":
        return torch_across_hosts(python, job, threads, env)
    spec, batch, steps, side = job
    command = [python, os.path.abspath(__file__), "--torch-worker", mode, spec, str(batch),
               str(steps), str(side), str(threads)]
    out = subprocess.run(command, check=True, capture_output=True, text=True, timeout=RUN_TIMEOUT_S,
                         env={**os.environ, **env}).stdout
    return float(out.strip().splitlines()[-1])


def torch_of(python, wanted):
    """(version, settings to try) of the PyTorch that `python` imports; avx512 only where its
    BLAS is not MKL (Debian's reports BLAS_INFO=generic and links OpenBLAS)."""
    probe = ("import torch; print(torch.__version__); "
             "print('blas_info=mkl' not in torch.__config__.show().lower())")
    out = subprocess.run([python, "-c", probe], check=True, capture_output=True,
                         text=True).stdout.split()
    settings = [s for s in wanted if s != "avx512" or out[1] == "True"]
    return out[0], settings


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


def measure_row(key, mode, repeats, torches, data):
    """ddpkit's and every (PyTorch, setting)'s medians for one row, interleaved per repeat."""
    _, spec, batch, steps, side = WORKLOADS[key]
    job = (spec, batch, steps, side)
    runs = {"ddpkit": []}
    for _ in range(repeats):
        runs["ddpkit"].append(ddpkit_step_ms(spec, batch, steps, mode, data))
        for python, (version, settings) in torches.items():
            for setting in settings:
                runs.setdefault((version, setting), []).append(
                    torch_step_ms(python, job, mode, setting))
    return runs


def report_row(name, mode, runs, rows):
    best = min((k for k in runs if k != "ddpkit"), key=lambda k: statistics.median(runs[k]))
    mine, theirs = summary(runs["ddpkit"]), summary(runs[best])
    others = "  ".join(f"{k[0]} {k[1]} {statistics.median(r):.3f}" for k, r in runs.items()
                       if k not in ("ddpkit", best))
    rows.append((name, MODES[mode], mine, theirs, f"{best[0]}, {best[1]}", others))
    print(f"{name:38} {MODES[mode]:8} ddpkit {mine[0]:8.3f} ({mine[1]:.3f}-{mine[2]:.3f})  "
          f"torch[{best[0]}, {best[1]}] {theirs[0]:8.3f} ({theirs[1]:.3f}-{theirs[2]:.3f})  "
          f"ratio {mine[0] / theirs[0]:.2f}   [others: {others}]", flush=True)


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--markdown", action="store_true", help="also print a markdown table")
    parser.add_argument("--modes", default="world1,threads,gloo,mpi",
                        help="a subset of " + ",".join(MODES))
    parser.add_argument("--workloads", default=",".join(WORKLOADS),
                        help="a subset of " + ",".join(WORKLOADS))
    parser.add_argument("--torch-settings", default=",".join(TORCH_SETTINGS),
                        help="a subset of " + ",".join(TORCH_SETTINGS) + " to try (avx512 only "
                        "where PyTorch uses OpenBLAS)")
    parser.add_argument("--torch-python", action="append",
                        help="an interpreter with PyTorch for the PyTorch side (repeatable; "
                             "default: this one)")
    args = parser.parse_args()
    modes, keys = args.modes.split(","), args.workloads.split(",")
    if any(m not in MODES for m in modes) or any(k not in WORKLOADS for k in keys) or any(
            s not in TORCH_SETTINGS for s in args.torch_settings.split(",")):
        sys.exit(f"bench_vs_torch: --modes takes a subset of {','.join(MODES)}, --workloads "
                 f"of {','.join(WORKLOADS)}, --torch-settings of {','.join(TORCH_SETTINGS)}")
    if not os.path.exists(DDPKIT):
        sys.exit(f"bench_vs_torch: {DDPKIT} not found; build first (tools/scripts/build.sh)")
    if "hosts" in modes and not os.environ.get("DDPKIT_NETNS_PREFIX"):
        sys.exit("bench_vs_torch: --modes hosts runs across test hosts: start it under "
                 "`tools/scripts/netns_hosts.sh run 2 --rate 10gbit -- ...` (netns_vs_torch.sh)")
    return args, modes, keys


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--torch-worker":
        mode, spec, batch, steps, side, threads = sys.argv[2:8]
        torch_worker(mode, (spec, int(batch), int(steps), int(side)), int(threads))
        return
    if len(sys.argv) > 1 and sys.argv[1] == "--torch-rank":  # one rank of a cross-host job
        rank, world, addr, port, spec, batch, steps, side, threads, result = sys.argv[2:12]
        torch_ddp_rank(int(rank), int(world), (spec, int(batch), int(steps), int(side)), addr,
                       int(port), int(threads), result)
        return
    args, modes, keys = parse_args()
    try:
        wanted = args.torch_settings.split(",")
        torches = {p: torch_of(p, wanted) for p in (args.torch_python or [sys.executable])}
    except (subprocess.CalledProcessError, OSError, IndexError):
        sys.exit("bench_vs_torch: an interpreter has no PyTorch (apt-get install python3-torch)")
    print(f"# {time.strftime('%Y-%m-%d %H:%M')}, {machine()}, PyTorch "
          f"{' and '.join(v for v, _ in torches.values())}, {args.repeats} interleaved repeats; "
          f"step medians in ms")
    rows = []
    if "hosts" in modes:
        print(f"# before: {link_report()}", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        for key in keys:
            name, spec, batch, _, side = WORKLOADS[key]
            data = None
            if not spec.startswith("mlp:"):  # a few rows: ddpkit's closing accuracy pass and
                data = os.path.join(tmp, key + ".safetensors")  # 8x8 synthetic images otherwise
                write_data(data, spec, 4 * batch, side)
            for mode in modes:
                try:
                    report_row(name, mode, measure_row(key, mode, args.repeats, torches, data),
                               rows)
                except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as e:
                    print(f"{name:38} {MODES[mode]:8} failed: {e}", flush=True)
    if "hosts" in modes:
        print(f"# after: {link_report()}", flush=True)
    if args.markdown:
        print("\n| workload | run | ddpkit ms (range) | PyTorch ms (range) | PyTorch, setting | "
              "ratio | other PyTorch runs (median ms) |\n|---|---|---|---|---|---|---|")
        for name, mode, mine, theirs, best, others in rows:
            print(f"| {name} | {mode} | {mine[0]:.3f} ({mine[1]:.3f}-{mine[2]:.3f}) | "
                  f"{theirs[0]:.3f} ({theirs[1]:.3f}-{theirs[2]:.3f}) | {best} | "
                  f"{mine[0] / theirs[0]:.2f} | {others or '—'} |")


if __name__ == "__main__":
    main()
