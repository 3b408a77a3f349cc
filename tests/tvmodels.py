"""Small random-init ``torchvision`` models (``weights=None``, nothing downloaded) for the dump tests
(tests/test_torchvision_models.py) and the ``tv`` fault-injection family (tests/fault_injection/tv.py).

``build(arch)`` -> :class:`real_models.builders.Case` with ``model`` (train mode), ``inputs()``
(``{"x": images}``, the same batch on every call) and ``loss(out)`` (cross-entropy against seeded labels).
``torchvision_missing()`` gives the reason to skip (None when usable).

The registry's torchvision 0.28.0 wheel (the release paired with torch 2.13.0) is built against CUDA torch: its
``_C`` extension (nms, roi_align, ...) does not load with the 2.13.0 CPU wheel, and torchvision then fails at
import, because ``_meta_registrations`` registers fake kernels for ``torchvision::nms`` and ``::qnms``
unconditionally.  :func:`import_torchvision` declares those two operator schemas (no kernel) when that happens
and imports again: the models (pure Python over torch ops) work, the detection ops do not (none is used here).
"""
from __future__ import annotations

import os
import sys

from real_models.builders import Case  # (the same record as the transformers models')

ARCHS = ("resnet", "mobilenet", "vit", "convnext", "efficientnet", "swin")
BATCH, SIZE, CLASSES = 4, 32, 10

_SCHEMA_LIB = None       # kept alive: a Library's definitions go away with it
_IMPORT_ERROR = None


def import_torchvision():
    """The torchvision module (see the module doc for the CUDA-extension work-around); raises ImportError."""
    global _SCHEMA_LIB, _IMPORT_ERROR
    if "torchvision.models" in sys.modules:
        return sys.modules["torchvision"]
    if _IMPORT_ERROR is not None:
        raise ImportError(_IMPORT_ERROR)
    # make venv installs the wheel into <venv>/torchvision-site, not site-packages: installed there, transformers
    # would import it (and fail) in every process that did not come through here first (see the Makefile)
    site = os.path.join(sys.prefix, "torchvision-site")
    if os.path.isdir(site) and site not in sys.path:
        sys.path.append(site)
    try:
        import torchvision
        return torchvision
    except RuntimeError as exc:
        if "torchvision::" not in str(exc) or "does not exist" not in str(exc):
            _IMPORT_ERROR = f"torchvision import failed: {exc}"
            raise ImportError(_IMPORT_ERROR) from exc
    except Exception as exc:  # noqa: BLE001 - not installed or broken: a reason to skip
        _IMPORT_ERROR = f"torchvision is not importable ({type(exc).__name__}: {exc})"
        raise ImportError(_IMPORT_ERROR) from exc
    import torch

    for mod in [m for m in sys.modules if m == "torchvision" or m.startswith("torchvision.")]:
        del sys.modules[mod]
    _SCHEMA_LIB = torch.library.Library("torchvision", "FRAGMENT")
    for op in ("nms", "qnms"):
        try:
            _SCHEMA_LIB.define(f"{op}(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
        except RuntimeError:
            pass                                     # already declared
    try:
        import torchvision
    except Exception as exc:  # noqa: BLE001
        _IMPORT_ERROR = f"torchvision is not importable even with nms/qnms declared ({type(exc).__name__}: {exc})"
        raise ImportError(_IMPORT_ERROR) from exc
    return torchvision


def torchvision_missing():
    """None when torchvision's models can be built, else the reason to skip."""
    try:
        import_torchvision()
    except ImportError as exc:
        return f"{exc}; make venv installs torchvision==0.28.0 into .venv/torchvision-site (--no-deps)"
    return None


def _model(arch):
    import_torchvision()
    from functools import partial

    import torch.nn as nn
    from torchvision.models import convnext, efficientnet, mobilenetv3, resnet, swin_transformer, vision_transformer

    if arch == "resnet":            # BasicBlock x [1,1,1,1]: conv-bn-relu(inplace), downsample Sequentials
        return resnet.ResNet(resnet.BasicBlock, [1, 1, 1, 1], num_classes=CLASSES)
    if arch == "mobilenet":         # in-place Hardswish / ReLU, squeeze-excitation, Hardsigmoid
        return mobilenetv3.mobilenet_v3_small(weights=None, num_classes=CLASSES, width_mult=0.5)
    if arch == "vit":
        vit = vision_transformer.VisionTransformer(image_size=SIZE, patch_size=8, num_layers=2, num_heads=2,
                                                   hidden_dim=32, mlp_dim=64, num_classes=CLASSES)
        # torchvision zero-initialises the classifier head (for fine-tuning): every gradient before it would be 0
        nn.init.normal_(vit.heads.head.weight, std=0.02)
        return vit
    if arch == "convnext":          # depthwise 7x7, LayerNorm2d, layer scale, stochastic depth
        cfg = [convnext.CNBlockConfig(16, 32, 1), convnext.CNBlockConfig(32, None, 1)]
        return convnext.ConvNeXt(cfg, stochastic_depth_prob=0.2, num_classes=CLASSES)
    if arch == "efficientnet":      # MBConv + SE (SiLU), stochastic depth, dropout head
        mb = partial(efficientnet.MBConvConfig, width_mult=1.0, depth_mult=1.0)
        setting = [mb(1, 3, 1, 16, 8, 1), mb(4, 3, 2, 8, 16, 2), mb(4, 5, 2, 16, 24, 1)]
        return efficientnet.EfficientNet(setting, dropout=0.2, stochastic_depth_prob=0.2, num_classes=CLASSES,
                                         last_channel=64)
    if arch == "swin":              # shifted windows (window 2 on an 8x8 patch grid), patch merging
        return swin_transformer.SwinTransformer(patch_size=[4, 4], embed_dim=16, depths=[2, 2], num_heads=[2, 2],
                                                window_size=[2, 2], stochastic_depth_prob=0.1,
                                                num_classes=CLASSES, norm_layer=partial(nn.LayerNorm, eps=1e-5))
    raise ValueError(arch)


def build(arch, seed=1234):
    """A fresh case: weights from ``torch.manual_seed(seed)``, images and labels from a generator seeded with
    ``seed + 1`` (re-made identically on every ``inputs()`` call)."""
    import torch
    import torch.nn.functional as F

    torch.manual_seed(seed)
    model = _model(arch)
    model.train()
    g = torch.Generator().manual_seed(seed + 1)
    x = torch.randn(BATCH, 3, SIZE, SIZE, generator=g)
    y = torch.randint(0, CLASSES, (BATCH,), generator=g)

    def inputs():
        return {"x": x.clone()}

    return Case(arch, model, inputs, lambda out: F.cross_entropy(out.float(), y))
