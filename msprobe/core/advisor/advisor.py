"""The advisor: after a compare, name the first row that fails accuracy and say why.

Input: a compare report in memory.  The failing rows are the rows whose verdict is FAIL
(:mod:`msprobe.core.compare.verdict`: the row differs beyond what its dtype's rounding and its inputs
explain); a report without verdicts (read back from a file) falls back to the mode's rule: statistics
``Result`` = Warning, md5 ``Result`` = Different, tensor ``Accuracy Reached or Not`` = No, plus target
NaN/inf against a finite golden value.  The first failing row in EXECUTION order
(:meth:`OpTable.exec_order`: forward in call order, backward in the order it ran, parameter gradients
after the backward records that produce them) is the suspect.  When it is an input, the op that produced
it is looked up (:func:`find_producer`) and named.

The file ``advisor[_<rank>]_<ts>.txt`` holds the reference's three lines (``Line``, ``Suspect Nodes``,
``Expert Advice``, with the reference's advice texts) followed by msprobe's own ``Category`` and
``Reason`` (and ``Producer`` when the suspect is an input).  ``Line`` is the row number a user sees in
the xlsx (the header is row 1, so report row i is line i + 2; the csv's line numbers are the same), the
number the console prints; the reference writes the 0-based table index there instead.
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass
from typing import List, Optional, Tuple

import numpy as np

from msprobe.core.advisor.comm import is_communication_op
from msprobe.core.advisor.table import (
    MODE_MD5, NPU_STATS, STATE_INPUT, STATE_OUTPUT, STATE_PARAMETERS, STATE_PARAMETERS_GRAD, OpTable,
)
from msprobe.core.compare import verdict as vd

log = logging.getLogger("msprobe")

# --- the reference's advice texts (compare.md §7.1), kept verbatim for tools that read the file
FORWARD_INPUT_SUGGEST = (
    "1. Analyze the model to view the input source.\n"
    "2. Check whether an inplace API causes the output result to overwrite the input result. That is, the fault is "
    "actually caused by a computation error.\n"
    "3. The fault may be caused by memory corruption and further analysis is required."
)
FORWARD_OUTPUT_SUGGEST = "This is a forward API computation error. Check the computation implementation."
BACKWARD_INPUT_SUGGEST = "Check whether the forward computation result is affected."
BACKWARD_OUTPUT_SUGGEST = "This is a backward API computation error. Check the computation implementation."
DETERMINISTIC_SUGGEST = (
    "This torch api may be uncertainty in the calculation, can seed_all(mode=True) to enable deterministic computing."
)
BATCH_NORM_SUGGEST = (
    "Torch API batch_norm input not fixed, the following suggestions may fix it:\n"
    "1. If use torch.nn.functional.batch_norm, you can set parameter training=False.\n"
    "2. If use torch.nn.BatchNormXXX, you can set parameter affine=False.\n"
    "3. Use seed_all(mode=True) to enable deterministic computing."
)
NO_ERR_SUGGEST = "All data in comparison result meets the accuracy requirements."
NO_ERROR_API = "NA"
PRECISION_SENSITIVE_APIS = ("conv2d", "conv3d", "matmul", "nll_loss", "layer_norm", "lstm")

# --- msprobe's categories
CAT_NONE = "none"
CAT_OVERFLOW = "overflow/NaN"
CAT_COMM = "communication op"
CAT_INPUT = "input already differs"
CAT_TARGET_ONLY = "op only in the target"
CAT_PARAMS = "parameters differ"
CAT_PARAMS_GRAD = "parameter gradient differs"
CAT_SENSITIVE = "precision-sensitive API"
CAT_FORWARD = "forward computation error"
CAT_BACKWARD = "backward computation error"
CAT_CALLS_DIFFER = "calls differ"

_LOW_PRECISION = ("bfloat16", "float16", "half")


@dataclass(frozen=True)
class Advice:
    line: Optional[int]  # 0-based row of the report (None: nothing fails); the file and console print line + 2
    node: str  # NPU Name of that row, or 'NA'
    expert_advice: str  # the reference's text
    category: str
    reason: str
    api: str = ""
    failing: int = 0  # how many rows fail
    producer: Optional[int] = None  # 0-based report row of the output that became this input (input suspects)
    producer_note: str = ""  # one line about the producer (or why none was found); "" unless an input fails
    culprit: Optional[int] = None  # the row to blame: the producer when it is target-only or differs, else line

    @property
    def report_row(self) -> Optional[int]:
        """The row number a user sees in the xlsx / csv (header = row 1)."""
        return None if self.line is None else self.line + 2

    def lines(self) -> List[str]:
        """The file's lines: the reference's three, then Category, Reason (and Producer)."""
        out = [
            f"Line: {'NA' if self.line is None else self.report_row}",
            f"Suspect Nodes: {self.node}",
            f"Expert Advice: {self.expert_advice}",
            f"Category: {self.category}",
            f"Reason: {self.reason}",
        ]
        if self.producer_note:
            out.append(f"Producer: {self.producer_note}")
        return out


def reference_advice(node: str) -> str:
    """The reference's advice for a row name (substring rules of compare.md §7.1)."""
    if "forward" in node:
        if "input" in node:
            msg = FORWARD_INPUT_SUGGEST
        else:
            msg = FORWARD_OUTPUT_SUGGEST
            if any(a in node for a in PRECISION_SENSITIVE_APIS):
                msg = DETERMINISTIC_SUGGEST
    else:
        if "input" in node:
            msg = BACKWARD_INPUT_SUGGEST
        else:
            msg = BACKWARD_OUTPUT_SUGGEST
            if any(a in node for a in PRECISION_SENSITIVE_APIS):
                msg = DETERMINISTIC_SUGGEST
    if "Functional_batch_norm" in node and "forward_input.1" in node:
        msg = BATCH_NORM_SUGGEST
    return msg


def _dtype_note(table: OpTable, i: int) -> str:
    nd, bd = table.col("NPU Dtype"), table.col("Bench Dtype")
    if nd is None or bd is None:
        return ""
    a, b = str(nd[i]), str(bd[i])
    if a != b and b != "N/A" and any(a.endswith(x) for x in _LOW_PRECISION):
        if verdicts(table) is not None:
            # the row is FAIL: the verdict already judged it against the dtype's rounding
            return (f" The target holds it in {a} and the golden run in {b}; the difference is larger than "
                    f"that rounding explains.")
        return f" The target holds it in {a} and the golden run in {b}, so part of the difference is expected rounding."
    return ""


# ---------------------------------------------------------------------------------------------- failing rows
def verdicts(table: OpTable) -> Optional[np.ndarray]:
    """The report's per-row verdicts, or None when it has none (e.g. a report read back from a file)."""
    v = getattr(table.report, "verdict", None)
    if v is None:
        return None
    v = np.asarray(v)
    return v if v.shape == (table.n,) else None


def failing_rows(table: OpTable) -> np.ndarray:
    """Rows the advisor treats as failing: verdict FAIL, else the mode's rule plus target-only NaN/inf."""
    v = verdicts(table)
    if v is not None:
        return vd.failing(v)
    # the mode's failing rows, plus target NaN/inf against a finite golden value (the reference's statistics
    # rule leaves those rows without a Warning, so it would report "all data meets the requirements")
    return table.failing | table.overflow_rows()


def first_failing(table: OpTable, failing: Optional[np.ndarray] = None) -> Optional[int]:
    """The first failing row in execution order (0-based report row), or None."""
    failing = failing_rows(table) if failing is None else failing
    if not failing.any():
        return None
    order = table.exec_order()
    hits = order[failing[order]]
    return int(hits[0])


_SHORT_DTYPE = {"bfloat16": "bf16", "float16": "fp16", "half": "fp16", "float32": "fp32", "float": "fp32",
                "float64": "fp64", "double": "fp64"}


def _short_dtype(d: str) -> str:
    d = str(d).lower()
    for sep in (".", "::"):
        if sep in d:
            d = d.rsplit(sep, 1)[1]
    return _SHORT_DTYPE.get(d, d)


def no_failure_reason(table: OpTable) -> str:
    """Why no row fails, in plain words (the advisor's and -da's 'none (...)')."""
    if table.n == 0:
        return "the report has no rows"
    v = verdicts(table)
    if v is None:
        unmatched = int(np.count_nonzero(~table.matched))
        text = "no row fails the accuracy test of this mode"
        if unmatched == table.n:
            return f"no row was compared ({unmatched} rows have no golden counterpart)"
        if unmatched:
            text += f"; {unmatched} of {table.n} rows have no golden counterpart and were not compared"
        return text
    counts = {k: int(np.count_nonzero(v == k)) for k in (vd.NOT_COMPARED, vd.PASS, vd.NOISE, vd.WARN)}
    nc = counts[vd.NOT_COMPARED]
    if nc == table.n:
        return f"no row was compared ({nc} rows have no golden counterpart or no comparable data)"
    if counts[vd.WARN]:
        text = (f"no row introduces an error of its own; {counts[vd.WARN]} rows differ beyond rounding but "
                f"inherit it from their inputs or the evidence is weak (WARN)")
    elif counts[vd.NOISE]:
        noisy = v == vd.NOISE
        names = set()
        for col in ("NPU Dtype", "Bench Dtype"):
            c = table.col(col)
            if c is not None:
                names.update(_short_dtype(d) for d in np.asarray(c, dtype=object)[noisy].tolist())
        low = [d for d in ("bf16", "fp16") if d in names]
        text = f"all differences are within {' and '.join(low) if low else 'floating-point'} rounding"
        # rows called noise though beyond accumulated rounding (below the floor of reduced-precision kernels, or
        # explained by their inputs): say so, with the largest, rather than 'within rounding' (a rank whose
        # weights took another rank's faulty gradient through an all-reduce differs by up to 0.2% at the next step)
        score = getattr(table.report, "score", None)
        unit = getattr(table.report, "unit", None)
        why = getattr(table.report, "why", None)
        if score is not None and unit is not None and np.shape(score) == (table.n,) and np.shape(unit) == (table.n,):
            with np.errstate(invalid="ignore"):
                beyond = noisy & (np.asarray(score, dtype=float) > vd.K_ACC * np.asarray(unit, dtype=float))
            if beyond.any():
                sc = np.where(beyond, np.asarray(score, dtype=float), -np.inf)
                i = int(np.argmax(sc))
                detail = why[i] if why is not None and why[i] else f"differs by {sc[i]:.3%}"
                text = (f"no row introduces an error of its own: {int(beyond.sum())} rows differ beyond accumulated "
                        f"rounding but are explained by their inputs or stay below the floor of reduced-precision "
                        f"kernels (the largest: {table.names[i]}, {detail})")
    else:
        text = "no row differs"
    if nc:
        text += f"; {nc} of {table.n} rows were not compared"
    return text


# ---------------------------------------------------------------------------------------------- producer
def _same(values: np.ndarray, usable: np.ndarray, i: int) -> np.ndarray:
    """Rows whose value equals row i's (NaN equals NaN; unusable cells equal nothing)."""
    if not usable[i]:
        return np.zeros(len(values), dtype=bool)
    x = values[i]
    if np.isnan(x):
        return usable & np.isnan(values)
    return usable & (values == x)


def _equal_cells(col: np.ndarray, i: int) -> np.ndarray:
    """Rows whose cell equals row i's (cells are text; a list cell is compared as a whole)."""
    x = col[i]
    if isinstance(x, (list, tuple)):
        return np.fromiter((v == x for v in col.tolist()), dtype=bool, count=len(col))
    return col == x


def find_producer(table: OpTable, i: int) -> Optional[int]:
    """The output row (0-based) that became input row ``i``: the latest output that ran before it, in the
    target, with the same dtype, shape and statistics (max/min/mean/norm) or md5, unmatched rows included.
    An API's output wins over a module's output holding the same tensor.  None when nothing matches."""
    pos = table.exec_position()
    cand = (pos < pos[i]) & (table.states == STATE_OUTPUT)
    g = table.group_of_row()
    cand &= g != g[i]
    for name in ("NPU Dtype", "NPU Tensor Shape"):
        cand &= _equal_cells(table._obj(name), i)
    if table.mode == MODE_MD5:
        c = table._obj("NPU MD5")
        if c[i] is None or c[i] in ("N/A", ""):
            return None
        cand &= _equal_cells(c, i)
    else:
        vals = [table.numeric(c) for c in NPU_STATS]
        if not (vals[0][1][i] and vals[1][1][i]):
            return None  # no statistics to recognise the tensor by
        for v, ok in vals:
            if ok[i]:
                cand &= _same(v, ok, i)
    idx = np.flatnonzero(cand)
    if not len(idx):
        return None
    idx = idx[np.argsort(pos[idx])]
    apis = [j for j in idx.tolist() if not table.apis[j].startswith(("Module.", "Cell."))]
    return apis[-1] if apis else int(idx[-1])


def _producer_note(table: OpTable, i: int, j: Optional[int], failing: np.ndarray) -> Tuple[str, bool]:
    """(text, blame) about input row i's producer j; blame: the producer is the better suspect."""
    if j is None:
        return ("the op that produced this input was not recorded (no output with the same "
                + ("md5" if table.mode == MODE_MD5 else "statistics") + ", dtype and shape ran before it: a dtype "
                "conversion such as autocast's, or an op outside the dump's scope/list); look at the code between "
                "the previous API and this one"), False
    api = table.apis[j]
    where = f"{api} ({table.names[j]}, report row {j + 2})"
    if not table.matched[j]:
        return (f"produced by {where}, which has no counterpart in the golden run: an op only the target "
                f"calls, a strong suspect"), True
    v = verdicts(table)
    differs = bool(failing[j]) or (v is not None and v[j] >= vd.WARN)
    if differs:
        return f"produced by {where}, whose output already differs from the golden run", True
    return (f"produced by {where}, whose output still matches the golden run: the tensor changed between the "
            f"two calls (an in-place op that was not recorded, or memory corruption), or the golden run's "
            f"{api} fed another tensor"), False


# ---------------------------------------------------------------------------------------------- advise
def advise(report, rank: int = 0, label: Optional[str] = None) -> Advice:
    """Analyse one compare report (in memory) and return the advice."""
    table = report if isinstance(report, OpTable) else OpTable(report, rank, label)
    failing = failing_rows(table)
    count = int(np.count_nonzero(failing))
    first = first_failing(table, failing)
    if first is None:
        v = verdicts(table)
        everything_compared = (bool(table.matched.all()) if v is None else not (v == vd.NOT_COMPARED).any())
        expert = NO_ERR_SUGGEST if everything_compared and table.n else (
            "No compared row fails the accuracy requirements; some rows were not compared.")
        return Advice(None, NO_ERROR_API, expert, CAT_NONE, no_failure_reason(table) + ".", failing=0)
    i = first
    node = table.names[i]
    api = table.apis[i]
    state = table.states[i]
    g = int(table.group_of_row()[i])
    s, e = int(table.starts[g]), int(table.ends[g])
    expert = reference_advice(node)
    backward = ".backward" in api or "backward" in node.split(".")
    nonfinite = table.overflow_rows()  # target-only NaN/inf: -inf on both sides (a mask fill) is no overflow
    bad_rows = np.flatnonzero(nonfinite[s:e])
    note = _dtype_note(table, i)
    producer, producer_note, culprit = None, "", i
    if len(bad_rows):
        r = s + int(bad_rows[0])
        where = "an input of" if table.states[r] in (STATE_INPUT, STATE_PARAMETERS) else "the result of"
        cat = CAT_OVERFLOW
        reason = (f"The target's {table.names[r]} ({where} {api}) has a NaN or infinite max/min: an overflow or an "
                  f"invalid operation (0/0, log of a negative number). "
                  + ("It already enters this API: look at the op that produced it."
                     if where == "an input of" else
                     "Check the value range of the target's dtype (fp16 overflows above 65504) and the inputs of this API."))
    elif is_communication_op(api):
        cat = CAT_COMM
        reason = (f"{api} is a communication op: its data comes from other ranks, so the divergence probably started "
                  f"on another rank before this call. Compare all ranks with -da to follow it across ranks.")
    elif state == STATE_INPUT:
        producer = find_producer(table, i)
        producer_note, blame = _producer_note(table, i, producer, failing)
        if blame:
            culprit = producer
        if producer is not None and not table.matched[producer]:
            cat = CAT_TARGET_ONLY
        else:
            cat = CAT_INPUT
        reason = (f"The data entering {api} already differs ({node}) while no row that ran before it fails: "
                  f"the error was made before this API; {producer_note}.")
    elif state == STATE_PARAMETERS:
        cat = CAT_PARAMS
        reason = (f"The parameters of {api} differ ({node}): the two runs did not start from the same weights, or an "
                  f"earlier optimizer step already diverged. Load the same checkpoint on both sides.")
    elif state == STATE_PARAMETERS_GRAD:
        cat = CAT_PARAMS_GRAD
        reason = (f"The gradient of {node.rsplit('.', 1)[-1]} in {api.rsplit('.parameters_grad', 1)[0]} differs while "
                  f"no row that ran before it (forward, and backward up to this module) fails: the backward "
                  f"computation of this module's parameter gradient is where the runs part.")
    elif _unpaired_input(table, s, e) is not None:
        k = _unpaired_input(table, s, e)
        cat = CAT_CALLS_DIFFER
        reason = (f"{api}'s output differs ({node}) and the target's call has {_describe_input(table, k)} with no "
                  f"golden counterpart: the two runs call {api.split('.')[1] if '.' in api else api} differently "
                  f"here. Either the API is called with another argument, or an op that runs on one side only (a "
                  f"user's hook, an extra cast) shifted this API's call numbers so that the golden call of this "
                  f"number is another one. This call is where the runs part: read its stack, and compare with -fm, "
                  f"which pairs whole calls by their arguments and names the op run on one side only.")
    elif any(a in node for a in PRECISION_SENSITIVE_APIS):
        cat = CAT_SENSITIVE
        reason = (f"{api}'s inputs match but its output differs, and it is a precision-sensitive API (accumulating "
                  f"sums: convolution, matmul, normalisation, loss): its result depends on the summation order and "
                  f"the accumulation precision. Enable deterministic computing (seed_all(mode=True)) and compare "
                  f"again; a difference that stays is a computation error of this API.")
    else:
        cat = CAT_BACKWARD if backward else CAT_FORWARD
        reason = (f"{api}'s inputs match but its output differs ({node}): the {'backward' if backward else 'forward'} "
                  f"computation of this API is where the runs part. Check its implementation on the target.")
        inside = _unmatched_inside(table, api)
        if inside:
            more = f" and {len(inside) - 3} more" if len(inside) > 3 else ""
            reason += (f" Inside it the target ran {', '.join(inside[:3])}{more}, which the golden run has not (no "
                       f"row of that name): a layer that differs between the two models.")
    return Advice(i, node, expert, cat, reason + note, api=api, failing=count, producer=producer,
                  producer_note=producer_note, culprit=culprit)


def _unpaired_input(table: OpTable, s: int, e: int) -> Optional[int]:
    """The first input row of the call at rows [s, e) that has no golden counterpart while the call's other rows
    do (a float where the golden's call of that number takes a tensor: not the same call)."""
    matched = table.matched
    if not matched[s:e].any():
        return None
    for k in range(s, e):
        if not matched[k] and table.states[k] == STATE_INPUT:
            return k
    return None


def _describe_input(table: OpTable, k: int) -> str:
    name = table.names[k]
    place = name[len(table.apis[k]) + 1:] if name.startswith(table.apis[k] + ".") else name
    dtype = (table.col("NPU Dtype") or [""] * table.n)[k]
    shape = (table.col("NPU Tensor Shape") or [""] * table.n)[k]
    if isinstance(dtype, str) and dtype.startswith("<class '"):
        value = (table.col("NPU max") or [""] * table.n)[k]
        return f"{place}, the {dtype[8:-2]} {value},"
    return f"{place}, a {dtype} tensor of shape {shape},"


def _unmatched_inside(table: OpTable, api: str) -> List[str]:
    """The sub-module calls of module call ``api`` (``Module.<path>.<Class>.forward.<n>``) that have no golden row:
    a layer swapped for another one (MobileNet's Hardswish replaced by a ReLU) pairs with nothing by name."""
    parts = api.split(".")
    if len(parts) < 5 or parts[0] not in ("Module", "Cell") or parts[-2] != "forward":
        return []
    prefix = ".".join(parts[:-3]) + "."
    matched = table.matched
    out: List[str] = []
    for k, (name, a) in enumerate(zip(table.names, table.apis)):
        if a != api and a.startswith(prefix) and not matched[k] and ".forward." in a and a not in out:
            out.append(a)
    return out


def advisor_name(label: Optional[str], ts: Optional[str] = None) -> str:
    """advisor_<ts>.txt, or advisor_<rank dir>_<ts>.txt per rank (as the reference names them)."""
    ts = ts or time.strftime("%Y%m%d%H%M%S")
    return f"advisor{'_' + label if label else ''}_{ts}.txt"


def write_advice(advice: Advice, out_dir: str, label: Optional[str] = None, ts: Optional[str] = None,
                 defer: bool = False):
    """Write the advisor file atomically (never replacing a file); returns the path written (``defer``: the
    finished file under its temporary name, a fileio.PendingWrite, named by the caller)."""
    from msprobe.core.fileio import atomic_write

    text = "".join(line + "\n" for line in advice.lines())

    def _write(tmp: str) -> None:
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write(text)

    return atomic_write(os.path.join(out_dir, advisor_name(label, ts)), _write, defer=defer)


def summary_lines(advice: Advice, label: Optional[str] = None) -> List[str]:
    """Short console summary (the same row number as the file's ``Line``)."""
    tag = f" {label}" if label else ""
    if advice.line is None:
        return [f"advisor{tag}: no failing row: {advice.reason.rstrip('.')}"]
    out = [
        f"advisor{tag}: first failing row: {advice.node} (report row {advice.report_row}, {advice.failing} failing rows)",
        f"  category: {advice.category}",
        f"  why: {advice.reason}",
    ]
    return out
