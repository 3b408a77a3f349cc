"""The six perturbations of free_benchmark (spec checks_and_monitors.md 2.4), on copies: never on the caller's
tensors.  Each returns the perturbed ``(args, kwargs)`` or raises :class:`Skip` with the reason."""
import math

import torch

from msprobe.core.free_benchmark import rules
from msprobe.core.free_benchmark.handler_base import MAX_DEPTH as _MAX_DEPTH
from msprobe.core.free_benchmark.handler_base import leaves

LOW = (torch.float16, torch.bfloat16)
INT_VIEW = {torch.bfloat16: torch.int16, torch.float16: torch.int16, torch.float32: torch.int32,
            torch.float64: torch.int64}


class Skip(Exception):
    """The call cannot be perturbed in this mode (the message says why); it is left alone."""


def map_tensors(obj, fn, depth=0):
    """``obj`` rebuilt with ``fn(t)`` for every tensor (lists, tuples, dict values; other values kept)."""
    if isinstance(obj, torch.Tensor):
        return fn(obj)
    if depth >= _MAX_DEPTH:
        return obj
    if isinstance(obj, (list, tuple)):
        items = [map_tensors(x, fn, depth + 1) for x in obj]
        if isinstance(obj, list):
            return items
        return type(obj)(*items) if hasattr(obj, "_fields") else type(obj)(items)
    if isinstance(obj, dict):
        return {k: map_tensors(v, fn, depth + 1) for k, v in obj.items()}
    return obj


def tensors(obj, depth=0):
    """The tensors of a nested structure (lists, tuples, dict values)."""
    return leaves(obj, torch.Tensor, depth)


def _float(t):
    return isinstance(t, torch.Tensor) and t.is_floating_point() and not t.is_meta


def target_index(args):
    """The positional argument that is perturbed: the first float tensor, list, tuple or dict."""
    for i, a in enumerate(args):
        if _float(a) or (isinstance(a, (list, tuple, dict)) and not isinstance(a, torch.Size)):
            return i
    return None


def _first_float(obj, fn, depth=0):
    """(``obj`` with its first float tensor replaced by ``fn(t)``, whether one was found)."""
    if _float(obj):
        return fn(obj), True
    if depth >= _MAX_DEPTH:
        return obj, False
    if isinstance(obj, (list, tuple)):
        items = list(obj)
        for i, x in enumerate(items):
            new, done = _first_float(x, fn, depth + 1)
            if done:
                items[i] = new
                if isinstance(obj, list):
                    return items, True
                return (type(obj)(*items) if hasattr(obj, "_fields") else type(obj)(items)), True
        return obj, False
    if isinstance(obj, dict):
        for k, x in obj.items():
            new, done = _first_float(x, fn, depth + 1)
            if done:
                out = dict(obj)
                out[k] = new
                return out, True
    return obj, False


def _checked(t):
    v = rules.NOISE.get(rules.dtype_key(t.dtype))
    if v is None or t.dtype not in INT_VIEW:
        raise Skip(f"dtype {t.dtype} unsupported")
    if t.numel() == 0:
        raise Skip("tensor shape must be > 0")
    peak = t.abs().max() if t.dtype not in LOW else t.float().abs().max()
    if peak.item() < v:
        raise Skip("maximum value is less than the minimum threshold")
    return v


def add_noise(t):
    v = _checked(t)
    return torch.where(t.abs() > math.sqrt(v), t + v, t)


def bit_noise(t):
    _checked(t)
    flipped = torch.bitwise_xor(t.view(INT_VIEW[t.dtype]), 1).view(t.dtype)
    return torch.where(t.abs() > torch.finfo(t.dtype).tiny, flipped, t)


def change_value(t):
    if t.dim() == 0 or t.numel() < 2:
        raise Skip("0-dimension must be greater than 1")
    out = t.clone()
    if t.dim() == 1:
        out[0], out[-1] = t[-1].clone(), t[0].clone()
        return out
    if t.size(1) == 0 or (t.size(0) < 2 and t.size(1) < 2):
        raise Skip("the first two dimensions are too small to swap values")
    first, last = t[0][0].clone(), t[-1][-1].clone()
    out[0][0] = last
    out[-1][-1] = first
    return out


_ONE_TENSOR = {"add_noise": add_noise, "bit_noise": bit_noise, "change_value": change_value}


def has_low(args, kwargs):
    return any(t.dtype in LOW for t in tensors((args, kwargs)))


def upcast(obj, autocast_dtype=None):
    """fp16/bf16 tensors as float32.  ``autocast_dtype``: the call ran under autocast, which cast its float32
    inputs to that dtype: they are rounded to it first, so that the re-run sees the values the op saw and only
    the op's own arithmetic is raised to float32."""
    if autocast_dtype is None:
        return map_tensors(obj, lambda t: t.float() if t.dtype in LOW else t)
    return map_tensors(obj, lambda t: t.float() if t.dtype in LOW else
                       (t.to(autocast_dtype).float() if t.dtype == torch.float32 else t))


def to_cpu(obj):
    return map_tensors(obj, lambda t: (t.detach().cpu().float() if t.dtype in LOW else t.detach().cpu()))


def perturb(mode, args, kwargs, upcast_kwargs=True, autocast_dtype=None):
    """The perturbed (args, kwargs) for ``mode``; improve_precision and to_cpu change every float input."""
    if mode == "improve_precision":
        return upcast(args, autocast_dtype), (upcast(kwargs, autocast_dtype) if upcast_kwargs else kwargs)
    if mode == "to_cpu":
        return to_cpu(args), to_cpu(kwargs)
    if mode == "no_change":
        return args, kwargs
    fn = _ONE_TENSOR[mode]
    i = target_index(args)
    if i is None:
        raise Skip("no float tensor input to perturb")
    new, done = _first_float(args[i], fn)
    if not done:
        raise Skip("no float tensor input to perturb")
    return tuple(args[:i]) + (new,) + tuple(args[i + 1:]), kwargs
