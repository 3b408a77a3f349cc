"""Real-data (tensor mode) metrics: Cosine, EucDist, MaxAbsErr, MaxRelativeErr and the two error
ratios, with the reference's validation chain and messages (compare.md §4.3-4.4, G8 order).

Pairs are loaded and compared in worker processes, each returning only the seven result cells.
"""

from __future__ import annotations

import math
import os
import threading
from typing import Callable, List, Optional, Sequence, Tuple

import numpy as np

UNSUPPORTED = "unsupported"
NA = "N/A"
NAN_TEXT = "Nan"
EPS64 = float(np.finfo(np.float64).eps)
FLOAT_DTYPES = (np.float16, np.float32, np.float64)

MSG_NO_NPU_FILE = "NPU does not have data file."
MSG_NO_BENCH_FILE = "Bench does not have data file."
MSG_EMPTY = "This is empty data, can not compare."
MSG_ZERO_D = (
    "This is type of 0-d tensor, can not calculate 'Cosine', 'EucDist', 'One Thousandth Err Ratio' and "
    "'Five Thousandths Err Ratio'. "
)
MSG_SHAPE = "Shape of NPU and bench tensor do not match. Skipped."
MSG_NAN_POS = "The position of inf or nan in NPU and bench Tensor do not match."
MSG_UNREADABLE = "Data is unreadable."
MSG_DTYPE = "Dtype of NPU and bench tensor do not match."
MSG_LEN1 = "This is a 1-d tensor of length 1."
MSG_COS_NPU_ZERO = "Cannot compare by Cosine Similarity, All the data is Zero in npu dump data."
MSG_COS_BENCH_ZERO = "Cannot compare by Cosine Similarity, All the data is Zero in Bench dump data."
MSG_COS_NAN = "Cannot compare by Cosine Similarity, the dump data has NaN."
MSG_MAXABS_NAN = "Cannot compare by MaxAbsError, the data contains nan/inf/-inf in dump data."
MSG_MAXREL_NAN = "Cannot compare by MaxRelativeError, the data contains nan/inf/-inf in dump data."

# result tuple: (cosine, eucdist, max_abs, max_rel, one_thousandth, five_thousandths, message)
Metrics = Tuple[object, object, object, object, object, object, str]


def format_value(x: float) -> float:
    return float("{:.12f}".format(x))


def _all(value) -> Metrics:
    return (value,) * 6 + ("",)


CHUNK = 1 << 15  # elements per block: the float64 temporaries of a block stay in the CPU cache


class _Workspace(threading.local):
    """Per-thread scratch buffers for one block, so the kernel allocates nothing per block."""

    def get(self, name: str, dtype, size: int) -> np.ndarray:
        key = (name, np.dtype(dtype).str)
        buf = self.__dict__.get(key)
        if buf is None or buf.size < size:
            buf = np.empty(max(size, CHUNK), dtype=dtype)
            self.__dict__[key] = buf
        return buf[:size]


_ws = _Workspace()


def _block_sums(nc: np.ndarray, bc: np.ndarray):
    """Partial results of one block of the flattened arrays, or None when the NaN/inf positions differ.

    Returns (max_abs, max_rel, below_0.001, below_0.005, d.d, n.n, b.b, n.b).  Blocks are assumed finite
    first; a non-finite dot product sends the block through the NaN/inf handling of the reference.
    """
    k = nc.size
    nf = _ws.get("nf", np.float64, k)
    bf = _ws.get("bf", np.float64, k)
    d = _ws.get("d", np.float64, k)
    np.copyto(nf, nc, casting="unsafe")
    np.copyto(bf, bc, casting="unsafe")
    nn2 = float(np.dot(nf, nf))
    bb2 = float(np.dot(bf, bf))
    if not (math.isfinite(nn2) and math.isfinite(bb2)):
        n_bad = ~np.isfinite(nc)
        b_bad = ~np.isfinite(bc)
        if n_bad.any() or b_bad.any():
            if not (np.array_equal(np.isinf(nc), np.isinf(bc)) and np.array_equal(np.isnan(nc), np.isnan(bc))):
                return None
            nc = np.where(n_bad, nc.dtype.type(0), nc)
            bc = np.where(b_bad, bc.dtype.type(0), bc)
            np.copyto(nf, nc, casting="unsafe")
            np.copyto(bf, bc, casting="unsafe")
            nn2 = float(np.dot(nf, nf))
            bb2 = float(np.dot(bf, bf))
    nb = float(np.dot(nf, bf))
    np.subtract(nf, bf, out=d)
    dd = float(np.dot(d, d))
    np.abs(d, out=d)
    max_abs = d.max()
    # relative error in the arrays' own precision (G8: only a non-float bench casts both to float64);
    # zeros in the bench get float64 eps added on both sides
    if bc.dtype.type not in FLOAT_DTYPES:
        rn, rb = nf, bf
    else:
        rn, rb = nc, bc
    zero = np.equal(rb, 0, out=_ws.get("mask", np.bool_, k))
    if zero.any():
        rn = np.array(rn, copy=True)
        rb = np.array(rb, copy=True)
        rn[zero] += EPS64
        rb[zero] += EPS64
    rel = _ws.get("rel", np.result_type(rn, rb), k)
    with np.errstate(all="ignore"):
        np.subtract(rn, rb, out=rel)
        np.divide(rel, rb, out=rel)
    np.abs(rel, out=rel)
    mask = _ws.get("mask", np.bool_, k)
    c1 = np.count_nonzero(np.less(rel, 0.001, out=mask))
    c5 = np.count_nonzero(np.less(rel, 0.005, out=mask))
    return (max_abs, rel.max(), c1, c5, dd, nn2, bb2, nb)


def _zero_d(n: np.ndarray, b: np.ndarray) -> Metrics:
    """0-d NPU tensor: only MaxAbsErr and MaxRelativeErr (broadcast against the bench)."""
    msgs = [MSG_ZERO_D]
    if n.dtype != b.dtype:
        msgs.append(MSG_DTYPE)
    if b.dtype.type not in FLOAT_DTYPES:
        rn, rb = n.astype(np.float64), b.astype(np.float64)
    else:
        rn, rb = n, b
    zero = rb == 0
    if np.any(zero):
        rn = np.array(rn, copy=True)
        rb = np.array(rb, copy=True)
        rn[zero] += EPS64
        rb[zero] += EPS64
    with np.errstate(all="ignore"):
        rel = np.abs((rn - rb) / rb)
        max_abs_raw = float(np.max(np.abs(n.astype(np.float64) - b.reshape(-1).astype(np.float64))))
        max_rel_raw = float(np.max(rel))
    return (UNSUPPORTED, UNSUPPORTED) + _max_errs(max_abs_raw, max_rel_raw, msgs) + (UNSUPPORTED, UNSUPPORTED, "".join(msgs))


def _max_errs(max_abs_raw: float, max_rel_raw: float, msgs: List[str]) -> tuple:
    if max_abs_raw != max_abs_raw:
        max_abs = NAN_TEXT
        msgs.append(MSG_MAXABS_NAN)
    else:
        max_abs = format_value(max_abs_raw)
    if max_rel_raw != max_rel_raw:
        max_rel = NAN_TEXT
        msgs.append(MSG_MAXREL_NAN)
    else:
        max_rel = format_value(max_rel_raw)
    return max_abs, max_rel


def compare_arrays(n: np.ndarray, b: np.ndarray) -> Metrics:
    """Metrics of one NPU/bench array pair (G8 semantics; the 0-d message is written once).

    Big arrays are processed block by block, so every pass runs over cache-resident data and no
    full-size float64 copy is ever made; sums are accumulated per block.
    """
    if n.size == 0:
        return (UNSUPPORTED,) * 6 + (MSG_EMPTY,)
    if n.shape == ():
        return _zero_d(n, b)
    if n.shape != b.shape:
        return ("shape unmatched",) * 6 + (MSG_SHAPE,)
    if n.dtype.kind not in "biufc" or b.dtype.kind not in "biufc":
        return ("unreadable data",) * 6 + (MSG_UNREADABLE,)
    msgs: List[str] = []
    if n.dtype != b.dtype:
        msgs.append(MSG_DTYPE)
    nflat = n.reshape(-1)
    bflat = b.reshape(-1)
    size = nflat.size
    parts = []
    for start in range(0, size, CHUNK):
        part = _block_sums(nflat[start:start + CHUNK], bflat[start:start + CHUNK])
        if part is None:
            return (NA,) * 6 + (MSG_NAN_POS,)
        parts.append(part)
    if len(parts) == 1:
        max_abs_raw, max_rel_raw, c1, c5, dd, nn2, bb2, nb = parts[0]
    else:
        cols = list(zip(*parts))
        max_abs_raw = np.max(cols[0])
        max_rel_raw = np.max(cols[1])
        c1, c5 = sum(cols[2]), sum(cols[3])
        dd, nn2, bb2, nb = (math.fsum(c) for c in cols[4:])
    if size == 1:
        cos = UNSUPPORTED
        msgs.append(MSG_LEN1)
    else:
        nn = math.sqrt(nn2)
        bb = math.sqrt(bb2)
        if nn <= EPS64 and bb <= EPS64:
            cos = 1.0
        elif nn <= EPS64:
            cos = NAN_TEXT
            msgs.append(MSG_COS_NPU_ZERO)
        elif bb <= EPS64:
            cos = NAN_TEXT
            msgs.append(MSG_COS_BENCH_ZERO)
        else:
            c = nb / (nn * bb)
            if c != c:
                cos = NAN_TEXT
                msgs.append(MSG_COS_NAN)
            else:
                cos = format_value(c)
                if cos > 0.9999:
                    cos = round(cos, 6)
    euc = math.sqrt(dd)
    one = format_value(c1 / size)
    five = format_value(c5 / size)
    max_abs, max_rel = _max_errs(float(max_abs_raw), float(max_rel_raw), msgs)
    # the reference concatenates messages without separators (each ends with '.' or '. ')
    return (cos, euc, max_abs, max_rel, one, five, "".join(msgs))


def check_accuracy(cos, max_abs) -> str:
    """Accuracy Reached or Not (§4.4.4)."""
    if cos == "shape unmatched":
        return "Unmatched"
    if cos == "None" or max_abs == "None":
        return "None"
    if cos == NA or max_abs == NA:
        return "No"
    try:
        c = float(cos)
        m = float(max_abs)
    except (TypeError, ValueError):
        return "None"
    if c < 0.99 and m > 0.001:
        return "No"
    if c < 0.9 or m > 1:
        return "No"
    return "Yes"


def compare_pair(npu_path: Optional[str], bench_path: Optional[str], loader: Callable[[str], np.ndarray]) -> Metrics:
    """Load two tensor files and compare them; read failures become a row message, never an exception."""
    try:
        n = loader(npu_path)
        b = loader(bench_path)
    except Exception:  # noqa: BLE001 - any read failure is reported on the row
        names = ", ".join(os.path.basename(p) for p in (npu_path, bench_path) if p)
        return ("No data",) * 4 + (UNSUPPORTED,) * 2 + (f"Dump file: {names} not found or read failed.",)
    try:
        return compare_arrays(n, b)
    except (TypeError, ValueError) as exc:
        return ("unreadable data",) * 6 + (f"{MSG_UNREADABLE} ({exc})",)


def _compare_chunk(pairs: Sequence[Tuple[str, str]], loader: Callable[[str], np.ndarray]) -> List[Metrics]:
    return [compare_pair(p[0], p[1], loader) for p in pairs]


def compare_chunk_task(loader: Callable[[str], np.ndarray], fallback, pairs: Sequence[Tuple[str, str]],
                       _emit=None) -> List[Metrics]:
    """A Ray task (msprobe.core.executor): one chunk of tensor pairs, read where they lie. ``fallback``: the
    loader of formats the fast reader does not know, registered on the driver (msprobe.core.io.tensors)."""
    from msprobe.core.io import tensors

    if fallback is not None:
        tensors.register_fallback(fallback)
    return _compare_chunk(pairs, loader)


RAY_CHUNK = 1024  # tensor pairs per Ray task of a big tensor-mode rank (a smaller rank stays one task)


def compare_files(
    pairs: Sequence[Tuple[str, str]],
    loader: Callable[[str], np.ndarray],
    jobs: int = 0,
    progress: Optional[Callable[[int], None]] = None,
    backend: Optional[str] = None,
) -> List[Metrics]:
    """Compare many (npu_path, bench_path) pairs; results in input order.

    Pairs are split into contiguous chunks and compared in forked worker processes (one per core by
    default): per-block numpy calls hold the GIL, so threads would not scale.  In a worker process (a
    rank of a multi-rank compare) or with one job, pairs are compared in this process.  With a Ray
    ``backend`` (--ray), a rank of more than :data:`RAY_CHUNK` pairs is split into Ray tasks of that many
    pairs (from inside the rank's own Ray task), wherever it runs.
    """
    from msprobe.core.executor import in_worker, is_ray, run_tasks

    if not pairs:
        return []
    if is_ray(backend) and len(pairs) > RAY_CHUNK:
        import functools

        from msprobe.core.io import tensors

        chunks = [pairs[a:a + RAY_CHUNK] for a in range(0, len(pairs), RAY_CHUNK)]
        task = functools.partial(compare_chunk_task, loader, getattr(tensors, "_fallback", None))
        results: List[Metrics] = []
        for res in run_tasks(task, chunks, len(chunks), backend=backend,
                             on_result=(lambda i, _res: progress(len(chunks[i]))) if progress else None,
                             name="msprobe-tensors"):
            results.extend(res)
        return results
    from msprobe.core.resources import cap_jobs

    workers = cap_jobs(jobs, len(pairs), "tensor pairs")   # never beyond the cores nor the pairs
    if workers <= 1 or in_worker():
        out = []
        for p in pairs:
            out.append(compare_pair(p[0], p[1], loader))
            if progress:
                progress(1)
        return out
    # msprobe.core.executor (local backend): Ctrl-C or a failing chunk stops every worker at once
    n_chunks = min(len(pairs), workers * 8)
    bounds = np.linspace(0, len(pairs), n_chunks + 1).astype(int).tolist()
    chunks = [pairs[a:b] for a, b in zip(bounds[:-1], bounds[1:]) if b > a]
    results = []
    for res in run_tasks(lambda chunk, _emit: _compare_chunk(chunk, loader), chunks, workers,
                         on_result=(lambda i, _res: progress(len(chunks[i]))) if progress else None,
                         name="msprobe-tensors"):
        results.extend(res)
    return results
