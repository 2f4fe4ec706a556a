#!/usr/bin/env python3
"""Parameter tables for `ddpkit simulate --param-table` (tests/testdata/simulate/).

One line per trained parameter in registration order: NAME DTYPE AxBx... FORWARD_FLOPS, the
forward FLOPs per sample attributed to it (a weight: its layer's multiply-adds x 2; a bias or a
norm's weight: one FLOP per output element). ResNet-50 comes from torchvision (run with
Debian's /usr/bin/python3) at 224x224, measured with forward hooks; BERT-base (sequence 128) and
a GPT-2 124M-shaped decoder (sequence 1024, lm_head tied to wte) are written from their
published shapes, attention's score and context products attributed to the query (c_attn)
weight (GPT-2's tied head: see gpt2()). The plan files (export_ddp_plan.py, read by
`simulate --params`) now carry hook-counted FLOPs and the observed grad-ready order; these
tables remain for `--param-table`.
"""
import sys


def write(path, rows, note):
    with open(path, "w") as f:
        f.write(f"# {note}\n# name dtype shape forward_flops_per_sample\n")
        for name, shape, flops in rows:
            f.write(f"{name} f32 {'x'.join(map(str, shape))} {int(flops)}\n")


def resnet50():
    import torch, torchvision
    torch.set_num_threads(1)
    model = torchvision.models.resnet50()
    flops = {}

    def hook(module, inputs, output):
        out = output.numel()  # batch 1
        if isinstance(module, torch.nn.Conv2d):
            k = module.weight[0].numel()  # Cin/groups * kh * kw
            flops[id(module.weight)] = 2 * out * k
        elif isinstance(module, torch.nn.Linear):
            flops[id(module.weight)] = 2 * out * module.in_features
            flops[id(module.bias)] = out
        elif isinstance(module, torch.nn.BatchNorm2d):
            flops[id(module.weight)] = flops[id(module.bias)] = out

    for m in model.modules():
        if isinstance(m, (torch.nn.Conv2d, torch.nn.Linear, torch.nn.BatchNorm2d)):
            m.register_forward_hook(hook)
    with torch.no_grad():
        model(torch.zeros(1, 3, 224, 224))
    return [(n, tuple(p.shape), flops[id(p)]) for n, p in model.named_parameters()]


def transformer_layer(prefix, names, d, ff, t):
    rows = []
    for name, shape in names:
        numel = 1
        for s in shape:
            numel *= s
        flops = 2 * numel * t if len(shape) == 2 else t * shape[0]
        if name in ("attention.self.query.weight", "attn.c_attn.weight"):
            flops += 4 * t * t * d  # Q K^T and attention x V
        rows.append((prefix + name, shape, flops))
    return rows


def bert_base(t=128, d=768, ff=3072, layers=12, vocab=30522):
    rows = [("embeddings.word_embeddings.weight", (vocab, d), t * d),
            ("embeddings.position_embeddings.weight", (512, d), t * d),
            ("embeddings.token_type_embeddings.weight", (2, d), t * d),
            ("embeddings.LayerNorm.weight", (d,), t * d), ("embeddings.LayerNorm.bias", (d,), t * d)]
    names = []
    for part in ("query", "key", "value"):
        names += [(f"attention.self.{part}.weight", (d, d)), (f"attention.self.{part}.bias", (d,))]
    names += [("attention.output.dense.weight", (d, d)), ("attention.output.dense.bias", (d,)),
              ("attention.output.LayerNorm.weight", (d,)), ("attention.output.LayerNorm.bias", (d,)),
              ("intermediate.dense.weight", (ff, d)), ("intermediate.dense.bias", (ff,)),
              ("output.dense.weight", (d, ff)), ("output.dense.bias", (d,)),
              ("output.LayerNorm.weight", (d,)), ("output.LayerNorm.bias", (d,))]
    for l in range(layers):
        rows += transformer_layer(f"encoder.layer.{l}.", names, d, ff, t)
    rows += [("pooler.dense.weight", (d, d), 2 * d * d), ("pooler.dense.bias", (d,), d)]
    return rows


def gpt2(t=1024, d=768, ff=3072, layers=12, vocab=50257):
    # wte also serves as the tied lm_head, but its gradient is complete only when the embedding's
    # part arrives, last; the head's matmul runs first in backward, so its FLOPs go to the first
    # gradient ready (ln_f.bias, the last registered).
    rows = [("wte.weight", (vocab, d), t * d), ("wpe.weight", (1024, d), t * d)]
    names = [("ln_1.weight", (d,)), ("ln_1.bias", (d,)), ("attn.c_attn.weight", (d, 3 * d)),
             ("attn.c_attn.bias", (3 * d,)), ("attn.c_proj.weight", (d, d)), ("attn.c_proj.bias", (d,)),
             ("ln_2.weight", (d,)), ("ln_2.bias", (d,)), ("mlp.c_fc.weight", (d, ff)),
             ("mlp.c_fc.bias", (ff,)), ("mlp.c_proj.weight", (ff, d)), ("mlp.c_proj.bias", (d,))]
    for l in range(layers):
        rows += transformer_layer(f"h.{l}.", names, d, ff, t)
    rows += [("ln_f.weight", (d,), t * d), ("ln_f.bias", (d,), t * d + 2 * vocab * d * t)]
    return rows


if __name__ == "__main__":
    out = sys.argv[1] if len(sys.argv) > 1 else "tests/testdata/simulate"
    write(f"{out}/resnet50.txt", resnet50(), "torchvision resnet50, 224x224, FLOPs by forward hooks")
    write(f"{out}/bert_base.txt", bert_base(), "BERT-base shapes, sequence 128")
    write(f"{out}/gpt2.txt", gpt2(), "GPT-2 124M shapes, sequence 1024, lm_head tied to wte")
