"""Transformers for export_ddp_plan.py where torchvision has none, shaped as the models users
name: a GPT-2 124M (nanoGPT's module and parameter names, lm_head tied to the token
embedding) and a BERT-base encoder (Hugging Face's BertModel names, with its pooler).

Only the parameters' names, shapes and registration order, and the order backward produces
their gradients, matter to DDP's bucket plan; the forward passes are plain and unoptimised.
Use them as MODEL `plan_models:gpt2_124m` and `plan_models:bert_base`.
"""
import math

import torch
from torch import nn
from torch.nn import functional as F


class CausalSelfAttention(nn.Module):
    def __init__(self, n_embd, n_head, block_size):
        super().__init__()
        self.n_head = n_head
        self.c_attn = nn.Linear(n_embd, 3 * n_embd)
        self.c_proj = nn.Linear(n_embd, n_embd)
        # nanoGPT's causal mask buffer (registered where flash attention is unavailable).
        self.register_buffer("bias", torch.tril(torch.ones(block_size, block_size))
                             .view(1, 1, block_size, block_size))

    def forward(self, x):
        b, t, c = x.size()
        q, k, v = self.c_attn(x).split(c, dim=2)
        q, k, v = (z.view(b, t, self.n_head, c // self.n_head).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(k.size(-1))
        att = F.softmax(att.masked_fill(self.bias[:, :, :t, :t] == 0, float("-inf")), dim=-1)
        return self.c_proj((att @ v).transpose(1, 2).contiguous().view(b, t, c))


class GptMlp(nn.Module):
    def __init__(self, n_embd):
        super().__init__()
        self.c_fc = nn.Linear(n_embd, 4 * n_embd)
        self.c_proj = nn.Linear(4 * n_embd, n_embd)

    def forward(self, x):
        return self.c_proj(F.gelu(self.c_fc(x)))


class GptBlock(nn.Module):
    def __init__(self, n_embd, n_head, block_size):
        super().__init__()
        self.ln_1 = nn.LayerNorm(n_embd)
        self.attn = CausalSelfAttention(n_embd, n_head, block_size)
        self.ln_2 = nn.LayerNorm(n_embd)
        self.mlp = GptMlp(n_embd)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class Gpt(nn.Module):
    def __init__(self, vocab_size, block_size, n_layer, n_head, n_embd):
        super().__init__()
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(vocab_size, n_embd),
            wpe=nn.Embedding(block_size, n_embd),
            h=nn.ModuleList([GptBlock(n_embd, n_head, block_size) for _ in range(n_layer)]),
            ln_f=nn.LayerNorm(n_embd)))
        self.lm_head = nn.Linear(n_embd, vocab_size, bias=False)
        self.transformer.wte.weight = self.lm_head.weight  # tied, as GPT-2 and nanoGPT

    def forward(self, idx):
        pos = torch.arange(idx.size(1), device=idx.device)
        x = self.transformer.wte(idx) + self.transformer.wpe(pos)
        for block in self.transformer.h:
            x = block(x)
        return self.lm_head(self.transformer.ln_f(x))


def gpt2_124m():
    """GPT-2 small: 12 layers, 12 heads, 768 wide, vocabulary 50257, context 1024."""
    return Gpt(vocab_size=50257, block_size=1024, n_layer=12, n_head=12, n_embd=768)


class BertEmbeddings(nn.Module):
    def __init__(self, vocab_size, max_positions, hidden):
        super().__init__()
        self.word_embeddings = nn.Embedding(vocab_size, hidden)
        self.position_embeddings = nn.Embedding(max_positions, hidden)
        self.token_type_embeddings = nn.Embedding(2, hidden)
        self.LayerNorm = nn.LayerNorm(hidden, eps=1e-12)
        self.register_buffer("position_ids", torch.arange(max_positions).expand((1, -1)))

    def forward(self, ids):
        t = ids.size(1)
        x = (self.word_embeddings(ids) + self.position_embeddings(self.position_ids[:, :t]) +
             self.token_type_embeddings(torch.zeros_like(ids)))
        return self.LayerNorm(x)


class BertSelfAttention(nn.Module):
    def __init__(self, hidden, heads):
        super().__init__()
        self.heads = heads
        self.query = nn.Linear(hidden, hidden)
        self.key = nn.Linear(hidden, hidden)
        self.value = nn.Linear(hidden, hidden)

    def forward(self, x):
        b, t, c = x.size()
        q, k, v = (f(x).view(b, t, self.heads, c // self.heads).transpose(1, 2)
                   for f in (self.query, self.key, self.value))
        att = F.softmax((q @ k.transpose(-2, -1)) / math.sqrt(k.size(-1)), dim=-1)
        return (att @ v).transpose(1, 2).contiguous().view(b, t, c)


class BertOutput(nn.Module):
    """dense, then LayerNorm of (result + residual): BertSelfOutput and BertOutput alike."""

    def __init__(self, inner, hidden):
        super().__init__()
        self.dense = nn.Linear(inner, hidden)
        self.LayerNorm = nn.LayerNorm(hidden, eps=1e-12)

    def forward(self, x, residual):
        return self.LayerNorm(self.dense(x) + residual)


class BertAttention(nn.Module):
    def __init__(self, hidden, heads):
        super().__init__()
        self.self = BertSelfAttention(hidden, heads)
        self.output = BertOutput(hidden, hidden)

    def forward(self, x):
        return self.output(self.self(x), x)


class BertIntermediate(nn.Module):
    def __init__(self, hidden, inner):
        super().__init__()
        self.dense = nn.Linear(hidden, inner)

    def forward(self, x):
        return F.gelu(self.dense(x))


class BertLayer(nn.Module):
    def __init__(self, hidden, heads, inner):
        super().__init__()
        self.attention = BertAttention(hidden, heads)
        self.intermediate = BertIntermediate(hidden, inner)
        self.output = BertOutput(inner, hidden)

    def forward(self, x):
        x = self.attention(x)
        return self.output(self.intermediate(x), x)


class BertEncoder(nn.Module):
    def __init__(self, layers, hidden, heads, inner):
        super().__init__()
        self.layer = nn.ModuleList([BertLayer(hidden, heads, inner) for _ in range(layers)])

    def forward(self, x):
        for layer in self.layer:
            x = layer(x)
        return x


class BertPooler(nn.Module):
    def __init__(self, hidden):
        super().__init__()
        self.dense = nn.Linear(hidden, hidden)

    def forward(self, x):
        return torch.tanh(self.dense(x[:, 0]))


class Bert(nn.Module):
    def __init__(self, vocab_size, max_positions, layers, hidden, heads, inner):
        super().__init__()
        self.embeddings = BertEmbeddings(vocab_size, max_positions, hidden)
        self.encoder = BertEncoder(layers, hidden, heads, inner)
        self.pooler = BertPooler(hidden)

    def forward(self, ids):
        """The pooled [CLS] output: every parameter takes part in it."""
        return self.pooler(self.encoder(self.embeddings(ids)))


def bert_base():
    """BERT-base (uncased): 12 layers, 12 heads, 768 wide, 3072 inner, vocabulary 30522."""
    return Bert(vocab_size=30522, max_positions=512, layers=12, hidden=768, heads=12, inner=3072)


class MixedToy(nn.Module):
    """A small model whose plan exercises what DDP skips or splits: a frozen layer
    (requires_grad false, not in DDP's parameter list), a float64 layer (its own buckets), a
    tied weight (listed once) and a buffer."""

    def __init__(self):
        super().__init__()
        self.embed = nn.Linear(16, 32)
        self.frozen = nn.Linear(32, 32)
        self.frozen.requires_grad_(False)
        self.wide = nn.Linear(32, 64).double()
        self.hidden = nn.Linear(64, 64)
        self.again = nn.Linear(64, 64)
        self.again.weight = self.hidden.weight
        self.head = nn.Linear(64, 8)
        self.register_buffer("scale", torch.ones(8))

    def forward(self, x):
        x = torch.relu(self.frozen(torch.relu(self.embed(x))))
        x = torch.relu(self.wide(x.double())).float()
        return self.head(self.again(torch.relu(self.hidden(x)))) * self.scale


def mixed_toy():
    return MixedToy()



class ThreeDtypeToy(nn.Module):
    """Three dtypes in one model (float16, float64, float32), so that leftover buckets of
    several dtypes meet in one plan. The float16 tensors are gains applied in float32 (PyTorch
    1.13 has no float16 matmul on the CPU, and gloo no bfloat16)."""

    def __init__(self):
        super().__init__()
        self.first = nn.Linear(16, 48)
        self.gain = nn.Parameter(torch.ones(48, dtype=torch.float16))
        self.wide = nn.Linear(48, 32).double()
        self.head = nn.Linear(32, 8)
        self.head_gain = nn.Parameter(torch.ones(8, 8, dtype=torch.float16))

    def forward(self, x):
        x = torch.relu(self.first(x)) * self.gain.float()
        x = torch.relu(self.wide(x.double())).float()
        return self.head(x) @ self.head_gain.float()


def three_dtype_toy():
    return ThreeDtypeToy()


class LayerScaleToy(nn.Module):
    """Three linears, the first two followed by an in-place LayerScale (timm's LayerScale with
    inplace=True: x.mul_(gamma)), the first on a reshaped view. In torch.compile's forward graph
    a mul_ node has no user — later nodes read the tensor it changed through the node before it —
    and DDPOptimizer counts gamma1 (its mul_ is a method of a view, a call_method node) but never
    gamma2 (a method of a linear's output, a call_function node). At small caps the bucket
    holding gamma1's mul_ is full with no output leaving it, so DDPOptimizer grows it past its
    cap (docs/plan_files.md, "Compiled DDP")."""

    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(32, 512)
        self.gamma1 = nn.Parameter(torch.full((512,), 0.1))
        self.fc2 = nn.Linear(512, 512)
        self.gamma2 = nn.Parameter(torch.full((512,), 0.1))
        self.head = nn.Linear(512, 8)

    def forward(self, x):
        h = self.fc1(x).view(-1, 512)
        h.mul_(self.gamma1)
        g = self.fc2(h)
        g.mul_(self.gamma2)
        return self.head(g)


def layer_scale_toy():
    return LayerScaleToy()
