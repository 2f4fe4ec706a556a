#!/usr/bin/python3
"""A ddpkit-saved ResNet and GPT state dict in PyTorch: same keys in the same order, loaded
strictly, and the same numbers.

For each case, `ddpkit train` (two thread ranks, SGD with momentum, a few steps, so BatchNorm's
running statistics and num_batches_tracked have moved) writes `--save-weights W`. Then:

1. W's safetensors header lists exactly the PyTorch model's state_dict() keys, in its order
   (torchvision's ResNet: module by module, parameters then buffers; nanoGPT's GPT: the tied
   table as transformer.wte.weight and lm_head.weight), num_batches_tracked int64;
2. W loads into torchvision's ResNet / the nanoGPT model of make_gpt_golden.py with
   load_state_dict(strict=True);
3. on a fresh batch, `ddpkit train --weights W --steps 1 --lr 0 --save-grads G --save-weights W2`
   (one process, training mode) and PyTorch's training-mode forward give the same loss (the mean
   cross-entropy of the logits), the same gradient of every parameter (G) and the same buffers
   afterwards (W2); in eval mode both classify the batch alike (ddpkit's final accuracy).

    /usr/bin/python3 tools/scripts/check_state_dict_torch.py [build/bin/ddpkit]

Needs Debian's python3-torch 1.13 and python3-torchvision; never run by the build or tests.
"""
import json
import os
import subprocess
import sys
import tempfile

import torch
import torch.nn.functional as F

from check_checkpoint_torch import load_with_torch, read_header, torch_model_of  # noqa: E402
from make_torch_golden import CODES  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))

# name -> (ddpkit spec, a batch maker: rows, generator -> (x, y))
CASES = {
    "resnet small stem": ("resnet:1,2,1,1,width=4,in=1,classes=5,stem=small",
                          lambda n, g: (torch.randn(n, 1, 8, 8, generator=g),
                                        torch.randint(0, 5, (n,), generator=g))),
    "resnet imagenet stem": ("resnet:1,1,1,1,width=4,classes=3",
                             lambda n, g: (torch.randn(n, 3, 32, 32, generator=g),
                                           torch.randint(0, 3, (n,), generator=g))),
    "gpt bias=1": ("gpt:layers=2,heads=2,dim=16,ctx=8,vocab=11",
                   lambda n, g: (torch.randint(0, 11, (n, 8), generator=g),
                                 torch.randint(0, 11, (n, 8), generator=g))),
    "gpt bias=0": ("gpt:layers=1,heads=2,dim=16,ctx=8,vocab=7,bias=0",
                   lambda n, g: (torch.randint(0, 7, (n, 8), generator=g),
                                 torch.randint(0, 7, (n, 8), generator=g))),
}


def write_data(path, x, y):
    header, blobs, offset = {}, [], 0
    for key, t in (("x", x), ("y", y)):
        raw = t.contiguous().numpy().tobytes()
        header[key] = {"dtype": CODES[t.dtype], "shape": list(t.shape),
                       "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    text = json.dumps(header)
    text += " " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(len(text).to_bytes(8, "little") + text.encode() + b"".join(blobs))


def ddpkit(binary, *args):
    out = subprocess.run([binary, "train", "--json", *args], check=True, capture_output=True,
                         text=True).stdout
    return json.loads(out)


def max_diff(a, b):
    return (a.double() - b.double()).abs().max().item() if a.numel() else 0.0


def check(name, spec, make_batch, binary, tmp):
    g = torch.Generator().manual_seed(7)
    train_data, batch = os.path.join(tmp, "train.safetensors"), os.path.join(tmp, "batch.safetensors")
    write_data(train_data, *make_batch(64, g))
    x, y = make_batch(6, g)
    write_data(batch, x, y)
    w, w2, grads = (os.path.join(tmp, f) for f in ("w.safetensors", "w2.safetensors", "g.safetensors"))
    ddpkit(binary, "--model", spec, "--data", train_data, "--world-size", "2", "--batch-size", "8",
           "--steps", "4", "--lr", "0.05", "--momentum", "0.9", "--save-weights", w)

    model = torch_model_of(spec)
    _, _, header = read_header(w)
    keys = [k for k in header if k != "__metadata__"]
    expected = list(model.state_dict().keys())
    assert keys == expected, f"{name}: header order {keys} != state_dict {expected}"
    for k, t in model.state_dict().items():
        assert header[k]["dtype"] == CODES[t.dtype], f"{name}: {k} is {header[k]['dtype']}"
    weights, _ = load_with_torch(w)
    model.load_state_dict(weights, strict=True)

    report = ddpkit(binary, "--model", spec, "--data", batch, "--weights", w, "--world-size", "1",
                    "--batch-size", str(len(x)), "--steps", "1", "--lr", "0", "--momentum", "0",
                    "--save-grads", grads, "--save-weights", w2)
    model.train()
    logits = model(x)
    loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)), y.reshape(-1))
    loss.backward()
    ddpkit_grads, _ = load_with_torch(grads, require_pt=False)
    after, _ = load_with_torch(w2)
    grad_diff = max(max_diff(p.grad, ddpkit_grads[k]) for k, p in model.named_parameters())
    buffers = dict(model.named_buffers())
    buffer_diff = max([max_diff(b, after[k]) for k, b in buffers.items()] or [0.0])
    counts_equal = all(torch.equal(b, after[k]) for k, b in buffers.items()
                       if k.endswith("num_batches_tracked"))
    model.eval()
    with torch.no_grad():
        predicted = model(x).argmax(-1)
    accuracy = (predicted == y).double().mean().item()
    loss_diff = abs(loss.item() - report["losses"][0])
    print(f"{name:22s} {spec:52s} {len(keys):3d} keys ({len(buffers):2d} buffers) in order; "
          f"strict load ok; loss {loss.item():.6f} |d| {loss_diff:.1e}; grads |d| <= {grad_diff:.1e}; "
          f"buffers after |d| <= {buffer_diff:.1e}, counts equal {counts_equal}; eval accuracy "
          f"{accuracy:.3f} vs ddpkit {report['final_accuracy']:.3f}")
    ok = (loss_diff < 1e-5 and grad_diff < 1e-4 and buffer_diff < 1e-5 and counts_equal
          and abs(accuracy - report["final_accuracy"]) < 1e-9)
    return ok


def main():
    binary = sys.argv[1] if len(sys.argv) > 1 else os.path.join(HERE, "..", "..", "build", "bin",
                                                                "ddpkit")
    torch.set_num_threads(1)
    failed = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, (spec, make_batch) in CASES.items():
            if not check(name, spec, make_batch, binary, tmp):
                failed.append(name)
    if failed:
        sys.exit(f"FAILED: {', '.join(failed)}")
    print("all cases agree")


if __name__ == "__main__":
    main()
