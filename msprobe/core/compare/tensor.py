"""Real-data (tensor mode) metrics: Cosine, EucDist, MaxAbsErr, MaxRelativeErr and the two error
ratios, with the reference's validation chain and messages (compare.md §4.3-4.4, G8 order).

Loading and computing run per tensor pair in a thread pool: file reads and numpy kernels release the
GIL, so pairs overlap on all cores without pickling arrays between processes.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
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


def compare_arrays(n: np.ndarray, b: np.ndarray) -> Metrics:
    """Metrics of one NPU/bench array pair (G8 semantics; the 0-d message is written once)."""
    msgs: List[str] = []
    if n.size == 0:
        return (UNSUPPORTED,) * 6 + (MSG_EMPTY,)
    zero_d = n.shape == ()
    if not zero_d:
        if n.shape != b.shape:
            return ("shape unmatched",) * 6 + (MSG_SHAPE,)
        try:
            n_inf, b_inf = np.isinf(n), np.isinf(b)
            n_nan, b_nan = np.isnan(n), np.isnan(b)
        except TypeError:
            return ("unreadable data",) * 6 + (MSG_UNREADABLE,)
        if n_inf.any() or b_inf.any() or n_nan.any() or b_nan.any():
            if np.array_equal(n_inf, b_inf) and np.array_equal(n_nan, b_nan):
                n = n.copy()
                b = b.copy()
                n[n_inf | n_nan] = 0
                b[b_inf | b_nan] = 0
            else:
                return (NA,) * 6 + (MSG_NAN_POS,)
    else:
        msgs.append(MSG_ZERO_D)
    if n.dtype != b.dtype:
        msgs.append(MSG_DTYPE)

    # relative error on the unflattened arrays, in their own precision (G8: only a non-float bench
    # casts both to float64); zeros in the bench get float64 eps added on both sides.
    if b.dtype.type not in FLOAT_DTYPES:
        rn, rb = n.astype(np.float64), b.astype(np.float64)
    else:
        rn, rb = n, b
    zero = rb == 0
    if zero.any():
        rn = np.array(rn, copy=True)
        rb = np.array(rb, copy=True)
        rn[zero] += EPS64
        rb[zero] += EPS64
    with np.errstate(all="ignore"):
        rel = np.abs((rn - rb) / rb)

    nf = n.reshape(-1).astype(np.float64) if not zero_d else n.astype(np.float64)
    bf = b.reshape(-1).astype(np.float64) if b.shape != () else b.astype(np.float64)
    with np.errstate(all="ignore"):
        d = nf - bf
        max_abs_raw = float(np.max(np.abs(d)))
        max_rel_raw = float(np.max(rel)) if rel.size else float("nan")

    if zero_d:
        cos = euc = one = five = UNSUPPORTED
    else:
        if nf.size == 1:
            cos = UNSUPPORTED
            msgs.append(MSG_LEN1)
        else:
            nn = float(np.sqrt(np.dot(nf, nf)))
            bb = float(np.sqrt(np.dot(bf, bf)))
            if nn <= EPS64 and bb <= EPS64:
                cos = 1.0
            elif nn <= EPS64:
                cos = NAN_TEXT
                msgs.append(MSG_COS_NPU_ZERO)
            elif bb <= EPS64:
                cos = NAN_TEXT
                msgs.append(MSG_COS_BENCH_ZERO)
            else:
                c = float(np.dot(nf, bf)) / (nn * bb)
                if c != c:
                    cos = NAN_TEXT
                    msgs.append(MSG_COS_NAN)
                else:
                    cos = format_value(c)
                    if cos > 0.9999:
                        cos = round(cos, 6)
        euc = float(np.sqrt(np.dot(d, d)))
        if rel.size:
            one = format_value(np.count_nonzero(rel < 0.001) / rel.size)
            five = format_value(np.count_nonzero(rel < 0.005) / rel.size)
        else:
            one = five = NAN_TEXT
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


def compare_files(
    pairs: Sequence[Tuple[str, str]],
    loader: Callable[[str], np.ndarray],
    jobs: int = 0,
    progress: Optional[Callable[[int], None]] = None,
) -> List[Metrics]:
    """Compare many (npu_path, bench_path) pairs; results in input order."""
    if not pairs:
        return []
    workers = jobs if jobs > 0 else min(8, (os.cpu_count() or 1) + 1)
    if workers <= 1 or len(pairs) == 1:
        out = []
        for p in pairs:
            out.append(compare_pair(p[0], p[1], loader))
            if progress:
                progress(1)
        return out
    results: List[Optional[Metrics]] = [None] * len(pairs)
    with ThreadPoolExecutor(max_workers=workers) as pool:
        futs = {pool.submit(compare_pair, p[0], p[1], loader): i for i, p in enumerate(pairs)}
        from concurrent.futures import as_completed

        for fut in as_completed(futs):
            results[futs[fut]] = fut.result()
            if progress:
                progress(1)
    return results  # type: ignore[return-value]
