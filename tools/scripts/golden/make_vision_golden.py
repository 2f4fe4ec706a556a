#!/usr/bin/python3
"""Writes the vision goldens under tests/testdata/ from PyTorch 1.13 and torchvision 0.14.

    /usr/bin/python3 tools/scripts/golden/make_vision_golden.py          # every case
    /usr/bin/python3 tools/scripts/golden/make_vision_golden.py ops      # only the named ones

ops:    torch_vision_ops.safetensors — conv2d, batch_norm (training and eval, the running stats
        after a training forward), max_pool2d, adaptive_avg_pool2d and flatten on a few shapes,
        strides and paddings: inputs, outputs and the gradients of sum(out * r) for a fixed r.
resnet: torchvision_resnet_names.json — every parameter's and buffer's name and shape, in
        torchvision's order, of ResNet-18 and of the small specs below; and for each small spec
        torch_resnet_<case>_weights.safetensors (its state dict) and torch_resnet_<case>.safetensors
        (a batch, logits, loss, every parameter's gradient, the buffers after that training forward).
"""
import json
import os
import sys

import torch
import torchvision
from torchvision.models.resnet import BasicBlock, ResNet

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_torch_golden import OUT, run_cases, write_safetensors  # noqa: E402

F = torch.nn.functional


def ops_case():
    torch.manual_seed(3)
    out = {}

    def record(name, fn, *inputs):
        """Forward, then backward of sum(out * r): the output, r and each input's gradient."""
        leaves = [t.clone().requires_grad_(t.is_floating_point()) for t in inputs]
        y = fn(*leaves)
        r = torch.randn_like(y)
        (y * r).sum().backward()
        out[f"{name}.out"], out[f"{name}.r"] = y, r
        for i, (t, leaf) in enumerate(zip(inputs, leaves)):
            out[f"{name}.in{i}"] = t
            if leaf.grad is not None:
                out[f"{name}.grad{i}"] = leaf.grad

    dt = torch.float32
    for name, (n, c, h, w, o, k, stride, pad, bias) in {
            "conv_a": (2, 3, 7, 6, 4, 3, 1, 1, True),
            "conv_b": (2, 3, 9, 8, 5, 3, 2, 0, False),
            "conv_c": (3, 4, 5, 5, 6, 1, 1, 0, True),
            "conv_d": (1, 2, 8, 8, 3, 7, 2, 3, False),
            "conv_e": (2, 4, 6, 6, 2, 1, 2, 0, False)}.items():
        args = [torch.randn(n, c, h, w, dtype=dt), torch.randn(o, c, k, k, dtype=dt)]
        if bias:
            args.append(torch.randn(o, dtype=dt))
        record(name, lambda *a, s=stride, p=pad: F.conv2d(*a, stride=s, padding=p), *args)

    for name, shape in {"bn_a": (4, 3, 5, 5), "bn_b": (6, 5)}.items():
        x = torch.randn(*shape, dtype=dt) * 2 + 1
        weight, bias = torch.randn(shape[1], dtype=dt), torch.randn(shape[1], dtype=dt)
        rm, rv = torch.randn(shape[1], dtype=dt), torch.rand(shape[1], dtype=dt) + 0.5
        out[f"{name}.running_mean0"], out[f"{name}.running_var0"] = rm.clone(), rv.clone()
        for mode, training in (("train", True), ("eval", False)):
            m, v = rm.clone(), rv.clone()
            record(f"{name}.{mode}", lambda a, b, c: F.batch_norm(
                a, m, v, b, c, training=training, momentum=0.1, eps=1e-5), x, weight, bias)
            out[f"{name}.{mode}.running_mean"], out[f"{name}.{mode}.running_var"] = m, v

    for name, (shape, k, stride, pad) in {"maxpool_a": ((2, 3, 7, 7), 3, 2, 1),
                                          "maxpool_b": ((1, 2, 6, 5), 2, 2, 0),
                                          "maxpool_c": ((2, 2, 5, 5), 3, 1, 1)}.items():
        record(name, lambda a, k=k, s=stride, p=pad: F.max_pool2d(a, k, s, p),
               torch.randn(*shape, dtype=dt))
    for name, (shape, size) in {"avgpool_a": ((2, 3, 5, 4), (1, 1)),
                                "avgpool_b": ((2, 2, 7, 5), (3, 2))}.items():
        record(name, lambda a, s=size: F.adaptive_avg_pool2d(a, s), torch.randn(*shape, dtype=dt))
    record("flatten", lambda a: torch.flatten(a, 1), torch.randn(2, 3, 2, 2, dtype=dt))
    write_safetensors("torch_vision_ops.safetensors", out)


class SpecResNet(ResNet):
    """torchvision's ResNet for a ddpkit spec: BasicBlock, layer1 `width` channels (torchvision
    fixes 64; the same code with another number), `in_channels` inputs, and the CIFAR stem
    (3x3 stride-1 conv1, no max pool) when small. Names are torchvision's own."""

    def __init__(self, blocks, width=64, in_channels=3, classes=1000, small=False):
        torch.nn.Module.__init__(self)
        self._norm_layer, self.dilation, self.groups, self.base_width = \
            torch.nn.BatchNorm2d, 1, 1, 64
        self.inplanes = width
        self.conv1 = torch.nn.Conv2d(in_channels, width, 3 if small else 7, 1 if small else 2,
                                     1 if small else 3, bias=False)
        self.bn1 = torch.nn.BatchNorm2d(width)
        self.relu = torch.nn.ReLU(inplace=True)
        self.maxpool = torch.nn.Identity() if small else torch.nn.MaxPool2d(3, 2, 1)
        self.layer1 = self._make_layer(BasicBlock, width, blocks[0])
        self.layer2 = self._make_layer(BasicBlock, width * 2, blocks[1], stride=2)
        self.layer3 = self._make_layer(BasicBlock, width * 4, blocks[2], stride=2)
        self.layer4 = self._make_layer(BasicBlock, width * 8, blocks[3], stride=2)
        self.avgpool = torch.nn.AdaptiveAvgPool2d((1, 1))
        self.fc = torch.nn.Linear(width * 8, classes)
        for m in self.modules():  # torchvision's init
            if isinstance(m, torch.nn.Conv2d):
                torch.nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(m, torch.nn.BatchNorm2d):
                torch.nn.init.constant_(m.weight, 1)
                torch.nn.init.constant_(m.bias, 0)


# case -> (ddpkit spec, SpecResNet arguments, input shape)
RESNET_CASES = {
    "small": ("resnet:1,2,1,1,width=2,in=1,classes=5,stem=small",
              dict(blocks=(1, 2, 1, 1), width=2, in_channels=1, classes=5, small=True), (3, 1, 8, 8)),
    "imagenet": ("resnet:1,1,1,1,width=2,classes=3",
                 dict(blocks=(1, 1, 1, 1), width=2, classes=3), (2, 3, 32, 32)),
}


def names(model):
    return {"parameters": [[k, list(p.shape)] for k, p in model.named_parameters()],
            "buffers": [[k, list(b.shape)] for k, b in model.named_buffers()],
            "state_dict": list(model.state_dict().keys())}


def resnet_case():
    listing = {"resnet:2,2,2,2": names(torchvision.models.resnet18())}
    assert listing["resnet:2,2,2,2"] == names(SpecResNet((2, 2, 2, 2)))
    for case, (spec, kwargs, shape) in RESNET_CASES.items():
        torch.manual_seed(4)
        model = SpecResNet(**kwargs)
        listing[spec] = names(model)
        # Non-trivial BatchNorm parameters and running stats, so every term of the math shows.
        with torch.no_grad():
            for m in model.modules():
                if isinstance(m, torch.nn.BatchNorm2d):
                    m.weight.uniform_(0.5, 1.5)
                    m.bias.uniform_(-0.2, 0.2)
                    m.running_mean.uniform_(-0.1, 0.1)
                    m.running_var.uniform_(0.8, 1.2)
        write_safetensors(f"torch_resnet_{case}_weights.safetensors",
                          {k: v.clone() for k, v in model.state_dict().items()}, {"format": "pt"})
        x = torch.randn(*shape)
        y = torch.randint(0, kwargs["classes"], (shape[0],))
        logits = model(x)
        loss = F.cross_entropy(logits, y)
        loss.backward()
        result = {"x": x, "y": y, "logits": logits, "loss": loss}
        result.update({f"grad.{k}": p.grad for k, p in model.named_parameters()})
        result.update({f"after.{k}": b for k, b in model.named_buffers()})
        write_safetensors(f"torch_resnet_{case}.safetensors", result, {"spec": spec})
    path = os.path.join(OUT, "torchvision_resnet_names.json")
    with open(path, "w") as f:
        json.dump(listing, f, indent=1)
        f.write("\n")
    print(f"wrote {path}")


CASES = {"ops": ops_case, "resnet": resnet_case}

if __name__ == "__main__":
    torch.set_num_threads(1)
    print(f"torch {torch.__version__}, torchvision {torchvision.__version__}", file=sys.stderr)
    run_cases(CASES)
