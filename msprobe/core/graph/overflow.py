"""Overflow check for graphs (``-oc``), graph_and_tools.md §A.7.

Works on the whole ``data`` object of a dump.json (every entry, node or not) and gives each suspicious
entry one of three levels:

* ``critical`` - inputs clean, some output holds inf/-inf/nan;
* ``high``     - inputs and outputs both hold inf/-inf/nan, or the output Norm jumped more than 100x
  over the input Norm (the "numerical mutation" scene);
* ``medium``   - some input holds inf/-inf/nan, outputs clean.

Known false positives (uninitialised buffers such as ``torch.empty`` outputs or the receive buffer of
``Distributed.recv``) are dropped by a small table of ignore rules.

Everything here is a single pass over plain dicts, without copies, so a 100,000-entry dump takes well
under a second.
"""

from __future__ import annotations

from typing import Dict, Iterable, Optional, Tuple

MEDIUM = "medium"
HIGH = "high"
CRITICAL = "critical"

# statistics keys that are looked at, and the string forms that count as an anomaly
_CHECKED_KEYS = ("Max", "Min", "Mean")
_BAD_STRINGS = frozenset(("inf", "-inf", "nan"))
_INF = float("inf")

# numerical mutation: output norm more than this many times the input norm
MUTATION_RATIO = 100.0


class _Rule:
    """An ignore rule: anomalies at these positions are tolerated.

    ``args`` / ``kwargs`` / ``outs`` are the tolerated positional indices, keyword names and output
    indices.  A section whose set is empty is not looked at, so its anomalies never keep a flag alive.
    """

    __slots__ = ("args", "kwargs", "outs")

    def __init__(self, args: Iterable[int] = (), kwargs: Iterable[str] = (), outs: Iterable[int] = ()):
        self.args = frozenset(args)
        self.kwargs = frozenset(kwargs)
        self.outs = frozenset(outs)


# keyed by the first two id fields, lower-cased ("Torch.empty.0.forward" -> "torch.empty")
IGNORE_RULES: Dict[str, _Rule] = {
    # uninitialised memory
    "torch.empty": _Rule(outs=(0,)),
    "torch.empty_like": _Rule(outs=(0,)),
    "torch.empty_strided": _Rule(outs=(0,)),
    # receive / gather buffers are overwritten by the communication
    "distributed.recv": _Rule(args=(0,), kwargs=("tensor",)),
    "distributed.all_gather": _Rule(args=(0,)),
    "distributed.reduce_scatter": _Rule(args=(0,), kwargs=("output",)),
    "distributed._reduce_scatter_base": _Rule(args=(0,)),
    "distributed.all_gather_into_tensor": _Rule(args=(0,)),
    "distributed.reduce_scatter_tensor": _Rule(args=(0,)),
    # in-place fill replaces the bad values
    "tensor.masked_fill_": _Rule(args=(0,)),
}


def api_key(dump_name: str) -> str:
    """The first two dot-fields, lower-cased: the key of :data:`IGNORE_RULES`."""
    if not dump_name.strip():
        return ""
    parts = dump_name.split(".", 2)
    return ".".join(parts[:2]).lower()


def _bad_value(v) -> bool:
    """``str(v).lower()`` is ``inf``, ``-inf`` or ``nan``."""
    cls = v.__class__
    if cls is float:
        return v != v or v == _INF or v == -_INF
    if cls is int or v is None:
        return False
    if cls is str:
        return v.lower() in _BAD_STRINGS
    return str(v).lower() in _BAD_STRINGS


def _dict_bad(d: dict) -> bool:
    """A dict is anomalous when its own Max, Min or Mean is inf/-inf/nan (nested values are not looked at)."""
    for key in _CHECKED_KEYS:
        if key in d and _bad_value(d[key]):
            return True
    return False


def _list_bad(value: list) -> bool:
    """A list is anomalous when any dict in it, at any depth, is (iterative, no depth limit)."""
    stack = [value]
    while stack:
        for item in stack.pop():
            if isinstance(item, dict):
                if _dict_bad(item):
                    return True
            elif isinstance(item, list):
                stack.append(item)
    return False


def _scan(values: Iterable, norms: list) -> bool:
    """One pass over the top-level records of a section.

    Returns whether any of them is anomalous, and appends the usable ``Norm`` of every top-level
    ``torch.Tensor`` record to ``norms`` (numbers only; NaN and non-numbers are skipped).
    """
    bad = False
    for item in values:
        if isinstance(item, dict):
            if not bad and _dict_bad(item):
                bad = True
            if item.get("type") == "torch.Tensor":
                norm = item.get("Norm")
                if isinstance(norm, (int, float)) and norm == norm:
                    norms.append(norm)
        elif not bad and isinstance(item, list) and _list_bad(item):
            bad = True
    return bad


def _sections(entry: dict) -> Tuple[list, dict, list]:
    args = entry["input_args"] if "input_args" in entry else entry.get("input", [])
    kwargs = entry.get("input_kwargs", {})
    outs = entry.get("output", [])
    if not isinstance(args, list):
        args = []
    if not isinstance(kwargs, dict):
        kwargs = {}
    if not isinstance(outs, list):
        outs = []
    return args, kwargs, outs


def entry_level(args: list, kwargs: dict, outs: list) -> Optional[str]:
    """The level of one entry before the ignore rules, or None.

    Scenes in order, the first that applies wins: output anomalous and input clean -> critical; both
    anomalous -> high; input anomalous only -> medium; max output Norm over max input Norm above
    :data:`MUTATION_RATIO` (or input Norm 0 and output Norm above it) -> high.
    """
    in_norms: list = []
    bad_in = _scan(args, in_norms)
    if kwargs:
        bad_in = _scan(kwargs.values(), in_norms) or bad_in
    out_norms: list = []
    bad_out = _scan(outs, out_norms)
    if bad_out:
        return HIGH if bad_in else CRITICAL
    if bad_in:
        return MEDIUM
    if not in_norms or not out_norms:
        return None
    max_in = max(in_norms)
    max_out = max(out_norms)
    if max_in == 0:
        return HIGH if max_out > MUTATION_RATIO else None
    return HIGH if max_out / max_in > MUTATION_RATIO else None


def _ignored(rule: _Rule, args: list, kwargs: dict, outs: list) -> bool:
    """True when every anomaly the rule looks at sits at a tolerated position.

    Only top-level records are looked at here (a list argument is never counted as anomalous), and a
    section without tolerated positions is not looked at at all.
    """
    if rule.args:
        for i, a in enumerate(args):
            if isinstance(a, dict) and i not in rule.args and _dict_bad(a):
                return False
    if rule.kwargs:
        for name, v in kwargs.items():
            if isinstance(v, dict) and name not in rule.kwargs and _dict_bad(v):
                return False
    if rule.outs:
        for i, o in enumerate(outs):
            if isinstance(o, dict) and i not in rule.outs and _dict_bad(o):
                return False
    return True


def overflow_levels(data: dict) -> Dict[str, str]:
    """``{dump_name: "medium" | "high" | "critical"}`` for the flagged entries of dump.json's ``data``.

    Entries are visited in file order; entries that are not dicts are skipped.
    """
    result: Dict[str, str] = {}
    rules = IGNORE_RULES
    for name, entry in data.items():
        if not isinstance(entry, dict):
            continue
        args, kwargs, outs = _sections(entry)
        level = entry_level(args, kwargs, outs)
        if level is None:
            continue
        rule = rules.get(api_key(name)) if isinstance(name, str) else None
        if rule is not None and _ignored(rule, args, kwargs, outs):
            continue
        result[name] = level
    return result


def apply_overflow(graph, levels: Dict[str, str]) -> int:
    """Set ``node.data["overflow_level"]`` on every node of ``graph`` whose id is in ``levels``.

    Returns the number of nodes marked.
    """
    marked = 0
    if len(levels) < len(graph.nodes):
        nodes = graph.nodes
        for node_id, level in levels.items():
            node = nodes.get(node_id)
            if node is not None:
                node.data["overflow_level"] = level
                marked += 1
    else:
        for node_id, node in graph.nodes.items():
            level = levels.get(node_id)
            if level is not None:
                node.data["overflow_level"] = level
                marked += 1
    return marked
