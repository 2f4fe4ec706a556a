#!/usr/bin/env python3
"""ddpkit's DDP on a GPU against PyTorch on the same GPU: same weights, same rows, same steps.

Writes an MLP's initial weights and a dataset as safetensors (PyTorch's nn.Sequential names),
runs `ddpkit train --device cuda` on a threads world of --world ranks (all on one GPU) for
--steps SGD steps, and the same global batches through one PyTorch model on the GPU. Compares
the first step's gradients (`--save-grads`) and the final weights (`--save-weights`): the worst
relative error over all parameters, float32. For the lent GPU machine (PyTorch and the
safetensors package there); `ddpkit` from PATH (the bundle's env.sh) or build/bin.

Usage: tools/scripts/check_gpu_torch.py [--world 4] [--steps 10] [--batch 16]
"""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile

import torch
from safetensors.torch import load_file, save_file

import torch_mlp

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
WIDTHS = [32, 128, 128, 10]


def worst_error(ours, theirs):
    worst = 0.0
    for name, ref in theirs.items():
        got = ours[name].to(ref.device, torch.float64)
        ref = ref.to(torch.float64)
        worst = max(worst, ((got - ref).norm() / ref.norm()).item())
    return worst


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--world", type=int, default=4)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--batch", type=int, default=16, help="rows per rank per step")
    parser.add_argument("--lr", type=float, default=0.1)
    args = parser.parse_args()
    ddpkit = shutil.which("ddpkit") or os.path.join(ROOT, "build", "bin", "ddpkit")
    torch.manual_seed(0)
    model = torch_mlp.sequential(WIDTHS)
    rows = args.world * args.batch * args.steps
    x = torch.randn(rows, WIDTHS[0])
    y = torch.randint(0, WIDTHS[-1], (rows,))
    with tempfile.TemporaryDirectory() as tmp:
        paths = {k: os.path.join(tmp, k + ".safetensors") for k in ("w", "d", "g", "out")}
        save_file({k: v.contiguous() for k, v in model.state_dict().items()}, paths["w"])
        save_file({"x": x.contiguous(), "y": y.contiguous()}, paths["d"])
        spec = "mlp:" + ",".join(map(str, WIDTHS))
        common = [ddpkit, "train", "--device", "cuda", "--world-size", str(args.world), "--model",
                  spec, "--weights", paths["w"], "--data", paths["d"], "--batch-size",
                  str(args.batch), "--lr", str(args.lr), "--json"]
        subprocess.run(common + ["--steps", "1", "--save-grads", paths["g"]], check=True,
                       stdout=subprocess.DEVNULL)
        subprocess.run(common + ["--steps", str(args.steps), "--save-weights", paths["out"]],
                       check=True, stdout=subprocess.DEVNULL)
        ddp_grads, ddp_weights = load_file(paths["g"]), load_file(paths["out"])

    model = model.cuda()
    opt = torch.optim.SGD(model.parameters(), lr=args.lr)
    global_batch = args.world * args.batch
    first_grads = None
    for step in range(args.steps):
        opt.zero_grad(set_to_none=True)
        rows_of_step = slice(step * global_batch, (step + 1) * global_batch)
        loss = torch.nn.functional.cross_entropy(model(x[rows_of_step].cuda()),
                                                 y[rows_of_step].cuda())
        loss.backward()
        if first_grads is None:
            first_grads = {n: p.grad.detach().clone() for n, p in model.named_parameters()}
        opt.step()
    grad_error = worst_error(ddp_grads, first_grads)
    weight_error = worst_error(ddp_weights, dict(model.named_parameters()))
    print(f"ddpkit (cuda, {args.world} threads ranks on one GPU) vs PyTorch {torch.__version__} on "
          f"{torch.cuda.get_device_name()}: step-1 gradients rel. error {grad_error:.2e}, "
          f"weights after {args.steps} steps rel. error {weight_error:.2e}")
    ok = grad_error < 1e-5 and weight_error < 1e-5
    print("check_gpu_torch:", "agree" if ok else "DISAGREE")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
