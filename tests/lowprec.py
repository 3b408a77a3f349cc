"""Which recorded statistics come out of low-precision (bf16/fp16 autocast) kernels, and how far another CPU
may move them: shared by the tests that compare our dumps with values recorded on one machine.

Values computed by bf16/fp16 kernels differ between CPUs (vector width, AVX512-BF16/FP16 or AMX or neither,
the accumulation order of a convolution's gradient): the fp16 conv1 bias gradient of cnn_fp16_* is 2.98e-06 on
one machine and 1.67e-06 on another. Such values are compared within what the dtype explains; everything else
(names, order, shapes, dtypes, float32 work) stays exact.
"""

from __future__ import annotations

import math
from typing import Dict, Optional

STATS = ("Max", "Min", "Mean", "Norm")
#: units of the low dtype's rounding (eps) allowed at the scale of an entry's tensors
LOW_ULPS = 4
EPS = {"torch.bfloat16": 2.0 ** -7, "torch.float16": 2.0 ** -10}


def is_tensor_rec(d) -> bool:
    return isinstance(d, dict) and "dtype" in d and "shape" in d


def tensor_records(obj):
    """Every tensor record nested in a dump.json value."""
    todo = [obj]
    while todo:
        o = todo.pop()
        if is_tensor_rec(o):
            yield o
        elif isinstance(o, dict):
            todo.extend(reversed(list(o.values())))
        elif isinstance(o, list):
            todo.extend(reversed(o))


def _finite_abs(v) -> float:
    return abs(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) else 0.0


def derived_records(data: dict, low: Optional[str]) -> Dict[int, float]:
    """``{id(record): abs tolerance}`` for the records of one step's dump.json ``data`` whose values come out of
    ``low`` (e.g. "torch.bfloat16") arithmetic; the other records are compared exactly (float32 rounding).

    Derived: every record of a backward or parameters_grad entry (gradients are reductions of low-precision
    terms), and in a forward entry that has a low-precision record or a derived input, its low-precision and
    derived inputs and all its outputs (a float32 loss computed from fp16 logits included); a forward input
    with the same statistics as a derived output met earlier is that value passed on (the loss into ones_like).
    Tolerance: rounding n terms of the low dtype L moves a result by about sqrt(n) * eps(L) * |term|, and the
    entry's largest tensor value S (e.g. its weight gradient, itself a sum of n such terms) bounds
    sqrt(n) * |term|; so LOW_ULPS * eps(L) * S."""
    if low is None:
        return {}
    eps = EPS[low]
    derived: Dict[int, float] = {}
    passed_on = set()

    def key(r):
        return tuple(repr(r.get(k)) for k in STATS)

    for name, entry in data.items():
        recs = list(tensor_records(entry))
        scale = max((_finite_abs(r.get(k)) for r in recs for k in ("Max", "Min")), default=0.0)
        if name.endswith("parameters_grad") or ".backward" in name:
            chosen = recs
        else:
            ins = [r for part in ("input_args", "input_kwargs", "parameters") for r in tensor_records(entry.get(part))]
            outs = list(tensor_records(entry.get("output")))
            low_ins = [r for r in ins if r["dtype"] == low or key(r) in passed_on]
            chosen = []
            if low_ins or any(r["dtype"] == low for r in outs):
                chosen = low_ins + outs
                passed_on.update(key(r) for r in outs)
        for r in chosen:
            derived[id(r)] = LOW_ULPS * eps * scale
    return derived


def stat_tol(rec: dict, key: str, tol: float) -> float:
    """The tolerance of one statistic of a derived record: ``tol`` (LOW_ULPS eps at the entry's scale), but at
    least LOW_ULPS eps of the record's own dtype at the value itself. A Norm is larger than every element, so
    the entry's Max/Min scale can be below one unit in the last place of a low-precision Norm (seen: an fp16
    conv gradient's Norm one fp16 ulp apart on two CPUs, with the scale's tolerance below that ulp)."""
    eps = EPS.get(rec.get("dtype"))
    value = rec.get(key)
    if eps is None or not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value):
        return tol
    return max(tol, LOW_ULPS * eps * abs(value))
