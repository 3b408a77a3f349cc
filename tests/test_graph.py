"""msprobe graph on hand-made dumps: hierarchy, matching, metrics, overflow, communication ops, layouts,
output files and bad input."""

from __future__ import annotations

import glob
import json
import os
import sqlite3

import pytest

from conftest import ROOT
from graph_ref import read_db, read_vis

from msprobe.cli.main import main
from msprobe.core.graph.build import build_graph
from msprobe.core.graph.service import GraphConfig, run_graph, simplify_stack


def T(mx, mn=None, mean=None, norm=None, shape=(2, 2), dtype="torch.float32", rg=True, **extra):
    d = {"type": "torch.Tensor", "dtype": dtype, "shape": list(shape), "Max": mx,
         "Min": mx - 1 if mn is None else mn, "Mean": mx - 0.5 if mean is None else mean,
         "Norm": abs(mx) + 1 if norm is None else norm, "requires_grad": rg}
    d.update(extra)
    return d


def write_dump(d, construct, data, stack=None, task="statistics", framework="pytorch"):
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "construct.json"), "w") as f:
        json.dump(construct, f)
    with open(os.path.join(d, "dump.json"), "w") as f:
        json.dump({"task": task, "level": "mix", "framework": framework, "dump_data_dir": None, "data": data}, f)
    if stack is not False:
        with open(os.path.join(d, "stack.json"), "w") as f:
            json.dump(stack if stack is not None else {}, f)
    return d


def small_model(scale=1.0, linear_out=None):
    """Block(fc=Linear) + two top-level APIs + head Linear; forward and backward; fc params_grad."""
    lo = linear_out if linear_out is not None else 0.5 * scale
    construct = {
        "Functional.linear.0.forward": "Module.block.fc.Linear.forward.0",
        "Module.block.fc.Linear.forward.0": "Module.block.Block.forward.0",
        "Module.block.Block.forward.0": None,
        "Tensor.__mul__.0.forward": None,
        "Torch.sigmoid.0.forward": None,
        "Functional.linear.1.forward": "Module.head.Linear.forward.0",
        "Module.head.Linear.forward.0": None,
        "Module.head.Linear.backward.0": None,
        "Functional.linear.1.backward": None,  # repaired from the forward twin's parent
        "Module.block.fc.Linear.backward.0": None,  # repaired: parent of the forward twin is Block.forward.0
        "Module.block.Block.backward.0": None,
    }
    data = {
        "Functional.linear.0.forward": {"input_args": [T(1.0), T(0.3, shape=(2, 2))], "input_kwargs": {},
                                        "output": [T(lo)]},
        "Module.block.fc.Linear.forward.0": {"input_args": [T(1.0)], "input_kwargs": {}, "output": [T(lo)],
                                             "parameters": {"weight": T(0.3), "bias": T(0.1, shape=(2,))}},
        "Module.block.Block.forward.0": {"input_args": [T(1.0)], "input_kwargs": {}, "output": [T(lo)]},
        "Tensor.__mul__.0.forward": {"input_args": [T(lo), {"type": "int", "value": 2}], "input_kwargs": {},
                                     "output": [T(2 * lo)]},
        "Torch.sigmoid.0.forward": {"input_args": [T(2 * lo)], "input_kwargs": {}, "output": [T(0.7)]},
        "Functional.linear.1.forward": {"input_args": [T(0.7)], "input_kwargs": {}, "output": [T(0.9 * scale)]},
        "Module.head.Linear.forward.0": {"input_args": [T(0.7)], "input_kwargs": {}, "output": [T(0.9 * scale)]},
        "Module.head.Linear.backward.0": {"input": [T(0.01)], "output": [T(0.02)]},
        "Functional.linear.1.backward": {"input": [T(0.01)], "output": [T(0.02), T(0.03), None]},
        "Module.block.fc.Linear.backward.0": {"input": [T(0.02)], "output": [T(0.04)]},
        "Module.block.Block.backward.0": {"input": [T(0.02)], "output": [T(0.04)]},
        "Module.block.fc.Linear.parameters_grad": {"weight": [T(0.05)], "bias": [T(0.06, shape=(2,))]},
    }
    stack = {"0": [["Module.block.Block.forward.0"], ["File /m.py, line 3, in forward, \n y = self.block(x)"]],
             "2": [["Module.head.Linear.forward.0"], ["File /m.py, line 4, in forward, \n z = self.head(y)"]],
             "1": [["Functional.linear.0.forward"],
                   ["File /x/api_registry.py, line 94, in api_function, \n return api_instance(*args, **kwargs)",
                    "File /torch/linear.py, line 134, in forward, \n return F.linear(input, self.weight, self.bias)"]]}
    return construct, data, stack


def test_hierarchy(tmp_path):
    c, d, s = small_model()
    g = build_graph(write_dump(str(tmp_path / "t"), c, d, s))
    root = g.root
    assert [n.id for n in root.subnodes] == [
        "Module.block.Block.forward.0", "Apis_Between_Modules.0", "Module.head.Linear.forward.0",
        "Module.head.Linear.backward.0", "Module.block.Block.backward.0"]
    coll = g.nodes["Apis_Between_Modules.0"]
    assert coll.type == 9 and [n.id for n in coll.subnodes] == ["Tensor.__mul__.0.forward", "Torch.sigmoid.0.forward"]
    assert g.nodes["Functional.linear.1.backward"].up.id == "Module.head.Linear.backward.0"
    assert g.nodes["Module.block.fc.Linear.backward.0"].up.id == "Module.block.Block.backward.0"
    pg = g.nodes["Module.block.fc.Linear.parameters_grad"]
    assert pg.up.id == "Module.block.fc.Linear.backward.0" and pg.type == 0
    assert list(pg.input_data) == ["Module.block.fc.Linear.parameters_grad.weight", "Module.block.fc.Linear.parameters_grad.bias"]
    fc = g.nodes["Module.block.fc.Linear.forward.0"]
    assert list(fc.input_data) == ["Module.block.fc.Linear.forward.0.input.0", "Module.block.fc.Linear.forward.0.parameters.weight",
                                   "Module.block.fc.Linear.forward.0.parameters.bias"]
    mul = g.nodes["Tensor.__mul__.0.forward"].input_data["Tensor.__mul__.0.forward.input.1"]
    assert mul["dtype"] == "<class 'int'>" and mul["Max"] == 2 and mul["shape"] == "[]"
    assert g.nodes["Functional.linear.1.backward"].output_data["Functional.linear.1.backward.output.2"]["Max"] is None
    # backward nodes without a stack take the forward's; modules use call number 0
    assert g.nodes["Module.head.Linear.backward.0"].stack == ["File /m.py, line 4, in forward, \n z = self.head(y)"]
    assert g.nodes["Torch.sigmoid.0.forward"].stack == []


def test_stack_simplification():
    frames = ["File /x/api_registry.py, line 94, in api_function, \n return api_instance(*args, **kwargs)",
              "File /torch/linear.py, line 134, in forward, \n return F.linear(input, self.weight, self.bias)",
              "File /m.py, line 9, in f"]
    assert simplify_stack("Functional.linear.0.forward", frames) == [frames[1]]
    mod = ["File /m.py, line 2, in run, \n main()", "File /m.py, line 3, in forward, \n y = self.fc(x)"]
    assert simplify_stack("Module.block.fc.Linear.forward.0", mod) == [mod[1]]
    assert simplify_stack("Module.block.other.Linear.forward.0", mod) == mod  # no caller line found: all kept


def test_compare_summary_values_and_buckets(tmp_path):
    c, d, s = small_model()
    c2, d2, s2 = small_model(linear_out=0.25)  # the golden's block output is half of the target's
    t = write_dump(str(tmp_path / "t"), c, d, s)
    g = write_dump(str(tmp_path / "g"), c2, d2, s2)
    # the reference's precision index and colours (msprobe's verdict colouring: tests/test_graph_verdict.py)
    res = run_graph(GraphConfig(target=t, golden=g, output=str(tmp_path / "out"), reference_colours=True))
    assert len(res.outputs) == 1 and res.outputs[0].endswith(".vis")
    obj = json.load(open(res.outputs[0]))
    assert obj["task"] == "summary" and obj["MicroSteps"] == 1 and obj["OverflowCheck"] is False
    assert isinstance(obj["ToolTip"], str) and "Max diff" in json.loads(obj["ToolTip"])
    npu = obj["NPU"]["node"]
    lin = npu["Functional.linear.0.forward"]
    out0 = lin["output_data"]["Functional.linear.0.forward.output.0"]
    # Max 0.5 vs 0.25: diff 0.25, relative 100%; Min -0.5 vs -0.75; Mean 0 vs -0.25; Norm 1.5 vs 1.25
    assert out0["Max diff"] == "0.25" and out0["MaxRelativeErr"] == "100.0%"
    assert out0["MinRelativeErr"] == "33.333333%" and out0["NormRelativeErr"] == "20.0%"
    assert out0["MeanRelativeErr"] == "100.0%" and out0["Requires_grad Consistent"] == "True"
    assert out0["Max"] == "0.5" and out0["shape"] == "[2, 2]" and "md5" not in out0
    assert lin["data"]["precision_index"] == 1.0  # max relative error 100% -> clamped to 1
    assert npu["Module.head.Linear.forward.0"]["data"]["precision_index"] == 0
    assert lin["matched_node_link"] == ["DefaultModel", "Module.block.Block.forward.0",
                                        "Module.block.fc.Linear.forward.0", "Functional.linear.0.forward"]
    # a collection takes its worst child; Tensor.__mul__ inputs differ but outputs: 1.0 vs 0.5 -> 100%
    assert npu["Apis_Between_Modules.0"]["data"]["precision_index"] == 1.0
    assert "precision_index" not in npu["DefaultModel"]["data"]
    assert obj["Bench"]["node"]["Functional.linear.0.forward"]["data"] == {}
    assert list(obj["Colors"])[-1] == "#C7C7C7"


def test_md5_mode_index_direction(tmp_path):
    c, d, s = small_model()
    for side, val in (("t", "aaaa0000"), ("g", "bbbb0000")):
        dd = json.loads(json.dumps(d))
        dd["Torch.sigmoid.0.forward"]["output"][0]["md5"] = val
        for name, e in dd.items():
            for sec in e.values():
                for it in (sec if isinstance(sec, list) else sec.values() if isinstance(sec, dict) else []):
                    if isinstance(it, dict) and "md5" not in it and it.get("type") == "torch.Tensor":
                        it["md5"] = "12345678"
                    if isinstance(it, list):
                        for x in it:
                            x.setdefault("md5", "12345678")
        write_dump(str(tmp_path / side), c, dd, s)
    res = run_graph(GraphConfig(target=str(tmp_path / "t"), golden=str(tmp_path / "g"), output=str(tmp_path / "o"), db=True,
                                reference_colours=True))
    a, task = read_db(res.outputs[0])
    assert task == "md5"
    assert a["NPU"]["Torch.sigmoid.0.forward"][4] == 0  # 0 = different in md5 mode
    assert a["NPU"]["Functional.linear.0.forward"][4] == 1
    con = sqlite3.connect(res.outputs[0])
    out = json.loads(con.execute("SELECT output_data FROM tb_nodes WHERE id='NPU_0_0_Torch.sigmoid.0.forward'").fetchone()[0])
    assert out["Torch.sigmoid.0.forward.output.0"]["Result"] == "Different"
    assert out["Torch.sigmoid.0.forward.output.0"]["md5"] == "aaaa0000"


def test_default_vs_fuzzy_matching(tmp_path):
    c, d, s = small_model()
    # the golden called sigmoid once more before: call counters differ
    ren = {"Torch.sigmoid.0.forward": "Torch.sigmoid.3.forward"}
    c2 = {ren.get(k, k): v for k, v in c.items()}
    d2 = {ren.get(k, k): v for k, v in d.items()}
    t = write_dump(str(tmp_path / "t"), c, d, s)
    g = write_dump(str(tmp_path / "g"), c2, d2, s)
    plain = run_graph(GraphConfig(target=t, golden=g, output=str(tmp_path / "o1")))
    a, _ = read_vis(plain.outputs[0])
    assert a["NPU"]["Torch.sigmoid.0.forward"][3] is None  # unmatched: grey
    fuzzy = run_graph(GraphConfig(target=t, golden=g, output=str(tmp_path / "o2"), fuzzy=True))
    a, _ = read_vis(fuzzy.outputs[0])
    assert a["NPU"]["Torch.sigmoid.0.forward"][3] == "Torch.sigmoid.3.forward"
    assert a["Bench"]["Torch.sigmoid.3.forward"][3] == "Torch.sigmoid.0.forward"



def test_fuzzy_leaves_a_call_run_on_one_side_unmatched(tmp_path):
    """Inside a module, the target alone calls ``x * 1.05`` (a user's hook) before its ``x * y``: the API
    children pair by name, structure and occurrence, so the hook's call stays unmatched and the target's
    ``x * y`` pairs with the golden's (by name and occurrence alone it paired with the hook's call)."""
    construct_g = {"Module.m.M.forward.0": None, "Tensor.__mul__.0.forward": "Module.m.M.forward.0"}
    data_g = {"Module.m.M.forward.0": {"input_args": [T(1.0)], "input_kwargs": {}, "output": [T(6.0)]},
              "Tensor.__mul__.0.forward": {"input_args": [T(1.0), T(2.0)], "input_kwargs": {}, "output": [T(6.0)]}}
    construct_t = {"Module.m.M.forward.0": None, "Tensor.__mul__.0.forward": "Module.m.M.forward.0",
                   "Tensor.__mul__.1.forward": "Module.m.M.forward.0"}
    data_t = {"Module.m.M.forward.0": {"input_args": [T(1.0)], "input_kwargs": {}, "output": [T(6.3)]},
              "Tensor.__mul__.0.forward": {"input_args": [T(1.0), {"type": "float", "value": 1.05}],
                                           "input_kwargs": {}, "output": [T(1.05)]},
              "Tensor.__mul__.1.forward": {"input_args": [T(1.05), T(2.0)], "input_kwargs": {}, "output": [T(6.3)]}}
    t = write_dump(str(tmp_path / "t"), construct_t, data_t)
    g = write_dump(str(tmp_path / "g"), construct_g, data_g)
    a, _ = read_vis(run_graph(GraphConfig(target=t, golden=g, output=str(tmp_path / "o"), fuzzy=True)).outputs[0])
    assert a["NPU"]["Tensor.__mul__.0.forward"][3] is None
    assert a["NPU"]["Tensor.__mul__.1.forward"][3] == "Tensor.__mul__.0.forward"


def test_fuzzy_backward_pairs_with_its_forward_partner(tmp_path):
    """The backward calls run in another order on the two sides (sdpa against eager attention: a clean pair had
    3 red nodes with -fm): a backward API pairs with the backward of its forward's partner."""
    def side(nums, bwd_order):
        construct = {"Module.m.M.forward.0": None, "Module.m.M.backward.0": None}
        data = {"Module.m.M.forward.0": {"input_args": [T(1.0)], "input_kwargs": {}, "output": [T(2.0)]},
                "Module.m.M.backward.0": {"input": [T(0.1)], "output": [T(0.2)]}}
        for k, v in zip(nums, (1.0, 3.0)):
            construct[f"Tensor.__mul__.{k}.forward"] = "Module.m.M.forward.0"
            data[f"Tensor.__mul__.{k}.forward"] = {"input_args": [T(v), T(v + 1)], "input_kwargs": {},
                                                   "output": [T(v * (v + 1))]}
        for k in bwd_order:
            v = 1.0 if k == nums[0] else 3.0
            construct[f"Tensor.__mul__.{k}.backward"] = "Module.m.M.backward.0"
            data[f"Tensor.__mul__.{k}.backward"] = {"input": [T(v)], "output": [T(v + 1), T(v)]}
        return construct, data
    t = write_dump(str(tmp_path / "t"), *side((0, 1), (1, 0)))
    g = write_dump(str(tmp_path / "g"), *side((4, 5), (4, 5)))
    a, _ = read_vis(run_graph(GraphConfig(target=t, golden=g, output=str(tmp_path / "o"), fuzzy=True)).outputs[0])
    assert a["NPU"]["Tensor.__mul__.0.forward"][3] == "Tensor.__mul__.4.forward"
    assert a["NPU"]["Tensor.__mul__.1.backward"][3] == "Tensor.__mul__.5.backward"
    assert a["NPU"]["Tensor.__mul__.0.backward"][3] == "Tensor.__mul__.4.backward"

def test_default_match_requires_same_shapes(tmp_path):
    c, d, s = small_model()
    d2 = json.loads(json.dumps(d))
    d2["Torch.sigmoid.0.forward"]["output"][0]["shape"] = [4]
    t = write_dump(str(tmp_path / "t"), c, d, s)
    g = write_dump(str(tmp_path / "g"), c, d2, s)
    a, _ = read_vis(run_graph(GraphConfig(target=t, golden=g, output=str(tmp_path / "o"))).outputs[0])
    assert a["NPU"]["Torch.sigmoid.0.forward"][3] is None
    assert a["NPU"]["Tensor.__mul__.0.forward"][3] == "Tensor.__mul__.0.forward"


def test_overflow_levels_written(tmp_path):
    c, d, s = small_model()
    d["Torch.sigmoid.0.forward"]["output"][0]["Max"] = float("inf")
    t = write_dump(str(tmp_path / "t"), c, d, s)
    res = run_graph(GraphConfig(target=t, output=str(tmp_path / "o"), overflow_check=True))
    obj = json.loads(open(res.outputs[0]).read().replace("Infinity", "1e999"))
    assert obj["OverflowCheck"] is True
    assert obj["node"]["Torch.sigmoid.0.forward"]["data"]["overflow_level"] == "critical"
    assert obj["node"]["Torch.sigmoid.0.forward"]["output_data"]["Torch.sigmoid.0.forward.output.0"]["Max"] == "inf"


def _dist_rank(root, rank, value):
    grp = {"type": "torch.ProcessGroup", "group_ranks": [0, 1], "group_id": "g1"}
    c = {"Distributed.all_reduce.0.forward": "Module.m.M.forward.0", "Module.m.M.forward.0": None}
    d = {"Distributed.all_reduce.0.forward": {"input_args": [T(value)], "input_kwargs": {"group": grp}, "output": [T(value)]},
         "Module.m.M.forward.0": {"input_args": [T(value)], "input_kwargs": {}, "output": [T(value)]}}
    return write_dump(os.path.join(root, f"rank{rank}"), c, d, {})


def test_communication_ops_matched_across_ranks(tmp_path):
    for r in (0, 1):
        _dist_rank(str(tmp_path / "t"), r, 1.0 + r)
        _dist_rank(str(tmp_path / "g"), r, 1.0 + r)
    res = run_graph(GraphConfig(target=str(tmp_path / "t"), golden=str(tmp_path / "g"), output=str(tmp_path / "o"), jobs=2))
    names = sorted(os.path.basename(p).rsplit("_", 1)[0] for p in res.outputs)
    assert names == ["compare_rank0", "compare_rank1"]
    obj = json.load(open(sorted(res.outputs)[0]))
    md = obj["NPU"]["node"]["Distributed.all_reduce.0.forward"]["matched_distributed"]
    assert md == {"communications_type": "send_receive", "nodes_info": {"1": ["0", "Distributed.all_reduce.0.forward"]}}
    db = run_graph(GraphConfig(target=str(tmp_path / "t"), golden=str(tmp_path / "g"), output=str(tmp_path / "o2"), db=True))
    con = sqlite3.connect(db.outputs[0])
    got = con.execute("SELECT matched_distributed FROM tb_nodes WHERE id='Bench_0_1_Distributed.all_reduce.0.forward'").fetchone()[0]
    assert json.loads(got)["nodes_info"] == {"0": ["Nan", "Distributed.all_reduce.0.forward"]}
    assert json.loads(con.execute("SELECT rank_list FROM tb_config").fetchone()[0]) == [0, 1]


def test_step_layout_names_and_single_db(tmp_path):
    c, d, s = small_model()
    for step in (0, 1):
        write_dump(str(tmp_path / "t" / f"step{step}" / "rank"), c, d, s)
    res = run_graph(GraphConfig(target=str(tmp_path / "t"), output=str(tmp_path / "o")))
    names = sorted(os.path.basename(p).rsplit("_", 1)[0] for p in res.outputs)
    assert names == ["build_step0_rank", "build_step1_rank"]
    db = run_graph(GraphConfig(target=str(tmp_path / "t"), output=str(tmp_path / "o"), db=True))
    con = sqlite3.connect(db.outputs[0])
    assert json.loads(con.execute("SELECT step_list FROM tb_config").fetchone()[0]) == [0, 1]
    assert con.execute("SELECT count(*) FROM tb_nodes WHERE up_node=''").fetchone()[0] == 2
    assert con.execute("SELECT graph_type, task FROM tb_config").fetchone() == ("build", "")
    # stack ids all resolve (the plugin's detail panel joins on them)
    assert con.execute("SELECT count(*) FROM tb_nodes n LEFT JOIN tb_stack s ON n.stack_id=s.id WHERE s.id IS NULL").fetchone()[0] == 0


def test_deep_model_builds_without_recursion_limit(tmp_path):
    depth = 20000
    construct = {}
    data = {}
    parent = None
    for i in range(depth):
        nid = f"Module.l{i}.Block.forward.0"
        construct[nid] = parent
        data[nid] = {"input_args": [T(1.0)], "input_kwargs": {}, "output": [T(1.0)]}
        parent = nid
    t = write_dump(str(tmp_path / "t"), construct, data, {})
    for db in (False, True):
        res = run_graph(GraphConfig(target=t, output=str(tmp_path / f"o{db}"), db=db))
        a, _ = (read_db if db else read_vis)(res.outputs[0])
        assert len(a["NPU"]) == depth + 1
        assert a["NPU"][f"Module.l{depth - 1}.Block.forward.0"][0] == f"Module.l{depth - 2}.Block.forward.0"
    # a compare writes every node's full ancestor chain (matched_node_link), so keep that one smaller
    small = {k: v for k, v in list(construct.items())[:1500]}
    t2 = write_dump(str(tmp_path / "t2"), small, data, {})
    res = run_graph(GraphConfig(target=t2, golden=t2, output=str(tmp_path / "oc"), db=True))
    a, _ = read_db(res.outputs[0])
    assert a["NPU"]["Module.l1499.Block.forward.0"][3] == "Module.l1499.Block.forward.0"


def test_never_overwrites(tmp_path):
    c, d, s = small_model()
    t = write_dump(str(tmp_path / "t"), c, d, s)
    out = str(tmp_path / "o")
    first = run_graph(GraphConfig(target=t, output=out)).outputs[0]
    before = open(first, "rb").read()
    second = run_graph(GraphConfig(target=t, output=out)).outputs[0]
    assert first != second and open(first, "rb").read() == before
    assert sorted(os.listdir(out)) == sorted(os.path.basename(p) for p in (first, second))  # no temp left


def test_legacy_syntax_and_fuzzy_flag(tmp_path, capsys):
    c, d, s = small_model()
    t = write_dump(str(tmp_path / "t"), c, d, s)
    cfg = tmp_path / "compare.json"
    cfg.write_text(json.dumps({"npu_path": t, "bench_path": t, "is_print_compare_log": True}))
    assert main(["-f", "pytorch", "graph", "-i", str(cfg), "-o", str(tmp_path / "o"), "-f"]) == 0
    out = capsys.readouterr().out
    assert "compare_" in out and "matched pairs (summary)" in out


@pytest.mark.parametrize("extra", [[], ["-o"]])
def test_output_defaults_to_dot_output_like_compare(tmp_path, capsys, monkeypatch, extra):
    """graph used to require -o; like compare it now writes to ./output when -o is left out (or bare)."""
    c, d, s = small_model()
    t = write_dump(str(tmp_path / "t"), c, d, s)
    work = tmp_path / "cwd"
    work.mkdir()
    monkeypatch.chdir(work)
    assert main(["graph", "-tp", t, "-q", *extra]) == 0
    written = glob.glob(str(work / "output" / "build_*.vis"))
    assert len(written) == 1
    assert "written: " in capsys.readouterr().out


# ---------------------------------------------------------------------------------------------- bad input


def _cli_fails(capsys, argv, *needles):
    rc = main(argv)
    err = capsys.readouterr().err
    assert rc == 2, err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("msprobe: error:"), err
    for n in needles:
        assert n in lines[0], lines[0]
    return lines[0]


def test_empty_construct_says_which_level(tmp_path, capsys):
    c, d, s = small_model()
    t = write_dump(str(tmp_path / "t"), {}, d, s)
    out = tmp_path / "o"
    _cli_fails(capsys, ["graph", "-tp", t, "-o", str(out)], "construct.json", "L0 or mix")
    assert not out.exists() or os.listdir(out) == []


def test_missing_stack_json(tmp_path, capsys):
    c, d, _ = small_model()
    t = write_dump(str(tmp_path / "t"), c, d, stack=False)
    out = tmp_path / "o"
    _cli_fails(capsys, ["graph", "-tp", t, "-o", str(out)], "no stack.json")
    assert not out.exists() or os.listdir(out) == []


def test_rank_counts_differ(tmp_path, capsys):
    c, d, s = small_model()
    for r in (0, 1):
        write_dump(str(tmp_path / "t" / f"rank{r}"), c, d, s)
    write_dump(str(tmp_path / "g" / "rank0"), c, d, s)
    out = tmp_path / "o"
    _cli_fails(capsys, ["graph", "-tp", str(tmp_path / "t"), "-gp", str(tmp_path / "g"), "-o", str(out)],
               "different ranks", "rank0, rank1")
    assert not out.exists() or os.listdir(out) == []


def test_mixed_tasks_and_frameworks(tmp_path, capsys):
    c, d, s = small_model()
    t = write_dump(str(tmp_path / "t"), c, d, s)
    g = write_dump(str(tmp_path / "g"), c, d, s, task="tensor")
    _cli_fails(capsys, ["graph", "-tp", t, "-gp", g, "-o", str(tmp_path / "o")], "same task")
    m = write_dump(str(tmp_path / "m"), c, d, s, framework="mindspore")
    _cli_fails(capsys, ["graph", "-tp", m, "-gp", t, "-o", str(tmp_path / "o")], "-lm")


def test_invalid_layer_mapping_yaml(tmp_path, capsys):
    pytest.importorskip("msprobe.core.compare.layer_mapping")
    c, d, s = small_model()
    t = write_dump(str(tmp_path / "t"), c, d, s)
    bad = tmp_path / "map.yaml"
    bad.write_text("- just\n- a list\n")
    out = tmp_path / "o"
    _cli_fails(capsys, ["graph", "-tp", t, "-gp", t, "-o", str(out), "-lm", str(bad)], "map.yaml")
    assert not out.exists() or os.listdir(out) == []


def test_layout_mismatch_and_bad_folder(tmp_path, capsys):
    c, d, s = small_model()
    t = write_dump(str(tmp_path / "t" / "rank0"), c, d, s)
    _cli_fails(capsys, ["graph", "-tp", str(tmp_path / "t"), "-gp", t, "-o", str(tmp_path / "o")], "same level")
    os.makedirs(tmp_path / "x" / "weird")
    _cli_fails(capsys, ["graph", "-tp", str(tmp_path / "x"), "-o", str(tmp_path / "o")], "weird")


def test_layer_mapping_cross_framework(tmp_path):
    pytest.importorskip("msprobe.core.compare.layer_mapping")
    from test_layer_mapping import EXPECTED_WITH_YAML

    data = ROOT / "tests" / "data" / "layer_mapping"
    res = run_graph(GraphConfig(target=str(data / "npu"), golden=str(data / "bench"), output=str(tmp_path / "o"),
                                layer_mapping=str(data / "mapping.yaml")))
    a, _ = read_vis(res.outputs[0])
    npu = a["NPU"]
    for n_id, b_id in EXPECTED_WITH_YAML.items():
        if n_id in npu:
            assert npu[n_id][3] == b_id, n_id
    # the NPU-only wrapper cell has no counterpart (the mapping leaves it out): grey, not matched by name
    assert npu["Cell.model.embedding.Embedding.forward.0"][3] is None
    assert npu["DefaultModel"][3] == "DefaultModel"
    matched = sum(1 for v in npu.values() if v[3])
    assert matched == 1 + sum(1 for k in EXPECTED_WITH_YAML if k in npu)


def _wide_dump(root, n=2600):
    construct, data = {}, {}
    for i in range(n // 2):
        m = f"Module.l{i}.Linear.forward.0"
        a = f"Functional.linear.{i}.forward"
        construct[a] = m
        construct[m] = None
        data[a] = {"input_args": [T(1.0 + i)], "input_kwargs": {}, "output": [T(float("nan") if i == 7 else 2.0 + i)]}
        data[m] = {"input_args": [T(1.0 + i)], "input_kwargs": {}, "output": [T(2.0 + i)],
                   "parameters": {"weight": T(0.5, rg=False)}}
    data["Module.l3.Linear.parameters_grad"] = {"weight": [T(0.25)]}
    construct["Module.l3.Linear.backward.0"] = None
    data["Module.l3.Linear.backward.0"] = {"input": [T(0.1)], "output": [T(0.2)]}
    # the reference's on-disk layout (indent 1), which the split path cuts into entries
    d = write_dump(root, construct, {}, {})
    with open(os.path.join(d, "dump.json"), "w") as f:
        json.dump({"task": "statistics", "level": "mix", "framework": "pytorch", "dump_data_dir": None, "data": data},
                  f, indent=1)
    return d


@pytest.mark.parametrize("child_fails", [False, True])
def test_split_build_writes_the_same_graph(tmp_path, monkeypatch, child_fails):
    from msprobe.core.graph import build as gbuild

    t = _wide_dump(str(tmp_path / "t"))
    plain = run_graph(GraphConfig(target=t, output=str(tmp_path / "plain"), jobs=1))
    monkeypatch.setattr(gbuild, "SPLIT_MIN_BYTES", 0)
    if child_fails:
        monkeypatch.setattr(gbuild, "_format_range", lambda *a: os._exit(1))
    started = []
    real_start = gbuild.SplitFormatter.start.__func__
    monkeypatch.setattr(gbuild.SplitFormatter, "start",
                        classmethod(lambda cls, p, mode="half": started.append(1) or real_start(cls, p, mode)))
    split = run_graph(GraphConfig(target=t, output=str(tmp_path / "split")))
    assert started, "the split path was not taken"
    a = json.load(open(plain.outputs[0]))
    b = json.load(open(split.outputs[0]))
    assert a == b
    assert b["node"]["Functional.linear.7.forward"]["output_data"]["Functional.linear.7.forward.output.0"]["Max"] == "nan"
    assert "Module.l3.Linear.parameters_grad" in b["node"]["Module.l3.Linear.backward.0"]["subnodes"]
    assert not _split_temps(), "temporary files left behind"


def _split_temps():
    """The split formatter's temporary files of this process (msprobe.core.graph.build: in the system temp dir,
    named with TEMP_PREFIX and this process's temp_tag)."""
    import tempfile

    from msprobe.core.fileio import TEMP_PREFIX, temp_tag

    return glob.glob(os.path.join(glob.escape(tempfile.gettempdir()), f"{glob.escape(TEMP_PREFIX + temp_tag())}-split-*"))


@pytest.mark.parametrize("md5,child_fails", [(False, False), (True, False), (False, True)])
def test_split_compare_writes_the_same_graph(tmp_path, monkeypatch, md5, child_fails):
    """The golden side of a compare is parsed and formatted by a child process; md5 compares cancel its
    texts; if it dies, this process parses the golden dump itself."""
    from msprobe.core.graph import build as gbuild

    if child_fails:
        monkeypatch.setattr(gbuild, "_emit_items", lambda *a: False)

    t = _wide_dump(str(tmp_path / "t"))
    g = _wide_dump(str(tmp_path / "g"))
    if md5:
        for d in (t, g):
            p = os.path.join(d, "dump.json")
            obj = json.load(open(p))
            for e in obj["data"].values():
                for sec in e.values():
                    for it in (sec if isinstance(sec, list) else [sec]):
                        if isinstance(it, dict) and it.get("type") == "torch.Tensor":
                            it["md5"] = "abcd0123" if d == t else "abcd0124"
            json.dump(obj, open(p, "w"), indent=1)
    plain = run_graph(GraphConfig(target=t, golden=g, output=str(tmp_path / "plain"), jobs=1, db=True))
    monkeypatch.setattr(gbuild, "SPLIT_MIN_BYTES", 0)
    split = run_graph(GraphConfig(target=t, golden=g, output=str(tmp_path / "split"), db=True))
    con_a, con_b = sqlite3.connect(plain.outputs[0]), sqlite3.connect(split.outputs[0])
    q = "SELECT id, input_data, output_data, precision_index, matched_node_link FROM tb_nodes ORDER BY id"
    rows_a, rows_b = con_a.execute(q).fetchall(), con_b.execute(q).fetchall()
    assert len(rows_a) > 2600 and rows_a == rows_b
    bench = dict((r[0], r) for r in rows_b)["Bench_0_0_Functional.linear.5.forward"]
    assert ("abcd0124" in bench[2]) == md5
    assert not _split_temps(), "temporary files left behind"


def test_non_numeric_statistics_give_na(tmp_path):
    """Text statistics (src/dst arguments, bools) are not numbers: N/A, as in the reference."""
    c = {"Distributed.send.0.forward": None, "Torch.eq.0.forward": None}
    def d(dst):
        return {"Distributed.send.0.forward": {"input_args": [T(1.0)], "input_kwargs": {"dst": {"type": "int", "value": dst}},
                                               "output": []},
                "Torch.eq.0.forward": {"input_args": [T(1.0), T(1.0)], "input_kwargs": {},
                                       "output": [T(True, mn=False, mean=True, norm=True, dtype="torch.bool")]}}
    t = write_dump(str(tmp_path / "t"), c, d(1), {})
    g = write_dump(str(tmp_path / "g"), c, d(2), {})
    obj = json.load(open(run_graph(GraphConfig(target=t, golden=g, output=str(tmp_path / "o"))).outputs[0]))
    dst = obj["NPU"]["node"]["Distributed.send.0.forward"]["input_data"]["Distributed.send.0.forward.input.dst"]
    assert dst["Max"] == "1" and dst["Max diff"] == "N/A" and dst["MaxRelativeErr"] == "N/A"
    out = obj["NPU"]["node"]["Torch.eq.0.forward"]["output_data"]["Torch.eq.0.forward.output.0"]
    assert out["Max"] == "True" and out["Max diff"] == "N/A"


def test_warns_when_the_viewer_would_hide_files(tmp_path, capsys):
    c, d, s = small_model()
    t = write_dump(str(tmp_path / "t"), c, d, s)
    out = str(tmp_path / "o")
    assert main(["graph", "-tp", t, "-o", out, "-q"]) == 0
    assert "WARNING" not in capsys.readouterr().err
    assert main(["graph", "-tp", t, "-o", out, "-q", "--db"]) == 0
    err = capsys.readouterr().err
    assert "only one .vis.db per directory" in err and "1 .vis.db and 1 .vis" in err


def test_proc_folders_of_26x_dumps(tmp_path, capsys):
    """26.x dumps write step0/proc<pid>/: one on each side pairs; several cannot be paired by pid."""
    c, d, s = small_model()
    write_dump(str(tmp_path / "t" / "proc123"), c, d, s)
    write_dump(str(tmp_path / "g" / "proc456"), c, d, s)
    res = run_graph(GraphConfig(target=str(tmp_path / "t"), golden=str(tmp_path / "g"), output=str(tmp_path / "o")))
    assert os.path.basename(res.outputs[0]).startswith("compare_proc123_")
    assert res.units[0].matched == 14
    write_dump(str(tmp_path / "t" / "proc789"), c, d, s)
    write_dump(str(tmp_path / "g" / "proc790"), c, d, s)
    _cli_fails(capsys, ["graph", "-tp", str(tmp_path / "t"), "-gp", str(tmp_path / "g"), "-o", str(tmp_path / "o2")],
               "process ids cannot be paired")
