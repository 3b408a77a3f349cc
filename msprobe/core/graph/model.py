"""The in-memory graph: one :class:`Node` per construct.json id, plus the pseudo-root and collections.

Nodes are plain slotted objects; a :class:`Graph` keeps them in a dict in creation order (the order the
``.vis`` node table is written in).  Every traversal in this package is iterative, so depth is unlimited.
"""

from __future__ import annotations

import re
from typing import Dict, Iterator, List, Optional

ROOT_ID = "DefaultModel"
COLLECTION_PREFIX = "Apis_Between_Modules"

TYPE_MODULE = 0
TYPE_API = 1
TYPE_MULTI_COLLECTION = 8
TYPE_COLLECTION = 9

# graph_and_tools.md A.5.1 (G8 lists; the '.' is a literal dot here, the reference leaves it unescaped)
_MODULE_RE = re.compile(r"^(Module\.|Cell\.|optimizer|clip_grad)")
_API_RE = re.compile(
    r"^(Tensor\.|Torch\.|Functional\.|NPU\.|VF\.|Distributed\.|Aten\.|Mint\.|Primitive\.|Jit\.|MintFunctional\.|MindSpeed\.)"
)


# compare modes (the .vis "task" value); here so that the writer needs no import of the compare module
MODE_SUMMARY = "summary"
MODE_MD5 = "md5"
MODE_TENSOR = "all"  # real-data compares


class Text(str):
    """A value already in its final display form (the writers pass it through unchanged)."""

    __slots__ = ()


def node_type_of(node_id: str) -> int:
    """0 for modules (and anything unknown, as G8 does), 1 for APIs."""
    if _API_RE.match(node_id) is not None:
        return TYPE_API
    return TYPE_MODULE


class Node:
    """One graph node.

    ``input_data`` / ``output_data`` map item names to item dicts holding the dump's raw values (plus
    compare fields after a compare); they are formatted to strings only when written.
    ``link`` is ``matched_node_link`` (the partner's ancestor ids + partner id; empty = unmatched).
    ``data`` holds ``precision_index``, ``Result`` and ``overflow_level``.
    """

    __slots__ = (
        "id", "type", "up", "subnodes", "input_data", "output_data", "stack", "link", "data",
        "micro_step", "distributed", "partner", "fmt",
    )

    def __init__(self, node_id: str, node_type: int):
        self.id = node_id
        self.type = node_type
        self.up: Optional[Node] = None
        self.subnodes: List[Node] = []
        self.input_data: Dict[str, dict] = {}
        self.output_data: Dict[str, dict] = {}
        self.stack: List[str] = []
        self.link: List[str] = []
        self.data: dict = {}
        self.micro_step: Optional[int] = None
        self.distributed: dict = {}
        self.partner: Optional[Node] = None  # the matched node of the other graph (compare only)
        self.fmt = None  # (input_data, output_data) already formatted elsewhere (see build.SplitFormatter)

    def add_child(self, child: "Node") -> None:
        """First parent wins; a node is never its own parent."""
        if child.up is None and child is not self:
            child.up = self
            self.subnodes.append(child)

    def ancestors(self) -> List[str]:
        """Ids from the root down to the parent (iterative)."""
        out = []
        n = self.up
        while n is not None:
            out.append(n.id)
            n = n.up
        out.reverse()
        return out

    def __repr__(self) -> str:  # pragma: no cover - debugging aid
        return f"Node({self.id!r}, type={self.type})"


class Graph:
    """All nodes of one dump (one rank of one step, one side)."""

    def __init__(self, dump_data_dir: Optional[str] = None):
        self.root = Node(ROOT_ID, TYPE_MODULE)
        self.nodes: Dict[str, Node] = {ROOT_ID: self.root}
        self.dump_data_dir = dump_data_dir
        self.micro_steps = 1
        # filled by the builder: the dump.json header and data (overflow check and compare read them)
        self.task = ""
        self.framework = ""
        self.dump_dir = ""
        self.data: dict = {}  # dump.json "data" (dropped once the overflow check / layer mapping used it)
        self.split = None  # build.SplitFormatter while a child process formats part of the items
        self.data_keys: frozenset = frozenset()  # its entry names
        self.dump_order: List[str] = []  # its entry names in dump.json order (the compare report's row order)
        self.verdict_summary: Optional[dict] = None  # compare with verdict colours: see graph.verdict.apply_verdict
        self.has_md5 = False

    def get(self, node_id: str) -> Optional[Node]:
        return self.nodes.get(node_id)

    def add(self, node: Node) -> Node:
        self.nodes[node.id] = node
        return node

    def __len__(self) -> int:
        return len(self.nodes)

    def preorder(self, start: Optional[Node] = None) -> Iterator[Node]:
        """Root first, children in order; iterative."""
        stack = [start or self.root]
        while stack:
            n = stack.pop()
            yield n
            if n.subnodes:
                stack.extend(reversed(n.subnodes))

    def bfs(self, start: Optional[Node] = None) -> Iterator[Node]:
        from collections import deque

        q = deque([start or self.root])
        while q:
            n = q.popleft()
            yield n
            q.extend(n.subnodes)

    def postorder(self, start: Optional[Node] = None) -> Iterator[Node]:
        """Children before parents, left to right (the .vis.db ``node_order``); iterative."""
        stack = [(start or self.root, False)]
        while stack:
            n, done = stack.pop()
            if done or not n.subnodes:
                yield n
                continue
            stack.append((n, True))
            stack.extend((c, False) for c in reversed(n.subnodes))
