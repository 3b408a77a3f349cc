"""MindSpore static-graph kernel dump -> msprobe dump layout (framework-free: no mindspore import).

MindSpore's own dump (``MINDSPORE_DUMP_CONFIG``, e2e/kbk) writes, per rank, graph and iteration::

    rank_{R}/{net}/{graph_id}/{iteration}/{OpType}.{op_name}.{task}.{stream}.{ts}.{input|output}.{slot}.{fmt}.{dtype}.npy
    rank_{R}/{net}/{graph_id}/{iteration}/statistic.csv        (GPU/Ascend "statistic" mode instead of npy)
    rank_{R}/graphs/ms_output_trace_code_graph_{graph_id}.ir  (the kernel graph: scopes and code lines)

``op_name`` is the node's scope with ``/`` replaced by ``_`` (``Default_block-Block_dense-Dense_MatMul-op0``);
the IR gives the real scope back (``Default/block-Block/dense-Dense/MatMul-op0``; names such as
``_backbone`` keep their underscore). This module turns one iteration into the records of
``dump.json``/``stack.json``/``construct.json`` (msprobe.core.dump.writer), read by ``msprobe compare``,
``graph`` and the other tools:

* every dumped kernel: ``Primitive.{instance}.{OpType}.{n}.forward`` (``instance`` is the IR's
  ``{instance name: matmul}``, the attribute the Cell holds it in, else the op type in lower case;
  ``n`` counts per ``instance.OpType`` as the PyNative dumper counts Primitive calls). Kernels of the
  gradient graph (scope ``Gradients/...``) are ``Primitive.{instance}_grad.{OpType}.{n}.backward``.
  ``input_args`` are the kernel's inputs by slot (IR constants such as ``Bool(1)`` become
  ``{"type": "bool", "value": true}``), ``output`` its outputs;
* every Cell a forward scope part names (``block-Block`` -> path ``block``, class ``Block``):
  ``Cell.{path}.{Class}.forward.{n}`` (with ``model_class``, the class of the Cell given to ``start(model)``,
  paths below a Cell of that class are relative to it and that Cell has no record, as in PyNative dumps), its ``input_args`` the values its kernels take from outside the
  Cell (graph inputs and other Cells' outputs, not weights), its ``output`` the values kernels outside
  it take from it (data flow from the IR), its ``parameters`` the weights its own kernels read (by short name,
  ``weight``/``bias``, as the PyNative dumper records them); a kernel's parent in construct.json is its innermost Cell;
* stack.json: the IR's code lines of the kernel (``File <path>, line <n>, in <scope>``) and its scope.

Statistics come from the ``.npy`` files (:mod:`msprobe.core.dump.np_stats`, the PyNative rules) or,
in statistic mode, from statistic.csv (read by :mod:`msprobe.core.compare.kernel`). The IR is read
with :mod:`msprobe.core.code_mapping.ir`, the kernel files with :mod:`msprobe.core.compare.kernel`.
"""

from __future__ import annotations

import logging
import os
import re
import zlib
from typing import Dict, List, Optional, Tuple

import numpy as np

from msprobe.core.code_mapping.bind import Binder
from msprobe.core.code_mapping.ir import IrIndex, IrNode, parse_ir
from msprobe.core.compare import kernel as kdump
from msprobe.core.dump import writer as jw
from msprobe.core.dump.np_stats import fill_stats
from msprobe.core.errors import MsprobeError
from msprobe.core.io.tensors import TensorReadError, load_npy

log = logging.getLogger("msprobe")

IR_NAME = "ms_output_trace_code_graph_{}.ir"
_INSTANCE_RE = re.compile(r"\{instance name:\s*([^}\s]+)\s*\}")
_PARA_RE = re.compile(r"^%(para\d+_[^:\s]+)\s*:.*?IsWeight:\s*(true|false)")
_CONST_RE = re.compile(r"^(Bool|I8|I16|I32|I64|U8|U16|U32|U64|F16|F32|F64|BF16)\((.*)\)$")
_IN_FILE_RE = re.compile(r"^In file (.+?):(\d+)(?:~\d+)?(?:,[^/]*)?/(.*?)/?$")
_NP_TO_MS = {"bool": "Bool", "int8": "Int8", "int16": "Int16", "int32": "Int32", "int64": "Int64",
             "uint8": "UInt8", "uint16": "UInt16", "uint32": "UInt32", "uint64": "UInt64",
             "float16": "Float16", "float32": "Float32", "float64": "Float64", "complex64": "Complex64",
             "complex128": "Complex128"}
STAT_CACHE_MAX = 200_000
_PARA_PREFIX_RE = re.compile(r"^%para\d+_")
_TUPLE_GET = "TupleGetItem"
_ORDER_ONLY = ("UpdateState",)   # ordering edges, not data
_OPNUM_RE = re.compile(r"-op\d+$")
_PASS_THROUGH = ("Load", "Depend", "TensorMove")   # a value flowing through these is the same value


# ------------------------------------------------------------------------------------------- layout

def rank_iterations(rank_root: str) -> Dict[int, List[Tuple[str, str]]]:
    """``{iteration: [(graph_id, directory), ...]}`` of one MindSpore rank folder (``rank_{R}``)."""
    out: Dict[int, List[Tuple[str, str]]] = {}
    try:
        nets = sorted(e.path for e in os.scandir(rank_root) if e.is_dir(follow_symlinks=False)
                      and e.name not in ("graphs", "execution_order") and not e.name.startswith("."))
    except OSError:
        return out
    for net in nets:
        for g in sorted(os.scandir(net), key=lambda e: e.name):
            if not (g.is_dir(follow_symlinks=False) and g.name.isdigit()):
                continue
            for it in os.scandir(g.path):
                if it.is_dir(follow_symlinks=False) and it.name.isdigit():
                    out.setdefault(int(it.name), []).append((g.name, it.path))
    for dirs in out.values():
        dirs.sort(key=lambda gd: int(gd[0]))
    return out


def ir_path(rank_root: str, graph_id: str) -> Optional[str]:
    p = os.path.join(rank_root, "graphs", IR_NAME.format(graph_id))
    return p if os.path.isfile(p) else None


# ------------------------------------------------------------------------------------------- kernels

class _Slot:
    __slots__ = ("path", "dtype", "shape", "stats")

    def __init__(self, path=None, dtype=None, shape=None, stats=None):
        self.path, self.dtype, self.shape, self.stats = path, dtype, shape, stats


class _Kernel:
    __slots__ = ("op_type", "op_name", "ts", "inputs", "outputs", "node", "scope", "record")

    def __init__(self, op_type: str, op_name: str, ts: int):
        self.op_type, self.op_name, self.ts = op_type, op_name, ts
        self.inputs: Dict[int, _Slot] = {}
        self.outputs: Dict[int, _Slot] = {}
        self.node: Optional[IrNode] = None
        self.scope = ""
        self.record = ""


def _io_slot(io: str) -> Tuple[str, int]:
    parts = io.split(".")
    return parts[0], int(parts[-1]) if len(parts) > 1 and parts[-1].isdigit() else 0


def _read_npy_kernels(d: str) -> List[_Kernel]:
    names = kdump._mapping(d)
    kernels: Dict[Tuple[str, str, str, str], _Kernel] = {}
    for fname in sorted(os.listdir(d)):
        if not fname.endswith(".npy"):
            continue
        m = kdump.NPY_RE.match(names.get(fname, fname))
        if not m:
            log.warning("kernel dump %s: %s is not named op_type.op_name.task.stream.timestamp.io.slot.format.npy; "
                        "skipped", d, fname)
            continue
        op_type, op_name, task, stream, ts, io, dtype = (m.group(i) for i in (1, 2, 3, 4, 5, 6, 8))
        if op_type == "Parameter":          # the graph's parameters after the run: not a kernel
            continue
        ts_int = int(ts.split(".")[0])
        k = kernels.get((op_type, op_name, task, stream))
        if k is None:
            k = kernels[(op_type, op_name, task, stream)] = _Kernel(op_type, op_name, ts_int)
        k.ts = min(k.ts, ts_int)
        kind, slot = _io_slot(io)
        (k.inputs if kind == "input" else k.outputs)[slot] = _Slot(os.path.join(d, fname),
                                                                  dtype if dtype.isalnum() else None)
    return list(kernels.values())


def _read_stat_kernels(d: str) -> List[_Kernel]:
    kernels: Dict[Tuple[str, str], _Kernel] = {}
    for row in kdump.read_statistic_csv(d):
        try:
            op_name, task, io, slot = row.key.rsplit(".", 3)
        except ValueError:
            continue
        if not op_name or op_name.startswith("Parameter"):
            continue
        k = kernels.get((op_name, task))
        if k is None:
            last = op_name.rsplit("_", 1)[-1]
            k = kernels[(op_name, task)] = _Kernel(last.split("-op")[0], op_name, row.timestamp)
        k.ts = min(k.ts, row.timestamp)
        shape = [int(x) for x in re.findall(r"\d+", row.shape)] if row.shape not in (kdump.NA, "") else []
        stats = tuple(None if v == kdump.NA else v for v in row.stats)
        (k.inputs if io.startswith("input") else k.outputs)[int(slot) if slot.isdigit() else 0] = \
            _Slot(None, row.dtype, shape, stats)
    return list(kernels.values())


# ------------------------------------------------------------------------------------------- IR details

class _Ir:
    """What the converter needs from one IR file beyond code_mapping's index: each node's arguments
    and instance name (read from the node's own statement), and which graph parameters are weights."""

    def __init__(self, path: str):
        self.index: IrIndex = parse_ir(path)
        self.binder = Binder(self.index)
        with open(path, "r", encoding="utf-8", errors="replace") as fh:
            self.lines = fh.read().split("\n")
        self.weights = set()
        self.inputs = set()
        for line in self.lines:
            if line.startswith("%para"):
                m = _PARA_RE.match(line)
                if m:
                    (self.weights if m.group(2) == "true" else self.inputs).add("%" + m.group(1))
            elif line.startswith("subgraph"):
                break
        self.loose: Dict[str, List[IrNode]] = {}
        for n in self.index.nodes:
            self.loose.setdefault(_OPNUM_RE.sub("", n.key), []).append(n)
        self.by_number: Dict[Tuple[Optional[str], str], IrNode] = {(n.graph, n.number): n for n in self.index.nodes}
        self._args: Dict[int, List[str]] = {}
        self.consumers: Dict[Tuple[Optional[str], str], List[IrNode]] = {}
        for n in self.index.nodes:
            for a in self.args(n):
                if a.startswith("%") and not a.startswith("%para"):
                    self.consumers.setdefault((n.graph, a[1:]), []).append(n)

    def node_of(self, op_name: str, graph_id: str) -> Optional[IrNode]:
        """The IR node of a dumped kernel: by exact scope key, else (a dump and an IR of different compiles
        may number ops differently) the only node of the same scope and op type."""
        nodes = self.binder.candidates(op_name, graph_id)
        if nodes:
            return nodes[0]
        loose = [n for n in self.loose.get(_OPNUM_RE.sub("", op_name), ()) if n.graph in (None, f"kernel_graph{graph_id}")]
        return loose[0] if len(loose) == 1 else None

    def statement(self, node: IrNode) -> str:
        return self.lines[node.line - 1] if 0 < node.line <= len(self.lines) else ""

    def instance(self, node: IrNode) -> Optional[str]:
        m = _INSTANCE_RE.search(self.statement(node))
        return m.group(1) if m else None

    def args(self, node: IrNode) -> List[str]:
        """The top-level argument texts of the node's call (across continuation lines)."""
        got = self._args.get(id(node))
        if got is not None:
            return got
        out: List[str] = []
        i = node.line - 1
        text = self.lines[i] if i < len(self.lines) else ""
        start = text.find("(", text.find("=") + 1)
        depth, cur, done, pos = 0, [], False, start
        while not done and i < len(self.lines) and i < node.line + 200:
            for ch in text[pos:]:
                if ch in "([{":
                    depth += 1
                    if depth == 1:
                        continue
                elif ch in ")]}":
                    depth -= 1
                    if depth == 0:
                        out.append("".join(cur).strip())
                        done = True
                        break
                elif ch == "," and depth == 1:
                    out.append("".join(cur).strip())
                    cur = []
                    continue
                if depth >= 1:
                    cur.append(ch)
            i += 1
            pos = 0
            text = self.lines[i] if i < len(self.lines) else ""
        out = [a for a in out if a] if start >= 0 else []
        self._args[id(node)] = out
        return out

    def source(self, graph: Optional[str], arg: str, depth: int = 0):
        """Where an argument's value comes from: ("node", (IrNode, output slot)), ("input", name),
        ("weight", name), ("const", text) or ("other", text). Load/Depend/TensorMove pass their first
        argument through; TupleGetItem(%n, k) is output k of %n."""
        if arg.startswith("%para"):
            name = arg.split("(")[0]
            return ("weight", name) if name in self.weights else ("input", name)
        if arg.startswith("%"):
            node = self.by_number.get((graph, arg[1:]))
            if node is None:
                return ("other", arg)
            if depth < 20 and (node.op in _PASS_THROUGH or node.op == _TUPLE_GET):
                a = self.args(node)
                if a and node.op in _PASS_THROUGH:
                    return self.source(graph, a[0], depth + 1)
                if len(a) == 2:
                    kind, what = self.source(graph, a[0], depth + 1)
                    m = _CONST_RE.match(a[1])
                    if kind == "node" and m and m.group(2).strip().isdigit():
                        return ("node", (what[0], int(m.group(2).strip())))
                    return kind, what
            return ("node", (node, 0))
        return ("const", arg)

    def used_outside(self, node: IrNode, inside, dumped, depth: int = 0) -> set:
        """Output slots of ``node`` that a forward node outside the Cell takes: ``inside(chain)`` says whether a
        scope chain lies in the Cell, ``dumped(node)`` gives a dumped kernel's chain (None for other nodes).
        TupleGetItem, Load/Depend/TensorMove and undumped nodes inside the Cell (a Reshape made a no-op) are
        followed; UpdateState and gradient nodes do not count."""
        slots = set()
        if depth > 8:
            return slots
        for c in self.consumers.get((node.graph, node.number), ()):
            if not c.scope.startswith("Default/") or c.op in _ORDER_ONLY:
                continue                # gradient and compiler-made (Expand/...) nodes, ordering edges
            if c.op == "MakeTuple":     # data when it feeds the Return, ordering when it feeds an UpdateState
                if self.used_outside(c, inside, dumped, depth + 1):
                    slots.add(0)
                continue
            chain = dumped(c)
            if chain is not None:
                if not inside(chain):
                    slots.add(0)
                continue
            if c.op == _TUPLE_GET:
                a = self.args(c)
                m = _CONST_RE.match(a[1]) if len(a) == 2 else None
                if m and m.group(2).strip().isdigit() and self.used_outside(c, inside, dumped, depth + 1):
                    slots.add(int(m.group(2).strip()))
                continue
            if c.op == "Return" or (not inside(tuple(scope_parts(c.scope)[1])) and c.op not in _PASS_THROUGH):
                slots.add(0)
            elif self.used_outside(c, inside, dumped, depth + 1):
                slots.add(0)
        return slots


def _const_record(text: str):
    m = _CONST_RE.match(text)
    if not m:
        return None
    kind, value = m.group(1), m.group(2).strip()
    try:
        if kind == "Bool":
            return {"type": "bool", "value": value not in ("0", "false", "False")}
        if kind[0] in "IU":
            return {"type": "int", "value": int(value)}
        return {"type": "float", "value": jw.number(float(value))}
    except ValueError:
        return None


# ------------------------------------------------------------------------------------------- scopes

def scope_parts(scope: str) -> Tuple[bool, List[Tuple[str, str]], str]:
    """(backward, [(cell name, Class), ...], own part) of an IR scope such as
    ``Gradients/Default/network-WithLossCell/_backbone-Net/head-Dense/Grad_MatMul/MatMul-op4``."""
    parts = [p for p in scope.split("/") if p]
    backward = bool(parts) and parts[0] == "Gradients"
    if backward:
        parts = parts[1:]
    if parts and parts[0] == "Default":
        parts = parts[1:]
    own = parts[-1] if parts else ""
    cells = []
    for p in parts[:-1]:
        if "-" in p and not p.startswith("Grad_"):
            name, cls = p.rsplit("-", 1)
            if name and cls:
                cells.append((name, cls))
                continue
        break
    return backward, cells, own


def _frames(node: Optional[IrNode], scope: str) -> List[str]:
    where = scope.rsplit("/", 1)[-1]
    out = []
    for line in (node.code if node is not None else ()):
        m = _IN_FILE_RE.match(line)
        if m:
            out.append(f"File {m.group(1)}, line {m.group(2)}, in {where}, \n {m.group(3).strip()}")
        else:
            out.append(line)
    out.append(f"Scope {scope}")
    return out


# ------------------------------------------------------------------------------------------- conversion

class StepRecords:
    """The records of one step (several iterations/graphs may go into one step); counters per step."""

    def __init__(self, task: str = "statistics", level: str = "L2", summary_mode: str = "statistics",
                 data_mode=("all",), tensor_dir: Optional[str] = None, precision: str = "low",
                 model_class: Optional[str] = None):
        self.task, self.level, self.summary_mode = task, level, summary_mode
        self.model_class = model_class
        self.data_mode = tuple(data_mode) or ("all",)
        self.tensor_dir = tensor_dir
        self.high = precision == "high"
        self.data: Dict[str, dict] = {}
        self.construct: Dict[str, Optional[str]] = {}
        self.stack_index: Dict[Tuple[str, ...], int] = {}
        self.stack_entries: List[Tuple[List[str], List[str]]] = []
        self.prim_count: Dict[str, int] = {}
        self.cell_count: Dict[str, int] = {}
        self.kernels = 0
        self.unbound = 0
        self.files_read = 0
        self.read_errors: List[str] = []
        self._ir_cache: Dict[str, _Ir] = {}
        self._parent_names: Dict[tuple, str] = {}
        self._stat_cache: Dict[str, dict] = {}      # npy path -> dtype, shape, statistics (Cells reuse kernel files)

    # ------------------------------------------------------------------ values
    def _tensor(self, slot: _Slot, data_name: str) -> dict:
        rec = {"type": "mindspore.Tensor", "dtype": slot.dtype, "shape": slot.shape or [],
               "Max": None, "Min": None, "Mean": None, "Norm": None}
        if slot.path is None:                              # statistic.csv row
            if slot.stats is not None:
                for key, v in zip(("Max", "Min", "Mean", "Norm"), slot.stats):
                    rec[key] = jw.number(float(v)) if isinstance(v, float) else v
            return rec
        cached = self._stat_cache.get(slot.path)
        if cached is not None and not (self.task == "tensor" and self.tensor_dir is not None):
            rec.update(cached)
            return rec
        try:
            a = load_npy(slot.path)
        except TensorReadError as exc:
            self.read_errors.append(str(exc))
            return rec
        self.files_read += 1
        if a.dtype.kind not in "biufc":
            a = a.astype(np.float32)
        rec["dtype"] = slot.dtype or _NP_TO_MS.get(str(a.dtype), str(a.dtype))
        rec["shape"] = list(a.shape)
        if self.task == "structure":
            return rec
        fill_stats(a, rec, self.high)
        if self.summary_mode == "md5":
            rec["md5"] = "%08x" % (zlib.crc32(np.ascontiguousarray(a).tobytes()) & 0xFFFFFFFF)
        if len(self._stat_cache) < STAT_CACHE_MAX:
            self._stat_cache[slot.path] = {k: v for k, v in rec.items() if k != "type"}
        if self.task == "tensor" and self.tensor_dir is not None:
            fname = data_name.replace("/", "_").replace("\\", "_") + ".npy"
            os.makedirs(self.tensor_dir, mode=0o750, exist_ok=True)
            jw.write_file(os.path.join(self.tensor_dir, fname), lambda fh: np.save(fh, a))
            rec["data_name"] = fname
        return rec

    def _value(self, slot: Optional[_Slot], arg: Optional[str], data_name: str):
        if arg is not None:
            const = _const_record(arg)
            if const is not None:
                return const
        if slot is None:
            return None
        return self._tensor(slot, data_name)

    def _want(self, io: str) -> bool:
        """``data_mode`` filter for ``input``/``output`` (and ``forward``/``backward`` in :meth:`_want_dir`)."""
        modes = [m for m in self.data_mode if m in ("input", "output")]
        return "all" in self.data_mode or not modes or io in modes

    def _want_dir(self, direction: str) -> bool:
        modes = [m for m in self.data_mode if m in ("forward", "backward")]
        return "all" in self.data_mode or not modes or direction in modes

    def _stack(self, name: str, frames: List[str]) -> None:
        key = tuple(frames)
        idx = self.stack_index.get(key)
        if idx is None:
            idx = self.stack_index[key] = len(self.stack_entries)
            self.stack_entries.append(([], frames))
        self.stack_entries[idx][0].append(name)

    def _ir(self, path: Optional[str]) -> Optional[_Ir]:
        if path is None:
            return None
        ir = self._ir_cache.get(path)
        if ir is None:
            ir = self._ir_cache[path] = _Ir(path)
        return ir

    # ------------------------------------------------------------------ one iteration of one graph
    def add_iteration(self, directory: str, graph_id: str, ir_file: Optional[str]) -> int:
        """Add the kernels of one ``{net}/{graph_id}/{iteration}`` directory; returns how many."""
        mode = kdump.dir_mode(directory)
        if mode is None:
            return 0
        kernels = _read_npy_kernels(directory) if mode == "npy" else _read_stat_kernels(directory)
        kernels.sort(key=lambda k: k.ts)
        ir = self._ir(ir_file)
        for k in kernels:
            if ir is not None:
                k.node = ir.node_of(k.op_name, graph_id)
                if k.node is not None:
                    k.scope = k.node.scope
            if not k.scope:
                self.unbound += 1
                k.scope = k.op_name.replace("_", "/")
        want_cells = self.level in ("L0", "mix", "L2") and self._want_dir("forward")
        want_kernels = self.level in ("L1", "mix", "L2")
        cells = self._cells(kernels, ir) if want_cells else {}
        emitted = set()
        for k in kernels:
            backward, chain, own = scope_parts(k.scope)
            parent = None
            if chain and not backward:
                for depth in range(1, len(chain) + 1):
                    key = tuple(chain[:depth])
                    if key in cells and key not in emitted:
                        emitted.add(key)
                        self._emit_cell(key, cells[key], ir)
                if tuple(chain) in cells:
                    parent = cells[tuple(chain)]["name"]
            if want_kernels and self._want_dir("backward" if backward else "forward"):
                self._emit_kernel(k, backward, parent, ir)
        self.kernels += len(kernels)
        return len(kernels)

    def _emit_kernel(self, k: _Kernel, backward: bool, parent: Optional[str], ir: Optional[_Ir]) -> None:
        inst = (ir.instance(k.node) if ir is not None and k.node is not None else None) or k.op_type.lower()
        root = k.scope.split("/", 2)[1 if backward else 0] if k.scope.count("/") >= (2 if backward else 1) else ""
        if root and root != "Default":     # compiler-made kernels (Expand/_PowTensorScalar/Pow-op0): no user call
            inst = f"{root.lower()}_{inst}"
        prefix = f"Primitive.{inst}_grad.{k.op_type}" if backward else f"Primitive.{inst}.{k.op_type}"
        n = self.prim_count.get(prefix, 0)
        self.prim_count[prefix] = n + 1
        name = f"{prefix}.{n}.{'backward' if backward else 'forward'}"
        args = ir.args(k.node) if ir is not None and k.node is not None else []
        rec: dict = {}
        if self._want("input"):
            count = max(len(args), max(k.inputs) + 1 if k.inputs else 0)
            rec["input_args"] = [self._value(k.inputs.get(i), args[i] if i < len(args) else None,
                                             f"{name}.input.{i}") for i in range(count)]
            rec["input_kwargs"] = {}
        if self._want("output"):
            count = max(k.outputs) + 1 if k.outputs else 0
            rec["output"] = [self._value(k.outputs.get(i), None, f"{name}.output.{i}") for i in range(count)]
        self.data[name] = rec
        self.construct[name] = parent
        self._stack(name, _frames(k.node, k.scope))

    # ------------------------------------------------------------------ cells
    def _cells(self, kernels: List[_Kernel], ir: Optional[_Ir]) -> Dict[tuple, dict]:
        """Per forward Cell (scope chain): its name, its input values and its output values, each value a
        (slot, IR argument text or None)."""
        chains: Dict[int, Tuple[Tuple[str, str], ...]] = {}
        by_node: Dict[int, _Kernel] = {}
        order: List[tuple] = []
        members: Dict[tuple, List[_Kernel]] = {}
        for k in kernels:
            backward, chain, _ = scope_parts(k.scope)
            if backward or not chain:
                continue
            chains[id(k)] = tuple(chain)
            if k.node is not None:
                by_node[id(k.node)] = k
            for depth in range(1, len(chain) + 1):
                key = tuple(chain[:depth])
                if key not in members:
                    members[key] = []
                    order.append(key)
                members[key].append(k)
        out: Dict[tuple, dict] = {}
        for key in order:
            ks = members[key]
            names = self._relative(key)
            if names is None:
                continue                          # the model given to start() itself: no record (as PyNative)
            path = ".".join(names)
            prefix = f"Cell.{path}.{key[-1][1]}"
            inputs: List[Tuple[_Slot, Optional[str]]] = []
            outputs: List[Tuple[_Slot, Optional[str]]] = []
            params: Dict[str, _Slot] = {}
            if ir is not None and all(k.node is not None for k in ks):
                seen_in = set()
                full_path = ".".join(name for name, _ in key)
                for k in ks:
                    own = chains.get(id(k)) == key
                    for i, arg in enumerate(ir.args(k.node)):
                        kind, what = ir.source(k.node.graph, arg)
                        if kind == "weight":
                            # a weight used by a kernel of this very Cell: its "parameters" entry, by short name
                            owner, _, short = _PARA_PREFIX_RE.sub("", what).rpartition(".")
                            if (own and i in k.inputs and short not in params
                                    and (not owner or f".{full_path}".endswith(f".{owner}"))):
                                params[short] = k.inputs[i]
                            continue
                        if kind == "node":
                            node, slot = what
                            src = by_node.get(id(node))
                            src_chain = chains.get(id(src), ()) if src is not None else \
                                tuple(scope_parts(node.scope)[1])
                            if src_chain[:len(key)] == key:
                                continue          # made inside this Cell
                            ident = ("node", id(node), slot)
                        elif kind == "input":
                            ident = ("input", what)
                        else:
                            continue              # weights, constants, monads
                        if ident in seen_in or i not in k.inputs:
                            continue
                        seen_in.add(ident)
                        inputs.append((k.inputs[i], None))
                def inside(chain, key=key):
                    return tuple(chain)[:len(key)] == key

                def dumped(node):
                    kern = by_node.get(id(node))
                    return chains.get(id(kern), ()) if kern is not None else None

                for k in ks:
                    for slot in sorted(ir.used_outside(k.node, inside, dumped)):
                        if slot in k.outputs:
                            outputs.append((k.outputs[slot], None))
                if not outputs:
                    last = ks[-1]
                    outputs = [(last.outputs[i], None) for i in sorted(last.outputs)]
            else:                                  # no IR: first kernel's first input, last kernel's outputs
                if 0 in ks[0].inputs:
                    inputs = [(ks[0].inputs[0], None)]
                outputs = [(ks[-1].outputs[i], None) for i in sorted(ks[-1].outputs)]
            n = self.cell_count.get(prefix, 0)
            self.cell_count[prefix] = n + 1
            out[key] = {"name": f"{prefix}.forward.{n}", "inputs": inputs, "outputs": outputs, "params": params,
                        "parent": key[:-1], "first": ks[0]}
        return out

    def _relative(self, key: tuple) -> Optional[List[str]]:
        """The Cell path of a scope chain: relative to the model given to ``start(model)`` when the chain runs
        through a Cell of its class (None for that Cell itself), else from the graph's root."""
        if self.model_class:
            for i, (_, cls) in enumerate(key):
                if cls == self.model_class:
                    return [name for name, _ in key[i + 1:]] or None
        return [name for name, _ in key]

    def _emit_cell(self, key: tuple, cell: dict, ir: Optional[_Ir]) -> None:
        name = cell["name"]
        rec: dict = {}
        if self._want("input"):
            rec["input_args"] = [self._tensor(s, f"{name}.input.{i}") for i, (s, _) in enumerate(cell["inputs"])]
            rec["input_kwargs"] = {}
        if self._want("output"):
            rec["output"] = [self._tensor(s, f"{name}.output.{i}") for i, (s, _) in enumerate(cell["outputs"])]
        if cell["params"] and self._want("input"):
            rec["parameters"] = {p: self._tensor(s, f"{name}.parameters.{p}") for p, s in cell["params"].items()}
        self.data[name] = rec
        parent = cell["parent"]
        self.construct[name] = self._parent_names.get(parent) if parent else None
        self._parent_names[key] = name
        first = cell["first"]
        self._stack(name, _frames(first.node, "/".join(f"{a}-{b}" for a, b in key)))

    # ------------------------------------------------------------------ files
    def files(self) -> list:
        header = {"task": self.task, "level": self.level, "framework": "mindspore",
                  "dump_data_dir": self.tensor_dir if self.task == "tensor" else None, "data": self.data}
        stack = {str(i): [names, frames] for i, (names, frames) in enumerate(self.stack_entries)}
        construct = self.construct if self.level in ("L0", "mix", "L2") else {}
        return [("dump.json", header), ("stack.json", stack), ("construct.json", construct)]

    def write(self, rank_dir: str) -> None:
        os.makedirs(rank_dir, mode=0o750, exist_ok=True)
        jw.write_step_files(rank_dir, self.files())


def convert_rank(rank_root: str, out_rank_dir: str, iterations=None, **options) -> StepRecords:
    """Convert the iterations ``iterations`` (all when None) of the MindSpore rank folder ``rank_root``
    (``.../rank_{R}``) into ``out_rank_dir`` (dump.json, stack.json, construct.json and, for task tensor,
    dump_tensor_data/). Returns the step's records (counts for messages)."""
    if not os.path.isdir(rank_root):
        raise MsprobeError(f"MindSpore dump folder {rank_root} does not exist; pass the rank_<id> folder "
                           "MindSpore's dump wrote (path of the dump config + rank_<id>)")
    found = rank_iterations(rank_root)
    wanted = sorted(found) if iterations is None else [i for i in sorted(iterations) if i in found]
    if not wanted:
        raise MsprobeError(f"MindSpore dump folder {rank_root} holds no iteration "
                           f"{'' if iterations is None else sorted(iterations)} "
                           "({net}/{graph_id}/{iteration} folders with .npy files or statistic.csv); "
                           "check that the graph ran with the dump config")
    if options.get("task") == "tensor":
        options.setdefault("tensor_dir", os.path.join(out_rank_dir, "dump_tensor_data"))
    rec = StepRecords(**options)
    for it in wanted:
        for graph_id, d in found[it]:
            rec.add_iteration(d, graph_id, ir_path(rank_root, graph_id))
    rec.write(out_rank_dir)
    return rec
