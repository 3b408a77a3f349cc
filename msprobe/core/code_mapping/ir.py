"""Streaming reader of MindSpore text IR (``.ir``) for code_mapping.

The IR is read line by line, once, so the time is linear in the file size and the memory holds only
the nodes kept (scope, code lines, ids), not the text.  What a node looks like::

    subgraph @kernel_graph0() {
      %5(x) = PrimFunc_MatMul(%3, %4, Bool(0), Bool(1)) {instance name: matmul} ... cnode_primal_attrs: {unique_id: "9012"}
          : (<Tensor[Float32], (2, 8)>, ...) -> (<Tensor[Float32], (2, 8)>)
          # Fullname with scope: (Default/block-Block/dense-Dense/MatMul-op0)
          # In file /home/user/net.py:10, 24~34/        return self.act(self.dense(x)) + x/
          # In file .../mindspore/nn/layer/basic.py:807, 12~39/        x = self.matmul(x, self.weight)/
      Return(%17)
          # Fullname with scope: (Default/Return-op1)
    }

* A node starts at a line ``%<n>(<name>) = <op>...``; its block runs to the next statement (another
  node, a ``Return(...)`` line, the ``}`` closing the graph).  The arguments may span several lines
  (tensor constants are printed with their values).
* Its **scope** is the first comment line of its own block of the form ``# ... scope ...: (<scope>)``;
  a node without one has no scope (it never borrows the next node's line).
* Its **code lines** are the comment lines right after the scope line, each with the ``#``, the spaces
  and the ``/`` around it stripped (``In file /home/user/net.py:10, 24~34/        return ...``).
  Backward nodes print ``Corresponding forward node candidate:`` / ``Corresponding code candidate:``
  header lines among them; they are kept as written.
* ``cnode_primal_attrs: {unique_id: "N"}`` marks a forward node; ``forward_unique_id: "N"`` on a
  backward (``Gradients/...``) node names its forward node.  A backward node whose own comment lines
  hold no ``In file`` line gets the forward node's code lines, behind a
  ``Corresponding forward node candidate:`` line.
* ``subgraph @name(...) {`` (and the older ``funcgraph name(...) {``) opens a graph; every node records
  the graph it belongs to, and ``%<n>`` numbers may repeat from one graph to the next.
"""

from __future__ import annotations

import os
import re
from typing import Dict, List, Optional, Tuple

from msprobe.core.errors import MsprobeError

FORWARD_HEADER = "Corresponding forward node candidate:"

_NODE_RE = re.compile(r"%(\d+)\(([^()]*)\)\s*=\s*([^\s(){}\[\]]*)")
_SCOPE_RE = re.compile(r"#[^\n]*?scope[^\n]*?:\s*\((.*)\)\s*$", re.IGNORECASE)
_GRAPH_RE = re.compile(r"(?:subgraph\s+@|funcgraph\s+)([^\s(){}]+)")
_ENTRY_RE = re.compile(r"#\s*IR entry\s*:\s*@(\S+)")
_UID_RE = re.compile(r"(?<![\w])unique_id\s*:\s*\"(\d+)\"")
_FWD_UID_RE = re.compile(r"forward_unique_id\s*:\s*\"(\d+)\"")
_CODE_STRIP = "# "
# first characters of continuation lines (types, tensor values) that may sit at the statement indentation
_NOT_STATEMENT = "[]:(.-0123456789"


class IrNode:
    """One IR node that has a scope."""

    __slots__ = ("graph", "number", "name", "op", "scope", "code", "unique_id", "forward_unique_id", "line")

    def __init__(self, graph: Optional[str], number: str, name: str, op: str, line: int):
        self.graph = graph
        self.number = number
        self.name = name
        self.op = op
        self.line = line
        self.scope = ""
        self.code: Tuple[str, ...] = ()
        self.unique_id: Optional[str] = None
        self.forward_unique_id: Optional[str] = None

    @property
    def key(self) -> str:
        """The scope as it appears in dump file names: ``/`` replaced by ``_``."""
        return self.scope.replace("/", "_")

    def __repr__(self) -> str:  # pragma: no cover - debugging aid
        return f"IrNode({self.graph}:%{self.number}({self.name}) = {self.op}, scope={self.scope!r})"


class IrIndex:
    """The nodes of one IR file, indexed by scope key."""

    def __init__(self, path: str):
        self.path = path
        self.nodes: List[IrNode] = []
        self.graphs: List[str] = []
        self.entries: List[str] = []
        self.node_lines = 0  # every ``%n(name) = ...`` statement, with or without a scope
        self.by_key: Dict[str, List[IrNode]] = {}
        self.backward_linked = 0  # backward nodes that took their forward node's code lines

    def lookup(self, key: str) -> List[IrNode]:
        return self.by_key.get(key, [])


def _looks_binary(path: str) -> bool:
    with open(path, "rb") as fh:
        head = fh.read(4096)
    return b"\x00" in head


def parse_ir(path: str) -> IrIndex:
    """Read the IR file ``path`` (text) and return its :class:`IrIndex`.

    Raises :class:`MsprobeError` when the file holds no IR node at all.
    """
    from msprobe.core.fileio import check_path

    path = check_path(path, "IR file", "file")
    if _looks_binary(path):
        raise MsprobeError(
            f"IR file {path} is a binary file, not a MindSpore text IR; pass a .ir file such as "
            "anf_after_graph_build_*.ir or rank_0/graphs/ms_output_trace_code_graph_*.ir (not the .pb)"
        )
    index = IrIndex(path)
    intern: Dict[str, str] = {}
    node_re_match = _NODE_RE.match
    scope_search = _SCOPE_RE.search

    graph: Optional[str] = None
    cur: Optional[IrNode] = None
    phase = 0  # 0: before the scope line, 1: reading code lines, 2: block done
    code: List[str] = []
    nodes = index.nodes

    def finish() -> None:
        if cur is not None and cur.scope:
            cur.code = tuple(code)
            nodes.append(cur)

    with open(path, "r", encoding="utf-8", errors="replace", newline=None) as fh:
        for lineno, line in enumerate(fh, 1):
            s = line.lstrip()
            if not s:
                if phase == 1:
                    phase = 2
                continue
            c = s[0]
            if c == "#":
                if cur is None:
                    if line[0] == "#" and "IR entry" in line:
                        m = _ENTRY_RE.match(line)
                        if m:
                            index.entries.append(m.group(1))
                    continue
                if phase == 1:
                    text = s.rstrip().strip(_CODE_STRIP).strip("/")
                    code.append(intern.setdefault(text, text))
                elif phase == 0:
                    m = scope_search(s)
                    if m and not s[1:].lstrip().startswith("In file"):
                        cur.scope = m.group(1)
                        phase = 1
                continue
            if c == "%":
                m = node_re_match(s)
                if m:
                    finish()
                    index.node_lines += 1
                    cur = IrNode(graph, m.group(1), m.group(2), m.group(3), lineno)
                    code = []
                    phase = 0
                    if "unique_id" in s:
                        _ids(cur, s)
                    continue
            if cur is not None:
                statement = line.startswith("  ") and line[2] != " " and c not in _NOT_STATEMENT
                if phase == 0 and not statement and "unique_id" in s:
                    _ids(cur, s)
                elif phase == 1:
                    phase = 2
                if c == "}" and line[0] == "}":
                    finish()
                    cur = None
                    phase = 0
                    graph = None
                elif statement:
                    # another statement at the node indentation (e.g. "  Return(%3)"): this block is over
                    finish()
                    cur = None
                    phase = 0
                continue
            # outside any node
            if c == "}" and line[0] == "}":
                graph = None
            elif c in "sf" and line[0] in "sf":
                m = _GRAPH_RE.match(line)
                if m:
                    graph = m.group(1)
                    index.graphs.append(graph)
        finish()

    if index.node_lines == 0:
        size = os.path.getsize(path)
        raise MsprobeError(
            f"IR file {path} ({size} bytes) holds no IR node (no line like '%0(x) = PrimFunc_Add(...)'); "
            "pass a MindSpore text IR such as anf_after_graph_build_*.ir or rank_0/graphs/ms_output_trace_code_graph_*.ir"
        )
    _link_backward(index)
    by_key = index.by_key
    for node in nodes:
        by_key.setdefault(node.key, []).append(node)
    return index


def _ids(node: IrNode, text: str) -> None:
    m = _FWD_UID_RE.search(text)
    if m:
        node.forward_unique_id = m.group(1)
    m = _UID_RE.search(text)
    if m:
        node.unique_id = m.group(1)


def _has_source(code: Tuple[str, ...]) -> bool:
    return any(line.startswith("In file") for line in code)


def _link_backward(index: IrIndex) -> None:
    """Give backward nodes without a source line of their own the code lines of their forward node."""
    forward: Dict[str, IrNode] = {}
    for node in index.nodes:
        if node.unique_id and not node.scope.startswith("Gradients"):
            forward.setdefault(node.unique_id, node)
    if not forward:
        return
    for node in index.nodes:
        if node.forward_unique_id and not _has_source(node.code):
            fwd = forward.get(node.forward_unique_id)
            if fwd is not None and fwd.code:
                node.code = (FORWARD_HEADER,) + fwd.code
                index.backward_linked += 1
