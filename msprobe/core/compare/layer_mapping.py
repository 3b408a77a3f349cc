"""Layer mapping (``-lm/--layer_mapping FILE``): pair NPU dump entries with bench dump entries when
the two models name their layers differently (compare.md §3.9, graph_and_tools.md §A.6.3).

Framework-free (no torch, no mindspore). Two entry points:

* :func:`load_layer_mapping_yaml` reads and checks the yaml
  ``{LayerTypeName: {npu_child_path: bench_child_path, ...}, ...}``.
* :func:`compute_layer_mapping` returns ``{npu_dump_name: bench_dump_name}``.

How a partner is found, in plain words:

1. Every dump entry gets a *scope*: the module path it lives in (from its own name for
   ``Cell``/``Module`` entries and ``parameters_grad``, from its construct.json parent for APIs,
   ``TopLayer`` for APIs without a parent), for APIs optionally the name of the framework function
   it was called from (read from its stack), then its own name (the module attribute name, or the
   API name). A backward entry takes the scope of its forward twin. Under a ``ParallelTransformer``
   layer the ``layers.<i>`` numbers are made relative to the smallest one seen (pipeline shards
   number their layers globally on one side, locally on the other).
2. Both sides' scopes go into a trie (the first scope part, ``Cell``/``Module``/``TopLayer``, is the
   root). A trie node remembers the layer class of the entries that end there and, per state
   (``forward``/``backward``/``parameters_grad``), those entries in dump order.
3. An NPU scope is translated part by part from the root: at each node the yaml rules of the node's
   layer class are tried, longest (most dotted parts) first; an unmatched part stays as it is.
4. The NPU entry's position among the same-state entries of its node picks the bench entry at the
   translated node; no such bench entry means no partner (left out of the result).

Everything is dictionaries and loops: linear in the number of entries times the scope depth,
no recursion.
"""

from __future__ import annotations

import math
import os
import re
from typing import Dict, Iterable, List, Optional, Tuple

import yaml

from msprobe.core.errors import MsprobeError

TOP_LAYER = "TopLayer"
LEGACY_TOP_LAYER = "Cell"
PT_FRAMEWORK = "pytorch"
MS_FRAMEWORK = "mindspore"

_LAYER_PREFIXES = ("Cell", "Module")
_PARAMS_GRAD = "parameters_grad"
_FORWARD = "forward"
_BACKWARD = "backward"
_NO_STACK_TYPES = ("Primitive", "Jit")          # their stacks are never used for the scope
# A frame's module is read from its file path: the part after the last install root (a path component named
# site-packages, dist-packages or package). Framework frames are modules of torch* or mindspore* packages;
# msprobe's own frames (and MindSpeed's) are recognised by module name or by lying inside the msprobe package
# of this machine - never by the text "msprobe" anywhere in the path (a clone or venv in a folder named msprobe).
_INSTALL_ROOTS = (("site-packages", "dist-packages"), ("package",))
_FRAMEWORK_MODULES = ("torch", "mindspore")       # prefixes of the top-level package name
_OWN_MODULES = ("msprobe", "mindspeed")           # top-level package names whose frames never name a function
_PKG_DIR = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))).replace("\\", "/") + "/"
_SKIP_FUNCS = ("construct", "__call__")
_STACK_START = "Template"                       # the dump wrapper's frame: the relevant part starts after it
_STACK_END = {                                  # the calling layer's frame: the relevant part ends before it
    MS_FRAMEWORK: re.compile(r"construct"),
    PT_FRAMEWORK: re.compile(r"in (for|back)ward,"),
}
_RENUMBER_TYPE = "ParallelTransformer"
_RENUMBER_CHILD = "layers"
_NEXT_PART = re.compile(r"(\S+?)(?:\.|$)")
_DIGITS = re.compile(r"\d+")


# ------------------------------------------------------------------------------------------ yaml


def load_layer_mapping_yaml(path: str) -> Dict[str, Dict[str, str]]:
    """Read and check a layer-mapping yaml; return ``{LayerType: {npu_path: bench_path}}``.

    A top-level ``Cell`` key is the legacy name of ``TopLayer`` and is returned as ``TopLayer``
    (it replaces a ``TopLayer`` entry when both are present). An empty file means no rules.
    Every problem raises :class:`MsprobeError` with one line naming the file.
    """
    where = f"layer mapping file '{path}'"
    try:
        with open(path, "r", encoding="utf-8") as fh:
            text = fh.read()
    except FileNotFoundError:
        raise MsprobeError(f"{where}: no such file; pass the path of an existing yaml file to -lm/--layer_mapping") from None
    except IsADirectoryError:
        raise MsprobeError(f"{where}: is a directory, not a file; pass the path of the yaml file to -lm/--layer_mapping") from None
    except UnicodeDecodeError:
        raise MsprobeError(f"{where}: is not UTF-8 text; save it as a UTF-8 yaml file") from None
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise MsprobeError(f"{where}: cannot be read ({reason}); check the path and its permissions") from None
    try:
        from msprobe.core.fileio import yaml_safe_load

        obj = yaml_safe_load(text, where, "")
    except yaml.YAMLError as exc:
        raise MsprobeError(f"{where}: invalid YAML{_yaml_error_text(exc)}; fix the syntax "
                           f"(expected 'LayerType:' lines each followed by indented 'npu_name: bench_name' lines)") from None
    return check_layer_mapping(obj, where)


def check_layer_mapping(obj, where: str = "layer mapping") -> Dict[str, Dict[str, str]]:
    """Check an already-parsed mapping (see :func:`load_layer_mapping_yaml`) and return a clean copy."""
    if obj is None:
        return {}
    if not isinstance(obj, dict):
        raise MsprobeError(f"{where}: the top level must be a mapping 'LayerType: {{npu_name: bench_name}}', "
                           f"not {_kind(obj)}; rewrite it as 'LayerType:' lines with indented 'npu_name: bench_name' lines")
    out: Dict[str, Dict[str, str]] = {}
    for layer, rules in obj.items():
        if not isinstance(layer, str) or not layer.strip():
            raise MsprobeError(f"{where}: top-level key {layer!r} is not a layer class name; "
                               f"use the layer's class name (e.g. ParallelTransformerLayer) or TopLayer")
        if not isinstance(rules, dict):
            raise MsprobeError(f"{where}: the entry of layer '{layer}' must be a mapping of 'npu_name: bench_name', "
                               f"not {_kind(rules)}; write each rename as an indented 'npu_name: bench_name' line under '{layer}:'")
        clean: Dict[str, str] = {}
        for key, value in rules.items():
            if not isinstance(key, str) or not key.strip():
                raise MsprobeError(f"{where}: layer '{layer}' has the key {key!r}, which is not a non-empty name; "
                                   f"keys must be NPU child names such as 'input_norm' or 'attention.dense'")
            if any(not part for part in key.split(".")):
                raise MsprobeError(f"{where}: layer '{layer}' has the key '{key}' with an empty dotted part; "
                                   f"write dotted paths as 'a.b' without leading, trailing or doubled dots")
            if not isinstance(value, str):
                raise MsprobeError(f"{where}: layer '{layer}', key '{key}' maps to {_kind(value)} {value!r}, not a name; "
                                   f"give the bench child name as a string, e.g. '{key}: bench_name'")
            clean[key] = value
        out[layer] = clean
    if LEGACY_TOP_LAYER in out:
        out[TOP_LAYER] = out.pop(LEGACY_TOP_LAYER)
    return out


def _kind(obj) -> str:
    if obj is None:
        return "an empty value"
    if isinstance(obj, list):
        return "a list"
    if isinstance(obj, bool):
        return "a boolean"
    if isinstance(obj, (int, float)):
        return "a number"
    if isinstance(obj, str):
        return "a string"
    return f"a {type(obj).__name__}"


def _yaml_error_text(exc: Exception) -> str:
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None) or ""
    text = ""
    if mark is not None:
        text += f" at line {mark.line + 1}, column {mark.column + 1}"
    if problem:
        text += f" ({problem})"
    text = " ".join(text.split())
    return f" {text}" if text else ""


def _prepare_rules(rules) -> Dict[str, Dict[str, List[Tuple[str, str, int]]]]:
    """``{type: {first_part: [(npu_path, bench_path, n_parts), ...longest first]}}``.

    A ``(…)`` suffix of a bench path is dropped (it is a comment in the reference's files). ``True``
    (a bare ``-lm`` flag) means no rules, as in the reference.
    """
    rules = check_layer_mapping(rules) if rules and rules is not True else {}
    prepared: Dict[str, Dict[str, List[Tuple[str, str, int]]]] = {}
    for layer, name_map in rules.items():
        by_first: Dict[str, List[Tuple[str, str, int]]] = {}
        for key, value in name_map.items():
            parts = key.split(".")
            by_first.setdefault(parts[0], []).append((key, value.split("(")[0], len(parts)))
        for lst in by_first.values():
            lst.sort(key=lambda rule: -rule[2])   # stable: file order among equal lengths
        prepared[layer] = by_first
    return prepared


# ------------------------------------------------------------------------------------------ inputs


def normalize_stack(stack) -> Dict[str, list]:
    """stack.json content, old ``{name: [frames]}`` or new ``{"0": [[names], [frames]], ...}``
    (recognised by the key ``"0"``), as ``{name: frames}``."""
    if not stack:
        return {}
    if not isinstance(stack, dict):
        raise MsprobeError(f"stack.json: the outermost value must be an object, not {_kind(stack)}; "
                           f"the file is damaged: re-run the dump")
    if not stack.get("0"):
        return stack
    out: Dict[str, list] = {}
    for value in stack.values():
        if not isinstance(value, list) or len(value) != 2 or not isinstance(value[0], list):
            continue
        names, frames = value
        for name in names:
            if isinstance(name, str):
                out[name] = frames
    return out


def _parent(construct: dict, name: str) -> Optional[str]:
    value = construct.get(name)
    if isinstance(value, list) and len(value) == 2:   # Megatron format: [parent, micro_step]
        value = value[0]
    return value if isinstance(value, str) and value else None


_END = object()


def detect_framework(data: dict, default: str) -> str:
    """``mindspore`` or ``pytorch`` from the first typed value in the dump data (``"type": "mindspore…"``
    / ``"torch…"``), else from ``Cell.``/``Module.`` names, else ``default``."""
    stack: list = [iter(data.values())] if isinstance(data, dict) else []
    while stack:
        value = next(stack[-1], _END)
        if value is _END:
            stack.pop()
            continue
        if isinstance(value, dict):
            kind = value.get("type")
            if isinstance(kind, str):
                if kind.startswith("mindspore"):
                    return MS_FRAMEWORK
                if kind.startswith("torch"):
                    return PT_FRAMEWORK
            stack.append(iter(value.values()))
        elif isinstance(value, list):
            stack.append(iter(value))
    for name in data if isinstance(data, dict) else ():
        if name.startswith("Cell."):
            return MS_FRAMEWORK
        if name.startswith("Module."):
            return PT_FRAMEWORK
    return default



# ------------------------------------------------------------------------------------------ items


class _Item:
    __slots__ = ("name", "type_name", "state", "scope")

    def __init__(self, name: str, type_name: str, state: str, scope: str):
        self.name = name
        self.type_name = type_name
        self.state = state
        self.scope = scope


def _frame_function(frames, end_sign) -> str:
    """Name of the framework function an API was called from ('' when none).

    The frames between the dump wrapper's ``Template`` frame and the calling layer's
    ``construct``/``forward`` frame are looked at; the last of the leading run of frames that lie in
    framework files names the function (unless it is msprobe's or MindSpeed's, or ``construct`` /
    ``__call__``).
    """
    start, end = -1, len(frames)
    for idx, line in enumerate(frames):
        if _STACK_START in line:
            start = idx
        elif start >= 0 and end_sign.search(line):
            end = idx
            break
    frame = None
    for line in frames[start + 1:end]:
        if _frame_top_module(line.split(",")[0]).startswith(_FRAMEWORK_MODULES):
            frame = line
        else:
            break
    if not frame:
        return ""
    fields = frame.split(",")
    if _is_own_frame(fields[0]) or len(fields) < 3:
        return ""
    func = fields[2]
    if any(mark in func for mark in _SKIP_FUNCS):
        return ""
    words = func.split()
    return words[1] if len(words) > 1 else ""


def _frame_path(field: str) -> str:
    """The file path of a stack line's first field (``File /a/b.py``), with ``/`` separators."""
    field = field.strip()
    if field.startswith("File "):
        field = field[5:]
    return field.strip().strip('"').replace("\\", "/")


def _frame_top_module(field: str) -> str:
    """Top-level package of the module a frame's file belongs to ('' when the file is under no install root)."""
    parts = _frame_path(field).split("/")
    for roots in _INSTALL_ROOTS:          # site-packages/dist-packages first: torch itself has a torch/package/
        for idx in range(len(parts) - 2, -1, -1):
            if parts[idx] in roots:
                top = parts[idx + 1]
                return top[:-3] if top.endswith(".py") else top
    return ""


def _is_own_frame(field: str) -> bool:
    """A frame of msprobe (or MindSpeed) itself: by module name, or by lying inside this machine's msprobe."""
    path = _frame_path(field)
    return _frame_top_module(path).lower() in _OWN_MODULES or path.startswith(_PKG_DIR)


def _make_item(name: str, parent: Optional[str], frames, end_sign, side: str, cache: dict) -> _Item:
    """One dump entry. ``cache`` memoises per-parent layer scopes and per-stack function names."""
    parts = name.split(".")
    if len(parts) < 4:
        raise MsprobeError(f"{side} dump.json: entry name '{name}' has fewer than 4 dot-separated fields, so it is "
                           f"not an msprobe dump name; layer mapping needs a dump made by msprobe")
    parent_scope = None
    if parent is not None:
        parent_scope = cache.get(parent)
        if parent_scope is None:
            parent_parts = parent.split(".")
            if len(parent_parts) > 1 and len(parent_parts) < 4:
                raise MsprobeError(f"{side} construct.json: the parent '{parent}' of '{name}' has fewer than 4 "
                                   f"dot-separated fields, so it is not a module name; the file is damaged: re-run the dump")
            parent_scope = cache[parent] = ".".join(parent_parts[:-3])
    api_type = parts[0]
    if parts[-1] == _PARAMS_GRAD:
        api_type = _PARAMS_GRAD
        own, type_name, state = parts[-3], parts[-2], _PARAMS_GRAD
        layer_scope = ".".join(parts[:-3])
    elif api_type in _LAYER_PREFIXES:
        own, type_name, state = parts[-4], parts[-3], parts[-2]
        layer_scope = ".".join(parts[:-4])
    else:
        type_name = own = parts[-3]
        state = parts[-1]
        layer_scope = TOP_LAYER if parent_scope is None else parent_scope
    func = ""
    if frames and api_type not in _LAYER_PREFIXES and api_type not in _NO_STACK_TYPES:
        key = id(frames)        # the frame lists live in the stack dict for the whole build
        func = cache.get(key)
        if func is None:
            if not isinstance(frames, list) or not all(isinstance(line, str) for line in frames):
                raise MsprobeError(f"{side} stack.json: the stack of '{name}' is not a list of strings; "
                                   f"the file is damaged: re-run the dump")
            func = cache[key] = _frame_function(frames, end_sign)
    scope = f"{layer_scope}.{func}.{own}" if func else f"{layer_scope}.{own}"
    return _Item(name, type_name, state, scope)


def _backward_pass(items: List[_Item], by_name: Dict[str, _Item]) -> None:
    """A backward entry takes the scope of its forward twin (backward entries have no stack)."""
    for item in items:
        parts = item.name.split(".")
        tail = parts[-2:]
        if _BACKWARD not in tail:
            continue
        twin = by_name.get(".".join(parts[:-2] + [p.replace(_BACKWARD, _FORWARD) for p in tail]))
        if twin is not None:
            item.scope = twin.scope


def _prefixes_in(scope: str, prefixes: Dict[str, int], lengths: List[int]) -> Iterable[Tuple[str, int]]:
    """(prefix, its length) for every key of ``prefixes`` that ``scope`` starts with, followed by a dot
    (``lengths``: the distinct key lengths)."""
    size = len(scope)
    for length in lengths:
        if length < size and scope[length] == "." and scope[:length] in prefixes:
            yield scope[:length], length


def _next_number(rest: str):
    """(next scope part, its last integer or inf) for the text after ``prefix.``; part None if none."""
    match = _NEXT_PART.match(rest)
    if not match:
        return None, math.inf
    part = match.group(1)
    numbers = _DIGITS.findall(part)
    return part, (int(numbers[-1]) if numbers else math.inf)


def _renumber_pass(items: List[_Item]) -> None:
    """Make ``<ParallelTransformer scope>.layers.<i>`` relative to the smallest ``i`` seen."""
    order: Dict[str, int] = {}
    for item in items:
        if item.type_name == _RENUMBER_TYPE:
            order.setdefault(f"{item.scope}.{_RENUMBER_CHILD}", len(order))
    if not order:
        return
    lengths = sorted({len(prefix) for prefix in order})
    scopes = {item.scope: None for item in items}          # distinct scopes, the work is per scope
    lowest: Dict[str, float] = dict.fromkeys(order, math.inf)
    for scope in scopes:
        for prefix, pos in _prefixes_in(scope, order, lengths):
            _, number = _next_number(scope[pos + 1:])
            if number < lowest[prefix]:
                lowest[prefix] = number
    # The prefixes are applied one after another (in the order they were found), each to the scope as
    # the earlier ones left it; scopes do not influence each other, so this is done scope by scope.
    for original in scopes:
        scope, last = original, -1
        while True:
            best = None
            for prefix, pos in _prefixes_in(scope, order, lengths):
                rank = order[prefix]
                if rank > last and (best is None or rank < best[0]):
                    best = (rank, prefix, pos)
            if best is None:
                break
            last, prefix, pos = best
            rest = scope[pos + 1:]
            part, number = _next_number(rest)
            relative = number - lowest[prefix]
            if part is None or math.isinf(relative):
                continue
            scope = f"{prefix}.{relative}{rest[len(part):]}"
        scopes[original] = scope
    for item in items:
        item.scope = scopes[item.scope]


def _build_items(data: dict, construct: dict, stack, framework: str, side: str) -> List[_Item]:
    if not data or not stack or not construct:
        return []                     # the reference needs both stack.json and construct.json
    stacks = normalize_stack(stack)
    end_sign = _STACK_END.get(framework, _STACK_END[PT_FRAMEWORK])
    items: List[_Item] = []
    by_name: Dict[str, _Item] = {}
    cache: dict = {}
    for name in data:
        if not isinstance(name, str):
            continue
        item = _make_item(name, _parent(construct, name), stacks.get(name), end_sign, side, cache)
        items.append(item)
        by_name[name] = item
    _backward_pass(items, by_name)
    _renumber_pass(items)
    return items


# ------------------------------------------------------------------------------------------ trie


class _Node:
    __slots__ = ("type_name", "children", "entries")

    def __init__(self, type_name: str):
        self.type_name = type_name
        self.children: Dict[str, "_Node"] = {}
        self.entries: Dict[str, List[str]] = {}


def _build_trie(items: List[_Item], positions: Optional[Dict[str, int]] = None) -> _Node:
    """Trie of scope parts (the first part is the root). ``positions`` receives each item's index
    among its node's same-state entries."""
    root = _Node(TOP_LAYER)
    nodes: Dict[str, _Node] = {}
    for item in items:
        node = nodes.get(item.scope)
        if node is None:
            node = root
            for part in item.scope.split(".")[1:]:
                child = node.children.get(part)
                if child is None:
                    child = node.children[part] = _Node(part)
                node = child
            nodes[item.scope] = node
        bucket = node.entries.get(item.state)
        if bucket is None:
            bucket = node.entries[item.state] = []
        if positions is not None:
            positions[item.name] = len(bucket)
        bucket.append(item.name)
        node.type_name = item.type_name
    return root


def _translate(root: _Node, scope: str, rules) -> List[str]:
    """The NPU scope parts (root part excluded) rewritten with the yaml rules."""
    parts = scope.split(".")
    out: List[str] = []
    node = root
    idx, last = 1, len(parts)
    while idx < last:
        child = parts[idx]
        step, target = 1, child
        for origin, bench, width in rules.get(node.type_name, {}).get(child, ()):
            if ".".join(parts[idx:idx + width]) == origin:
                step, target = width, bench
                break
        out.append(target)
        for _ in range(step):
            node = node.children[parts[idx]]
            idx += 1
    return out


def _find(root: _Node, translated: List[str]) -> Optional[_Node]:
    node = root
    for part in ".".join(translated).split("."):   # a bench path may itself be dotted
        node = node.children.get(part)
        if node is None:
            return None
    return node


# ------------------------------------------------------------------------------------------ main


def compute_layer_mapping(npu_data: dict, bench_data: dict, npu_construct: dict, bench_construct: dict,
                          npu_stack, bench_stack, rules=None, *, npu_framework: Optional[str] = None,
                          bench_framework: Optional[str] = None) -> Dict[str, str]:
    """``{npu_dump_name: bench_dump_name}`` for every NPU dump entry that has a partner.

    ``*_data``: the ``data`` object of dump.json; ``*_construct``: construct.json (``{name: parent}``);
    ``*_stack``: stack.json in either format; ``rules``: :func:`load_layer_mapping_yaml`'s result
    (``{}``/None/True: match by name only). ``*_framework`` (``mindspore``/``pytorch``, e.g. dump.json's
    ``framework`` field) decides how stacks are read; when not given it is detected from the data.
    A side without stack.json or construct.json content yields no pairs (as in the reference).
    """
    prepared = _prepare_rules(rules)
    npu_fw = npu_framework if npu_framework in _STACK_END else detect_framework(npu_data, MS_FRAMEWORK)
    bench_fw = bench_framework if bench_framework in _STACK_END else detect_framework(bench_data, PT_FRAMEWORK)
    npu_items = _build_items(npu_data, npu_construct, npu_stack, npu_fw, "NPU")
    if not npu_items:
        return {}
    bench_items = _build_items(bench_data, bench_construct, bench_stack, bench_fw, "bench")
    if not bench_items:
        return {}
    positions: Dict[str, int] = {}
    npu_root = _build_trie(npu_items, positions)
    bench_root = _build_trie(bench_items)
    partner_nodes: Dict[str, Optional[_Node]] = {}      # NPU scope -> bench trie node
    mapping: Dict[str, str] = {}
    for item in npu_items:
        scope = item.scope
        if scope in partner_nodes:
            node = partner_nodes[scope]
        else:
            node = partner_nodes[scope] = _find(bench_root, _translate(npu_root, scope, prepared))
        if node is None:
            continue
        bucket = node.entries.get(item.state)
        index = positions[item.name]
        if bucket is not None and index < len(bucket):
            mapping[item.name] = bucket[index]
    return mapping
