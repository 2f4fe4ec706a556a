#!/usr/bin/python3
"""Writes a plan file: a PyTorch model's parameters, buffers and, given an input shape, the
bucket plans PyTorch's own DDP made for it. `ddpkit buckets --params FILE` reads it (the schema
is in docs/plan_files.md).

    /usr/bin/python3 tools/scripts/export_ddp_plan.py MODEL [--input-shape N,C,H,W|N,T]
        [--bucket-cap-mb X | --bucket-cap-mb-list A,B,C] [--first-bucket-mb Y] --out FILE

MODEL is `torchvision:NAME` (torchvision.models.get_model(NAME), untrained) or
`module.path:factory` (a function of no arguments returning an nn.Module; this folder is on the
import path, so `plan_models:gpt2_124m` and `plan_models:bert_base` name the transformers defined
in plan_models.py). With --input-shape the model is wrapped in DistributedDataParallel (gloo, a
world of one, PyTorch's defaults unless the caps are given — only given ones are passed, since
from PyTorch 2.4 a passed bucket_cap_mb plans differently from an unset one) and runs three
iterations on random
input of that shape — a 2-d shape is token ids below the first Embedding's size (when the
model has one), any other random normal values — with the loss out.square().mean(); PyTorch rebuilds its buckets at the second
forward, in the order the first backward produced the gradients; forward hooks on the first
iteration count each parameter's backward FLOPs at that shape (backward_flops, for
`ddpkit simulate --params`). Without it, the file holds the parameters and buffers alone.

Runs under Debian's python3-torch and python3-torchvision (1.13/0.14) or today's PyTorch in a
venv (pip install torch torchvision); the file's torch_version says whose DDP planned it, and
`ddpkit buckets --params` follows that version's rules. The build and the tests never run it.
"""
import argparse
import importlib
import json
import os
import sys

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

FORMAT = "ddpkit-plan/1"


def build_model(spec):
    source, _, name = spec.partition(":")
    if not name:
        sys.exit(f"export_ddp_plan: MODEL '{spec}' is neither torchvision:NAME nor module:factory")
    if source == "torchvision":
        import torchvision
        return torchvision.models.get_model(name, weights=None)
    return getattr(importlib.import_module(source), name)()


def dtype_name(dtype):
    return str(dtype).replace("torch.", "")


def tensor_entry(name, tensor, requires_grad=None):
    entry = {"name": name, "shape": list(tensor.shape), "dtype": dtype_name(tensor.dtype)}
    if requires_grad is not None:
        entry["requires_grad"] = requires_grad
    return entry


def aliases(model):
    """Parameters registered under a second name (tied weights): named_parameters() and DDP
    list each tensor once, under the name met first."""
    first, out = {}, []
    for module_name, module in model.named_modules():
        for param_name, p in module._parameters.items():
            if p is None:
                continue
            name = f"{module_name}.{param_name}" if module_name else param_name
            if id(p) in first:
                out.append({"name": name, "same_as": first[id(p)]})
            else:
                first[id(p)] = name
    return out


def random_input(model, shape):
    embeddings = [m for m in model.modules() if isinstance(m, torch.nn.Embedding)]
    if len(shape) == 2 and embeddings:  # token ids
        return torch.randint(0, embeddings[0].num_embeddings, shape)
    return torch.randn(shape)


def first_tensor(out):
    if isinstance(out, (tuple, list)):
        return first_tensor(out[0])
    if isinstance(out, dict):
        return first_tensor(next(iter(out.values())))
    return out


NORMS = (torch.nn.LayerNorm, torch.nn.GroupNorm, torch.nn.modules.batchnorm._BatchNorm)
NORM_FLOPS_PER_ELEMENT = 5  # mean, variance, subtract, divide, scale and shift


def attention_matmuls(module, x):
    """Q·Kᵀ and attention·V of an input (N, T, d): 2·N·T²·d each. A module is attention when it
    is nn.MultiheadAttention or its class name ends in SelfAttention (plan_models' two)."""
    mha = isinstance(module, torch.nn.MultiheadAttention)
    if not (mha or type(module).__name__.endswith("SelfAttention")) or x.dim() != 3:
        return 0
    t, n, d = x.shape if mha and not module.batch_first else (x.shape[1], x.shape[0], x.shape[2])
    return 4 * n * t * t * d


def forward_flops_by_parameter(module, x, out):
    """[(parameters, forward FLOPs shared among them)] for the work a module's forward does
    itself (not its children's), at the shape it ran on."""
    bias = [module.bias] if getattr(module, "bias", None) is not None else []
    if isinstance(module, torch.nn.modules.conv._ConvNd):  # 2·Cout·Cin/groups·kh·kw·Hout·Wout·N
        return [([module.weight], 2 * out.numel() * module.weight[0].numel()), (bias, out.numel())]
    if isinstance(module, torch.nn.Linear):  # 2·in·out·rows
        return [([module.weight], 2 * out.numel() * module.in_features), (bias, out.numel())]
    if isinstance(module, NORMS):
        return [(list(module.parameters(recurse=False)), NORM_FLOPS_PER_ELEMENT * out.numel())]
    if isinstance(module, torch.nn.MultiheadAttention):  # its projections run as functions
        rows, d = out.numel() // out.shape[-1], module.embed_dim
        return [([module.in_proj_weight], 2 * rows * d * 3 * d + attention_matmuls(module, out)),
                ([module.in_proj_bias], 3 * rows * d),
                ([module.out_proj.weight], 2 * rows * d * d), ([module.out_proj.bias], rows * d)]
    if isinstance(module, torch.nn.Embedding):  # a gather: its backward is below
        return []
    own = list(module.parameters(recurse=False))
    return [(own or list(module.parameters()), attention_matmuls(module, x))]


def backward_flops(model):
    """Registers forward hooks that attribute to each parameter the backward FLOPs of the work
    it takes part in: 2x the forward FLOPs (the input's gradient and the weight's) of its share
    of each module's own forward — a conv's or linear's matmul to its weight, the bias add to
    its bias, a norm's elementwise work split evenly over its weight and bias, an attention
    module's Q·Kᵀ and attention·V over its parameters by element count (its projections'
    weights); an Embedding's backward is a scatter-add of its output's gradient, out.numel().
    A tied weight's gradient is complete only after its first use's backward, which runs last;
    a later use's FLOPs are done early in backward, so they go to the parameters whose gradients
    they precede: its module's others (a bias), else those of the module that ran just before it
    in forward (GPT-2's lm_head: to ln_f). Returns (FLOPs by parameter id, the hooks' handles)."""
    flops, seen, previous = {}, set(), []

    def hook(module, inputs, out):
        nonlocal previous
        out = first_tensor(out)
        x = first_tensor(inputs) if inputs else out  # nn.MultiheadAttention is called by keyword
        parts = forward_flops_by_parameter(module, x, out)
        if isinstance(module, torch.nn.Embedding):
            parts = [([module.weight], out.numel() / 2)]
        own = list(module.parameters(recurse=False))
        untied = [p for p in own if id(p) not in seen]
        for i, (params, total) in enumerate(parts):
            if any(id(p) in seen and any(p is q for q in own) for p in params):  # tied, again
                parts[i] = ([p for p in untied if p is not None] or previous, total)
        seen.update(id(p) for p in own)
        previous = untied or previous
        for params, total in parts:
            numel = sum(p.numel() for p in params if p is not None)
            for p in params:
                if p is not None and total:
                    flops[id(p)] = flops.get(id(p), 0) + 2 * total * p.numel() / numel

    handles = [m.register_forward_hook(hook) for m in model.modules()]
    return flops, handles


def ints(text):
    return [int(v) for v in text.replace(",", " ").split()] if text else []


def torch_release():
    """(major, minor) of the running PyTorch."""
    major, minor = torch.__version__.split(".")[:2]
    return int(major), int("".join(c for c in minor if c.isdigit()))


def first_bucket_cap(ddp, bucket_cap_mb, bucket_cap_mb_list):
    """The first bucket's cap DDP's rebuild walks under: from 2.4 (PR 121640) a given cap or cap
    list is the first bucket's too; otherwise dist._DEFAULT_FIRST_BUCKET_BYTES."""
    config = getattr(ddp, "_bucket_config", None)  # 2.15's _BucketCapacityConfig
    if config is not None:
        return config.first_bucket_bytes_cap
    if torch_release() >= (2, 4) and (bucket_cap_mb is not None or bucket_cap_mb_list):
        return ddp.bucket_bytes_cap
    return dist._DEFAULT_FIRST_BUCKET_BYTES


def initial_limits(ddp):
    """The limits DDP's constructor walked (no find_unused_parameters here): one unlimited
    bucket, or from 2.11 the cap list."""
    config = getattr(ddp, "_bucket_config", None)
    if config is not None:
        return config.compute_bucket_size_limits(static_graph=False, find_unused_parameters=False)[0]
    return [sys.maxsize]


def ddp_plan(model, shape, bucket_cap_mb, bucket_cap_mb_list, first_bucket_mb):
    """Three iterations under DDP; what its logging data says then, and its initial plan. Only
    the caps given are passed, as a user's DDP(model) call would: from 2.4 a passed
    bucket_cap_mb plans differently from an unset one."""
    if first_bucket_mb is not None:  # DDP reads the module attribute when constructed
        dist._DEFAULT_FIRST_BUCKET_BYTES = int(first_bucket_mb * 1024 * 1024)
    caps = {}
    if bucket_cap_mb is not None:
        caps["bucket_cap_mb"] = bucket_cap_mb
    if bucket_cap_mb_list:
        caps["bucket_cap_mb_list"] = bucket_cap_mb_list
    ddp = DistributedDataParallel(model, **caps)
    # DDP's constructor computes its initial plan so, then reverses it; 1.13 logs only the
    # sizes, so the indices are asked for here.
    params = [p for p in model.parameters() if p.requires_grad]
    initial, _ = dist._compute_bucket_assignment_by_size(params, initial_limits(ddp),
                                                         [False] * len(params))
    # The rebuild happens at the second forward, after the logging data is sampled there: the
    # third forward's sample is the first to show it.
    flops, handles = backward_flops(model)  # counted on the first forward
    for i in range(3):
        first_tensor(ddp(random_input(model, shape))).float().square().mean().backward()
        if i == 0:
            for h in handles:
                h.remove()
    log = ddp._get_ddp_logging_data()
    rebuilt = log.get("rebuilt_per_bucket_param_indices", "")
    plan = {"world_size": 1, "backend": "gloo", "iterations": 3,
            "find_unused_parameters": False, "static_graph": False,
            "bucket_cap_mb": bucket_cap_mb, "bucket_cap_bytes": log["bucket_cap_bytes"],
            "first_bucket_bytes": first_bucket_cap(ddp, bucket_cap_mb, bucket_cap_mb_list),
            "bucket_sizes": ints(log["bucket_sizes"]),
            "initial_per_bucket_param_indices": [list(b) for b in reversed(initial)],
            "has_rebuilt_buckets": bool(log["has_rebuilt_buckets"]),
            "prev_iteration_grad_ready_order_indices":
                ints(log.get("prev_iteration_grad_ready_order_indices", "")),
            "rebuilt_bucket_sizes": ints(log.get("rebuilt_bucket_sizes", "")),
            "rebuilt_per_bucket_param_indices": [ints(b) for b in rebuilt.split(",") if b]}
    if bucket_cap_mb_list:
        plan["bucket_cap_mb_list"] = bucket_cap_mb_list
    return flops, plan


def write(plan, path):
    """JSON with one tensor per line, so that a diff of two plans reads line by line."""
    lines = ["{"]
    keys = list(plan)
    for i, key in enumerate(keys):
        value, comma = plan[key], "," if i + 1 < len(keys) else ""
        if key in ("parameters", "buffers", "aliases") and value:
            rows = ",\n".join("  " + json.dumps(v) for v in value)
            lines.append(f" {json.dumps(key)}: [\n{rows}\n ]{comma}")
        elif key == "compiled":  # one node, one subgraph per line
            import compiled_ddp_split
            rows = "\n".join(compiled_ddp_split.write_lines(value))
            lines.append(f' "compiled": {{\n{rows}\n }}{comma}')
        elif key == "ddp":
            rows = ",\n".join(f"  {json.dumps(k)}: {json.dumps(v)}" for k, v in value.items())
            lines.append(f' "ddp": {{\n{rows}\n }}{comma}')
        else:
            lines.append(f" {json.dumps(key)}: {json.dumps(value)}{comma}")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n}\n")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model")
    parser.add_argument("--input-shape", default="")
    parser.add_argument("--bucket-cap-mb", type=float, default=None,
                        help="passed to DDP when given (PyTorch's default: unset, 25 MiB)")
    parser.add_argument("--bucket-cap-mb-list", default="",
                        help="PyTorch >= 2.11's per-bucket caps, A,B,C in MiB")
    parser.add_argument("--first-bucket-mb", type=float, default=None,
                        help="sets dist._DEFAULT_FIRST_BUCKET_BYTES (default 1 MiB)")
    parser.add_argument("--out", required=True)
    parser.add_argument("--compiled", choices=("aot_eager", "inductor"),
                        help="PyTorch 2.x: also record the split torch.compile's DDPOptimizer "
                             "makes, compiling with this backend (compiled_ddp_split.py)")
    args = parser.parse_args()
    if args.compiled and (not args.input_shape or not hasattr(torch, "compile")):
        parser.error("--compiled needs --input-shape and PyTorch 2.x (torch.compile)")
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = build_model(args.model)
    plan = {"format": FORMAT, "model": args.model,
            "generated_by": "tools/scripts/export_ddp_plan.py " + " ".join(sys.argv[1:-2] if sys.argv[-2] == "--out" else sys.argv[1:]),
            "torch_version": torch.__version__,
            "input_shape": ints(args.input_shape) or None,
            "parameters": [tensor_entry(n, p, p.requires_grad) for n, p in model.named_parameters()],
            "buffers": [tensor_entry(n, b) for n, b in model.named_buffers()],
            "aliases": aliases(model)}
    if args.input_shape:
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", "29562")
        dist.init_process_group("gloo", rank=0, world_size=1)
        cap_list = [float(v) for v in args.bucket_cap_mb_list.split(",") if v]
        flops, plan["ddp"] = ddp_plan(model, ints(args.input_shape), args.bucket_cap_mb,
                                      cap_list, args.first_bucket_mb)
        for entry, p in zip(plan["parameters"], model.parameters()):
            entry["backward_flops"] = round(flops.get(id(p), 0))
        if args.compiled:
            import compiled_ddp_split
            torch.manual_seed(0)
            fresh = build_model(args.model)
            plan["compiled"] = compiled_ddp_split.record(
                fresh, lambda: random_input(fresh, ints(args.input_shape)),
                lambda out: first_tensor(out).float().square().mean(), args.bucket_cap_mb,
                args.compiled)
        dist.destroy_process_group()
    write(plan, args.out)
    print(f"wrote {args.out}: {args.model}, {len(plan['parameters'])} parameters"
          + (f", {len(plan['ddp']['rebuilt_bucket_sizes'])} buckets after the rebuild"
             if "ddp" in plan else ""))


if __name__ == "__main__":
    main()
