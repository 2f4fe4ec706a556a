#!/usr/bin/python3
"""Writes tests/testdata/ddp_plans.json: PyTorch DDP's own bucket plans for ddpkit's models.

For each model, pair of caps and mode (plain, find_unused_parameters, static_graph), this wraps
the model in PyTorch's DDP (gloo, a world of one), runs five iterations and records what DDP's
logging data says after five: the initial bucket sizes, the gradient-ready order of the last
iteration, and the rebuilt plan (PyTorch rebuilds its buckets once, in the order the gradients
arrived: at the second forward, or with static_graph at the third; never with
find_unused_parameters). ddpkit's tests compare its plans with these and never need
torch. Regenerate with Debian's python3-torch (1.13):

    apt-get install python3-torch
    /usr/bin/python3 tools/scripts/golden/make_ddp_plan_golden.py

The caps are given in bytes; PyTorch takes MiB and truncates bucket_cap_mb * 2**20 to an
integer, so each cap is passed as bytes / 2**20, which converts back exactly. The first bucket's
cap is the module attribute torch.distributed._DEFAULT_FIRST_BUCKET_BYTES, which DDP reads when
it is constructed.
"""
import json
import os
import sys

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "tests",
                   "testdata", "ddp_plans.json")

# ddpkit model specs: mlp:IN,H1,...,OUT is Sequential(Linear, ReLU, ..., Linear); the options
# (bias=0, unused=1, tied=1) are the scenarios of PyTorch's own DDP tests (see mlp()).
MODELS = ["mlp:4,8,3", "mlp:8,16,16,4", "mlp:32,64,64,10", "mlp:16,32,32,32,8",
          "mlp:256,512,512,512,512,10", "mlp:784,2048,2048,10",
          "mlp:4,8,3,bias=0", "mlp:8,16,16,4,bias=0", "mlp:256,512,512,512,512,10,bias=0",
          "mlp:8,16,16,4,unused=1", "mlp:32,64,64,10,unused=1,bias=0",
          "mlp:8,16,16,16,4,tied=1", "mlp:16,32,32,32,8,tied=1,bias=0",
          "mlp:8,16,16,16,4,tied=1,unused=1"]
# (first bucket bytes, bucket cap bytes): PyTorch's defaults, then caps that cut inside layers,
# between a weight and its bias, and around every layer's size.
CAPS = [(1 << 20, 25 << 20), (300, 419), (64, 256), (1024, 1024), (4096, 8192),
        (100 << 10, 1 << 20), (2 << 20, 4 << 20)]
MODES = ["plain", "find_unused", "static_graph"]


class Mlp(torch.nn.Sequential):
    """nn.Sequential whose child "unused" (when there is one) is never called."""

    def forward(self, x):
        for name, layer in self.named_children():
            if name != "unused":
                x = layer(x)
        return x


def mlp(spec):
    """ddpkit's nn::MakeMlp: bias=0 drops every bias; tied=1 gives the last hidden-to-hidden
    Linear the weight of the one before it; unused=1 registers Linear(OUT, OUT) last."""
    parts = spec.split(":", 1)[1].split(",")
    widths = [int(p) for p in parts if "=" not in p]
    options = dict(p.split("=") for p in parts if "=" in p)
    bias = options.get("bias", "1") == "1"
    layers = []
    for i in range(len(widths) - 1):
        layers.append(torch.nn.Linear(widths[i], widths[i + 1], bias=bias))
        if i + 2 < len(widths):
            layers.append(torch.nn.ReLU())
    model = Mlp(*layers)
    if options.get("tied") == "1":
        model[len(layers) - 3].weight = model[len(layers) - 5].weight
    if options.get("unused") == "1":
        model.add_module("unused", torch.nn.Linear(widths[-1], widths[-1], bias=bias))
    return model, widths


def ints(text):
    return [int(v) for v in text.replace(",", " ").split()] if text else []


def plan(spec, first_bytes, cap_bytes, mode):
    torch.manual_seed(0)
    model, widths = mlp(spec)
    dist._DEFAULT_FIRST_BUCKET_BYTES = first_bytes
    ddp = DistributedDataParallel(model, bucket_cap_mb=cap_bytes / 2**20,
                                  find_unused_parameters=(mode == "find_unused"),
                                  static_graph=(mode == "static_graph"))
    logged_rebuild_after = None  # iterations run when the logging data first shows the rebuild
    for iteration in range(1, 6):
        x = torch.randn(4, widths[0])
        y = torch.randint(0, widths[-1], (4,))
        try:
            torch.nn.functional.cross_entropy(ddp(x), y).backward()
        except RuntimeError as error:  # an unused parameter without find_unused_parameters
            return {"model": spec, "first_bucket_bytes": first_bytes, "bucket_cap_bytes": cap_bytes,
                    "mode": mode, "error_iteration": iteration,
                    "error": str(error).split("\n")[0]}
        if logged_rebuild_after is None and ddp._get_ddp_logging_data().get("has_rebuilt_buckets"):
            logged_rebuild_after = iteration
    log = ddp._get_ddp_logging_data()
    rebuilt = [ints(b) for b in log.get("rebuilt_per_bucket_param_indices", "").split(",") if b]
    return {"model": spec, "first_bucket_bytes": first_bytes, "bucket_cap_bytes": cap_bytes,
            "mode": mode, "bucket_cap_bytes_logged": log["bucket_cap_bytes"],
            "bucket_sizes": ints(log["bucket_sizes"]),
            "grad_ready_order": ints(log.get("prev_iteration_grad_ready_order_indices", "")),
            "has_rebuilt_buckets": bool(log["has_rebuilt_buckets"]),
            "rebuilt_bucket_sizes": ints(log.get("rebuilt_bucket_sizes", "")),
            "rebuilt_buckets": rebuilt, "logged_rebuild_after": logged_rebuild_after}


def main():
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29561")
    dist.init_process_group("gloo", rank=0, world_size=1)
    cases = [plan(m, f, c, mode) for m in MODELS for f, c in CAPS for mode in MODES]
    golden = {"torch_version": torch.__version__,
              "generated_by": "tools/scripts/golden/make_ddp_plan_golden.py", "cases": cases}
    with open(OUT, "w") as f:
        json.dump(golden, f, indent=1)
        f.write("\n")
    print(f"wrote {OUT}: {len(cases)} cases (torch {torch.__version__})")
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
