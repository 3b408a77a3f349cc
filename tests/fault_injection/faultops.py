"""Ops recorded as custom APIs (``PrecisionDebugger.register_custom_api(faultops, name, "FaultOps")``) whose
forward output or backward gradient is perturbed by a module-level setting, not by an argument: the target
and golden runs record the same op sequence with the same arguments, and only the injected op's
output (forward) or its gradient output (backward) differs.  Ops called inside them are not recorded
(only the outermost API of a call chain is)."""

from __future__ import annotations

import contextlib

import torch
import torch.nn.functional as F

#: per-call settings, set by :func:`active` around one call
_ACTIVE = {"out_scale": None, "grad_scale": None, "in_scale": None}


@contextlib.contextmanager
def active(out_scale=None, grad_scale=None, in_scale=None):
    """Perturb the FaultOps call(s) made inside the block: forward output x out_scale, gradient x grad_scale,
    input x in_scale inside the kernel (softmax)."""
    old = dict(_ACTIVE)
    _ACTIVE.update(out_scale=out_scale, grad_scale=grad_scale, in_scale=in_scale)
    try:
        yield
    finally:
        _ACTIVE.update(old)


class _GeluScaledGrad(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, scale):
        ctx.save_for_backward(x)
        ctx.scale = scale
        return F.gelu(x)

    @staticmethod
    def backward(ctx, g):
        # aten ops: not recorded by the dumper, so the backward adds no rows of its own and the clean and
        # faulty runs record the same ops
        (x,) = ctx.saved_tensors
        grad = torch.ops.aten.gelu_backward.default(g, x)
        if ctx.scale is not None:
            grad = torch.ops.aten.mul.Scalar(grad, ctx.scale)
        return grad, None


def gelu(x):
    """GELU; with ``active(out_scale=s)`` its output is multiplied by s (a perturbed kernel)."""
    y = _GeluScaledGrad.apply(x, _ACTIVE["grad_scale"])
    if _ACTIVE["out_scale"] is not None:
        with torch.no_grad():
            y.mul_(_ACTIVE["out_scale"])
    return y


class _ScaleGrad(torch.autograd.Function):
    """Identity forward; the gradient passing back through it x scale (an aten op: not recorded)."""

    @staticmethod
    def forward(ctx, x, scale):
        ctx.scale = scale
        return x.view_as(x)

    @staticmethod
    def backward(ctx, g):
        return torch.ops.aten.mul.Scalar(g, ctx.scale), None


def _perturbed(y):
    """``y`` x out_scale (forward) and its gradient x grad_scale (backward), as the active settings say."""
    if _ACTIVE["grad_scale"] is not None:
        y = _ScaleGrad.apply(y, _ACTIVE["grad_scale"])
    if _ACTIVE["out_scale"] is not None:
        y = y * _ACTIVE["out_scale"]
    return y


def relu(x):
    """ReLU; with ``active(out_scale=s)`` its output is multiplied by s, with ``active(grad_scale=s)`` the
    gradient it passes back by s."""
    return _perturbed(F.relu(x))


def silu(x):
    """SiLU; ``active(out_scale=s, grad_scale=t)`` as :func:`relu`."""
    return _perturbed(F.silu(x))


def softmax(x, dim):
    """Softmax over ``dim``; with ``active(in_scale=m)`` the kernel scales its input by m first (the
    "attention scores x1.5 before softmax" bug inside a fused kernel: no extra op, no differing argument)."""
    if _ACTIVE["in_scale"] is not None:
        x = x * _ACTIVE["in_scale"]
    return F.softmax(x, dim=dim)


CUSTOM_APIS = ("gelu", "relu", "softmax", "silu")
PREFIX = "FaultOps"
