"""Suspects ranked by local error growth (design_notes.md §1.6).

The reference's -da names the first API whose relative statistics error exceeds 0.5.  Errors propagate, so
every op after the one that broke things differs too, and usually by more; the absolute error points at
the end of the chain, not at its start.  Here every API is scored by how much its *output* error exceeds
the error already present in its *inputs*:

    growth = (output error + floor) / (input error + floor)

* error of a row: the scale-aware statistics error of :meth:`OpTable.row_error` (|d max|, |d min|, |d mean|
  relative to the golden tensor's largest magnitude; |d l2norm| relative to the golden l2norm; tensor
  mode also MaxAbsErr; md5: 1 when the CRC32 differs);
* input error: the largest error among the API's input and parameter rows (0 when it has none);
  output error: the largest among its output rows;
* floor: the noise floor of the API's dtypes (torch.testing.assert_close's default rtol: bf16 1.6e-2,
  fp16 1e-3, fp32 1.3e-6), so ordinary low-precision rounding neither makes an op a suspect nor divides
  by zero.

An API is a suspect when its output error exceeds the floor and its growth exceeds 1 and, when the report
has verdicts (:mod:`msprobe.core.compare.verdict`), one of its output rows is WARN or FAIL (beyond what
rounding explains), so a control pair (bf16 against fp32, no bug) lists no suspect.  Skipped: noise ops
(the configurable list), communication ops (their output error comes from other ranks),
``parameters_grad`` records (not ops) and, when the dump holds API rows, modules (a module repeats the
growth of the API inside it).  Suspects are ordered by growth, then by execution order
(:meth:`OpTable.exec_order`).
"""

from __future__ import annotations

import math
import re
from typing import Dict, List

import numpy as np

from msprobe.core.advisor.comm import is_communication_op
from msprobe.core.advisor.config import AnalysisConfig
from msprobe.core.advisor.table import STATE_INPUT, STATE_OUTPUT, STATE_PARAMETERS, OpTable
from msprobe.core.compare import verdict as vd

_MODULE_PREFIXES = ("Module.", "Cell.")


def noise_matcher(cfg: AnalysisConfig):
    """A fast predicate for 'this API name is a noise op'."""
    if not cfg.noise_ops:
        return lambda api: False
    rx = re.compile("|".join(re.escape(p) for p in cfg.noise_ops))
    return lambda api: rx.search(api) is not None


def _segment_max(values: np.ndarray, mask: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """Per-group max of values[mask] (NaN where a group has no usable value)."""
    v = np.where(mask, values, np.nan)
    with np.errstate(all="ignore"):
        return np.fmax.reduceat(v, starts) if len(starts) else np.zeros(0)


def group_errors(table: OpTable):
    """(input error, output error, floor) per API group."""
    err = table.row_error()
    tol = table.row_tolerance()
    st = table.states
    in_mask = (st == STATE_INPUT) | (st == STATE_PARAMETERS)
    out_mask = st == STATE_OUTPUT
    usable = ~np.isnan(err)
    e_in = _segment_max(err, in_mask & usable, table.starts)
    e_out = _segment_max(err, out_mask & usable, table.starts)
    floor = _segment_max(tol, out_mask, table.starts)
    floor_all = _segment_max(tol, np.ones(table.n, dtype=bool), table.starts)
    floor = np.where(np.isnan(floor), floor_all, floor)
    e_in = np.where(np.isnan(e_in), 0.0, e_in)
    return e_in, e_out, floor


def rank_suspects(table: OpTable, cfg: AnalysisConfig, top: int = 0) -> List[Dict]:
    """The suspects of one rank, best first (all of them, or the first ``top``)."""
    if table.n == 0:
        return []
    e_in, e_out, floor = group_errors(table)
    is_noise = noise_matcher(cfg)
    apis = table.group_api
    skip = np.fromiter(
        (is_noise(a) or is_communication_op(a) or a.endswith("parameters_grad") for a in apis),
        dtype=bool, count=len(apis),
    )
    with np.errstate(all="ignore"):
        inf_out = np.isinf(e_out)
        growth = np.where(inf_out & ~np.isinf(e_in), np.inf, (e_out + floor) / (e_in + floor))
        cand = ~skip & ~np.isnan(e_out) & (e_out > floor) & (growth > 1.0)
    v = getattr(table.report, "verdict", None)
    if v is not None and len(v) == table.n:
        # with verdicts, only APIs with an output beyond what rounding explains (WARN / FAIL) are suspects
        beyond = (np.asarray(v) >= vd.WARN) & (table.states == STATE_OUTPUT)
        cand &= np.logical_or.reduceat(beyond, table.starts)
    if cand.any():
        is_module = np.fromiter((a.startswith(_MODULE_PREFIXES) for a in apis), dtype=bool, count=len(apis))
        if (cand & ~is_module).any():
            cand &= ~is_module
    idx = np.flatnonzero(cand)
    if not len(idx):
        return []
    gpos = np.empty(len(apis), dtype=np.int64)  # execution position of every group (ties: earlier first)
    gpos[table.exec_group_order()] = np.arange(len(apis), dtype=np.int64)
    order = idx[np.lexsort((gpos[idx], -growth[idx]))]
    if top:
        order = order[:top]
    out = []
    for g in order.tolist():
        out.append({
            "op_name": apis[g],
            "growth": _num(growth[g]),
            "input_error": _num(e_in[g]),
            "output_error": _num(e_out[g]),
            "floor": _num(floor[g]),
            "report_row": int(table.starts[g]),
        })
    return out


def _num(x) -> object:
    x = float(x)
    if math.isinf(x):
        return "inf"
    return float(f"{x:.6g}")


def _fmt(v) -> str:
    return "inf" if v == "inf" else f"{v:.3g}"


def format_growth(s: Dict) -> str:
    """One console line: name, growth, input and output error."""
    return (f"{s['op_name']}: growth x{_fmt(s['growth'])} "
            f"(input error {_fmt(s['input_error'])} -> output error {_fmt(s['output_error'])})")
