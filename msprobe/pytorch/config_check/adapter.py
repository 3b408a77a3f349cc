"""PyTorch parts of config_check's dynamic collection (see msprobe.core.config_check.checker)."""

from __future__ import annotations

import torch

RANDOM_FUNCS = ("rand", "randint", "randn", "rand_like", "randint_like", "randn_like", "manual_seed")
RANDOM_TENSOR_METHODS = ("exponential_", "geometric_", "log_normal_", "cauchy_")


def is_module(obj) -> bool:
    return isinstance(obj, torch.nn.Module)


def is_tensor(obj) -> bool:
    return isinstance(obj, torch.Tensor)


def rank():
    dist = getattr(torch, "distributed", None)
    if dist is not None and dist.is_available() and dist.is_initialized():
        return dist.get_rank()
    return None


def register_pre_hook(model, on_forward) -> None:
    def hook(module, args, kwargs):
        on_forward(args, kwargs)
        return None  # the inputs are never changed

    model.register_forward_pre_hook(hook, with_kwargs=True)


def named_parameters(model):
    return model.named_parameters()


def features(tensor) -> dict:
    """max, min, mean, norm of a tensor as Python floats, computed in float32 (None for an empty or
    complex tensor)."""
    with torch.no_grad():
        t = tensor.detach()
        if t.numel() == 0 or t.is_complex():
            return {"max": None, "min": None, "mean": None, "norm": None}
        if t.dtype != torch.float32:
            t = t.float()
        values = torch.stack([t.max(), t.min(), t.mean(), t.norm()]).cpu().tolist()
    return dict(zip(("max", "min", "mean", "norm"), (float(v) for v in values)))


def features_many(tensors) -> list:
    """:func:`features` of many tensors with one host transfer per device (not one sync per tensor)."""
    out = [None] * len(tensors)
    by_device = {}
    with torch.no_grad():
        for i, tensor in enumerate(tensors):
            t = tensor.detach()
            if t.numel() == 0 or t.is_complex():
                out[i] = {"max": None, "min": None, "mean": None, "norm": None}
                continue
            if t.dtype != torch.float32:
                t = t.float()
            by_device.setdefault(t.device, []).append((i, torch.stack([t.max(), t.min(), t.mean(), t.norm()])))
        for items in by_device.values():
            values = torch.stack([v for _, v in items]).cpu().tolist()
            for (i, _), row in zip(items, values):
                out[i] = dict(zip(("max", "min", "mean", "norm"), (float(v) for v in row)))
    return out


def patch_random(track) -> None:
    """Count calls of torch's random functions (``torch.rand`` ... and ``Tensor.exponential_`` ...)."""
    for name in RANDOM_FUNCS:
        func = getattr(torch, name, None)
        if func is not None:
            setattr(torch, name, track(func, f"torch.{name}"))
    for name in RANDOM_TENSOR_METHODS:
        func = getattr(torch.Tensor, name, None)
        if func is not None:
            setattr(torch.Tensor, name, track(func, f"torch.Tensor.{name}"))
