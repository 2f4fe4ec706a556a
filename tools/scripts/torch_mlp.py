"""The PyTorch twin of ddpkit's `--model mlp:IN,H1,...,OUT`, for the scripts that compare ddpkit
with PyTorch: Linear layers with ReLU between them, named 0.weight, 0.bias, 2.weight, ... as
ddpkit names its parameters."""


def widths_of(spec):
    """[IN, H1, ..., OUT] from "mlp:IN,H1,...,OUT"."""
    return [int(w) for w in spec.split(":", 1)[1].split(",")]


def sequential(widths):
    import torch  # noqa: PLC0415 (the scripts import torch only when they need it)
    layers = []
    for i in range(len(widths) - 1):
        layers.append(torch.nn.Linear(widths[i], widths[i + 1]))
        if i + 2 < len(widths):
            layers.append(torch.nn.ReLU())
    return torch.nn.Sequential(*layers)
