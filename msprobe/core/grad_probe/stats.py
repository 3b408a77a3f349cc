"""The grad_probe statistics format (framework-free): ``grad_summary_{step}.csv`` headers and rows.

Layout (spec checks_and_monitors.md 3.1-3.2, the reference's PyTorch and MindSpore PyNative writers)::

    {dump_path}/rank{R}/grad_summary_{step}.csv        one row per recorded parameter
    {dump_path}/rank{R}/step{step}/{param_name}.npy    L1/L2: bool array of the gradient's shape, True where > 0

CSV: UTF-8 with a BOM, ``\\r\\n`` line ends (Python's csv module), values as Python writes them
(``repr`` of floats, ``[16, 8]`` for shapes).  Columns after ``param_name``:

* L0: ``MD5`` (CRC-32 of the gradient's float32 bytes, 8 hex digits, as 8.x writes it), max, min, norm, shape
* L1: max, min, norm, shape
* L2: one column per bounds interval ``(-inf, b0]``, ``(b0, b1]`` ... ``(bk, inf)``, then ``=0``, max, min,
  norm, shape; each interval value is the fraction of elements in it (a value equal to a bound belongs to
  the interval that bound closes); ``=0`` is the fraction of exact zeros (also counted in their interval).

The framework adapters compute, per recorded parameter, one row of numbers: ``max, min, norm`` (float32
values) and at L2 the ``len(bounds) + 1`` interval counts and the zero count.  They hand the whole step
over as one ``(P, columns)`` float64 array; this module turns it into CSV rows without a per-element loop.
"""
from __future__ import annotations

import csv
import io
from typing import List, Optional, Sequence

import numpy as np

LEVELS = ("L0", "L1", "L2")
SUMMARY_PREFIX = "grad_summary_"
STEP_PREFIX = "step"
RANK_PREFIX = "rank"
NAME_COLUMN = "param_name"
#: the MindSpore graph-mode writer of the reference capitalises these (Param_name, Max, Min, Norm, Shape)
NAME_COLUMNS = ("param_name", "Param_name")


def has_md5(level: str) -> bool:
    return level == "L0"


def has_direction(level: str) -> bool:
    return level in ("L1", "L2")


def has_distribution(level: str) -> bool:
    return level == "L2"


def interval_names(bounds: Sequence) -> List[str]:
    """``(-inf, b0]``, ``(b0, b1]``, ..., ``(bk, inf)`` with the bounds as Python prints them."""
    if not bounds:
        return []
    out = [f"(-inf, {bounds[0]}]"]
    out += [f"({lo}, {hi}]" for lo, hi in zip(bounds[:-1], bounds[1:])]
    out.append(f"({bounds[-1]}, inf)")
    return out


def csv_header(level: str, bounds: Sequence) -> List[str]:
    head = [NAME_COLUMN]
    if has_md5(level):
        head.append("MD5")
    if has_distribution(level):
        head += interval_names(bounds) + ["=0"]
    return head + ["max", "min", "norm", "shape"]


def number_columns(level: str, bounds: Sequence) -> int:
    """How many numbers an adapter computes per parameter: max, min, norm (+ interval counts and zeros at L2).
    With empty bounds L2 has only the ``=0`` column (there are no intervals)."""
    if not has_distribution(level):
        return 3
    return 3 + (len(bounds) + 1 if bounds else 0) + 1


def summary_rows(level: str, bounds: Sequence, names: Sequence[str], shapes: Sequence[Sequence[int]],
                 numbers: np.ndarray, md5s: Optional[Sequence[str]] = None) -> List[list]:
    """The CSV rows (header first) of one step.  ``numbers``: ``(P, number_columns)`` as described above."""
    rows: List[list] = [csv_header(level, bounds)]
    if not len(names):
        return rows
    numbers = np.asarray(numbers, dtype=np.float64).reshape(len(names), -1)
    stats = numbers[:, :3].tolist()
    dist = None
    if has_distribution(level):
        numel = np.array([int(np.prod(s, dtype=np.int64)) for s in shapes], dtype=np.float64)
        counts = numbers[:, 3:]
        with np.errstate(divide="ignore", invalid="ignore"):
            frac = np.where(numel[:, None] > 0, counts / np.where(numel > 0, numel, 1.0)[:, None], 0.0)
        dist = frac.tolist()
    for i, name in enumerate(names):
        row = [name]
        if md5s is not None and has_md5(level):
            row.append(md5s[i])
        if dist is not None:
            row += dist[i]
        row += stats[i]
        row.append(list(shapes[i]))
        rows.append(row)
    return rows


def csv_bytes(rows: List[list]) -> bytes:
    """The rows as the reference writes CSV files: UTF-8 with a BOM, csv-module quoting, ``\\r\\n``."""
    buf = io.StringIO()
    csv.writer(buf).writerows(rows)
    return buf.getvalue().encode("utf-8-sig")


def read_summary(path: str) -> List[list]:
    """The rows of a grad_summary csv (header first), as strings."""
    with open(path, "r", encoding="utf-8-sig", newline="") as fh:
        return [row for row in csv.reader(fh)]


def summary_step(file_name: str) -> Optional[int]:
    """``grad_summary_12.csv`` -> 12 (None for other names)."""
    if not (file_name.startswith(SUMMARY_PREFIX) and file_name.endswith(".csv")):
        return None
    core = file_name[len(SUMMARY_PREFIX):-4]
    return int(core) if core.isdigit() else None


def compute_flat(level: str, bounds: Sequence, flat: np.ndarray, sizes: Sequence[int]):
    """A step's numbers from all gradients concatenated on the host (float32, one array), vectorised.

    For frameworks whose per-op cost dominates on the CPU (MindSpore PyNative): one concatenation and one
    transfer, then numpy reductions over the segments (``reduceat``), no per-parameter loop.  Returns
    ``(numbers, md5s or None, flat directions or None)``; ``numbers`` as :func:`summary_rows` takes them.
    """
    sizes = np.asarray(sizes, dtype=np.int64)
    p = len(sizes)
    ncols = number_columns(level, bounds)
    numbers = np.full((p, ncols), np.nan, dtype=np.float64)
    starts = np.concatenate(([0], np.cumsum(sizes)[:-1])) if p else np.zeros(0, dtype=np.int64)
    full = sizes > 0
    numbers[~full, 2] = 0.0            # an empty gradient: max/min nan (no values), norm 0
    if full.any():
        idx = starts[full]
        numbers[full, 0] = np.maximum.reduceat(flat, idx).astype(np.float32)
        numbers[full, 1] = np.minimum.reduceat(flat, idx).astype(np.float32)
        sq = np.square(flat, dtype=np.float64)
        numbers[full, 2] = np.sqrt(np.add.reduceat(sq, idx)).astype(np.float32)
    if has_distribution(level):
        seg = np.repeat(np.arange(p), sizes)
        col = 3
        if bounds:
            nb = len(bounds) + 1
            bucket = np.searchsorted(np.asarray(bounds, dtype=np.float32), flat, side="left")
            numbers[:, col:col + nb] = np.bincount(seg * nb + bucket, minlength=p * nb).reshape(p, nb)
            col += nb
        numbers[:, col] = np.bincount(seg, weights=(flat == 0), minlength=p)
    md5s = None
    if has_md5(level):
        from msprobe.core.crc import crc32_hex
        md5s = [crc32_hex(memoryview(flat[s:s + n])) for s, n in zip(starts.tolist(), sizes.tolist())]
    directions = flat > 0 if has_direction(level) else None
    return numbers, md5s, directions
