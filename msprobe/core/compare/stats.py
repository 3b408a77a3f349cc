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
    num_types = (float, int)
    numbers = getattr(values, "numbers", None)  # a dump's CompactValues column: its arrays, and the odd values
    if numbers is not None:
        vals, ok, other = numbers()  # ok is a new array
        # the column's own array, read-only (no 8-byte copy per value): its slots of the other values (unused
        # there: CompactValues reads them from its dict) take the numbers of the numeric texts
        for i, v in other.items():
            if v.__class__ in num_types or (v.__class__ is str and _NUM_RE.match(v) is not None):
                vals[i] = float(v)
                ok[i] = True
        out = vals.view()
        out.flags.writeable = False
        return out, ok
    n = len(values)
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
    d = StatDiff(npu, bench, matched)
    return d.diff_cells(0, d.n), d.rel_cells(0, d.n), d.diff_values, d.rel_fraction, d.warn


class StatDiff:
    """The difference and relative error of one statistic as arrays; the report's cells of any row range
    are made from them (:meth:`diff_cells`, :meth:`rel_cells`), so a big report never holds all of them."""

    __slots__ = ("n", "diff", "rel", "good", "diff_nan", "rel_ok", "warn")

    def __init__(self, npu, bench, matched: np.ndarray):
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
            self.warn = good & (np.abs(diff) / (np.abs(np.maximum(n_p, b_p)) + 1e-10) > 0.5)
        self.n = len(n)
        self.diff, self.rel, self.good, self.diff_nan, self.rel_ok = diff, rel, good, diff_nan, rel_ok

    @property
    def diff_values(self) -> np.ndarray:
        return np.where(self.good, self.diff, np.nan)

    @property
    def rel_fraction(self) -> np.ndarray:
        return np.where(self.rel_ok, self.rel / 100.0, np.nan)

    def diff_cells(self, a: int, b: int) -> list:
        """Cells of rows a..b: the difference (float), 'Nan' where it is NaN, 'N/A' where not compared."""
        cells: list = [NA] * (b - a)
        good = self.good[a:b]
        if good.any():
            gi = np.nonzero(good)[0]
            for i, v in zip(gi.tolist(), self.diff[a:b][gi].tolist()):
                cells[i] = v
        nan = self.diff_nan[a:b]
        if nan.any():
            for i in np.nonzero(nan)[0].tolist():
                cells[i] = NAN_TEXT
        return cells

    def rel_cells(self, a: int, b: int) -> list:
        """Cells of rows a..b: the relative error as 'x%' text (Python's repr of the float), 'Nan', 'N/A'."""
        cells: list = [NA] * (b - a)
        nan = self.diff_nan[a:b]
        if nan.any():
            for i in np.nonzero(nan)[0].tolist():
                cells[i] = NAN_TEXT
        ok = self.rel_ok[a:b]
        if ok.any():
            ri = np.nonzero(ok)[0]
            for i, s in zip(ri.tolist(), float_strs(self.rel[a:b][ri])):
                cells[i] = s + "%"
        return cells


def is_number(v) -> bool:
    t = type(v)
    return (t is float and not math.isnan(v)) or t is int
