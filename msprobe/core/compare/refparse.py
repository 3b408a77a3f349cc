"""Statistics as the reference reads them.

The reference (8.x) turns every statistic into text (``str(float)``) and back with pandas'
``to_numeric``, whose fast decimal parser (pandas < 2.2) is not correctly rounded: it accumulates up to
17 significant digits in a double, ``number = number * 10 + digit``, then multiplies or divides by a
power of ten.  Values with 17 significant digits or large exponents come back up to an ulp off, and the
reference's ``Max diff`` ... ``NormRelativeErr`` cells are computed from those values.  To write
bit-identical reports we parse the same way, vectorised over the whole column: the digits of each
value's shortest repr are accumulated column by column of a byte matrix.

Only the diff numerators use this; the values shown in the report are the exact dump values.
"""

from __future__ import annotations

import numpy as np

_POW10 = np.array([float("1e%d" % k) for k in range(309)])
_MAX_DIGITS = 17


def reference_parse(values: np.ndarray) -> np.ndarray:
    """float64 array -> the float64 values pandas' legacy parser gives for ``str(value)``."""
    values = np.asarray(values, dtype=np.float64)
    out = values.copy()
    finite = np.isfinite(values) & (values != 0)
    idx = np.nonzero(finite)[0]
    if len(idx) == 0:
        return out
    texts = np.array(list(map(repr, values[idx].tolist())), dtype="S32")
    mat = texts.view(np.uint8).reshape(len(idx), 32)
    n = len(idx)
    neg = mat[:, 0] == ord("-")
    number = np.zeros(n)
    ndig = np.zeros(n, dtype=np.int64)
    exp = np.zeros(n, dtype=np.int64)
    after_point = np.zeros(n, dtype=bool)
    in_exp = np.zeros(n, dtype=bool)
    exp_sign = np.ones(n, dtype=np.int64)
    exp_val = np.zeros(n, dtype=np.int64)
    for j in range(32):
        c = mat[:, j]
        if not c.any():
            break
        is_digit = (c >= 48) & (c <= 57)
        d = c.astype(np.int64) - 48
        # exponent part
        is_e = (c == ord("e")) | (c == ord("E"))
        in_exp |= is_e
        exp_minus = in_exp & (c == ord("-"))
        exp_sign[exp_minus] = -1
        ed = in_exp & is_digit
        exp_val = np.where(ed, exp_val * 10 + d, exp_val)
        # mantissa digits
        md = ~in_exp & is_digit
        take = md & (ndig < _MAX_DIGITS)
        number = np.where(take, number * 10.0 + d, number)
        exp = exp - (take & after_point)
        exp = exp + (md & ~take & ~after_point)
        ndig = ndig + take
        after_point |= ~in_exp & (c == ord("."))
    exp = exp + exp_sign * exp_val
    res = number.copy()
    pos = exp > 0
    res[pos] = number[pos] * _POW10[np.minimum(exp[pos], 308)]
    negx = (exp < 0) & (exp >= -308)
    res[negx] = number[negx] / _POW10[-exp[negx]]
    tiny = exp < -308
    if tiny.any():
        res[tiny] = number[tiny] / _POW10[np.minimum(-exp[tiny] - 308, 308)] / _POW10[308]
    res = np.where(neg, -res, res)
    out[idx] = res
    return out
