"""Communication-op matching across ranks (graph_and_tools.md §A.10).

Given the graphs of all ranks of one step on one side, every ``Distributed.*`` node that can be paired
with its counterpart on another rank gets ``node.distributed`` (written as ``matched_distributed``)::

    {"communications_type": "send" | "receive" | "send_receive",
     "nodes_info": {other_rank: [str(index), other_node_id], ...}}

where ``index`` is the other node's ``overflow_level`` (overflow check on) or ``precision_index``
(otherwise), ``"Nan"`` when it has none.

How nodes are paired:

* every communication node gets a per-rank key: point-to-point ops ``<api>rank<peer>_<n>``, the rest
  ``<group_id><api>_<n>``, ``n`` counting calls with the same prefix on that rank (1-based);
* point-to-point (send/recv/isend/irecv): the peer is read from the ``dst``/``src`` argument; the
  partner is the node keyed ``<partner api>rank<own rank>_<n>`` on the peer rank, whose own ``src``/``dst``
  must name this rank, and both ``output.0`` records must agree on dtype, shape, Max, Min, Mean, Norm;
* collectives: broadcast/scatter/gather/reduce are paired only from their source rank (the rank named
  by the rank argument - for broadcast and reduce the second positional argument), which also marks
  every partner with the opposite direction; every other collective (all_reduce, all_gather, ...) is a
  ``send_receive`` that marks only itself.  Partners are the nodes with the same key on the other ranks
  of the ``group`` keyword argument's ``group_ranks`` that carry the same ``group_id``; without a
  ``group=`` keyword nothing is paired;
* ``batch_isend_irecv``: every P2POp of ``output[0]`` (its ``op``, ``peer`` and ``group_id``, kept on the
  flattened output records) gets the key ``<op>_rank<peer>_<group_id>_<n>``; the node is marked with
  one entry per op that finds its counterpart (a list when it holds more than one op).
"""

from __future__ import annotations

from typing import Dict, List, Optional, Tuple

SEND = "send"
RECEIVE = "receive"
SEND_RECEIVE = "send_receive"

PREFIX = "Distributed"
BATCH_P2P = "batch_isend_irecv"
NAN = "Nan"

# api -> (partner api, rank argument, own direction)
P2P = {
    "send": ("recv", "dst", SEND),
    "isend": ("irecv", "dst", SEND),
    "recv": ("send", "src", RECEIVE),
    "irecv": ("isend", "src", RECEIVE),
}
# one-to-many / many-to-one collectives: api -> (rank argument, direction on the source rank)
ROOTED = {
    "broadcast": ("1", SEND),
    "scatter": ("src", SEND),
    "gather": ("dst", RECEIVE),
    "reduce": ("1", RECEIVE),
}
_OPPOSITE = {SEND: RECEIVE, RECEIVE: SEND}
_OUTPUT_KEYS = ("dtype", "shape", "Max", "Min", "Mean", "Norm")


def _api_name(node_id: str) -> Optional[str]:
    parts = node_id.split(".", 2)
    return parts[1] if len(parts) > 1 else None


def _arg_value(node, arg: str):
    """``value`` of the item ``<id>.input.<arg>`` (a keyword name or a positional index), or None."""
    item = node.input_data.get(f"{node.id}.input.{arg}")
    if isinstance(item, dict):
        return item.get("value")
    return None


def _group(node) -> Tuple[Optional[list], Optional[str]]:
    """(group_ranks, group_id) of the ``group`` keyword item; (None, None) unless both are present."""
    item = node.input_data.get(f"{node.id}.input.group")
    if not isinstance(item, dict) or not item:
        return None, None
    ranks = item.get("group_ranks")
    gid = item.get("group_id")
    if not ranks or not gid:
        return None, None
    return ranks, gid


def _batch_ops(node) -> List[Tuple[object, object, object]]:
    """(op, peer, group_id) of each P2POp record of a batch_isend_irecv node, in output order."""
    ops = []
    for item in node.output_data.values():
        if isinstance(item, dict) and "op" in item:
            ops.append((item.get("op"), item.get("peer"), item.get("group_id")))
    return ops


def _same_output(a, b) -> bool:
    a = a if isinstance(a, dict) else {}
    b = b if isinstance(b, dict) else {}
    return all(a.get(k) == b.get(k) for k in _OUTPUT_KEYS)


class _Analyzer:
    def __init__(self, graphs: dict, use_overflow: bool):
        self.graphs = graphs
        self.index_key = "overflow_level" if use_overflow else "precision_index"
        # rank -> {key: node}, rank -> {node id: key (or list of keys for batch nodes)}
        self.by_key: Dict[object, Dict[str, object]] = {}
        self.key_of: Dict[object, Dict[str, object]] = {}
        # rank -> communication nodes in graph order
        self.comm: Dict[object, list] = {}

    # ---- keys -------------------------------------------------------------------------------------
    def make_keys(self) -> None:
        for rank, graph in self.graphs.items():
            by_key: Dict[str, object] = {}
            key_of: Dict[str, object] = {}
            counts: Dict[str, int] = {}
            batch_counts: Dict[str, int] = {}
            comm = []
            for node in graph.nodes.values():
                node_id = node.id
                if not node_id.startswith(PREFIX):
                    continue
                api = _api_name(node_id)
                if api is None:
                    continue
                comm.append((node, api))
                if api == BATCH_P2P:
                    keys = []
                    for op, peer, gid in _batch_ops(node):
                        if op is None or peer is None:
                            continue
                        base = f"{op}_rank{peer}_{gid if gid is not None else ''}"
                        batch_counts[base] = batch_counts.get(base, 0) + 1
                        key = f"{base}_{batch_counts[base]}"
                        keys.append(key)
                        by_key[key] = node
                    if keys:
                        key_of[node_id] = keys
                    continue
                if api in P2P:
                    peer = _arg_value(node, P2P[api][1])
                    if peer is None:
                        continue
                    base = f"{api}rank{peer}"
                else:
                    _, gid = _group(node)
                    if not gid:
                        continue
                    base = f"{gid}{api}"
                counts[base] = counts.get(base, 0) + 1
                key = f"{base}_{counts[base]}"
                by_key[key] = node
                key_of[node_id] = key
            self.by_key[rank] = by_key
            self.key_of[rank] = key_of
            self.comm[rank] = comm

    def _node_at(self, rank, key) -> Optional[object]:
        try:
            if self.graphs.get(rank) is None:
                return None
            return self.by_key.get(rank, {}).get(key)
        except TypeError:  # an unhashable rank value read from the dump
            return None

    def _index(self, node) -> str:
        return str(node.data.get(self.index_key, NAN))

    # ---- matching ---------------------------------------------------------------------------------
    def match(self) -> None:
        for rank in self.graphs:
            for node, api in self.comm[rank]:
                if node.distributed:
                    continue
                if api == BATCH_P2P:
                    self._batch(node, rank)
                elif api in P2P:
                    self._p2p(node, rank, api)
                else:
                    self._collective(node, rank, api)

    def _p2p(self, node, rank, api: str) -> None:
        partner_api, arg, direction = P2P[api]
        peer = _arg_value(node, arg)
        key = self.key_of[rank].get(node.id)
        if peer is None or key is None:
            return
        count = key.rsplit("_", 1)[1]
        other = self._node_at(peer, f"{partner_api}rank{rank}_{count}")
        if other is None:
            return
        partner_arg, partner_direction = P2P[partner_api][1], P2P[partner_api][2]
        if _arg_value(other, partner_arg) != rank:
            return
        if not _same_output(node.output_data.get(f"{node.id}.output.0"),
                            other.output_data.get(f"{other.id}.output.0")):
            return
        node.distributed = {"communications_type": direction,
                            "nodes_info": {peer: [self._index(other), other.id]}}
        other.distributed = {"communications_type": partner_direction,
                             "nodes_info": {rank: [self._index(node), node.id]}}

    def _collective(self, node, rank, api: str) -> None:
        direction = SEND_RECEIVE
        rooted = ROOTED.get(api)
        if rooted is not None:
            source = _arg_value(node, rooted[0])
            if source is None or str(source) != str(rank):
                return
            direction = rooted[1]
        group_ranks, gid = _group(node)
        if not group_ranks:
            return
        key = self.key_of[rank].get(node.id)
        if key is None:
            return
        nodes_info = {}
        for other_rank in group_ranks:
            if str(other_rank) == str(rank):
                continue
            other = self._node_at(other_rank, key)
            if other is None:
                continue
            _, other_gid = _group(other)
            if not other_gid or other_gid != gid:
                continue
            nodes_info[other_rank] = [self._index(other), other.id]
            if rooted is not None:
                other.distributed = {"communications_type": _OPPOSITE[direction],
                                     "nodes_info": {rank: [self._index(node), node.id]}}
        if nodes_info:
            node.distributed = {"communications_type": direction, "nodes_info": nodes_info}

    def _batch(self, node, rank) -> None:
        keys = self.key_of[rank].get(node.id)
        if not keys:
            return
        found = []
        for key in keys:
            op, peer_field = key.split("_", 2)[:2]
            conf = P2P.get(op)
            if conf is None or not peer_field.startswith("rank"):
                continue
            try:
                peer = int(peer_field[len("rank"):])
            except ValueError:
                continue
            partner_api = conf[0]
            # <op>_rank<peer>_<group>_<n>  ->  <partner op>_rank<own rank>_<group>_<n>
            rest = key[len(op) + 1 + len(peer_field):]
            other = self._node_at(peer, f"{partner_api}_rank{rank}{rest}")
            if other is None:
                continue
            found.append({"communications_type": conf[2],
                          "nodes_info": {peer: [self._index(other), other.id]}})
        if not found:
            return
        node.distributed = found if len(keys) > 1 else found[0]


def analyze_distributed(graphs: dict, use_overflow: bool) -> None:
    """Fill ``node.distributed`` on the ``Distributed.*`` nodes of ``graphs`` (rank -> Graph).

    ``use_overflow`` picks the index reported for each partner: its ``overflow_level`` when True, its
    ``precision_index`` when False.  Ranks are visited in the dict's order; a node that already carries
    ``distributed`` (for example set as the partner of an earlier node) is not matched again.  The
    caller decides when to run it (the reference runs it only for more than one rank).
    """
    analyzer = _Analyzer(graphs, use_overflow)
    analyzer.make_keys()
    analyzer.match()
