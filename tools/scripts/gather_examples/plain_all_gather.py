"""A plain dist.all_gather: the gathered rows are constants, no gradient flows back through them."""
import torch
import torch.distributed as dist


def gather(x):
    parts = [torch.zeros_like(x) for _ in range(dist.get_world_size())]
    dist.all_gather(parts, x)
    return torch.cat(parts)
