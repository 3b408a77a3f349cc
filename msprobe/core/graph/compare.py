"""Two graphs -> matched pairs -> per-item compare fields -> per-node ``precision_index``.

Matching (graph_and_tools.md A.6.2, 8.x rules):

* default: the Bench node with the same id, with equal ancestor ids and position-wise equal input and
  output ``type``/``shape`` (and equal item counts);
* fuzzy (``-fm``): modules/collections by id and shape only; the API children of a matched module pair are
  paired by (name without call counter, structure (item types and shapes), occurrence within the module);
* layer mapping (``-lm``): the Bench node named by the mapping (or the same id), no checks.

Metrics: all matched item pairs of the whole graph go into one set of numpy columns (statistics) or one
tensor-comparison batch (tensor mode); nothing is computed per row in Python except formatting.

precision_index (8.x semantics, A.6.5): statistics = max relative error of the node's outputs (1 when an
output statistic is inf/nan); md5 = 1 when every item matches (1 = good in this mode); tensor =
min input One Thousandth ratio - min output ratio, clamped to [0, 1]; "empty"-like APIs get the neutral
value; ``Apis_Between_Modules`` collections take the worst of their children.  Deliberate difference: in
tensor mode collections are computed after the tensor metrics (the reference computes them before, so
they are always 0 there).

Colours: unless ``reference_colours``, msprobe's verdict (compare's rule set, :mod:`msprobe.core.graph.verdict`)
then replaces the index with a value inside its verdict's legend bucket and keeps the reference's value in
the node data (docs/graph.md, "Colours: msprobe's verdict").
"""

from __future__ import annotations

import math
import os
import re
from typing import Callable, Dict, List, Optional, Tuple

import numpy as np

from msprobe.core.errors import MsprobeError
from msprobe.core.graph.build import md5_of
from msprobe.core.graph.model import (  # noqa: F401  (MODE_*, Text: re-exported, callers import them from here)
    MODE_MD5, MODE_SUMMARY, MODE_TENSOR, TYPE_API, TYPE_COLLECTION, Graph, Node, Text,
)

SUMMARY_KEYS = ("Max diff", "Min diff", "Mean diff", "L2norm diff",
                "MaxRelativeErr", "MinRelativeErr", "MeanRelativeErr", "NormRelativeErr")
TENSOR_KEYS = ("Cosine", "EucDist", "MaxAbsErr", "MaxRelativeErr", "One Thousandth Err Ratio", "Five Thousandths Err Ratio")
RG_KEY = "Requires_grad Consistent"
IGNORE_INDEX = frozenset({"empty", "empty_like", "empty_with_format", "new_empty_strided", "new_empty", "empty_strided"})

_COUNTER = re.compile(r"\.\d+\.")
_RANK_SUFFIX = re.compile(r"_rank\d+")
_STATS = ("Max", "Min", "Mean", "Norm")


def compare_mode(g_n: Graph, g_b: Graph) -> str:
    """summary / md5 / all from the two dump.json files (A.6.1)."""
    tn, tb = g_n.task, g_b.task
    if tn != tb:
        raise MsprobeError(
            f"the target dump {g_n.dump_dir} is task {tn!r} but the golden dump {g_b.dump_dir} is task {tb!r}; "
            f"a graph compare needs two dumps of the same task"
        )
    if tn == "tensor":
        return MODE_TENSOR
    if tn != "statistics":
        raise MsprobeError(
            f"the dumps in {g_n.dump_dir} are task {tn!r}; graph compare works on task 'statistics' (with or without md5) or 'tensor'"
        )
    hn, hb = g_n.has_md5, g_b.has_md5
    if hn != hb:
        side, other = (g_n, g_b) if hn else (g_b, g_n)
        raise MsprobeError(
            f"the dump in {side.dump_dir} holds md5 values but the dump in {other.dump_dir} holds statistics; "
            f"dump both sides with the same summary_mode"
        )
    return MODE_MD5 if hn else MODE_SUMMARY


# ---------------------------------------------------------------------------------------------- matching


def _same_structure(a: Dict[str, dict], b: Dict[str, dict]) -> bool:
    if len(a) != len(b):
        return False
    for x, y in zip(a.values(), b.values()):
        if x.get("type") != y.get("type") or x.get("shape") != y.get("shape"):
            return False
    return True


def _same_shapes(a: Dict[str, dict], b: Dict[str, dict]) -> bool:
    for x, y in zip(a.values(), b.values()):
        if x.get("shape") != y.get("shape"):
            return False
    return True


def _ids(node: Node) -> List[str]:
    return node.ancestors()


def match_default(g_n: Graph, g_b: Graph) -> List[Tuple[Node, Node]]:
    pairs: List[Tuple[Node, Node]] = []
    same_anc: Dict[str, bool] = {}
    bnodes = g_b.nodes
    for n in g_n.bfs():
        b = bnodes.get(n.id)
        if b is None:
            continue
        if not (_same_structure(n.input_data, b.input_data) and _same_structure(n.output_data, b.output_data)):
            continue
        # ancestors equal <=> parents have equal ids and equal ancestors (memoised by id, computed top-down)
        if n.up is None or b.up is None:
            ok = n.up is None and b.up is None
        else:
            ok = n.up.id == b.up.id and same_anc.get(n.up.id, False)
        same_anc[n.id] = ok
        if not ok:
            continue
        link = _ids(n) + [b.id]
        n.link = link
        b.link = link
        n.partner, b.partner = b, n
        pairs.append((n, b))
    return pairs


def _link(n: Node, b: Node, pairs: list) -> None:
    n.link = _ids(b) + [b.id]
    b.link = _ids(n) + [n.id]
    n.partner, b.partner = b, n
    pairs.append((n, b))


def _signature(node: Node, with_shapes: bool) -> str:
    """An API node's structure: each input's and output's type (and shape)."""
    items = list(node.input_data.values()) + ["|"] + list(node.output_data.values())
    return ";".join(it if it == "|" else f"{it.get('type')}{it.get('shape') if with_shapes else ''}" for it in items)


def _recount(node: Node, with_shapes: bool = True) -> Dict[str, Node]:
    """The API children of a module by (name without call counter, structure, occurrence): a call run on one
    side only (``o * 1.05`` in a user's hook between two ``x * y``) does not shift the later calls."""
    counts: Dict[str, int] = {}
    out: Dict[str, Node] = {}
    for c in node.subnodes:
        if c.type != TYPE_API:
            continue
        key = _COUNTER.sub(".", c.id)
        key = _RANK_SUFFIX.sub("", key) + "#" + _signature(c, with_shapes) + "#"
        counts[key] = counts.get(key, 0) + 1
        out[key + str(counts[key])] = c
    return out


def _backward_twin(node_id: str) -> Optional[str]:
    """``Tensor.mul.3.forward`` for ``Tensor.mul.3.backward`` (None for a forward node)."""
    head, sep, tail = node_id.rpartition(".backward")
    return head + ".forward" + tail if sep else None


def match_fuzzy(g_n: Graph, g_b: Graph, check_shape: bool = True) -> List[Tuple[Node, Node]]:
    """Modules by id (and shapes); the API children of a matched module pair by name without counter, structure
    and occurrence, except a backward API whose forward node exists: it pairs with the backward of its forward's
    partner, or with nothing when its forward has none (backward calls run in another order when the two graphs
    differ, fused sdpa against eager attention, so their k-th occurrences are other calls)."""
    pairs: List[Tuple[Node, Node]] = []
    bnodes = g_b.nodes
    modules: List[Tuple[Node, Node]] = []
    for n in g_n.bfs():
        if n.type == TYPE_API:
            continue
        b = bnodes.get(n.id)
        if b is None or (check_shape and not (_same_shapes(n.input_data, b.input_data) and _same_shapes(n.output_data, b.output_data))):
            continue
        _link(n, b, pairs)
        modules.append((n, b))

    def fits(an: Node, ab: Node) -> bool:
        return ab.partner is None and (not check_shape or (_same_shapes(an.input_data, ab.input_data)
                                                           and _same_shapes(an.output_data, ab.output_data)))
    for n, b in modules:  # forward (and other) API children first
        apis_b = _recount(b, check_shape)
        for key, an in _recount(n, check_shape).items():
            ab = apis_b.get(key)
            if ab is not None and _backward_twin(an.id) is None and fits(an, ab):
                _link(an, ab, pairs)
    tnodes = g_n.nodes
    for n, b in modules:  # backward API children: the backward of the forward's partner, else by occurrence
        apis_b = _recount(b, check_shape)
        for key, an in _recount(n, check_shape).items():
            twin = _backward_twin(an.id)
            if twin is None or an.partner is not None:
                continue
            fwd = tnodes.get(twin)
            if fwd is not None and fwd.partner is None:
                continue  # its forward pairs with nothing: neither does the backward (no k-th guess across graphs)
            ab = None
            if fwd is not None:
                ab = bnodes.get(fwd.partner.id.replace(".forward", ".backward", 1)
                                if fwd.partner.id.count(".forward") == 1 else "")
                if ab is not None and not fits(an, ab):
                    ab = None
            if ab is None:
                ab = apis_b.get(key)
                if ab is None or not fits(an, ab):
                    continue
            _link(an, ab, pairs)
    return pairs


def match_mapping(g_n: Graph, g_b: Graph, mapping: Dict[str, str]) -> List[Tuple[Node, Node]]:
    """Match through a layer map.  The map covers the dump entries: an entry it leaves out has no partner
    (the reference maps it to "N/A"); nodes that are not dump entries (root, collections) match by id."""
    pairs: List[Tuple[Node, Node]] = []
    bnodes = g_b.nodes
    data = g_n.data_keys
    for n in g_n.bfs():
        target = mapping.get(n.id)
        if target is None and n.id not in data:
            target = n.id
        b = bnodes.get(target) if target is not None else None
        if b is None:
            continue
        _link(n, b, pairs)
    return pairs


# ---------------------------------------------------------------------------------------------- item pairs


def _category(name: str, node_id: str) -> int:
    """0 inputs, 1 parameters, 2 outputs, 3 parameters_grad (the compare's pairing groups)."""
    if node_id.endswith(".parameters_grad"):
        return 3
    if ".parameters." in name:
        return 1
    return 0


def _item_pairs(n: Node, b: Node) -> List[Tuple[dict, Optional[dict]]]:
    """Items of the two nodes paired by position inside each group; NPU extras get None."""
    groups_n: List[List[dict]] = [[], [], [], []]
    groups_b: List[List[dict]] = [[], [], [], []]
    for name, it in n.input_data.items():
        groups_n[_category(name, n.id)].append(it)
    groups_n[2].extend(n.output_data.values())
    for name, it in b.input_data.items():
        groups_b[_category(name, b.id)].append(it)
    groups_b[2].extend(b.output_data.values())
    out: List[Tuple[dict, Optional[dict]]] = []
    for gn, gb in zip(groups_n, groups_b):
        for i, it in enumerate(gn):
            out.append((it, gb[i] if i < len(gb) else None))
    return out


def _is_num(v) -> bool:
    c = v.__class__
    return c is float or c is int


def _invalid(v) -> bool:
    return v.__class__ is float and (math.isnan(v) or math.isinf(v))


_TRUE, _FALSE, _NA, _NAN = Text("True"), Text("False"), Text("N/A"), Text("Nan")


def _rel_text(r: float) -> str:
    t = repr(r)
    if "e" not in t and "n" not in t:  # plain decimal: the viewer shows at most 6 decimals
        dot = t.find(".")
        if dot >= 0 and len(t) - dot - 1 > 6:
            t = "{:.6f}".format(r)
    return Text(t + "%")


def _rel_texts(values: List[float]) -> List[str]:
    """:func:`_rel_text` over many values (the reference's ``str(x) + '%'``, then at most 6 decimals)."""
    reprs = list(map(repr, values))
    six = list(map("%.6f".__mod__, values))
    return list(map(Text, [(r if ("e" in r or "n" in r or len(r) - r.find(".") <= 7) else x) + "%"
                           for r, x in zip(reprs, six)]))


_EMPTY: dict = {}
_PLAIN = {float, int, type(None)}


def _column(values: list) -> Tuple[np.ndarray, np.ndarray]:
    """(float64 values, is-a-number mask) of one statistic over many items."""
    if not set(map(type, values)) <= _PLAIN:
        # text values (bool tensors' "True", src/dst ...) are not numbers: blank them first, since numpy
        # would parse numeric text
        plain = _PLAIN
        values = [v if v.__class__ in plain else None for v in values]
    arr = np.array(values, dtype=np.float64)  # None -> NaN
    ok = np.array([v is not None for v in values], dtype=bool)
    return arr, ok


def _summary_fields(item_pairs: List[Tuple[dict, Optional[dict]]], worst_rel: Dict[int, float]) -> None:
    """Vectorised statistic diffs; writes the 8 summary keys and Requires_grad Consistent into NPU items.

    ``worst_rel`` receives, per NPU item (by id), the largest of its four relative errors as a fraction,
    the number the precision index is made of (the reference re-parses it from the "x%" texts: same value).
    """
    k = len(item_pairs)
    if not k:
        return
    n_items = [p[0] for p in item_pairs]
    b_items = [p[1] if p[1] is not None else _EMPTY for p in item_pairs]
    has_b = np.array([p[1] is not None for p in item_pairs], dtype=bool)
    diffs = []
    rels = []
    worst = np.zeros(k)
    for key in _STATS:
        na, n_ok = _column([it.get(key) for it in n_items])
        ba, b_ok = _column([it.get(key) for it in b_items])
        ok = n_ok & b_ok
        with np.errstate(all="ignore"):
            diff = na - ba
            rel = np.abs((diff / ba) * 100)
            diff_nan = ok & np.isnan(diff)
            has_rel = ok & ~diff_nan & (ba != 0)
            worst = np.where(has_rel & (rel / 100 > worst), rel / 100, worst)
        dcol = diff.tolist()
        rcol: list = [_NA] * k
        for i, t in zip(np.flatnonzero(has_rel).tolist(), _rel_texts(rel[has_rel].tolist())):
            rcol[i] = t
        for i in np.flatnonzero(~ok).tolist():
            dcol[i] = _NA
        for i in np.flatnonzero(diff_nan).tolist():
            dcol[i] = rcol[i] = _NAN
        for i in np.flatnonzero(~has_b).tolist():
            dcol[i] = rcol[i] = None
        diffs.append(dcol)
        rels.append(rcol)
    wl = worst.tolist()
    d0, d1, d2, d3 = diffs
    r0, r1, r2, r3 = rels
    for i, (it, bt) in enumerate(item_pairs):
        it["Max diff"] = d0[i]
        it["Min diff"] = d1[i]
        it["Mean diff"] = d2[i]
        it["L2norm diff"] = d3[i]
        it["MaxRelativeErr"] = r0[i]
        it["MinRelativeErr"] = r1[i]
        it["MeanRelativeErr"] = r2[i]
        it["NormRelativeErr"] = r3[i]
        it[RG_KEY] = _TRUE if bt is not None and it.get("requires_grad") == bt.get("requires_grad") else _FALSE
        worst_rel[id(it)] = wl[i]


def _md5_fields(item_pairs: List[Tuple[dict, Optional[dict]]]) -> None:
    for it, bt in item_pairs:
        if bt is None:
            md5_of(it)
            it["Result"] = "Nan"
            it[RG_KEY] = "False"
        else:
            it["Result"] = "pass" if md5_of(it) == md5_of(bt) else "Different"
            it[RG_KEY] = str(it.get("requires_grad") == bt.get("requires_grad"))


def _summary_index(n: Node, worst_rel: Dict[int, float]):
    # ints where the reference keeps its int constants (0 / 1): str(index) shows in matched_distributed
    worst = 0
    for it in n.output_data.values():
        if it.get("Max") is None:
            continue
        v = worst_rel.get(id(it))
        if v is not None and v > worst:
            worst = v
        if _invalid(it.get("Max")) or _invalid(it.get("Min")):
            worst = 1
    return 1 if worst > 1 else worst


def _md5_index(n: Node) -> int:
    for data in (n.input_data, n.output_data):
        for it in data.values():
            r = it.get("Result")
            if r is not None and r != "pass":
                return 0
    return 1


def _min_thousandth(data: Dict[str, dict]):
    numbers: list = []
    bad = False
    for it in data.values():
        if it.get("Max") is None:
            continue
        if "One Thousandth Err Ratio" in it and it.get("shape") not in (None, "", "[]"):
            try:
                numbers.append(float(it["One Thousandth Err Ratio"]))
            except (TypeError, ValueError):
                pass
        if _invalid(it.get("Max")) or _invalid(it.get("Min")):
            bad = True
    if bad:
        return "N/A"
    if not numbers:
        return None
    return min(numbers + [1.0])


def _tensor_index(n: Node):
    t_in = _min_thousandth(n.input_data)
    t_out = _min_thousandth(n.output_data)
    if t_out == "N/A":
        v = 1
    elif t_in == "N/A":
        v = 0
    elif t_in is not None and t_out is not None:
        v = t_in - t_out
    else:
        v = 0
    return 0 if v < 0 else (1 if v > 1 else v)


def _ignored(node_id: str) -> bool:
    parts = node_id.split(".")
    return len(parts) >= 2 and parts[1] in IGNORE_INDEX


def compare_graphs(
    g_n: Graph, g_b: Graph, mode: str, *, fuzzy: bool = False, mapping: Optional[Dict[str, str]] = None,
    loader: Optional[Callable] = None, jobs: int = 0, reference_colours: bool = False,
) -> int:
    """Match the two graphs and fill compare fields and precision indexes; returns the matched count.

    The reference's precision index is computed first; unless ``reference_colours``, msprobe's verdict then
    decides the colour (:mod:`msprobe.core.graph.verdict`), the reference's index staying in the node data."""
    if mapping is not None:
        pairs = match_mapping(g_n, g_b, mapping)
    elif fuzzy:
        pairs = match_fuzzy(g_n, g_b)
    else:
        pairs = match_default(g_n, g_b)
    item_pairs: List[Tuple[dict, Optional[dict]]] = []
    for n, b in pairs:
        item_pairs.extend(_item_pairs(n, b))
    if mode == MODE_SUMMARY:
        worst_rel: Dict[int, float] = {}
        _summary_fields(item_pairs, worst_rel)

        def index(node):
            return _summary_index(node, worst_rel)
    elif mode == MODE_MD5:
        _md5_fields(item_pairs)
        index = _md5_index
    else:
        _tensor_fields(item_pairs, g_n, g_b, loader, jobs)
        index = _tensor_index
    neutral = 1 if mode == MODE_MD5 else 0
    for n, _ in pairs:
        if n.type == TYPE_COLLECTION or n is g_n.root:
            continue
        n.data["precision_index"] = neutral if _ignored(n.id) else index(n)
        if mode == MODE_MD5:
            n.data["Result"] = "pass" if n.data["precision_index"] == 1 else "Different"
    for c in g_n.root.subnodes:
        if c.type == TYPE_COLLECTION:
            if mode == MODE_MD5:
                v = min([s.data.get("precision_index", 1) for s in c.subnodes] + [1])
            else:
                v = max([s.data.get("precision_index", 0) for s in c.subnodes] + [0])
            c.data["precision_index"] = v
    if not reference_colours:
        from msprobe.core.graph.verdict import apply_verdict

        partner = {id(it): bt for it, bt in item_pairs if bt is not None}
        apply_verdict(g_n, partner, mode, [n for n, _ in pairs], equal_of=lambda a, b: md5_of(a) == md5_of(b))
    return len(pairs)


def _tensor_fields(item_pairs, g_n: Graph, g_b: Graph, loader, jobs: int) -> None:
    from msprobe.core.compare import tensor as tm

    if loader is None:
        from msprobe.core.io.tensors import load_tensor as loader  # noqa: N813
    ndir = os.path.join(g_n.dump_dir, "dump_tensor_data")
    bdir = os.path.join(g_b.dump_dir, "dump_tensor_data")
    todo: List[int] = []
    files: List[Tuple[str, str]] = []
    results: List[Optional[tuple]] = [None] * len(item_pairs)
    for i, (it, bt) in enumerate(item_pairs):
        if it.get("Max") is None:
            continue
        dn = it.get("data_name", "-1")
        bn = bt.get("data_name", "-1") if bt is not None else "-1"
        if bt is None or dn == "-1" or bn == "-1":
            msg = tm.MSG_NO_NPU_FILE if dn == "-1" else tm.MSG_NO_BENCH_FILE
            results[i] = (tm.UNSUPPORTED,) * 6 + (msg,)
            continue
        todo.append(i)
        files.append((os.path.join(ndir, dn), os.path.join(bdir, bn)))
    for i, res in zip(todo, tm.compare_files(files, loader, jobs=jobs)):
        results[i] = res
    for (it, bt), res in zip(item_pairs, results):
        if res is None:
            continue
        for key, v in zip(TENSOR_KEYS, res[:6]):
            it[key] = v
        it[RG_KEY] = str(bt is not None and it.get("requires_grad") == bt.get("requires_grad"))
