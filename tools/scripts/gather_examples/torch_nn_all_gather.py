"""torch.distributed.nn.all_gather: its backward is a reduce_scatter(SUM) (emulated with all-to-all
on gloo), so each rank gets back the sum over ranks of its rows' gradient."""
import torch
import torch.distributed.nn


def gather(x):
    return torch.cat(torch.distributed.nn.all_gather(x))
