"""Faults planted in small random-init ``torchvision`` models (tests/tvmodels.py: ResNet BasicBlock x [1,1,1,1],
MobileNetV3-small, a 2-layer VisionTransformer, ConvNeXt, Swin; ``weights=None``): modeling code nobody here wrote.

The model is built by :func:`tvmodels.build` (same seed and batch on both sides), then changed in place by
:func:`apply_fault` before the debugger starts.  Case model names are ``tv_<arch>``.  Fault keys: those of
:func:`fault_injection.hf.apply_fault` (``attr``, ``act``, ``out_hook``, ``param_grad``), and

  ``replace``     {path: kind}  the module at ``path`` is replaced by a fresh ``nn.<kind>`` (an activation changed:
                  MobileNet's ``Hardswish`` -> ``ReLU``)
  ``sdpa_scale``  {path: m | None}  while the module at ``path`` (an ``nn.MultiheadAttention``) runs,
                  ``F.scaled_dot_product_attention`` is called with ``scale=`` m / sqrt(head_dim) (None: 1 /
                  sqrt(head_dim), the default, passed explicitly; the golden run of such a case uses None, so both
                  record the same call with the same arguments but the scale)
  ``bw_hook``     {path: s}  a full backward hook on the module at ``path`` scales the gradient it passes to its
                  inputs by s (an aten op the dump does not see): a wrong backward of a whole module
  ``drop_residual`` [path, ...]  a forward hook on the block at ``path`` returns its output minus its input (the
                  block's residual add undone, with an aten op the dump does not see)
"""
from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from . import hf
from .cases import Case

TV_MODELS = {"tv_resnet": "resnet", "tv_mobilenet": "mobilenet", "tv_vit": "vit", "tv_convnext": "convnext",
             "tv_swin": "swin", "tv_efficientnet": "efficientnet"}


def _sdpa_scale(mod, m):
    heads = mod.num_heads
    head_dim = mod.embed_dim // heads
    scale = (1.0 if m is None else m) / math.sqrt(head_dim)
    state = {}

    def pre(module, args):
        orig = F.scaled_dot_product_attention
        state["orig"] = orig

        def sdpa(*a, **kw):
            kw["scale"] = scale
            return orig(*a, **kw)
        F.scaled_dot_product_attention = sdpa
        return None

    def post(module, args, out):
        F.scaled_dot_product_attention = state.pop("orig")
        return None

    mod.register_forward_pre_hook(pre)
    mod.register_forward_hook(post)


def _drop_residual(module, args, output):
    return torch.ops.aten.sub.Tensor(output, args[0])


def _scale_grad_input(s):
    def hook(module, grad_input, grad_output):
        return tuple(None if g is None else torch.ops.aten.mul.Scalar(g, s) for g in grad_input)
    return hook


def apply_fault(model: nn.Module, fault: dict) -> None:
    hf.apply_fault(model, fault)
    for path, kind in fault.get("replace", {}).items():
        model.get_submodule(path)
        new = getattr(nn, kind)(inplace=True) if kind in ("ReLU", "Hardswish", "SiLU") else getattr(nn, kind)()
        hf._set_submodule(model, path, new)
    for path, m in fault.get("sdpa_scale", {}).items():
        _sdpa_scale(model.get_submodule(path), m)
    for path, s in fault.get("bw_hook", {}).items():
        model.get_submodule(path).register_full_backward_hook(_scale_grad_input(s))
    for path in fault.get("drop_residual", ()):
        model.get_submodule(path).register_forward_hook(_drop_residual)


def build(model: str, fault: dict):
    """(model, inputs(), loss(out)) of ``model`` (``tv_<arch>``) with ``fault`` planted."""
    from tvmodels import build as build_case

    case = build_case(TV_MODELS[model])
    apply_fault(case.model, fault)
    return case.model, case.inputs, case.loss


def torchvision_missing():
    from tvmodels import torchvision_missing as missing
    return missing()


def _one(*names):
    return {"rank": list(names)}


def _act(path, kind, out=None, grad=None):
    """The activation at ``path`` replaced by FaultOps.<kind> (scaled in the target, plain in the golden run)."""
    return {"act": {path: [kind, out, grad]}}, {"act": {path: [kind, None, None]}}


_R_RELU_GRAD = _act("layer3.0.relu", "relu", grad=1.5)
_M_RELU_OUT = _act("features.1.block.0.2", "relu", out=1.05)
_V_SDPA = ({"sdpa_scale": {"encoder.layers.encoder_layer_1.self_attention": 1.5}},
           {"sdpa_scale": {"encoder.layers.encoder_layer_1.self_attention": None}})

TV_CASES = [
    # ---- ResNet (BasicBlock x [1,1,1,1]: conv-bn-relu(inplace), `out += identity`, downsample Sequentials)
    Case("tv_resnet_bn_eps_stat", "tv_resnet", {"attr": {"layer2.0.bn1": {"eps": 0.5}}}, "statistics", "mix",
         "layer2.0.bn1 BatchNorm eps=0.5 instead of 1e-5", _one("Functional.batch_norm.3.forward")),
    Case("tv_resnet_conv_hook_stat", "tv_resnet", {"out_hook": {"layer3.0.conv2": 1.25}}, "statistics", "mix",
         "a user forward hook scales layer3.0.conv2's output x1.25",
         _one("Functional.batch_norm.7.forward", "Module.layer3.0.bn2.BatchNorm2d.forward.0")),
    Case("tv_resnet_relu_grad_md5", "tv_resnet", _R_RELU_GRAD[0], "md5", "L1",
         "layer3.0 ReLU backward (both calls of the shared module): gradient x1.5", _one("FaultOps.relu.1.backward"),
         golden_fault=_R_RELU_GRAD[1]),
    Case("tv_resnet_param_grad_stat", "tv_resnet", {"param_grad": {"layer1.0.conv1.weight": 1.5}}, "statistics",
         "mix", "layer1.0.conv1.weight gradient x1.5 (parameter hook)",
         _one("Module.layer1.0.conv1.Conv2d.parameters_grad")),
    # (bf16 autocast against fp32: this ResNet's gradients already differ by 8-15% from rounding alone, and a
    # weight gradient x1.5 (its Min 33% apart) is within 4x what its module's rows carry: not named; x3 is)
    Case("tv_resnet_param_grad_bf16_stat", "tv_resnet", {"param_grad": {"layer1.0.conv1.weight": 3.0}}, "statistics",
         "mix", "layer1.0.conv1.weight gradient x3; bf16 autocast target vs fp32 golden",
         _one("Module.layer1.0.conv1.Conv2d.parameters_grad"), target_dtype="bf16"),
    Case("tv_resnet_bn_momentum_md5", "tv_resnet", {"attr": {"layer4.0.bn2": {"momentum": 0.5}}}, "md5", "L1",
         "layer4.0.bn2 BatchNorm momentum 0.5 instead of 0.1 (only the running statistics change)",
         _one("Functional.batch_norm.10.forward")),
    # ---- MobileNetV3-small (in-place Hardswish / ReLU, squeeze-excitation)
    Case("tv_mobilenet_hardswish_relu_stat", "tv_mobilenet", {"replace": {"features.0.2": "ReLU"}}, "statistics",
         "mix", "the stem's Hardswish replaced by ReLU (an activation changed)",
         _one("Functional.relu.0.forward", "Module.features.0.2.ReLU.forward.0",
             "Module.features.0.Conv2dNormActivation.forward.0")),
    Case("tv_mobilenet_relu_out_tensor", "tv_mobilenet", _M_RELU_OUT[0], "tensor", "mix",
         "features.1 ReLU output x1.05 (perturbed kernel)", _one("FaultOps.relu.0.forward"),
         golden_fault=_M_RELU_OUT[1]),
    Case("tv_mobilenet_se_sigmoid_stat", "tv_mobilenet", {"replace": {"features.1.block.1.scale_activation": "Sigmoid"}},
         "statistics", "L1", "features.1 squeeze-excitation gate Hardsigmoid replaced by Sigmoid",
         _one("Torch.sigmoid.0.forward", "Functional.sigmoid.0.forward")),
    Case("tv_mobilenet_bn_eps_bf16_stat", "tv_mobilenet", {"attr": {"features.2.block.1.1": {"eps": 0.5}}},
         "statistics", "mix", "features.2 depthwise BatchNorm eps=0.5; bf16 autocast target vs fp32 golden",
         _one("Functional.batch_norm.4.forward"), target_dtype="bf16"),
    Case("tv_mobilenet_param_grad_stat", "tv_mobilenet", {"param_grad": {"features.4.block.2.fc1.weight": 1.5}},
         "statistics", "mix", "features.4 SE fc1.weight gradient x1.5 (parameter hook)",
         _one("Module.features.4.block.2.fc1.Conv2d.parameters_grad")),
    # ---- VisionTransformer (2 layers, nn.MultiheadAttention -> scaled_dot_product_attention)
    Case("tv_vit_attn_scale_stat", "tv_vit", _V_SDPA[0], "statistics", "mix",
         "layer 1 attention scale x1.5 (the scale= of the scaled_dot_product_attention inside the recorded "
         "F.multi_head_attention_forward)",
         _one("Functional.multi_head_attention_forward.1.forward"), golden_fault=_V_SDPA[1]),
    Case("tv_vit_ln_eps_md5", "tv_vit", {"attr": {"encoder.layers.encoder_layer_0.ln_2": {"eps": 0.1}}}, "md5", "L1",
         "layer 0 ln_2 LayerNorm eps=0.1 instead of 1e-6", _one("Functional.layer_norm.1.forward")),
    Case("tv_vit_drop_residual_stat", "tv_vit", {"drop_residual": ["encoder.layers.encoder_layer_0"]},
         "statistics", "mix", "a user forward hook takes layer 0's input back out of its output (skip dropped)",
         _one("Functional.layer_norm.2.forward")),
    Case("tv_vit_param_grad_bf16_stat", "tv_vit", {"param_grad": {"encoder.layers.encoder_layer_1.mlp.0.weight": 1.5}},
         "statistics", "mix", "layer 1 mlp.0.weight gradient x1.5; bf16 autocast target vs fp32 golden",
         _one("Module.encoder.layers.encoder_layer_1.mlp.0.Linear.parameters_grad"), target_dtype="bf16"),
    # ---- ConvNeXt (depthwise 7x7, LayerNorm2d, layer scale, stochastic depth)
    Case("tv_convnext_ln_eps_stat", "tv_convnext", {"attr": {"features.1.0.block.2": {"eps": 0.1}}}, "statistics",
         "L1", "features.1.0 block LayerNorm eps=0.1 instead of 1e-6", _one("Functional.layer_norm.1.forward")),
    Case("tv_convnext_sd_p_md5", "tv_convnext", {"attr": {"features.3.0.stochastic_depth": {"p": 0.9}}}, "md5",
         "mix", "features.3.0 stochastic depth p=0.9 instead of 0.2 (the survival rate of bernoulli_)",
         _one("Tensor.bernoulli_.0.forward")),
    Case("tv_convnext_layer_scale_tensor", "tv_convnext", {"out_hook": {"features.1.0.block": 1.25}}, "tensor", "mix",
         "a user forward hook scales features.1.0's block output x1.25",
         _one("Tensor.__mul__.0.forward")),      # layer_scale * block(x): the first op that reads it
    Case("tv_convnext_bw_hook_stat", "tv_convnext", {"bw_hook": {"features.3.0.block": 1.5}}, "statistics", "mix",
         "a user full backward hook scales the gradient features.3.0's block passes back x1.5",
         _one("Module.features.3.0.block.Sequential.backward.0")),
    # ---- Swin (shifted windows)
    # (Swin's attention calls F.linear on qkv.weight itself: the qkv Linear never runs as a module, so its weight
    # gradient is recorded nowhere, as in the reference: a planted qkv.weight gradient fault is invisible)
    Case("tv_swin_mlp_grad_stat", "tv_swin", {"param_grad": {"features.1.1.mlp.0.weight": 1.5}}, "statistics",
         "mix", "features.1.1 (shifted-window block) mlp.0.weight gradient x1.5",
         _one("Module.features.1.1.mlp.0.Linear.parameters_grad")),
    Case("tv_swin_attn_scale_bf16_stat", "tv_swin", {"out_hook": {"features.1.1.attn": 1.25}}, "statistics", "mix",
         "a user forward hook scales the shifted-window attention's output x1.25; bf16 autocast vs fp32",
         _one("Tensor.__mul__.2.forward"), target_dtype="bf16"),   # input * noise in the StochasticDepth after it
    Case("tv_swin_norm_eps_md5", "tv_swin", {"attr": {"features.1.1.norm1": {"eps": 0.1}}}, "md5", "L1",
         "features.1.1 norm1 LayerNorm eps=0.1 instead of 1e-5", _one("Functional.layer_norm.3.forward")),
    # ---- control pairs: no fault
    Case("tv_ctl_resnet_bf16_stat", "tv_resnet", {}, "statistics", "mix", "no fault; bf16 autocast vs fp32", None,
         target_dtype="bf16"),
    Case("tv_ctl_mobilenet_bf16_stat", "tv_mobilenet", {}, "statistics", "mix", "no fault; bf16 autocast vs fp32",
         None, target_dtype="bf16"),
    Case("tv_ctl_mobilenet_fp16_tensor", "tv_mobilenet", {}, "tensor", "L1", "no fault; fp16 autocast vs fp32", None,
         target_dtype="fp16"),
    Case("tv_ctl_mobilenet_fp16_stat", "tv_mobilenet", {}, "statistics", "mix", "no fault; fp16 autocast vs fp32",
         None, target_dtype="fp16"),
    Case("tv_ctl_resnet_fp16_tensor", "tv_resnet", {}, "tensor", "mix", "no fault; fp16 autocast vs fp32", None,
         target_dtype="fp16"),
    Case("tv_ctl_vit_bf16_tensor", "tv_vit", {}, "tensor", "mix", "no fault; bf16 autocast vs fp32", None,
         target_dtype="bf16"),
    Case("tv_ctl_convnext_fp32_md5", "tv_convnext", {}, "md5", "mix",
         "no fault; fp32 vs fp32 (identical runs; stochastic depth draws torch.empty(...).bernoulli_)", None),
    Case("tv_ctl_swin_bf16_stat", "tv_swin", {}, "statistics", "mix", "no fault; bf16 autocast vs fp32", None,
         target_dtype="bf16"),
    Case("tv_ctl_efficientnet_fp32_stat", "tv_efficientnet", {}, "statistics", "mix",
         "no fault; fp32 vs fp32 (identical runs; stochastic depth draws torch.empty(...).bernoulli_)", None),
]

TV_FAULTS = [c for c in TV_CASES if not c.control]
TV_CONTROLS = [c for c in TV_CASES if c.control]
