"""One target/golden dump pair -> one report table (match -> metrics -> highlight)."""

from __future__ import annotations

import logging
import os
import pickle
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Tuple

import numpy as np

from msprobe.core.compare import highlight as hl
from msprobe.core.compare import stats as st
from msprobe.core.compare import tensor as tm
from msprobe.core.compare import verdict as vd
from msprobe.core.compare.config import CompareConfig
from msprobe.core.compare.match import RULE_WRAPPER, Matches, match_exact, match_fuzzy, match_mapped
from msprobe.core.dump.reader import (MODE_MD5, MODE_STATISTICS, MODE_TENSOR, NO_VALUE, CompactValues, DumpRows, dump_mode,
                                      read_dump)
from msprobe.core.errors import MsprobeError
from msprobe.core.io.columns import ChunkedColumn, CodedColumn, ListLike, SparseColumn, TakenColumn

log = logging.getLogger("msprobe")

NA = "N/A"
BASIC = [
    "NPU Name", "Bench Name", "NPU Dtype", "Bench Dtype", "NPU Tensor Shape", "Bench Tensor Shape",
    "NPU Requires_grad", "Bench Requires_grad",
]
SUMMARY = ["NPU max", "NPU min", "NPU mean", "NPU l2norm", "Bench max", "Bench min", "Bench mean", "Bench l2norm"]
STAT_DIFF = ["Max diff", "Min diff", "Mean diff", "L2norm diff", "MaxRelativeErr", "MinRelativeErr", "MeanRelativeErr", "NormRelativeErr"]
TENSOR_METRICS = ["Cosine", "EucDist", "MaxAbsErr", "MaxRelativeErr", "One Thousandth Err Ratio", "Five Thousandths Err Ratio"]
MSG_UNMATCHED = "No bench data matched."
MSG_WARN = "Need double check api accuracy. "
MSG_RG = "Requires_grad inconsistent. "
MSG_FUZZY = " Fuzzy matching data, the comparison accuracy may be affected."
STACK_COL = "NPU_Stack_Info"
MATCH_COL = "Match"
MSG_ARG_EQUAL = "Non-tensor argument, compared by value: equal."
MD5_NOISE = "Different (within noise)"  # md5 Result of a CRC difference the verdict finds within rounding
MSG_ARG_DIFF = "Non-tensor argument, compared by value: differs."


@dataclass
class Report:
    """A finished comparison table plus what the console summary needs."""

    mode: str
    header: List[str]
    columns: List[list]
    styles: Optional[np.ndarray]  # int8 per row (0 none, 1 red = FAIL, 2 yellow = WARN) or None (no highlighting)
    names: List[str]
    apis: List[str]
    matched: int
    worst: List[Tuple[str, str]] = field(default_factory=list)  # (row name, why)
    first_red: Optional[Tuple[int, str]] = None  # (row index, name)
    failing: int = 0  # rows that fail the mode's accuracy test (Warning / Different / Accuracy No)
    layer_rows: Optional[Dict[str, str]] = None  # -lm: {target row: golden row}, saved as data_mapping_<ts>.yaml
    # one verdict per row (msprobe.core.compare.verdict: NOT_COMPARED, PASS, NOISE, WARN, FAIL); colour, Result,
    # the summary, worst ops and the advisor derive from it
    verdict: Optional[np.ndarray] = None  # int8 per row
    why: List[str] = field(default_factory=list)  # short reason per row ("" for PASS / NOT_COMPARED)
    score: Optional[np.ndarray] = None  # float64 per row: scaled error (|difference| / magnitude), for ranking
    unit: Optional[np.ndarray] = None  # float64 per row: unit roundoff of the lower-precision dtype (noise unit)
    ref_styles: Optional[np.ndarray] = None  # the reference's rule colours (compare.md §6), for comparison only
    # int64 per row: position in execution order (forward rows in report order, then backward rows, then
    # parameter gradients, which a dump lists with the forward call but computes in backward)
    exec_pos: Optional[np.ndarray] = None
    # red rows where a difference enters the run through an input no compared op produced -> the nearest
    # target-only (unmatched) API call before it, e.g. 'Tensor.__mul__.0.forward' ("" when none is near)
    entered_from: Dict[int, str] = field(default_factory=dict)
    n_rows: Optional[int] = None  # set on a slim report (see slim()), whose names are dropped

    @property
    def rows(self) -> int:
        return self.n_rows if self.n_rows is not None else len(self.names)

    @property
    def is_slim(self) -> bool:
        return self.n_rows is not None

    def slim(self) -> "Report":
        """What the console summary needs once the report is written and the advisor has run: mode, header,
        counts, the verdict and noise unit per row (9 bytes a row), first red row with its reason, worst ops,
        and the columns the summary counts (tensor 'Accuracy Reached or Not', md5 'Result'); every other
        column, the names, the colours and the scores are dropped (``columns`` holds None for them, ``why``
        is ``{first red row: reason}``).  A rank worker returns this to the parent, so the parent's memory
        does not grow with the number of ranks (``msprobe compare -da`` keeps the whole reports)."""
        if self.is_slim:
            return self
        keep = {"Accuracy Reached or Not"} if self.mode == MODE_TENSOR else {"Result"} if self.mode == MODE_MD5 else set()
        cols = [c if h in keep else None for h, c in zip(self.header, self.columns)]
        why = {self.first_red[0]: self.why[self.first_red[0]]} if (self.first_red and self.why) else {}
        return Report(self.mode, list(self.header), cols, None, [], [], self.matched, worst=list(self.worst),
                      first_red=self.first_red, failing=self.failing, layer_rows=None, verdict=self.verdict,
                      why=why, unit=self.unit, n_rows=self.rows)

    @property
    def red(self) -> int:
        """Rows judged FAIL (coloured red when highlighting is on)."""
        return 0 if self.verdict is None else int(np.count_nonzero(self.verdict == vd.FAIL))

    @property
    def yellow(self) -> int:
        """Rows judged WARN (coloured yellow when highlighting is on)."""
        return 0 if self.verdict is None else int(np.count_nonzero(self.verdict == vd.WARN))


def _take(values: list, idx: np.ndarray, fill=NA) -> list:
    """values[idx] with -1 -> fill (idx is an int64 array)."""
    if isinstance(values, (CompactValues, ListLike)):
        return values.take(idx, fill)
    if len(idx) and idx.min() >= 0:
        return [values[i] for i in idx.tolist()] if not isinstance(values, np.ndarray) else values[idx].tolist()
    return [values[i] if i >= 0 else fill for i in idx.tolist()]


def _in_order(idx: np.ndarray, n: int) -> bool:
    """idx is 0, 1, ..., n-1."""
    return len(idx) == n and (n == 0 or (idx[0] == 0 and idx[-1] == n - 1 and bool(np.all(np.diff(idx) == 1))))


def _taken(values, idx: np.ndarray, fill=NA):
    """values[idx] for a report column read by the verdict and the writers: a :class:`TakenColumn` (cells made a
    chunk at a time) for a dump's coded column, else the list :func:`_take` gives."""
    if isinstance(values, (CodedColumn, SparseColumn)):
        return TakenColumn(values, idx, fill)
    return _take(values, idx, fill)


def _join_msg(base: List[str], extra: List[str], sep: str = "") -> List[str]:
    return [b + sep + e if (b and e and sep) else (b + e) for b, e in zip(base, extra)]


def compare_dumps(
    cfg: CompareConfig,
    target_json: str,
    golden_json: str,
    tensor_loader: Optional[Callable[[str], np.ndarray]] = None,
    progress: Optional[Callable[..., None]] = None,
) -> Report:
    """Compare two dump.json files.  ``progress(stage, done, total, unit=None, detail=None)`` is told the
    stages read, match and metrics as work advances (msprobe.core.progress)."""
    tick = progress or (lambda *_: None)
    tick("read", 0, 2, "files")
    t, g = _read_both(cfg, target_json, golden_json)
    tick("read", 2, 2, "files", f"{len(t):,} + {len(g):,} rows")
    mode = dump_mode(t, g)
    if len(t) == 0:
        raise MsprobeError(f"target dump.json {target_json} holds no API or module data; nothing to compare (was the dump started?)")
    layer_rows = None
    tick("match", 0, len(t), "rows")
    if cfg.mappings.any:
        m, layer_rows = _match_with_mappings(cfg, t, g, target_json, golden_json)
    else:
        m = match_fuzzy(t, g) if cfg.fuzzy else match_exact(t, g)
        if not cfg.fuzzy and RULE_WRAPPER not in m.rule:
            g.names = None  # an exact match pairs equal names: the Bench Name cells are the target's (_basic)
    tick("match", len(t), len(t), "rows", f"{int(m.matched.sum()):,} matched")
    if mode == MODE_STATISTICS:
        tick("metrics", 0, len(m), "rows", mode)
        rep = _statistics(cfg, t, g, m)
        tick("metrics", len(m), len(m), "rows", mode)
    elif mode == MODE_MD5:
        tick("metrics", 0, len(m), "rows", mode)
        rep = _md5(cfg, t, g, m)
        tick("metrics", len(m), len(m), "rows", mode)
    else:
        tick("metrics", 0, None, "tensor pairs", mode)
        rep = _tensor(cfg, t, g, m, target_json, golden_json, tensor_loader, tick)
    if t.stack:
        rep.header.append(STACK_COL)
        rep.columns.append([s if s is not None else NA for s in _take(t.stack, m.target)])
    if mode == MODE_TENSOR:
        tdn = _take(t.data_name, m.target)
        gdn = _take(g.data_name, m.golden)
        rep.header.append("Data_name")
        rep.columns.append([str([a, b]) for a, b in zip(tdn, gdn)])
    if cfg.match_column:
        rep.header.append(MATCH_COL)
        rep.columns.append(list(m.rule))
    rep.layer_rows = layer_rows
    del t, g  # (what the report does not hold of the dumps is free now: give it back before the writing)
    _trim_heap()
    return rep


def _match_with_mappings(cfg: CompareConfig, t: DumpRows, g: DumpRows, target_json: str, golden_json: str):
    """Match through the -am/-cm/-dm/-lm mappings; returns the matches and the layer mapping's row pairs."""
    from msprobe.core.compare import mapping as mp

    maps = mp.load_mappings(cfg.mappings)
    mp.check_user_ranges(t, g, maps)
    layer_pairs = None
    if maps.layer_rules is not None:
        layer_pairs = _layer_pairs(maps.layer_rules, t, g, target_json, golden_json)
    keys, rules, name_only = mp.target_keys(t, g, maps, layer_pairs)
    m = match_mapped(t, g, keys, rules, name_only, fuzzy=cfg.fuzzy)
    layer_rows = None
    if layer_pairs is not None:   # the pairs that matched (same shape, dtype of one family), saved for -dm
        layer_rows = {t.names[i]: g.names[j] for i, j in zip(m.target.tolist(), m.golden.tolist())
                      if j >= 0 and m.rule[i] == mp.RULE_LAYER}
    return m, layer_rows


def _layer_pairs(rules, t: DumpRows, g: DumpRows, target_json: str, golden_json: str) -> Dict[str, str]:
    """{target entry: golden entry} of the layer mapping, from both dumps' construct.json and stack.json."""
    from msprobe.core.compare.layer_mapping import compute_layer_mapping
    from msprobe.core.fileio import load_dump_json, load_json

    sides = []
    for path, side in ((target_json, "target"), (golden_json, "golden")):
        d = os.path.dirname(path)
        files = [os.path.join(d, n) for n in ("construct.json", "stack.json")]
        present = [os.path.isfile(f) for f in files]
        if not all(present):
            missing = [os.path.basename(f) for f, ok in zip(files, present) if not ok]
            raise MsprobeError(f"-lm needs construct.json and stack.json next to each dump.json; the {side} dir {d} "
                               f"has no {' or '.join(missing)} (dump with level L0 or mix)")
        data = load_dump_json(path, f"{side} dump.json").get("data") or {}
        sides.append((data, load_json(files[0], "construct.json") or {}, load_json(files[1], "stack.json") or {}))
    (nd, nc, ns), (bd, bc, bs) = sides
    return compute_layer_mapping(nd, bd, nc, bc, ns, bs, rules,
                                 npu_framework=t.framework or None, bench_framework=g.framework or None)


PARALLEL_PARSE_BYTES = 4 * 1024 * 1024


def _read_both(cfg: CompareConfig, target_json: str, golden_json: str) -> Tuple[DumpRows, DumpRows]:
    """Parse both dumps; big ones in parallel (the golden side in a forked process)."""
    import multiprocessing as mp

    try:
        size = os.path.getsize(target_json) + os.path.getsize(golden_json)
    except OSError:
        size = 0
    parallel = (
        size >= PARALLEL_PARSE_BYTES and cfg.jobs != 1 and (os.cpu_count() or 1) > 1
        and mp.current_process().name == "MainProcess" and "fork" in mp.get_all_start_methods()
    )
    if not parallel:
        t = _load_side(target_json, "target", cfg.stack_path)
        held = [_load_side(golden_json, "golden", "", numbers=False)]  # the golden stack is never shown
        g = _compacted(held) if size >= PARALLEL_PARSE_BYTES else held.pop()
        _restore_numbers(g)
        _trim_heap()  # (what preparing the golden statistics left free)
        return t, g
    import tempfile
    from concurrent.futures import ProcessPoolExecutor

    try:
        spool = tempfile.TemporaryFile(prefix="msprobe-golden-")  # (no name: nothing left if killed)
    except OSError:
        t = _load_side(target_json, "target", cfg.stack_path)
        return t, _load_side(golden_json, "golden", "")
    with spool:
        with ProcessPoolExecutor(max_workers=1, mp_context=mp.get_context("fork")) as pool:
            fut = pool.submit(_load_side_sent, golden_json, "golden", "", spool.fileno())
            t = _load_side(target_json, "target", cfg.stack_path)
            spooled = fut.result()
        # the worker has ended (its memory is free): read its rows from the spool a buffer at a time, instead
        # of one pickled bytes object beside both processes' rows
        if spooled:
            spool.seek(0)
            g = _unspool(spool)
        else:  # (the spool could not be written, e.g. a full temp dir: parse the golden side here)
            g = _load_side(golden_json, "golden", "")
    _restore_numbers(g)
    _trim_heap()  # (what unpickling the golden side left free)
    return t, g


def _load_side_sent(path: str, side: str, stack_path: Optional[str], spool_fd: Optional[int] = None):
    """:func:`_load_side` in the worker process, its result to be pickled back to the parent: without the
    statistics' float values and number masks, which are (or are made from) the dump's own columns and
    which pickle would send as copies kept beside those columns; :func:`_restore_numbers` remakes them.

    ``spool_fd``: an open file (inherited from the parent) to pickle the rows into; then the result is True
    (written) or False (could not be written: the parent parses the side itself)."""
    # the numbers are prepared by the parent once this process has ended: at the moment both processes are at
    # their largest (each holding one side), this one holds only its rows
    rows = _load_side(path, side, stack_path, numbers=False)
    if spool_fd is None:
        return rows
    try:
        with os.fdopen(os.dup(spool_fd), "wb", buffering=1 << 20) as fh:
            _spool(rows, fh)
        written = True
    except OSError:
        written = False
    del rows
    _trim_heap()  # (this process lives on until the parent has parsed its side: hold nothing meanwhile)
    return written


def _compacted(held: list) -> DumpRows:
    """The rows in ``held`` (taken out of it) rebuilt through an unnamed temp file: parsed after the other side,
    their objects lie among the parse's freed memory, which the process cannot give back; rebuilt, they lie
    together and the holes go back to the system (about 80 MB less for a 200 MB dump.json).  The rows
    themselves when the temp dir cannot take them."""
    import tempfile

    try:
        fh = tempfile.TemporaryFile(prefix="msprobe-golden-")
    except OSError:
        return held.pop()
    with fh:
        try:
            _spool(held[0], fh)
        except OSError:
            return held.pop()
        held.clear()
        _trim_heap()
        fh.seek(0)
        return _unspool(fh)


#: names pickled at a time into the spool
SPOOL_NAMES = 1 << 16


def _spool(rows: DumpRows, fh) -> None:
    """Pickle rows into a file: the rows without their names, the number of name slices, then the names a slice
    at a time (no pickle memo of 750,000 strings and no second copy of them at once)."""
    names = rows.names
    rows.names = []
    try:
        pickle.dump(rows, fh, protocol=pickle.HIGHEST_PROTOCOL)
    finally:
        rows.names = names
    slices = range(0, len(names), SPOOL_NAMES)
    pickle.dump(len(slices), fh, protocol=pickle.HIGHEST_PROTOCOL)
    for a in slices:
        pickle.dump(names[a:a + SPOOL_NAMES], fh, protocol=pickle.HIGHEST_PROTOCOL)


def _unspool(fh) -> DumpRows:
    """The rows :func:`_spool` wrote."""
    rows = pickle.load(fh)
    names: list = []
    for _ in range(pickle.load(fh)):
        names.extend(pickle.load(fh))
    rows.names = names
    return rows


def _restore_numbers(rows: DumpRows) -> None:
    """The parsed statistics of rows from :func:`_load_side_sent`, as :func:`_load_side` makes them."""
    if rows.parsed is None and rows.task == MODE_STATISTICS and not rows.has_md5:
        rows.parsed = _parsed_of(rows)


def _load_side(path: str, side: str, stack_path: Optional[str], numbers: bool = True) -> DumpRows:
    """Parse one dump and, for statistics dumps, prepare its numbers (``numbers``; else
    :func:`_restore_numbers` does it later)."""
    rows = read_dump(path, side, stack_path=stack_path)
    if rows.task == MODE_STATISTICS and not rows.has_md5:
        if numbers:
            rows.parsed = _parsed_of(rows)
        rows.data_name, rows._md5_raw = [], []  # (tensor and md5 modes only) a pointer a row each, not kept
    _trim_heap()
    return rows


def _parsed_of(rows: DumpRows) -> list:
    return [st.parsed_stats(c) for c in (rows.stat_max, rows.stat_min, rows.stat_mean, rows.stat_norm)]


def _trim_heap() -> None:
    """Give the C heap's free pages back to the system (glibc ``malloc_trim``; nothing elsewhere): parsing
    a big dump frees most of what it allocates, and without this the process keeps it (the two parsing
    processes of a big compare would otherwise peak together at several times the rows they hold)."""
    try:
        import ctypes

        ctypes.CDLL(None).malloc_trim(0)
    except (OSError, AttributeError, TypeError):
        pass


def _take_parsed(parsed, idx: np.ndarray):
    """A parsed_stats triple indexed by row numbers; -1 (unmatched) rows become unusable."""
    vals, ok, ref = parsed
    safe = np.where(idx >= 0, idx, 0)
    return vals[safe], ok[safe] & (idx >= 0), ref[safe]


def _basic(t: DumpRows, g: DumpRows, m: Matches) -> Tuple[List[str], List[list]]:
    # g.names is None after an exact match (compare_dumps): a matched golden row has the target row's name
    bench_names = (_take(g.names, m.golden) if g.names is not None
                   else _take(t.names, np.where(m.golden >= 0, m.target, -1)))
    cols = [
        # (every target row in order, as an exact or fuzzy match gives: the dump's own list, not a copy)
        t.names if _in_order(m.target, len(t.names)) else _take(t.names, m.target), bench_names,
        _taken(t.dtype, m.target), _taken(g.dtype, m.golden),
        _taken(t.shape, m.target), _taken(g.shape, m.golden),
        _taken(t.requires_grad, m.target), _taken(g.requires_grad, m.golden),
    ]
    return list(BASIC), cols


def _rg_consistent(t: DumpRows, g: DumpRows, m: Matches) -> Tuple[list, np.ndarray]:
    """'True'/'False' for matched rows, 'N/A' for unmatched ones; plus the inconsistent mask.

    A matched row whose one side records no requires_grad at all ('N/A': a MindSpore dump against a PyTorch one,
    MindSpore tensors have none) is 'N/A' too, not inconsistent: the reference says 'False' there, which makes
    every row of a cross-framework compare a Warning."""
    trg = _take(t.requires_grad, m.target)
    grg = _take(g.requires_grad, m.golden)
    matched = m.matched.tolist()
    cells = []
    bad = np.zeros(len(m), dtype=bool)
    for i, (a, b, ok) in enumerate(zip(trg, grg, matched)):
        if not ok or (a != b and (a == NA or b == NA)):
            cells.append(NA)
        elif a == b:
            cells.append("True")
        else:
            cells.append("False")
            bad[i] = True
    return cells, bad


def _summary_cols(t: DumpRows, g: DumpRows, m: Matches) -> List[ChunkedColumn]:
    """The NPU/Bench max/min/mean/l2norm cells (st.display of the dump's values; 'N/A' on unmatched golden
    cells), made a row range at a time from the dump's own value lists."""
    matched = m.matched

    def column(raw: list, idx: np.ndarray, golden: bool) -> ChunkedColumn:
        def make(a: int, b: int) -> list:
            disp = st.display(_take(raw, idx[a:b], fill=None) if golden else _take(raw, idx[a:b]))
            if golden:
                disp = [v if ok else NA for v, ok in zip(disp, matched[a:b].tolist())]
            return disp
        return ChunkedColumn(len(idx), make)

    return ([column(c, m.target, False) for c in (t.stat_max, t.stat_min, t.stat_mean, t.stat_norm)]
            + [column(c, m.golden, True) for c in (g.stat_max, g.stat_min, g.stat_mean, g.stat_norm)])


def _nonfinite(*cols) -> np.ndarray:
    out = None
    for col in cols:
        v, ok = st.numeric(col)
        bad = ok & ~np.isfinite(v)
        out = bad if out is None else (out | bad)
    return out


def _at(side: np.ndarray, idx: np.ndarray) -> np.ndarray:
    """side[idx] of a bool array per dump row, False where idx is -1 (a report row without that side)."""
    out = np.zeros(len(idx), dtype=bool)
    has = idx >= 0
    out[has] = side[idx[has]]
    return out


def _nonfinite_at(idx: np.ndarray, *cols) -> np.ndarray:
    """Per report row: one of the dump columns holds a number (or numeric text) that is NaN or +-inf at row
    idx (False where idx is -1): what :func:`_nonfinite` gives on the taken values, computed on the dump's
    columns (their own arrays for CompactValues) instead of lists of Python floats."""
    return _at(_nonfinite(*cols), idx)


def _number_at(col, idx: np.ndarray) -> np.ndarray:
    """Per report row: col[idx] is a float or an int (not a bool) other than NaN (False where idx is -1), as
    :func:`_number_mask` says of the displayed cell, from the dump's column without making the cells."""
    if isinstance(col, CompactValues):
        vals, ok, other = col.numbers()
        ok = ok & ~np.isnan(vals)  # (kinds float and int; ints are never NaN)
        for i, v in other.items():
            if v.__class__ in (float, int) and v == v:
                ok[i] = True
    else:
        if isinstance(col, np.ndarray):
            col = col.tolist()  # (as _take gives its values: Python numbers)
        num_types = (float, int)
        ok = np.fromiter((v.__class__ in num_types and v == v for v in col), dtype=bool, count=len(col))
    return _at(ok, idx)


def _number_mask(col) -> Tuple[np.ndarray, np.ndarray]:
    """(float values, is-a-number-and-not-NaN) for a column of cells."""
    num_types = (float, int)
    ok = np.array([v.__class__ in num_types and v == v for v in col], dtype=bool)
    vals = np.full(len(col), np.nan)
    idx = np.flatnonzero(ok)
    if len(idx):
        vals[idx] = np.fromiter((col[i] for i in idx.tolist()), dtype=np.float64, count=len(idx))
    return vals, ok


def _highlight(t: DumpRows, g: DumpRows, m: Matches, max_diff, rg_bad, msg, **mode_cols):
    """Colour the rows and append the highlight messages; max_diff: the Max diff / MaxAbsErr cells, or their
    (values, is-a-number) arrays; mode_cols: rel (statistics) or one_thousandth + cosine (tensor)."""
    # NPU max / Bench max cells (_summary_cols) hold a number where the dump's value is one (display keeps
    # numbers, the golden side is "N/A" on unmatched rows): read from the columns, the cells are not made
    nmax_ok = _number_at(t.stat_max, m.target)
    bmax_ok = _number_at(g.stat_max, m.golden) & m.matched
    md_vals, md_ok = max_diff if isinstance(max_diff, tuple) else _number_mask(max_diff)
    h = hl.HighlightInput(
        api=_taken(t.api, m.target), state=_taken(t.state, m.target),
        npu_nonfinite=_nonfinite_at(m.target, t.stat_max, t.stat_min),
        npu_max_num=nmax_ok, bench_max_num=bmax_ok,
        max_diff=md_vals, max_diff_num=md_ok, rg_inconsistent=rg_bad, **mode_cols,
    )
    styles, hmsgs = hl.highlight(h, tensor_mode="cosine" in mode_cols)
    return styles, _join_msg(msg, hmsgs, "\n")


def _stat_arrays(rows: DumpRows, idx: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    """(4, n) Max/Min/Mean/Norm values and number masks of one side, in report order (-1: NaN, unusable)."""
    if rows.parsed is None:
        rows.parsed = [st.parsed_stats(c) for c in (rows.stat_max, rows.stat_min, rows.stat_mean, rows.stat_norm)]
    vals, oks = [], []
    raw = (rows.stat_max, rows.stat_min, rows.stat_mean, rows.stat_norm)
    for k in range(4):
        v, ok, _ = _take_parsed(rows.parsed[k], idx)
        v = np.where(ok, v, np.nan)
        # bool tensors record Max = any, Min = all as 'True' / 'False': numbers for the verdict
        bad = np.flatnonzero(~ok & (idx >= 0))
        if len(bad):
            for i, x in zip(bad.tolist(), _take(raw[k], idx[bad])):
                if x == "True" or x == "False":
                    v[i] = 1.0 if x == "True" else 0.0
                    ok[i] = True
        vals.append(v)
        oks.append(ok)
    return np.vstack(vals), np.vstack(oks)


def _judge(t: DumpRows, g: DumpRows, m: Matches, basic: List[list], rg_bad=None, **extra) -> vd.Judgement:
    """The verdict of every report row (verdict.judge on this pair's columns); basic: the BASIC columns."""
    ts, tok = _stat_arrays(t, m.target)
    gs, gok = _stat_arrays(g, m.golden)
    facts = vd.Facts(
        names=basic[0], api=_taken(t.api, m.target), state=_taken(t.state, m.target),
        matched=m.matched, shape=basic[4], t_dtype=basic[2], g_dtype=basic[3],
        t_stats=ts, g_stats=gs, t_ok=tok, g_ok=gok,
        t_value=_taken(t.value, m.target, fill=NO_VALUE) if t.value else None,
        g_value=_taken(g.value, m.golden, fill=NO_VALUE) if g.value else None,
        rg_bad=rg_bad, **extra,
    )
    return vd.judge(facts)


def _apply(rep: Report, j: vd.Judgement, cfg: CompareConfig) -> None:
    """Verdict fields, colours (highlighting on), failing count, first red row and worst ops of a report."""
    rep.verdict, rep.why, rep.score, rep.unit = j.verdict, j.why, j.score, j.unit
    rep.styles = _styles(j.verdict) if cfg.highlight else None
    rep.failing = int(np.count_nonzero(j.verdict == vd.FAIL))
    rep.exec_pos = j.exec_pos
    rep.entered_from = j.entered_from or {}
    fails = np.flatnonzero(j.verdict == vd.FAIL)
    if len(fails) and j.exec_pos is not None:
        fails = fails[np.argsort(j.exec_pos[fails], kind="stable")]  # first in execution order
    rep.first_red = (int(fails[0]), rep.names[int(fails[0])]) if len(fails) else None
    rep.worst = _worst(rep, j)


def _styles(verdict: np.ndarray) -> np.ndarray:
    return np.where(verdict == vd.FAIL, hl.RED, np.where(verdict == vd.WARN, hl.YELLOW, hl.NONE)).astype(np.int8)


def _verdict_notes(msg: List[str], j: vd.Judgement, flagged: np.ndarray, ref_msgs: Optional[List[str]],
                   ref_reason: str) -> List[str]:
    """Err_message plus our reason: on every FAIL / WARN row, and on rows a reference rule flags (its Result,
    Accuracy or colour) that our verdict clears, so the two never disagree silently."""
    out = list(msg)
    v = j.verdict
    note = (v >= vd.WARN) | (flagged & (v >= vd.PASS) & (v <= vd.NOISE))
    for i in np.flatnonzero(note).tolist():
        text = f"{vd.NAMES[int(v[i])]}: {j.why[i] or 'both sides equal'}"
        if v[i] >= vd.WARN and ref_msgs is not None and ref_msgs[i]:
            text = ref_msgs[i] + "\n" + text  # the reference's rule agrees: keep its message first
        elif v[i] <= vd.NOISE and ref_msgs is not None and ref_msgs[i]:
            text += f" (reference rule: {ref_msgs[i].splitlines()[0]}; not a fault here)"
        elif v[i] <= vd.NOISE:
            text += f" ({ref_reason}; not a fault here)"
        out[i] = out[i] + "\n" + text if out[i] else text
    return out


def _statistics(cfg: CompareConfig, t: DumpRows, g: DumpRows, m: Matches) -> Report:
    header, cols = _basic(t, g, m)
    summary_cells = _summary_cols(t, g, m)
    matched = m.matched
    if t.parsed is None or g.parsed is None:
        t.parsed = [st.parsed_stats(c) for c in (t.stat_max, t.stat_min, t.stat_mean, t.stat_norm)]
        g.parsed = [st.parsed_stats(c) for c in (g.stat_max, g.stat_min, g.stat_mean, g.stat_norm)]
    rg_cells, rg_bad = _rg_consistent(t, g, m)
    j = _judge(t, g, m, cols, rg_bad=rg_bad)  # (first: the verdict's temporaries are the peak of a big compare)
    # the differences and relative errors stay arrays; their cells are made while the report is written
    sd = [st.StatDiff(_take_parsed(t.parsed[k], m.target), _take_parsed(g.parsed[k], m.golden), matched)
          for k in range(4)]
    n = len(m)
    diff_cells = [ChunkedColumn(n, d.diff_cells) for d in sd]
    rel_cells = [ChunkedColumn(n, d.rel_cells) for d in sd]
    warn = sd[0].warn | sd[1].warn | sd[2].warn | sd[3].warn
    msg = [("" if ok else MSG_UNMATCHED) + (MSG_WARN if w else "") + (MSG_RG if bad else "")
           for ok, w, bad in zip(matched.tolist(), warn.tolist(), rg_bad.tolist())]
    # Result follows the verdict (FAIL and WARN: Warning); the reference's own flag is explained in Err_message
    flagged_v = j.verdict >= vd.WARN
    result = [("Warning" if w else "") if ok else NA for w, ok in zip(flagged_v.tolist(), matched.tolist())]
    ref_styles, ref_msgs = None, None
    if cfg.highlight:
        ref_styles, ref_msgs = _highlight(t, g, m, (sd[0].diff_values, sd[0].good.copy()), rg_bad,
                                          [""] * len(msg), rel=sd[0].rel_fraction)
    ref_flag = warn | (ref_styles > 0 if ref_styles is not None else False)
    msg = _verdict_notes(msg, j, ref_flag, ref_msgs, "the reference's check divides a difference by a statistic near zero")
    header += STAT_DIFF + SUMMARY + ["Requires_grad Consistent", "Result", "Err_message"]
    cols += diff_cells + rel_cells + summary_cells + [rg_cells, result, msg]
    names = cols[0]
    rep = Report(MODE_STATISTICS, header, cols, None, names, _taken(t.api, m.target), int(matched.sum()))
    rep.ref_styles = ref_styles
    _apply(rep, j, cfg)
    return rep


def _md5(cfg: CompareConfig, t: DumpRows, g: DumpRows, m: Matches) -> Report:
    header, cols = _basic(t, g, m)
    tm5 = _take(t.md5, m.target)
    gm5 = _take(g.md5, m.golden)
    rg_cells, _ = _rg_consistent(t, g, m)
    matched = m.matched.tolist()
    result = [NA if not ok else ("pass" if a == b else "Different") for a, b, ok in zip(tm5, gm5, matched)]
    header += ["NPU MD5", "BENCH MD5", "Requires_grad Consistent", "Result"]
    cols += [tm5, gm5, rg_cells, result]
    rep = Report(MODE_MD5, header, cols, None, cols[0], _take(t.api, m.target), int(m.matched.sum()))
    equal = np.array([r == "pass" for r in result], dtype=bool)
    # the verdict judges a CRC difference by the statistics recorded next to the CRC; Result follows it:
    # 'Different' on red and yellow rows only, MD5_NOISE where the CRCs differ within rounding
    j = _judge(t, g, m, cols, equal=equal)
    noise = np.flatnonzero(~equal & m.matched & (j.verdict <= vd.NOISE))
    for i in noise.tolist():
        result[i] = MD5_NOISE
    _apply(rep, j, cfg)
    return rep


def _tensor(cfg, t: DumpRows, g: DumpRows, m: Matches, target_json, golden_json, loader, tick) -> Report:
    header, cols = _basic(t, g, m)
    summary_cells = _summary_cols(t, g, m)
    n = len(m)
    tdir = os.path.join(os.path.dirname(target_json), "dump_tensor_data")
    gdir = os.path.join(os.path.dirname(golden_json), "dump_tensor_data")
    tdn = _take(t.data_name, m.target)
    gdn = _take(g.data_name, m.golden)
    matched = m.matched.tolist()
    metrics: List[Optional[tuple]] = [None] * n
    todo_idx: List[int] = []
    pairs: List[Tuple[str, str]] = []
    tval = _take(t.value, m.target, fill=NO_VALUE) if t.value else [NO_VALUE] * n
    gval = _take(g.value, m.golden, fill=NO_VALUE) if g.value else [NO_VALUE] * n
    for i in range(n):
        if not matched[i]:
            metrics[i] = (tm.UNSUPPORTED,) * 6 + (MSG_UNMATCHED,)
        elif tdn[i] == "-1" and gdn[i] == "-1" and tval[i] is not NO_VALUE and gval[i] is not NO_VALUE:
            # a non-tensor argument (eps, dim, p, a shape) has no data file: it is compared by value
            same = tval[i] == gval[i] or (tval[i] != tval[i] and gval[i] != gval[i])
            metrics[i] = (tm.UNSUPPORTED,) * 6 + (MSG_ARG_EQUAL if same else MSG_ARG_DIFF,)
        elif tdn[i] == "-1":
            metrics[i] = (tm.UNSUPPORTED,) * 6 + (tm.MSG_NO_NPU_FILE,)
        elif gdn[i] == "-1":
            metrics[i] = (tm.UNSUPPORTED,) * 6 + (tm.MSG_NO_BENCH_FILE,)
        else:
            todo_idx.append(i)
            pairs.append((os.path.join(tdir, tdn[i]), os.path.join(gdir, gdn[i])))
    if pairs:
        for d, side, js in ((tdir, "target", target_json), (gdir, "golden", golden_json)):
            if not os.path.isdir(d):
                raise MsprobeError(
                    f"{side} dump {js} is a tensor dump but {d} does not exist; copy the dump_tensor_data directory next to dump.json"
                )
        links = [p for pair in pairs for p in pair if os.path.islink(p)]
        if links:
            raise MsprobeError(
                f"tensor file {links[0]} is a symbolic link; msprobe does not follow links on inputs for safety: copy the real files into dump_tensor_data"
            )
        missing = [p for pair in pairs for p in pair if not os.path.isfile(p)]
        if missing:
            more = f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""
            raise MsprobeError(
                f"tensor file {missing[0]}{more} named by dump.json is missing; copy the complete dump_tensor_data directory"
            )
    if loader is None:
        from msprobe.core.io.tensors import load_tensor as loader  # noqa: N813
    done = [0]

    def _advance(k: int) -> None:
        done[0] += k
        tick("metrics", done[0], len(pairs), "tensor pairs", MODE_TENSOR)

    results = tm.compare_files(pairs, loader, jobs=cfg.jobs, progress=_advance, backend=getattr(cfg, "backend", None))
    for i, res in zip(todo_idx, results):
        metrics[i] = res
        if cfg.tensor_log:
            log.info("%s: Cosine %s, MaxAbsErr %s, %s", tdn[i], res[0], res[2], res[6] or "ok")
    tnames = cols[0]
    gnames = cols[1]
    rg_cells, rg_bad = _rg_consistent(t, g, m)
    metric_cols = [[mt[k] for mt in metrics] for k in range(6)]
    accuracy = [tm.check_accuracy(mt[0], mt[2]) if ok else "None" for mt, ok in zip(metrics, matched)]
    msg = []
    for i in range(n):
        base = MSG_RG if rg_bad[i] else ""
        text = base + metrics[i][6]
        if matched[i] and cfg.fuzzy and tnames[i] != gnames[i]:
            text += MSG_FUZZY
        msg.append(text)
    pos_mismatch = np.array([mt[6].find(tm.MSG_NAN_POS) >= 0 for mt in metrics], dtype=bool)
    # the verdict uses the statistics (as in statistics mode), not MaxAbsErr: one element of a ReLU or
    # max-pool gradient flips with rounding and makes MaxAbsErr as large as the tensor itself
    j = _judge(t, g, m, cols, rg_bad=rg_bad, pos_mismatch=pos_mismatch)
    ref_styles, ref_msgs = None, None
    if cfg.highlight:
        ref_styles, ref_msgs = _highlight(t, g, m, metric_cols[2], rg_bad, [""] * n,
                                          one_thousandth=_number_mask(metric_cols[4])[0], cosine=_number_mask(metric_cols[0])[0])
    no = np.array([a == "No" for a in accuracy], dtype=bool)
    ref_flag = no | (ref_styles > 0 if ref_styles is not None else False)
    msg = _verdict_notes(msg, j, ref_flag, ref_msgs,
                         "the reference's fixed Cosine / MaxAbsErr thresholds do not scale with the tensor or its dtype")
    header += TENSOR_METRICS + SUMMARY + ["Requires_grad Consistent", "Accuracy Reached or Not", "Err_message"]
    cols += metric_cols + summary_cells + [rg_cells, accuracy, msg]
    rep = Report(MODE_TENSOR, header, cols, None, tnames, _take(t.api, m.target), int(m.matched.sum()))
    rep.ref_styles = ref_styles
    _apply(rep, j, cfg)
    return rep


def _worst(rep: Report, j: vd.Judgement, k: int = 5) -> List[Tuple[str, str]]:
    """The k worst APIs (one row each): FAIL rows (differing arguments first), then WARN rows, each by scaled
    error (the statistic's difference over the tensor's magnitude, as the verdict measures it)."""
    out: List[Tuple[str, str]] = []
    seen = set()
    for i in vd.ranking(j.verdict, j.score, j.is_arg).tolist():
        api = rep.apis[i]
        if api in seen:
            continue
        seen.add(api)
        out.append((rep.names[i], f"{vd.NAMES[int(j.verdict[i])]}: {j.why[i]}"))
        if len(out) == k:
            break
    return out
