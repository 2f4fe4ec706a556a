"""The usual ways a DDP loop meets uneven inputs, as jobs for check_join.py (each NAME(rank,
world_size) returns the job's dict; `check_join.py --examples` runs them all and checks each
gives its known verdict, recorded in docs/join.md).

    correct           DDP in Join, plain SGD: passes, and equals one process
    no_join           the same loop without Join: hangs
    join_without_ddp  Join given only the ZeRO optimizer, not the DDP model: hangs
    metric_allreduce  the loss all-reduces an accuracy of its own inside Join: hangs
    batchnorm         a BatchNorm1d model in Join: runs, identical models, differs from one
                      process (per-rank batch statistics)
    zero_not_joined   ZeroRedundancyOptimizer, Join given only the model: hangs
"""
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.distributed.optim import ZeroRedundancyOptimizer

ROWS, FEATURES, CLASSES = 8, 6, 3


def mlp(batchnorm=False):
    torch.manual_seed(0)
    layers = [torch.nn.Linear(FEATURES, 16)]
    if batchnorm:
        layers.append(torch.nn.BatchNorm1d(16))
    layers += [torch.nn.ReLU(), torch.nn.Linear(16, CLASSES)]
    return torch.nn.Sequential(*layers)


def batch(rank, i):
    gen = torch.Generator().manual_seed(1000 * rank + i)
    return torch.randn(ROWS, FEATURES, generator=gen), torch.randint(0, CLASSES, (ROWS,),
                                                                      generator=gen)


def cross_entropy(model, b):
    x, y = b
    return F.cross_entropy(model(x), y)


def sgd(params):
    return torch.optim.SGD(params, lr=0.1)


def zero(params):
    return ZeroRedundancyOptimizer(params, optimizer_class=torch.optim.SGD, lr=0.1)


def correct(rank, world_size):
    return {"model": mlp(), "optimizer": sgd, "batch": batch, "loss": cross_entropy}


def no_join(rank, world_size):
    return dict(correct(rank, world_size), joinables=lambda model, opt: None)


def join_without_ddp(rank, world_size):
    return {"model": mlp(), "optimizer": zero, "batch": batch, "loss": cross_entropy,
            "joinables": lambda model, opt: [opt]}


def metric_allreduce(rank, world_size):
    def loss(model, b):
        x, y = b
        out = model(x)
        accuracy = (out.argmax(1) == y).float().mean().detach()
        dist.all_reduce(accuracy)  # a metric every rank must join: a joined rank never does
        return F.cross_entropy(out, y)
    return dict(correct(rank, world_size), loss=loss)


def batchnorm(rank, world_size):
    return dict(correct(rank, world_size), model=mlp(batchnorm=True))


def zero_not_joined(rank, world_size):
    return {"model": mlp(), "optimizer": zero, "batch": batch, "loss": cross_entropy}
