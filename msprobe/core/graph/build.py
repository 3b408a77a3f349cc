"""Build one graph from a dump directory (construct.json + dump.json + stack.json).

Follows the reference 8.x builder (graph_and_tools.md A.4-A.5, checked against 8.3.3 outputs):

* nodes are created in construct.json order, parents first-wins, unknown parents get created on the fly;
* backward parents are repaired from the forward twin (missing parent, and the "inplace" scope fix);
* backward nodes without a stack take the stack of ``….forward.0`` (modules) / ``….forward`` (APIs);
* recomputed first-level modules are moved under the backward twin of their forward's parent;
* runs of >= 2 APIs directly under the root become ``Apis_Between_Modules.<k>`` collections;
* ``<module>.parameters_grad`` dump entries that are not construct nodes hang under the module's last backward;
* micro-step pages are computed over the root's children and propagated down.

Every step is a loop over nodes (no recursion), so construct.json depth and size are unbounded.
"""

from __future__ import annotations

import os
import re
import sys
from typing import Dict, List, Optional, Tuple

from msprobe.core.dump.reader import crc_text, has_md5, load_stack_frames
from msprobe.core.errors import MsprobeError
from msprobe.core.fileio import (
    NONFINITE_MARKERS, check_path, dump_index, entry_name, load_dump_json, load_json, parse_entries,
)
from msprobe.core.graph.model import (
    COLLECTION_PREFIX, TYPE_API, TYPE_COLLECTION, TYPE_MODULE, Graph, Node, node_type_of,
)

CONSTRUCT = "construct.json"
DUMP = "dump.json"
STACK = "stack.json"
MEGATRON_KEY = "megatron_micro_step_number"
NO_FORWARD_STACK = "This backward node cannot find the forward node and cannot retrieve stack information."
PARAMS_GRAD = "parameters_grad"

_BACKWARD_N = re.compile(r"(\.backward\.)(\d+)$")
_FORWARD_N = re.compile(r"(\.forward\.)(\d+)$")

# entry section -> name infix (read_op order: inputs, output, parameters)
_SECTIONS = (("input_args", ".input"), ("input_kwargs", ".input"), ("input", ".input"),
             ("output", ".output"), ("parameters", ".parameters"))
_STATS = ("Max", "Min", "Mean", "Norm")
_DIST_ARGS = ("src", "dst", "group_src", "group_dst")
MAX_ITEM_DEPTH = 400


# ---------------------------------------------------------------------------------------------- items


_intern = sys.intern


_MISSING = object()


def _leaf_item(leaf: dict, name: str) -> dict:
    """One dump record -> the item the graph shows (the reference's fields: bools as text, stats filled).

    The parsed record itself becomes the item (no copy: a dump holds hundreds of thousands of them); the
    added keys do not change what the overflow check and the layer mapping read from the dump data.
    """
    item = leaf
    get = item.get
    # the same few type names repeat in every record: keep one copy of each
    t = get("type")
    if t.__class__ is str:
        item["type"] = _intern(t)
    dt = get("dtype")
    if dt.__class__ is str:
        item["dtype"] = _intern(dt)
    sh = get("shape")
    if sh.__class__ is list:
        # kept as the text the viewer shows ("[8, 64]"): equal texts <=> equal shapes, and items become
        # hashable, so the writer formats identical records once
        item["shape"] = _intern(str(sh))
    rg = get("requires_grad", _MISSING)
    if rg is True:
        item["requires_grad"] = "True"
    elif rg is False:
        item["requires_grad"] = "False"
    elif rg is _MISSING:
        item["requires_grad"] = None
    for k in _STATS:
        v = get(k, _MISSING)
        c = v.__class__
        if c is float or c is int:
            continue
        if v is _MISSING:
            item[k] = None
        elif c is bool:
            item[k] = "True" if v else "False"
        elif c is str and v[:1] == "\x00":  # NaN / Infinity left as markers by the JSON loader
            item[k] = NONFINITE_MARKERS.get(v, v)
    if "value" in item:
        v = item["value"]
        if v.__class__ is bool:
            item["value"] = "True" if v else "False"
        elif v.__class__ is str and v[:1] == "\x00":
            item["value"] = NONFINITE_MARKERS.get(v, v)
    if not get("data_name"):
        item["data_name"] = "-1"
    if not dt:
        _finish_leaf(item, leaf, name)
    return item


def _finish_leaf(item: dict, leaf: dict, name: str) -> None:
    if not item.get("dtype"):
        ltype = item.get("type")
        value = leaf.get("value")
        last = name.rsplit(".", 1)[-1]
        if ltype == "torch.Size":
            item["dtype"] = ltype
            item["shape"] = str(value)
        elif ltype == "slice":
            item["dtype"] = ltype
            item["shape"] = "(%d,)" % len(value) if isinstance(value, list) else "()"
        elif ltype == "ellipsis":
            item["dtype"] = ltype
            item["shape"] = "[]"
            for k in _STATS:
                item[k] = value
        elif last in _DIST_ARGS:
            item["dtype"] = ltype
            item["shape"] = "[]"
            for k in _STATS:
                item[k] = str(value)
            item["md5"] = str(value)
        elif ltype == "torch.ProcessGroup":
            ranks = str(leaf.get("group_ranks"))
            item["dtype"] = ltype
            item["shape"] = "[]"
            for k in _STATS:
                item[k] = ranks
            item["md5"] = ranks
        else:
            item["dtype"] = str(type(value))
            item["shape"] = "[]"
            for k in _STATS:
                item[k] = value



def _none_item() -> dict:
    return {"type": None, "Max": None, "Min": None, "Mean": None, "Norm": None, "dtype": None, "shape": None,
            "md5": None, "value": None, "data_name": "-1", "requires_grad": None}


def _walk(v, name: str, in_grad: bool, depth: int, out: list, node_id: str, path: str) -> None:
    # recursion is bounded by MAX_ITEM_DEPTH (well under Python's limit); graph traversals are iterative
    if depth > MAX_ITEM_DEPTH:
        raise MsprobeError(f"dump.json {path}: entry '{node_id}' is nested deeper than {MAX_ITEM_DEPTH} levels; the file is damaged")
    c = v.__class__
    if v is None:
        out.append((name, _none_item()))
    elif c is list:
        for i, x in enumerate(v):
            child = name if in_grad else f"{name}.{i}"
            if x.__class__ is dict and x.get("type").__class__ is str and "class_type" not in x:
                out.append((child, _leaf_item(x, child)))
            else:
                _walk(x, child, in_grad, depth + 1, out, node_id, path)
    elif c is dict:
        if not v:
            return
        if v.get("class_type") == "torch.distributed.P2POp":
            t = v.get("tensor")
            item = _leaf_item(t, name) if isinstance(t, dict) else _none_item()
            for k in ("class_type", "op", "peer", "tag", "group_id"):
                item[k] = v.get(k)
            out.append((name, item))
        elif v.get("type").__class__ is str:
            out.append((name, _leaf_item(v, name)))
        else:
            for k, x in v.items():
                _walk(x, f"{name}.{k}", in_grad, depth + 1, out, node_id, path)


def flatten_entry(entry, node_id: str, path: str = "") -> List[Tuple[str, dict]]:
    """A dump.json entry -> [(full item name, item)] in the reference's order."""
    out: List[Tuple[str, dict]] = []
    if not isinstance(entry, dict):
        return out
    if node_id.endswith(".parameters_grad"):
        _walk(entry, node_id, True, 0, out, node_id, path)
        return out
    for key, infix in _SECTIONS:
        if key in entry:
            _walk(entry[key], node_id + infix, False, 0, out, node_id, path)
    return out


class Flat:
    """A dump entry already split into (input_data, output_data) by the split child."""

    __slots__ = ("inp", "out")

    def __init__(self, inp: Dict[str, dict], out: Dict[str, dict]):
        self.inp, self.out = inp, out


def split_items(entry, node_id: str, path: str = "") -> Tuple[Dict[str, dict], Dict[str, dict]]:
    """(input_data, output_data) of a node; keys are data file names (tensor dumps) or built names."""
    if entry.__class__ is Flat:
        return entry.inp, entry.out
    inputs: Dict[str, dict] = {}
    outputs: Dict[str, dict] = {}
    for name, item in flatten_entry(entry, node_id, path):
        data_name = item["data_name"]
        if data_name != "-1":
            if data_name.__class__ is not str or "/" in data_name or "\\" in data_name or data_name in (".", ".."):
                raise MsprobeError(
                    f"dump.json {path}: {name} has data_name {str(data_name)[:80]!r}; it must be a plain file name "
                    f"inside dump_tensor_data (a string, no directories): the file is damaged or was edited, re-run the dump"
                )
            name = data_name.rsplit(".", 1)[0]
        if ".output." in name and ".input." not in name:
            outputs[name] = item
        else:
            inputs[name] = item
    return inputs, outputs


# ---------------------------------------------------------------------------------------------- files


def dump_files(dump_dir: str) -> Tuple[str, str, str]:
    """Paths of the three files of one dump dir; one clear error when one is missing."""
    from msprobe.core.dump.lifecycle import warn_if_incomplete

    paths = []
    for name in (CONSTRUCT, DUMP, STACK):
        p = os.path.join(dump_dir, name)
        if not os.path.isfile(p):
            warn_if_incomplete(dump_dir, name)   # killed mid-step: says so
            raise MsprobeError(
                f"{dump_dir}: no {name}; a graph needs construct.json, dump.json and stack.json from one rank "
                f"(dump with level L0 or mix, and keep the three files together)"
            )
        paths.append(p)
    warn_if_incomplete(dump_dir)
    return paths[0], paths[1], paths[2]


def read_construct(path: str) -> Tuple[Dict[str, object], Dict[str, int], Optional[int]]:
    obj = load_json(path, "construct.json")
    if not isinstance(obj, dict):
        raise MsprobeError(f"construct.json {path}: the top level is not an object; the file is damaged: re-run the dump")
    micro: Dict[str, int] = {}
    micro_num = None
    if MEGATRON_KEY in obj:
        micro_num = obj.pop(MEGATRON_KEY)
        if not isinstance(micro_num, int):
            raise MsprobeError(f"construct.json {path}: '{MEGATRON_KEY}' is not an integer; the file is damaged")
        for k, v in obj.items():
            if isinstance(v, list) and len(v) == 2:
                obj[k] = v[0]
                micro[k] = v[1] if isinstance(v[1], int) else 0
    bad = next((k for k, v in obj.items() if v is not None and v.__class__ is not str), None)
    if bad is not None:
        v = obj[bad]
        raise MsprobeError(
            f"construct.json {path}: the parent of {bad!r} is {type(v).__name__} {str(v)[:60]}, expected a node name "
            f"(a string) or null; the file is damaged or was edited: re-run the dump"
        )
    if not obj:
        raise MsprobeError(
            f"construct.json {path} is empty, so there is no model structure to draw; dump with level L0 or mix "
            f"(level L1 records APIs only and leaves construct.json empty)"
        )
    return obj, micro, micro_num


def read_dump_json(path: str) -> dict:
    # non-finite values stay marker strings until _leaf_item turns them into floats (saves a walk)
    obj = load_dump_json(path, "dump.json", nonfinite_markers=True)
    if not isinstance(obj, dict) or not isinstance(obj.get("data", {}), dict):
        raise MsprobeError(f"dump.json {path}: not a dump.json (expected an object with 'task' and 'data'); the file is damaged")
    if not obj.get("task"):
        raise MsprobeError(f"dump.json {path} has no 'task'; it was not written by a dumper: re-run the dump")
    return obj


# ---------------------------------------------------------------------------------------------- building


def md5_of(item: dict) -> str:
    """The item's md5, or (like the reference) the CRC32 of its value's text when the dump has none.

    Computed only when an md5 compare needs it: statistics dumps would otherwise carry an "00000000" on
    every tensor item."""
    m = item.get("md5")
    if not m:
        m = item["md5"] = crc_text(item.get("value", ""))
    return m


def _fix_missing_parent(construct: dict, sub: str, up):
    if up:
        return up
    m = _BACKWARD_N.search(sub)
    if m:
        fwd_up = construct.get(sub[:m.start()] + ".forward." + m.group(2))
        if fwd_up and isinstance(fwd_up, str):
            cand = _FORWARD_N.sub(r".backward.\2", fwd_up)
            if cand in construct:
                return cand
    if sub.endswith(".backward"):
        fwd_up = construct.get(sub.replace("backward", "forward"))
        if fwd_up and isinstance(fwd_up, str):
            cand = fwd_up.replace("forward", "backward")
            if cand in construct:
                return cand
    return up


def _fix_inplace_parent(construct: dict, sub: str, up: str):
    m = _BACKWARD_N.search(sub)
    if not m:
        return up
    sub_parts = sub.split(".")
    up_parts = up.split(".")
    if len(sub_parts) < 5 or len(up_parts) < 4:
        return up
    if ".".join(sub_parts[:-4]) == ".".join(up_parts[:-3]):
        return up
    fwd = sub[:m.start()] + ".forward." + m.group(2)
    if fwd in construct:
        fwd_up = construct.get(fwd)
        if not fwd_up:
            return fwd_up
        cand = _FORWARD_N.sub(r".backward.\2", fwd_up)
        if cand in construct:
            return cand
    return up


class _Builder:
    def __init__(self, graph: Graph, data: dict, stacks: Dict[str, List[str]], micro: Dict[str, int], path: str,
                 deferred: frozenset = frozenset()):
        self.deferred = deferred
        self.g = graph
        self.data = data
        self.stacks = stacks
        self.micro = micro
        self.path = path

    def node(self, node_id: str) -> Node:
        g = self.g
        n = g.nodes.get(node_id)
        if n is not None:
            return n
        n = g.add(Node(node_id, node_type_of(node_id)))
        entry = self.data.get(node_id)
        if entry:
            n.input_data, n.output_data = split_items(entry, node_id, self.path)
        if node_id in self.deferred:
            n.fmt = PENDING
        stack = self.stacks.get(node_id)
        if not stack:
            m = _BACKWARD_N.search(node_id)
            if m or node_id.endswith(".backward"):
                twin = g.nodes.get(node_id[:m.start()] + ".forward.0" if m else node_id.replace("backward", "forward"))
                stack = twin.stack if twin is not None else [NO_FORWARD_STACK]
        n.stack = stack or []
        if self.micro:
            n.micro_step = self.micro.get(node_id, 0)
        return n


def build_graph(dump_dir: str, split: Optional[str] = None, splitter: Optional["SplitFormatter"] = None) -> Graph:
    """Build the graph of one rank's dump dir.

    ``split``: for a big dump, a forked child formats the records ("half": the second half, for a graph that
    is only built; "all": every record, for the golden side of a compare) while this process builds the
    graph (see :class:`SplitFormatter`).
    """
    construct_path, dump_path, stack_path = dump_files(dump_dir)
    try:
        construct, micro, micro_num = read_construct(construct_path)
    except BaseException:
        if splitter is not None:
            splitter.cancel()
        raise
    if splitter is None and split:
        splitter = SplitFormatter.start(dump_path, split)
    try:
        return _build(dump_dir, construct, micro, micro_num, dump_path, stack_path, splitter)
    except BaseException:
        if splitter is not None:
            splitter.cancel()
        raise


def _build(dump_dir, construct, micro, micro_num, dump_path, stack_path, splitter) -> Graph:
    if splitter is not None:
        if splitter.items:
            splitter.wait_items()  # the child parsed and split the records (or this process did, as a fallback)
        dump = splitter.dump
        splitter.dump = None
    else:
        dump = read_dump_json(dump_path)
    stacks = load_stack_frames(stack_path)
    data = dump.get("data") or {}
    g = Graph(dump.get("dump_data_dir"))
    g.task = str(dump.get("task"))
    g.framework = str(dump.get("framework") or "pytorch")
    g.dump_dir = dump_dir
    g.data = data
    g.dump_order = list(data)
    g.data_keys = frozenset(data) | (splitter.names if splitter is not None and splitter.mode == "half" else frozenset())
    g.has_md5 = splitter.has_md5 if splitter is not None and splitter.items else has_md5(data)
    g.split = splitter
    b = _Builder(g, data, stacks, micro, dump_path, splitter.names if splitter is not None else frozenset())
    root = g.root
    for sub, up in construct.items():
        up = _fix_inplace_parent(construct, sub, up) if up else _fix_missing_parent(construct, sub, up)
        parent = b.node(up) if up and isinstance(up, str) else root
        child = b.node(sub)
        parent.add_child(child)
    _handle_recompute(g)
    _collect_apis(g)
    _add_parameters_grad(g, data, dump_path)
    g.micro_steps = micro_num + 1 if micro_num is not None else None
    return g


def _is_recompute_id(parts: List[str]) -> bool:
    n = len(parts)
    if n > 7:
        return True
    if n == 7 and not (parts[1].isdigit() and parts[3].isdigit()):
        return True
    if n == 6 and not parts[1].isdigit():
        return True
    return False


def _handle_recompute(g: Graph) -> None:
    """First-level module nodes that look recomputed go under the backward twin of their forward's parent."""
    firsts = g.root.subnodes
    ids = {n.id for n in firsts}
    recompute: Dict[str, str] = {}
    position: Dict[str, int] = {}
    paired = set()
    for i, n in enumerate(firsts):
        if node_type_of(n.id) != TYPE_MODULE:
            continue
        parts = n.id.split(".")
        prefix = ".".join(parts[:-2])
        if n.id in paired:
            recompute[n.id] = prefix
            position[n.id] = i
            continue
        if not _is_recompute_id(parts):
            continue
        parts[-2] = "backward" if parts[-2] == "forward" else "forward"
        other = ".".join(parts)
        if other in ids:
            recompute[n.id] = prefix
            position[n.id] = i
            paired.add(other)
    if not recompute:
        return
    prefixes = set(recompute.values())
    plain: Dict[str, List[Node]] = {}
    for node_id, n in g.nodes.items():
        if node_type_of(node_id) == TYPE_MODULE and _FORWARD_N.search(node_id):
            if n.up is None or n.up is g.root:
                continue
            pre = _FORWARD_N.sub("", node_id)
            if pre in prefixes:
                plain.setdefault(pre, []).append(n)
    if not plain:
        return
    for lst in plain.values():
        lst.reverse()
    plain_b = {k: list(v) for k, v in plain.items()}
    removed = []
    for node_id, pre in recompute.items():
        if pre not in plain:
            continue
        pool = plain.get(pre) if _FORWARD_N.search(node_id) else plain_b.get(pre)
        if not pool:
            continue
        normal = pool.pop()
        rn = g.nodes.get(node_id)
        if rn is None:
            continue
        new_up = g.nodes.get(_FORWARD_N.sub(r".backward.\2", normal.up.id))
        if new_up is None:
            continue
        rn.up = new_up
        new_up.subnodes.append(rn)
        removed.append(position[node_id])
    for i in sorted(removed, reverse=True):
        del g.root.subnodes[i]


def _collect_apis(g: Graph) -> None:
    out: List[Node] = []
    children = g.root.subnodes
    k = 0
    i = 0
    while i < len(children):
        n = children[i]
        if n.type != TYPE_API:
            out.append(n)
            i += 1
            continue
        j = i
        while j < len(children) and children[j].type == TYPE_API:
            j += 1
        run = children[i:j]
        i = j
        if len(run) < 2:
            out.extend(run)
            continue
        coll = g.add(Node(f"{COLLECTION_PREFIX}.{k}", TYPE_COLLECTION))
        k += 1
        coll.subnodes = run
        for a in run:
            a.up = coll
        coll.up = g.root
        if run[0].micro_step is not None:
            coll.micro_step = run[0].micro_step
        out.append(coll)
    g.root.subnodes = out


def _add_parameters_grad(g: Graph, data: dict, path: str) -> None:
    suffix = "." + PARAMS_GRAD
    prefixes = [k[: -len(suffix)] for k in data if k.endswith(suffix) and k not in g.nodes]
    if not prefixes:
        return
    last = {p: 0 for p in prefixes}
    for key in g.nodes:
        parts = key.split(".")
        if len(parts) > 2 and parts[-2] == "backward" and parts[-1].isdigit():
            pre = ".".join(parts[:-2])
            if pre in last and int(parts[-1]) > last[pre]:
                last[pre] = int(parts[-1])
    for pre, num in last.items():
        parent = g.nodes.get(f"{pre}.backward.{num}")
        if parent is None:
            continue
        node_id = pre + suffix
        n = g.add(Node(node_id, TYPE_MODULE))
        parent.subnodes.append(n)
        n.up = parent
        n.input_data, n.output_data = split_items(data.get(node_id) or {}, node_id, path)


# ---------------------------------------------------------------------------------------------- micro steps


def _pages(first_level: List[Node]) -> List[int]:
    page = 0
    seen_backward = False
    out = []
    for n in first_level:
        if n.type == TYPE_MODULE:
            if ".forward." in n.id:
                if seen_backward:
                    page += 1
                    seen_backward = False
            else:
                seen_backward = True
        out.append(page)
    return out


def _propagate(g: Graph) -> None:
    for n in g.preorder():
        if n.micro_step is None:
            n.micro_step = n.up.micro_step if n.up is not None else None
    if g.root.micro_step is None:
        pass


def paginate(g: Graph, other: Optional[Graph] = None) -> int:
    """Set ``micro_step`` on every node (the reference's paging); returns the number of pages."""
    if g.micro_steps is not None:
        _propagate(g)
        if other is not None:
            _propagate(other)
        return g.micro_steps
    pages = _pages(g.root.subnodes)
    for n, p in zip(g.root.subnodes, pages):
        n.micro_step = p
        if other is not None and n.link:
            twin = other.nodes.get(n.link[-1])
            if twin is not None:
                twin.micro_step = p
    _propagate(g)
    if other is not None:
        for n in other.root.subnodes:
            if n.micro_step is None:
                last = n.id.rsplit(".", 1)[-1]
                try:
                    n.micro_step = int(last)
                except ValueError:
                    n.micro_step = 0
        _propagate(other)
    return (max(pages) + 1) if pages else 1


# ---------------------------------------------------------------------------------------------- split formatting

PENDING = ("pending",)
SPLIT_MIN_BYTES = 16 << 20
# share of the records the child formats when a graph is only built: this process also builds the graph
# and writes the file, so the child takes the larger part (measured on a 100k-node dump, 2 cores)
CHILD_SHARE = 0.6


class FmtRef:
    """A node's formatted (input_data, output_data) JSON texts in the split child's output file."""

    __slots__ = ("fd", "off", "lin", "lout")

    def __init__(self, fd: int, off: int, lin: int, lout: int):
        self.fd, self.off, self.lin, self.lout = fd, off, lin, lout

    def load(self):
        import orjson

        b = os.pread(self.fd, self.lin + self.lout, self.off)  # no shared file offset: safe in forked writers
        return orjson.Fragment(b[:self.lin]), orjson.Fragment(b[self.lin:])


def _emit_items(raw: bytes, offsets: list, a: int, b: int, out_path: str, dump_path: str) -> bool:
    """First pass of an ``items`` child: the split records (as :func:`split_items` makes them) and whether
    the dump has md5 values, pickled chunk by chunk into ``out_path.items`` (renamed into place when whole)."""
    import pickle

    md5 = False
    with open(out_path + ".items.tmp", "wb") as f:
        for x in range(a, b, 2000):
            part = parse_entries(raw, offsets, x, min(b, x + 2000), True)
            if part is None:
                return False
            md5 = md5 or has_md5(part)
            pickle.dump([(name,) + split_items(entry, name, dump_path) for name, entry in part.items()], f,
                        protocol=pickle.HIGHEST_PROTOCOL)
        pickle.dump(("end", md5), f, protocol=pickle.HIGHEST_PROTOCOL)
    os.replace(out_path + ".items.tmp", out_path + ".items")
    return True


def _format_range(raw: bytes, offsets: list, a: int, b: int, out_path: str, dump_path: str,
                  items: bool = False) -> None:
    """Child process: parse entries a..b-1, format their items as the writers do, save the JSON texts.

    Writes the texts one after the other to ``out_path`` and, last, the index (name, offset, lengths) to
    ``out_path.idx``; holds no more than one chunk of texts at a time.
    """
    import pickle

    import orjson

    from msprobe.core.graph.export import format_nodes

    code = 1
    try:
        if items and not _emit_items(raw, offsets, a, b, out_path, dump_path):
            os._exit(1)
        index = []
        pos = 0
        with open(out_path, "wb") as f:
            for x in range(a, b, 2000):
                part = parse_entries(raw, offsets, x, min(b, x + 2000), True)
                if part is None:
                    break
                nodes = []
                for name, entry in part.items():
                    nd = Node(name, node_type_of(name))
                    nd.input_data, nd.output_data = split_items(entry, name, dump_path)
                    nodes.append(nd)
                for nd, (fin, fout) in zip(nodes, format_nodes(nodes, False)):
                    bi, bo = orjson.dumps(fin), orjson.dumps(fout)
                    f.write(bi)
                    f.write(bo)
                    index.append((nd.id, pos, len(bi), len(bo)))
                    pos += len(bi) + len(bo)
            else:
                code = 0
        if code == 0:
            with open(out_path + ".idx.tmp", "wb") as f:
                pickle.dump(index, f, protocol=pickle.HIGHEST_PROTOCOL)
            os.replace(out_path + ".idx.tmp", out_path + ".idx")
    except BaseException:  # noqa: BLE001 - the parent falls back to doing the work itself
        code = 1
    os._exit(code)


class SplitFormatter:
    """Formats dump.json records in a forked child process while this process builds the graph.

    The child gets the file's bytes and the entry offsets, nothing else of the parent, so the two
    processes share no Python objects (a child reading the parent's graph would copy every page it touches
    and nearly double the memory).  Its texts go to a temporary file that the writers read node by node.

    * ``half`` (a graph that is only built): the child takes the second half of the records; this process
      parses only the first half (plus the few second-half records it needs whole) and formats those.
    * ``all`` (the golden side of a compare, whose items get no compare fields): the child formats every
      record; this process still parses them all for the metrics.

    If the child fails, this process formats those records itself.
    """

    def __init__(self, dump_path, dump, names, proc, out_path, mode, items=False):
        self.items = items
        self.has_md5 = False
        self.dump_path = dump_path
        self.dump = dump
        self.names = names
        self.proc = proc
        self.out_path = out_path
        self.mode = mode
        self.fd = None

    @classmethod
    def start(cls, dump_path: str, mode: str = "half", items: bool = False) -> Optional["SplitFormatter"]:
        """Fork the child (None when the dump is small or its layout is unusual).

        ``items`` (with mode "all"): the child also parses and splits the records for this process, which
        then skips its own parse of this dump (:meth:`wait_items`); start it before other work."""
        import multiprocessing as mp
        import tempfile

        if ("fork" not in mp.get_all_start_methods() or mp.current_process().name != "MainProcess"
                or os.path.getsize(check_path(dump_path, "dump.json", "file")) < SPLIT_MIN_BYTES):
            return None
        with open(dump_path, "rb") as f:
            raw = f.read()
        idx = dump_index(raw, True)
        if idx is None:
            return None
        head, offsets = idx
        n = len(offsets) - 1
        first = int(n * (1 - CHILD_SHARE)) if mode == "half" else 0
        if n - first < 1000:
            return None
        names = [entry_name(raw, offsets[i]) for i in range(first, n)]
        if None in names:
            return None
        from msprobe.core.fileio import TEMP_PREFIX, clean_stale_temps, temp_tag

        tmpdir = tempfile.gettempdir()
        clean_stale_temps(tmpdir)   # what a killed graph left there (named with its pid, see fileio)
        fd, out_path = tempfile.mkstemp(prefix=f"{TEMP_PREFIX}{temp_tag()}-split-", suffix=".bin", dir=tmpdir)
        os.close(fd)
        items = items and mode == "all"
        proc = mp.get_context("fork").Process(target=_format_range,
                                              args=(raw, offsets, first, n, out_path, dump_path, items), daemon=True)
        proc.start()
        self = cls(dump_path, None, frozenset(names), proc, out_path, mode, items)
        if items:
            if not head.get("task"):
                self.cancel()
                return None
            self.dump = head
            return self
        data = parse_entries(raw, offsets, 0, first if mode == "half" else n, True)
        if data is None or not head.get("task"):
            self.cancel()
            return None
        if mode == "half":
            # second-half entries the parent needs whole: parameters_grad records hang under nodes built here
            for i, name in zip(range(first, n), names):
                if name.endswith(".parameters_grad"):
                    more = parse_entries(raw, offsets, i, i + 1, True)
                    if more:
                        data.update(more)
            self.names = self.names - frozenset(data)
        head["data"] = data
        self.dump = head
        return self

    def wait_items(self) -> None:
        """Block until the child's split records are there; put them in ``self.dump["data"]``.

        If the child died first, this process parses the dump itself (and gives up the child's texts)."""
        import pickle
        import time

        path = self.out_path + ".items"
        while not os.path.exists(path) and self.proc.is_alive():
            time.sleep(0.005)
        data: dict = {}
        ok = False
        if os.path.exists(path):
            with open(path, "rb") as f:
                while True:
                    chunk = pickle.load(f)
                    if chunk.__class__ is tuple:
                        self.has_md5 = chunk[1]
                        ok = True
                        break
                    for name, inp, out in chunk:
                        data[name] = Flat(inp, out)
            os.unlink(path)
        if not ok:
            self.cancel()
            self.items = False
            dump = read_dump_json(self.dump_path)
            self.dump = dump
            self.has_md5 = has_md5(dump.get("data") or {})
            self.names = frozenset()
            return
        self.dump["data"] = data

    def cancel(self, g: Optional[Graph] = None) -> None:
        """Stop the child and forget its work (the writers format everything here)."""
        if self.proc.is_alive():
            self.proc.kill()
        self.proc.join()
        if g is not None:
            for n in g.nodes.values():
                if n.fmt is PENDING:
                    n.fmt = None
        self.close()

    def collect(self, g: Graph) -> None:
        """Wait for the child and point the pending nodes at its texts (or format them here)."""
        import pickle

        self.proc.join()
        index = None
        if self.proc.exitcode == 0 and os.path.exists(self.out_path + ".idx"):
            with open(self.out_path + ".idx", "rb") as f:
                index = {name: (off, lin, lout) for name, off, lin, lout in pickle.load(f)}
        pending = [n for n in g.nodes.values() if n.fmt is PENDING]
        if index is not None and all(n.id in index for n in pending):
            self.fd = os.open(self.out_path, os.O_RDONLY)
            for n in pending:
                n.fmt = FmtRef(self.fd, *index[n.id])
            return
        # fallback: do the child's share here
        self.close()
        if self.mode == "half":
            data = read_dump_json(self.dump_path).get("data") or {}
            for n in pending:
                entry = data.get(n.id)
                if entry:
                    n.input_data, n.output_data = split_items(entry, n.id, self.dump_path)
        for n in pending:
            n.fmt = None

    def close(self) -> None:
        """Remove the child's files (call when the graph has been written)."""
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None
        for p in (self.out_path, self.out_path + ".idx", self.out_path + ".idx.tmp", self.out_path + ".items",
                  self.out_path + ".items.tmp"):
            try:
                os.unlink(p)
            except OSError:
                pass
