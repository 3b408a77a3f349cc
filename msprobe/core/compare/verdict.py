"""One verdict per report row, from which colour, Result, the console summary, "worst ops" and the advisor
all derive (docs/compare.md, "Rule set").

Verdicts (int8, ordered by severity):

* ``NOT_COMPARED`` - unmatched row, or nothing comparable (None values, no statistics).
* ``PASS``   - both sides equal (identical -inf/inf/NaN included: a causal mask is not an error).
* ``NOISE``  - the sides differ, but no more than the two dtypes' rounding plus the error the API already
               received from its inputs explains.
* ``WARN``   - differs beyond noise, but the error is inherited from inputs that already differ beyond noise,
               or cannot be attributed (a parameter gradient whose module was not dumped).  Yellow.
* ``FAIL``   - this row introduces an error: its API's inputs agree within noise and it does not; or NaN/inf
               on the target side only; or a non-tensor argument (eps, dim, p, a shape) differs; or a tensor
               that differs beyond noise enters the run without a compared producer (the op that made it is
               unmatched or not dumped), the earliest such one only.  Red.

The error of a tensor row is measured on a scale near-zero statistics cannot blow up (``scaled error``):
the Max, Min and Mean differences divided by the tensor's magnitude ``max(|max|, |min|)`` over both sides
(finite values only), and the L2-norm difference divided by the larger norm (compare passes no MaxAbsErr:
tensor mode is judged on the same statistics).  The row's noise unit is the unit roundoff of the
lower-precision dtype of the two sides (bf16 2^-8, fp16 2^-11, fp32 2^-24, ...), at least that of the
coarsest float dtype of the pair.  The full rules and thresholds: docs/compare.md, "Rule set".

``Report.verdict`` holds one of these per row, ``Report.why`` a short reason per row ("" for plain PASS and
NOT_COMPARED rows), ``Report.score`` the scaled error (NaN where none) used for ranking, ``Report.exec_pos``
the execution order and ``Report.entered_from`` the likely producer of rows where a difference enters.
Use :func:`judge` (pure numpy on columns) or read those fields; failing rows are ``verdict == FAIL``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import List, Optional

import numpy as np

NOT_COMPARED = 0
PASS = 1
NOISE = 2
WARN = 3
FAIL = 4

NAMES = {NOT_COMPARED: "not compared", PASS: "pass", NOISE: "noise", WARN: "warn", FAIL: "fail"}

# ---------------------------------------------------------------------------------------------- thresholds
# One op's own rounding: an output may differ from the golden by this many units of the lower-precision
# dtype (in scaled error) without being suspicious.  Rounding the result (1 unit), rounding the operands
# at the op's input (1 unit) and statistics computed in the low precision themselves (1 unit) stay below
# 3 units; on the calibration pairs (2-block transformer, bf16 autocast vs fp32, statistics of every
# forward, backward and parameter-gradient row) the largest scaled error was 2.2 units, and every control
# pair of the reference fixtures and of tests/fault_injection stays clean down to 2.5 units.
K_ROUND = 3.0
# How much an op may amplify the scaled error it received from its inputs (condition number allowance).
# Calibration: on the control pair every output stayed below 1.1 x (input error + 1 unit); planted bugs
# gave 5-14 x (LayerNorm eps 0.1 instead of 1e-5: 0.061 from inputs at 0.0005; scores x1.5: 0.40).
AMP = 4.0
# Accumulated rounding: a row that differs by more than its own rounding but no more than this many units
# and no more than its inputs explain is still NOISE (rounding carried through the network); beyond it,
# an explained difference is WARN (an inherited error).
K_ACC = 16.0
# Never call a difference below 0.5% of a tensor's magnitude a fault, whatever the dtypes: reduced-precision
# accumulation inside fp32 kernels (TF32/HF32 matmuls, other reduction orders between devices) produces
# that much.  Such rows are NOISE (below the floor) when their inputs do not explain them.
MIN_FAIL = 0.005
# A float argument differing by less than this relative amount was probably computed from a tensor
# (``x.max().item()``) in a lower precision: WARN instead of FAIL.
ARG_FLOAT_REL = 2.0 ** -7
# A forward input that differs beyond its own rounding (K_ROUND units) with no compared producer enters a
# difference when one of the UNMATCHED_WINDOW API calls before it has no golden counterpart (a target-only
# op, its likely producer); without such a call only beyond accumulated rounding (K_ACC units).
UNMATCHED_WINDOW = 3
# An output is measured against its inputs' magnitude too (the smaller error counts) when it is more than
# CANCEL_RATIO times smaller than its largest input: a sum with cancellation (a bias gradient of 3e-6 from
# output gradients of 2e-3) keeps the inputs' absolute rounding.  A softmax (inputs 1.7, outputs <= 1) is not.
CANCEL_RATIO = 4.0
# At most this many inputs (the earliest first) are checked for sides made by two different compared ops (a
# pair joining two different calls) before the earliest remaining one is taken as where a difference enters.
CROSS_CHECKS = 64

# unit roundoff per dtype name (the text after the last '.', lower case; MindSpore names included)
_UNIT = {
    "bfloat16": 2.0 ** -8, "float16": 2.0 ** -11, "half": 2.0 ** -11, "float32": 2.0 ** -24, "float": 2.0 ** -24,
    "float64": 2.0 ** -53, "double": 2.0 ** -53, "complex64": 2.0 ** -24, "complex128": 2.0 ** -53,
    "float8_e4m3fn": 2.0 ** -4, "float8_e5m2": 2.0 ** -3, "float8_e4m3fnuz": 2.0 ** -4, "float8_e5m2fnuz": 2.0 ** -3,
    "bf16": 2.0 ** -8, "fp16": 2.0 ** -11, "fp32": 2.0 ** -24,
}
_INT_WORDS = ("int", "bool", "uint", "long", "short")
# largest finite value per dtype name: an input holding (about) it is a sentinel such as an additive attention
# mask filled with torch.finfo(dtype).min, not a magnitude the op's result can be measured against
_FMAX = {
    "bfloat16": 3.3895313892515355e38, "float16": 65504.0, "half": 65504.0, "float32": 3.4028234663852886e38,
    "float": 3.4028234663852886e38, "float64": 1.7976931348623157e308, "double": 1.7976931348623157e308,
    "float8_e4m3fn": 448.0, "float8_e5m2": 57344.0, "bf16": 3.3895313892515355e38, "fp16": 65504.0,
    "fp32": 3.4028234663852886e38,
}
SENTINEL_FRACTION = 0.5
_DTYPE_LABEL = {2.0 ** -8: "bf16", 2.0 ** -11: "fp16", 2.0 ** -24: "fp32", 2.0 ** -53: "fp64"}

COLLECTIVE_PREFIXES = ("Distributed", "MintDistributed", "Communication", "communication")
# APIs whose output is uninitialised memory (compared as noise, see judge)
UNINIT_APIS = {"Torch.empty", "Torch.empty_like", "Torch.empty_strided", "Tensor.new_empty", "Tensor.new_empty_strided"}
# in-place APIs that overwrite every element of the tensor they are called on without reading it: the values
# that tensor held before (often torch.empty's leftover memory: stochastic depth's torch.empty(...).bernoulli_(p),
# whose torch.empty output the dump records without values) are not an input of the result
OVERWRITE_SELF_APIS = {"Tensor.bernoulli_", "Tensor.uniform_", "Tensor.normal_", "Tensor.random_",
                       "Tensor.exponential_", "Tensor.geometric_", "Tensor.log_normal_", "Tensor.cauchy_",
                       "Tensor.fill_", "Tensor.zero_", "Tensor.copy_"}
STAT_LABELS = ("Max", "Min", "Mean", "L2 norm", "MaxAbsErr", "CRC32")
CRC = 5  # md5 dumps without statistics: only "the bytes differ" is known

# positional parameter names of common APIs, to name a differing argument ("eps" rather than "4")
ARG_NAMES = {
    "layer_norm": ("input", "normalized_shape", "weight", "bias", "eps"),
    "group_norm": ("input", "num_groups", "weight", "bias", "eps"),
    "batch_norm": ("input", "running_mean", "running_var", "weight", "bias", "training", "momentum", "eps"),
    "instance_norm": ("input", "running_mean", "running_var", "weight", "bias", "use_input_stats", "momentum", "eps"),
    "rms_norm": ("input", "normalized_shape", "weight", "eps"),
    "softmax": ("input", "dim", "_stacklevel", "dtype"),
    "log_softmax": ("input", "dim", "_stacklevel", "dtype"),
    "dropout": ("input", "p", "training", "inplace"),
    "gelu": ("input", "approximate"),
    "leaky_relu": ("input", "negative_slope", "inplace"),
    "elu": ("input", "alpha", "inplace"),
    "hardtanh": ("input", "min_val", "max_val", "inplace"),
    "normalize": ("input", "p", "dim", "eps"),
    "conv1d": ("input", "weight", "bias", "stride", "padding", "dilation", "groups"),
    "conv2d": ("input", "weight", "bias", "stride", "padding", "dilation", "groups"),
    "conv3d": ("input", "weight", "bias", "stride", "padding", "dilation", "groups"),
    "max_pool2d": ("input", "kernel_size", "stride", "padding", "dilation", "ceil_mode", "return_indices"),
    "avg_pool2d": ("input", "kernel_size", "stride", "padding", "ceil_mode", "count_include_pad", "divisor_override"),
    "scaled_dot_product_attention": ("query", "key", "value", "attn_mask", "dropout_p", "is_causal", "scale"),
    "masked_fill": ("self", "mask", "value"),
    "transpose": ("self", "dim0", "dim1"),
    "chunk": ("self", "chunks", "dim"),
    "split": ("self", "split_size", "dim"),
    "reshape": ("self", "shape"),
    "view": ("self", "shape"),
    "sum": ("self", "dim", "keepdim"),
    "mean": ("self", "dim", "keepdim"),
    "pow": ("self", "exponent"),
    "clamp": ("self", "min", "max"),
    "cross_entropy": ("input", "target", "weight", "size_average", "ignore_index", "reduce", "reduction", "label_smoothing"),
}


def unit_roundoff(dtypes: Sequence[str]) -> np.ndarray:
    """Unit roundoff per dtype text (``torch.bfloat16``, ``Float16``, ...); 0 for integer and bool dtypes,
    NaN for what is not a tensor dtype (``<class 'float'>``, ``torch.Size``, ``None``)."""
    units = {d: _unit_of(d) for d in set(dtypes)}  # few distinct dtypes
    return np.fromiter(map(units.__getitem__, dtypes), dtype=np.float64, count=len(dtypes))


def dtype_max(dtypes: Sequence[str]) -> np.ndarray:
    """Largest finite value per float dtype text; NaN for any other (or unknown) dtype."""
    tops = {d: (_FMAX.get(d.rsplit(".", 1)[-1].lower(), float("nan")) if isinstance(d, str) else float("nan"))
            for d in set(dtypes)}
    return np.fromiter(map(tops.__getitem__, dtypes), dtype=np.float64, count=len(dtypes))


def _unit_of(d) -> float:
    if not isinstance(d, str) or not (d.startswith("torch.") or d.startswith("mindspore.") or d[:1].isupper()
                                      or d in _UNIT):
        return float("nan")
    word = d.rsplit(".", 1)[-1].lower()
    if word in _UNIT:
        return _UNIT[word]
    if word in ("size", "dtype", "device", "none", "processgroup"):
        return float("nan")
    if any(word.startswith(w) for w in _INT_WORDS):
        return 0.0
    return float("nan")


@dataclass
class Facts:
    """Columns one verdict needs (all of length n, in report row order).

    t_stats / g_stats: float64 (4, n) arrays of Max, Min, Mean, Norm (NaN where not a number; +-inf kept).
    t_value / g_value: the recorded value of non-tensor rows (``reader.NO_VALUE`` for tensors); may be None
    when unknown.  equal: rows known to be bit-identical (md5 equal), or None.  max_abs: tensor-mode MaxAbsErr
    (NaN where none); pos_mismatch: tensor-mode rows whose inf/NaN positions differ.
    """

    names: List[str]
    api: List[str]
    state: List[str]
    matched: np.ndarray
    shape: Optional[List[str]]  # target shape text per row ('[8, 64]'), for the reduction allowance
    t_dtype: List[str]
    g_dtype: List[str]
    t_stats: np.ndarray
    g_stats: np.ndarray
    t_ok: Optional[np.ndarray] = None  # (4, n) bool: the statistic is a number (NaN included)
    g_ok: Optional[np.ndarray] = None
    t_value: Optional[list] = None
    g_value: Optional[list] = None
    equal: Optional[np.ndarray] = None
    max_abs: Optional[np.ndarray] = None
    pos_mismatch: Optional[np.ndarray] = None
    rg_bad: Optional[np.ndarray] = None


class Reasons(Sequence):
    """The ``why`` text per row: a list whose entries for NOISE rows are built on first access."""

    __slots__ = ("_texts", "_build", "_n")

    def __init__(self, n: int, build):
        self._texts: dict = {}
        self._build = build
        self._n = n

    def fill(self, i: int) -> None:
        self._texts[i] = self._build(i)

    def set(self, i: int, text: str) -> None:
        self._texts[i] = text

    def __len__(self) -> int:
        return self._n

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[k] for k in range(*i.indices(self._n))]
        if i < 0:
            i += self._n
        if not 0 <= i < self._n:
            raise IndexError(i)
        t = self._texts.get(i)
        if t is None:
            t = self._texts[i] = self._build(i)
        return t

    def __eq__(self, other) -> bool:
        return list(self) == list(other)

    def __repr__(self) -> str:
        return f"Reasons({self._n} rows)"

    def __reduce__(self):
        # a rank compared in a worker process sends its Report back pickled: as a plain list of texts
        # (the builder is a local function, which pickle cannot carry)
        return (list, (list(self),))


@dataclass
class Judgement:
    verdict: np.ndarray  # int8
    why: List[str]
    score: np.ndarray  # scaled error, NaN where none (args: +inf when they differ)
    stat: np.ndarray  # int8 index into STAT_LABELS of the statistic that gave the score (-1: none)
    unit: np.ndarray  # noise unit of the row (unit roundoff of the lower-precision dtype)
    is_arg: np.ndarray  # bool: non-tensor argument rows
    by_inputs: Optional[np.ndarray] = None  # bool: score measured against the inputs' magnitude
    exec_pos: Optional[np.ndarray] = None  # int64: position of each row in execution order (see judge)
    # rows where a difference enters the run (inputs no compared op produced) -> the nearest target-only
    # (unmatched) API call before it, their likely producer ("" when none is near)
    entered_from: Optional[dict] = None


def scaled_errors(t: np.ndarray, g: np.ndarray, max_abs: Optional[np.ndarray] = None,
                  t_ok: Optional[np.ndarray] = None, g_ok: Optional[np.ndarray] = None):
    """(scaled error per row, index of the statistic giving it, both-sides-identical mask).

    t, g: (4, n) Max/Min/Mean/Norm; t_ok/g_ok: which of them are numbers (NaN included; default: not NaN).
    A statistic equal on both sides (also +-inf, or NaN on both) counts 0; one finite and one not (or two
    different infinities) counts +inf; unusable on either side: ignored."""
    n = t.shape[1]
    # one statistic (one row of the (4, n) inputs) at a time, so that only a few row-sized temporaries
    # exist at once (a big compare's peak is here); every value is computed by the same operations as
    # on whole (4, n) arrays, so the results are identical
    with np.errstate(all="ignore"):
        # magnitude: largest finite |Max|, |Min| over both sides (NaN where none); fmax is a selection,
        # so the order the four rows are folded in does not change it
        mag = np.full(n, np.nan)
        buf = np.empty(n)
        for x in (t[0], t[1], g[0], g[1]):
            np.abs(x, out=buf)
            buf[~np.isfinite(x)] = np.nan
            np.fmax(mag, buf, out=mag)
        del buf
        err = np.full((5, n), np.nan)
        identical = np.ones(n, dtype=bool)
        any_ok_in = np.zeros(n, dtype=bool)
        for k in range(4):
            tk, gk = t[k], g[k]
            ok = (~np.isnan(tk) if t_ok is None else t_ok[k]) & (~np.isnan(gk) if g_ok is None else g_ok[k])
            same = np.isnan(tk)
            same &= np.isnan(gk)
            same |= tk == gk
            identical &= same | ~ok
            any_ok_in |= ok
            diff = np.abs(tk - gk)
            scale = mag if k < 3 else np.fmax(np.abs(t[3]), np.abs(g[3]))
            e = np.where(diff == 0, 0.0, diff / scale)
            del diff, scale
            both_fin = np.isfinite(tk) & np.isfinite(gk)
            e[~both_fin] = np.inf
            del both_fin
            e[same] = 0.0
            e[~ok] = np.nan
            err[k] = e
            del e, same, ok
        if max_abs is not None:
            err[4] = np.where(np.isfinite(max_abs), np.where(max_abs == 0, 0.0, max_abs / mag), np.nan)
        score, stat, any_ok = _fold(err)
        stat[~any_ok] = -1
    return score, stat, identical & any_ok_in, err, mag


def _fold(r: np.ndarray):
    """(fmax over the rows of r, NaN where all NaN; index of the first row holding the largest value,
    NaN counted as -1; rows not all NaN), one row at a time: the same as np.fmax.reduce(r, axis=0) and
    np.argmax(np.where(np.isnan(r), -1.0, r), axis=0) without (k, n) temporaries."""
    n = r.shape[1]
    any_ok = ~np.isnan(r[0])
    best = np.where(any_ok, r[0], -1.0)
    stat = np.zeros(n, dtype=np.int8)
    for k in range(1, r.shape[0]):
        rk = r[k]
        ok = ~np.isnan(rk)
        fk = np.where(ok, rk, -1.0)
        up = fk > best  # strictly larger: argmax keeps the first of equal values
        stat[up] = k
        np.maximum(best, fk, out=best)
        any_ok |= ok
        del fk, up, ok
    score = np.fmax.reduce(r, axis=0) if n else np.zeros(0)
    score[~any_ok] = np.nan
    return score, stat, any_ok


def rescaled(err: np.ndarray, mag: np.ndarray, new_mag: np.ndarray, out: Optional[np.ndarray] = None):
    """(score, stat) of the differences measured against another magnitude (the inputs'), for ops whose
    output is much smaller than what they consume (a sum with cancellation); the L2-norm error is scaled
    by the same factor.  out: where the rescaled errors go (``err`` itself to overwrite it); default a
    new array, dropped."""
    with np.errstate(all="ignore"):
        r = np.empty_like(err) if out is None else out
        for k in range(err.shape[0]):
            e = err[k]
            rk = e * mag
            rk /= new_mag
            keep = (e == 0) | np.isinf(e) | np.isnan(e)
            rk[keep] = e[keep]
            r[k] = rk  # (row k of err is read before it is overwritten when out is err)
            del rk, keep
        score, stat, _ = _fold(r)
        del r
        score[~(new_mag > 0)] = np.nan
    return score, stat


def _family_keys(apis: np.ndarray):
    """Per API key: (forward counterpart of a backward key or '', module key 'Module.<path>.<Class>' of
    Module/Cell entries or '', whether it is a parameter-gradient entry)."""
    fwd, mod, pgs = [], [], []
    for a in apis.tolist():
        if not (a[:7] == "Module." or a[:5] == "Cell."):  # an API call: only backward keys have a partner
            fwd.append(a[:-9] + ".forward" if a[-9:] == ".backward" else "")
            mod.append("")
            pgs.append(False)
            continue
        parts = a.split(".")
        f = ""
        m = ""
        pg = parts[-1] == "parameters_grad" or (len(parts) > 1 and parts[-2] == "parameters_grad")
        if pg:
            m = ".".join(parts[:parts.index("parameters_grad", 1)])
        elif len(parts) > 2 and parts[-2] in ("forward", "backward"):
            m = ".".join(parts[:-2])
            if parts[-2] == "backward":
                f = ".".join(parts[:-2] + ["forward", parts[-1]])
        fwd.append(f)
        mod.append(m)
        pgs.append(pg)
    return fwd, mod, pgs


def _numel(shapes: Sequence[str]) -> np.ndarray:
    """Element count per shape text ('[8, 64]'); NaN when not a list of ints."""
    cache = {}
    for sh in set(shapes):
        v = float("nan")
        if isinstance(sh, str) and sh.startswith("[") and sh.endswith("]"):
            try:
                v = float(np.prod([int(x) for x in sh[1:-1].split(",") if x.strip()] or [1]))
            except ValueError:
                pass
        cache[sh] = v
    return np.fromiter(map(cache.__getitem__, shapes), dtype=np.float64, count=len(shapes))


def _arg_label(name: str, api: str) -> str:
    """'eps (position 4)' / 'dim' / '1.0' for an argument row name."""
    rest = name[len(api):] if name.startswith(api) else name
    for infix in (".input.", ".output.", ".parameters."):
        if rest.startswith(infix):
            rest = rest[len(infix):]
            break
    pos = rest.split(".", 1)[0]
    parts = api.split(".")
    func = parts[1] if len(parts) > 1 else api
    names = ARG_NAMES.get(func)
    if pos.isdigit() and names and int(pos) < len(names) and rest == pos:
        return f"{names[int(pos)]} (position {pos})"
    return rest or name


def _fmt_value(v) -> str:
    if isinstance(v, float):
        return repr(v)
    text = str(v)
    return text if len(text) <= 60 else text[:57] + "..."


def _scale_label(k: int, by_inputs: bool) -> str:
    if k == 3:
        return "relative, scaled to its inputs' magnitude" if by_inputs else "relative"
    return "of its inputs' magnitude" if by_inputs else "of magnitude"


def _pct(x: float) -> str:
    if x == float("inf"):
        return "inf"
    return f"{x * 100:.3g}%"


def _dtype_label(u: float, t_dtype: str, g_dtype: str) -> str:
    lab = _DTYPE_LABEL.get(u)
    if lab:
        return lab
    if u == 0:
        return "integer"
    return (t_dtype or "?").rsplit(".", 1)[-1]


# why a NOISE row is noise: the first of these rules that holds (see judge)
_N_OWN, _N_ACC, _N_GRAD, _N_FLOOR, _N_DISCRETE, _N_INPUT, _N_EXPLAINED, _N_ELEM = range(1, 9)


def _noise_cases(within_own, within_acc, grad_extreme, floor, discrete, is_in, elem_extreme=None) -> np.ndarray:
    """uint8 rule code per row (meaningful on NOISE rows): the first that holds, in the order of the args."""
    code = np.full(len(within_own), _N_EXPLAINED, dtype=np.uint8)
    if elem_extreme is None:
        elem_extreme = np.zeros(len(within_own), dtype=bool)
    for c, mask in ((_N_INPUT, is_in), (_N_DISCRETE, discrete), (_N_FLOOR, floor), (_N_ELEM, elem_extreme),
                    (_N_GRAD, grad_extreme), (_N_ACC, within_acc),
                    (_N_OWN, within_own)):  # last assignment wins: reverse order
        code[mask] = c
    return code


def _err_text(i: int, unit, score, stat, use_in, t_dtype, g_dtype):
    """('Max differs by 12.5% of magnitude', 'bf16') for row i."""
    u = float(unit[i])
    lab = _dtype_label(u, t_dtype[i], g_dtype[i])
    s = float(score[i])
    k = int(stat[i])
    what = STAT_LABELS[k] if k >= 0 else "value"
    scale = _scale_label(k, bool(use_in[i]))
    e_txt = f"{what} differs by {_pct(s)} {scale}" if k != CRC else "CRC32 differs (no statistics recorded)"
    return e_txt, lab


def _noise_text(case: int, e_txt: str, lab: str, u, c: Optional[float]) -> str:
    """The reason of a NOISE row: case from _noise_cases, u its noise unit (numpy float), c its inputs' error."""
    if case == _N_OWN:
        return f"{e_txt}: within {lab} rounding ({_pct(K_ROUND * u)})"
    if case == _N_ACC:
        return f"{e_txt}: within accumulated {lab} rounding ({_pct(np.maximum(K_ACC * u, MIN_FAIL))})"
    if case == _N_GRAD:
        return (f"{e_txt}: one extreme element of a gradient (a sum of terms of both signs); its L2 norm "
                f"agrees within {lab} rounding")
    if case == _N_ELEM:
        return (f"{e_txt}: one extreme element of a {lab} result; its Mean and L2 norm agree within what its "
                f"inputs explain (per-element {lab} rounding carried from earlier ops exceeds what their statistics "
                f"show: an elementwise product's largest element can sit at another position)")
    if case == _N_FLOOR:
        return f"{e_txt}: below the {_pct(MIN_FAIL)} floor of reduced-precision kernels"
    if case == _N_DISCRETE:
        return (f"{e_txt}: an integer/bool result (an index or comparison) of inputs that differ by "
                f"{_pct(c or 0.0)}, which can flip it")
    if case == _N_INPUT:
        return f"{e_txt}: {lab} rounding carried from earlier ops (nothing failed before this row)"
    return (f"{e_txt}: explained by its inputs' difference ({_pct(c or 0.0)}) and {lab} rounding "
            f"(nothing failed before this row)")


def _noise_reasons(v, case, ctx, unit, score, stat, use_in, t_dtype, g_dtype):
    """Builder of the reason of a row that is not built eagerly: '' or, on NOISE rows, the noise text."""
    def build(i: int) -> str:
        if v[i] != NOISE:
            return ""
        e_txt, lab = _err_text(i, unit, score, stat, use_in, t_dtype, g_dtype)
        c = float(ctx[i]) if not np.isnan(ctx[i]) else None
        return _noise_text(int(case[i]), e_txt, lab, unit[i], c)
    return build


def judge(f: Facts) -> Judgement:
    """The verdict of every row (see the module docstring); vectorised except the `why` texts."""
    n = len(f.names)
    verdict = np.full(n, NOT_COMPARED, dtype=np.int8)
    why = [""] * n
    if n == 0:
        empty = np.zeros(0)
        return Judgement(verdict, why, empty, np.zeros(0, np.int8), empty, np.zeros(0, bool))
    matched = np.asarray(f.matched, dtype=bool)
    state = np.asarray(f.state, dtype=object)
    api = np.asarray(f.api, dtype=object)
    ut = unit_roundoff(f.t_dtype)
    ug = unit_roundoff(f.g_dtype)
    unit = np.fmax(ut, ug)
    is_tensor = ~np.isnan(ut) & ~np.isnan(ug)
    del ut, ug
    # --- non-tensor arguments: compared by value
    is_arg = np.zeros(n, dtype=bool)
    arg_fail = np.zeros(n, dtype=bool)
    arg_warn = np.zeros(n, dtype=bool)
    if f.t_value is not None and f.g_value is not None:
        from msprobe.core.dump.reader import NO_VALUE

        cand = np.flatnonzero(matched & ~is_tensor)
        for i in cand.tolist():
            a, b = f.t_value[i], f.g_value[i]
            if a is NO_VALUE or b is NO_VALUE:
                continue
            is_arg[i] = True
            if a == b or (a != a and b != b):
                continue
            if (isinstance(a, float) and isinstance(b, (int, float)) and not isinstance(b, bool)
                    and np.isfinite(a) and np.isfinite(b) and abs(a - b) <= ARG_FLOAT_REL * max(abs(a), abs(b))):
                arg_warn[i] = True
            else:
                arg_fail[i] = True
    # a dtype argument that differs as the two runs' precisions do (``torch.empty(shape, dtype=x.dtype)`` under
    # autocast: torch.bfloat16 where the golden run has torch.float32) is not where a difference enters: noise,
    # when the target's tensors held that dtype before this call (another API's rows, earlier in the report) and
    # the golden's never do, and the golden's value is a float dtype its tensors hold. A wrong dtype argument that
    # makes the first such tensor stays red, and so does any in a same-precision pair
    arg_noise = np.zeros(n, dtype=bool)
    if arg_fail.any():
        tens_rows = np.flatnonzero(matched & is_tensor)
        g_set = {d for d in set(map(f.g_dtype.__getitem__, tens_rows.tolist())) if _unit_of(d) > 0}
        t_list = list(map(f.t_dtype.__getitem__, tens_rows.tolist()))
        # dtype -> its first position (a dict built backwards keeps the first), without a per-row Python loop
        first_pos = dict(zip(reversed(t_list), range(len(t_list) - 1, -1, -1)))
        # a target float dtype the golden's tensors never hold -> its first row
        first = {d: int(tens_rows[k]) for d, k in first_pos.items() if d not in g_set and _unit_of(d) > 0}
        if first:
            for i in np.flatnonzero(arg_fail).tolist():
                a, b = f.t_value[i], f.g_value[i]
                j = first.get(a) if isinstance(a, str) else None
                if j is not None and j < i and f.api[j] != f.api[i] and isinstance(b, str) and b in g_set:
                    arg_noise[i] = True
            arg_fail &= ~arg_noise
    # an argument of a call one of whose target inputs has no golden counterpart differs because the two calls do
    # (another code path, or call numbers shifted by an op run on one side only: sdpa against eager attention
    # paired reshape(-1) with another reshape(4)): yellow; the call's output row says the calls differ
    arg_apart = np.zeros(n, dtype=bool)
    if arg_fail.any():
        inp_rows = state == "input"  # (a parameter without a golden name is a naming matter: -cm / -lm)
        apart_calls = {f.api[k] for k in np.flatnonzero(inp_rows & ~matched).tolist()}
        if apart_calls:
            for i in np.flatnonzero(arg_fail).tolist():
                arg_apart[i] = f.api[i] in apart_calls
            arg_fail &= ~arg_apart
            arg_warn |= arg_apart
    # --- tensors: scaled error against the noise unit
    max_abs = f.max_abs
    t_ok = ~np.isnan(f.t_stats) if f.t_ok is None else f.t_ok
    g_ok = ~np.isnan(f.g_stats) if f.g_ok is None else f.g_ok
    score, stat, identical, err, mag = scaled_errors(f.t_stats, f.g_stats, max_abs, t_ok, g_ok)
    if f.equal is not None:
        eq = np.asarray(f.equal, dtype=bool)
        crc_only = ~eq & np.isnan(score) & matched & is_tensor
        score = np.where(eq, 0.0, np.where(crc_only, np.inf, score))
        stat = np.where(crc_only, CRC, stat).astype(np.int8)
        identical = identical | eq
    if f.pos_mismatch is not None:
        pm = np.asarray(f.pos_mismatch, dtype=bool)
        score = np.where(pm, np.inf, score)
    tens = matched & is_tensor & ~np.isnan(score)
    # a tensor of a mixed-precision run carries the rounding of the coarsest float dtype computed anywhere
    # before it (autocast keeps LayerNorm and softmax in fp32, fed by bf16 results): the noise unit of a
    # row is the larger of its own dtypes' and the run's coarsest float dtype's unit roundoff
    floats = tens & (unit > 0)
    run_unit = float(np.max(unit[floats])) if floats.any() else 2.0 ** -24
    unit = np.where(np.isnan(unit), run_unit, np.where(unit > 0, np.maximum(unit, run_unit), unit))
    with np.errstate(invalid="ignore"):
        fin_t = np.all(np.isfinite(f.t_stats[:2]) | ~t_ok[:2], axis=0)
        fin_g = np.all(np.isfinite(f.g_stats[:2]) | ~g_ok[:2], axis=0)
    nonfin_t_only = tens & ~fin_t & fin_g
    if f.pos_mismatch is not None:
        nonfin_t_only = nonfin_t_only | (tens & pm & ~fin_t)
    # per API aggregates over tensor rows
    # one id per API call: a dump key's rows are contiguous in report order (target order)
    new_call = np.ones(n, dtype=bool)
    new_call[1:] = api[1:] != api[:-1]
    inv = np.cumsum(new_call) - 1
    uniq = api[new_call]
    n_api = len(uniq)
    del api, new_call
    is_in = (state == "input") | (state == "parameters")
    is_out = (state == "output")
    is_pg = (state == "parameters_grad")
    del state
    e_in_own = np.full(n_api, np.nan)
    e_all = np.full(n_api, np.nan)
    nf_in = np.zeros(n_api, dtype=bool)
    tin = tens & is_in
    np.fmax.at(e_in_own, inv[tin], score[tin])
    np.fmax.at(e_all, inv[tens & (is_in | is_out)], score[tens & (is_in | is_out)])
    nf_in[inv[nonfin_t_only & is_in]] = True
    # the inputs' magnitude (for outputs much smaller than their inputs, below) leaves out sentinel inputs:
    # a module fed an additive attention mask (torch.finfo.min where masked) does not consume values of 3e38
    top = dtype_max(f.t_dtype)
    np.fmin(top, dtype_max(f.g_dtype), out=top)
    top *= SENTINEL_FRACTION
    with np.errstate(invalid="ignore"):
        sentinel = mag >= top
    del top
    mag_in = np.full(n_api, np.nan)
    np.fmax.at(mag_in, inv[tin & ~sentinel], mag[tin & ~sentinel])
    del sentinel
    numel = _numel(f.shape) if f.shape is not None else np.full(n, np.nan)
    numel_in = np.full(n_api, np.nan)
    np.fmax.at(numel_in, inv[tin], numel[tin])
    # context of a backward entry: also its forward call; of a parameter gradient: every call of its module;
    # of a module's forward / backward call: also every entry of its sub-modules (their parameters and
    # outputs are inputs the module's own rows do not show)
    fwd_keys, mod_keys, pg_keys = _family_keys(uniq)
    need = {fk for fk in fwd_keys if fk}  # (only the forward keys of backward calls are looked up)
    pos = {a: k for k, a in enumerate(uniq.tolist()) if a in need}
    del need
    mod_err = {}  # module key -> largest error of the inputs of its forward / backward calls
    mod_gmag = {}  # module key -> magnitude of the gradients its backward received
    mod_gnum = {}  # module key -> their element count
    # module path (without class) -> largest error of the rows of its sub-modules: of their forward calls
    # (sub_fwd) and of all their calls (sub_err).  A module's forward call runs before any backward call, so
    # only its sub-modules' forward rows can explain it (their backward rows differ as soon as anything
    # downstream does); a backward call may inherit from either
    sub_err = {}
    sub_fwd = {}
    for k, m in enumerate(mod_keys):
        if m and not pg_keys[k]:
            # a parameter gradient is made of the module's forward inputs and the gradient its backward received
            # (its backward call's inputs), not of the backward's outputs (the input gradient, which it does not
            # read): a ResNet conv weight gradient x3 under bf16 was 'explained' by its input gradient's Max 16% off
            vi = e_in_own[k]
            if not np.isnan(vi):
                mod_err[m] = max(mod_err.get(m, 0.0), float(vi))
            else:
                mod_err.setdefault(m, np.nan)
            v = e_all[k]
            if not np.isnan(v):
                path = m.split(".")[:-1]
                for d in range(2, len(path)):
                    anc = ".".join(path[:d])
                    sub_err[anc] = max(sub_err.get(anc, 0.0), float(v))
                    if not fwd_keys[k]:
                        sub_fwd[anc] = max(sub_fwd.get(anc, 0.0), float(v))
            if fwd_keys[k] and not np.isnan(mag_in[k]):
                mod_gmag[m] = max(mod_gmag.get(m, 0.0), float(mag_in[k]))
                mod_gnum[m] = max(mod_gnum.get(m, 0.0), float(numel_in[k]))
    e_ctx = e_in_own.copy()
    for k, fk in enumerate(fwd_keys):
        m = mod_keys[k]
        if fk:
            j = pos.get(fk)
            if j is not None:
                e_ctx[k] = np.fmax(e_ctx[k], e_all[j])
                nf_in[k] = nf_in[k] or nf_in[j]
        if m and pg_keys[k]:
            e_ctx[k] = mod_err.get(m, np.nan)
            mag_in[k] = mod_gmag.get(m, np.nan)
            numel_in[k] = mod_gnum.get(m, np.nan)
        elif m:
            sub = (sub_err if fk else sub_fwd).get(".".join(m.split(".")[:-1]))
            if sub is not None:
                e_ctx[k] = np.fmax(e_ctx[k], sub)
    # a tied parameter (GPT-2's lm_head.weight is transformer.wte.weight) has one gradient, recorded under each
    # module that holds it with the same statistics: it is made of every holder's inputs (the embedding's
    # backward input carries the whole network's gradient), so its context is the largest over the holders
    pg_rows = np.flatnonzero(tens & is_pg & (f.t_stats[3] != 0))
    if len(pg_rows) > 1:
        holders: dict = {}
        for i in pg_rows.tolist():
            holders.setdefault((f.t_stats[:, i].tobytes(), f.g_stats[:, i].tobytes()), set()).add(int(inv[i]))
        for ks in holders.values():
            if len(ks) > 1:
                vals = e_ctx[list(ks)]
                if not np.all(np.isnan(vals)):
                    e_ctx[list(ks)] = np.nanmax(vals)
    ctx = e_ctx[inv]
    is_bwd = np.array([bool(k) for k in fwd_keys], dtype=bool)[inv]
    is_mod_fwd = np.array([bool(m) and not fk and not p for m, fk, p in zip(mod_keys, fwd_keys, pg_keys)],
                          dtype=bool)[inv]
    fwd_call = np.full(n_api, -1, dtype=np.int64)  # per backward call: its forward call (-1: none)
    for k, fk in enumerate(fwd_keys):
        if fk and pos.get(fk) is not None:
            fwd_call[k] = pos[fk]
    del fwd_keys, mod_keys, pg_keys, pos, mod_err, mod_gmag, mod_gnum, sub_err, sub_fwd, e_ctx, e_in_own, e_all
    # an output much smaller than what its op consumed (a reduction with cancellation, x - y with x ~ y)
    # carries the absolute rounding of the inputs: judge its difference against the inputs' magnitude
    # too and keep the smaller of the two scaled errors
    judged_out = ~is_in  # (state "input" or "parameters")
    err_norm = err[3].copy()  # (the L2-norm errors, below; err itself is overwritten by its rescaled values)
    err_mean = err[2].copy()
    in_score, in_stat = rescaled(err, mag, mag_in[inv], out=err)
    del err
    with np.errstate(invalid="ignore"):
        much_smaller = mag_in[inv] > CANCEL_RATIO * mag
    use_in = judged_out & much_smaller & (in_score < score)
    # ... but not the output of a module's forward call whose inputs and sub-modules agree within rounding
    # and which no recorded op inside produced (no earlier output holds its statistics on both sides): the
    # module changed it with code the dump does not see (a forward hook, an aten call), and a module is not
    # one reduction (a block's output is routinely 30x smaller than the residual stream it reads)
    mod_out = use_in & is_mod_fwd & (np.nan_to_num(ctx, nan=0.0) <= K_ROUND * unit)
    if mod_out.any():
        mod_out &= ~_linked_inputs(f.t_stats, f.g_stats, tens & is_out & ~is_mod_fwd, mod_out)
        use_in &= ~mod_out
    del mod_out, is_mod_fwd
    del judged_out, much_smaller
    score = np.where(use_in, in_score, score)
    stat = np.where(use_in, in_stat, stat).astype(np.int8)
    del in_score, in_stat
    ctx_nf = nf_in[inv]
    own_bound = K_ROUND * unit
    acc_bound = np.maximum(K_ACC * unit, MIN_FAIL)
    # a reduction (a bias gradient sums a batch of output gradients) adds up its inputs' errors: allow
    # sqrt(elements in / elements out) more, as independent rounding errors add up
    with np.errstate(invalid="ignore", divide="ignore"):
        ratio = numel_in[inv] / numel
    amp = AMP * np.sqrt(np.where(np.isfinite(ratio) & (ratio > 1), ratio, 1.0))
    del ratio, numel
    with np.errstate(invalid="ignore", over="ignore"):
        explained = score <= amp * np.nan_to_num(ctx, nan=0.0) + own_bound
        within_own = score <= own_bound
        within_acc = score <= acc_bound
        below_floor = score <= MIN_FAIL
    del acc_bound
    # a gradient (a backward output, a parameter gradient) is a reduction: in low precision one element
    # that sums terms of both signs can end far off while the tensor as a whole agrees; it is a fault only
    # when its L2 norm is beyond what its inputs explain too
    with np.errstate(all="ignore"):
        norm_s = np.fmin(err_norm, err_norm * mag / mag_in[inv])
        norm_ok = norm_s <= amp * np.nan_to_num(ctx, nan=0.0) + own_bound
        mean_s = np.fmin(err_mean, err_mean * mag / mag_in[inv])
        mean_ok = mean_s <= amp * np.nan_to_num(ctx, nan=0.0) + own_bound
    del norm_s, mean_s, amp, err_norm, err_mean, mag, mag_in, numel_in
    grad_extreme = (is_pg | (is_bwd & is_out)) & ~explained & norm_ok & (stat != 3)
    # a forward result of a reduced-precision pair (fp16 or coarser on either side) whose Max or Min alone is off
    # while its Mean and L2 norm agree within what its inputs explain: per-element rounding carried from earlier
    # ops is larger than the inputs' statistics show (MobileNetV3's squeeze-excitation `scale * x`, fp16 vs fp32:
    # Max 3.3% apart, the inputs' Max 0.2%, their elements 3.3%), and the largest element of an elementwise
    # product can sit at another position; a planted bug (x1.05, a wrong eps) moves the L2 norm too
    elem_extreme = (is_out & ~is_bwd & ~is_pg & ~explained & norm_ok & mean_ok & (stat >= 0) & (stat <= 1)
                    & (unit >= 2.0 ** -11))
    del mean_ok
    v = np.full(n, NOT_COMPARED, dtype=np.int8)
    # rows whose difference is explained by their inputs but beyond accumulated rounding: WARN when an
    # error was introduced before them (a FAIL row earlier in the report), else NOISE (rounding carried
    # through the network: a control pair names nothing)
    inherited = np.zeros(n, dtype=bool)
    # outputs (and debug values)
    outs = tens & ~is_in & ~is_pg
    # an integer or bool result (an index, a comparison) of inputs that differ at all can flip: inherited
    discrete = outs & (unit == 0) & (np.nan_to_num(ctx, nan=0.0) > 0) & ~explained
    v = np.where(outs & (within_own | (explained & within_acc)), NOISE, v)
    inherited |= (outs & ~within_own & explained & ~within_acc) | discrete
    v = np.where(outs & ~explained & ~discrete & (below_floor | grad_extreme | elem_extreme), NOISE, v)
    v = np.where(outs & ~explained & ~discrete & ~below_floor & ~grad_extreme & ~elem_extreme, FAIL, v)
    # parameter gradients: their inputs are the module's forward / backward rows; a module that was not
    # dumped leaves them unattributable (WARN at most)
    pg = tens & is_pg
    pg_known = pg & ~np.isnan(ctx)
    pg_unknown = pg & np.isnan(ctx)
    v = np.where(pg & (within_own | within_acc), NOISE, v)
    inherited |= pg_known & ~within_own & explained & ~within_acc
    v = np.where(pg_known & ~explained & (below_floor | grad_extreme), NOISE, v)
    v = np.where(pg_known & ~explained & ~below_floor & ~grad_extreme, FAIL, v)
    v = np.where(pg_unknown & ~within_acc, WARN, v)
    # inputs: inherited from whatever produced them
    ins = tens & is_in
    v = np.where(ins & (within_own | within_acc), NOISE, v)
    beyond_in = ins & ~within_acc
    inherited |= beyond_in
    # NaN / inf on the target only: red where it appears, yellow where it is passed on
    v = np.where(nonfin_t_only & ~is_in & ~ctx_nf, FAIL, v)
    v = np.where(nonfin_t_only & (is_in | ctx_nf), WARN, v)
    inherited &= ~nonfin_t_only
    # non-tensor arguments
    v = np.where(is_arg, PASS, v)
    v = np.where(arg_warn, WARN, v)
    v = np.where(arg_noise, NOISE, v)
    v = np.where(arg_fail, FAIL, v)
    v = np.where(matched, v, NOT_COMPARED).astype(np.int8)
    # uninitialised memory: the output of torch.empty / empty_like / new_empty holds whatever the allocator left
    # (NaN bit patterns in a bf16 run), and so does an input that is that tensor before it is filled (stochastic
    # depth: torch.empty(...).bernoulli_(p)); neither is where the runs part
    uninit_call = np.fromiter((".".join(str(a).split(".", 2)[:2]) in UNINIT_APIS for a in uniq.tolist()),
                              dtype=bool, count=n_api)
    garbage = np.zeros(n, dtype=bool)
    overwrite_call = np.fromiter((".".join(str(a).split(".", 2)[:2]) in OVERWRITE_SELF_APIS for a in uniq.tolist()),
                                 dtype=bool, count=n_api)
    overwritten = np.zeros(n, dtype=bool)
    if overwrite_call.any():
        for i in np.flatnonzero(overwrite_call[inv] & is_in & matched & is_tensor).tolist():
            overwritten[i] = f.names[i] == f"{f.api[i]}.input.0"
        inherited &= ~overwritten  # (its verdict is set after every other rule, below)
        nonfin_t_only = nonfin_t_only & ~overwritten
    if uninit_call.any():
        garbage = uninit_call[inv] & is_out & matched & is_tensor
        # (md5 dumps carry no statistics to recognise the tensor by)
        cand_in = is_in & matched & is_tensor & np.any(t_ok, axis=0) & np.any(g_ok, axis=0)
        garbage |= _linked_inputs(f.t_stats, f.g_stats, garbage, cand_in & ~garbage)
        v = np.where(garbage & (v > PASS), NOISE, v).astype(np.int8)
        inherited &= ~garbage
        nonfin_t_only = nonfin_t_only & ~garbage
    # an input that differs beyond noise although no compared op produced it (no compared output holds the
    # same statistics on both sides) is where a difference enters the run, when nothing failed before it:
    # the op that made it is unmatched (target only) or not dumped
    # execution order: forward rows in report order, then backward rows, then parameter gradients (a
    # dump lists a module's parameters_grad entry with its forward call, but computes it in backward)
    phase = np.where(is_pg, 2, np.where(is_bwd, 1, 0))
    exec_order = np.lexsort((np.arange(n), phase))
    exec_pos = np.empty(n, dtype=np.int64)
    exec_pos[exec_order] = np.arange(n)
    # calls without any matched row (target-only ops such as an extra multiply) and, per call, the
    # nearest such call before it within UNMATCHED_WINDOW calls
    call_matched = np.zeros(n_api, dtype=bool)
    np.logical_or.at(call_matched, inv, matched)
    unm_idx = np.where(~call_matched, np.arange(n_api), -1)
    prev_unm = np.concatenate([[-1], np.maximum.accumulate(unm_idx)[:-1]]) if n_api else unm_idx
    near_unm = (prev_unm >= 0) & (np.arange(n_api) - prev_unm <= UNMATCHED_WINDOW)
    entering = np.zeros(n, dtype=bool)
    # inputs whose two sides different compared ops produced -> (the forward input row that shows it, the
    # target's producer row, the golden's producer row): a pair of two different calls, yellow (see below)
    paired_apart = {}
    maybe_in = ins & ~within_own & ~nonfin_t_only & ~overwritten
    if maybe_in.any():
        linked = _linked_inputs(f.t_stats, f.g_stats, is_out & tens, maybe_in)
        # gradients reach a backward call through autograd's own (unrecorded) sums of several backward
        # outputs: a backward input enters a difference only when it exceeds what the backward outputs
        # computed before it explain
        bwd_out = np.where(tens & is_out & is_bwd & np.isfinite(score), score, -np.inf)
        seen = np.concatenate([[-np.inf], np.maximum.accumulate(bwd_out)[:-1]]) if n else bwd_out
        with np.errstate(invalid="ignore", over="ignore"):
            bwd_explained = score <= AMP * np.maximum(seen, 0.0) + own_bound
        # a forward input enters a difference beyond accumulated rounding, or beyond its own rounding when
        # a target-only op ran just before it (its likely producer)
        fwd_enter = ~is_bwd & (~within_acc | near_unm[inv])
        # below MIN_FAIL an input no compared op produced is not where an error enters either, as an output
        # is not: a MindSpore run against a PyTorch one at L1 leaves every MindSpore Primitive unmatched (so
        # an unmatched call is always near) and its fp32 kernels round otherwise (a Dense's output 3 units off)
        cand_mask = maybe_in & ~linked & ~below_floor & ((is_bwd & ~within_acc & ~bwd_explained) | fwd_enter)
        cand = np.flatnonzero(cand_mask)
        if len(cand):
            # in execution order, drop the candidates whose two sides two different compared ops produced:
            # the pair joins two different calls (an op that runs on one side only, such as a cast done only
            # under autocast, shifted the call numbers of that API), no error enters there
            # (a backward call's sides: when an input of its forward call is so)
            prod = np.flatnonzero(is_out & tens & matched)
            crossed = {}

            def crossed_call(call: int):
                if call not in crossed:
                    crossed[call] = None
                    for r in np.flatnonzero((inv == call) & tens & is_in).tolist():
                        ab = _cross_linked(f.t_stats, f.g_stats, prod, exec_pos, inv, r)
                        if ab is not None:
                            crossed[call] = (r,) + ab
                            break
                return crossed[call]

            # a module's call pairs by its path, which an op run on one side only does not shift: its input fed
            # from two different ops is where the runs part (MindSpore against PyTorch with a residual add left
            # out: the target's LayerNorm reads the attention output, the golden's the add after it)
            module_call = np.fromiter((str(a).startswith(("Module.", "Cell.")) for a in uniq.tolist()), dtype=bool,
                                      count=n_api)
            for k, c in enumerate(cand[np.argsort(exec_pos[cand], kind="stable")].tolist()):
                if k >= CROSS_CHECKS or module_call[inv[c]]:
                    break
                if is_bwd[c]:
                    fc = int(fwd_call[inv[c]])
                    ab = crossed_call(fc) if fc >= 0 else None
                else:
                    ab = _cross_linked(f.t_stats, f.g_stats, prod, exec_pos, inv, c)
                    ab = None if ab is None else (c,) + ab
                if ab is None:
                    break
                cand_mask[c] = False
                paired_apart[c] = ab
            cand = np.flatnonzero(cand_mask)
        if len(cand):
            fails = exec_pos[v == FAIL]
            first = int(cand[np.argmin(exec_pos[cand])])
            if not len(fails) or fails.min() > exec_pos[first]:
                entering = cand_mask & (inv == inv[first])
                v = np.where(entering, FAIL, v)
                inherited &= ~entering
    fails = exec_pos[v == FAIL]
    tainted = exec_pos > (fails.min() if len(fails) else n)
    v = np.where(inherited & tainted & (v < WARN), WARN, np.where(inherited & ~tainted & (v < WARN), NOISE, v))
    apart = np.zeros(n, dtype=bool)
    apart[list(paired_apart)] = True
    v = np.where(apart & (v < WARN), WARN, v)
    # equal (md5 equal, or every statistic identical)
    v = np.where(tens & identical & ~nonfin_t_only & (v < WARN), PASS, v)
    # requires_grad differs (frozen on one side only): yellow at least, as the reference colours it
    rg = np.zeros(n, dtype=bool) if f.rg_bad is None else (np.asarray(f.rg_bad, dtype=bool) & matched)
    rg_warn = rg & (v < WARN)
    v = np.where(rg_warn, WARN, v).astype(np.int8)
    score = np.where(is_arg, np.where(arg_fail | arg_warn, np.inf, 0.0), score)
    score = np.where(matched, score, np.nan)
    # --- reasons: built now for red and yellow rows (and PASS rows holding inf/NaN), on first access for
    # the NOISE rows (a bf16 run has hundreds of thousands of them)
    noise_case = _noise_cases(within_own, within_acc, grad_extreme, below_floor & ~explained, discrete, is_in,
                              elem_extreme)
    names = f.names

    # a call whose target has an input row with no golden counterpart (a float where the golden's call takes a
    # tensor: not the same call, or the API called with another argument): its output is not "inputs agree"
    from msprobe.core.dump.reader import NO_VALUE as no_value

    unpaired_in: dict = {}
    for k in np.flatnonzero((np.asarray(f.state, dtype=object) == "input") & ~f.matched.astype(bool)).tolist():
        unpaired_in.setdefault(f.api[k], k)

    def unpaired_text(i: int) -> str:
        k = unpaired_in.get(f.api[i])
        if k is None:
            return ""
        tv = f.t_value[k] if f.t_value is not None else no_value
        kind = str(f.t_dtype[k])
        kind = kind[8:-2] if kind.startswith("<class '") and kind.endswith("'>") else kind
        what = (f"the {kind} {_fmt_value(tv)}" if tv is not no_value
                else f"a {f.t_dtype[k]} tensor" + (f" {f.shape[k]}" if f.shape is not None else ""))
        return (f"; but its input {_arg_label(names[k], f.api[i])} ({what} on the target) has no golden "
                f"counterpart: the two runs call {f.api[i]} differently here (another argument, or an op that "
                f"runs on one side only shifted this API's call numbers: -fm pairs whole calls by their arguments)")

    def reason(i: int) -> str:
        vi = v[i]
        if vi < NOISE:
            return ""
        if is_arg[i]:
            a, b = f.t_value[i], f.g_value[i]
            label = _arg_label(names[i], f.api[i])
            extra = " (slightly: may be computed from a tensor)" if arg_warn[i] else ""
            if arg_apart[i]:
                extra = (f" because the two runs call {f.api[i]} differently here (one of its inputs has no golden "
                         f"counterpart; -fm pairs whole calls by their arguments)")
            if arg_noise[i]:
                extra = (" as the two runs' precisions do (the target's tensors hold it, the golden's "
                         f"{_fmt_value(b)}: autocast)")
            return f"argument {label} differs{extra}: {_fmt_value(a)} vs {_fmt_value(b)}"
        if rg_warn[i] and vi == WARN:
            return "requires_grad differs between target and golden"
        if i in paired_apart and vi == WARN:
            r, a, b = paired_apart[i]
            e_txt, _lab = _err_text(i, unit, score, stat, use_in, f.t_dtype, f.g_dtype)
            which = "" if r == i else f" (its forward call's input {names[r]})"
            return (f"{e_txt}, but the two sides are different calls: the target's value{which} comes from "
                    f"{names[a]}, the golden's from {names[b]} (an op that runs on one side only shifted this "
                    f"API's call numbers; -fm pairs the k-th call of each shape instead)")
        e_txt, lab = _err_text(i, unit, score, stat, use_in, f.t_dtype, f.g_dtype)
        c = float(ctx[i]) if not np.isnan(ctx[i]) else None
        if nonfin_t_only[i]:
            t_nf = [STAT_LABELS[j] + " " + repr(float(f.t_stats[j, i])) for j in range(2) if not np.isfinite(f.t_stats[j, i])]
            return ("NaN/inf on target only (" + ", ".join(t_nf) + ")" +
                    ("" if vi == FAIL else ": inherited, its inputs already hold NaN/inf"))
        elif vi == NOISE:
            return _noise_text(int(noise_case[i]), e_txt, lab, unit[i], c)
        elif vi == WARN:
            if is_in[i]:
                return f"{e_txt}: inherited, the input already differs beyond {lab} rounding"
            if discrete[i]:
                return (f"{e_txt}: an integer/bool result of inputs that already differ by {_pct(c or 0.0)}, "
                        f"which can flip it")
            elif c is None:
                return f"{e_txt}: beyond {lab} rounding; its module's inputs were not dumped, cannot attribute"
            else:
                return f"{e_txt}: inherited, its inputs already differ by {_pct(c)}"
        elif vi == FAIL:
            if entering[i]:
                k_call = inv[i]
                near = f"; nearest unmatched op above: {uniq[prev_unm[k_call]]}" if near_unm[k_call] else ""
                return (f"{e_txt} on an input no compared op produced (beyond {lab} rounding): the op that made "
                        f"it is unmatched or not dumped{near}")
            peer = ("; a collective: the difference may come from another rank (see -da)"
                    if f.api[i].split(".", 1)[0] in COLLECTIVE_PREFIXES else "")
            if c is None or c <= own_bound[i]:
                apart = unpaired_text(i)
                if apart:
                    return f"{e_txt} while its matched inputs agree within {lab} rounding{apart}"
                return f"{e_txt} while its inputs agree within {lab} rounding{peer}"
            return f"{e_txt} while its inputs differ by only {_pct(c)}{peer}"
        return ""

    # the NOISE rows' texts are built on first access from a few compact columns only (not from this
    # function's row-sized temporaries, which are freed when it returns); every other row's text now
    # the tensor an in-place fill overwrites: noise whatever the rules above made of its difference
    v = np.where(overwritten & (v != PASS) & (v != NOT_COMPARED), NOISE, v).astype(np.int8)
    v = np.where(overwritten & (v == NOT_COMPARED) & matched & is_tensor & (score > 0), NOISE, v).astype(np.int8)
    why = Reasons(n, _noise_reasons(v, noise_case, ctx, unit, score, stat, use_in, f.t_dtype, f.g_dtype))
    eager = v >= WARN
    eager |= (v == NOISE) & (is_arg | nonfin_t_only)  # (none: such rows are never NOISE; kept exact anyway)
    for i in np.flatnonzero(eager).tolist():
        why.set(i, reason(i))
    for i in np.flatnonzero(overwritten & (v == NOISE)).tolist():
        why.set(i, "the tensor this call overwrites without reading it: its values before the call (often "
                   "torch.empty's leftover memory) are not an input of the result")
    for i in np.flatnonzero(garbage & (v == NOISE)).tolist():
        why.set(i, "uninitialised memory (torch.empty and the like): its values are whatever the allocator left, "
                   "not a result to compare")
    with np.errstate(invalid="ignore"):
        pass_nf = np.flatnonzero((v == PASS) & ~(np.all(np.isfinite(f.t_stats), axis=0) | ~tens))
    for i in pass_nf.tolist():
        vals = {repr(float(x)) for x in f.t_stats[:, i] if not np.isfinite(x)}
        why.set(i, f"both sides {'/'.join(sorted(vals))}: equal")
    entered_from = {int(i): (str(uniq[prev_unm[inv[i]]]) if near_unm[inv[i]] else "")
                    for i in np.flatnonzero(entering).tolist()}
    return Judgement(v, why, score, stat, unit, is_arg, use_in, exec_pos, entered_from)


def _same_stats(stats: np.ndarray, col: np.ndarray) -> np.ndarray:
    """Columns of ``stats`` (k, m) equal to ``col`` (k,), NaN equal to NaN."""
    c = col[:, None]
    return np.all((stats == c) | (np.isnan(stats) & np.isnan(c)), axis=0)


def _cross_linked(t: np.ndarray, g: np.ndarray, producers: np.ndarray, exec_pos: np.ndarray, call: np.ndarray,
                  i: int):
    """(a, b) when row ``i``'s target statistics are those of producer row a, which ran before it, and its golden
    statistics those of another producer row b (of another call than ``i``'s: ``call`` per row): each side's
    value comes from a compared op, but not from the same one; else None."""
    ti, gi = t[:, i], g[:, i]
    if np.isnan(ti).all() or np.isnan(gi).all():
        return None  # (md5 dumps: no statistics to recognise a value by)
    earlier = producers[exec_pos[producers] < exec_pos[i]]
    by_t = earlier[_same_stats(t[:, earlier], ti)]
    if not len(by_t):
        return None
    others = producers[call[producers] != call[i]]  # (an identity op's own output holds its input's values)
    by_g = others[_same_stats(g[:, others], gi)]
    if not len(by_g) or np.isin(by_t, by_g).any():
        return None
    return int(by_t[-1]), int(by_g[0])


def _linked_inputs(t: np.ndarray, g: np.ndarray, producer: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """rows whose (target, golden) statistics are exactly those of a producer row (an output) earlier in the
    report (a later view of the same values, or the row's own reshape output, does not count)."""
    n = t.shape[1]
    out = np.zeros(n, dtype=bool)
    sel = np.flatnonzero(producer | rows)
    if not len(sel):
        return out
    kt, kg = t.shape[0], g.shape[0]
    key = np.empty((len(sel), kt + kg), dtype=np.result_type(t, g))  # (target, golden) statistics per row
    for k in range(kt):
        key[:, k] = t[k, sel]
    for k in range(kg):
        key[:, kt + k] = g[k, sel]
    key[np.isnan(key)] = np.nan  # one NaN bit pattern
    # rows with bit-identical keys form a group; sorted by group (by the keys' bit patterns), then report
    # order (sel is ascending): a lexsort needs no sorted copy of the keys
    bits = key.view(np.dtype("u%d" % key.dtype.itemsize))
    cols = [bits[:, c] for c in range(bits.shape[1] - 1, -1, -1)]
    order = np.lexsort([np.arange(len(sel))] + cols)
    del cols
    start = np.ones(len(sel), dtype=bool)
    if len(sel) > 1:
        differs = np.zeros(len(sel) - 1, dtype=bool)
        for c in range(bits.shape[1]):
            col = bits[order, c]
            differs |= col[1:] != col[:-1]
            del col
        start[1:] = differs
        del differs
    del key, bits
    prod = producer[sel][order].astype(np.int64)
    before = np.cumsum(prod) - prod  # producers before this position (all groups)
    base = np.maximum.accumulate(np.where(start, before, 0))
    linked_sorted = (before - base) > 0
    res = np.zeros(len(sel), dtype=bool)
    res[order] = linked_sorted
    out[sel] = rows[sel] & res
    return out


def failing(verdict: np.ndarray) -> np.ndarray:
    """Rows an advisor should consider as failing (verdict == FAIL)."""
    return np.asarray(verdict) == FAIL


def counts(verdict: Optional[np.ndarray]) -> dict:
    """{verdict constant: number of rows}."""
    if verdict is None:
        return {k: 0 for k in NAMES}
    bc = np.bincount(np.asarray(verdict, dtype=np.int64), minlength=len(NAMES))
    return {k: int(bc[k]) for k in NAMES}


def noise_label(unit: np.ndarray, verdict: np.ndarray) -> str:
    """'bf16' etc.: the coarsest dtype among the compared rows (for 'within bf16 rounding')."""
    sel = unit[(verdict >= PASS)] if len(unit) else unit
    if not len(sel):
        return "dtype"
    u = float(np.nanmax(sel))
    return _DTYPE_LABEL.get(u, "dtype")


def ranking(verdict: np.ndarray, score: np.ndarray, is_arg: np.ndarray) -> np.ndarray:
    """Row order for "worst ops": FAIL (differing arguments first) then WARN, each by scaled error, then
    dump order; only FAIL and WARN rows."""
    sel = np.flatnonzero(verdict >= WARN)
    if not len(sel):
        return sel
    s = np.nan_to_num(score[sel], nan=0.0, posinf=np.inf)
    order = np.lexsort((sel, -s, ~is_arg[sel], -verdict[sel]))
    return sel[order]


def stat_text(j: Judgement, i: int) -> str:
    """'Max differs by 51% of magnitude' for row i (the worst-ops label)."""
    if j.is_arg[i]:
        return ""
    k = int(j.stat[i])
    s = float(j.score[i])
    if k < 0 or np.isnan(s):
        return ""
    scale = _scale_label(k, j.by_inputs is not None and bool(j.by_inputs[i]))
    return f"{STAT_LABELS[k]} differs by {_pct(s)} {scale}"
