"""First-divergence analysis (``-da``): the reference's two phases, on the compare reports in memory.

Phase 1, per rank: group the rows per API; an API differs (``is_same`` false) when (md5) a row's Result
is ``Different``, or (other modes) one of MaxRelativeErr, MinRelativeErr, MeanRelativeErr, NormRelativeErr
of a row exceeds its threshold (0.5).  Written as ``compare_result_rank{N}_{ts}.json``
(``{api: {"is_same": bool, "op_items": [row dicts]}}``, indent 4, the reference's keys; tensor reports are
written as statistics rows, as the reference does).

Phase 2, across ranks (compare.md §7.2):

1. before communication: per rank, the first differing API before the first communication op;
2. during communication: per rank a chain of communication nodes, each carrying the differing compute
   APIs since the previous one; nodes are linked across ranks (peer ranks from ``src``/``dst``/
   ``group_src``/``group_dst`` inputs, ``.group`` lists or the P2POp peer; send pairs with recv, isend with
   irecv, other APIs with the same API), nodes that neither differ nor carry differing compute APIs are
   removed, and the layers are walked in order: in each connected group the compute APIs of a differing
   source/link node and the differing communication nodes are the divergence; the earliest
   (layer, sub-layer) ones are kept;
3. after communication: the first differing compute API after the last communication op of each rank.

Written as ``diff_analyze_{time_ns}.json`` (``{"rank_<n>": [{op_name, data_info, stack_info}]}``, indent
2; the reference's answer, in dump order) plus one msprobe key, ``msprobe_suspects``: the suspects ranked by
local error growth (:mod:`.growth`) and ``first_divergence``: per rank the first failing row in EXECUTION
order (the advisor's rule, :func:`first_divergence`; parameter gradients after the backward that computes
them), with the op that produced it when it is an input, or ``{"none": reason}``.  The console prints
msprobe's answer per rank and the reference rule's on one line.
Noise ops (:mod:`.config`) are skipped in every phase.
"""

from __future__ import annotations

import ast
import json
import logging
import math
import os
import re
import time
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from msprobe.core.advisor import comm
from msprobe.core.advisor.config import AnalysisConfig
from msprobe.core.advisor.growth import format_growth, noise_matcher, rank_suspects
from msprobe.core.advisor.table import (
    BENCH_STATS, DIFF_COLS, MODE_MD5, MODE_TENSOR, NPU_STATS, REL_COLS, STATE_INPUT, STATE_OUTPUT, OpTable,
)
from msprobe.core.compare.stats import numeric as st_numeric
from msprobe.core.errors import MsprobeError

log = logging.getLogger("msprobe")

BASIC = ["NPU Name", "Bench Name", "NPU Dtype", "Bench Dtype", "NPU Tensor Shape", "Bench Tensor Shape",
         "NPU Requires_grad", "Bench Requires_grad"]
STACK_COL = "NPU_Stack_Info"
P2P_COLS = ("NPU P2POp op", "Bench P2POp op", "NPU P2POp peer", "Bench P2POp peer")
SUSPECTS_KEY = "msprobe_suspects"
_RANK_LABEL = re.compile(r"^rank(\d+)$")


def rank_of(label: Optional[str]) -> int:
    """'rank3' -> 3; 'rank', a proc dir or a file pair -> 0 (as the reference reads its file names)."""
    m = _RANK_LABEL.match(label or "")
    return int(m.group(1)) if m else 0


# ---------------------------------------------------------------------------------------------- phase 1
def api_is_diff(table: OpTable, cfg: AnalysisConfig) -> np.ndarray:
    """Per API group: True when the API differs by the reference's rule."""
    if table.n == 0:
        return np.zeros(0, dtype=bool)
    if table.mode == MODE_MD5:
        row = table.failing
    else:
        _, _, frac = table.stat_cells()
        row = np.zeros(table.n, dtype=bool)
        limits = dict(cfg.thresholds)
        with np.errstate(invalid="ignore"):
            for metric, f in zip(REL_COLS, frac):
                row |= f > limits[metric]
    return np.logical_or.reduceat(row, table.starts)


def _stack_lists(cells: Sequence) -> list:
    """NPU_Stack_Info cells (the text of a list of frames) back to lists; 'N/A' stays."""
    cache: Dict[str, object] = {}
    out = []
    for c in cells:
        if c.__class__ is not str or not c.startswith("["):
            out.append(c if c is not None else "N/A")
            continue
        v = cache.get(c)
        if v is None:
            try:
                v = ast.literal_eval(c)
            except (ValueError, SyntaxError):
                v = c
            cache[c] = v
        out.append(v)
    return out


def phase1_columns(table: OpTable, p2p: Optional[Dict[str, Tuple[str, object]]] = None,
                   golden_p2p: Optional[Dict[str, Tuple[str, object]]] = None):
    """(keys, columns) of the op_items rows, as the reference writes them."""
    if table.mode == MODE_MD5:
        keys = BASIC + ["NPU MD5", "BENCH MD5", "Requires_grad Consistent", "Result"]
        cols = [table.col(k) for k in keys]
    else:
        diff, rel, _ = table.stat_cells()
        keys = BASIC + list(DIFF_COLS) + list(REL_COLS) + list(NPU_STATS) + list(BENCH_STATS) + [
            "Requires_grad Consistent", "Result", "Err_message"]
        if table.mode == MODE_TENSOR:
            result, msg = table.stat_result()
            cols = [table.col(k) for k in BASIC] + diff + rel + [table.col(k) for k in NPU_STATS + BENCH_STATS] + [
                table.col("Requires_grad Consistent"), result, msg]
        else:
            cols = [table.col(k) for k in keys]
    # bool arguments: the report shows 'True'/'False' text, the reference's json keeps the bool
    for side, names in (("NPU Dtype", NPU_STATS), ("Bench Dtype", BENCH_STATS)):
        dt = table.col(side) or []
        rows = [i for i, d in enumerate(dt) if d == "<class 'bool'>"]
        if rows and all(name in keys for name in names):  # md5 rows hold no statistics columns
            for name in names:
                k = keys.index(name)
                col = list(cols[k])
                for i in rows:
                    col[i] = {"True": True, "False": False}.get(col[i], col[i])
                cols[k] = col
    rg_i = keys.index("Requires_grad Consistent")
    rg_map = {"True": True, "False": False}
    cols[rg_i] = [rg_map.get(v, v) for v in cols[rg_i]]
    if table.has(STACK_COL):
        keys.append(STACK_COL)
        cols.append(_stack_lists(table.col(STACK_COL)))
    keys += ["state", "api_origin_name"]
    cols += [table.states.tolist(), table.apis]
    none = ["None"] * table.n
    npu_op, npu_peer = _p2p_cols(table.names, p2p)
    bench_names = table.col("Bench Name") or table.names
    bench_op, bench_peer = _p2p_cols(bench_names, golden_p2p)
    keys += list(P2P_COLS)
    cols += [npu_op or none, bench_op or none, npu_peer or none, bench_peer or none]
    return keys, cols


def _p2p_cols(names, p2p):
    if not p2p:
        return None, None
    ops, peers = [], []
    for n in names:
        hit = p2p.get(n)
        ops.append(hit[0] if hit else "None")
        peers.append(hit[1] if hit else "None")
    return ops, peers


def phase1_document(table: OpTable, is_diff: np.ndarray, p2p=None, golden_p2p=None) -> Dict[str, dict]:
    """The whole per-rank document in memory (small reports and tests; the CLI streams it)."""
    return dict(_phase1_entries(table, is_diff, p2p, golden_p2p))


def _phase1_entries(table: OpTable, is_diff: np.ndarray, p2p=None, golden_p2p=None):
    """(api, {"is_same", "op_items"}) per API, rows built one API at a time."""
    keys, cols = phase1_columns(table, p2p, golden_p2p)
    starts, ends = table.starts.tolist(), table.ends.tolist()
    for g, (s, e) in enumerate(zip(starts, ends)):
        rows = [dict(zip(keys, vals)) for vals in zip(*(c[s:e] for c in cols))]
        yield table.group_api[g], {"is_same": not bool(is_diff[g]), "op_items": rows}


def write_phase1(path: str, table: OpTable, is_diff: np.ndarray, p2p=None, golden_p2p=None) -> str:
    """Stream ``{api: {is_same, op_items}}`` (indent 4) to ``path`` atomically, one API at a time."""
    from msprobe.core.fileio import atomic_write

    # APIs with an infinite float cell go through the stdlib encoder (orjson would write null for Infinity)
    row_bad = np.zeros(table.n, dtype=bool)
    if table.mode != MODE_MD5:
        diff, _, _ = table.stat_cells()
        for c in [table.col(k) for k in NPU_STATS + BENCH_STATS] + list(diff or []):
            if c is not None:
                v, ok = st_numeric(c)
                row_bad |= ok & np.isinf(v)
    exotic = np.logical_or.reduceat(row_bad, table.starts).tolist() if table.n else []

    def _body(chunk: Dict[str, dict], stdlib: bool) -> bytes:
        """'"api": {...},\n    "api2": {...}' at the file's indent (a chunk dict without its braces)."""
        text = dump_json(chunk, 4, stdlib)
        return text[text.index(b"\n") + 5: text.rindex(b"\n")]

    def _write(tmp: str) -> None:
        with open(tmp, "wb") as fh:
            parts = 0
            fh.write(b"{")
            chunk: Dict[str, dict] = {}

            def flush(stdlib: bool = False) -> None:
                nonlocal parts, chunk
                if chunk:
                    fh.write((b"\n    " if parts == 0 else b",\n    ") + _body(chunk, stdlib))
                    parts += 1
                    chunk = {}

            for g, (api, entry) in enumerate(_phase1_entries(table, is_diff, p2p, golden_p2p)):
                if exotic[g]:
                    flush()
                    chunk[api] = entry
                    flush(stdlib=True)
                    continue
                chunk[api] = entry
                if len(chunk) >= 512:
                    flush()
            flush()
            fh.write(b"\n}" if parts else b"}")

    return atomic_write(path, _write)


def _has_nonfinite(obj_cols) -> bool:
    for col in obj_cols:
        for v in col:
            if v.__class__ is float and not math.isfinite(v):
                return True
    return False


def dump_json(obj, indent: int, exotic: bool) -> bytes:
    """JSON text with the given indent; orjson when no float is NaN/inf (orjson would write null)."""
    if not exotic:
        try:
            import orjson

            data = orjson.dumps(obj, option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS)
            if indent == 4:
                data = _double_indent(data)
            return data
        except (ImportError, TypeError):
            pass
    return json.dumps(obj, indent=indent, ensure_ascii=False).encode("utf-8")


def _double_indent(data: bytes, depth: int = 10) -> bytes:
    """Indent 2 -> indent 4 with bytes.replace passes (deepest level first; \x01 cannot occur in JSON text)."""
    for k in range(depth, 0, -1):
        pat = b"\n" + b"  " * k
        if pat in data:
            data = data.replace(pat, b"\n" + b"\x01" * (4 * k))
    return data.replace(b"\x01", b" ")


def write_bytes(path: str, data: bytes) -> str:
    from msprobe.core.fileio import atomic_write

    def _write(tmp: str) -> None:
        with open(tmp, "wb") as fh:
            fh.write(data)

    return atomic_write(path, _write)


# ---------------------------------------------------------------------------------------------- phase 2
@dataclass(eq=False)
class DataNode:
    """One API of one rank."""

    op_name: str
    rank: int
    is_diff: bool
    group: int  # API group index in the rank's table
    sub_layer: int = 0
    layer: int = 0


@dataclass(eq=False)
class CommNode:
    node_id: str  # '<rank>.<api>'
    rank: int
    data: DataNode
    kind: str  # 'all_reduce', 'send', ...
    inputs: Dict[str, dict]
    layer: int = 0
    compute_ops: List[DataNode] = field(default_factory=list)
    links: Dict[str, "CommNode"] = field(default_factory=dict)
    dsts: Dict[str, "CommNode"] = field(default_factory=dict)
    srcs: Dict[str, "CommNode"] = field(default_factory=dict)
    nexts: Dict[str, "CommNode"] = field(default_factory=dict)
    prev: Optional["CommNode"] = None
    role: str = comm.LINK
    connected: bool = False

    @property
    def is_diff(self) -> bool:
        return self.data.is_diff

    def set_layer(self, layer: int) -> None:
        self.layer = layer
        self.data.layer = layer

    def add_next(self, node: "CommNode") -> None:
        self.nexts[node.node_id] = node
        node.prev = self
        node.set_layer(self.layer + 1)

    def add_link(self, node: "CommNode") -> None:
        self.links[node.node_id] = node
        node.links[self.node_id] = self
        node.set_layer(self.layer)
        self.connected = node.connected = True

    def add_dst(self, node: "CommNode") -> None:
        self.dsts[node.node_id] = node
        node.srcs[self.node_id] = self
        node.set_layer(self.layer)
        self.connected = node.connected = True

    def remove(self) -> None:
        for n in self.nexts.values():
            n.prev = None
        for n in self.dsts.values():
            n.srcs.pop(self.node_id, None)
        for n in self.srcs.values():
            n.dsts.pop(self.node_id, None)
        for n in self.links.values():
            n.links.pop(self.node_id, None)
        if self.prev is not None:
            self.prev.nexts.pop(self.node_id, None)

    def peer_ranks(self) -> set:
        """Ranks this node talks to, from its inputs (src/dst/group_src/group_dst, .group, P2POp peer)."""
        ranks = set()
        for name, m in self.inputs.items():
            if any(k in name for k in comm.RANK_ARG_NAMES):
                v = _as_int(m.get("NPU MD5") if "NPU MD5" in m else m.get("NPU max"))
                if v is not None:  # the reference drops rank 0 here (`if rank_val:`); msprobe keeps it
                    ranks.add(v)
            elif name.endswith(".group"):
                v = m.get("NPU MD5") if "NPU MD5" in m else m.get("NPU max")
                if isinstance(v, str) and v.startswith("[") and v.endswith("]"):
                    ranks.update(int(p) for p in v.strip("[]").split(",") if p.strip().lstrip("-").isdigit())
            else:
                peer = m.get("NPU P2POp peer", "None")
                if peer != "None" and _as_int(peer) is not None:
                    ranks.add(_as_int(peer))
        return ranks

    def resolve_role(self) -> str:
        for key in (comm.SRC, comm.DST):
            for name, m in self.inputs.items():
                if key in name:
                    v = m.get("NPU MD5") if "NPU MD5" in m else m.get("NPU max")
                    return key if _as_int(v) == self.rank else comm.OPPOSITE[key]
        return comm.LINK


def _as_int(v) -> Optional[int]:
    if isinstance(v, bool):
        return None
    if isinstance(v, int):
        return v
    if isinstance(v, float) and v.is_integer():
        return int(v)
    if isinstance(v, str):
        try:
            f = float(v)
        except ValueError:
            return None
        return int(f) if f.is_integer() else None
    return None


class RankView:
    """What phase 2 needs of one rank: API names, differ flags and row data on demand."""

    def __init__(self, table: OpTable, is_diff: np.ndarray, peers: Optional[Dict[str, Tuple[str, object]]] = None):
        self.table = table
        self.rank = table.rank
        self.is_diff = is_diff
        self.peers = peers or {}
        md5 = table.mode == MODE_MD5
        self._metric_cols = [("NPU MD5", table.col("NPU MD5"))] if md5 else [(c, table.col(c)) for c in NPU_STATS]
        self._stack = table.col(STACK_COL)

    def data_info(self, g: int, state: str) -> Dict[str, dict]:
        t = self.table
        s, e = int(t.starts[g]), int(t.ends[g])
        out = {}
        for i in range(s, e):
            if t.states[i] != state:
                continue
            m = {name: col[i] for name, col in self._metric_cols}
            hit = self.peers.get(t.names[i])
            m["NPU P2POp peer"] = hit[1] if hit else "None"
            out[t.names[i]] = m
        return out

    def stack_info(self, g: int):
        if self._stack is None:
            return None
        t = self.table
        for i in range(int(t.starts[g]), int(t.ends[g])):
            c = self._stack[i]
            if c is not None and c != "N/A":
                return _stack_lists([c])[0]
        return None

    def node_info(self, node: DataNode) -> dict:
        return {"op_name": node.op_name,
                "data_info": {"input": self.data_info(node.group, STATE_INPUT),
                              "output": self.data_info(node.group, STATE_OUTPUT)},
                "stack_info": self.stack_info(node.group)}


class FirstDiff:
    """Phase 2 over the ranks (ordered by rank number)."""

    def __init__(self, views: List[RankView], cfg: AnalysisConfig):
        self.views = {v.rank: v for v in sorted(views, key=lambda v: v.rank)}
        self.noise = noise_matcher(cfg)
        self.first_comm: Dict[int, int] = {}
        self.after_comm: Dict[int, List[DataNode]] = {}
        self.comm_nodes: Dict[int, Dict[str, CommNode]] = {}
        self.found: List[DataNode] = []
        self.phase = ""

    def run(self) -> List[DataNode]:
        for phase, step in (("before communication", self._before),
                            ("during communication", self._during),
                            ("after communication", self._after)):
            step()
            if self.found:
                self.phase = phase
                return self.found
        return []

    def _before(self) -> None:
        for rank, v in self.views.items():
            for g, api in enumerate(v.table.group_api):
                if self.noise(api):
                    continue
                if comm.is_communication_op(api):
                    self.first_comm[rank] = g
                    break
                if v.is_diff[g]:
                    self.found.append(DataNode(api, rank, True, g))
                    break

    def _during(self) -> None:
        for rank in self.views:
            self.comm_nodes[rank] = self._chain(rank)
        self._connect()
        self._prune()
        self._search()

    def _after(self) -> None:
        for rank in self.views:
            ops = self.after_comm.get(rank)
            if ops:
                self.found.append(ops[0])

    def _chain(self, rank: int) -> Dict[str, CommNode]:
        nodes: Dict[str, CommNode] = {}
        if rank not in self.first_comm:
            return nodes
        v = self.views[rank]
        last: Optional[CommNode] = None
        compute: List[DataNode] = []
        sub = 0
        apis = v.table.group_api
        for g in range(self.first_comm[rank], len(apis)):
            api = apis[g]
            if comm.is_communication_op(api):
                node_id = f"{rank}.{api}"
                if node_id in nodes:  # the same key twice in a row
                    continue
                data = DataNode(api, rank, bool(v.is_diff[g]), g, sub_layer=sub)
                node = CommNode(node_id, rank, data, comm.api_kind(api), v.data_info(g, STATE_INPUT),
                                compute_ops=compute)
                node.role = node.resolve_role()
                if last is not None:
                    last.add_next(node)
                nodes[node_id] = node
                last = node
                compute = []
                sub = 0
            elif not self.noise(api):
                if v.is_diff[g]:
                    compute.append(DataNode(api, rank, True, g, sub_layer=sub))
                sub += 1
        if compute:
            self.after_comm[rank] = compute
        return nodes

    def _connect(self) -> None:
        ranks = list(self.comm_nodes)
        searched = set()
        for rank in ranks[:-1]:
            searched.add(rank)
            seen = set()
            last = None
            for node in self.comm_nodes[rank].values():
                if last is not None and last.layer >= node.layer:
                    node.set_layer(last.layer + 1)
                last = node
                targets = node.peer_ranks() or set(ranks)
                want_api = f"Distributed.{comm.P2P_COUNTERPART.get(node.kind, node.kind)}"
                want_role = comm.OPPOSITE.get(node.role, comm.LINK)
                for other in ranks:  # rank order, as the reference iterates its dict
                    if other not in targets or other in searched:
                        continue
                    prefix = f"{other}.{want_api}"
                    for cid, cand in self.comm_nodes[other].items():
                        if cid in seen or not cid.startswith(prefix) or cand.role != want_role:
                            continue
                        their = cand.peer_ranks()
                        if (not their and cand.kind not in comm.DIRECTED_API) or rank in their:
                            seen.add(cid)
                            if cand.role == comm.DST:
                                node.add_dst(cand)
                            elif cand.role == comm.SRC:
                                cand.set_layer(node.layer)
                                cand.add_dst(node)
                            else:
                                node.add_link(cand)
                            break

    def _prune(self) -> None:
        for nodes in self.comm_nodes.values():
            for nid in list(nodes):
                n = nodes[nid]
                if n.is_diff or n.compute_ops:
                    continue
                n.remove()
                del nodes[nid]

    def _node(self, node_id: str) -> Optional[CommNode]:
        rank = int(node_id.split(".", 1)[0])
        return self.comm_nodes.get(rank, {}).get(node_id)

    @staticmethod
    def _related(node: Optional[CommNode]) -> set:
        if node is None:
            return set()
        return {node.node_id} | node.links.keys() | node.srcs.keys() | node.dsts.keys()

    def _members(self, node: CommNode) -> set:
        ids = self._related(node)
        queue = list(ids)
        while queue:
            more = self._related(self._node(queue.pop())) - ids
            ids |= more
            queue.extend(more)
        return ids

    def _search(self) -> None:
        queues = [sorted(nodes.values(), key=lambda x: x.layer) for nodes in self.comm_nodes.values()]
        pos = [0] * len(queues)
        seen = set()
        while any(p < len(q) for p, q in zip(pos, queues)):
            groups = []
            in_groups = set()
            for k, q in enumerate(queues):
                node = None
                while pos[k] < len(q):
                    cand = q[pos[k]]
                    pos[k] += 1
                    if cand.node_id not in seen:
                        node = cand
                        break
                if node is None:
                    continue
                if not groups or node.node_id not in in_groups:
                    members = self._members(node)
                    groups.append(members)
                    in_groups |= members
            for members in groups:
                seen |= members
                self.found.extend(self._diff_in_group([self._node(i) for i in members]))
            if self.found:
                best = min((n.layer, n.sub_layer) for n in self.found)
                self.found = [n for n in self.found if (n.layer, n.sub_layer) == best]
                return

    @staticmethod
    def _diff_in_group(group: List[Optional[CommNode]]) -> List[DataNode]:
        group = [n for n in group if n is not None]
        out: List[DataNode] = []
        for n in group:  # a differing source/link node: the compute ops before it are where it started
            if n.role in (comm.SRC, comm.LINK) and n.is_diff:
                for op in n.compute_ops:
                    op.layer = n.layer
                    out.append(op)
        for n in group:  # communication nodes whose own data differs
            if n.data.is_diff:
                n.data.layer = n.layer
                out.append(n.data)
        return out


# ---------------------------------------------------------------------------------------------- driver
@dataclass
class RankInput:
    """One rank's compare result as -da needs it."""

    report: object  # msprobe.core.compare.engine.Report
    label: Optional[str]
    target_json: str = ""
    golden_json: str = ""


def first_divergence(table: OpTable) -> dict:
    """msprobe's first divergence of one rank: the first failing row in execution order (the advisor's rule,
    :func:`msprobe.core.advisor.advisor.first_failing`), the op that produced it when it is an input, or
    ``{"none": reason}``."""
    from msprobe.core.advisor import advisor as adv

    failing = adv.failing_rows(table)
    i = adv.first_failing(table, failing)
    if i is None:
        return {"none": adv.no_failure_reason(table)}
    out = {"row": table.names[i], "report_row": i + 2, "op_name": table.apis[i], "state": str(table.states[i])}
    if comm.is_communication_op(table.apis[i]):
        out["note"] = "a communication op: its data comes from other ranks"
    elif table.states[i] == STATE_INPUT:
        j = adv.find_producer(table, i)
        note, blame = adv._producer_note(table, i, j, failing)
        if j is not None:
            out["producer"] = {"row": table.names[j], "report_row": j + 2, "op_name": table.apis[j],
                               "matched": bool(table.matched[j])}
        out["note"] = note
        if blame:
            out["suspect"] = table.apis[j]
    out.setdefault("suspect", table.apis[i])
    return out


def format_first(key: str, fd: dict) -> str:
    """'rank_0: <row name> (report row N)...' or 'rank_0: none (<reason>)'."""
    if "none" in fd:
        return f"  {key}: none ({fd['none']})"
    text = f"  {key}: {fd['row']} (report row {fd['report_row']})"
    p = fd.get("producer")
    if p is not None:
        if not p["matched"]:
            text += f", produced by {p['row']} (report row {p['report_row']}), which only the target has"
        elif fd.get("suspect") == p["op_name"]:
            text += f", produced by {p['row']} (report row {p['report_row']}), whose output already differs"
        else:
            text += f", produced by {p['row']} (report row {p['report_row']})"
    elif fd.get("note"):
        text += f": {fd['note']}"
    return text


@dataclass
class AnalysisResult:
    per_rank_files: List[str]
    analyze_file: Optional[str]
    first_diff: Dict[str, List[str]]  # rank_<n> -> op names (reference rule)
    phase: str
    suspects: Dict[str, List[dict]]
    first: Dict[str, dict] = field(default_factory=dict)  # rank_<n> -> msprobe's first divergence

    def summary_lines(self, top: int) -> List[str]:
        out = ["first divergence (first failing row in execution order):"]
        for rk, fd in self.first.items():
            out.append(format_first(rk, fd))
        if self.first_diff:
            ref = "; ".join(f"{rk}: {', '.join(names)}" for rk, names in self.first_diff.items())
            out.append(f"  reference rule (first API above 50% relative error in dump order, {self.phase}): {ref}")
        else:
            out.append("  reference rule (first API above 50% relative error in dump order): none")
        if any(self.suspects.values()):
            out.append("suspects by local error growth (output error / input error):")
            for rk, items in self.suspects.items():
                for k, s in enumerate(items[:top], 1):
                    out.append(f"  {rk} {k}. {format_growth(s)}")
        else:
            out.append("suspects by local error growth: none (no API's output error exceeds its input error and dtype tolerance)")
        if self.analyze_file:
            out.append(f"  diff analysis: {self.analyze_file}")
        return out


def p2p_peers(dump_json: str) -> Dict[str, Tuple[str, object]]:
    """Row name -> (P2POp op, peer) for the P2POp arguments of a dump (empty when it has none)."""
    if not dump_json or not os.path.isfile(dump_json):
        return {}
    with open(dump_json, "rb") as fh:
        raw = fh.read()
    if b"torch.distributed.P2POp" not in raw:
        return {}
    from msprobe.core.fileio import load_json

    data = load_json(dump_json, "dump.json")
    out: Dict[str, Tuple[str, object]] = {}

    def walk(v, name: str, depth: int) -> None:
        if depth > 64:
            return
        if isinstance(v, dict):
            if v.get("class_type") == "torch.distributed.P2POp":
                hit = (str(v.get("op")), v.get("peer"))
                out[name] = hit
                out[name + ".tensor"] = hit
                return
            for k, x in v.items():
                walk(x, f"{name}.{k}", depth + 1)
        elif isinstance(v, list):
            for i, x in enumerate(v):
                walk(x, f"{name}.{i}", depth + 1)

    for api, entry in (data.get("data") or {}).items():
        if not isinstance(entry, dict) or not comm.is_communication_op(api):
            continue
        for sec, infix in (("input_args", "input"), ("input_kwargs", "input"), ("input", "input"), ("output", "output")):
            if sec in entry:
                val = entry[sec]
                if sec == "input_kwargs" and isinstance(val, dict):
                    for k, x in val.items():
                        walk(x, f"{api}.{infix}.{k}", 0)
                else:
                    walk(val, f"{api}.{infix}", 0)
    return out


def check_rank_labels(labels: Sequence[Optional[str]]) -> None:
    """-da needs one rank number per rank dir ('rank' and 'rank0' would both be rank 0)."""
    seen: Dict[int, str] = {}
    for label in labels:
        rank = rank_of(label)
        if rank in seen:
            raise MsprobeError(
                f"-da: rank directories {seen[rank]} and {label} both map to rank {rank}; "
                f"first-divergence analysis needs one directory per rank number (rank0, rank1, ...)")
        seen[rank] = label or "(files)"


def analyze(ranks: List[RankInput], cfg: AnalysisConfig, out_dir: str, ts: Optional[str] = None) -> AnalysisResult:
    """Run both phases and write the files; returns what was found."""
    if not ranks:
        raise MsprobeError("-da: no compare result to analyse")
    ts = ts or time.strftime("%Y%m%d%H%M%S")
    check_rank_labels([r.label for r in ranks])
    tables: List[Tuple[OpTable, RankInput]] = [(OpTable(r.report, rank_of(r.label), r.label), r) for r in ranks]
    modes = {t.mode for t, _ in tables}
    if len(modes) > 1:
        log.warning("-da: the ranks were dumped in different modes (%s); each rank is checked by its own mode", ", ".join(sorted(modes)))
    tables.sort(key=lambda x: x[0].rank)
    files, views, suspects = [], [], {}
    ours: Dict[str, dict] = {}
    for table, r in tables:
        is_diff = api_is_diff(table, cfg)
        peers = p2p_peers(r.target_json)
        gpeers = p2p_peers(r.golden_json)
        name = f"compare_result_rank{table.rank if table.label and _RANK_LABEL.match(table.label) else ''}_{ts}.json"
        files.append(write_phase1(os.path.join(out_dir, name), table, is_diff, peers, gpeers))
        views.append(RankView(table, is_diff, peers))
        suspects[f"rank_{table.rank}"] = rank_suspects(table, cfg, cfg.top)
        ours[f"rank_{table.rank}"] = first_divergence(table)
    finder = FirstDiff(views, cfg)
    found = finder.run()
    content: Dict[str, object] = {}
    first: Dict[str, List[str]] = {}
    for node in found:
        key = f"rank_{node.rank}"
        content.setdefault(key, []).append(finder.views[node.rank].node_info(node))
        first.setdefault(key, []).append(node.op_name)
    analyze_file = None
    if found or any(suspects.values()) or any("none" not in fd for fd in ours.values()):
        content[SUSPECTS_KEY] = {
            "ranking": "local error growth: (output error + floor) / (input error + floor), floor = dtype tolerance",
            "noise_ops": list(cfg.noise_ops),
            "ranks": suspects,
            "first_divergence": ours,
        }
        analyze_file = write_bytes(os.path.join(out_dir, f"diff_analyze_{time.time_ns()}.json"),
                                   json.dumps(content, indent=2, ensure_ascii=False).encode("utf-8"))
    else:
        log.info("Cannot find any diff node, no need to generate analyze file.")
    return AnalysisResult(files, analyze_file, first, finder.phase, suspects, ours)
