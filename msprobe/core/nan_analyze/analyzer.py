"""The search for the first anomalous node of a multi-rank step (checks_and_monitors.md 5.3).

1. *Before communication*: per rank, the first anomalous record before its first collective / P2P op.
   Every rank that has one is reported; the search stops there.
2. *During communication*: each rank's communication ops from its first one on, each holding the anomalous
   compute records run since the rank's previous communication op.  The ops are linked across ranks into
   instances (the k-th all_reduce of a group on every member, the k-th send from a to b with the k-th recv
   on b from a, ...); an instance's *layer* is its depth in the graph that the per-rank order of the ops and
   the links make.  In an instance, a *cause* is an anomalous compute record held by an op that feeds a
   non-finite input into it (a sender, a root that contributes, any member of a symmetric collective); an
   *effect* is an op whose input is finite and output is not (the NaN arrived through it).  The earliest
   layer wins; in a layer causes win over effects, then fewer records run before, then the lower rank.
3. *After communication*: per rank, the first anomalous record after its last communication op.
4. (beyond the reference) *Kept local*: per rank, the first anomalous record between two communication ops
   whose value never reached one; only when the phases above found nothing.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

import numpy as np

from msprobe.core.errors import MsprobeError
from msprobe.core.nan_analyze.dumps import RankRecords, rank_folders, read_rank

log = logging.getLogger("msprobe")

SRC, DST, LINK = "src", "dst", "link"
PHASE_BEFORE, PHASE_DURING, PHASE_AFTER, PHASE_LOCAL = "before", "during", "after", "local"
PHASE_WORDS = {PHASE_BEFORE: "before communication", PHASE_DURING: "during communication",
               PHASE_AFTER: "after communication", PHASE_LOCAL: "between communication ops, not passed on"}

SENDERS = ("send", "isend")
RECEIVERS = ("recv", "irecv")
OBJ_SENDERS = ("send_object_list",)
OBJ_RECEIVERS = ("recv_object_list",)
ROOT_IS_SRC = ("broadcast", "scatter", "broadcast_object_list", "scatter_object_list")
ROOT_IS_DST = ("gather", "reduce", "gather_object")


@dataclass
class CommNode:
    rank: int
    index: int                 # record index in the rank's dump
    name: str
    api: str
    kind: str                  # src / dst / link
    key: Optional[tuple]       # what links it across ranks (None: cannot be linked)
    sub_layer: int             # compute records run since the rank's previous communication op
    computes: List[Tuple[int, int]] = field(default_factory=list)  # (record index, sub_layer) anomalous
    in_bad: bool = False
    out_bad: bool = False
    anomalous: bool = False
    instance: int = -1

    @property
    def node_id(self) -> str:
        return f"{self.rank}.{self.name}"

    def contributes(self) -> bool:
        """Whether its input goes into the instance's result (not a pure receiver)."""
        return self.kind != DST or self.api in ROOT_IS_DST


@dataclass
class Anomaly:
    rank: int
    index: int
    op_name: str
    phase: str
    layer: int = 0
    sub_layer: int = 0
    via: Optional[str] = None      # the communication op that carried it on (phase during, a cause)
    peers: List[int] = field(default_factory=list)   # the ranks that op reached


@dataclass
class Result:
    step_dir: str
    ranks: Dict[int, RankRecords]
    anomalies: List[Anomaly]
    phase: Optional[str]
    nonfinite_records: int          # records holding a non-finite tensor, all ranks
    first_inputs: Dict[int, Tuple[str, List[str]]]   # per rank: first record with a non-finite input, its inputs


def read_step(step_dir: str, progress=None, jobs: int = 1) -> Dict[int, RankRecords]:
    """Read every rank of a step folder, ``jobs`` ranks at a time in worker processes (0: one per core;
    msprobe.core.executor); ``progress``: a :class:`msprobe.core.progress.Job`."""
    from msprobe.core.executor import run_tasks
    from msprobe.core.resources import cap_jobs

    paths = rank_folders(step_dir)
    workers = cap_jobs(jobs, len(paths), "ranks") if len(paths) > 1 else 1
    state = {"done": 0, "records": 0}

    def on_result(_i, rec):
        state["done"] += 1
        state["records"] += len(rec)
        if progress is not None:
            progress("read", state["done"], len(paths), "dumps", f"{state['records']:,} records")

    if progress is not None:
        progress("read", 0, len(paths), "dumps")
    results = run_tasks(lambda p, _emit: read_rank(p), paths, workers, on_result=on_result,
                        name="msprobe-nan_analyze")
    ranks: Dict[int, RankRecords] = {p.rank: rec for p, rec in zip(paths, results)}
    records = state["records"]
    for r, rec in ranks.items():
        if not len(rec):
            log.warning("Rank %d has no dump data!", r)
    if not records:
        raise MsprobeError(f"no rank under {step_dir} holds any dump record; nothing to analyse (was the dump "
                           f"started and stopped around the step?)")
    return ranks


def analyze_step(step_dir: str, progress=None, jobs: int = 1) -> Result:
    """Read a step folder and find the first anomalous node(s)."""
    return analyze(step_dir, read_step(step_dir, progress, jobs))


def analyze(step_dir: str, ranks: Dict[int, RankRecords]) -> Result:
    first_comm = {r: (int(rec.comm.argmax()) if rec.comm.any() else None) for r, rec in ranks.items()}
    nonfinite = sum(int((rec.in_bad | rec.out_bad).sum()) for rec in ranks.values() if len(rec))
    first_inputs = {r: _first_bad_input(rec) for r, rec in ranks.items()}
    first_inputs = {r: v for r, v in first_inputs.items() if v is not None}

    def done(found, phase):
        return Result(step_dir, ranks, found, phase if found else None, nonfinite, first_inputs)

    log.info("Start searching anomaly node before communication.")
    found = _before(ranks, first_comm)
    if found:
        return done(found, PHASE_BEFORE)
    log.info("Start searching anomaly node during communication.")
    nodes, after, local = _comm_nodes(ranks)
    found = _during(ranks, nodes)
    if found:
        return done(found, PHASE_DURING)
    log.info("Start searching anomaly node after communication.")
    found = [Anomaly(r, i, ranks[r].names[i], PHASE_AFTER, sub_layer=s) for r, (i, s) in sorted(after.items())]
    if found:
        return done(found, PHASE_AFTER)
    if local:
        log.info("Start searching anomaly node kept between communication ops.")
        found = [Anomaly(r, i, ranks[r].names[i], PHASE_LOCAL, sub_layer=s) for r, (i, s) in sorted(local.items())]
        return done(found, PHASE_LOCAL)
    log.info("Cannot find any anomaly node, no need to generate analyze file.")
    return done([], None)


def _first_bad_input(rec: RankRecords) -> Optional[Tuple[str, List[str]]]:
    if not len(rec) or not rec.in_bad.any():
        return None
    i = int(rec.in_bad.argmax())
    return rec.names[i], [leaf for leaf, state in rec.leaves(i) if state in ("input", "parameters")]


# ------------------------------------------------------------------------------------------ phase 1
def _before(ranks: Dict[int, RankRecords], first_comm: Dict[int, Optional[int]]) -> List[Anomaly]:
    found = []
    for r, rec in ranks.items():
        stop = first_comm[r] if first_comm[r] is not None else len(rec)
        cand = np.flatnonzero(rec.anomalous_mask[:stop])
        if len(cand):
            i = int(cand[0])
            found.append(Anomaly(r, i, rec.names[i], PHASE_BEFORE))
    return found


# ------------------------------------------------------------------------------------------ phase 2
def _comm_nodes(ranks: Dict[int, RankRecords]):
    """Per rank its communication nodes; per rank (first anomalous record after the last one, sub_layer);
    per rank the first anomalous record between two ops that is not held by an op with a bad input.

    A record's sub_layer is the number of compute records (not communication, not ignored) run since the
    rank's previous communication op; numpy over the records, Python only per communication op."""
    nodes: Dict[int, List[CommNode]] = {}
    after: Dict[int, Tuple[int, int]] = {}
    local: Dict[int, Tuple[int, int]] = {}
    world = sorted(ranks)
    for r, rec in ranks.items():
        chain: List[CommNode] = []
        nodes[r] = chain
        comm_at = np.flatnonzero(rec.comm)
        if not len(comm_at):
            continue
        compute = ~rec.comm & ~rec.ignored
        before = np.cumsum(compute) - compute            # compute records strictly before each record
        subs = np.r_[0, np.diff(before[comm_at])]
        for k, i in enumerate(comm_at.tolist()):
            chain.append(_node(rec, i, int(subs[k]), world))
        bad = np.flatnonzero(rec.anomalous_mask & compute)
        bad = bad[bad > comm_at[0]]
        held = np.searchsorted(comm_at, bad)            # the communication op after each (len: none)
        bad_sub = before[bad] - before[comm_at[held - 1]]
        # an anomalous record is held by the first op from the one after it that takes a non-finite input:
        # its value may pass through more compute and through clean communication ops first (FSDP2 all-gathers
        # the next layer's parameters between the op that makes a NaN and the reduce-scatter of the gradients
        # that carries it); held by the op right after it only, it was no cause, and the effect it had on
        # another rank was named instead
        carrier = len(chain)
        takes_bad = [0] * (len(chain) + 1)
        takes_bad[len(chain)] = len(chain)
        for k in range(len(chain) - 1, -1, -1):
            if chain[k].in_bad and chain[k].contributes():
                carrier = k
            takes_bad[k] = carrier
        for i, k, sub in zip(bad.tolist(), held.tolist(), bad_sub.tolist()):
            if k < len(chain):
                j = takes_bad[k]
                chain[j if j < len(chain) else k].computes.append((i, int(sub)))
            elif r not in after:
                after[r] = (i, int(sub))
        for node in chain:
            if node.computes and not (node.in_bad and node.contributes()) and r not in local:
                local[r] = node.computes[0]
    return nodes, after, local


def _node(rec: RankRecords, i: int, sub: int, world: List[int]) -> CommNode:
    name = rec.names[i]
    api = name.split(".")[1]
    r = rec.rank
    args = rec.comm_args(i)
    group = args.get("group") or None

    def global_rank(key_global, key_group):
        if key_global in args:
            return args[key_global]
        if key_group in args and group and 0 <= args[key_group] < len(group):
            return group[args[key_group]]
        return None

    src = global_rank("src", "group_src")
    dst = global_rank("dst", "group_dst")
    positional = args["args"][0] if args["args"] else None
    members = tuple(sorted(group)) if group else tuple(world)
    kind, key = LINK, None
    if api in SENDERS + OBJ_SENDERS:
        peer = dst if dst is not None else positional
        kind = SRC
        key = ("p2p", api in OBJ_SENDERS, r, peer) if peer is not None else None
    elif api in RECEIVERS + OBJ_RECEIVERS:
        peer = src if src is not None else positional
        kind = DST
        key = ("p2p", api in OBJ_RECEIVERS, peer, r) if peer is not None else None
    else:
        root = None
        if api in ROOT_IS_SRC:
            root = src if src is not None else positional
            if root is not None:
                kind = SRC if root == r else DST
        elif api in ROOT_IS_DST:
            root = dst if dst is not None else positional
            if root is not None:
                kind = DST if root == r else SRC
        key = ("coll", api, members, root)
    node = CommNode(r, i, name, api, kind, key, sub)
    node.in_bad = bool(rec.in_bad[i])
    node.out_bad = bool(rec.out_bad[i])
    node.anomalous = rec.anomalous(i)
    return node


def _link(nodes: Dict[int, List[CommNode]]) -> List[List[CommNode]]:
    """Group the nodes of all ranks into instances (lists of linked nodes); every node gets its instance."""
    by_key: Dict[tuple, List[CommNode]] = defaultdict(list)   # (key, occurrence) -> nodes
    for r, chain in nodes.items():
        seen: Dict[tuple, int] = defaultdict(int)
        for node in chain:
            if node.key is None:
                continue
            k = node.key   # the k-th op of a group on every member; the k-th message from a to b on both sides
            by_key[(k, seen[k])].append(node)
            seen[k] += 1
    instances: List[List[CommNode]] = []
    for (k, _), members in by_key.items():
        if k[0] == "p2p" and len(members) > 2:   # cannot happen with one sender and one receiver per key
            members = members[:2]
        for node in members:
            node.instance = len(instances)
        instances.append(members)
    for chain in nodes.values():
        for node in chain:
            if node.instance < 0:
                node.instance = len(instances)
                instances.append([node])
    for inst in instances:
        if len(inst) == 1:
            node = inst[0]
            expected = 2 if node.key and node.key[0] == "p2p" else len(node.key[2]) if node.key else 2
            if expected > 1:
                log.info('Cannot find connected communication node for "%s".', node.node_id)
    return instances


def _layers(nodes: Dict[int, List[CommNode]], instances: List[List[CommNode]]) -> List[int]:
    """Depth of every instance in the graph made by each rank's op order (longest path from a first op)."""
    n = len(instances)
    succ: List[set] = [set() for _ in range(n)]
    indeg = [0] * n
    for chain in nodes.values():
        for a, b in zip(chain, chain[1:]):
            if a.instance != b.instance and b.instance not in succ[a.instance]:
                succ[a.instance].add(b.instance)
                indeg[b.instance] += 1
    layer = [0] * n
    ready = [i for i in range(n) if indeg[i] == 0]
    placed = 0
    while ready:
        i = ready.pop()
        placed += 1
        for j in succ[i]:
            layer[j] = max(layer[j], layer[i] + 1)
            indeg[j] -= 1
            if indeg[j] == 0:
                ready.append(j)
    if placed < n:   # links that contradict an op order (ops matched wrongly): fall back to positions
        pos = {}
        for chain in nodes.values():
            for k, node in enumerate(chain):
                pos[node.instance] = max(pos.get(node.instance, 0), k)
        for i in range(n):
            if indeg[i] > 0:
                layer[i] = max(layer[i], pos.get(i, 0))
    return layer


def _during(ranks: Dict[int, RankRecords], nodes: Dict[int, List[CommNode]]) -> List[Anomaly]:
    if not any(nodes.values()):
        return []
    instances = _link(nodes)
    layer = _layers(nodes, instances)
    best = None
    for k, inst in enumerate(instances):
        peers = sorted({n.rank for n in inst})
        for node in inst:
            if node.in_bad and node.contributes():
                for i, sub in node.computes:
                    cand = ((layer[k], 0, sub, node.rank, i),
                            Anomaly(node.rank, i, ranks[node.rank].names[i], PHASE_DURING, layer[k], sub,
                                    via=node.name, peers=[p for p in peers if p != node.rank]))
                    best = cand if best is None or cand[0] < best[0] else best
            if node.anomalous:
                cand = ((layer[k], 1, node.sub_layer, node.rank, node.index),
                        Anomaly(node.rank, node.index, node.name, PHASE_DURING, layer[k], node.sub_layer))
                best = cand if best is None or cand[0] < best[0] else best
    return [best[1]] if best else []
