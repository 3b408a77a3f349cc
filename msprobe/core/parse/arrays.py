"""Arrays for ``parse``: safe loading, a summary, and the ``cn`` element-wise compare.

Files are read by :func:`msprobe.core.io.tensors.load_tensor` (``.npy`` without pickles, ``.pt`` through
the restricted torch-free reader): nothing a file holds can run code.  The cosine similarity is the
``Cosine`` of ``msprobe compare`` (:func:`msprobe.core.compare.tensor.compare_arrays`), so a pair gets the
same figure in both tools.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import List, Optional, Tuple

import numpy as np

from msprobe.core.compare.tensor import compare_arrays
from msprobe.core.errors import MsprobeError
from msprobe.core.fileio import atomic_write, check_path
from msprobe.core.io.tensors import load_tensor

#: rows x values per row of the ``pt`` table
PT_ROWS = 16
PT_COLS = 8


def load_array(path: str, what: str = "file") -> np.ndarray:
    """A ``.npy`` or ``.pt`` file as a numpy array; one-line :class:`MsprobeError` for anything else."""
    if not isinstance(path, str) or not path.strip():
        raise MsprobeError(f"no {what} given")
    path = check_path(path.strip(), what, "file")
    arr = load_tensor(path)  # TensorReadError (an MsprobeError) names the file and the problem
    if arr.dtype.kind not in "biufc":
        raise MsprobeError(f"{what} {path} holds {arr.dtype} data, not a numeric array")
    return arr


def scalar_text(value) -> str:
    """A number as numpy prints it (float32 ``0.4001572``, int ``39``, bool ``True``)."""
    return str(value)


def summary(arr: np.ndarray) -> Tuple[str, str, str, str, str]:
    """(shape, dtype, max, min, mean) as the reference prints them."""
    if arr.size == 0:
        return str(arr.shape), str(arr.dtype), "-", "-", "-"
    with np.errstate(all="ignore"):
        return (str(arr.shape), str(arr.dtype), scalar_text(np.max(arr)), scalar_text(np.min(arr)),
                scalar_text(np.mean(arr)))


def summary_text(arr: np.ndarray) -> str:
    shape, dtype, mx, mn, mean = summary(arr)
    return f"[Shape: {shape}] [Dtype: {dtype}] [Max: {mx}] [Min: {mn}] [Mean: {mean}]"


def head_rows(arr: np.ndarray, rows: int = PT_ROWS, cols: int = PT_COLS) -> List[Tuple[str, str]]:
    """The first ``rows`` x ``cols`` values, ``cols`` per row: [(start index, 'v v v ...')]."""
    flat = arr.reshape(-1)[: rows * cols]
    texts = flat.astype(str)
    return [(str(i), " ".join(texts[i:i + cols].tolist())) for i in range(0, flat.size, cols)]


def save_txt(arr: np.ndarray, path: str) -> Optional[str]:
    """Write ``arr`` as text, one row per last-axis run (``%g``); never replaces a file.

    Returns the path written, or None when ``path`` exists already (the reference keeps the old file too)."""
    if os.path.lexists(path):
        return None
    flat = arr.reshape(-1)
    width = arr.shape[-1] if arr.ndim and arr.shape[-1] else 1
    table = flat.reshape(-1, width) if flat.size else flat.reshape(0, 1)
    fmt = "%s" if arr.dtype.kind == "c" else "%g"
    return atomic_write(path, lambda tmp: np.savetxt(tmp, table, delimiter=" ", fmt=fmt))


@dataclass
class CompareResult:
    total: int
    all_close: bool
    cos_sim: str
    error_ratio: float
    error_count: int
    errors: List[Tuple[str, str, str, str]] = field(default_factory=list)  # (index, left, right, diff)
    top: List[Tuple[str, str, str, str]] = field(default_factory=list)
    warning: Optional[str] = None
    cos_message: str = ""


def _rows(idx: np.ndarray, left: np.ndarray, right: np.ndarray, diff: np.ndarray):
    lt, rt, dt = left[idx].astype(str), right[idx].astype(str), diff[idx].astype(str)
    return [(str(i), a, b, c) for i, a, b, c in zip(idx.tolist(), lt.tolist(), rt.tolist(), dt.tolist())]


def compare(left: np.ndarray, right: np.ndarray, atol: float = 0.001, rtol: float = 0.001,
            count: int = 20) -> CompareResult:
    """``cn``: both arrays as flat float32 (the shorter padded with zeros, as the reference does), then

    * error elements: ``|l - r| > atol + rtol * |r|`` (numpy ``isclose``; a NaN against a number is an
      error, NaN against NaN is not); the first ``count`` go to the Error Item Table;
    * the first ``count`` elements go to the Top Item Table;
    * ``AllClose`` = ``numpy.allclose(l, r, rtol, atol)``; ``ErrorPer`` = error elements / elements;
    * ``CosSim`` = the Cosine of ``msprobe compare`` on the two flat arrays.
    """
    for name, v in (("atol", atol), ("rtol", rtol)):
        if not (isinstance(v, (int, float)) and np.isfinite(v) and v >= 0):
            raise MsprobeError(f"{name} must be a finite number >= 0, not {v!r}")
    if count < 0:
        raise MsprobeError(f"the number of items to print must be >= 0, not {count}")
    warning = None
    if left.shape != right.shape:
        warning = f"shapes differ: {left.shape} vs {right.shape}"
    with np.errstate(all="ignore"):
        lf = left.astype(np.float32).reshape(-1)
        rf = right.astype(np.float32).reshape(-1)
    if lf.size != rf.size:
        n = max(lf.size, rf.size)
        warning += f"; the shorter is padded with zeros to {n} elements"
        lf = np.pad(lf, (0, n - lf.size))
        rf = np.pad(rf, (0, n - rf.size))
    total = int(lf.size)
    if total == 0:
        raise MsprobeError("both arrays are empty; nothing to compare")
    with np.errstate(all="ignore"):
        diff = np.abs(lf - rf)
        bad = ~np.isclose(lf, rf, rtol=rtol, atol=atol, equal_nan=True)
        all_close = bool(np.allclose(lf, rf, rtol=rtol, atol=atol))
    err_idx = np.flatnonzero(bad)
    cos, *_rest, message = compare_arrays(lf, rf)
    cos_text = str(np.float32(cos)) if isinstance(cos, float) else str(cos)
    return CompareResult(
        total=total,
        all_close=all_close,
        cos_sim=cos_text,
        error_ratio=float(err_idx.size / total),
        error_count=int(err_idx.size),
        errors=_rows(err_idx[:count], lf, rf, diff),
        top=_rows(np.arange(min(count, total)), lf, rf, diff),
        warning=warning,
        cos_message=message if isinstance(cos, str) else "",
    )
