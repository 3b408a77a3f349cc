"""Node colours of a graph compare from msprobe's verdict (docs/graph.md, "Colours: msprobe's verdict").

The graph's matched item pairs become the same columns ``msprobe compare`` judges (one row per item of
every target node that is a dump entry, in dump.json order, unmatched nodes and items included), and
:func:`msprobe.core.compare.verdict.judge` gives one verdict per row: no second copy of the rules.  A node
takes the worst verdict of its own rows; the plugin's legend keeps its value ranges, and the node's
``precision_index`` is set inside the bucket of its verdict:

* fail -> the red bucket, warn -> the middle (yellow) bucket, pass / noise -> the green bucket;
* ``data["reference precision_index"]`` keeps the reference's index (``.vis`` only: the ``.vis.db`` node
  table has no free-form data column), ``data["msprobe verdict"]`` the verdict and the reason of the
  node's worst row, and each compared item its own ``msprobe verdict`` (shown in the detail panel of both
  formats).
"""

from __future__ import annotations

from operator import itemgetter
from typing import Dict, List, Optional, Tuple

import numpy as np

from msprobe.core.compare import verdict as vd
from msprobe.core.graph.model import MODE_MD5, MODE_TENSOR, TYPE_COLLECTION, Graph, Node

VERDICT_KEY = "msprobe verdict"
REFERENCE_KEY = "reference precision_index"

# the precision_index written for a node of each verdict, per mode (inside the legend's buckets:
# summary [0, 0.2) [0.4, 0.6) [0.8, 1]; tensor [0, 0.05) [0.1, 0.15) [0.2, 1]; md5 1 / [0.4, 0.6) / 0)
_VALUE = {
    "summary": {vd.FAIL: 1, vd.WARN: 0.5, vd.NOISE: 0, vd.PASS: 0},
    MODE_TENSOR: {vd.FAIL: 1, vd.WARN: 0.125, vd.NOISE: 0, vd.PASS: 0},
    MODE_MD5: {vd.FAIL: 0, vd.WARN: 0.5, vd.NOISE: 1, vd.PASS: 1},
}

_STAT_KEYS = ("Max", "Min", "Mean", "Norm")


def _stats(items: List[dict]) -> Tuple[np.ndarray, np.ndarray]:
    """(4, n) Max/Min/Mean/Norm and their is-a-number masks (NaN included; 'True'/'False' of bool tensors
    as 1/0, as compare reads them)."""
    n = len(items)
    vals = np.full((4, n), np.nan)
    ok = np.zeros((4, n), dtype=bool)
    for k, key in enumerate(_STAT_KEYS):
        try:
            col = list(map(itemgetter(key), items))  # every item carries the four keys (build._leaf_item)
        except KeyError:
            col = [it.get(key) for it in items]
        if not set(map(type, col)) <= _PLAIN:
            col = [v if v.__class__ in _PLAIN else (1.0 if v == "True" else 0.0 if v == "False" else None) for v in col]
        try:
            vals[k] = np.array(col, dtype=np.float64)  # None -> NaN
        except OverflowError:  # an integer beyond float64 (a damaged or odd record): not a number
            col = [v if v.__class__ is not int or abs(v) < 2 ** 1023 else None for v in col]
            vals[k] = np.array(col, dtype=np.float64)
        ok[k] = np.array([v is not None for v in col], dtype=bool)
    return vals, ok


_PLAIN = {float, int, type(None)}


def judge_graph(g_n: Graph, pairs: Dict[int, Optional[dict]], mode: str, equal_of=None):
    """(nodes, items, Judgement): one row per item of every target node that is a dump entry, in dump
    order; ``pairs`` maps id(target item) -> golden item (missing: unmatched)."""
    from msprobe.core.dump.reader import NO_VALUE

    nodes: List[Node] = []
    seen = set()
    order = list(g_n.dump_order) + [k for k in g_n.nodes if k not in g_n.data_keys]
    for key in order:
        n = g_n.nodes.get(key)
        if n is None or id(n) in seen or n.type == TYPE_COLLECTION or n is g_n.root:
            continue
        if not n.input_data and not n.output_data:
            continue
        seen.add(id(n))
        nodes.append(n)
    names: List[str] = []
    api: List[str] = []
    state: List[str] = []
    t_items: List[dict] = []
    owner: List[int] = []
    empty: dict = dict.fromkeys(_STAT_KEYS)  # the golden side of an unmatched item
    for k, n in enumerate(nodes):
        inp, out = n.input_data, n.output_data
        cnt = len(inp) + len(out)
        names.extend(inp)
        names.extend(out)
        t_items.extend(inp.values())
        t_items.extend(out.values())
        if n.id.endswith(".parameters_grad"):
            state.extend(["parameters_grad"] * cnt)
        else:
            # input_data holds the inputs, then the parameters (build.split_items); output_data the outputs
            state.extend(["parameters" if ".parameters." in name else "input" for name in inp])
            state.extend(["output"] * len(out))
        api.extend([n.id] * cnt)
        owner.extend([k] * cnt)
    get = pairs.get
    g_items = [get(id(it)) or empty for it in t_items]
    matched = np.array([bt is not empty for bt in g_items], dtype=bool)
    ts, tok = _stats(t_items)
    gs, gok = _stats(g_items)

    # as compare's reader: a tensor has statistics, anything else its recorded value (None when none)
    t_types = [it.get("type") for it in t_items]
    g_types = [bt.get("type") for bt in g_items]
    tensor_types = {x for x in set(t_types) | set(g_types) if isinstance(x, str) and x.endswith(_TENSOR_SUFFIXES)}
    t_value = [NO_VALUE if ty in tensor_types else it.get("value") for it, ty in zip(t_items, t_types)]
    g_value = [NO_VALUE if (ty in tensor_types or bt is empty) else bt.get("value") for bt, ty in zip(g_items, g_types)]
    rg_bad = np.array([bt is not empty and it.get("requires_grad") != bt.get("requires_grad")
                       for it, bt in zip(t_items, g_items)], dtype=bool)
    equal = None
    if mode == MODE_MD5 and equal_of is not None:
        equal = np.array([bt is not empty and equal_of(it, bt) for it, bt in zip(t_items, g_items)], dtype=bool)
    facts = vd.Facts(
        names=names, api=api, state=state, matched=matched, shape=[str(it.get("shape")) for it in t_items],
        t_dtype=[str(it.get("dtype")) for it in t_items], g_dtype=[str(bt.get("dtype")) for bt in g_items],
        t_stats=ts, g_stats=gs, t_ok=tok, g_ok=gok,
        t_value=t_value, g_value=g_value,
        equal=equal, rg_bad=rg_bad,
    )
    return nodes, t_items, names, np.array(owner, dtype=np.int64), vd.judge(facts)


_TENSOR_SUFFIXES = ("Tensor", "Parameter")


def apply_verdict(g_n: Graph, pairs: Dict[int, Optional[dict]], mode: str, matched_nodes: List[Node],
                  equal_of=None) -> dict:
    """Colour the matched target nodes by verdict (see the module docstring); returns {verdict: nodes} and
    sets ``g_n.verdict_summary`` (red and yellow node counts, the node where the first error enters)."""
    nodes, items, names, owner, j = judge_graph(g_n, pairs, mode, equal_of)
    values = _VALUE[mode if mode in _VALUE else "summary"]
    v = j.verdict
    # worst row per node (NOT_COMPARED < PASS < NOISE < WARN < FAIL), first such row in dump order
    worst = np.full(len(nodes), vd.NOT_COMPARED, dtype=np.int8)
    if len(v):
        np.maximum.at(worst, owner, v)
    rows_of: Dict[int, int] = {}
    for i in np.flatnonzero(v >= vd.WARN).tolist():
        k = int(owner[i])
        if v[i] == worst[k] and k not in rows_of:
            rows_of[k] = i
    for i in np.flatnonzero(v >= vd.WARN).tolist():  # each red/yellow item says why
        items[i][VERDICT_KEY] = f"{vd.NAMES[int(v[i])]}: {j.why[i]}"
    index_of = {id(n): k for k, n in enumerate(nodes)}
    counts = {x: 0 for x in vd.NAMES}
    for n in matched_nodes:
        if n.type == TYPE_COLLECTION or n is g_n.root:
            continue
        ref = n.data.get("precision_index")
        if ref is None:
            continue
        k = index_of.get(id(n))
        w = int(worst[k]) if k is not None else vd.NOT_COMPARED
        n.data[REFERENCE_KEY] = ref
        if w == vd.NOT_COMPARED:
            w = vd.PASS  # nothing of its own to compare (a module without records): neutral, as the reference
        counts[w] += 1
        n.data["precision_index"] = values[w]
        if w >= vd.WARN and k in rows_of:
            i = rows_of[k]
            n.data[VERDICT_KEY] = f"{vd.NAMES[w]}: {j.why[i]} ({names[i]})"
        else:
            n.data[VERDICT_KEY] = vd.NAMES[w]
        if mode == MODE_MD5:
            # as compare's md5 Result: CRCs that differ within rounding are not a difference to chase
            n.data["Result"] = ("pass" if w == vd.PASS or n.data["Result"] == "pass" else
                                "Different (within noise)" if w == vd.NOISE else "Different")
    for c in g_n.root.subnodes:
        if c.type == TYPE_COLLECTION and "precision_index" in c.data:
            ws = [s.data.get(VERDICT_KEY, "pass").split(":", 1)[0] for s in c.subnodes]
            w = max([_by_name(x) for x in ws] + [vd.PASS])
            c.data[REFERENCE_KEY] = c.data["precision_index"]
            c.data["precision_index"] = values[w]
            c.data[VERDICT_KEY] = vd.NAMES[w]
    # the node where the first error enters, in execution order (forward, backward, parameter gradients)
    first = ""
    fails = np.flatnonzero(v == vd.FAIL)
    if len(fails):
        if j.exec_pos is not None:
            fails = fails[np.argsort(j.exec_pos[fails], kind="stable")]
        first = nodes[int(owner[fails[0]])].id
    g_n.verdict_summary = {"fail": counts[vd.FAIL], "warn": counts[vd.WARN], "first_fail": first,
                           "noise_label": vd.noise_label(j.unit, v) if len(v) else "dtype"}
    return counts


def _by_name(text: str) -> int:
    for k, name in vd.NAMES.items():
        if name == text:
            return k
    return vd.PASS

