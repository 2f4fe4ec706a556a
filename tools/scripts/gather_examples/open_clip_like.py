"""open_clip's gather_features (src/open_clip/loss.py), rewritten with its two flags' behaviour:
gather_with_grad uses the differentiable all_gather; otherwise a plain all_gather, and without
local_loss this rank's slot is replaced by its live features so that only it carries a gradient."""
import torch
import torch.distributed as dist
import torch.distributed.nn


def gather_features(image_features, text_features, local_loss=False, gather_with_grad=False,
                    rank=0, world_size=1):
    if gather_with_grad:
        return (torch.cat(torch.distributed.nn.all_gather(image_features)),
                torch.cat(torch.distributed.nn.all_gather(text_features)))
    images = [torch.zeros_like(image_features) for _ in range(world_size)]
    texts = [torch.zeros_like(text_features) for _ in range(world_size)]
    dist.all_gather(images, image_features)
    dist.all_gather(texts, text_features)
    if not local_loss:
        images[rank] = image_features
        texts[rank] = text_features
    return torch.cat(images), torch.cat(texts)
