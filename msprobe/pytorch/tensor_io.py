"""torch-based ``.pt`` tensor files: writing them for the dump, and the loader fallback of
:mod:`msprobe.core.io.tensors`.

:func:`save_tensor` writes a dumped tensor atomically (temporary name, then rename; mode 0640), so a
kill or a full disk never leaves a partial or empty ``.pt`` under its final name.

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

__all__ = ["load_pt_with_torch", "install_fallback", "save_tensor", "tensor_file_name"]

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


def tensor_file_name(data_name: str, ext: str = ".pt") -> str:
    """The file name of a dumped tensor: ``data_name`` + ``ext`` with every path separator (and NUL)
    replaced by ``_``, so a module or API name holding ``/`` or ``..`` cannot place a file outside
    dump_tensor_data."""
    name = data_name.replace("/", "_").replace("\\", "_").replace("\x00", "_")
    return name + ext


def save_tensor(tensor, path, mode: int = 0o640) -> str:
    """``torch.save(tensor, path)`` through a temporary file and an atomic rename (see the module doc)."""
    from msprobe.core.dump.writer import write_path

    torch = _import_torch(path)
    return write_path(path, lambda tmp: torch.save(tensor, tmp), mode)
