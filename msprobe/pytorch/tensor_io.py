"""torch-based loader for ``.pt`` tensor files: the fallback of :mod:`msprobe.core.io.tensors`.

The torch-free reader in ``msprobe.core.io.tensors`` handles every file msprobe dumps; this
module is for the rest (the legacy non-zip ``torch.save`` format, unusual objects).  torch is
imported lazily, inside :func:`load_pt_with_torch`, so importing this module stays cheap and
never fails.  To use it as the fallback::

    from msprobe.pytorch.tensor_io import install_fallback
    install_fallback()
"""

from __future__ import annotations

import os

import numpy as np

from msprobe.core.io.tensors import TensorReadError, register_fallback

__all__ = ["load_pt_with_torch", "install_fallback"]

# dtypes torch cannot hand to numpy directly; widened exactly to float32
_WIDEN_TO_FLOAT32 = (
    "bfloat16",
    "float8_e4m3fn",
    "float8_e5m2",
    "float8_e4m3fnuz",
    "float8_e5m2fnuz",
    "float8_e8m0fnu",
)


def _import_torch(path):
    # An offline tool process: do not let torch auto-load device backends such as torch_npu
    # (a broken one makes ``import torch`` itself fail).
    os.environ.setdefault("TORCH_DEVICE_BACKEND_AUTOLOAD", "0")
    try:
        import torch
    except Exception as exc:  # noqa: BLE001 - ImportError, or whatever a broken install raises
        raise TensorReadError(path, f"torch is not importable ({type(exc).__name__}: {exc})") from None
    return torch


def load_pt_with_torch(path) -> np.ndarray:
    """``torch.load(path, map_location="cpu", weights_only=True)`` as a numpy array.

    bfloat16 and float8 tensors are widened exactly to float32; the array owns its memory.
    """
    path = os.fspath(path)
    torch = _import_torch(path)
    try:
        obj = torch.load(path, map_location="cpu", weights_only=True)
    except FileNotFoundError:
        raise TensorReadError(path, "file not found") from None
    except Exception as exc:  # noqa: BLE001
        message = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        raise TensorReadError(path, f"torch.load failed ({type(exc).__name__}: {message})") from None
    if not isinstance(obj, torch.Tensor):
        raise TensorReadError(
            path, f"holds a {type(obj).__name__}, not a single tensor (msprobe dumps one tensor per file)"
        )
    try:
        tensor = obj.detach()
        widen = {getattr(torch, name) for name in _WIDEN_TO_FLOAT32 if hasattr(torch, name)}
        if tensor.dtype in widen:
            tensor = tensor.to(torch.float32)
        if tensor.is_conj():
            tensor = tensor.resolve_conj()
        if tensor.is_neg():
            tensor = tensor.resolve_neg()
        return np.array(tensor.numpy(), order="C", copy=True)
    except Exception as exc:  # noqa: BLE001
        raise TensorReadError(
            path, f"cannot convert the {obj.dtype} tensor to numpy ({type(exc).__name__}: {exc})"
        ) from None


def install_fallback() -> None:
    """Make :func:`msprobe.core.io.tensors.load_pt` retry unsupported formats with torch."""
    register_fallback(load_pt_with_torch)
