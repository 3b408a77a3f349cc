"""The MindSpore free_benchmark handler of wrapped API calls (installed as ``Hooks.api_handler``; forward stage).

As for PyTorch (msprobe.pytorch.free_benchmark.handler): the API runs as usual, then again on perturbed copies of
its inputs behind ``ops.stop_gradient`` (so a surrounding ``value_and_grad`` gets no gradient through the re-run),
with MindSpore's random state saved before the re-run and restored after it.  ``check`` compares the outputs on
host (numpy) copies and keeps a row per inconsistent output; ``fix`` returns the float32 re-run, cast back to
each output's dtype, instead of the original output (computed from the real inputs, so gradients flow through
the float32 computation).
"""
import math

import numpy as np

import mindspore as ms
from mindspore import Tensor, ops

from msprobe.core.free_benchmark import npcompare, rules
from msprobe.core.free_benchmark.handler_base import MAX_DEPTH as _MAX_DEPTH
from msprobe.core.free_benchmark.handler_base import HandlerBase, leaves
from msprobe.core.free_benchmark.results import Row
from msprobe.mindspore.dump.hooks import TLS, guarded

LOW = (ms.float16, ms.bfloat16)
FLOATS = (ms.float16, ms.bfloat16, ms.float32, ms.float64)
_INT_VIEW = {2: np.int16, 4: np.int32, 8: np.int64}


class Skip(Exception):
    pass


def _is_float(t):
    return isinstance(t, Tensor) and t.dtype in FLOATS


def map_tensors(obj, fn, depth=0):
    if isinstance(obj, Tensor):
        return fn(obj)
    if depth >= _MAX_DEPTH:
        return obj
    if isinstance(obj, (list, tuple)):
        items = [map_tensors(x, fn, depth + 1) for x in obj]
        return items if isinstance(obj, list) else type(obj)(items)
    if isinstance(obj, dict):
        return {k: map_tensors(v, fn, depth + 1) for k, v in obj.items()}
    return obj


def tensors(obj, depth=0):
    """The tensors of a nested structure (lists, tuples, dict values)."""
    return leaves(obj, Tensor, depth)


def host(t):
    """A numpy copy; fp16/bf16 as float32 (exact)."""
    if t.dtype == ms.bfloat16:
        t = t.astype(ms.float32)
    return t.asnumpy()


def _checked(t):
    v = rules.NOISE.get(rules.dtype_key(t.dtype))
    if v is None:
        raise Skip(f"dtype {t.dtype} unsupported")
    if t.size == 0:
        raise Skip("tensor shape must be > 0")
    if float(np.abs(host(t)).max()) < v:
        raise Skip("maximum value is less than the minimum threshold")
    return v


def add_noise(t):
    v = _checked(t)
    return ops.where(ops.abs(t) > math.sqrt(v), t + v, t)


def bit_noise(t):
    _checked(t)
    a = t.asnumpy()
    ints = a.view(_INT_VIEW[a.dtype.itemsize])
    tiny = float(np.finfo(np.float16).tiny) if t.dtype == ms.float16 else (
        1.1754943508222875e-38 if t.dtype in (ms.float32, ms.bfloat16) else float(np.finfo(np.float64).tiny))
    flipped = np.where(np.abs(host(t)) > tiny, ints ^ ints.dtype.type(1), ints).view(a.dtype)
    return Tensor(flipped, dtype=t.dtype)


def change_value(t):
    if t.ndim == 0 or t.size < 2:
        raise Skip("0-dimension must be greater than 1")
    a = t.asnumpy().copy()
    if a.ndim == 1:
        a[0], a[-1] = a[-1].copy(), a[0].copy()
    else:
        if a.shape[1] == 0 or (a.shape[0] < 2 and a.shape[1] < 2):
            raise Skip("the first two dimensions are too small to swap values")
        first, last = a[0][0].copy(), a[-1][-1].copy()
        a[0][0], a[-1][-1] = last, first
    return Tensor(a, dtype=t.dtype)


_ONE_TENSOR = {"add_noise": add_noise, "bit_noise": bit_noise, "change_value": change_value}


def _first_float(obj, fn, depth=0):
    if _is_float(obj):
        return fn(obj), True
    if depth < _MAX_DEPTH and isinstance(obj, (list, tuple)):
        items = list(obj)
        for i, x in enumerate(items):
            new, done = _first_float(x, fn, depth + 1)
            if done:
                items[i] = new
                return (items if isinstance(obj, list) else type(obj)(items)), True
    return obj, False


def perturb(mode, args, kwargs):
    if mode == "improve_precision":
        up = lambda t: t.astype(ms.float32) if t.dtype in LOW else t      # noqa: E731
        return map_tensors(args, up), map_tensors(kwargs, up)
    if mode == "no_change":
        return args, kwargs
    fn = _ONE_TENSOR[mode]
    for i, a in enumerate(args):
        if _is_float(a) or isinstance(a, (list, tuple)):
            new, done = _first_float(a, fn)
            if done:
                return tuple(args[:i]) + (new,) + tuple(args[i + 1:]), kwargs
    raise Skip("no float tensor input to perturb")


def output_pairs(out, pout):
    if isinstance(out, Tensor):
        if isinstance(pout, Tensor):
            yield None, out, pout
    elif isinstance(out, (list, tuple)) and isinstance(pout, (list, tuple)) and len(out) == len(pout):
        for i, (o, p) in enumerate(zip(out, pout)):
            if isinstance(o, Tensor) and isinstance(p, Tensor):
                yield i, o, p


class _Rng:
    """MindSpore's default generator state around the re-run (what the training draws next is unchanged)."""

    def __init__(self):
        get = getattr(ms, "get_rng_state", None)
        self.state = get() if get is not None else None

    def around(self, fn):
        if self.state is None:
            return fn()
        after = ms.get_rng_state()
        ms.set_rng_state(self.state)
        try:
            return fn()
        finally:
            ms.set_rng_state(after)


# the reference's MindSpore ``list`` holds Python API names; msprobe's dump names of the same APIs
_PY_PREFIXES = (("mindspore.mint.nn.functional.", "MintFunctional."), ("mindspore.mint.", "Mint."),
                ("mindspore.ops.", "Functional."), ("mindspore.Tensor.", "Tensor."),
                ("mindspore.communication.comm_func.", "Distributed."))


def list_filter(entries):
    """(exact API names, substrings) from a MindSpore ``list``: "mindspore.ops.bmm" selects exactly
    Functional.bmm; any other entry is a part of the dump name, as for PyTorch."""
    exact, parts = set(), []
    for e in entries:
        for py, dump in _PY_PREFIXES:
            if e.startswith(py):
                exact.add(dump + e[len(py):])
                break
        else:
            parts.append(e)
    return exact, parts


class MsFreeBenchmark(HandlerBase):
    def __init__(self, service):
        super().__init__(service)
        self.exact, self.parts = list_filter(self.cfg.list)

    def __call__(self, name, func, args, kwargs, distributed=False):
        n = self.next_index(name)
        TLS.depth += 1
        try:
            fwd = f"{name}.{n}.forward"
            if distributed or name.startswith(("Distributed.", "MintDistributed.")) or not self._selects(name, fwd):
                return func(*args, **kwargs)
            first = None
            if name.endswith("_") and not name.endswith("__") and args and isinstance(args[0], Tensor):
                first = guarded(self.errors, fwd, lambda: args[0].copy())
            rng = guarded(self.errors, fwd, _Rng)
            out = func(*args, **kwargs)
            if rng is not None:
                fixed = guarded(self.errors, fwd, self._after, rng, name, fwd, func, args, kwargs, out, first)
                if fixed is not None:
                    return fixed
            return out
        finally:
            TLS.depth -= 1

    def _selects(self, name, fwd):
        if not self.exact and not self.parts:
            return True
        return name in self.exact or any(p in fwd for p in self.parts)

    def _after(self, rng, name, fwd, func, args, kwargs, out, first):
        if not any(_is_float(t) for t in tensors(out)):
            return None
        if first is not None:
            args = (first,) + tuple(args[1:])
        if ("batch_norm" in name or "instance_norm" in name) and args:
            # running statistics are written in place: the re-run updates copies
            args = (args[0],) + tuple(map_tensors(list(args[1:]), lambda t: t.copy()))
            kwargs = {k: map_tensors(v, lambda t: t.copy()) for k, v in kwargs.items()}
        mode = self.mode
        if mode == "improve_precision" and not any(t.dtype in LOW for t in tensors((args, kwargs))):
            return None
        fix = self.cfg.fix
        if not fix:
            args = map_tensors(args, ops.stop_gradient)
            kwargs = map_tensors(kwargs, ops.stop_gradient)
        try:
            pargs, pkwargs = perturb(mode, args, kwargs)
        except Skip as why:
            self._skip(name, str(why))
            return None
        pout = rng.around(lambda: func(*pargs, **pkwargs))
        if fix:
            return self._fixed(out, pout)
        for idx, o, p in output_pairs(out, pout):
            if not (_is_float(o) and _is_float(p)) or o.size != p.size:
                continue
            pd = host(p)
            r = npcompare.ratio(host(o), pd, rules.abs_tol(p.dtype))
            if not rules.is_consistent(r, rules.threshold(o.dtype, mode)):
                self.results.add(Row(self.rank, mode, "forward", self.step, fwd, rules.max_rel(r), str(o.dtype),
                                     str(o.shape), idx))
        return None

    @staticmethod
    def _fixed(out, pout):
        if isinstance(out, Tensor):
            return pout.astype(out.dtype) if _is_float(out) and _is_float(pout) and out.shape == pout.shape else out
        if isinstance(out, (list, tuple)) and isinstance(pout, (list, tuple)) and len(out) == len(pout):
            items = [p.astype(o.dtype) if _is_float(o) and _is_float(p) and o.shape == p.shape else o
                     for o, p in zip(out, pout)]
            return items if isinstance(out, list) else type(out)(items)
        return None
