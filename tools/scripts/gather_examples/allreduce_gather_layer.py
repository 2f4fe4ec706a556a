"""A correct GatherLayer (ED4CT, vissl, solo-learn, lightly after its fix): the backward sums the
incoming gradient over ranks, then returns this rank's rows (a reduce_scatter(SUM) in two steps)."""
import torch
import torch.distributed as dist


class GatherLayer(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.rows = x.shape[0]
        parts = [torch.zeros_like(x) for _ in range(dist.get_world_size())]
        dist.all_gather(parts, x.contiguous())
        return torch.cat(parts)

    @staticmethod
    def backward(ctx, grad):
        grad = grad.contiguous().clone()
        dist.all_reduce(grad)
        r = dist.get_rank()
        return grad[r * ctx.rows:(r + 1) * ctx.rows]
