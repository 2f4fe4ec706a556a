#!/usr/bin/python3
"""PyTorch's conv2d forward + backward (input, weight) on the shapes of autograd_benchmark's
BM_Conv2dForwardBackward, one thread: on the CPU PyTorch 1.13 runs float32 convolutions with
oneDNN, so this is the oneDNN side of the im2col + GEMM comparison.

    /usr/bin/python3 tools/scripts/bench_conv_torch.py
"""
import time

import torch

torch.set_num_threads(1)
for n, c, s in ((32, 16, 32), (32, 64, 8), (128, 16, 8)):
    x = torch.rand(n, c, s, s, requires_grad=True)
    w = torch.rand(c, c, 3, 3, requires_grad=True)
    grad = torch.ones(n, c, s, s)
    best = float("inf")
    for _ in range(20):
        x.grad = w.grad = None
        start = time.perf_counter()
        torch.nn.functional.conv2d(x, w, padding=1).backward(grad)
        best = min(best, time.perf_counter() - start)
    flops = 3 * 2.0 * n * c * c * 9 * s * s
    print(f"N={n} C={c} S={s}: {best * 1e3:.2f} ms, {flops / best / 1e9:.1f} GFLOP/s "
          f"(mkldnn enabled: {torch.backends.mkldnn.is_available()})")
