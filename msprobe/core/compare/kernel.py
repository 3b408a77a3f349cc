"""MindSpore static-graph (kernel) dump compare (compare.md §1.4.4).

MindSpore's own dump writes, per rank and iteration, a directory of ``.npy`` files (one per kernel
input/output) or one ``statistic.csv``.  Both runs are walked, their lowest-level directories are
paired by (rank, step), and each pair gives ``compare_result_{rank}_{step}_{ts}.xlsx`` (or ``.csv``):

* npy mode: the real-data metrics (Cosine, EucDist, MaxAbsErr, MaxRelativeErr, the two error ratios)
  plus each side's max/min/mean/l2norm;
* statistic mode: the csv's statistics side by side with their differences.

Rows pair by (kernel key, occurrence): the key is ``op_name.task_id.{input|output}[.i].slot`` and the
occurrence counts earlier rows of the same key in timestamp order (a kernel launched several times).
"""

from __future__ import annotations

import csv
import logging
import math
import os
import re
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from msprobe.core.compare import tensor as tm
from msprobe.core.errors import MsprobeError
from msprobe.core.fileio import atomic_write, check_path, ensure_output_dir, unique_path
from msprobe.core.io.tensors import TensorReadError, load_npy

log = logging.getLogger("msprobe")

NA = "N/A"
MAX_WALK_DEPTH = 400
NPY_RE = re.compile(
    r"^([^.]+)\.([^.]+)\.([^.]+)\.([^.]+)\.(\d+(?:\.\d+)*)\.((?:in|out)put(?:\.\d+)*)\.([^.]+)\.([^.]+)\.npy$"
)
STAT_COLUMNS = ("Data Type", "Shape", "Max Value", "Min Value", "Avg Value", "L2Norm Value")
MIN_STAT_FIELDS = 13

MSG_NOT_FOUND = "Dump file not found."
MSG_SCALAR = "This is type of scalar data, can not compare."
MSG_SHAPE = "Tensor shapes do not match."
MSG_DTYPE = "Dtype of NPU and bench Tensor do not match. Skipped."
MSG_EMPTY = "This is empty data, can not compare."

BASE_HEADER = ["NPU Name", "Bench Name", "NPU Dtype", "Bench Dtype", "NPU Tensor Shape", "Bench Tensor Shape",
               "NPU max", "NPU min", "NPU mean", "NPU l2norm", "Bench max", "Bench min", "Bench mean", "Bench l2norm",
               "Accuracy Reached or Not", "Err_message"]
NPY_HEADER = ["Cosine", "EucDist", "MaxAbsErr", "MaxRelativeErr", "One Thousandth Err Ratio", "Five Thousandths Err Ratio"]
STAT_HEADER = ["Max diff", "Min diff", "Mean diff", "L2norm diff", "MaxRelativeErr", "MinRelativeErr",
               "MeanRelativeErr", "NormRelativeErr", "NPU CSV File", "Bench CSV File"]


@dataclass
class KernelRow:
    key: str
    timestamp: int
    name: str  # full npy path, or the key for statistic rows
    dtype: str = NA
    shape: str = NA
    stats: Tuple = (NA, NA, NA, NA)  # max, min, mean, l2norm
    source: str = ""  # npy path or statistic.csv path


# ---------------------------------------------------------------------------------------------- layout

def leaf_dirs(root: str) -> List[str]:
    """Directories under ``root`` (itself included) that have no sub-directory; iterative, depth-limited."""
    out = []
    stack = [(root, 0)]
    while stack:
        d, depth = stack.pop()
        try:
            entries = list(os.scandir(d))
        except OSError:
            continue
        subs = sorted(e.path for e in entries if e.is_dir(follow_symlinks=False))
        if not subs:
            out.append(d)
        elif depth < MAX_WALK_DEPTH:
            stack.extend((s, depth + 1) for s in reversed(subs))
    return sorted(out)


def rank_step(path: str) -> Optional[Tuple[int, int]]:
    """(rank, step) of a leaf dir: ``rank_{id}/{net}/{graph}/{iter}`` or ``{rank}/{net}/{graph}/{iter}``."""
    comps = os.path.normpath(path).split(os.sep)
    if len(comps) < 4:
        return None
    try:
        step = int(comps[-1])
    except ValueError:
        return None
    if "rank_" in path:
        try:
            return int(comps[-4].rsplit("_", 1)[-1]), step
        except ValueError:
            return None
    for c in (comps[-4], comps[-3]):
        try:
            return int(c), step
        except ValueError:
            continue
    return None


def _mapping(d: str) -> Dict[str, str]:
    """mapping.csv: short file names -> the long kernel names MindSpore could not use as file names."""
    p = os.path.join(d, "mapping.csv")
    if not os.path.isfile(p):
        return {}
    out = {}
    with open(p, newline="", encoding="utf-8", errors="replace") as fh:
        for row in csv.reader(fh):
            if len(row) >= 2:
                out[row[0]] = row[1]
    return out


def read_npy_dir(d: str) -> List[KernelRow]:
    names = _mapping(d)
    rows = []
    for fname in sorted(os.listdir(d)):
        if not fname.endswith(".npy"):
            continue
        m = NPY_RE.match(names.get(fname, fname))
        if not m:
            log.warning("kernel dump %s: %s is not named op_type.op_name.task.stream.timestamp.io.slot.format.npy; skipped",
                        d, fname)
            continue
        key = f"{m.group(2)}.{m.group(3)}.{m.group(6)}.{m.group(7)}"
        rows.append(KernelRow(key, int(m.group(5).split(".")[0]), os.path.join(d, fname), source=os.path.join(d, fname)))
    return rows


def _stat_value(text: str):
    t = text.strip()
    if t in ("null", "False"):
        return 0.0
    if t == "True":
        return 1.0
    try:
        return float(np.float32(float(t)))
    except ValueError:
        return NA


def read_statistic_csv(d: str) -> List[KernelRow]:
    path = os.path.join(d, "statistic.csv")
    try:
        return _read_statistic_csv(path)
    except csv.Error as exc:  # a NUL byte, a field over the csv module's size limit, an open quote
        raise MsprobeError(f"kernel dump {path} is not a readable csv ({exc}); the file is damaged: re-run the dump")
    except OSError as exc:
        raise MsprobeError(f"kernel dump {path} cannot be read ({exc.strerror or exc}); check the file")


def _read_statistic_csv(path: str) -> List[KernelRow]:
    with open(path, newline="", encoding="utf-8", errors="replace") as fh:
        reader = csv.reader(fh)
        header = next(reader, None)
        if not header:
            raise MsprobeError(f"kernel dump {path} is empty; re-run the dump")
        try:
            cols = [header.index(c) for c in STAT_COLUMNS]
        except ValueError:
            missing = [c for c in STAT_COLUMNS if c not in header]
            raise MsprobeError(f"kernel dump {path} has no column {missing[0]!r}; this is not MindSpore's statistic.csv")
        rows = []
        for n, rec in enumerate(reader, 2):
            if not rec:
                continue
            if len(rec) < MIN_STAT_FIELDS:
                raise MsprobeError(f"Dump file {path} has been modified into incorrect format! (line {n} has {len(rec)} "
                                   f"fields, at least {MIN_STAT_FIELDS} expected)")
            try:
                ts = int(rec[4])
            except ValueError:
                raise MsprobeError(f"kernel dump {path} line {n}: timestamp {rec[4]!r} is not a number; the file is damaged")
            dtype, shape = rec[cols[0]], rec[cols[1]]
            stats = tuple(_stat_value(rec[c]) for c in cols[2:])
            key = f"{rec[1]}.{rec[2]}.{rec[5]}.{rec[6]}"
            rows.append(KernelRow(key, ts, key, dtype, shape, stats, path))
    return rows


def dir_mode(d: str) -> Optional[str]:
    names = os.listdir(d)
    if any(n.endswith(".npy") for n in names):
        return "npy"
    if "statistic.csv" in names:
        return "statistic"
    return None


# ---------------------------------------------------------------------------------------------- pairing

def _with_index(rows: List[KernelRow]) -> Dict[Tuple[str, int], KernelRow]:
    out: Dict[Tuple[str, int], KernelRow] = {}
    seen: Dict[str, int] = {}
    for r in sorted(rows, key=lambda r: r.timestamp):
        k = seen.get(r.key, 0)
        seen[r.key] = k + 1
        out[(r.key, k)] = r
    return out


def pair_rows(npu: List[KernelRow], bench: List[KernelRow]) -> List[Tuple[Optional[KernelRow], Optional[KernelRow]]]:
    """Outer join on (key, occurrence): NPU rows in timestamp order, then bench-only rows."""
    n_idx, b_idx = _with_index(npu), _with_index(bench)
    out = [(r, b_idx.get(k)) for k, r in n_idx.items()]
    out.extend((None, r) for k, r in b_idx.items() if k not in n_idx)
    return out


# ---------------------------------------------------------------------------------------------- metrics

def _array_stats(a: np.ndarray) -> Tuple:
    if a.size == 0 or a.dtype.kind not in "biuf":
        return (NA, NA, NA, NA)
    x = a.astype(np.float64, copy=False)
    return (float(x.max()), float(x.min()), float(x.mean()), float(np.sqrt(np.sum(x * x))))


def _npy_row(n: Optional[KernelRow], b: Optional[KernelRow]) -> list:
    arrays = []
    for r in (n, b):
        if r is None:
            arrays.append(None)
            continue
        try:
            arrays.append(load_npy(r.source))
        except TensorReadError as exc:  # damaged, truncated, a header claiming a huge shape: that row only
            log.warning("%s", exc)
            arrays.append(None)
    na, ba = arrays
    metrics: List = [NA] * 6
    msg = ""
    computed = False
    if na is None or ba is None:
        msg = MSG_NOT_FOUND
    elif na.size == 0 or ba.size == 0:
        msg = MSG_EMPTY
    elif na.shape == () or ba.shape == ():
        msg = MSG_SCALAR
    elif na.shape != ba.shape:
        msg = MSG_SHAPE
    elif na.dtype != ba.dtype:
        msg = MSG_DTYPE
    else:
        res = tm.compare_arrays(na, ba)
        metrics, msg = list(res[:6]), res[6]
        computed = True
    acc = tm.check_accuracy(metrics[0], metrics[2]) if computed else "No"
    n_stats = _array_stats(na) if na is not None else (NA,) * 4
    b_stats = _array_stats(ba) if ba is not None else (NA,) * 4
    return [
        n.name if n else NA, b.name if b else NA,
        str(na.dtype) if na is not None else NA, str(ba.dtype) if ba is not None else NA,
        str(list(na.shape)) if na is not None else NA, str(list(ba.shape)) if ba is not None else NA,
        *n_stats, *b_stats, acc, msg, *metrics,
    ]


def _rel(diff, bench) -> str:
    if diff == NA or bench == NA:
        return NA
    if bench == 0:
        return NA
    v = abs(diff / bench * 100)
    return "Nan" if math.isnan(v) else f"{v}%"


def _stat_row(n: Optional[KernelRow], b: Optional[KernelRow]) -> list:
    n_stats = n.stats if n else (NA,) * 4
    b_stats = b.stats if b else (NA,) * 4
    msg = ""
    if n is None or b is None:
        msg = MSG_NOT_FOUND
    elif n.shape.strip() in ("", "()", "[]"):
        msg = MSG_SCALAR
    elif n.shape != b.shape:
        msg = MSG_SHAPE
    elif n.dtype != b.dtype:
        msg = MSG_DTYPE
    diffs: List = [NA] * 4
    rels: List = [NA] * 4
    acc = "No"
    if not msg:
        diffs = [float(np.float32(x) - np.float32(y)) if NA not in (x, y) else NA for x, y in zip(n_stats, b_stats)]
        rels = [_rel(d, y) for d, y in zip(diffs, b_stats)]
        nmax, bmax = n_stats[0], b_stats[0]
        if NA not in (nmax, bmax):
            if math.isnan(nmax) and math.isnan(bmax):
                acc = "Yes"
            else:
                acc = "Yes" if diffs[0] != NA and diffs[0] / (max(nmax, bmax) + 1e-10) <= 0.5 else "No"
    return [
        n.name if n else NA, b.name if b else NA, n.dtype if n else NA, b.dtype if b else NA,
        n.shape if n else NA, b.shape if b else NA, *n_stats, *b_stats, acc, msg, *diffs, *rels,
        n.source if n else NA, b.source if b else NA,
    ]


# ---------------------------------------------------------------------------------------------- driver

@dataclass(frozen=True)
class KernelJob:
    rank: int
    step: int
    npu_dir: str
    bench_dir: str
    mode: str


def parse_id_list(text: Optional[str], what: str) -> Optional[List[int]]:
    """'0,1' -> [0, 1]; '' -> [] (all); None -> None."""
    if text is None:
        return None
    if isinstance(text, list):
        items = text
    else:
        items = [p for p in str(text).replace(" ", "").split(",") if p]
    out = []
    for p in items:
        if isinstance(p, bool) or not (isinstance(p, int) or (isinstance(p, str) and p.isdigit())):
            raise MsprobeError(f"{what} must be a list of non-negative integers such as 0,1; got {p!r}")
        out.append(int(p))
    return out


def plan_kernel(npu_root: str, bench_root: str, ranks: Sequence[int], steps: Sequence[int]) -> List[KernelJob]:
    npu_root = check_path(npu_root, "target kernel dump dir", "dir")
    bench_root = check_path(bench_root, "golden kernel dump dir", "dir")
    sides = []
    for root, side in ((npu_root, "target"), (bench_root, "golden")):
        found: Dict[Tuple[int, int], str] = {}
        for d in leaf_dirs(root):
            rs = rank_step(d)
            if rs is None or (ranks and rs[0] not in ranks) or (steps and rs[1] not in steps):
                continue
            found.setdefault(rs, d)
        if not found:
            sel = f" for rank {list(ranks) or 'any'} step {list(steps) or 'any'}"
            raise MsprobeError(f"{side} path {root} has no MindSpore kernel dump dirs ({{rank}}/{{net}}/{{graph}}/{{iter}} "
                               f"holding .npy files or statistic.csv){sel}; check the path and --rank/--step")
        sides.append(found)
    common = sorted(set(sides[0]) & set(sides[1]))
    if not common:
        raise MsprobeError(f"the target and golden kernel dumps share no (rank, step): target has "
                           f"{sorted(sides[0])[:6]}, golden has {sorted(sides[1])[:6]}")
    jobs = []
    for rs in common:
        nd, bd = sides[0][rs], sides[1][rs]
        nm, bm = dir_mode(nd), dir_mode(bd)
        if nm is None or bm is None:
            log.warning("rank %d step %d: %s holds neither .npy files nor statistic.csv; skipped", rs[0], rs[1],
                        nd if nm is None else bd)
            continue
        if nm != bm:
            log.error("rank %d step %d: the target dump is %s data but the golden is %s data; skipped", rs[0], rs[1], nm, bm)
            continue
        jobs.append(KernelJob(rs[0], rs[1], nd, bd, nm))
    if not jobs:
        raise MsprobeError("no (rank, step) pair of the kernel dumps could be compared (see the messages above)")
    return jobs


def compare_kernel_job(job: KernelJob) -> Tuple[List[str], List[list]]:
    if job.mode == "npy":
        pairs = pair_rows(read_npy_dir(job.npu_dir), read_npy_dir(job.bench_dir))
        rows = [_npy_row(n, b) for n, b in pairs]
        header = BASE_HEADER + NPY_HEADER
    else:
        pairs = pair_rows(read_statistic_csv(job.npu_dir), read_statistic_csv(job.bench_dir))
        rows = [_stat_row(n, b) for n, b in pairs]
        header = BASE_HEADER + STAT_HEADER
    columns = [list(c) for c in zip(*rows)] if rows else [[] for _ in header]
    return header, columns


def run_kernel_compare(npu_root: str, bench_root: str, output_dir: str, ranks: Sequence[int], steps: Sequence[int],
                       fmt: str = "xlsx", ts: Optional[str] = None) -> List[Tuple[KernelJob, str, int]]:
    """Compare every (rank, step); returns (job, report path, rows) per report written."""
    import time

    jobs = plan_kernel(npu_root, bench_root, ranks, steps)
    out_dir = ensure_output_dir(output_dir)
    ts = ts or time.strftime("%Y%m%d%H%M%S")
    written = []
    for job in jobs:
        header, columns = compare_kernel_job(job)
        path = unique_path(os.path.join(out_dir, f"compare_result_{job.rank}_{job.step}_{ts}.{fmt}"))
        if fmt == "csv":
            from msprobe.core.io.csvfile import write_csv

            path = atomic_write(path, lambda tmp: write_csv(tmp, header, columns))
        else:
            from msprobe.core.io.xlsx import RELATIVE_ERROR_COLUMNS, write_xlsx

            path = atomic_write(path, lambda tmp: write_xlsx(tmp, header, columns, percent_columns=RELATIVE_ERROR_COLUMNS))
        written.append((job, path, len(columns[0]) if columns else 0))
    return written
