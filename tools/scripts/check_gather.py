#!/usr/bin/python3
"""Check a contrastive all-gather's backward the way `ddpkit contrastive` checks its own.

    /usr/bin/python3 tools/scripts/check_gather.py MODULE:NAME [--ranks 2..4] [--arg k=v ...]

MODULE may be a path to a .py file. NAME is a torch.autograd.Function subclass (called as NAME.apply(x)), a function of one tensor
(x [b, d] -> [n*b, d], or a list of n tensors), or a pair function like open_clip's
gather_features(image_features, text_features, local_loss, gather_with_grad, rank, world_size)
returning (all_image, all_text). --arg sets its keyword arguments (Python literals); rank and
world_size are filled in when it takes them.

On n gloo processes, two linear towers and a learnable logit scale compute the CLIP loss on
different pairs per rank, gathering features with NAME; the gradients are averaged as DDP does
and compared with one process on the concatenated batch. Printed per layout ([local, global]
rows, or [global, global]): rel_error, the best-fit scale s in g ~ s*g_ref, the residual
|g - s*g_ref| / |s*g_ref|, the logit-scale error, the verdict (ddpkit contrastive's wording) and
the ddpkit layout x gather mode whose gradient is the same. torch stays out of ddpkit's build.
"""
import argparse
import ast
import importlib
import inspect
import os
import sys
import tempfile

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F

B_LOCAL, D_IN, D_OUT = 3, 5, 4
MODES = ("sum", "allreduce_slice", "slice", "none", "avg")


# ddpkit's five backward modes (docs/contrastive.md), to name the one the user's gather matches.
class _Gather(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, mode):
        ctx.mode = mode
        parts = [torch.zeros_like(x) for _ in range(dist.get_world_size())]
        dist.all_gather(parts, x.contiguous())
        return torch.cat(parts)

    @staticmethod
    def backward(ctx, g):
        n, r = dist.get_world_size(), dist.get_rank()
        g = g.contiguous().clone()
        if ctx.mode in ("sum", "allreduce_slice", "avg"):
            dist.all_reduce(g)
        if ctx.mode == "avg":
            g /= n
        if ctx.mode == "none":
            g.zero_()
        b = g.shape[0] // n
        return g[r * b:(r + 1) * b], None


def load(spec):
    module, _, name = spec.rpartition(":")
    if module.endswith(".py"):  # a file path: import it from its folder
        sys.path.insert(0, os.path.dirname(os.path.abspath(module)))
        module = os.path.basename(module)[:-3]
    else:
        sys.path.insert(0, os.getcwd())
    return getattr(importlib.import_module(module), name)


def make_gather(obj, kwargs):
    """Returns gather(img, txt) -> (all_img, all_txt) built on the user's object."""
    if isinstance(obj, type) and issubclass(obj, torch.autograd.Function):
        one = obj.apply
    else:
        params = inspect.signature(obj).parameters
        required = [k for k, v in params.items() if v.default is inspect.Parameter.empty]
        if len(required) >= 2:  # a pair gather like open_clip's gather_features
            kw = dict(kwargs)
            for key, value in (("rank", dist.get_rank()), ("world_size", dist.get_world_size())):
                if key in params:
                    kw[key] = value
            return lambda img, txt: obj(img, txt, **kw)
        one = lambda x: obj(x, **kwargs)

    def cat(out):
        return torch.cat(list(out)) if isinstance(out, (list, tuple)) else out

    return lambda img, txt: (cat(one(img)), cat(one(txt)))


def clip_loss(rows_i, rows_t, cols_i, cols_t, scale, first):
    labels = torch.arange(rows_i.shape[0]) + first
    logits = scale.exp() * rows_i @ cols_t.T
    logits_t = scale.exp() * rows_t @ cols_i.T
    return (F.cross_entropy(logits, labels) + F.cross_entropy(logits_t, labels)) / 2


def model_and_data(n):
    gen = torch.Generator().manual_seed(7)
    wi = torch.randn(D_IN, D_OUT, generator=gen, dtype=torch.float64)
    wt = torch.randn(D_IN, D_OUT, generator=gen, dtype=torch.float64)
    xi = torch.randn(n * B_LOCAL, D_IN, generator=gen, dtype=torch.float64) / 2
    xt = xi + 0.3 * torch.randn(n * B_LOCAL, D_IN, generator=gen, dtype=torch.float64)
    params = [wi.requires_grad_(), wt.requires_grad_(), torch.tensor(0.5, dtype=torch.float64,
                                                                      requires_grad=True)]
    return params, xi, xt


def flat_grads(params):
    return torch.cat([p.grad.reshape(-1) for p in params[:2]]), params[2].grad.clone()


def ddp_gradient(gather, layout):
    """One backward of this rank's loss, gradients averaged over ranks as DDP does."""
    n, r = dist.get_world_size(), dist.get_rank()
    params, xi, xt = model_and_data(n)
    own = slice(r * B_LOCAL, (r + 1) * B_LOCAL)
    img, txt = xi[own] @ params[0], xt[own] @ params[1]
    all_img, all_txt = gather(img, txt)
    if layout == "local":
        loss = clip_loss(img, txt, all_img, all_txt, params[2], r * B_LOCAL)
    else:
        loss = clip_loss(all_img, all_txt, all_img, all_txt, params[2], 0)
    loss.backward()
    for p in params:
        if p.grad is None:
            p.grad = torch.zeros_like(p)
        dist.all_reduce(p.grad)
        p.grad /= n
    return flat_grads(params)


def reference_gradient(n):
    params, xi, xt = model_and_data(n)
    img, txt = xi @ params[0], xt @ params[1]
    clip_loss(img, txt, img, txt, params[2], 0).backward()
    return flat_grads(params)


def figures(g, ref):
    enc, t = g
    enc_ref, t_ref = ref
    s = float(enc @ enc_ref / (enc_ref @ enc_ref))
    rel = float((enc - enc_ref).norm() / enc_ref.norm())
    residual = float((enc - s * enc_ref).norm() / (s * enc_ref).norm()) if s != 0 else 0.0
    t_err = float((t - t_ref).abs() / t_ref.abs())
    return rel, s, residual, t_err


def verdict(rel, s, residual):
    if rel < 1e-9:
        return "exact"
    if s == 0 or abs(s) < 1e-12:
        return "no encoder gradient"
    if residual < 1e-9:
        return "a rescale by %.4g (1/%.3g)" % (s, 1 / s)
    return "biased: not a rescale"


def matching_modes(g, layout):
    same = []
    for mode in MODES:
        ours = ddp_gradient(lambda i, t, m=mode: (_Gather.apply(i, m), _Gather.apply(t, m)), layout)
        if (g[0] - ours[0]).norm() <= 1e-9 * max(1.0, float(ours[0].norm())):
            same.append(mode)
    return same


def layouts_for(kwargs):
    if "local_loss" in kwargs:
        return ["local" if kwargs["local_loss"] else "global"]
    return ["local", "global"]


def worker(rank, n, init_file, spec, kwargs, out):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method="file://" + init_file, rank=rank, world_size=n)
    gather = make_gather(load(spec), kwargs)
    rows = []
    for layout in layouts_for(kwargs):
        g = ddp_gradient(gather, layout)
        rows.append((layout, figures(g, reference_gradient(n)), matching_modes(g, layout)))
    if rank == 0:
        out.put(rows)
    dist.barrier()
    dist.destroy_process_group()


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("target", help="MODULE:NAME (MODULE importable from here, or a path FILE.py)")
    p.add_argument("--ranks", type=int, default=3, choices=(2, 3, 4))
    p.add_argument("--arg", action="append", default=[], help="keyword argument k=v (a literal)")
    a = p.parse_args(argv)
    kwargs = {}
    for item in a.arg:
        key, _, value = item.partition("=")
        kwargs[key] = ast.literal_eval(value)
    return a, kwargs


def main(argv):
    a, kwargs = parse_args(argv)
    load(a.target)  # fail here, in one process, if the target does not import
    out = mp.get_context("spawn").SimpleQueue()
    with tempfile.TemporaryDirectory() as tmp:
        mp.spawn(worker, args=(a.ranks, os.path.join(tmp, "init"), a.target, kwargs, out),
                 nprocs=a.ranks)
    rows = out.get()
    extra = "".join(" %s=%r" % kv for kv in kwargs.items())
    print("check_gather: %s%s on %d gloo ranks, %d pairs each, vs one process on the "
          "concatenated batch" % (a.target, extra, a.ranks, B_LOCAL))
    print("   %-7s %14s %10s %12s %14s  %-26s %s" % ("layout", "rel_error", "scale", "residual",
                                                  "logit_scale_err", "verdict", "ddpkit mode"))
    for layout, (rel, s, residual, t_err), modes in rows:
        print("   %-7s %14.3e %10.4f %12.3e %14.3e  %-26s %s" % (
            layout, rel, s, residual, t_err, verdict(rel, s, residual),
            "%s x %s" % (layout, " = ".join(modes)) if modes else "(none of ddpkit's modes)"))


if __name__ == "__main__":
    main(sys.argv[1:])
