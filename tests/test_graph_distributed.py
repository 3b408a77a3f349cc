"""Communication-op matching across ranks (graph_and_tools.md §A.10).

Nodes are built by hand with items shaped like the builder's (item names ``<id>.input.<i|kwarg>``,
``<id>.output.0``).  Every expected ``distributed`` value below was cross-checked against the reference
8.3.3 ``DistributedAnalyzer(graphs, overflow_check).distributed_match()`` on the same items.
"""

import json

from msprobe.core.graph.distributed import analyze_distributed
from msprobe.core.graph.model import Graph, Node, node_type_of

AR = "Distributed.all_reduce.0.forward"
BC = "Distributed.broadcast.0.forward"


def tensor(mx=1.0, **kw):
    item = {"type": "torch.Tensor", "dtype": "torch.float32", "shape": [2, 2], "Max": mx, "Min": 0.0, "Mean": 0.5,
            "Norm": 2.0, "requires_grad": "False", "data_name": "-1"}
    item.update(kw)
    return item


def none_item():
    """What the builder makes of a ``null`` output (send/recv/broadcast return None)."""
    return {"type": None, "dtype": None, "shape": None, "Max": None, "Min": None, "Mean": None, "Norm": None,
            "value": None, "data_name": "-1"}


def value(v):
    return {"type": "int", "value": v, "dtype": "<class 'int'>", "shape": "[]", "Max": v, "Min": v, "Mean": v,
            "Norm": v, "data_name": "-1"}


def group(ranks, gid="g1"):
    return {"type": "torch.ProcessGroup", "group_ranks": list(ranks), "group_id": gid, "data_name": "-1"}


def p2pop(op, peer, gid="gg"):
    item = tensor()
    item.update({"class_type": "torch.distributed.P2POp", "op": op, "peer": peer, "tag": 0, "group_id": gid})
    return item


def node(node_id, args=(), kwargs=None, outs=None, data=None):
    n = Node(node_id, node_type_of(node_id))
    for i, a in enumerate(args):
        n.input_data[f"{node_id}.input.{i}"] = a
    for k, a in (kwargs or {}).items():
        n.input_data[f"{node_id}.input.{k}"] = a
    for i, o in enumerate([none_item()] if outs is None else outs):
        n.output_data[f"{node_id}.output.{i}"] = o
    n.data.update(data or {})
    return n


def graphs_of(per_rank):
    graphs = {}
    for rank, nodes in per_rank.items():
        g = Graph()
        g.add(Node("Module.m.M.forward.0", 0))  # non-communication nodes are left alone
        for n in nodes:
            g.add(n)
        graphs[rank] = g
    return graphs


def result(graphs):
    return {(rank, n.id): n.distributed for rank, g in graphs.items() for n in g.nodes.values() if n.distributed}


def test_all_reduce_with_group_kwarg():
    graphs = graphs_of({
        0: [node(AR, [tensor()], {"group": group([0, 1])}, [tensor()], {"precision_index": 0.25})],
        1: [node(AR, [tensor()], {"group": group([0, 1])}, [tensor()], {"precision_index": 1})],
    })
    analyze_distributed(graphs, False)
    assert result(graphs) == {
        (0, AR): {"communications_type": "send_receive", "nodes_info": {1: ["1", AR]}},
        (1, AR): {"communications_type": "send_receive", "nodes_info": {0: ["0.25", AR]}},
    }
    # rank keys are the group_ranks values; JSON makes them strings, as in the reference .vis
    assert json.loads(json.dumps(graphs[0].nodes[AR].distributed)) == {
        "communications_type": "send_receive", "nodes_info": {"1": ["1", AR]}}


def test_index_uses_overflow_level_when_asked():
    graphs = graphs_of({
        0: [node(AR, [tensor()], {"group": group([0, 1])}, data={"precision_index": 0.25, "overflow_level": "high"})],
        1: [node(AR, [tensor()], {"group": group([0, 1])}, data={"precision_index": 1})],
    })
    analyze_distributed(graphs, True)
    assert result(graphs) == {
        (0, AR): {"communications_type": "send_receive", "nodes_info": {1: ["Nan", AR]}},
        (1, AR): {"communications_type": "send_receive", "nodes_info": {0: ["high", AR]}},
    }


def test_no_group_kwarg_no_match():
    graphs = graphs_of({0: [node(AR, [tensor()])], 1: [node(AR, [tensor()])]})
    analyze_distributed(graphs, False)
    assert result(graphs) == {}


def test_different_group_ids_no_match():
    graphs = graphs_of({
        0: [node(AR, [tensor()], {"group": group([0, 1], "a")})],
        1: [node(AR, [tensor()], {"group": group([0, 1], "b")})],
    })
    analyze_distributed(graphs, False)
    assert result(graphs) == {}


def test_broadcast_positional_src():
    graphs = graphs_of({
        0: [node(BC, [tensor(), value(0)], {"group": group([0, 1])})],
        1: [node(BC, [tensor(), value(0)], {"group": group([0, 1])}, data={"overflow_level": "medium"})],
    })
    analyze_distributed(graphs, False)
    assert result(graphs) == {
        (0, BC): {"communications_type": "send", "nodes_info": {1: ["Nan", BC]}},
        (1, BC): {"communications_type": "receive", "nodes_info": {0: ["Nan", BC]}},
    }


def test_broadcast_from_rank1_and_reduce():
    graphs = graphs_of({
        0: [node(BC, [tensor(), value(1)], {"group": group([0, 1])}),
            node("Distributed.reduce.0.forward", [tensor(), value(1)], {"group": group([0, 1])})],
        1: [node(BC, [tensor(), value(1)], {"group": group([0, 1])}),
            node("Distributed.reduce.0.forward", [tensor(), value(1)], {"group": group([0, 1])},
                 data={"precision_index": 0})],
    })
    analyze_distributed(graphs, False)
    red = "Distributed.reduce.0.forward"
    assert result(graphs) == {
        (0, BC): {"communications_type": "receive", "nodes_info": {1: ["Nan", BC]}},
        (1, BC): {"communications_type": "send", "nodes_info": {0: ["Nan", BC]}},
        # reduce's destination (rank 1) receives; the others send to it
        (0, red): {"communications_type": "send", "nodes_info": {1: ["0", red]}},
        (1, red): {"communications_type": "receive", "nodes_info": {0: ["Nan", red]}},
    }


def test_broadcast_keyword_src_not_matched():
    graphs = graphs_of({
        0: [node(BC, [tensor()], {"src": value(0), "group": group([0, 1])})],
        1: [node(BC, [tensor()], {"src": value(0), "group": group([0, 1])})],
    })
    analyze_distributed(graphs, False)
    assert result(graphs) == {}


def test_gather_three_ranks():
    ga = "Distributed.gather.0.forward"
    graphs = graphs_of({r: [node(ga, [tensor()], {"dst": value(0), "group": group([0, 1, 2])})] for r in (0, 1, 2)})
    analyze_distributed(graphs, False)
    assert result(graphs) == {
        (0, ga): {"communications_type": "receive", "nodes_info": {1: ["Nan", ga], 2: ["Nan", ga]}},
        (1, ga): {"communications_type": "send", "nodes_info": {0: ["Nan", ga]}},
        (2, ga): {"communications_type": "send", "nodes_info": {0: ["Nan", ga]}},
    }


def test_send_recv_matched():
    send, recv = "Distributed.send.0.forward", "Distributed.recv.0.forward"
    graphs = graphs_of({
        0: [node(send, [tensor()], {"dst": value(1)})],
        1: [node(recv, [tensor()], {"src": value(0)}, data={"precision_index": 0})],
    })
    analyze_distributed(graphs, False)
    assert result(graphs) == {
        (0, send): {"communications_type": "send", "nodes_info": {1: ["0", recv]}},
        (1, recv): {"communications_type": "receive", "nodes_info": {0: ["Nan", send]}},
    }


def test_isend_irecv_equal_outputs_matched():
    isend, irecv = "Distributed.isend.0.forward", "Distributed.irecv.0.forward"
    graphs = graphs_of({
        0: [node(isend, [tensor()], {"dst": value(1)}, [tensor(3.0)])],
        1: [node(irecv, [tensor()], {"src": value(0)}, [tensor(3.0)], {"overflow_level": "critical"})],
    })
    analyze_distributed(graphs, True)
    assert result(graphs) == {
        (0, isend): {"communications_type": "send", "nodes_info": {1: ["critical", irecv]}},
        (1, irecv): {"communications_type": "receive", "nodes_info": {0: ["Nan", isend]}},
    }


def test_send_recv_different_outputs_not_matched():
    send, recv = "Distributed.send.0.forward", "Distributed.recv.0.forward"
    for field, a, b in (("Max", 3.0, 2.0), ("Norm", 2.0, 2.5), ("dtype", "torch.float32", "torch.float16"),
                        ("shape", [2, 2], [4])):
        graphs = graphs_of({
            0: [node(send, [tensor()], {"dst": value(1)}, [tensor(**{field: a})])],
            1: [node(recv, [tensor()], {"src": value(0)}, [tensor(**{field: b})])],
        })
        analyze_distributed(graphs, False)
        assert result(graphs) == {}, field


def test_recv_from_another_rank_not_matched():
    send, recv = "Distributed.send.0.forward", "Distributed.recv.0.forward"
    graphs = graphs_of({
        0: [node(send, [tensor()], {"dst": value(1)})],
        1: [node(recv, [tensor()], {"src": value(2)})],
        2: [],
    })
    analyze_distributed(graphs, False)
    assert result(graphs) == {}


def test_running_counts_pair_calls_in_order():
    s0, s1 = "Distributed.send.0.forward", "Distributed.send.1.forward"
    r0, r1 = "Distributed.recv.0.forward", "Distributed.recv.1.forward"
    a0, a1 = AR, "Distributed.all_reduce.1.forward"
    g = {"group": group([0, 1])}
    graphs = graphs_of({
        0: [node(s0, [tensor()], {"dst": value(1)}), node(a0, [tensor()], g),
            node(s1, [tensor()], {"dst": value(1)}), node(a1, [tensor()], g)],
        1: [node(a0, [tensor()], g), node(r0, [tensor()], {"src": value(0)}),
            node(a1, [tensor()], g), node(r1, [tensor()], {"src": value(0)})],
    })
    analyze_distributed(graphs, False)
    assert result(graphs) == {
        (0, s0): {"communications_type": "send", "nodes_info": {1: ["Nan", r0]}},
        (0, a0): {"communications_type": "send_receive", "nodes_info": {1: ["Nan", a0]}},
        (0, s1): {"communications_type": "send", "nodes_info": {1: ["Nan", r1]}},
        (0, a1): {"communications_type": "send_receive", "nodes_info": {1: ["Nan", a1]}},
        (1, a0): {"communications_type": "send_receive", "nodes_info": {0: ["Nan", a0]}},
        (1, r0): {"communications_type": "receive", "nodes_info": {0: ["Nan", s0]}},
        (1, a1): {"communications_type": "send_receive", "nodes_info": {0: ["Nan", a1]}},
        (1, r1): {"communications_type": "receive", "nodes_info": {0: ["Nan", s1]}},
    }


def test_batch_isend_irecv():
    b = "Distributed.batch_isend_irecv.0.forward"
    graphs = graphs_of({
        0: [node(b, outs=[], data={"precision_index": 0.5})],
        1: [node(b, outs=[])],
    })
    # output: [[P2POp, P2POp]] -> items <id>.output.0.<i> carrying op / peer / group_id
    graphs[0].nodes[b].output_data = {f"{b}.output.0.0": p2pop("isend", 1), f"{b}.output.0.1": p2pop("irecv", 1)}
    graphs[1].nodes[b].output_data = {f"{b}.output.0.0": p2pop("irecv", 0), f"{b}.output.0.1": p2pop("isend", 0)}
    analyze_distributed(graphs, False)
    assert result(graphs) == {
        (0, b): [{"communications_type": "send", "nodes_info": {1: ["Nan", b]}},
                 {"communications_type": "receive", "nodes_info": {1: ["Nan", b]}}],
        (1, b): [{"communications_type": "receive", "nodes_info": {0: ["0.5", b]}},
                 {"communications_type": "send", "nodes_info": {0: ["0.5", b]}}],
    }


def test_batch_isend_irecv_single_op_is_a_dict():
    b = "Distributed.batch_isend_irecv.0.forward"
    graphs = graphs_of({0: [node(b, outs=[])], 1: [node(b, outs=[])]})
    graphs[0].nodes[b].output_data = {f"{b}.output.0.0": p2pop("isend", 1)}
    graphs[1].nodes[b].output_data = {f"{b}.output.0.0": p2pop("irecv", 0)}
    analyze_distributed(graphs, False)
    assert result(graphs) == {
        (0, b): {"communications_type": "send", "nodes_info": {1: ["Nan", b]}},
        (1, b): {"communications_type": "receive", "nodes_info": {0: ["Nan", b]}},
    }


def test_odd_ids_and_missing_ranks_are_quiet():
    graphs = graphs_of({
        0: [node("Distributed", []), node("Distributed.send.0.forward", [tensor()], {"dst": value(5)}),
            node("Distributed.send.1.forward", [tensor()], {"dst": {"type": "list", "value": [1]}})],
        1: [],
    })
    analyze_distributed(graphs, False)
    assert result(graphs) == {}


def test_p2p_without_output_records():
    """The reference fails on a missing ``output.0``; here a missing record counts as an empty one."""
    send, recv = "Distributed.send.0.forward", "Distributed.recv.0.forward"
    graphs = graphs_of({0: [node(send, [tensor()], {"dst": value(1)}, [])],
                        1: [node(recv, [tensor()], {"src": value(0)}, [])]})
    analyze_distributed(graphs, False)
    assert result(graphs) == {
        (0, send): {"communications_type": "send", "nodes_info": {1: ["Nan", recv]}},
        (1, recv): {"communications_type": "receive", "nodes_info": {0: ["Nan", send]}},
    }
    graphs = graphs_of({0: [node(send, [tensor()], {"dst": value(1)}, [])],
                        1: [node(recv, [tensor()], {"src": value(0)}, [tensor()])]})
    analyze_distributed(graphs, False)
    assert result(graphs) == {}
