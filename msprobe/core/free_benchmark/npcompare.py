"""The comparison rule on numpy arrays (the MindSpore adapter compares host copies; rules: rules.py)."""

from __future__ import annotations

import numpy as np

from msprobe.core.free_benchmark import rules


def _pieces(o, p):
    n = rules.chunk_count(p.nbytes)
    o, p = o.reshape(-1), p.reshape(-1)
    if n <= 1:
        return ((o, p),)
    return zip(np.array_split(o, n), np.array_split(p, n))


def ratio(orig: np.ndarray, pert: np.ndarray, tol: float):
    """max over pieces of max(|o|/|p|, |p|/|o|), both clamped to >= tol (NaN: 1), or SYMBOL_FLIPPING; ``orig`` is
    cast to ``pert``'s dtype a piece at a time."""
    if pert.size == 0:
        return 1.0
    worst = 1.0
    with np.errstate(all="ignore"):
        for oc, pc in _pieces(orig, pert):
            oc = oc.astype(pc.dtype, copy=False)
            prod = oc * pc
            if prod.min() < -tol * tol:          # a NaN minimum compares False, as in torch
                return rules.SYMBOL_FLIPPING
            r = np.maximum(np.abs(oc), tol) / np.maximum(np.abs(pc), tol)
            r = np.where(np.isnan(r), 1.0, r)
            worst = max(worst, rules.chunk_ratio(float(r.max()), float(r.min())))
    return worst
