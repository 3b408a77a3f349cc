"""Load dumped tensors (``.pt`` written by ``torch.save`` and numpy ``.npy``) as numpy arrays.

This module never imports torch: ``msprobe compare`` must work on machines without torch and on
machines where ``import torch`` itself fails (for example a broken torch_npu autoload).

A ``.pt`` file written by ``torch.save`` (zip format, torch >= 1.6) is a zip archive::

    <prefix>/data.pkl       pickle describing the object; storages are persistent ids
    <prefix>/data/<key>     raw storage bytes (stored uncompressed)
    <prefix>/byteorder      optional, "little" or "big" (missing means little)
    <prefix>/version, ...

``data.pkl`` is unpickled with a restricted unpickler that only knows the handful of globals that
make up a plain tensor (``torch._utils._rebuild_tensor_v2``/``_v3``, ``_rebuild_parameter``, storage
type markers such as ``torch.FloatStorage``, dtype objects such as ``torch.float32`` and
``collections.OrderedDict``); each is mapped to a small local stand-in.  Nothing else can be
constructed, so a hostile pickle cannot run code.  The tensor data is then read straight from
the archive into a fresh numpy array (only the bytes the tensor covers are read).

The result equals ``torch.load(path, map_location="cpu", weights_only=True).detach()`` followed by
bfloat16 -> float32 (exact widening), float8 -> float32 (exact, via a 256-entry table) and
``.numpy()``.  Tensors carrying the lazy ``conj``/``neg`` bits are resolved (torch's ``.numpy()``
would refuse them).

Files this reader does not understand for *format* reasons (the legacy non-zip format, a global
it does not know) raise :class:`UnsupportedTensorFormat`; if a fallback loader was registered
with :func:`register_fallback` (for example ``msprobe.pytorch.tensor_io.load_pt_with_torch``),
:func:`load_pt` retries with it.  Nothing is registered at import time.
"""

from __future__ import annotations

import collections
import io
import os
import pickle
import struct
import sys
import zipfile
import zlib
from typing import Callable, Optional

import numpy as np

from msprobe.core.errors import MsprobeError

__all__ = [
    "TensorReadError",
    "UnsupportedTensorFormat",
    "load_tensor",
    "load_pt",
    "load_npy",
    "register_fallback",
    "MAX_FILE_BYTES",
]

#: Files (and decoded tensors) larger than this are refused.
MAX_FILE_BYTES = 10 * 1024 ** 3
#: ``data.pkl`` of a single tensor is a few hundred bytes; refuse absurd ones.
_MAX_PICKLE_BYTES = 64 * 1024 ** 2


class TensorReadError(MsprobeError):
    """A tensor file cannot be read.  The message is one line naming the file and the problem."""

    def __init__(self, path, reason: str):
        self.path = os.fspath(path) if path is not None else None
        self.reason = " ".join(str(reason).split())  # keep it on one line
        if self.path is None:
            super().__init__(self.reason)
        else:
            super().__init__(f"cannot read tensor file {self.path}: {self.reason}")


class UnsupportedTensorFormat(TensorReadError):
    """The file may be valid but this torch-free reader cannot decode it (legacy format,
    an object type it does not know).  A registered fallback loader is tried for these."""


_fallback: Optional[Callable[[str], np.ndarray]] = None


def register_fallback(fn: Optional[Callable[[str], np.ndarray]]) -> None:
    """Register ``fn(path) -> numpy.ndarray`` to retry ``.pt`` files the fast reader cannot decode.

    Only :class:`UnsupportedTensorFormat` failures are retried; missing, too big, truncated or
    corrupt files are not.  ``register_fallback(None)`` removes the fallback.
    """
    global _fallback
    if fn is not None and not callable(fn):
        raise TypeError("register_fallback expects a callable or None")
    _fallback = fn


# --------------------------------------------------------------------------------------------
# dtypes
# --------------------------------------------------------------------------------------------


def _fp8_table(exp_bits: int, man_bits: int, bias: int, special: str) -> np.ndarray:
    """float32 value of each of the 256 codes of an 8-bit float format."""
    codes = np.arange(256, dtype=np.int64)
    sign = (codes >> 7) & 1
    exp = (codes >> man_bits) & ((1 << exp_bits) - 1)
    man = (codes & ((1 << man_bits) - 1)).astype(np.float64)
    frac = man / float(1 << man_bits)
    subnormal = frac * 2.0 ** (1 - bias)
    normal = (1.0 + frac) * np.exp2((exp - bias).astype(np.float64))
    values = np.where(exp == 0, subnormal, normal)
    values = np.where(sign == 1, -values, values)
    exp_max = (1 << exp_bits) - 1
    man_max = (1 << man_bits) - 1
    if special == "ieee":  # e5m2: all-ones exponent is inf (mantissa 0) or nan
        values = np.where((exp == exp_max) & (man == 0), np.where(sign == 1, -np.inf, np.inf), values)
        values = np.where((exp == exp_max) & (man != 0), np.nan, values)
    elif special == "fn":  # e4m3fn: no inf, only S.1111.111 is nan
        values = np.where((exp == exp_max) & (man == man_max), np.nan, values)
    elif special == "fnuz":  # no inf, no negative zero: 0x80 is the only nan
        values = np.where(codes == 0x80, np.nan, values)
    else:  # pragma: no cover - programming error
        raise ValueError(special)
    return values.astype(np.float32)


def _e8m0_table() -> np.ndarray:
    codes = np.arange(256, dtype=np.float64)
    values = np.exp2(codes - 127.0)
    values[255] = np.nan
    return values.astype(np.float32)  # 2**-127 is a float32 subnormal: still exact


_FP8_SPECS = {
    "float8_e4m3fn": lambda: _fp8_table(4, 3, 7, "fn"),
    "float8_e5m2": lambda: _fp8_table(5, 2, 15, "ieee"),
    "float8_e4m3fnuz": lambda: _fp8_table(4, 3, 8, "fnuz"),
    "float8_e5m2fnuz": lambda: _fp8_table(5, 2, 16, "fnuz"),
    "float8_e8m0fnu": _e8m0_table,
}
_fp8_tables: dict = {}


def _fp8_lut(name: str) -> np.ndarray:
    table = _fp8_tables.get(name)
    if table is None:
        table = _fp8_tables[name] = _FP8_SPECS[name]()
    return table


class _Frozen:
    """Base of the stand-ins: a pickle BUILD opcode must not be able to mutate them."""

    __slots__ = ()

    def __setstate__(self, state):
        raise _Corrupt(f"data.pkl tries to modify a {type(self).__name__[1:]}")


class _DType(_Frozen):
    """Stand-in for a ``torch.dtype``: the numpy type of its raw elements and how to convert."""

    __slots__ = ("name", "raw", "kind")

    def __init__(self, name: str, raw, kind: str = "plain"):
        self.name = name
        self.raw = np.dtype(raw)  # numpy dtype of one stored element
        self.kind = kind  # "plain", "bf16" or "fp8"

    def __repr__(self):
        return f"torch.{self.name}"


_DTYPES = {}
for _name, _raw in [
    ("float16", np.float16), ("float32", np.float32), ("float64", np.float64),
    ("int8", np.int8), ("int16", np.int16), ("int32", np.int32), ("int64", np.int64),
    ("uint8", np.uint8), ("uint16", np.uint16), ("uint32", np.uint32), ("uint64", np.uint64),
    ("bool", np.bool_), ("complex64", np.complex64), ("complex128", np.complex128),
]:
    _DTYPES[_name] = _DType(_name, _raw)
_DTYPES["bfloat16"] = _DType("bfloat16", np.uint16, "bf16")
for _name in _FP8_SPECS:
    _DTYPES[_name] = _DType(_name, np.uint8, "fp8")
# aliases torch accepts for the same dtype objects
for _alias, _name in [
    ("half", "float16"), ("float", "float32"), ("double", "float64"), ("short", "int16"),
    ("int", "int32"), ("long", "int64"), ("cfloat", "complex64"), ("cdouble", "complex128"),
]:
    _DTYPES[_alias] = _DTYPES[_name]


class _StorageType(_Frozen):
    """Stand-in for a storage class such as ``torch.FloatStorage`` (or the untyped storage)."""

    __slots__ = ("name", "dtype")

    def __init__(self, name: str, dtype: _DType):
        self.name = name
        self.dtype = dtype


_STORAGE_TYPES = {
    "DoubleStorage": "float64", "FloatStorage": "float32", "HalfStorage": "float16",
    "BFloat16Storage": "bfloat16", "LongStorage": "int64", "IntStorage": "int32",
    "ShortStorage": "int16", "CharStorage": "int8", "ByteStorage": "uint8", "BoolStorage": "bool",
    "ComplexFloatStorage": "complex64", "ComplexDoubleStorage": "complex128",
    "UntypedStorage": "uint8",
}


class _StorageRef(_Frozen):
    """A storage record ``data/<key>`` of the archive; read lazily, only the needed bytes."""

    __slots__ = ("key", "nbytes", "dtype")

    def __init__(self, key: str, nbytes: int, dtype: _DType):
        self.key = key
        self.nbytes = nbytes
        self.dtype = dtype


class _TensorStub(_Frozen):
    """What the restricted unpickler builds instead of a tensor."""

    __slots__ = ("storage", "offset", "size", "stride", "dtype", "metadata")

    def __init__(self, storage, offset, size, stride, dtype, metadata):
        self.storage = storage
        self.offset = offset
        self.size = size
        self.stride = stride
        self.dtype = dtype
        self.metadata = metadata


class _Corrupt(Exception):
    """Internal: the archive content is inconsistent (turned into TensorReadError)."""


def _int_tuple(value, what: str):
    if isinstance(value, int) and not isinstance(value, bool):
        value = (value,)
    if not isinstance(value, (tuple, list)):
        raise _Corrupt(f"tensor {what} is a {type(value).__name__}, expected a tuple of ints")
    out = []
    for item in value:
        if not isinstance(item, int) or isinstance(item, bool):
            raise _Corrupt(f"tensor {what} contains a {type(item).__name__}, expected ints")
        out.append(int(item))
    return tuple(out)


def _make_stub(storage, storage_offset, size, stride, dtype, metadata):
    if not isinstance(storage, _StorageRef):
        raise _Corrupt("tensor rebuilt from something that is not a storage record")
    if not isinstance(storage_offset, int) or isinstance(storage_offset, bool):
        raise _Corrupt("tensor storage offset is not an int")
    size = _int_tuple(size, "size")
    stride = _int_tuple(stride, "stride")
    if len(size) != len(stride):
        raise _Corrupt(f"tensor size {size} and stride {stride} differ in length")
    if metadata is not None and not isinstance(metadata, dict):
        raise _Corrupt("tensor metadata is not a dict")
    return _TensorStub(storage, storage_offset, size, stride, dtype, metadata or None)


def _rebuild_tensor_v2(storage, storage_offset, size, stride, requires_grad=False,
                       backward_hooks=None, metadata=None):
    dtype = storage.dtype if isinstance(storage, _StorageRef) else None
    return _make_stub(storage, storage_offset, size, stride, dtype, metadata)


def _rebuild_tensor_v3(storage, storage_offset, size, stride, requires_grad, backward_hooks,
                       dtype, metadata=None):
    if not isinstance(dtype, _DType):
        raise _Corrupt("tensor dtype is not a torch dtype")
    return _make_stub(storage, storage_offset, size, stride, dtype, metadata)


def _rebuild_parameter(data, requires_grad=False, backward_hooks=None, state=None):
    if not isinstance(data, _TensorStub):
        raise _Corrupt("nn.Parameter wraps something that is not a tensor")
    return data


_SAFE_GLOBALS = {
    ("torch._utils", "_rebuild_tensor_v2"): _rebuild_tensor_v2,
    ("torch._utils", "_rebuild_tensor_v3"): _rebuild_tensor_v3,
    ("torch._utils", "_rebuild_parameter"): _rebuild_parameter,
    ("torch._utils", "_rebuild_parameter_with_state"): _rebuild_parameter,
    ("collections", "OrderedDict"): collections.OrderedDict,
}
for _storage_name, _dtype_name in _STORAGE_TYPES.items():
    _marker = _StorageType(_storage_name, _DTYPES[_dtype_name])
    for _module in ("torch", "torch.cuda", "torch.storage"):
        _SAFE_GLOBALS[(_module, _storage_name)] = _marker
for _name, _dtype in _DTYPES.items():
    _SAFE_GLOBALS[("torch", _name)] = _dtype


class _Unpickler(pickle.Unpickler):
    def __init__(self, file, path, archive):
        super().__init__(file)
        self._path = path
        self._archive = archive  # _Archive
        self._storages = {}

    def find_class(self, module, name):
        obj = _SAFE_GLOBALS.get((module, name))
        if obj is None:
            raise UnsupportedTensorFormat(
                self._path,
                f"contains an object msprobe does not load ({module}.{name}); "
                "only plain tensors are supported",
            )
        return obj

    def persistent_load(self, pid):
        if not isinstance(pid, tuple) or len(pid) != 5 or pid[0] != "storage":
            raise UnsupportedTensorFormat(
                self._path, f"unknown persistent record {type(pid).__name__} in data.pkl"
            )
        _, storage_type, key, _location, numel = pid
        if not isinstance(storage_type, _StorageType):
            raise _Corrupt("storage record without a storage type")
        if not isinstance(key, str) or not isinstance(numel, int) or numel < 0:
            raise _Corrupt("malformed storage record")
        ref = self._storages.get(key)
        if ref is None:
            nbytes = numel * storage_type.dtype.raw.itemsize
            ref = self._storages[key] = _StorageRef(key, nbytes, storage_type.dtype)
            self._archive.check_record(key, nbytes)
        return ref


# --------------------------------------------------------------------------------------------
# zip archive access
# --------------------------------------------------------------------------------------------

_LOCAL_HEADER = struct.Struct("<4s5H3I2H")  # signature .. extra field length: 30 bytes


class _Archive:
    def __init__(self, path, fobj, zf: zipfile.ZipFile):
        self.path = path
        self.fobj = fobj
        self.zf = zf
        self.prefix = self._find_prefix()
        self.byteorder = self._read_byteorder()

    def _find_prefix(self) -> str:
        names = self.zf.namelist()
        candidates = [n for n in names if n.endswith("/data.pkl") and n.count("/") == 1]
        if len(candidates) == 1:
            return candidates[0][: -len("data.pkl")]
        if len(candidates) > 1:
            raise _Corrupt("the archive holds more than one data.pkl")
        if any(n.endswith("/constants.pkl") or "/code/" in n for n in names):
            raise UnsupportedTensorFormat(
                self.path, "is a TorchScript archive (torch.jit.save), not a torch.save tensor"
            )
        raise _Corrupt("the zip archive has no data.pkl; it was not written by torch.save")

    def _read_byteorder(self) -> str:
        try:
            info = self.zf.getinfo(self.prefix + "byteorder")
        except KeyError:
            return "little"  # torch wrote no byteorder record before 1.13: little endian
        if info.file_size > 16:
            raise _Corrupt("byteorder record is malformed")
        value = self._read_small(info).decode("ascii", "replace").strip()
        if value not in ("little", "big"):
            raise _Corrupt(f"byteorder record says {value!r}")
        return value

    def read_pickle(self) -> bytes:
        info = self.zf.getinfo(self.prefix + "data.pkl")
        if info.file_size > _MAX_PICKLE_BYTES:
            raise TensorReadError(
                self.path, f"data.pkl is {info.file_size} bytes; a single tensor needs far less"
            )
        return self._read_small(info)

    def _read_small(self, info: zipfile.ZipInfo) -> bytes:
        """Read a small record, checking its CRC (direct read: zipfile's reader is slow)."""
        if info.flag_bits & 0x1:
            raise _Corrupt(f"{info.filename} is encrypted")
        if info.compress_type != zipfile.ZIP_STORED:
            return self.zf.read(info)
        self.fobj.seek(self._data_start(info))
        data = self.fobj.read(info.file_size)
        if len(data) != info.file_size:
            raise _Corrupt(f"file is truncated ({info.filename} cut off)")
        if zlib.crc32(data) != info.CRC:
            raise _Corrupt(f"bad CRC-32 for {info.filename}")
        return data

    def _record(self, key: str) -> zipfile.ZipInfo:
        try:
            return self.zf.getinfo(f"{self.prefix}data/{key}")
        except KeyError:
            raise _Corrupt(f"storage record data/{key} is missing from the archive") from None

    def check_record(self, key: str, nbytes: int) -> None:
        info = self._record(key)
        if info.compress_type != zipfile.ZIP_STORED:
            raise _Corrupt(f"storage record data/{key} is compressed; torch.save never does that")
        if info.flag_bits & 0x1:
            raise _Corrupt(f"storage record data/{key} is encrypted")
        if info.file_size < nbytes:
            raise _Corrupt(
                f"storage record data/{key} has {info.file_size} bytes, expected {nbytes}"
            )

    def _data_start(self, info: zipfile.ZipInfo) -> int:
        self.fobj.seek(info.header_offset)
        header = self.fobj.read(_LOCAL_HEADER.size)
        if len(header) != _LOCAL_HEADER.size:
            raise _Corrupt("file is truncated (local zip header cut off)")
        fields = _LOCAL_HEADER.unpack(header)
        if fields[0] != b"PK\x03\x04":
            raise _Corrupt(f"bad local zip header for {info.filename}")
        return info.header_offset + _LOCAL_HEADER.size + fields[9] + fields[10]

    def read_into(self, key: str, byte_start: int, out: np.ndarray) -> None:
        """Fill the C-contiguous array ``out`` with record bytes starting at ``byte_start``."""
        nbytes = out.nbytes
        if nbytes == 0:
            return
        info = self._record(key)
        if byte_start < 0 or byte_start + nbytes > info.file_size:
            raise _Corrupt(f"tensor reaches past the end of storage record data/{key}")
        self.fobj.seek(self._data_start(info) + byte_start)
        got = self.fobj.readinto(out.reshape(-1).view(np.uint8))
        if got != nbytes:
            raise _Corrupt("file is truncated (tensor data cut off)")


# --------------------------------------------------------------------------------------------
# materialisation
# --------------------------------------------------------------------------------------------


def _materialise(stub: _TensorStub, archive: _Archive, path) -> np.ndarray:
    # validate again: nothing in the pickle may have slipped past _make_stub
    stub = _make_stub(stub.storage, stub.offset, stub.size, stub.stride, stub.dtype, stub.metadata)
    if not isinstance(stub.dtype, _DType):
        raise _Corrupt("tensor has no valid dtype")
    dtype = stub.dtype
    raw = dtype.raw
    itemsize = raw.itemsize
    size, stride, offset = stub.size, stub.stride, stub.offset
    if any(s < 0 for s in size):
        raise _Corrupt(f"negative tensor size {size}")
    if any(s < 0 for s in stride):
        raise _Corrupt(f"negative tensor stride {stride}")
    if offset < 0:
        raise _Corrupt("negative storage offset")
    numel = 1
    for s in size:
        numel *= s
    out_itemsize = 4 if dtype.kind in ("bf16", "fp8") else itemsize
    check_tensor_bytes(path, size, numel * out_itemsize)
    storage = stub.storage
    storage_elems = storage.nbytes // itemsize

    if numel == 0:
        data = np.empty(size, dtype=raw)
    else:
        span = 1 + sum((s - 1) * st for s, st in zip(size, stride))  # elements touched
        if offset + span > storage_elems:
            raise _Corrupt(
                f"tensor view (offset {offset}, size {list(size)}, stride {list(stride)}) "
                f"exceeds its storage of {storage_elems} elements"
            )
        contiguous_stride = []
        running = 1
        for s in reversed(size):
            contiguous_stride.append(running)
            running *= s
        contiguous_stride.reverse()
        is_contiguous = all(s == 1 or st == cst for s, st, cst in zip(size, stride, contiguous_stride))
        if is_contiguous:
            # read the tensor's bytes straight into its final array
            data = np.empty(size, dtype=raw)
            archive.read_into(storage.key, offset * itemsize, data)
        else:
            chunk = np.empty(span, dtype=raw)
            archive.read_into(storage.key, offset * itemsize, chunk)
            view = np.lib.stride_tricks.as_strided(
                chunk, shape=size, strides=tuple(st * itemsize for st in stride), writeable=False
            )
            data = np.array(view, order="C", copy=True)
        if archive.byteorder != sys.byteorder and itemsize > 1:
            data.byteswap(inplace=True)

    if dtype.kind == "bf16":
        result = np.empty(size, dtype=np.float32)
        bits = result.view(np.uint32)
        bits[...] = data  # widen uint16 -> uint32 (much faster than a casting ufunc)
        bits <<= 16
    elif dtype.kind == "fp8":
        result = np.empty(size, dtype=np.float32)
        np.take(_fp8_lut(dtype.name), data, out=result)
    else:
        result = data

    if stub.metadata:
        for key, flag in stub.metadata.items():
            if key == "neg":
                if flag:
                    np.negative(result, out=result)
            elif key == "conj":
                if flag and result.dtype.kind == "c":
                    np.conjugate(result, out=result)
            else:
                raise UnsupportedTensorFormat(path, f"tensor metadata {key!r} is not supported")
    return result


# --------------------------------------------------------------------------------------------
# public entry points
# --------------------------------------------------------------------------------------------


def _check_file(path) -> int:
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise TensorReadError(path, "file not found") from None
    except OSError as exc:
        raise TensorReadError(path, exc.strerror or str(exc)) from None
    if not os.path.isfile(path):
        raise TensorReadError(path, "not a regular file")
    if st.st_size > MAX_FILE_BYTES:
        raise TensorReadError(
            path, f"file is {st.st_size} bytes, larger than the {MAX_FILE_BYTES / 1024 ** 3:g} GiB limit"
        )
    if st.st_size == 0:
        raise TensorReadError(path, "file is empty")
    return st.st_size


def _describe(obj) -> str:
    if isinstance(obj, _StorageRef):
        return "a bare storage"
    if isinstance(obj, (dict, list, tuple)):
        n_tensors = sum(isinstance(v, _TensorStub) for v in (obj.values() if isinstance(obj, dict) else obj))
        extra = f" of {len(obj)} items ({n_tensors} tensors)"
        return f"a {type(obj).__name__}{extra}"
    return f"a {type(obj).__name__}"


def _load_pt_fast(path) -> np.ndarray:
    with open(path, "rb") as fobj:
        magic = fobj.read(4)
        fobj.seek(0)
        try:
            zf = zipfile.ZipFile(fobj)
        except (zipfile.BadZipFile, NotImplementedError, ValueError, EOFError):
            # (NotImplementedError: a damaged header asking for a zip version or method zipfile lacks)
            if magic.startswith(b"PK"):
                raise TensorReadError(path, "corrupt or truncated zip archive") from None
            if magic[:1] == b"\x80" or _looks_like_tar(fobj):
                raise UnsupportedTensorFormat(
                    path,
                    "uses the legacy (non-zip) torch.save format, which the torch-free reader "
                    "does not support (re-save with torch >= 1.6 or enable the torch fallback)",
                ) from None
            raise TensorReadError(path, "not a torch.save file (neither a zip archive nor a pickle)") from None
        with zf:
            archive = _Archive(path, fobj, zf)
            pickled = archive.read_pickle()
            obj = _Unpickler(io.BytesIO(pickled), path, archive).load()
            if not isinstance(obj, _TensorStub):
                raise TensorReadError(
                    path, f"holds {_describe(obj)}, not a single tensor (msprobe dumps one tensor per file)"
                )
            return _materialise(obj, archive, path)


def _looks_like_tar(fobj) -> bool:
    fobj.seek(257)
    magic = fobj.read(5)
    fobj.seek(0)
    return magic == b"ustar"


def _wrap_unexpected(path, exc: BaseException) -> TensorReadError:
    if isinstance(exc, _Corrupt):
        return TensorReadError(path, f"corrupt file: {exc}")
    if isinstance(exc, MemoryError):
        return TensorReadError(path, "not enough memory to load the tensor")
    if isinstance(exc, (EOFError, pickle.UnpicklingError)):
        return TensorReadError(path, f"corrupt or truncated data.pkl ({type(exc).__name__}: {exc})")
    if isinstance(exc, zipfile.BadZipFile):
        return TensorReadError(path, f"corrupt zip archive ({exc})")
    if isinstance(exc, OSError):
        return TensorReadError(path, exc.strerror or str(exc))
    return TensorReadError(path, f"corrupt or unreadable file ({type(exc).__name__}: {exc})")


def load_pt(path) -> np.ndarray:
    """Load a tensor saved by ``torch.save`` as a numpy array, without importing torch.

    Equals ``torch.load(path, map_location="cpu", weights_only=True).detach()`` with bfloat16 and
    float8 widened exactly to float32, then ``.numpy()``; the array owns its memory.
    """
    path = os.fspath(path)
    _check_file(path)
    try:
        try:
            return _load_pt_fast(path)
        except TensorReadError:
            raise
        except Exception as exc:  # noqa: BLE001 - every failure becomes one clear error
            raise _wrap_unexpected(path, exc) from None
    except UnsupportedTensorFormat as fast_error:
        fallback = _fallback
        if fallback is None:
            raise
        try:
            result = fallback(path)
        except TensorReadError as exc:
            raise TensorReadError(
                path, f"{fast_error.reason}; the torch fallback also failed: {exc.reason}"
            ) from None
        except Exception as exc:  # noqa: BLE001
            raise TensorReadError(
                path, f"{fast_error.reason}; the torch fallback also failed: {type(exc).__name__}: {exc}"
            ) from None
        if not isinstance(result, np.ndarray):
            raise TensorReadError(path, f"the torch fallback returned a {type(result).__name__}, not an array")
        return result


def _memory_left() -> int:
    from msprobe.core.fileio import available_memory

    return available_memory()


def check_tensor_bytes(path, shape, nbytes: int) -> None:
    """Refuse a tensor whose decoded size exceeds :data:`MAX_FILE_BYTES` or the memory available now,
    before anything is allocated (a header claiming a 10-GB shape in a small or damaged file)."""
    if nbytes > MAX_FILE_BYTES:
        raise TensorReadError(path, f"its header claims shape {list(shape)} ({nbytes} bytes), over the "
                                    f"{MAX_FILE_BYTES / 1024 ** 3:g} GiB limit; the file is damaged or not a dumped tensor")
    left = _memory_left()
    if nbytes > left:
        raise TensorReadError(path, f"its header claims shape {list(shape)} ({nbytes} bytes) but only {left} bytes "
                                    f"of memory are available; compare it on a machine with more memory")


def _check_npy_header(path, size: int) -> None:
    """Read and check a .npy header without loading the data: the data the header claims must be in the file."""
    fmt = np.lib.format
    try:
        with open(path, "rb") as fh:
            version = fmt.read_magic(fh)
            if version == (1, 0):
                shape, fortran, dtype = fmt.read_array_header_1_0(fh)
            elif version in ((2, 0), (3, 0)):
                shape, fortran, dtype = fmt.read_array_header_2_0(fh)
            else:
                raise TensorReadError(path, f"unsupported .npy format version {version}")
            start = fh.tell()
    except TensorReadError:
        raise
    except OSError as exc:
        raise TensorReadError(path, exc.strerror or str(exc)) from None
    except Exception as exc:  # noqa: BLE001 - numpy raises ValueError, EOFError, SyntaxError, TokenError ...
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise TensorReadError(path, f"not a .npy file or its header is damaged ({first[:200]})") from None
    if dtype.hasobject:
        raise TensorReadError(path, "holds Python objects (pickled data), which msprobe never loads")
    numel = 1
    for dim in shape:
        numel *= dim
    nbytes = numel * dtype.itemsize
    check_tensor_bytes(path, shape, nbytes)
    if start + nbytes > size:
        raise TensorReadError(path, f"is truncated: its header claims shape {list(shape)} {dtype} ({nbytes} bytes) "
                                    f"but the file holds {max(0, size - start)} bytes of data; copy or dump it again")


def load_npy(path) -> np.ndarray:
    """``numpy.load(path, allow_pickle=False)`` with errors turned into :class:`TensorReadError`."""
    path = os.fspath(path)
    size = _check_file(path)
    _check_npy_header(path, size)
    try:
        result = np.load(path, allow_pickle=False)
    except ValueError as exc:
        raise TensorReadError(path, f"not a loadable .npy file ({exc})") from None
    except MemoryError:
        raise TensorReadError(path, "not enough memory to load the array") from None
    except OSError as exc:
        raise TensorReadError(path, exc.strerror or str(exc)) from None
    except Exception as exc:  # noqa: BLE001
        raise TensorReadError(path, f"corrupt .npy file ({type(exc).__name__}: {exc})") from None
    if not isinstance(result, np.ndarray):  # .npz archives load as NpzFile
        if hasattr(result, "close"):
            result.close()
        raise TensorReadError(path, "is not a single-array .npy file")
    return result


def load_tensor(path) -> np.ndarray:
    """Load a dumped tensor file (``.npy`` or ``.pt``) as a numpy array."""
    path = os.fspath(path)
    suffix = os.path.splitext(path)[1].lower()
    if suffix == ".npy":
        return load_npy(path)
    if suffix == ".pt":
        return load_pt(path)
    raise TensorReadError(path, f"unsupported file type {suffix or '(no suffix)'!r}; expected .pt or .npy")
