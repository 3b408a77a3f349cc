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
    # a slice of rows at a time: the text matrices cost ~200 bytes a value, and a whole column's sort for
    # distinct values as much again (statistics repeat mostly nearby: an op's output is the next op's input)
    for a in range(0, len(values), CHUNK):
        part = values[a:a + CHUNK]
        finite = np.isfinite(part) & (part != 0)
        if finite.any():
            uniq, inverse = np.unique(part[finite], return_inverse=True)
            out[a:a + CHUNK][finite] = _parse_nonzero_finite(uniq)[inverse.reshape(-1)]
    return out


#: rows parsed at a time
CHUNK = 1 << 16


def _parse_nonzero_finite(values: np.ndarray) -> np.ndarray:
    out = values.copy()
    idx = np.arange(len(values))
    texts = np.array(list(map(repr, values.tolist())))  # fixed-width unicode, one row per value
    width = texts.dtype.itemsize // 4
    n = len(idx)
    # one row per character position, one column per value: every step below is a contiguous vector op
    mat = np.ascontiguousarray(texts.view(np.uint32).reshape(n, width).T)
    neg = mat[0] == 45  # '-'
    is_digit = (mat >= 48) & (mat <= 57)
    in_exp = np.logical_or.accumulate((mat == 101) | (mat == 69), axis=0)  # from 'e'/'E' on
    mant = is_digit & ~in_exp
    after_point = np.logical_or.accumulate(mat == 46, axis=0)  # from '.' on
    rank = np.cumsum(mant, axis=0, dtype=np.int16)  # 1-based position among mantissa digits
    take = mant & (rank <= _MAX_DIGITS)
    exp = (mant & ~take & ~after_point).sum(axis=0, dtype=np.int64) - (take & after_point).sum(axis=0, dtype=np.int64)
    number = np.zeros(n)
    exp_val = np.zeros(n, dtype=np.int64)
    edig = is_digit & in_exp
    for j in range(width):
        # pandas accumulates number = number * 10 + digit in double precision, digit by digit
        t = take[j]
        if t.any():
            number = np.where(t, number * 10.0 + (mat[j] - 48.0), number)
        e = edig[j]
        if e.any():
            exp_val = np.where(e, exp_val * 10 + (mat[j].astype(np.int64) - 48), exp_val)
    eneg = (in_exp & (mat == 45)).any(axis=0)
    exp = exp + np.where(eneg, -exp_val, exp_val)
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
