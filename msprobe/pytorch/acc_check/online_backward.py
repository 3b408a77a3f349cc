"""The backward half of the online pre-check's training side (PyTorch >= 2): the aten ops executed during
``torch.autograd.backward`` are sent to the checker as ``Aten.{op}.{n}`` calls (the rules and names:
msprobe.core.acc_check.online.aten).

While a step is recorded (``start()`` .. ``stop()``), ``torch.autograd.backward`` (``Tensor.backward`` calls it)
runs inside :class:`BackwardCapture`, a ``TorchDispatchMode``: each aten op reaching it is run exactly as without
the tool (its output is returned untouched), and its inputs (copied before the op: an in-place op changes them)
and outputs are copied to the CPU and handed to the same sender as the forward calls. ``online_run_ut_recompute``
true turns this off, as in the reference. A failure of the capture is logged once and never reaches the training.
"""

from __future__ import annotations

import logging

import torch

from msprobe.core.acc_check.online import aten as A
from msprobe.pytorch.acc_check.online_client import _Capture
from msprobe.pytorch.dump.hooks import TLS

log = logging.getLogger("msprobe")

try:
    from torch.utils._python_dispatch import TorchDispatchMode, _get_current_dispatch_mode_stack
except ImportError:  # pragma: no cover - torch < 2
    TorchDispatchMode, _get_current_dispatch_mode_stack = None, None


def supported() -> str:
    """"" when this torch can capture the backward, else why not."""
    try:
        major = int(torch.__version__.split(".")[0])
    except ValueError:
        major = 0
    if major < 2 or TorchDispatchMode is None:
        return f"torch {torch.__version__} (the backward aten ops need torch >= 2)"
    return ""


_PLAIN = (torch.Tensor, torch.nn.Parameter)
_SYM = tuple(t for t in (getattr(torch, "SymInt", None), getattr(torch, "SymFloat", None),
                         getattr(torch, "SymBool", None)) if t is not None)
_SYM_CAST = {"SymInt": int, "SymFloat": float, "SymBool": bool}


class _AtenCapture(_Capture):
    """An aten op's arguments: positional dtypes, devices and layouts are arguments here (a dump record of a
    torch API leaves a positional dtype out), symbolic numbers are made concrete."""

    def value(self, v, path, key=None):
        if isinstance(v, torch.dtype):
            return {"type": "torch.dtype", "value": str(v)}
        if isinstance(v, torch.device):
            return {"type": "torch.device", "value": str(v)}
        if isinstance(v, torch.layout):
            return {"type": "torch.layout", "value": str(v)}
        if isinstance(v, torch.Generator):
            return {"type": "torch.Generator"}
        if _SYM and isinstance(v, _SYM):
            v = _SYM_CAST[type(v).__name__](v)
        return super().value(v, path, key)


def _plain_tensors(obj) -> bool:
    """No tensor subclass (DTensor, a fake or functional tensor ...) among the arguments: copying those could
    run a collective or fail; such ops are not sent."""
    if isinstance(obj, torch.Tensor):
        return type(obj) in _PLAIN and not obj.is_meta
    if isinstance(obj, (list, tuple)):
        return all(_plain_tensors(v) for v in obj)
    if isinstance(obj, dict):
        return all(_plain_tensors(v) for v in obj.values())
    return True


def _op_parts(func):
    """(op, overload, namespace) of an OpOverload, or None for anything else."""
    name = getattr(func, "__name__", None)
    ns = getattr(func, "namespace", None)
    if not isinstance(name, str) or not isinstance(ns, str):
        return None
    op, _, overload = name.partition(".")
    return op, overload or "default", ns


class BackwardCapture(TorchDispatchMode if TorchDispatchMode is not None else object):
    """Sends the aten ops of one backward (see the module docstring). ``handler`` is the
    :class:`~msprobe.pytorch.acc_check.online_client.OnlineHandler`."""

    def __init__(self, handler):
        super().__init__()
        self.handler = handler

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if kwargs is None:
            kwargs = {}
        parts = _op_parts(func)
        pending = None
        if parts is not None and A.sent(parts[0], parts[2]):
            pending = self.handler.aten_before(parts[0], parts[1], args, kwargs)
        TLS.depth += 1      # torch API calls inside the op (a kernel written in Python) are part of it
        try:
            if parts is not None and parts[0] in A.GRAD_MODE_OPS:
                with torch.enable_grad():
                    out = func(*args, **kwargs)
            else:
                out = func(*args, **kwargs)
        finally:
            TLS.depth -= 1
        if pending is not None:
            self.handler.aten_after(pending, out)
        return out


def _captures_already() -> bool:
    """A backward inside a backward (reentrant checkpoint): the outer capture goes on, none is pushed again."""
    try:
        return any(isinstance(m, BackwardCapture) for m in _get_current_dispatch_mode_stack())
    except Exception:  # noqa: BLE001 - private torch API: assume none
        return False


class BackwardPatch:
    """``torch.autograd.backward`` wrapped while the online service records: the original runs inside a fresh
    :class:`BackwardCapture` when the handler captures (``handler.capturing()``), else unchanged."""

    def __init__(self, handler):
        self.handler = handler
        self.original = None
        self.wrapper = None

    def install(self) -> None:
        if self.wrapper is not None and torch.autograd.backward is self.wrapper:
            return
        original = torch.autograd.backward
        handler = self.handler

        def backward(*args, **kwargs):
            mode = None
            try:
                if handler.capturing() and not _captures_already():
                    mode = BackwardCapture(handler)
            except Exception as exc:  # noqa: BLE001 - never into the training: the backward runs uncaptured
                handler._warn("the backward", exc)
                mode = None
            if mode is None:
                return original(*args, **kwargs)
            with mode:
                return original(*args, **kwargs)

        backward.__wrapped__ = original
        backward.__doc__ = getattr(original, "__doc__", None)
        backward.__msprobe_original__ = original
        self.original, self.wrapper = original, backward
        torch.autograd.backward = backward

    def remove(self) -> None:
        if self.wrapper is not None and torch.autograd.backward is self.wrapper:
            torch.autograd.backward = self.original
        self.original = self.wrapper = None
