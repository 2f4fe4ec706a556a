#!/usr/bin/python3
"""Writes the PyTorch golden files under tests/testdata/.

PyTorch is the oracle; ddpkit's tests read these files and never need torch. Regenerate with
Debian's python3-torch (1.13):

    apt-get install python3-torch
    /usr/bin/python3 tools/scripts/golden/make_torch_golden.py

torch 1.13 has no safetensors writer, so `write_safetensors` serialises torch's tensors with the
format's few rules (8-byte little-endian header length, JSON header, raw little-endian data).
"""
import json
import os
import struct
import sys

import torch

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "tests",
                   "testdata")

CODES = {torch.float32: "F32", torch.float64: "F64", torch.float16: "F16",
         torch.bfloat16: "BF16", torch.int32: "I32", torch.int64: "I64"}


def write_safetensors(name, tensors, metadata=None):
    header, blobs, offset = {}, [], 0
    if metadata:
        header["__metadata__"] = metadata
    for key, t in tensors.items():
        t = t.detach().contiguous().cpu()
        raw = t.view(torch.int16).numpy().tobytes() if t.dtype in (torch.float16, torch.bfloat16) \
            else t.numpy().tobytes()
        header[key] = {"dtype": CODES[t.dtype], "shape": list(t.shape),
                       "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    text = json.dumps(header, separators=(",", ":"))
    text += " " * ((8 - len(text) % 8) % 8)
    path = os.path.join(OUT, name)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text.encode())
        for raw in blobs:
            f.write(raw)
    print(f"wrote {path} ({os.path.getsize(path)} bytes)")


def mlp_case():
    """A seeded Sequential(Linear(4,8), ReLU, Linear(8,3)): weights, a batch, loss and grads."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3))
    x = torch.randn(6, 4)
    y = torch.tensor([0, 2, 1, 1, 0, 2])
    logits = model(x)
    loss = torch.nn.functional.cross_entropy(logits, y)
    loss.backward()
    state = {k: v for k, v in model.state_dict().items()}
    write_safetensors("torch_mlp_weights.safetensors", state, {"format": "pt"})
    case = {"x": x, "y": y, "logits": logits, "loss": loss}
    case.update({f"grad.{k}": p.grad for k, p in model.named_parameters()})
    write_safetensors("torch_mlp_case.safetensors", case)


def ops_case():
    """Forward values of ops whose definition has variants (exact vs tanh GELU, eps clamps)."""
    torch.manual_seed(1)
    x = torch.randn(3, 5, dtype=torch.float64) * 2
    small = torch.tensor([[1e-14, -2e-14], [3.0, 4.0]], dtype=torch.float64)
    f = torch.nn.functional
    write_safetensors("torch_ops.safetensors", {
        "x": x,
        "gelu": f.gelu(x),
        "tanh": torch.tanh(x),
        "log_softmax": f.log_softmax(x, dim=1),
        "normalize": f.normalize(x, dim=1),
        "small": small,
        "normalize_small": f.normalize(small, dim=1),
        "cross_entropy_offset": f.cross_entropy(x, torch.tensor([1, 2, 3]) + 1, reduction="sum"),
    })


def optim_case():
    """Three steps of SGD (momentum, weight decay, nesterov) and Adam on fixed gradients."""
    torch.manual_seed(2)
    p0 = torch.randn(5, dtype=torch.float64)
    grads = [torch.randn(5, dtype=torch.float64) for _ in range(3)]
    results = {}
    configs = {
        "sgd_momentum": lambda p: torch.optim.SGD([p], lr=0.1, momentum=0.9, weight_decay=0.01),
        "sgd_dampening": lambda p: torch.optim.SGD([p], lr=0.1, momentum=0.9, dampening=0.5),
        "sgd_nesterov": lambda p: torch.optim.SGD([p], lr=0.1, momentum=0.9, nesterov=True),
        "adam": lambda p: torch.optim.Adam([p], lr=0.01, weight_decay=0.01),
    }
    for name, make in configs.items():
        p = p0.clone().requires_grad_(True)
        opt = make(p)
        for g in grads:
            p.grad = g.clone()
            opt.step()
        results[name] = p.detach().clone()
    write_safetensors("torch_optim.safetensors",
                      {"p0": p0, "g0": grads[0], "g1": grads[1], "g2": grads[2], **results})


def dtypes_case():
    """float32 values and torch's float16 / bfloat16 roundings of them (ties included)."""
    src = torch.tensor([0.0, -0.0, 1.0, -2.5, 0.1, 1e-8, 6.1e-5, 65504.0, 65520.0, 1e6,
                        1.0009765625 + 2 ** -11,  # an f16 tie: rounds to even
                        1.00390625,               # a bf16 tie: rounds to even
                        3.14159265, -1e-40, 2 ** -24, 2 ** -25 * 3],
                       dtype=torch.float32)
    write_safetensors("torch_dtypes.safetensors", {
        "src": src, "f16": src.to(torch.float16), "bf16": src.to(torch.bfloat16),
        "f64": src.to(torch.float64), "i32": torch.tensor([-7, 0, 2 ** 31 - 1], dtype=torch.int32),
        "i64": torch.tensor([-(2 ** 40), 3], dtype=torch.int64),
    })


def ddp_worker(rank, world, steps, batch, lr, port, result_path):
    """One rank of torch's own DDP (gloo), trained exactly as `ddpkit train` trains."""
    import torch.distributed as dist
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.manual_seed(1)  # rank 0's weights are broadcast by DDP anyway
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3))
    initial = {k: v.clone() for k, v in model.state_dict().items()}
    gen = torch.Generator().manual_seed(2)
    x = torch.randn(steps * world * batch, 4, generator=gen)
    y = torch.randint(0, 3, (steps * world * batch,), generator=gen)
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=lr)
    for step in range(steps):
        begin = (step * world + rank) * batch  # global micro-batch `step`, this rank's slice
        opt.zero_grad(set_to_none=True)
        logits = ddp(x[begin:begin + batch])
        torch.nn.functional.cross_entropy(logits, y[begin:begin + batch]).backward()
        grads = {f"grad.{k}": p.grad.clone() for k, p in model.named_parameters()}
        opt.step()
    if rank == 0:
        torch.save({"initial": initial, "x": x, "y": y, "grads": grads,
                    "final": {f"final.{k}": v for k, v in model.state_dict().items()}}, result_path)
    dist.destroy_process_group()


def ddp_case():
    """torch's DistributedDataParallel on 2 gloo ranks: initial weights, data, the last step's
    averaged gradients (before its update) and the final weights after 3 SGD steps."""
    import tempfile
    import torch.multiprocessing as mp
    with tempfile.TemporaryDirectory() as tmp:
        result = os.path.join(tmp, "ddp.pt")
        mp.spawn(ddp_worker, args=(2, 3, 4, 0.1, 29400 + os.getpid() % 500, result), nprocs=2)
        r = torch.load(result)
    write_safetensors("torch_ddp_weights.safetensors", r["initial"], {"format": "pt"})
    write_safetensors("torch_ddp_data.safetensors", {"x": r["x"], "y": r["y"]})
    write_safetensors("torch_ddp_expected.safetensors", {**r["grads"], **r["final"]},
                      {"world_size": "2", "steps": "3", "batch_size": "4", "lr": "0.1"})


if __name__ == "__main__":
    print(f"torch {torch.__version__}", file=sys.stderr)
    mlp_case()
    ops_case()
    optim_case()
    dtypes_case()
    ddp_case()
