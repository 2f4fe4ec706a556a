#!/usr/bin/python3
"""Writes tests/testdata/ddp_plans/<torch major.minor>.json: PyTorch DDP's own bucket plans for
ddpkit's models, under the PyTorch that runs it.

For each model, set of caps and mode (plain, find_unused_parameters, static_graph), this wraps
the model in PyTorch's DDP (gloo, a world of one), runs five iterations and records what DDP's
logging data says after five: the initial bucket sizes, the gradient-ready order of the last
iteration, and the rebuilt plan (PyTorch rebuilds its buckets once, in the order the gradients
arrived: at the second forward, or with static_graph at the third; never with
find_unused_parameters). ddpkit's tests compare its plans with these and never need torch.
Regenerate with Debian's python3-torch (1.13) and with today's PyTorch in a venv (2.15):

    apt-get install python3-torch
    /usr/bin/python3 tools/scripts/golden/make_ddp_plan_golden.py          # -> ddp_plans/1.13.json
    python3 -m venv /work/venv-torch2 && /work/venv-torch2/bin/pip install torch
    /work/venv-torch2/bin/python tools/scripts/golden/make_ddp_plan_golden.py  # -> 2.15.json

The caps are given in bytes; PyTorch takes MiB and truncates bucket_cap_mb * 2**20 to an
integer, so each cap is passed as bytes / 2**20, which converts back exactly. The first bucket's
cap is the module attribute torch.distributed._DEFAULT_FIRST_BUCKET_BYTES, which DDP reads when
it is constructed. Under 1.13 every case passes a cap and sets that attribute, as before. From
2.4 a passed cap also caps the first bucket, so 2.x's cases tell the ways apart: a cap passed or
left unset, the attribute set or not, and 2.11's bucket_cap_mb_list.
"""
import json
import os
import sys

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

OUT_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "tests",
                       "testdata", "ddp_plans")

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
# 2.x: (first bucket bytes set on the module attribute or None, cap bytes passed or None,
# per-bucket cap bytes passed as bucket_cap_mb_list or None).
CAPS_2X = [(None, None, None), (None, 25 << 20, None), (300, None, None), (100 << 10, None, None),
           (None, 419, None), (None, 256, None), (None, 1024, None), (None, 8192, None),
           (None, 1 << 20, None), (None, 4 << 20, None),
           (None, None, [300, 419]), (None, None, [64, 256, 128]), (None, None, [1024]),
           (None, None, [4096, 8192]), (None, None, [100 << 10, 1 << 20])]
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


def release():
    major, minor = torch.__version__.split(".")[:2]
    return int(major), int("".join(c for c in minor if c.isdigit()))


def caps_key(first_bytes, cap_bytes, cap_list):
    """The case's caps as the golden file names them."""
    if release() < (2, 0):
        return {"first_bucket_bytes": first_bytes, "bucket_cap_bytes": cap_bytes}
    return {"first_bucket_bytes_set": first_bytes, "bucket_cap_bytes_given": cap_bytes,
            "bucket_cap_bytes_list": cap_list}


def make_ddp(model, first_bytes, cap_bytes, cap_list, mode):
    dist._DEFAULT_FIRST_BUCKET_BYTES = first_bytes if first_bytes is not None else 1 << 20
    caps = {}
    if cap_bytes is not None:
        caps["bucket_cap_mb"] = cap_bytes / 2**20
    if cap_list is not None:
        caps["bucket_cap_mb_list"] = [b / 2**20 for b in cap_list]
    return DistributedDataParallel(model, find_unused_parameters=(mode == "find_unused"),
                                   static_graph=(mode == "static_graph"), **caps)


def plan(spec, first_bytes, cap_bytes, cap_list, mode):
    torch.manual_seed(0)
    model, widths = mlp(spec)
    ddp = make_ddp(model, first_bytes, cap_bytes, cap_list, mode)
    case = {"model": spec, **caps_key(first_bytes, cap_bytes, cap_list), "mode": mode}
    logged_rebuild_after = None  # iterations run when the logging data first shows the rebuild
    for iteration in range(1, 6):
        x = torch.randn(4, widths[0])
        y = torch.randint(0, widths[-1], (4,))
        try:
            torch.nn.functional.cross_entropy(ddp(x), y).backward()
        except RuntimeError as error:  # an unused parameter without find_unused_parameters
            return {**case, "error_iteration": iteration, "error": str(error).split("\n")[0]}
        if logged_rebuild_after is None and ddp._get_ddp_logging_data().get("has_rebuilt_buckets"):
            logged_rebuild_after = iteration
    log = ddp._get_ddp_logging_data()
    rebuilt = [ints(b) for b in log.get("rebuilt_per_bucket_param_indices", "").split(",") if b]
    return {**case, "bucket_cap_bytes_logged": log["bucket_cap_bytes"],
            "bucket_sizes": ints(log["bucket_sizes"]),
            "grad_ready_order": ints(log.get("prev_iteration_grad_ready_order_indices", "")),
            "has_rebuilt_buckets": bool(log["has_rebuilt_buckets"]),
            "rebuilt_bucket_sizes": ints(log.get("rebuilt_bucket_sizes", "")),
            "rebuilt_buckets": rebuilt, "logged_rebuild_after": logged_rebuild_after}


def main():
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29561")
    dist.init_process_group("gloo", rank=0, world_size=1)
    caps = [(f, c, None) for f, c in CAPS] if release() < (2, 0) else CAPS_2X
    if release() < (2, 11):
        caps = [c for c in caps if c[2] is None]
    cases = [plan(m, f, c, cap_list, mode) for m in MODELS for f, c, cap_list in caps
             for mode in MODES]
    golden = {"torch_version": torch.__version__,
              "generated_by": "tools/scripts/golden/make_ddp_plan_golden.py", "cases": cases}
    out = os.path.join(OUT_DIR, "%d.%d.json" % release())
    with open(out, "w") as f:
        json.dump(golden, f, indent=1)
        f.write("\n")
    print(f"wrote {out}: {len(cases)} cases (torch {torch.__version__})")
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
