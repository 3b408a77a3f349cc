"""Faults planted in tiny ``transformers`` models (tests/real_models: llama, gpt2, bert, t5, mixtral, vit; 2 layers,
hidden 64, random init, nothing downloaded): modeling code nobody here wrote.

The model is built by :func:`real_models.build` (same seed and batch on both sides), then changed in place by
:func:`apply_fault` before the debugger starts.  Fault keys (``path`` is a submodule's dotted name, as
``model.get_submodule`` takes it):

  ``attr``       {path: {attribute: value | ("mul", m)}}  a changed argument: an RMSNorm's ``variance_epsilon``, a
                 LayerNorm's ``eps``, an attention's ``scaling``, a router's ``top_k`` (``("mul", m)``: the
                 current value x m)
  ``act``        {path: [kind, out_scale, grad_scale]}  the activation module at ``path`` is replaced by
                 :class:`FaultAct`, which calls ``FaultOps.<kind>`` (gelu, silu, relu): a perturbed kernel whose
                 forward output is x out_scale and whose gradient is x grad_scale (None: unperturbed).  The golden
                 run of such a case replaces the same module with both scales None, so both record the same ops
  ``out_hook``   {path: s}  a forward hook, registered before the debugger starts, multiplies the module's output
                 (its first element for a tuple) by s with an aten op (not recorded): the user's hook changes what
                 the rest of the model consumes
  ``op_hook``    {path: s}  the same with ``output * s``, a recorded ``Tensor.__mul__`` that only the target calls:
                 every later ``Tensor.__mul__`` of the target is numbered one higher than the golden's
  ``param_grad`` {parameter name: s}  that parameter's gradient x s (:func:`models.add_param_grad_faults`)
  ``attn_impl``  "eager" (default) or "sdpa": the attention implementation the model is built with (not a
                 fault: the golden run of such a case names it too)
"""

from __future__ import annotations

import torch
import torch.nn as nn

from . import faultops
from .cases import HF_ARCHS  # noqa: F401 - re-exported
from .models import add_param_grad_faults


class FaultAct(nn.Module):
    """An activation module that calls ``FaultOps.<kind>`` under ``faultops.active(out_scale, grad_scale)``."""

    def __init__(self, kind, out_scale=None, grad_scale=None):
        super().__init__()
        self.kind = kind
        self.out_scale = out_scale
        self.grad_scale = grad_scale

    def forward(self, x):
        with faultops.active(out_scale=self.out_scale, grad_scale=self.grad_scale):
            return getattr(faultops, self.kind)(x)


def _scale_output(s):
    def hook(module, args, output):
        if isinstance(output, torch.Tensor):
            return torch.ops.aten.mul.Scalar(output, s)
        if isinstance(output, tuple) and output and isinstance(output[0], torch.Tensor):
            return (torch.ops.aten.mul.Scalar(output[0], s),) + output[1:]
        return None
    return hook


def _scale_output_op(s):
    def hook(module, args, output):
        return output * s if isinstance(output, torch.Tensor) else None
    return hook


def _set_submodule(model, path, new):
    parent, _, leaf = path.rpartition(".")
    setattr(model.get_submodule(parent) if parent else model, leaf, new)


def apply_fault(model: nn.Module, fault: dict) -> None:
    for path, attrs in fault.get("attr", {}).items():
        mod = model.get_submodule(path)
        for name, value in attrs.items():
            if not hasattr(mod, name):
                raise AttributeError(f"{path} ({type(mod).__name__}) has no attribute {name!r}")
            if isinstance(value, (tuple, list)) and value and value[0] == "mul":
                value = type(getattr(mod, name))(getattr(mod, name) * value[1])
            setattr(mod, name, value)
    for path, (kind, out_scale, grad_scale) in fault.get("act", {}).items():
        model.get_submodule(path)       # a wrong path fails here, not silently
        _set_submodule(model, path, FaultAct(kind, out_scale, grad_scale))
    for path, s in fault.get("out_hook", {}).items():
        model.get_submodule(path).register_forward_hook(_scale_output(s))
    for path, s in fault.get("op_hook", {}).items():
        model.get_submodule(path).register_forward_hook(_scale_output_op(s))
    add_param_grad_faults(model, fault)


def build(arch: str, fault: dict):
    """(model, inputs(), loss(out)) of ``arch`` with ``fault`` planted."""
    from real_models import build as build_case

    case = build_case(arch, attn=fault.get("attn_impl", "eager"))
    apply_fault(case.model, fault)
    return case.model, case.inputs, case.loss


def transformers_missing():
    from real_models import transformers_missing as missing
    return missing()
