"""One row of the details CSV from a judged output (framework-free): the standard's metric columns, the
status, the message naming the failing metrics, and the reference's single-run indicators.

The framework checkers (msprobe.pytorch.acc_check.checker, msprobe.mindspore.acc_check.checker) give the
outcome of their runtime's ``assess_output`` (op_standards.assess_arrays), the dtype texts and shape, and a
function computing the single-run indicators (cosine, max abs error, 双百/双千/双万) of the compared values.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Dict, Optional

import numpy as np

from msprobe.core.acc_check.results import STATUS
from msprobe.core.acc_check.standards import STANDARD_TITLES

#: our metric names -> the details CSV's columns
COLUMNS = {"Error Rate": "二进制一致错误率", "Relative Error Ratio": "相对误差错误率", "Absolute Error Ratio": "绝对误差错误率",
           "Maximum ULP Error": "ULP误差最大值", "Mean ULP Error": "ULP误差平均值", "ULP Error Proportion": "ULP误差大于阈值占比",
           "Thousandth ratio": "双千指标", "Small Value Error Proportion": "小值域错误占比",
           "Maximum Relative Error": "相对误差最大值", "Mean Relative Error": "相对误差平均值",
           "Root Mean Squared Error": "均方根误差", "Error Balance": "误差均衡性"}
LOW_NAMES = ("float16", "bfloat16")


def detail_row(api_name: str, res: Dict, device_dtype: str, bench_dtype: str, shape: Optional[str],
               device_is_tensor: bool, both_none: bool,
               legacy: Optional[Callable[[], Dict[str, Optional[float]]]]) -> Dict:
    """One details CSV row (column -> value, plus private ``_`` keys for the run's summary).
    ``legacy``: the single-run indicators of a floating output (None otherwise)."""
    row: Dict[str, Any] = {"API Name": api_name, "Bench Dtype": bench_dtype, "DEVICE Dtype": device_dtype}
    if shape is not None:
        row["Shape"] = shape
    if "rows" not in res:  # decided before any metric
        msg = res["message"]
        if both_none:
            return dict(row, Status="SKIP", Message="Bench output is None, skip this test.")
        status = STATUS[res["verdict"]]
        if status == "pass" and not device_is_tensor:
            row["二进制一致错误率"] = 0.0
        return dict(row, Status=status, Message=msg)
    if legacy is not None:
        row.update(legacy())
    m = res["metrics"]
    for key, col in COLUMNS.items():
        if key in m:
            row[col] = float(m[key])
    if res["standard"] == "absolute" and "Inf/NaN Mismatch Proportion" in m:
        row["inf/nan错误率"] = float(m["Inf/NaN Mismatch Proportion"])
    status = STATUS[res["verdict"]]
    row["Status"] = status
    lines, worst_sev = [], -1.0
    for metric, value, ratio, verdict in res["rows"]:
        if verdict in ("error", "warning"):
            lines.append(f"{metric} {_num(value)}" + (f" (ratio {_num(ratio)})" if ratio != "" else "") + f": {verdict}")
            sev = float(ratio) if ratio != "" else float(value)
            sev = sev if math.isfinite(sev) else 1e300
            if sev > worst_sev:
                worst_sev = sev
                row.update(_metric=metric, _value=float(value), _ratio=float(ratio) if ratio != "" else None)
    row["_std"] = res["standard"]
    row["_severity"] = worst_sev
    row["Message"] = f"{STANDARD_TITLES[res['standard']]}: " + ("; ".join(lines) if lines else "every metric passes")
    return row


def result_message(forward: str, backward: str, backward_note: str, details) -> str:
    """The result CSV's Message cell: only on a SKIP row, the first skip message (of the forward details when
    the forward is SKIP, else the note that says why the backward was skipped)."""
    if forward == "SKIP":
        for d in details:
            if d.get("Status") == "SKIP" and d.get("Message"):
                return d["Message"]
    return backward_note if backward == "SKIP" else ""


def _num(v) -> str:
    return f"{v:.6g}" if isinstance(v, float) else str(v)


def legacy_metrics_np(d, b, judged: str) -> Dict[str, Optional[float]]:
    """The single-run indicators on numpy arrays (``judged``: the dtype name whose thresholds apply,
    e.g. "float16"); the same formulas as the PyTorch checker's."""
    b = np.asarray(b)
    with np.errstate(all="ignore"):
        d64, b64 = np.asarray(d, dtype=np.float64).ravel(), b.astype(np.float64).ravel()
        ae = np.abs(d64 - b64)
        eps = 2.0 ** -8 if judged == "bfloat16" else float(np.finfo(b.dtype).eps) if b.dtype.kind == "f" else 2.0 ** -23
        rel = ae / (np.abs(b64) + eps)
        n = d64.size
        out: Dict[str, Optional[float]] = {"最大绝对误差": float(ae.max()) if n else None}
        if n > 1:
            dm, bm = np.abs(d64).max(), np.abs(b64).max()
            if np.isfinite(dm) and np.isfinite(bm) and dm > 0 and bm > 0:
                dn, bn = d64 / dm, b64 / bm
                cos = float((dn * bn).sum() / (np.linalg.norm(dn) * np.linalg.norm(bn)))
                out["余弦相似度"] = max(-1.0, min(1.0, cos))
    return ratio_indicators(out, lambda t: int((rel < t).sum()), n, judged in LOW_NAMES)


def ratio_indicators(out: Dict[str, Optional[float]], below: Callable[[float], int], n: int,
                     low: bool) -> Dict[str, Optional[float]]:
    """Add the reference's share-of-elements indicators to ``out``: 双百/双千 for a low-precision dtype,
    双千/双万 otherwise (``below(t)``: how many relative errors are under t; an empty output counts as 1)."""
    ratio = lambda t: float(below(t)) / n if n else 1.0  # noqa: E731
    if low:
        out["双百指标"] = ratio(0.01)
        out["双千指标"] = ratio(0.001)
    else:
        out["双千指标"] = ratio(0.001)
        out["双万指标"] = ratio(0.0001)
    return out
