"""Records PyTorch profiler traces of a small DDP job, for `ddpkit trace stats|svg` to read.

Runs an MLP under DistributedDataParallel on gloo with 2 and then 3 processes (one thread each),
warms up (the first iteration rebuilds the buckets), then records a few iterations with
torch.profiler and exports each rank's Chrome trace. Beside the traces it writes what the same
run's DDP logging data said about each recorded iteration (PyTorch's own overlap figures) and
the bucket plan, so tests can check ddpkit's figures against PyTorch's.

    /usr/bin/python3 tools/scripts/golden/make_torch_profiler_traces.py [OUT_DIR]

OUT_DIR defaults to tests/testdata/torch_traces; it gets world<n>/rank<r>.json and
world<n>/ddp_logging.json. Made with Debian's python3-torch 1.13 (its profiler writes the
legacy, non-Kineto format: a bare JSON array, times from the profiler's start). The same script
run by a newer PyTorch made torch2/world2 (torch 2.15, pip-installed into a venv:
`VENV/bin/python tools/scripts/golden/make_torch_profiler_traces.py /tmp/t2`, then world2 copied;
Kineto's JSON object with distributedInfo and Unix times).
"""
import json
import os
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.nn.parallel import DistributedDataParallel as DDP

WARMUP = 3  # the first iteration rebuilds the buckets; stats are sampled in iterations 1..10
RECORDED = 3
LAYERS = (256, 512, 512, 512, 10)
BATCH = 32
# Per-iteration figures of DDP's logging data (nanoseconds, on the system clock).
FIGURES = ("forward_compute_time", "backward_compute_time", "backward_comm_time",
           "backward_compute_comm_overlap_time", "backward_compute_time_start",
           "backward_compute_time_end", "backward_comm_time_start", "backward_comm_time_end",
           "forward_compute_time_start")


def model():
    layers = []
    for i, (a, b) in enumerate(zip(LAYERS, LAYERS[1:])):
        if i:
            layers.append(torch.nn.ReLU())
        layers.append(torch.nn.Linear(a, b))
    return torch.nn.Sequential(*layers)


def logged(ddp):
    """The logging data after a forward: its per-iteration figures describe the iteration before."""
    data = ddp._get_ddp_logging_data()
    return {"iteration": data["iteration"], **{k: data[k] for k in FIGURES}}


def worker(rank, world, out, port):
    torch.set_num_threads(1)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.manual_seed(0)
    ddp = DDP(model(), bucket_cap_mb=0.5)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.01)
    torch.manual_seed(rank)
    x, y = torch.randn(BATCH, LAYERS[0]), torch.randint(0, LAYERS[-1], (BATCH,))

    def step():
        opt.zero_grad()
        torch.nn.functional.cross_entropy(ddp(x), y).backward()
        opt.step()

    for _ in range(WARMUP):
        step()
    iterations = []
    activities = [torch.profiler.ProfilerActivity.CPU]
    with torch.profiler.profile(activities=activities, record_shapes=True) as prof:
        for i in range(RECORDED):
            with torch.profiler.record_function(f"ProfilerStep#{WARMUP + i}"):
                step()
            if i:
                iterations.append(logged(ddp))  # iteration i-1's figures, set in i's forward
    ddp(x)  # one more forward logs the last recorded iteration
    iterations.append(logged(ddp))
    path = os.path.join(out, f"rank{rank}.json")
    prof.export_chrome_trace(path)
    with open(path) as f:  # the same events, without the spaces (a smaller fixture)
        events = json.load(f)
    with open(path, "w") as f:
        json.dump(events, f, separators=(",", ":"))
    data = ddp._get_ddp_logging_data()
    names = [n for n, _ in ddp.module.named_parameters()]
    summary = {
        "torch": torch.__version__, "world_size": world, "rank": rank,
        "recorded_iterations": [WARMUP + i for i in range(RECORDED)],
        "per_iteration": iterations,
        "averages": {k: data[k] for k in (
            "avg_forward_compute_time", "avg_backward_compute_time", "avg_backward_comm_time",
            "avg_backward_compute_comm_overlap_time")},
        "parameter_names": names,
        "bucket_sizes": [int(s) for s in data["rebuilt_bucket_sizes"].split(",")],
        "per_bucket_param_indices": [[int(i) for i in b.split()]
                                     for b in data["rebuilt_per_bucket_param_indices"].split(",")],
        "grad_ready_order": [int(i) for i in
                             data["prev_iteration_grad_ready_order_indices"].split(",")],
    }
    with open(os.path.join(out, f"ddp_logging.rank{rank}.json"), "w") as f:
        json.dump(summary, f, indent=1)
        f.write("\n")
    dist.destroy_process_group()


def main():
    root = os.path.dirname(os.path.abspath(__file__))
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
        root, "..", "..", "..", "tests", "testdata", "torch_traces")
    for world, port in ((2, 29561), (3, 29562)):
        d = os.path.join(out, f"world{world}")
        os.makedirs(d, exist_ok=True)
        mp.spawn(worker, args=(world, d, port), nprocs=world)
        print(f"wrote {d}")


if __name__ == "__main__":
    main()
