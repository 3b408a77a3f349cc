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
from msprobe.core.io.columns import materialise

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
        return None if i is None else materialise(self.report.columns[i])  # a ChunkedColumn -> its list

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
            # "Different (within noise)": the CRCs differ but the statistics agree within rounding (verdict NOISE)
            err = np.where(res == "Different", 1.0,
                           np.where((res == "pass") | (res == "Different (within noise)"), 0.0, np.nan))
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

    # ------------------------------------------------------------------ execution order
    def exec_group_order(self) -> np.ndarray:
        """API group indices in execution order (see :func:`execution_group_order`)."""
        if "exec_groups" not in self._cache:
            self._cache["exec_groups"] = execution_group_order(self.group_api)
        return self._cache["exec_groups"]

    def exec_order(self) -> np.ndarray:
        """Row indices in execution order: the groups in :meth:`exec_group_order`, rows inside a group kept."""
        if "exec_rows" not in self._cache:
            order = self.exec_group_order()
            starts = self.starts[order]
            lens = (self.ends - self.starts)[order]
            if len(lens):
                base = np.repeat(starts - (np.cumsum(lens) - lens), lens)
                rows = base + np.arange(int(lens.sum()), dtype=np.int64)
            else:
                rows = np.zeros(0, dtype=np.int64)
            self._cache["exec_rows"] = rows
        return self._cache["exec_rows"]

    def exec_position(self) -> np.ndarray:
        """Position of every row in execution order (the inverse of :meth:`exec_order`)."""
        if "exec_pos" not in self._cache:
            pos = np.empty(self.n, dtype=np.int64)
            pos[self.exec_order()] = np.arange(self.n, dtype=np.int64)
            self._cache["exec_pos"] = pos
        return self._cache["exec_pos"]


# ---------------------------------------------------------------------------------------------- execution order
_MODULE_HEADS = ("Module.", "Cell.")
_PGRAD = ".parameters_grad"


_MODULE_BACKWARD = re.compile(r"\.backward\.\d+$")


def _is_backward(api: str) -> bool:
    """An API backward record (``X.0.backward``) or a module backward record (``Module.x.C.backward.0``)."""
    return api.endswith(".backward") or _MODULE_BACKWARD.search(api) is not None


def _is_param_grad(api: str) -> bool:
    return _PGRAD in api and (api.endswith(_PGRAD) or api.rsplit(".", 1)[0].endswith(_PGRAD))


def execution_group_order(apis: Sequence[str]) -> np.ndarray:
    """The order in which the recorded APIs ran, as a permutation of the dump-order groups ``apis``.

    A dump.json lists forward records in call order (a module's record after the records of the APIs and
    sub-modules it called) and backward records in the order backward ran.  Parameter gradients are the
    exception: the reference's G8 dumps and msprobe's write a ``<module>.parameters_grad`` placeholder
    right after the module's forward record, so their rows sit in the forward section although the
    gradient is computed during backward.  Such a group (a parameter gradient whose nearest preceding
    record is a forward one) moves to just after the last of:

    * the module's backward records (``<module>.backward.<n>``; an unindexed G8 key holds the last
      gradient, so after the module's last backward record; an indexed G26 key ``parameters_grad.<k>``
      after the module's first backward record that follows it);
    * the backward record of the API recorded right before the module's forward record (for a leaf module
      the API that used the parameters: ``Functional.linear.0.forward`` -> ``Functional.linear.0.backward``),
      since the module's own backward hook fires before it when the module's input needs no gradient.

    When none of these is recorded, it moves to the end of the backward records that follow it; with no
    backward record after it, it stays.  Parameter gradients already inside a backward section (G26 dumps)
    keep their place.  Everything else keeps the dump order.
    """
    n = len(apis)
    keys = np.arange(n, dtype=np.float64)
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    pgrad = [g for g, a in enumerate(apis) if _PGRAD in a and _is_param_grad(a)]
    if not pgrad:
        return np.arange(n, dtype=np.int64)
    backward = np.fromiter((_is_backward(a) for a in apis), dtype=bool, count=n)
    is_pg = np.zeros(n, dtype=bool)
    is_pg[pgrad] = True
    index = {}
    for g, a in enumerate(apis):
        if backward[g]:
            index.setdefault(a, []).append(g)
    mod_bwd: dict = {}
    for a, gs in index.items():
        head, sep, _ = a.rpartition(".backward.")
        if sep and a.startswith(_MODULE_HEADS):
            mod_bwd.setdefault(head, []).extend(gs)
    for k in mod_bwd:
        mod_bwd[k].sort()
    bpos = np.flatnonzero(backward)  # backward groups, for "the first backward group after g"
    run_end = None
    for rank, g in enumerate(pgrad):
        prev = g - 1
        while prev >= 0 and is_pg[prev]:
            prev -= 1
        if prev >= 0 and backward[prev]:
            continue  # already where the gradient was computed
        api = apis[g]
        indexed = not api.endswith(_PGRAD)
        module = api[:api.index(_PGRAD)]
        anchors = [b for b in mod_bwd.get(module, ()) if b > g]
        if anchors and indexed:
            anchors = anchors[:1]
        # the API the module called last (a leaf module: the API that used the parameters): the forward API
        # record right before the module's own forward record (the nearest non-parameter-gradient record)
        k = prev - 1
        if prev >= 0 and apis[prev].startswith(_MODULE_HEADS) and k >= 0 and not is_pg[k] \
                and not backward[k] and not apis[k].startswith(_MODULE_HEADS) and apis[k].endswith(".forward"):
            anchors.extend(b for b in index.get(apis[k][:-len(".forward")] + ".backward", ()) if b > g)
        if anchors:
            dest = max(anchors)
        else:
            k = int(np.searchsorted(bpos, g + 1))
            if k == len(bpos):
                continue  # no backward recorded after it: keep the dump order
            if run_end is None:  # last group of the run of backward / parameter-gradient groups at each position
                stops = np.flatnonzero(~(backward | is_pg))
                nf = np.searchsorted(stops, np.arange(n))
                run_end = np.full(n, n - 1, dtype=np.int64)
                has = nf < len(stops)
                run_end[has] = stops[nf[has]] - 1
            dest = int(run_end[int(bpos[k])])
        keys[g] = dest + 0.5 + rank / (2.0 * (len(pgrad) + 1))
    return np.argsort(keys, kind="stable").astype(np.int64)
