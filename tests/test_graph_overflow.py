"""Overflow check of graphs (graph_and_tools.md §A.7).

The expected levels were cross-checked against the reference 8.3.3 ``AnomalyDetector(data).analyze().filter()``
on the same entries; they are written out literally here.
"""

import time

from msprobe.core.graph.model import Graph, Node, node_type_of
from msprobe.core.graph.overflow import (
    CRITICAL,
    HIGH,
    MEDIUM,
    IGNORE_RULES,
    api_key,
    apply_overflow,
    entry_level,
    overflow_levels,
)

INF = float("inf")
NAN = float("nan")


def t(mx=1.0, mn=0.0, me=0.5, no=2.0):
    return {"type": "torch.Tensor", "dtype": "torch.float32", "shape": [2, 2], "Max": mx, "Min": mn, "Mean": me,
            "Norm": no, "requires_grad": False}


def i(v):
    return {"type": "int", "value": v}


def fwd(args=(), kwargs=None, out=()):
    return {"input_args": list(args), "input_kwargs": dict(kwargs or {}), "output": list(out)}


# entries and the levels the reference reports for them (after the ignore filter)
DATA = {
    "Torch.div.0.forward": fwd([t(), t()], out=[t(mx=INF)]),
    "Torch.add.0.forward": fwd([t(mx=NAN)], out=[t(me=NAN)]),
    "Torch.nan_to_num.0.forward": fwd([t(mn=-INF)], out=[t()]),
    "Torch.mul.0.forward": fwd([t(no=1.0)], out=[t(no=101.0)]),
    "Torch.mul.1.forward": fwd([t(no=1.0)], out=[t(no=100.0)]),
    "Torch.mul.2.forward": fwd([t(no=0.0)], out=[t(no=100.5)]),
    "Torch.mul.3.forward": fwd([t(no=0.0)], out=[t(no=100.0)]),
    "Torch.mul.4.forward": fwd([t(no=NAN), t(no=1.0)], {"other": t(no=2.0)}, [t(no=250.0)]),
    "Torch.mul.5.forward": fwd([i(3)], out=[t(no=1e6)]),
    "Torch.empty.0.forward": fwd([i(3)], out=[t(mx=INF, mn=-INF, me=NAN)]),
    "Torch.empty.1.forward": fwd([i(3)], out=[t(), t(mx="Inf")]),
    "Torch.empty_like.0.forward": fwd([t(mx=NAN)], out=[t(mx=NAN)]),
    "Torch.empty_strided.0.forward": fwd([t()], out=[t(no=1e9)]),
    "Distributed.recv.0.forward": fwd([t(mx=NAN)], {"src": i(0)}, [t()]),
    "Distributed.recv.1.forward": fwd([t()], {"tensor": t(mx=NAN)}, [t()]),
    "Distributed.recv.2.forward": fwd([t(), t(mx=NAN)], out=[t()]),
    "Distributed.recv.3.forward": fwd([t()], {"other": t(mx=NAN)}, [t()]),
    "Distributed.recv.4.forward": fwd([t()], out=[t(mx=INF)]),
    "Distributed.all_gather.0.forward": fwd([[t(mx=NAN), t()], t()], out=[[t(), t()]]),
    "Distributed.all_gather.1.forward": fwd([[t()], [t(mx=NAN)]]),
    "Distributed.all_gather.2.forward": fwd([t(), t(mx=NAN)]),
    "Distributed.reduce_scatter.0.forward": fwd([t(mx=NAN)], {"output": t(mx=INF)}),
    "Distributed.reduce_scatter.1.forward": fwd([t()], {"op": t(mx=INF)}),
    "Distributed._reduce_scatter_base.0.forward": fwd([t(mx=NAN), t()]),
    "Distributed.all_gather_into_tensor.0.forward": fwd([t(mx=NAN)], out=[t(mx=NAN)]),
    "Distributed.reduce_scatter_tensor.0.forward": fwd([t(mx=NAN)], {"x": t(mx=NAN)}),
    "Tensor.masked_fill_.0.forward": fwd([t(mx=NAN), t(), i(0)], out=[t()]),
    "Tensor.masked_fill_.1.forward": fwd([t(), t(mx=NAN)], out=[t()]),
    "Module.fc.Linear.backward.0": {"input": [t(me="NaN")], "output": [t()]},
    "Module.fc.Linear.backward.1": {"input": [t()], "output": [t(mn="-INF")]},
    "Functional.x.0.forward": fwd([{"a": t(mx=INF)}], out=[t()]),
    "Functional.x.1.forward": fwd([[[[t(mx=INF)]]]], out=[t()]),
    "Functional.x.2.forward": fwd([t(mx="infinity")], out=[t()]),
    "Functional.x.3.forward": {"input_args": [{"type": "float", "value": INF, "Max": None}],
                               "output": [{"type": "float", "value": 1.0, "Max": "nan"}]},
    "Functional.x.4.forward": fwd([], {"k": [t(mx=NAN)]}),
    "Module.a.parameters_grad": {"weight": [t(mx=NAN)]},
    "Functional.x.5.forward": {"input_args": [{"type": "torch.Tensor", "Norm": None}, t(no=2.0)],
                               "output": [t(no=300.0)]},
    "Functional.x.6.forward": {"input_args": [t(no=2.0)], "output": [{"type": "mindspore.Tensor", "Norm": 1e9}]},
    "Functional.x.7.forward": {"input_args": [t(no=INF)], "output": [t(no=INF)]},
    "Functional.x.8.forward": {"input_args": [t(no=1.0)], "output": [t(no=INF)]},
}

EXPECTED = {
    "Torch.div.0.forward": "critical",
    "Torch.add.0.forward": "high",
    "Torch.nan_to_num.0.forward": "medium",
    "Torch.mul.0.forward": "high",
    "Torch.mul.2.forward": "high",
    "Torch.mul.4.forward": "high",
    "Torch.empty.1.forward": "critical",
    "Distributed.recv.2.forward": "medium",
    "Distributed.recv.3.forward": "medium",
    "Distributed.all_gather.2.forward": "medium",
    "Distributed.reduce_scatter.1.forward": "medium",
    "Tensor.masked_fill_.1.forward": "medium",
    "Module.fc.Linear.backward.0": "medium",
    "Module.fc.Linear.backward.1": "critical",
    "Functional.x.1.forward": "medium",
    "Functional.x.3.forward": "critical",
    "Functional.x.4.forward": "medium",
    "Functional.x.5.forward": "high",
    "Functional.x.8.forward": "high",
}


def test_matches_reference_levels_and_order():
    got = overflow_levels(DATA)
    assert got == EXPECTED
    assert list(got) == list(EXPECTED)  # file order


def test_scenes_in_order():
    # input clean, output inf -> critical
    assert entry_level([t()], {}, [t(mx=INF)]) == CRITICAL
    # both anomalous -> high (not critical, not medium)
    assert entry_level([t(mx=NAN)], {}, [t(mn=-INF)]) == HIGH
    # kwargs count as input
    assert entry_level([], {"x": t(me=NAN)}, [t()]) == MEDIUM
    assert entry_level([], {"x": t(me=NAN)}, [t(me=NAN)]) == HIGH
    # input anomalous, output clean -> medium even with a huge norm jump
    assert entry_level([t(mx=INF, no=1.0)], {}, [t(no=1e9)]) == MEDIUM
    assert entry_level([t()], {}, [t()]) is None


def test_anomaly_forms():
    # strings compared lower-cased; 'infinity' is not an anomaly
    assert entry_level([t(mx="NaN")], {}, []) == MEDIUM
    assert entry_level([t(mx="-Inf")], {}, []) == MEDIUM
    assert entry_level([t(mx="infinity")], {}, []) is None
    # only Max / Min / Mean, not Norm
    assert entry_level([t(no=NAN)], {}, [t()]) is None
    # nested lists are searched; a dict without those keys is not searched inside
    assert entry_level([[[t(mx=NAN)]]], {}, []) == MEDIUM
    assert entry_level([{"a": t(mx=NAN)}], {}, []) is None
    # a scalar whose Max is the string nan counts
    assert entry_level([], {}, [{"type": "float", "value": NAN, "Max": "nan"}]) == CRITICAL


def test_numerical_mutation():
    assert entry_level([t(no=1.0)], {}, [t(no=100.5)]) == HIGH
    assert entry_level([t(no=1.0)], {}, [t(no=100.0)]) is None          # strictly greater than 100x
    assert entry_level([t(no=0.0)], {}, [t(no=100.01)]) == HIGH          # zero input: output > 100
    assert entry_level([t(no=0.0)], {}, [t(no=100.0)]) is None
    # max over inputs (args and kwargs), NaN and None norms skipped
    assert entry_level([t(no=NAN), t(no=1.0)], {"w": t(no=3.0)}, [t(no=301.0)]) == HIGH
    assert entry_level([t(no=NAN), t(no=1.0)], {"w": t(no=3.0)}, [t(no=299.0)]) is None
    # only torch.Tensor records; no input tensor -> no mutation check
    assert entry_level([i(3)], {}, [t(no=1e9)]) is None
    assert entry_level([t(no=2.0)], {}, [{"type": "mindspore.Tensor", "Norm": 1e9}]) is None
    # inf / inf is nan, not a mutation
    assert entry_level([t(no=INF)], {}, [t(no=INF)]) is None
    assert entry_level([t(no=1.0)], {}, [t(no=INF)]) == HIGH


def test_ignore_rules_table():
    assert api_key("Torch.empty.0.forward") == "torch.empty"
    assert api_key("Tensor.masked_fill_.0.forward") == "tensor.masked_fill_"
    assert api_key("Single") == "single"
    assert api_key("  ") == ""
    assert sorted(IGNORE_RULES) == sorted([
        "torch.empty", "torch.empty_like", "torch.empty_strided", "distributed.recv", "distributed.all_gather",
        "distributed.reduce_scatter", "distributed._reduce_scatter_base", "distributed.all_gather_into_tensor",
        "distributed.reduce_scatter_tensor", "tensor.masked_fill_",
    ])


def test_ignore_empty_output():
    # output 0 of torch.empty is ignored ...
    assert overflow_levels({"Torch.empty.0.forward": fwd([i(3)], out=[t(mx=INF)])}) == {}
    # ... but not output 1
    assert overflow_levels({"Torch.empty.0.forward": fwd([i(3)], out=[t(), t(mx=INF)])}) == {
        "Torch.empty.0.forward": "critical"}
    # the rule only looks at outputs: an input anomaly never keeps the flag
    assert overflow_levels({"Torch.empty_like.0.forward": fwd([t(mx=NAN)], out=[t(mx=NAN)])}) == {}
    # a mutation on an api with a rule is always dropped
    assert overflow_levels({"Torch.empty_strided.0.forward": fwd([t()], out=[t(no=1e9)])}) == {}
    # other apis are not affected
    assert overflow_levels({"Torch.zeros.0.forward": fwd([i(3)], out=[t(mx=INF)])}) == {
        "Torch.zeros.0.forward": "critical"}


def test_ignore_recv_input():
    assert overflow_levels({"Distributed.recv.0.forward": fwd([t(mx=NAN)], {"src": i(0)}, [t()])}) == {}
    assert overflow_levels({"Distributed.recv.0.forward": fwd([t()], {"tensor": t(mx=NAN)}, [t()])}) == {}
    assert overflow_levels({"Distributed.recv.0.forward": fwd([t(), t(mx=NAN)], out=[t()])}) == {
        "Distributed.recv.0.forward": "medium"}
    assert overflow_levels({"Distributed.recv.0.forward": fwd([t()], {"other": t(mx=NAN)}, [t()])}) == {
        "Distributed.recv.0.forward": "medium"}
    # no output list in the rule: an output anomaly is dropped as well
    assert overflow_levels({"Distributed.recv.0.forward": fwd([t()], out=[t(mx=INF)])}) == {}


def test_ignore_input_index_rules():
    for api in ("all_gather", "_reduce_scatter_base", "all_gather_into_tensor", "reduce_scatter_tensor"):
        name = f"Distributed.{api}.0.forward"
        assert overflow_levels({name: fwd([t(mx=NAN), t()])}) == {}, api
        assert overflow_levels({name: fwd([t(), t(mx=NAN)])}) == {name: "medium"}, api
        # no kwarg names in these rules: kwargs are not looked at
        assert overflow_levels({name: fwd([t()], {"x": t(mx=NAN)})}) == {}, api
    # all_gather's tensor_list: a list argument is never counted by the filter
    assert overflow_levels({"Distributed.all_gather.0.forward": fwd([[t()], [t(mx=NAN)]])}) == {}
    assert overflow_levels({"Tensor.masked_fill_.0.forward": fwd([t(mx=NAN), t(), i(0)], out=[t()])}) == {}
    assert overflow_levels({"Tensor.masked_fill_.0.forward": fwd([t(), t(mx=NAN)], out=[t()])}) == {
        "Tensor.masked_fill_.0.forward": "medium"}


def test_ignore_reduce_scatter_kwarg():
    name = "Distributed.reduce_scatter.0.forward"
    assert overflow_levels({name: fwd([t(mx=NAN)], {"output": t(mx=INF)})}) == {}
    assert overflow_levels({name: fwd([t()], {"op": t(mx=INF)})}) == {name: "medium"}
    assert overflow_levels({name: fwd([t(), t(mx=INF)])}) == {name: "medium"}


def test_sections_and_odd_entries():
    # backward entries use input / output
    assert overflow_levels({"Module.a.A.backward.0": {"input": [t(me="NaN")], "output": [t()]}}) == {
        "Module.a.A.backward.0": "medium"}
    # input_args wins over input when both exist
    assert overflow_levels({"X.y.0.forward": {"input_args": [t()], "input": [t(mx=NAN)], "output": [t()]}}) == {}
    # parameters_grad-shaped entries, non-dict entries and null sections are skipped quietly
    assert overflow_levels({
        "Module.a.parameters_grad": {"weight": [t(mx=NAN)]},
        "junk": [1, 2],
        "X.z.0.forward": {"input_args": None, "input_kwargs": None, "output": None},
    }) == {}


def test_apply_overflow_sets_node_data():
    g = Graph()
    for nid in ("Torch.div.0.forward", "Torch.add.0.forward", "Module.m.M.forward.0"):
        g.add(Node(nid, node_type_of(nid)))
    levels = {"Torch.div.0.forward": "critical", "Torch.add.0.forward": "high", "Not.a.node": "medium"}
    assert apply_overflow(g, levels) == 2
    assert g.nodes["Torch.div.0.forward"].data == {"overflow_level": "critical"}
    assert g.nodes["Torch.add.0.forward"].data == {"overflow_level": "high"}
    assert g.nodes["Module.m.M.forward.0"].data == {}
    assert g.root.data == {}
    # large level maps go the other way round; same result
    many = {f"Other.{k}": "medium" for k in range(10)}
    many["Module.m.M.forward.0"] = "medium"
    assert apply_overflow(g, many) == 1
    assert g.nodes["Module.m.M.forward.0"].data == {"overflow_level": "medium"}


def test_linear_on_100k_entries():
    data = {}
    for k in range(100_000):
        data[f"Torch.add.{k}.forward"] = fwd([t(), t(), i(1)], {"alpha": {"type": "float", "value": 1.0}},
                                             [t(mx=INF if k % 97 == 0 else 1.0)])
    start = time.perf_counter()
    got = overflow_levels(data)
    elapsed = time.perf_counter() - start
    assert len(got) == 1031 and set(got.values()) == {"critical"}
    assert elapsed < 10.0
    # the input is left untouched
    assert data["Torch.add.0.forward"]["output"][0]["Max"] == INF
