"""MindSpore parts of config_check's dynamic collection (PyNative mode; see msprobe.core.config_check.checker)."""

from __future__ import annotations

import numpy as np

import mindspore as ms

RANDOM_OPS = ("rand", "randint", "randn", "rand_like", "randint_like", "randn_like")


def is_module(obj) -> bool:
    return isinstance(obj, ms.nn.Cell)


def is_tensor(obj) -> bool:
    return isinstance(obj, ms.Tensor)


def rank():
    try:
        from mindspore.communication import GlobalComm, get_rank

        if GlobalComm.INITED:
            return get_rank()
    except Exception:  # noqa: BLE001 - no communication backend on this machine
        pass
    return None


def register_pre_hook(model, on_forward) -> None:
    """Run ``on_forward(args, kwargs)`` right before every call of ``model`` (its construct is wrapped on
    the instance, so keyword arguments are seen too); the inputs are never changed."""
    original = model.construct

    def construct(*args, **kwargs):
        on_forward(args, kwargs)
        return original(*args, **kwargs)

    model.construct = construct


def named_parameters(model):
    return model.parameters_and_names()


def features(tensor) -> dict:
    """max, min, mean, norm in float32 (None for an empty or complex tensor)."""
    a = tensor.asnumpy() if tensor.dtype != ms.bfloat16 else tensor.astype(ms.float32).asnumpy()
    if a.size == 0 or np.iscomplexobj(a):
        return {"max": None, "min": None, "mean": None, "norm": None}
    a = a.astype(np.float32, copy=False)
    return {"max": float(a.max()), "min": float(a.min()), "mean": float(a.mean(dtype=np.float32)),
            "norm": float(np.linalg.norm(a.ravel()))}


def features_many(tensors) -> list:
    return [features(t) for t in tensors]


def patch_random(track) -> None:
    """Count calls of MindSpore's random ops (``mindspore.ops.rand`` ..., ``mindspore.mint.rand`` ...,
    ``mindspore.set_seed``)."""
    for owner, prefix in ((ms.ops, "mindspore.ops"), (getattr(ms, "mint", None), "mindspore.mint")):
        if owner is None:
            continue
        for name in RANDOM_OPS:
            func = getattr(owner, name, None)
            if func is not None:
                setattr(owner, name, track(func, f"{prefix}.{name}"))
    if getattr(ms, "set_seed", None) is not None:
        ms.set_seed = track(ms.set_seed, "mindspore.set_seed")
