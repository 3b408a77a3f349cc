"""A compare report (in memory) as per-row numpy arrays and per-API groups.

Works on :class:`msprobe.core.compare.engine.Report` (``mode``, ``header``, ``columns``, ``names``,
``apis``), never on the written xlsx/csv.  Rows of one API are consecutive (the report keeps the dump
order), so an API is a ``[start, end)`` slice and per-API reductions are ``np.*.reduceat`` calls.
"""

from __future__ import annotations

import re
from typing import Dict, List, Optional, Sequence

import numpy as np

from msprobe.core.compare import stats as st

MODE_STATISTICS = "statistics"
MODE_MD5 = "md5"
MODE_TENSOR = "tensor"

STATE_INPUT = "input"
STATE_PARAMETERS = "parameters"
STATE_OUTPUT = "output"
STATE_PARAMETERS_GRAD = "parameters_grad"
_STATES = (STATE_INPUT, STATE_OUTPUT, STATE_PARAMETERS)
_STATE_RE = re.compile(r"\.(input|output|parameters)(?:\.|$)")

NPU_STATS = ("NPU max", "NPU min", "NPU mean", "NPU l2norm")
BENCH_STATS = ("Bench max", "Bench min", "Bench mean", "Bench l2norm")
REL_COLS = ("MaxRelativeErr", "MinRelativeErr", "MeanRelativeErr", "NormRelativeErr")
DIFF_COLS = ("Max diff", "Min diff", "Mean diff", "L2norm diff")

# Per-dtype noise floor for the growth ranking: torch.testing.assert_close's default rtol per dtype
# (design_notes.md §1.8).  An output error below the floor of its dtype is rounding, not divergence.
DTYPE_TOLERANCE = {
    "bfloat16": 1.6e-2, "float16": 1e-3, "half": 1e-3, "float32": 1.3e-6, "float": 1.3e-6,
    "float64": 1e-7, "double": 1e-7, "complex64": 1.3e-6, "complex128": 1e-7,
}
DEFAULT_TOLERANCE = 1e-7  # integers, bools and anything unknown


def dtype_tolerance(dtype: str) -> float:
    d = str(dtype).lower()
    for sep in (".", "::"):
        if sep in d:
            d = d.rsplit(sep, 1)[1]
    return DTYPE_TOLERANCE.get(d, DEFAULT_TOLERANCE)


def row_state(name: str, api: str) -> str:
    """input / output / parameters / parameters_grad of one row, from its name and its dump key."""
    if api.endswith(STATE_PARAMETERS_GRAD) or ".parameters_grad" in api:
        return STATE_PARAMETERS_GRAD
    if name.startswith(api) and len(name) > len(api) + 1:
        head = name[len(api) + 1:].split(".", 1)[0]
        if head in _STATES:
            return head
    m = _STATE_RE.search(name)
    return m.group(1) if m else STATE_OUTPUT


def _percent(col: Sequence) -> np.ndarray:
    """'12.5%' -> 0.125; anything else ('N/A', 'Nan', '') -> NaN."""
    nan = float("nan")
    return np.array([float(v[:-1]) / 100.0 if v.__class__ is str and v.endswith("%") else nan for v in col],
                    dtype=np.float64)


class OpTable:
    """One rank's report as arrays."""

    def __init__(self, report, rank: int = 0, label: Optional[str] = None):
        self.report = report
        self.rank = rank
        self.label = label
        self.mode: str = report.mode
        self.header: List[str] = list(report.header)
        self._idx: Dict[str, int] = {h: i for i, h in enumerate(self.header)}
        self.names: List[str] = list(report.names)
        self.apis: List[str] = list(report.apis)
        n = len(self.names)
        self.n = n
        self.states = np.array([row_state(a, b) for a, b in zip(self.names, self.apis)], dtype=object) if n else np.zeros(0, dtype=object)
        if n:
            api_arr = np.array(self.apis, dtype=object)
            change = np.empty(n, dtype=bool)
            change[0] = True
            change[1:] = api_arr[1:] != api_arr[:-1]
            self.starts = np.flatnonzero(change)
        else:
            self.starts = np.zeros(0, dtype=np.int64)
        self.ends = np.append(self.starts[1:], n).astype(np.int64)
        self.group_api: List[str] = [self.apis[i] for i in self.starts.tolist()]
        self._cache: dict = {}

    # ------------------------------------------------------------------ columns
    def col(self, name: str) -> Optional[list]:
        i = self._idx.get(name)
        return None if i is None else self.report.columns[i]

    def has(self, name: str) -> bool:
        return name in self._idx

    def _obj(self, name: str) -> np.ndarray:
        key = ("obj", name)
        if key not in self._cache:
            c = self.col(name)
            self._cache[key] = np.array(c, dtype=object) if c is not None else np.full(self.n, None, dtype=object)
        return self._cache[key]

    @property
    def matched(self) -> np.ndarray:
        return self._obj("Bench Name") != "N/A"

    @property
    def failing(self) -> np.ndarray:
        """Rows failing the mode's accuracy test (statistics Warning, md5 Different, tensor Accuracy No)."""
        if self.mode == MODE_TENSOR:
            return self._obj("Accuracy Reached or Not") == "No"
        if self.mode == MODE_MD5:
            return self._obj("Result") == "Different"
        return self._obj("Result") == "Warning"

    def numeric(self, name: str):
        """(values, usable) of a column of statistic cells."""
        key = ("num", name)
        if key not in self._cache:
            c = self.col(name)
            self._cache[key] = st.numeric(c) if c is not None else (np.full(self.n, np.nan), np.zeros(self.n, dtype=bool))
        return self._cache[key]

    # ------------------------------------------------------------------ statistics-mode relative errors
    def stat_cells(self):
        """(diff cells, relative cells, relative fractions) for max/min/mean/l2norm, as statistics mode
        writes them; tensor reports get them computed from their statistics columns (the reference's -da
        downgrades tensor mode to statistics)."""
        if "stat_cells" in self._cache:
            return self._cache["stat_cells"]
        if self.mode == MODE_STATISTICS:
            diff = [self.col(c) for c in DIFF_COLS]
            rel = [self.col(c) for c in REL_COLS]
            frac = [_percent(c) for c in rel]
        elif self.mode == MODE_TENSOR:
            diff, rel, frac = [], [], []
            matched = self.matched
            warn = np.zeros(self.n, dtype=bool)
            for a, b in zip(NPU_STATS, BENCH_STATS):
                dc, rc, _, rf, w = st.stat_diffs(self.col(a), self.col(b), matched)
                diff.append(dc)
                rel.append(rc)
                frac.append(rf)
                warn |= w
            self._cache["stat_warn"] = warn
        else:
            diff = rel = None
            frac = [np.full(self.n, np.nan)] * 4
        self._cache["stat_cells"] = (diff, rel, frac)
        return self._cache["stat_cells"]

    def stat_result(self):
        """Tensor reports as statistics rows: (Result, Err_message) by the statistics rule."""
        self.stat_cells()
        warn = self._cache.get("stat_warn", np.zeros(self.n, dtype=bool)).tolist()
        matched = self.matched.tolist()
        rg = self.col("Requires_grad Consistent") or ["True"] * self.n
        result = [("Warning" if w else "") if ok else "N/A" for w, ok in zip(warn, matched)]
        msg = [("" if ok else "No bench data matched.") + ("Need double check api accuracy. " if w else "")
               + ("Requires_grad inconsistent. " if r == "False" else "")
               for ok, w, r in zip(matched, warn, rg)]
        return result, msg

    def row_error(self) -> np.ndarray:
        """A scale-aware error per row (NaN where unknown), used by the growth ranking.

        statistics / tensor: max(|d max|, |d min|, |d mean|) / max(|golden max|, |golden min|) and
        |d l2norm| / |golden l2norm| (the larger); tensor mode also MaxAbsErr / that scale.  A non-finite
        target statistic against a finite golden one is an infinite error.  md5: 1 differs, 0 equal.
        """
        if "row_error" in self._cache:
            return self._cache["row_error"]
        if self.mode == MODE_MD5:
            res = self._obj("Result")
            err = np.where(res == "Different", 1.0, np.where(res == "pass", 0.0, np.nan))
        else:
            t = [self.numeric(c) for c in NPU_STATS]
            g = [self.numeric(c) for c in BENCH_STATS]
            with np.errstate(all="ignore"):
                ok = [tv[1] & gv[1] for tv, gv in zip(t, g)]
                gmax = np.where(g[0][1], np.abs(g[0][0]), np.nan)
                gmin = np.where(g[1][1], np.abs(g[1][0]), np.nan)
                scale = np.fmax(gmax, gmin) + 1e-12
                parts = []
                for k in range(3):
                    d = np.abs(t[k][0] - g[k][0])
                    parts.append(np.where(ok[k], d / scale, np.nan))
                d = np.abs(t[3][0] - g[3][0])
                parts.append(np.where(ok[3], d / (np.abs(g[3][0]) + 1e-12), np.nan))
                err = np.fmax.reduce(np.vstack(parts), axis=0) if self.n else np.zeros(0)
                # non-finite on the target side only: overflow, an infinite error
                bad_t = np.zeros(self.n, dtype=bool)
                for k in range(2):
                    bad_t |= ok[k] & ~np.isfinite(t[k][0]) & np.isfinite(g[k][0])
                err = np.where(bad_t, np.inf, err)
                # both sides equally non-finite (inf - inf = NaN): no error from that statistic
                if self.mode == MODE_TENSOR and self.has("MaxAbsErr"):
                    mae, mae_ok = st.numeric(self.col("MaxAbsErr"))
                    err = np.fmax(err, np.where(mae_ok, mae / scale, np.nan))
        self._cache["row_error"] = err
        return err

    def row_tolerance(self) -> np.ndarray:
        """Per-row noise floor: the larger default rtol of the two dtypes (bf16 1.6e-2, fp16 1e-3, fp32 1.3e-6)."""
        if "tol" in self._cache:
            return self._cache["tol"]
        out = np.full(self.n, DEFAULT_TOLERANCE)
        for name in ("NPU Dtype", "Bench Dtype"):
            c = self.col(name)
            if c is None:
                continue
            table = {d: dtype_tolerance(d) for d in set(c)}
            out = np.fmax(out, np.fromiter((table[d] for d in c), dtype=np.float64, count=self.n))
        self._cache["tol"] = out
        return out

    def target_nonfinite(self) -> np.ndarray:
        """Rows whose target max or min is NaN or +-inf (overflow)."""
        if self.mode == MODE_MD5:
            return np.zeros(self.n, dtype=bool)
        out = np.zeros(self.n, dtype=bool)
        for c in NPU_STATS[:2]:
            v, ok = self.numeric(c)
            out |= ok & ~np.isfinite(v)
        return out

    def overflow_rows(self) -> np.ndarray:
        """Matched rows whose target max/min is NaN/inf while the golden ones are finite."""
        if self.mode == MODE_MD5:
            return np.zeros(self.n, dtype=bool)
        golden_ok = np.ones(self.n, dtype=bool)
        for c in BENCH_STATS[:2]:
            v, ok = self.numeric(c)
            golden_ok &= ok & np.isfinite(v)
        return self.target_nonfinite() & golden_ok

    def group_of_row(self) -> np.ndarray:
        """Index of the API group of every row."""
        g = np.zeros(self.n, dtype=np.int64)
        if self.n:
            g[self.starts[1:]] = 1
            g = np.cumsum(g)
        return g
