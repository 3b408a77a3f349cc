"""The precision standards of op_generate and run_ut: metrics, thresholds and verdicts, on numpy arrays.

One implementation for every framework: the PyTorch runtime (msprobe.pytorch.op_generate.runtime) and the
MindSpore runtime (msprobe.mindspore.op_generate.runtime) hand their outputs over as numpy arrays
(bfloat16 widened exactly to float32) together with the dtype *names* ("float16", "bfloat16", "float32")
whose thresholds apply.  Like standards.py, this file is copied into every generated script (after the
standards lists), so it must stay plain Python + numpy with no msprobe import.
"""
import math
import sys

try:
    import numpy as np
except ImportError:  # only in a generated script run where numpy is missing
    sys.exit("error: this script needs numpy: pip install numpy")

from msprobe.core.acc_check.standards import STANDARD_TITLES  # msprobe-only

LOW_PRECISION_NAMES = ("float16", "bfloat16")
EPS_BY_BENCH = {"float32": 2.0 ** -23, "float64": 2.0 ** -52}
ABS_THRESHOLDS = {"float16": (1e-3, 1e-3, 1e-5), "bfloat16": (4e-3, 1e-3, 1e-5)}  # rtol, small value, atol
ABS_DEFAULT = (1e-6, 1e-6, 1e-9)
BENCH_THRESHOLDS = {"float16": (1e-3, 1e-5), "bfloat16": (1e-3, 1e-5)}  # small value, atol
BENCH_DEFAULT = (1e-6, 1e-9)
ULP_PARAMS = {"float16": (-14, 10), "bfloat16": (-126, 7)}  # min exponent, mantissa bits
ULP_DEFAULT = (-126, 23)
MIN_ERR = {"float16": 2.0 ** -11, "bfloat16": 2.0 ** -8}
MIN_ERR_DEFAULT = 2.0 ** -14
# benchmark ratio bands (pass <= first, warning <= second, else error), as documented
BENCH_BANDS = {"Small Value Error Proportion": (1, 2), "Maximum Relative Error": (1, 10),
               "Mean Relative Error": (1, 2), "Root Mean Squared Error": (1, 2), "Error Balance": (1, 2)}
# Error Balance is a count proportion that swings by 1/numel per element, so on small outputs it is noise;
# like the reference's api_precision_compare its verdict is shown but left out of the final verdict.
INFO_ONLY = frozenset(["Error Balance"])


def dtype_name(dtype):
    """'float16' for torch.float16, mindspore Float16, numpy float16 or the text of any of them."""
    return str(dtype).rsplit(".", 1)[-1].strip().lower()


def _errors(d, b):
    with np.errstate(all="ignore"):
        d64, b64 = np.asarray(d, dtype=np.float64), np.asarray(b, dtype=np.float64)
        finite = np.isfinite(d64) & np.isfinite(b64)
        ae = np.abs(d64 - b64)
        eps = EPS_BY_BENCH.get(np.asarray(b).dtype.name, 2.0 ** -23)
        re = ae / (np.abs(b64) + eps)
        # a non-finite value must be the same non-finite value on both sides
        nonfinite = ~np.isfinite(b64) | ~np.isfinite(d64)
        same = (d64 == b64) | (np.isnan(d64) & np.isnan(b64))
    mismatch = int(np.count_nonzero(nonfinite & ~same))
    return d64, b64, finite, ae, re, mismatch


def metrics_binary(d, b):
    d, b = np.asarray(d), np.asarray(b)
    if d.dtype.kind == "f":
        same = (d == b) | (np.isnan(d) & np.isnan(b))
    else:
        same = d == b
    return {"Error Rate": float(np.count_nonzero(~same)) / d.size}


def metrics_absolute(d, b, dev, scale=None):
    """The absolute-threshold standard's error rates.  ``scale``: the API on the absolute values of its inputs
    (|x| + |alpha*y| for an add): the relative error and the small-value test are then taken at
    max(|b|, scale), so that the rounding of an add or sub that cancels (an SGD update ``p.add_(g, alpha=-lr)``
    whose result is far smaller than its terms) is measured against the terms it rounds, not the result
    (the reference measures it against the result and reports such an update as an error)."""
    rtol, small_value, atol = ABS_THRESHOLDS.get(dev, ABS_DEFAULT)
    d64, b64, finite, ae, re, mismatch = _errors(d, b)
    mag = np.abs(b64)
    if scale is not None:
        with np.errstate(all="ignore"):
            sc = np.nan_to_num(np.abs(np.asarray(scale, dtype=np.float64)), nan=0.0, posinf=0.0)
            mag = np.maximum(mag, sc)
            re = ae / (mag + EPS_BY_BENCH.get(np.asarray(b).dtype.name, 2.0 ** -23))
    small = finite & (mag <= small_value)
    normal = finite & ~small
    n_normal, n_small = int(normal.sum()), int(small.sum())
    return {
        "Relative Error Ratio": float(np.count_nonzero(re[normal] > rtol)) / n_normal if n_normal else 0.0,
        "Absolute Error Ratio": float(np.count_nonzero(ae[small] > atol)) / n_small if n_small else 0.0,
        "Inf/NaN Mismatch Proportion": mismatch / d64.size,
    }


def errors_ulp(d, b, dev, scale=None):
    """|d - b| in units in the last place of the golden b (the reference's formula).  ``scale``: the
    magnitude of the terms each element sums (the API run on the absolute values of its inputs); the
    ULP is then taken at max(|b|, scale), so rounding noise of a sum that cancels to ~0 is measured
    against what its terms explain (|fl(AB) - AB| <= gamma_K |A||B|), not against the cancelled result."""
    min_exp, mantissa = ULP_PARAMS.get(dev, ULP_DEFAULT)
    calc = np.float64 if dev not in LOW_PRECISION_NAMES else np.float32
    with np.errstate(all="ignore"):
        dc, bc = np.asarray(d).astype(calc), np.asarray(b).astype(calc)
        absb = np.abs(bc)
        if scale is not None:
            absb = np.maximum(absb, np.nan_to_num(np.abs(np.asarray(scale).astype(calc)), nan=0.0, posinf=0.0))
        exp = np.where(absb == 0, np.zeros_like(absb), np.floor(np.log2(absb)))
        exp = np.maximum(exp, calc(min_exp))
        return np.abs((dc - bc) * np.power(calc(2.0), calc(mantissa) - exp))


def metrics_ulp(d, b, dev, scale=None):
    ulp = errors_ulp(d, b, dev, scale)
    finite = np.isfinite(ulp)
    limit = 1 if dev in LOW_PRECISION_NAMES else 32
    vals = ulp[finite]
    with np.errstate(invalid="ignore"):
        over = np.count_nonzero(ulp > limit)
    return {
        "Maximum ULP Error": float(vals.max()) if vals.size else 0.0,
        "Mean ULP Error": float(vals.mean()) if vals.size else 0.0,
        "ULP Error Proportion": float(over + np.count_nonzero(~finite)) / ulp.size,
    }


def metrics_thousandth(d, b):
    _, _, finite, _, re, mismatch = _errors(d, b)
    return {"Thousandth ratio": float(np.count_nonzero((re < 0.001) & finite)) / finite.size,
            "Inf/NaN Mismatch Proportion": mismatch / finite.size}


def metrics_benchmark(d, b, dev):
    small_value, atol = BENCH_THRESHOLDS.get(dev, BENCH_DEFAULT)
    d64, b64, finite, ae, re, mismatch = _errors(d, b)
    small = finite & (np.abs(b64) <= small_value)
    normal = finite & ~small
    n_normal, n_small = int(normal.sum()), int(small.sum())
    return {
        "Small Value Error Proportion": float(np.count_nonzero(ae[small] > atol)) / n_small if n_small else 0.0,
        "Maximum Relative Error": float(re[normal].max()) if n_normal else 0.0,
        "Mean Relative Error": float(re[normal].sum()) / n_normal if n_normal else 0.0,
        "Root Mean Squared Error": math.sqrt(float((ae[normal] ** 2).sum()) / n_normal) if n_normal else 0.0,
        "Error Balance": abs(int(np.count_nonzero(d64 > b64)) - int(np.count_nonzero(d64 < b64))) / d64.size,
        "Inf/NaN Mismatch Proportion": mismatch / d64.size,
    }


def metrics_of(standard, d, b, dev, scale=None):
    """The metrics of ``standard`` for device output ``d`` against benchmark ``b`` (numpy arrays); ``dev``:
    the dtype name whose thresholds apply."""
    if standard == "binary":
        return metrics_binary(d, b)
    if standard == "absolute":
        return metrics_absolute(d, b, dev, scale)
    if standard == "ulp":
        return metrics_ulp(d, b, dev, scale)
    if standard == "thousandth":
        return metrics_thousandth(d, b)
    return metrics_benchmark(d, b, dev)


def ratio_of(x, y, dev):
    """Device metric over the reference implementation's metric, floored like the reference tool."""
    return abs(x) / max(abs(y), MIN_ERR.get(dev, MIN_ERR_DEFAULT))


def judge_metrics(standard, dev, m, ref=None):
    """Metric rows (name, value, ratio, verdict) and the worst verdict for one output.

    ``m``: the device-vs-benchmark metrics; ``ref``: the same metrics of the reference implementation
    (the API in the device dtype on the CPU), used by the ratio-based benchmark and ULP rules."""
    rows = []
    if standard == "binary":
        rows.append(("Error Rate", m["Error Rate"], "", "pass" if m["Error Rate"] == 0 else "error"))
    elif standard == "absolute":
        for key in ("Relative Error Ratio", "Absolute Error Ratio"):
            rows.append((key, m[key], "", "pass" if m[key] == 0 else "error"))
    elif standard == "ulp":
        prop, mean = m["ULP Error Proportion"], m["Mean ULP Error"]
        r = prop / ref["ULP Error Proportion"] if ref is not None and ref["ULP Error Proportion"] > 0 else None
        beats_ref = r is not None and r < 1
        if dev in LOW_PRECISION_NAMES:
            ok = prop < 0.001 or beats_ref
        else:
            ok = mean < 64 or prop < 0.05 or beats_ref
        rows.append(("Maximum ULP Error", m["Maximum ULP Error"], "", ""))
        rows.append(("Mean ULP Error", mean, "", ""))
        rows.append(("ULP Error Proportion", prop, "" if r is None else r, "pass" if ok else "error"))
    elif standard == "thousandth":
        v = m["Thousandth ratio"]
        rows.append(("Thousandth ratio", v, "", "pass" if v > 0.999 else "error"))
    else:
        for key, (warn, err) in BENCH_BANDS.items():
            if ref is None:
                rows.append((key, m[key], "", ""))
                continue
            r = ratio_of(m[key], ref[key], dev)
            verdict = "pass" if (math.isnan(r) or r <= warn) else ("warning" if r <= err else "error")
            if key in INFO_ONLY:
                verdict += " (info)"
            rows.append((key, m[key], r, verdict))
    if "Inf/NaN Mismatch Proportion" in m:
        v = m["Inf/NaN Mismatch Proportion"]
        rows.append(("Inf/NaN Mismatch Proportion", v, "", "pass" if v == 0 else "error"))
    return rows, worst([r[-1] for r in rows])


def worst(verdicts):
    """The worst verdict; '... (info)' verdicts are shown but do not count."""
    order = {"": 0, "pass": 1, "warning": 2, "error": 3}
    best = max(verdicts, key=lambda v: order.get(v, 0), default="")
    return best or "pass"


def fmt(v):
    if isinstance(v, float):
        if v != v or v in (float("inf"), float("-inf")):
            return str(v)
        return f"{v:.6g}"
    return str(v)


def table(rows):
    """A grid table of (metric, value, ratio, verdict) rows; the ratio column only when used."""
    with_ratio = any(r[2] != "" for r in rows)
    headers = ("Metric", "Value", "Ratio", "Verdict") if with_ratio else ("Metric", "Value", "Verdict")
    cells = [headers]
    for name, value, r, verdict in rows:
        cells.append((str(name), fmt(value), fmt(r), str(verdict)) if with_ratio else (str(name), fmt(value), str(verdict)))
    widths = [max(len(c[i]) for c in cells) for i in range(len(headers))]
    line = "+" + "+".join("-" * (w + 2) for w in widths) + "+"
    out = [line]
    for i, c in enumerate(cells):
        out.append("| " + " | ".join(x.ljust(w) for x, w in zip(c, widths)) + " |")
        out.append(line.replace("-", "=") if i == 0 else line)
    return "\n".join(out)


def _family(a):
    k = a.dtype.kind
    return "float" if k in "fc" else ("bool" if k == "b" else "int")


def _real_view(a):
    return np.stack([a.real, a.imag], axis=-1) if a.dtype.kind == "c" else a


def assess_arrays(standard, d, b, ref=None, judged=None, device_dtype=None, bench_dtype=None, judged_text=None,
                  scale=None):
    """Judge one output pair given as numpy arrays (the framework checked types and moved data to the host).

    ``d``/``b``: device and benchmark outputs (bfloat16 widened to float32); ``ref``: the reference
    implementation's output or, when there is none, the benchmark rounded to the device dtype (None: no
    ratio); ``judged``: the dtype name whose thresholds apply (default: ``device_dtype``);
    ``device_dtype``/``bench_dtype``: the framework's dtype texts for the table; ``scale``: the API on the
    absolute values of its inputs (ULP and absolute-threshold standards).  Returns a dict with ``verdict`` and either ``message``
    or ``head`` + ``rows``, the ``metrics`` and the ``standard`` used."""
    d, b = np.asarray(d), np.asarray(b)
    device_dtype = device_dtype or d.dtype.name
    bench_dtype = bench_dtype or b.dtype.name
    if d.shape != b.shape:
        return {"verdict": "error", "message": "ERROR: shape of out_device and out_bench is not equal!"}
    if d.size == 0:
        return {"verdict": "pass", "message": "empty output: nothing to compare"}
    if _family(d) != _family(b):
        return {"verdict": "error", "message": f"ERROR: dtype family of out_device ({device_dtype}) and out_bench "
                                               f"({bench_dtype}) differs!"}
    std = standard if _family(d) == "float" else "binary"
    d, b = _real_view(d), _real_view(b)
    dev = judged or dtype_name(device_dtype)
    if not (std in ("ulp", "absolute") and scale is not None and np.shape(scale) == b.shape
            and np.asarray(scale).dtype.kind == "f"):
        scale = None
    m = metrics_of(std, d, b, dev, scale)
    ref_m = None
    if std in ("benchmark", "ulp") and ref is not None:
        r = _real_view(np.asarray(ref))
        if r.shape == b.shape and r.dtype.kind == "f":
            ref_m = metrics_of(std, r, b, dev, scale)
    head = [("Shape", list(d.shape), "", ""),
            ("Dtype of out_device", device_dtype, "", ""), ("Dtype of out_bench", bench_dtype, "", ""),
            ("Compare Standard", STANDARD_TITLES[std], "", "")]
    if judged_text:
        head.append(("Thresholds of", judged_text, "", ""))
    if scale is not None:
        head.append(("ULP taken at" if std == "ulp" else "Relative error taken at",
                     "max(|out_bench|, API on |inputs|)", "", ""))
    rows, verdict = judge_metrics(std, dev, m, ref_m)
    return {"verdict": verdict, "head": head, "rows": rows, "metrics": m, "standard": std}
