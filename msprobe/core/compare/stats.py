"""Vectorised statistics metrics (compare.md §4.1, G8 rule)."""

from __future__ import annotations

import math
import re
from typing import List, Sequence, Tuple

import numpy as np

from msprobe.core.compare.refparse import reference_parse

NA = "N/A"
NAN_TEXT = "Nan"
_NUM_RE = re.compile(r"^\s*[+-]?((\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?|inf|infinity|nan)\s*$", re.IGNORECASE)


def numeric(values: Sequence) -> Tuple[np.ndarray, np.ndarray]:
    """Raw statistic values -> (float64 array, usable mask).

    Usable = a number (not a bool), a numeric string, or the string 'nan' in any case, as in G8
    (``pd.to_numeric(str(v))`` succeeding).  ``None``, ``'True'``, ``'...'``, ``'N/A'`` are not usable.
    """
    n = len(values)
    num_types = (float, int)
    flags = [v.__class__ in num_types for v in values]
    if all(flags):
        return np.fromiter(values, dtype=np.float64, count=n), np.ones(n, dtype=bool)
    nan = float("nan")
    out = np.array([v if f else nan for v, f in zip(values, flags)], dtype=np.float64)
    ok = np.array(flags, dtype=bool)
    texts = [i for i, v in enumerate(values) if v.__class__ is str and _NUM_RE.match(v) is not None]
    if texts:
        out[texts] = [float(values[i]) for i in texts]
        ok[texts] = True
    return out, ok


def float_strs(values: np.ndarray) -> List[str]:
    """Python ``str(float)`` of every element (the reference's text for relative errors)."""
    return list(map(repr, values.tolist()))


def display(values: Sequence) -> list:
    """Cell values for the NPU/Bench max/min/mean/l2norm columns: NaN -> 'Nan', None -> 'None'."""
    return ["None" if v is None else (NAN_TEXT if v != v else v) for v in values]


def parsed_stats(values: Sequence) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(values, usable mask, values as the reference re-parses them) for one statistic column.

    The reference subtracts values re-parsed from text (see refparse); done per dump side, so the two
    sides can be prepared in parallel with the parsing.
    """
    n, ok = numeric(values)
    return n, ok, reference_parse(np.where(ok, n, 0.0))


def stat_diffs(npu: Sequence, bench: Sequence, matched: np.ndarray):
    """Diff and relative-error columns for one statistic (see :func:`stat_diffs_parsed`)."""
    return stat_diffs_parsed(parsed_stats(npu), parsed_stats(bench), matched)


def stat_diffs_parsed(npu, bench, matched: np.ndarray):
    """Diff and relative-error columns for one statistic from two :func:`parsed_stats` triples.

    Returns (diff_cells, rel_cells, diff_values, rel_fraction, warn):
    diff_values is float64 (NaN where not a number), rel_fraction = |diff/bench| (NaN where N/A),
    warn = the G8 magnitude warning ``|diff| / (|max(npu, bench)| + 1e-10) > 0.5``.
    """
    n, n_ok, n_p = npu
    b, b_ok, b_p = bench
    usable = n_ok & b_ok & matched
    # the denominator of the relative error is the exact value
    with np.errstate(all="ignore"):
        diff = np.where(usable, n_p - b_p, np.nan)
        diff_nan = usable & np.isnan(diff)
        good = usable & ~diff_nan
        zero_bench = good & (b == 0)
        rel_ok = good & ~zero_bench
        rel = np.abs(diff / b * 100)
        warn = good & (np.abs(diff) / (np.abs(np.maximum(n_p, b_p)) + 1e-10) > 0.5)
    diff_cells: list = [NA] * len(n)
    rel_cells: list = [NA] * len(n)
    if good.any():
        gi = np.nonzero(good)[0]
        for i, v in zip(gi.tolist(), diff[gi].tolist()):
            diff_cells[i] = v
    if diff_nan.any():
        for i in np.nonzero(diff_nan)[0].tolist():
            diff_cells[i] = NAN_TEXT
            rel_cells[i] = NAN_TEXT
    if rel_ok.any():
        ri = np.nonzero(rel_ok)[0]
        for i, s in zip(ri.tolist(), float_strs(rel[ri])):
            rel_cells[i] = s + "%"
    diff_values = np.where(good, diff, np.nan)
    rel_fraction = np.where(rel_ok, rel / 100.0, np.nan)
    return diff_cells, rel_cells, diff_values, rel_fraction, warn


def is_number(v) -> bool:
    t = type(v)
    return (t is float and not math.isnan(v)) or t is int
