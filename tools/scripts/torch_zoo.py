"""PyTorch twins of ddpkit's model specs for bench_vs_torch.py, importable by any PyTorch (Debian's
1.13 with torchvision, or a pip-installed 2.x without it):

  mlp:IN,H1,...,OUT                    torch_mlp.sequential
  resnet:B1,B2,B3,B4[,width=W][,in=C][,classes=K][,stem=small|imagenet]
                                       torchvision's ResNet with BasicBlock (widths W, 2W, 4W, 8W;
                                       the small stem a 3x3 stride-1 conv and no max pool)
  gpt:layers=L,heads=H,dim=D,ctx=T,vocab=V[,bias=0|1]
                                       nanoGPT's GPT, dropout 0, lm_head tied to wte

Where torchvision is missing, BasicBlock is re-stated below (the same modules and forward). The
GPT attends with scaled_dot_product_attention where the PyTorch has it, as nanoGPT does (its
"flash" path), else with nanoGPT's explicit masked softmax."""
import math

import torch_mlp


def parse(spec):
    """("resnet", [1, 1, 1, 1], {"width": "16", ...}) from a spec string."""
    family, rest = spec.split(":", 1)
    positional, keys = [], {}
    for part in rest.split(","):
        if "=" in part:
            key, value = part.split("=", 1)
            keys[key] = value
        else:
            positional.append(int(part))
    return family, positional, keys


def basic_block():
    try:
        from torchvision.models.resnet import BasicBlock  # noqa: PLC0415
        return BasicBlock
    except ImportError:
        pass
    import torch.nn as nn  # noqa: PLC0415

    class BasicBlock(nn.Module):  # torchvision 0.14's, for a PyTorch without torchvision
        expansion = 1

        def __init__(self, inplanes, planes, stride=1, downsample=None, *_args, **_kwargs):
            super().__init__()
            self.conv1 = nn.Conv2d(inplanes, planes, 3, stride, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(planes)
            self.relu = nn.ReLU(inplace=True)
            self.conv2 = nn.Conv2d(planes, planes, 3, 1, 1, bias=False)
            self.bn2 = nn.BatchNorm2d(planes)
            self.downsample = downsample

        def forward(self, x):
            identity = x if self.downsample is None else self.downsample(x)
            out = self.relu(self.bn1(self.conv1(x)))
            return self.relu(self.bn2(self.conv2(out)) + identity)

    return BasicBlock


def resnet(blocks, width=64, in_channels=3, classes=1000, small=False):
    import torch.nn as nn  # noqa: PLC0415
    block = basic_block()

    def stage(inplanes, planes, count, stride):
        downsample = None
        if stride != 1 or inplanes != planes:
            downsample = nn.Sequential(nn.Conv2d(inplanes, planes, 1, stride, bias=False),
                                       nn.BatchNorm2d(planes))
        layers = [block(inplanes, planes, stride, downsample)]
        layers += [block(planes, planes) for _ in range(1, count)]
        return nn.Sequential(*layers)

    model = nn.Module()  # torchvision's ResNet.forward, module for module
    model.conv1 = nn.Conv2d(in_channels, width, 3 if small else 7, 1 if small else 2,
                            1 if small else 3, bias=False)
    model.bn1 = nn.BatchNorm2d(width)
    model.relu = nn.ReLU(inplace=True)
    model.maxpool = nn.Identity() if small else nn.MaxPool2d(3, 2, 1)
    widths = [width, width * 2, width * 4, width * 8]
    inplanes = width
    for s in range(4):
        setattr(model, f"layer{s + 1}", stage(inplanes, widths[s], blocks[s], 1 if s == 0 else 2))
        inplanes = widths[s]
    model.avgpool = nn.AdaptiveAvgPool2d((1, 1))
    model.fc = nn.Linear(widths[3], classes)
    return nn.Sequential(model.conv1, model.bn1, model.relu, model.maxpool, model.layer1,
                         model.layer2, model.layer3, model.layer4, model.avgpool, nn.Flatten(1),
                         model.fc)


def gpt(layers, heads, dim, ctx, vocab, bias=True):
    import torch  # noqa: PLC0415
    import torch.nn as nn  # noqa: PLC0415
    import torch.nn.functional as F  # noqa: PLC0415
    flash = hasattr(F, "scaled_dot_product_attention")
    mask = torch.tril(torch.ones(ctx, ctx)).view(1, 1, ctx, ctx)

    def norm():
        ln = nn.LayerNorm(dim)
        if not bias:
            ln.bias = None
        return ln

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln_1 = norm()  # nanoGPT's parameter order: ln_1, attn, ln_2, mlp
            self.c_attn = nn.Linear(dim, 3 * dim, bias=bias)
            self.attn_proj = nn.Linear(dim, dim, bias=bias)
            self.ln_2 = norm()
            self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim, bias=bias), nn.GELU(),
                                     nn.Linear(4 * dim, dim, bias=bias))

        def attend(self, x):
            b, t, c = x.size()
            q, k, v = (z.view(b, t, heads, c // heads).transpose(1, 2)
                       for z in self.c_attn(x).split(dim, dim=2))
            if flash:
                y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            else:
                att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
                att = F.softmax(att.masked_fill(mask[:, :, :t, :t] == 0, float("-inf")), dim=-1)
                y = att @ v
            return self.attn_proj(y.transpose(1, 2).contiguous().view(b, t, c))

        def forward(self, x):
            x = x + self.attend(self.ln_1(x))
            return x + self.mlp(self.ln_2(x))

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte, self.wpe = nn.Embedding(vocab, dim), nn.Embedding(ctx, dim)
            self.h = nn.ModuleList([Block() for _ in range(layers)])
            self.ln_f = norm()
            self.lm_head = nn.Linear(dim, vocab, bias=False)
            self.wte.weight = self.lm_head.weight  # tied, as nanoGPT

        def forward(self, idx):
            x = self.wte(idx) + self.wpe(torch.arange(idx.size(1), device=idx.device))
            for block in self.h:
                x = block(x)
            return self.lm_head(self.ln_f(x))

    return GPT()


def model_of(spec):
    family, positional, keys = parse(spec)
    if family == "mlp":
        return torch_mlp.sequential(positional)
    if family == "resnet":
        return resnet(positional, int(keys.get("width", 64)), int(keys.get("in", 3)),
                      int(keys.get("classes", 1000)), keys.get("stem", "imagenet") == "small")
    if family == "gpt":
        return gpt(int(keys["layers"]), int(keys["heads"]), int(keys["dim"]), int(keys["ctx"]),
                   int(keys["vocab"]), keys.get("bias", "1") == "1")
    raise ValueError(f"unknown model family in {spec}")


def batch_of(spec, batch, side, generator):
    """A synthetic (input, targets) batch for `spec`; `side` is a ResNet's image size."""
    import torch  # noqa: PLC0415
    family, positional, keys = parse(spec)
    if family == "mlp":
        return (torch.randn(batch, positional[0], generator=generator),
                torch.randint(0, positional[-1], (batch,), generator=generator))
    if family == "resnet":
        return (torch.randn(batch, int(keys.get("in", 3)), side, side, generator=generator),
                torch.randint(0, int(keys.get("classes", 1000)), (batch,), generator=generator))
    ctx, vocab = int(keys["ctx"]), int(keys["vocab"])
    return (torch.randint(0, vocab, (batch, ctx), generator=generator),
            torch.randint(0, vocab, (batch, ctx), generator=generator))
