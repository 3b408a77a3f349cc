"""The advisor: after a compare, name the first row that fails accuracy and say why.

Input: a compare report in memory.  The failing rows are the mode's: statistics ``Result`` = Warning,
md5 ``Result`` = Different, tensor ``Accuracy Reached or Not`` = No.  The first one (in table order) is
the suspect.  The file ``advisor[_<rank>]_<ts>.txt`` holds the reference's three lines (``Line``,
``Suspect Nodes``, ``Expert Advice``, with the reference's advice texts) followed by two lines of
msprobe's own: ``Category`` and ``Reason`` (plain words: input already differs, overflow/NaN,
communication op, parameters differ, precision-sensitive API, forward/backward computation error).
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass
from typing import List, Optional

import numpy as np

from msprobe.core.advisor.comm import is_communication_op
from msprobe.core.advisor.table import (
    STATE_INPUT, STATE_PARAMETERS, STATE_PARAMETERS_GRAD, OpTable,
)

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
CAT_PARAMS = "parameters differ"
CAT_PARAMS_GRAD = "parameter gradient differs"
CAT_SENSITIVE = "precision-sensitive API"
CAT_FORWARD = "forward computation error"
CAT_BACKWARD = "backward computation error"

_LOW_PRECISION = ("bfloat16", "float16", "half")


@dataclass(frozen=True)
class Advice:
    line: Optional[int]  # 0-based row of the report (None: nothing fails)
    node: str  # NPU Name of that row, or 'NA'
    expert_advice: str  # the reference's text
    category: str
    reason: str
    api: str = ""
    failing: int = 0  # how many rows fail

    def lines(self) -> List[str]:
        """The file's lines: the reference's three, then Category and Reason."""
        return [
            f"Line: {'NA' if self.line is None else self.line}",
            f"Suspect Nodes: {self.node}",
            f"Expert Advice: {self.expert_advice}",
            f"Category: {self.category}",
            f"Reason: {self.reason}",
        ]


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
        return f" The target holds it in {a} and the golden run in {b}, so part of the difference is expected rounding."
    return ""


def advise(report, rank: int = 0, label: Optional[str] = None) -> Advice:
    """Analyse one compare report (in memory) and return the advice."""
    table = report if isinstance(report, OpTable) else OpTable(report, rank, label)
    # the mode's failing rows, plus target NaN/inf against a finite golden value (the reference's statistics
    # rule leaves those rows without a Warning, so it would report "all data meets the requirements")
    failing = table.failing | table.overflow_rows()
    idx = np.flatnonzero(failing)
    if not len(idx):
        return Advice(None, NO_ERROR_API, NO_ERR_SUGGEST, CAT_NONE,
                      "No row fails the accuracy test of this mode.", failing=0)
    i = int(idx[0])
    node = table.names[i]
    api = table.apis[i]
    state = table.states[i]
    g = int(table.group_of_row()[i])
    s, e = int(table.starts[g]), int(table.ends[g])
    expert = reference_advice(node)
    backward = ".backward" in api or "backward" in node.split(".")
    nonfinite = table.target_nonfinite()
    bad_rows = np.flatnonzero(nonfinite[s:e])
    note = _dtype_note(table, i)
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
        cat = CAT_INPUT
        reason = (f"The data entering {api} already differs ({node}): the error was made before this API, by the op "
                  f"that produced this input, by an in-place op that overwrote it, or by memory corruption; this is "
                  f"the first API of the dump where it shows.")
    elif state == STATE_PARAMETERS:
        cat = CAT_PARAMS
        reason = (f"The parameters of {api} differ ({node}): the two runs did not start from the same weights, or an "
                  f"earlier optimizer step already diverged. Load the same checkpoint on both sides.")
    elif state == STATE_PARAMETERS_GRAD:
        cat = CAT_PARAMS_GRAD
        reason = (f"The gradient of {node.rsplit('.', 1)[-1]} in {api.rsplit('.parameters_grad', 1)[0]} differs while "
                  f"everything before it in the dump matches: the backward computation of this module (its parameter "
                  f"gradient) is where the runs part.")
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
    return Advice(i, node, expert, cat, reason + note, api=api, failing=len(idx))


def advisor_name(label: Optional[str], ts: Optional[str] = None) -> str:
    """advisor_<ts>.txt, or advisor_<rank dir>_<ts>.txt per rank (as the reference names them)."""
    ts = ts or time.strftime("%Y%m%d%H%M%S")
    return f"advisor{'_' + label if label else ''}_{ts}.txt"


def write_advice(advice: Advice, out_dir: str, label: Optional[str] = None, ts: Optional[str] = None) -> str:
    """Write the advisor file atomically (never replacing a file); returns the path written."""
    from msprobe.core.fileio import atomic_write

    text = "".join(line + "\n" for line in advice.lines())

    def _write(tmp: str) -> None:
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write(text)

    return atomic_write(os.path.join(out_dir, advisor_name(label, ts)), _write)


def summary_lines(advice: Advice, label: Optional[str] = None) -> List[str]:
    """Short console summary."""
    tag = f" {label}" if label else ""
    if advice.line is None:
        return [f"advisor{tag}: all rows meet the accuracy requirements"]
    return [
        f"advisor{tag}: first failing row: {advice.node} (report row {advice.line + 2}, {advice.failing} failing rows)",
        f"  category: {advice.category}",
        f"  why: {advice.reason}",
    ]
