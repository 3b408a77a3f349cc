"""Red / yellow highlighting of suspicious rows (compare.md §6), vectorised.

Rows are grouped per API (consecutive rows with the same dump key).  In each group the first row and
the input / parameter rows are "inputs", the remaining output rows are "outputs".  Per-row rules run
first (R1 overflow), then every output is checked against every input of its API (R2-R5), then the
requires_grad rule (R6).  A row is red if any red rule fired, else yellow if any yellow rule fired;
its messages (red ones for red rows, yellow ones for yellow rows) are appended to Err_message, one per
line, in that order.

Deliberate differences from the reference: NaN statistics trigger R1 (the reference compares against
'nan' but stores 'Nan', so NaN never turned red), and unmatched rows are not flagged by R6.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional

import numpy as np

NONE, RED, YELLOW = 0, 1, 2

MSG_R1_NAN = "maximum or minimum is nan, -inf, or inf"
MSG_R1_BIG = "maximum absolute error exceeds 1e+10"
MSG_R2 = (
    "maximum absolute error of both input/parameters and output exceed 1, with the output larger by an order of magnitude"
)
MSG_R3_RED = "maximum relative error exceeds 0.5"
MSG_R3_YELLOW = "The output's maximum relative error exceeds 0.1, while the input/parameter's is below 0.01"
MSG_R4_RED = "The input/parameter's one thousandth err ratio exceeds 0.9, while the output's is below 0.6"
MSG_R4_YELLOW = "The output's one thousandth err ratio decreases by more than 0.1 compared to the input/parameter's"
MSG_R5 = "The output's cosine decreases by more than 0.1 compared to the input/parameter's"
MSG_R6 = "requires_grad is inconsistent"


@dataclass
class HighlightInput:
    api: List[str]  # dump key per row
    state: List[str]  # input / parameters / output / parameters_grad
    npu_nonfinite: np.ndarray  # bool: NPU max or min is nan, inf or -inf (rule R1)
    npu_max_num: np.ndarray  # bool: NPU max is a number other than NaN (gate of the pair rules)
    bench_max_num: np.ndarray  # bool
    max_diff: np.ndarray  # float64 (Max diff / MaxAbsErr), NaN where not a number
    max_diff_num: np.ndarray  # bool
    rel: Optional[np.ndarray] = None  # statistics: MaxRelativeErr as a fraction, NaN where not numeric
    one_thousandth: Optional[np.ndarray] = None  # tensor: float64, NaN where not numeric
    cosine: Optional[np.ndarray] = None  # tensor
    rg_inconsistent: Optional[np.ndarray] = None  # bool, matched rows whose requires_grad differ


def _pairs(api: List[str], state: List[str]):
    """(out_rows, in_rows) index arrays: each output row against each input row of its API."""
    n = len(api)
    if n == 0:
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty
    api_arr = np.asarray(api, dtype=object)
    new_batch = np.ones(n, dtype=bool)
    new_batch[1:] = api_arr[1:] != api_arr[:-1]
    batch = np.cumsum(new_batch) - 1
    st = np.asarray(state, dtype=object)
    is_in = new_batch | (st == "input") | (st == "parameters")
    is_out = ~new_batch & (st == "output")
    starts = np.nonzero(new_batch)[0]
    n_in = np.bincount(batch, weights=is_in, minlength=len(starts)).astype(np.int64)
    out_rows = np.nonzero(is_out)[0]
    if len(out_rows) == 0:
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty
    ob = batch[out_rows]
    k = n_in[ob]
    pair_out = np.repeat(out_rows, k)
    # position of each pair inside its output's run of inputs
    offsets = np.arange(len(pair_out)) - np.repeat(np.cumsum(k) - k, k)
    # inputs of a batch are contiguous from its start (rows are ordered inputs, parameters, outputs)
    in_rows_sorted = np.nonzero(is_in)[0]
    first_in = np.searchsorted(in_rows_sorted, starts)
    pair_in = in_rows_sorted[np.repeat(first_in[ob], k) + offsets]
    return pair_out, pair_in


def highlight(h: HighlightInput, tensor_mode: bool):
    """Return (colour per row: int8 array of NONE/RED/YELLOW, message per row: list of str)."""
    n = len(h.api)
    events: List[tuple] = []  # (row, order, colour, message)

    r1_nan = h.npu_nonfinite
    with np.errstate(invalid="ignore"):
        r1_big = ~r1_nan & h.max_diff_num & (np.abs(h.max_diff) > 1e10)
    for i in np.nonzero(r1_nan)[0].tolist():
        events.append((i, 0, RED, MSG_R1_NAN))
    for i in np.nonzero(r1_big)[0].tolist():
        events.append((i, 0, RED, MSG_R1_BIG))

    po, pi = _pairs(h.api, h.state)
    if len(po):
        gate = (
            h.npu_max_num[po] & h.bench_max_num[po] & h.max_diff_num[po]
            & h.npu_max_num[pi] & h.bench_max_num[pi] & h.max_diff_num[pi]
        )
        order = np.arange(len(po)) * 4 + 1  # pair order, then rule order inside a pair
        with np.errstate(all="ignore"):
            a = np.abs(h.max_diff[pi])
            c = np.abs(h.max_diff[po])
            r2 = gate & (a <= c) & (a > 1) & (c > 1) & (np.log10(c) - np.log10(a) >= 1)
            rule_hits = [(r2, 0, YELLOW, MSG_R2)]
            if not tensor_mode and h.rel is not None:
                ro, ri = h.rel[po], h.rel[pi]
                rule_hits.append((gate & (ro > 0.5), 1, RED, MSG_R3_RED))
                rule_hits.append((gate & (ro > 0.1) & (ri < 0.01), 1, YELLOW, MSG_R3_YELLOW))
            if tensor_mode and h.one_thousandth is not None:
                to, ti = h.one_thousandth[po], h.one_thousandth[pi]
                red4 = gate & (ti > 0.9) & (to < 0.6)
                rule_hits.append((red4, 2, RED, MSG_R4_RED))
                rule_hits.append((gate & ~red4 & (ti - to > 0.1), 2, YELLOW, MSG_R4_YELLOW))
            if tensor_mode and h.cosine is not None:
                co, ci = h.cosine[po], h.cosine[pi]
                rule_hits.append((gate & (ci - co > 0.1), 3, YELLOW, MSG_R5))
        for mask, sub, colour, msg in rule_hits:
            for k in np.nonzero(mask)[0].tolist():
                events.append((int(po[k]), int(order[k]) + sub, colour, msg))

    if h.rg_inconsistent is not None:
        last = 4 * (len(po) + 1) + 10
        for i in np.nonzero(h.rg_inconsistent)[0].tolist():
            events.append((i, last, YELLOW, MSG_R6))

    colours = np.zeros(n, dtype=np.int8)
    messages = [""] * n
    if not events:
        return colours, messages
    events.sort(key=lambda e: (e[0], e[1]))
    by_row: dict = {}
    for row, _, colour, msg in events:
        by_row.setdefault(row, []).append((colour, msg))
    for row, items in by_row.items():
        reds = [m for c, m in items if c == RED]
        if reds:
            colours[row] = RED
            messages[row] = "\n".join(reds)
        else:
            colours[row] = YELLOW
            messages[row] = "\n".join(m for c, m in items)
    return colours, messages
