#!/usr/bin/python3
"""Writes the PyTorch golden files under tests/testdata/.

PyTorch is the oracle; ddpkit's tests read these files and never need torch. Regenerate with
Debian's python3-torch (1.13):

    apt-get install python3-torch
    /usr/bin/python3 tools/scripts/golden/make_torch_golden.py            # every case
    /usr/bin/python3 tools/scripts/golden/make_torch_golden.py powersgd   # only the named ones

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


# --- PowerSGD (reducer/extras/powersgd_hook.h) --------------------------------------------------
# An MLP whose matrices get compressed (0.weight and 4.weight share a shape, 2.weight is their
# transpose: a bucket holding all three tests PyTorch's grouping by shape) and whose biases do not;
# a 128-byte first bucket and a 2000-byte cap give two buckets after the rebuild: 6.* and the rest.
# Within a layer torch's gradients arrive bias first, ddpkit's weight first: the same buckets, in
# another order inside, which the layerwise hook does not see (it packs biases and groups weights
# in bucket order) but the batched one does (it flattens the bucket) — its cases have no biases.
PSGD_WIDTHS = (6, 10, 6, 10, 3)
PSGD_FIRST_BUCKET_BYTES, PSGD_BUCKET_CAP_BYTES = 128, 2000
PSGD_STEPS, PSGD_BATCH, PSGD_LR = 6, 4, 0.1
PSGD_CASES = {  # file suffix -> hook, PowerSGDState arguments, and whether layers have biases
    "layerwise_r2": dict(hook="powersgd", rank=2, start=2, min_rate=1.0, feedback=True, warm=True,
                         bias=True),
    "layerwise_r3": dict(hook="powersgd", rank=3, start=2, min_rate=1.0, feedback=True, warm=True,
                         bias=True),
    "layerwise_cold": dict(hook="powersgd", rank=2, start=1, min_rate=1.0, feedback=False,
                           warm=False, bias=True),
    "batched_r2": dict(hook="batched_powersgd", rank=2, start=2, min_rate=1.0, feedback=True,
                       warm=True, bias=False),
    "batched_r3": dict(hook="batched_powersgd", rank=3, start=2, min_rate=1.0, feedback=True,
                       warm=True, bias=False),
}


def psgd_orthogonalize_2d(psgd):
    """torch 1.13's batched_powerSGD_hook hands _orthogonalize a 2-D matrix, which trips its
    3-D assert (the batching of PR #75157 broke it); give it the batch dimension it expects."""
    original = psgd._orthogonalize

    def orthogonalize(matrices, epsilon=0):
        original(matrices.unsqueeze(0) if matrices.dim() == 2 else matrices, epsilon)
    psgd._orthogonalize = orthogonalize


def free_port():
    """A port nothing listens on now: a fresh one for each job's store (a reused one can still
    be held by the last job's sockets)."""
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def powersgd_worker(rank, world, case, port, result_path):
    """One rank of torch's DDP (gloo) with a PowerSGD hook, trained as `ddpkit train` trains."""
    import torch.distributed as dist
    from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as psgd
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.manual_seed(3)
    layers = []
    for i in range(len(PSGD_WIDTHS) - 1):
        layers += [torch.nn.Linear(PSGD_WIDTHS[i], PSGD_WIDTHS[i + 1], bias=case["bias"]),
                   torch.nn.ReLU()]
    model = torch.nn.Sequential(*layers[:-1])
    initial = {k: v.clone() for k, v in model.state_dict().items()}
    gen = torch.Generator().manual_seed(4)
    rows = PSGD_STEPS * world * PSGD_BATCH
    x = torch.randn(rows, PSGD_WIDTHS[0], generator=gen)
    y = torch.randint(0, PSGD_WIDTHS[-1], (rows,), generator=gen)
    dist._DEFAULT_FIRST_BUCKET_BYTES = PSGD_FIRST_BUCKET_BYTES
    ddp = torch.nn.parallel.DistributedDataParallel(
        model, bucket_cap_mb=PSGD_BUCKET_CAP_BYTES / 2 ** 20)
    state = psgd.PowerSGDState(
        process_group=None, matrix_approximation_rank=case["rank"],
        start_powerSGD_iter=case["start"], min_compression_rate=case["min_rate"],
        use_error_feedback=case["feedback"], warm_start=case["warm"], random_seed=0)
    psgd_orthogonalize_2d(psgd)
    hook = psgd.powerSGD_hook if case["hook"] == "powersgd" else psgd.batched_powerSGD_hook
    names = {id(p): n for n, p in model.named_parameters()}
    buckets = {}

    def recording_hook(state, bucket):
        buckets[bucket.index()] = [names[id(p)] for p in bucket.parameters()]
        # Under gloo the hook's chained allreduces (issued from callbacks) race the next bucket's
        # and ranks can issue them in different orders; finishing each bucket before the next
        # one starts fixes the order and changes no number.
        future = hook(state, bucket)
        future.wait()
        return future
    ddp.register_comm_hook(state, recording_hook)
    qs, randn = [], torch.randn

    def recording_randn(*args, **kwargs):  # only the hook draws from here on
        t = randn(*args, **kwargs)
        qs.append(t.reshape(t.shape[-2], t.shape[-1]).clone())
        return t
    torch.randn = recording_randn
    opt = torch.optim.SGD(ddp.parameters(), lr=PSGD_LR)
    grads = {}
    for step in range(PSGD_STEPS):
        begin = (step * world + rank) * PSGD_BATCH
        opt.zero_grad(set_to_none=True)
        logits = ddp(x[begin:begin + PSGD_BATCH])
        torch.nn.functional.cross_entropy(logits, y[begin:begin + PSGD_BATCH]).backward()
        grads.update({f"step{step}.grad.{k}": p.grad.clone() for k, p in model.named_parameters()})
        opt.step()
    torch.randn = randn
    final = {f"final.{k}": v for k, v in model.state_dict().items()}
    torch.save({"initial": initial, "x": x, "y": y, "grads": grads, "final": final,
                "qs": qs, "buckets": [buckets[b] for b in sorted(buckets)],
                "stats": state.compression_stats()}, f"{result_path}.{rank}")
    dist.barrier()
    # Tearing down a DDP whose hook futures held tensors can deadlock in torch 1.13 (the gloo
    # group's destructor joins a worker thread that waits for the GIL): leave without it.
    sys.stderr.flush()
    os._exit(0)


def powersgd_orthogonalize_case():
    """PowerSGD's _orthogonalize on n x r matrices: Gram-Schmidt (r <= 2) and Householder QR
    (torch.linalg.qr's signs), and a zero column with an epsilon."""
    from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as psgd
    torch.manual_seed(5)
    out = {}
    for n, r in ((7, 1), (7, 2), (7, 3), (9, 4), (4, 4)):
        a = torch.randn(n, r)
        q = a.clone()
        psgd._orthogonalize(q.unsqueeze(0))
        out.update({f"in_{n}x{r}": a, f"out_{n}x{r}": q})
    zero = torch.randn(5, 2)
    zero[:, 0] = 0
    q = zero.clone()
    psgd._orthogonalize(q.unsqueeze(0), epsilon=1e-8)
    out.update({"in_zero_eps": zero, "out_zero_eps": q})
    write_safetensors("torch_powersgd_orthogonalize.safetensors", out)


def powersgd_case():
    """torch's DDP on 2 gloo ranks with powerSGD_hook / batched_powerSGD_hook for 6 SGD steps:
    initial weights, data, every Q torch.randn drew (in order), each step's reduced gradients
    (rank 0's; every rank holds the same) and the final weights, one file per configuration."""
    import tempfile
    import torch.multiprocessing as mp
    powersgd_orthogonalize_case()
    for suffix, case in PSGD_CASES.items():
        with tempfile.TemporaryDirectory() as tmp:
            result = os.path.join(tmp, "psgd.pt")
            mp.spawn(powersgd_worker, args=(2, case, free_port(), result), nprocs=2)
            r, r1 = torch.load(f"{result}.0"), torch.load(f"{result}.1")
        for key, t in r["grads"].items():  # PowerSGD leaves the same numbers on every rank
            assert torch.equal(t, r1["grads"][key]), key
        tensors = {**{f"initial.{k}": v for k, v in r["initial"].items()}, "x": r["x"],
                   "y": r["y"], **r["grads"], **r["final"],
                   **{f"q{i}": q for i, q in enumerate(r["qs"])}}
        metadata = {"hook": case["hook"], "rank": str(case["rank"]),
                    "start_iter": str(case["start"]), "min_compression_rate": str(case["min_rate"]),
                    "use_error_feedback": str(int(case["feedback"])),
                    "warm_start": str(int(case["warm"])), "bias": str(int(case["bias"])),
                    "world_size": "2",
                    "steps": str(PSGD_STEPS), "batch_size": str(PSGD_BATCH), "lr": str(PSGD_LR),
                    "widths": ",".join(map(str, PSGD_WIDTHS)),
                    "first_bucket_bytes": str(PSGD_FIRST_BUCKET_BYTES),
                    "bucket_cap_bytes": str(PSGD_BUCKET_CAP_BYTES),
                    "buckets": ";".join(",".join(b) for b in r["buckets"]),
                    "num_qs": str(len(r["qs"])),
                    "numel_before_compression": str(r["stats"][1]),
                    "numel_after_compression": str(r["stats"][2])}
        write_safetensors(f"torch_powersgd_{suffix}.safetensors", tensors, metadata)


CASES = {"mlp": mlp_case, "ops": ops_case, "optim": optim_case, "dtypes": dtypes_case,
         "ddp": ddp_case, "powersgd": powersgd_case}

def run_cases(cases):
    """Runs the cases named on the command line, or all of them."""
    unknown = [name for name in sys.argv[1:] if name not in cases]
    if unknown:
        sys.exit(f"unknown case(s) {unknown}; choose from {list(cases)}")
    for name in sys.argv[1:] or cases:
        cases[name]()


if __name__ == "__main__":
    print(f"torch {torch.__version__}", file=sys.stderr)
    run_cases(CASES)
