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
    """Write ``tensor`` to ``path`` as ``torch.save`` would, through a temporary file and an atomic rename
    (see the module doc).  A dense CPU tensor of at most 2 GiB is written by :func:`_pt_parts` in one
    ``writev`` (same records, same pickle, readable by ``torch.load(weights_only=True)``); anything else
    goes through ``torch.save``."""
    from msprobe.core.dump.writer import write_file, write_path

    torch = _import_torch(path)
    parts = None
    try:
        parts = _pt_parts(torch, tensor, os.path.basename(path))
    except Exception:   # an unusual tensor (subclass, no numpy view): torch.save below
        parts = None
    if parts is None:
        return write_path(path, lambda tmp: torch.save(tensor, tmp), mode)
    return write_file(path, lambda fh: _writev_all(fh, parts), mode)


# ---------------------------------------------------------------------------------------------------------------------
# the .pt (zip) format written directly: the records torch.save writes for one tensor, data aligned to 64 bytes,
# stored (no compression), CRC-32 by msprobe.core.crc; one writev per file instead of torch.save's pickling per call
# ---------------------------------------------------------------------------------------------------------------------

_ALIGN = 64
_MAX_DIRECT = 2 ** 31 - 1024          # zip32 sizes/offsets; bigger tensors go through torch.save
_PKL_CACHE: dict = {}                 # (dtype, shape) -> data.pkl bytes
_STORAGE_TYPE: dict = {}              # dtype -> torch.<X>Storage class
_SERIAL = [0]


def _storage_type(torch, dtype):
    st = _STORAGE_TYPE.get(dtype)
    if st is None:
        import warnings
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            name = torch.storage.TypedStorage(dtype=dtype, device="cpu")._pickle_storage_type()
        st = _STORAGE_TYPE[dtype] = getattr(torch, name)
    return st


def _data_pkl(torch, dtype, shape, stride, numel):
    """The pickle torch.save writes for a dense, detached CPU tensor (protocol 2, persistent storage '0')."""
    key = (dtype, shape)
    pkl = _PKL_CACHE.get(key)
    if pkl is not None:
        return pkl
    import collections
    import io
    import pickle

    storage_id = ("storage", _storage_type(torch, dtype), "0", "cpu", numel)
    marker = object()
    rebuild = torch._utils._rebuild_tensor_v2

    class _Stub:
        def __reduce__(self):
            return rebuild, (marker, 0, shape, stride, False, collections.OrderedDict())

    class _Pickler(pickle.Pickler):
        def persistent_id(self, obj):
            return storage_id if obj is marker else None

    buf = io.BytesIO()
    _Pickler(buf, protocol=2).dump(_Stub())
    pkl = buf.getvalue()
    if len(_PKL_CACHE) > 4096:
        _PKL_CACHE.clear()
    _PKL_CACHE[key] = pkl
    return pkl


def _pt_parts(torch, tensor, file_name):
    """The byte buffers of the .pt file of ``tensor`` (None when torch.save must write it)."""
    if type(tensor) is not torch.Tensor or tensor.device.type != "cpu" or tensor.layout != torch.strided \
            or tensor.requires_grad or tensor.is_conj() or tensor.is_neg() or tensor.dtype.is_complex:
        return None
    nbytes = tensor.numel() * tensor.element_size()
    if not tensor.is_contiguous() or tensor.storage_offset() != 0 or nbytes > _MAX_DIRECT \
            or tensor.untyped_storage().nbytes() != nbytes:
        return None
    import struct
    import sys
    from msprobe.core.crc import crc32 as fast_crc32

    shape = tuple(tensor.shape)
    stride = tuple(tensor.stride())
    pkl = _data_pkl(torch, tensor.dtype, shape, stride, tensor.numel())
    data = tensor.reshape(-1).view(torch.uint8).numpy() if nbytes else b""
    stem = file_name[:-3] if file_name.endswith(".pt") else file_name
    stem = "".join(c if c.isascii() and (c.isalnum() or c in "._-") else "_" for c in stem) or "archive"
    _SERIAL[0] += 1
    serial = ("%040d" % ((os.getpid() << 64) + _SERIAL[0]))[-40:]
    records = [("data.pkl", pkl), (".format_version", b"1"), (".storage_alignment", b"%d" % _ALIGN),
               ("byteorder", sys.byteorder.encode()), ("data/0", data), ("version", b"3\n"),
               (".data/serialization_id", serial.encode())]
    parts, central = [], []
    offset = 0
    for name, payload in records:
        full = f"{stem}/{name}".encode("ascii")
        size = len(payload) if isinstance(payload, bytes) else nbytes
        crc = fast_crc32(payload) & 0xFFFFFFFF
        # the extra field pads the local header so that the payload starts on a 64-byte boundary
        head = 30 + len(full)
        pad = (-(offset + head + 4)) % _ALIGN
        extra = struct.pack("<HH", 0x4246, pad) + b"Z" * pad
        parts.append(struct.pack("<IHHHHHIIIHH", 0x04034B50, 20, 0, 0, 0, 0x21, crc, size, size, len(full),
                                 len(extra)) + full + extra)
        if size:
            parts.append(payload)
        central.append(struct.pack("<IHHHHHHIIIHHHHHII", 0x02014B50, 20, 20, 0, 0, 0, 0x21, crc, size, size,
                                   len(full), 0, 0, 0, 0, 0, offset) + full)
        offset += head + len(extra) + size
    cd = b"".join(central)
    parts.append(cd + struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, len(records), len(records), len(cd), offset, 0))
    return parts


def _writev_all(fh, parts):
    """Write every buffer of ``parts`` to the binary file ``fh`` (writev, resumed after a short write)."""
    fh.flush()
    fd = fh.fileno()
    views = [memoryview(p).cast("B") for p in parts]
    while views:
        n = os.writev(fd, views[:1024])
        while n and views:
            if n >= len(views[0]):
                n -= len(views[0])
                views.pop(0)
            else:
                views[0] = views[0][n:]
                n = 0
