#!/usr/bin/python3
"""Writes the PyTorch 1.13 goldens for the transformer ops and nanoGPT's GPT (tests/testdata/).

    /usr/bin/python3 tools/scripts/golden/make_gpt_golden.py

The model below re-states nanoGPT's model.py (github.com/karpathy/nanoGPT) for torch 1.13: the
same modules, parameter names and order, init, and the non-flash attention path (1.13 has no
scaled_dot_product_attention). Dropout is omitted: at p = 0, torch's dropout returns its input
unchanged and records no autograd node, so the graph (and DDP's gradient-ready order) is the same.

Files:
  torch_gpt_ops.safetensors      layer_norm, softmax, causal self-attention: inputs, outputs and
                                 gradients of sum(out * r) for a fixed r (float64)
  torch_gpt_weights.safetensors  the small GPT's parameters, as named_parameters() lists them
  torch_gpt_case.safetensors     its input, targets, logits, loss, every gradient, and DDP's
                                 prev_iteration_grad_ready_order_indices (bias=1 and bias=0)
  nanogpt_state_dict_names.json  per ddpkit spec, state_dict()'s keys with dtype and shape, in
                                 order: the tied table under both names, lm_head.weight last

    /usr/bin/python3 tools/scripts/golden/make_gpt_golden.py names   # only the names file
"""
import json
import math
import os
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_torch_golden import OUT, write_safetensors  # noqa: E402

torch.set_num_threads(1)


class LayerNorm(nn.Module):
    """nanoGPT's LayerNorm: an optional bias (PyTorch's has none to switch off)."""

    def __init__(self, ndim, bias):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(ndim))
        self.bias = nn.Parameter(torch.zeros(ndim)) if bias else None

    def forward(self, x):
        return F.layer_norm(x, self.weight.shape, self.weight, self.bias, 1e-5)


def causal_attention(q, k, v, n_head):
    """nanoGPT's non-flash path on q, k, v of shape [B, T, C]."""
    B, T, C = q.size()
    q = q.view(B, T, n_head, C // n_head).transpose(1, 2)
    k = k.view(B, T, n_head, C // n_head).transpose(1, 2)
    v = v.view(B, T, n_head, C // n_head).transpose(1, 2)
    att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
    mask = torch.tril(torch.ones(T, T)).view(1, 1, T, T)
    att = att.masked_fill(mask == 0, float("-inf"))
    att = F.softmax(att, dim=-1)
    y = att @ v
    return y.transpose(1, 2).contiguous().view(B, T, C)


class CausalSelfAttention(nn.Module):
    def __init__(self, n_embd, n_head, bias):
        super().__init__()
        self.c_attn = nn.Linear(n_embd, 3 * n_embd, bias=bias)
        self.c_proj = nn.Linear(n_embd, n_embd, bias=bias)
        self.n_head, self.n_embd = n_head, n_embd

    def forward(self, x):
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        return self.c_proj(causal_attention(q, k, v, self.n_head))


class MLP(nn.Module):
    def __init__(self, n_embd, bias):
        super().__init__()
        self.c_fc = nn.Linear(n_embd, 4 * n_embd, bias=bias)
        self.gelu = nn.GELU()
        self.c_proj = nn.Linear(4 * n_embd, n_embd, bias=bias)

    def forward(self, x):
        return self.c_proj(self.gelu(self.c_fc(x)))


class Block(nn.Module):
    def __init__(self, n_embd, n_head, bias):
        super().__init__()
        self.ln_1 = LayerNorm(n_embd, bias)
        self.attn = CausalSelfAttention(n_embd, n_head, bias)
        self.ln_2 = LayerNorm(n_embd, bias)
        self.mlp = MLP(n_embd, bias)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, layers, heads, dim, ctx, vocab, bias):
        super().__init__()
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(vocab, dim),
            wpe=nn.Embedding(ctx, dim),
            h=nn.ModuleList([Block(dim, heads, bias) for _ in range(layers)]),
            ln_f=LayerNorm(dim, bias)))
        self.lm_head = nn.Linear(dim, vocab, bias=False)
        self.transformer.wte.weight = self.lm_head.weight  # weight tying, as nanoGPT
        self.apply(self._init_weights)
        for name, p in self.named_parameters():
            if name.endswith("c_proj.weight"):
                torch.nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * layers))

    def _init_weights(self, module):
        if isinstance(module, nn.Linear):
            torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if module.bias is not None:
                torch.nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)

    def forward(self, idx):
        b, t = idx.size()
        pos = torch.arange(0, t, dtype=torch.long)
        x = self.transformer.wte(idx) + self.transformer.wpe(pos)
        for block in self.transformer.h:
            x = block(x)
        return self.lm_head(self.transformer.ln_f(x))


def loss_of(logits, targets):
    return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1), ignore_index=-1)


def op_cases():
    g = torch.Generator().manual_seed(1)

    def rand(*shape):
        return torch.randn(*shape, generator=g, dtype=torch.float64)

    out = {}

    def record(prefix, fn, inputs):
        leaves = [t.clone().requires_grad_(True) for t in inputs.values()]
        y = fn(*leaves)
        r = rand(*y.shape)
        (y * r).sum().backward()
        for (name, t), leaf in zip(inputs.items(), leaves):
            out[f"{prefix}.{name}"] = t
            out[f"{prefix}.d{name}"] = leaf.grad
        out[f"{prefix}.y"], out[f"{prefix}.r"] = y, r

    record("ln", lambda x, w, b: F.layer_norm(x, (5,), w, b, 1e-5),
           {"x": rand(2, 3, 5) * 3 + 1, "w": rand(5), "b": rand(5)})
    record("ln_nobias", lambda x, w: F.layer_norm(x, (5,), w, None, 1e-5),
           {"x": rand(4, 5), "w": rand(5)})
    record("softmax", lambda x: F.softmax(x, dim=-1), {"x": rand(2, 3, 4) * 2})
    # c_attn's output [B=2, T=5, 3C] with C = 6 and 2 heads.
    record("attn", lambda qkv: causal_attention(*qkv.split(6, dim=2), 2), {"qkv": rand(2, 5, 18)})
    return out


def ready_order(model, idx, targets):
    """DDP's prev_iteration_grad_ready_order_indices: the first iteration's order, which DDP
    logs when it rebuilds its buckets at the second forward."""
    ddp = DistributedDataParallel(model)
    for _ in range(2):
        loss_of(ddp(idx), targets).backward()
    log = ddp._get_ddp_logging_data()
    text = log.get("prev_iteration_grad_ready_order_indices", "")
    return torch.tensor([int(v) for v in text.replace(",", " ").split()], dtype=torch.int64)


def model_case(bias):
    torch.manual_seed(0)
    # gpt:layers=2,heads=2,dim=8,ctx=8,vocab=11: B = 2, T = 6 < ctx.
    model = GPT(layers=2, heads=2, dim=8, ctx=8, vocab=11, bias=bias).double()
    with torch.no_grad():  # off nanoGPT's zeros and ones, so that every parameter matters
        for name, p in model.named_parameters():
            if "ln_" in name or name.endswith(".bias"):
                p.add_(0.1 * torch.randn_like(p))
    idx = torch.randint(0, 11, (2, 6))
    targets = torch.randint(0, 11, (2, 6))
    weights = {n: p.detach().clone() for n, p in model.named_parameters()}
    logits = model(idx)
    loss = loss_of(logits, targets)
    loss.backward()
    case = {"idx": idx, "targets": targets, "logits": logits, "loss": loss}
    case.update({"grad." + n: p.grad for n, p in model.named_parameters()})
    model.zero_grad(set_to_none=True)
    case["ready_order"] = ready_order(model, idx, targets)
    return weights, case


# ddpkit spec -> GPT arguments, for the state dict's key order.
NAMES_CASES = {
    "gpt:layers=2,heads=2,dim=8,ctx=8,vocab=11": dict(layers=2, heads=2, dim=8, ctx=8, vocab=11,
                                                      bias=True),
    "gpt:layers=1,heads=2,dim=8,ctx=4,vocab=5,bias=0": dict(layers=1, heads=2, dim=8, ctx=4,
                                                            vocab=5, bias=False),
}


def write_names():
    listing = {spec: [[k, str(v.dtype), list(v.shape)] for k, v in GPT(**kw).state_dict().items()]
               for spec, kw in NAMES_CASES.items()}
    path = os.path.join(OUT, "nanogpt_state_dict_names.json")
    with open(path, "w") as f:
        json.dump(listing, f, indent=1)
        f.write("\n")
    print(f"wrote {os.path.normpath(path)}")


def main():
    write_names()
    if sys.argv[1:] == ["names"]:
        return 0
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29563")
    dist.init_process_group("gloo", rank=0, world_size=1)
    meta = {"generated_by": "tools/scripts/golden/make_gpt_golden.py", "torch": torch.__version__}
    write_safetensors("torch_gpt_ops.safetensors", op_cases(), meta)
    weights, case = model_case(bias=True)
    write_safetensors("torch_gpt_weights.safetensors", weights, meta)
    _, case_nobias = model_case(bias=False)
    case["nobias.ready_order"] = case_nobias["ready_order"]
    write_safetensors("torch_gpt_case.safetensors", case, meta)
    print("ready order (bias=1):", case["ready_order"].tolist())
    print("ready order (bias=0):", case_nobias["ready_order"].tolist())
    print("names:", list(weights))
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
