"""Highlighting on small hand-made statistics dumps.

Colours follow the verdict (docs/compare.md "Rule set": red = FAIL, yellow = WARN); the reference's rules
(compare.md §6) are still evaluated, into ``Report.ref_styles`` and as notes in Err_message where they
disagree with the verdict.  These tests check both."""

import json

import numpy as np

from msprobe.core.compare.config import CompareConfig
from msprobe.core.compare.engine import compare_dumps
from msprobe.core.compare import highlight as hl


def t(mx, mn=None, mean=None, norm=None, rg=False, shape=(4,), dtype="torch.float32"):
    mn = -abs(mx) if mn is None else mn
    return {"type": "torch.Tensor", "dtype": dtype, "shape": list(shape), "Max": mx, "Min": mn,
            "Mean": mean if mean is not None else 0.1, "Norm": norm if norm is not None else 1.0, "requires_grad": rg}


def write(path, data):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"task": "statistics", "level": "L1", "framework": "pytorch", "dump_data_dir": None, "data": data}))
    return str(path)


def run(tmp_path, target, golden, **kw):
    tp = write(tmp_path / "t" / "dump.json", target)
    gp = write(tmp_path / "g" / "dump.json", golden)
    return compare_dumps(CompareConfig(target=tp, golden=gp, **kw), tp, gp)


def col(rep, name):
    return rep.columns[rep.header.index(name)]


def test_nan_max_turns_red(tmp_path):
    rep = run(tmp_path,
              {"Functional.relu.0.forward": {"input_args": [t(1.0)], "output": [t(float("nan"))]}},
              {"Functional.relu.0.forward": {"input_args": [t(1.0)], "output": [t(1.0)]}})
    assert rep.styles.tolist() == [0, hl.RED]
    assert col(rep, "NPU max")[1] == "Nan"
    assert hl.MSG_R1_NAN in col(rep, "Err_message")[1]
    assert rep.first_red == (1, "Functional.relu.0.forward.output.0")


def test_order_of_magnitude_and_relative_rules(tmp_path):
    # input max diff 2 (5 vs 3), output max diff 60 (100 vs 40): order of magnitude -> yellow;
    # output relative error 150% -> red, which wins
    rep = run(tmp_path,
              {"Torch.matmul.0.forward": {"input_args": [t(5.0)], "output": [t(100.0)]},
               "Torch.add.0.forward": {"input_args": [t(1.0)], "output": [t(1.2)]}},
              {"Torch.matmul.0.forward": {"input_args": [t(3.0)], "output": [t(40.0)]},
               "Torch.add.0.forward": {"input_args": [t(1.0)], "output": [t(1.0)]}})
    ref = rep.ref_styles.tolist()
    msgs = col(rep, "Err_message")
    assert ref[1] == hl.RED and hl.MSG_R3_RED in msgs[1] and hl.MSG_R2 not in msgs[1]
    # add: input identical (rel 0 < 0.01), output rel 0.2 (> 0.1) -> yellow
    assert ref[3] == hl.YELLOW and hl.MSG_R3_YELLOW in msgs[3]
    assert ref[0] == ref[2] == 0
    # verdict: the matmul input (no producer, 40% apart) is where the difference enters -> red; the matmul
    # output only inherits it (60% from inputs 40% apart) -> yellow; add introduces 17% from equal inputs -> red
    assert rep.styles.tolist() == [hl.RED, hl.YELLOW, 0, hl.RED]
    assert msgs[3].endswith("fail: Max differs by 16.7% of magnitude while its inputs agree within fp32 rounding")
    assert col(rep, "Result") == ["Warning", "Warning", "", "Warning"]


def test_yellow_order_of_magnitude_alone(tmp_path):
    # rel errors stay below 0.1 while absolute errors grow 10x
    rep = run(tmp_path,
              {"Torch.mul.0.forward": {"input_args": [t(1002.0)], "output": [t(100050.0)]}},
              {"Torch.mul.0.forward": {"input_args": [t(1000.0)], "output": [t(100000.0)]}})
    assert rep.ref_styles.tolist() == [0, hl.YELLOW]
    # 0.05% of magnitude on fp32 data, from inputs 0.2% apart: within noise, so not coloured, and the
    # reference's rule is explained
    assert rep.styles.tolist() == [0, 0]
    msg = col(rep, "Err_message")[1]
    assert msg.startswith("noise: ") and f"(reference rule: {hl.MSG_R2}; not a fault here)" in msg


def test_requires_grad_mismatch_and_unmatched_rows(tmp_path):
    rep = run(tmp_path,
              {"Torch.exp.0.forward": {"input_args": [t(1.0, rg=True)], "output": [t(2.0)]},
               "Torch.only_in_target.0.forward": {"input_args": [t(1.0)], "output": [t(1.0)]}},
              {"Torch.exp.0.forward": {"input_args": [t(1.0, rg=False)], "output": [t(2.0)]}})
    msgs = col(rep, "Err_message")
    assert col(rep, "Requires_grad Consistent") == ["False", "True", "N/A", "N/A"]
    assert msgs[0] == ("Requires_grad inconsistent. \n" + hl.MSG_R6 +
                       "\nwarn: requires_grad differs between target and golden")
    assert rep.styles.tolist() == [hl.YELLOW, 0, 0, 0]
    assert msgs[2] == msgs[3] == "No bench data matched."
    assert col(rep, "Result")[2:] == ["N/A", "N/A"]
    assert col(rep, "Match") == ["exact", "exact", "unmatched", "unmatched"]
    assert rep.matched == 2


def test_no_highlight(tmp_path):
    rep = run(tmp_path,
              {"Functional.relu.0.forward": {"input_args": [t(1.0)], "output": [t(float("inf"))]}},
              {"Functional.relu.0.forward": {"input_args": [t(1.0)], "output": [t(1.0)]}}, highlight=False)
    assert rep.styles is None and rep.ref_styles is None
    # no colours and no reference-rule text; the verdict is still computed and explained
    assert col(rep, "Err_message") == ["", "Need double check api accuracy. \nfail: NaN/inf on target only (Max inf, Min -inf)"]
    assert rep.red == 1 and col(rep, "Result") == ["", "Warning"]


def test_shape_and_dtype_unmatch(tmp_path):
    rep = run(tmp_path,
              {"Torch.a.0.forward": {"input_args": [t(1.0, shape=(2,)), t(1.0, dtype="torch.int64")], "output": [t(1.0)]}},
              {"Torch.a.0.forward": {"input_args": [t(1.0, shape=(3,)), t(1.0, dtype="torch.float32")], "output": [t(1.0, dtype="torch.bfloat16")]}})
    assert col(rep, "Bench Name") == ["N/A", "N/A", "Torch.a.0.forward.output.0"]


def test_fuzzy_matches_shifted_call_numbers(tmp_path):
    target = {"Functional.linear.0.forward": {"input_args": [t(1.0)], "output": [t(2.0)]},
              "Functional.linear.1.forward": {"input_args": [t(3.0)], "output": [t(4.0)]},
              "Functional.extra.0.forward": {"input_args": [t(3.0)], "output": [t(4.0)]}}
    golden = {"Functional.linear.5.forward": {"input_args": [t(1.0)], "output": [t(2.0)]},
              "Functional.linear.6.forward": {"input_args": [t(3.0)], "output": [t(4.0)]}}
    exact = run(tmp_path, target, golden)
    assert exact.matched == 0
    rep = run(tmp_path, target, golden, fuzzy=True)
    assert col(rep, "Bench Name")[:4] == [
        "Functional.linear.5.forward.input.0", "Functional.linear.5.forward.output.0",
        "Functional.linear.6.forward.input.0", "Functional.linear.6.forward.output.0"]
    assert col(rep, "Bench Name")[4:] == ["N/A", "N/A"]  # no row is lost
    assert col(rep, "Match") == ["fuzzy"] * 4 + ["unmatched"] * 2
    assert col(rep, "Max diff")[:4] == [0.0] * 4



def test_fuzzy_leaves_a_call_run_on_one_side_unmatched(tmp_path):
    """A user's hook ``o * 1.05`` on the target between two ``x * y`` calls: a row-by-row fuzzy match paired
    the hook's call with the golden's ``x * y`` and every later ``__mul__`` one call off (a tiny Llama: the
    advisor named the hook's mul as 'inputs match, output differs'). Whole calls pair by their structure:
    the hook's call (a float argument) stays unmatched and the next call pairs with the golden's second."""
    f = {"type": "float", "value": 1.05}
    target = {"Tensor.__mul__.0.forward": {"input_args": [t(1.0), t(2.0)], "output": [t(3.0)]},
              "Tensor.__mul__.1.forward": {"input_args": [t(4.0), f], "output": [t(4.2)]},
              "Tensor.__mul__.2.forward": {"input_args": [t(4.2), t(5.0)], "output": [t(6.0)]}}
    golden = {"Tensor.__mul__.0.forward": {"input_args": [t(1.0), t(2.0)], "output": [t(3.0)]},
              "Tensor.__mul__.1.forward": {"input_args": [t(4.0), t(5.0)], "output": [t(6.0)]}}
    rep = run(tmp_path, target, golden, fuzzy=True)
    assert col(rep, "Bench Name") == [
        "Tensor.__mul__.0.forward.input.0", "Tensor.__mul__.0.forward.input.1", "Tensor.__mul__.0.forward.output.0",
        "N/A", "N/A", "N/A",
        "Tensor.__mul__.1.forward.input.0", "Tensor.__mul__.1.forward.input.1", "Tensor.__mul__.1.forward.output.0"]
    assert col(rep, "Match") == ["exact"] * 3 + ["unmatched"] * 3 + ["fuzzy"] * 3
    # an argument given on one side only: the calls still pair by their tensors
    target2 = {"Functional.gelu.0.forward": {"input_args": [t(1.0)], "input_kwargs": {"approximate": {
        "type": "str", "value": "tanh"}}, "output": [t(2.0)]}}
    golden2 = {"Functional.gelu.3.forward": {"input_args": [t(1.0)], "output": [t(2.0)]}}
    rep2 = run(tmp_path, target2, golden2, fuzzy=True)
    assert col(rep2, "Bench Name") == ["Functional.gelu.3.forward.input.0", "N/A", "Functional.gelu.3.forward.output.0"]


def test_fuzzy_pairs_a_backward_call_with_its_forward_partner(tmp_path):
    """Backward calls run in another order on the two sides (sdpa against eager attention: the k-th backward
    mul of a shape was another call, and a clean pair had two red rows): a backward call pairs with the
    backward of the golden call its forward paired with."""
    def fwd(a):
        return {"input_args": [t(a), t(a + 1)], "output": [t(a * (a + 1))]}

    def bwd(a):
        return {"input": [t(a)], "output": [t(a + 1), t(a)]}
    target = {"Tensor.__mul__.0.forward": fwd(1.0), "Tensor.__mul__.1.forward": fwd(3.0),
              "Tensor.__mul__.1.backward": bwd(3.0), "Tensor.__mul__.0.backward": bwd(1.0)}
    golden = {"Tensor.__mul__.4.forward": fwd(1.0), "Tensor.__mul__.5.forward": fwd(3.0),
              "Tensor.__mul__.4.backward": bwd(1.0), "Tensor.__mul__.5.backward": bwd(3.0)}
    rep = run(tmp_path, target, golden, fuzzy=True)
    pairs = dict(zip(col(rep, "NPU Name"), col(rep, "Bench Name")))
    assert pairs["Tensor.__mul__.1.backward.input.0"] == "Tensor.__mul__.5.backward.input.0"
    assert pairs["Tensor.__mul__.0.backward.output.1"] == "Tensor.__mul__.4.backward.output.1"
    assert col(rep, "Max diff") == [0.0] * len(rep.names)


def test_module_rows_of_runs_wrapped_differently_pair(tmp_path):
    """A DDP target (``Module.module.fc...``) against an unwrapped golden run (and an FSDP1 one,
    ``Module._fsdp_wrapped_module.fc...``): every module row was unmatched (207 of 1020 rows of a tiny Llama, DDP
    against FSDP1); they pair on their names without the wrapper components, rule ``wrapper``."""
    def side(prefix):
        return {"Functional.linear.0.forward": {"input_args": [t(1.0)], "output": [t(2.0)]},
                f"Module.{prefix}fc.Linear.forward.0": {"input_args": [t(1.0)], "output": [t(2.0)]},
                f"Module.{prefix}fc.Linear.parameters_grad": {"weight": [t(0.5)]}}
    for golden_prefix in ("", "_fsdp_wrapped_module."):
        rep = run(tmp_path / golden_prefix, side("module."), side(golden_prefix))
        assert col(rep, "Bench Name") == ["Functional.linear.0.forward.input.0", "Functional.linear.0.forward.output.0",
                                          f"Module.{golden_prefix}fc.Linear.forward.0.input.0",
                                          f"Module.{golden_prefix}fc.Linear.forward.0.output.0",
                                          f"Module.{golden_prefix}fc.Linear.parameters_grad.weight"]
        assert col(rep, "Match") == ["exact", "exact", "wrapper", "wrapper", "wrapper"]
    # -fm too
    rep = run(tmp_path / "fm", side("module."), side(""), fuzzy=True)
    assert col(rep, "Match") == ["exact", "exact", "fuzzy", "fuzzy", "fuzzy"]
    # both wrapped alike: names pair as they are
    rep = run(tmp_path / "same", side("module."), side("module."))
    assert col(rep, "Match") == ["exact"] * 5

def test_md5_mode(tmp_path):
    def m(v):
        return {"type": "torch.Tensor", "dtype": "torch.float32", "shape": [2], "md5": v, "requires_grad": False}
    rep = run(tmp_path,
              {"Torch.a.0.forward": {"input_args": [m("0000abcd"), {"type": "int", "value": 1}], "output": [m("11112222")]}},
              {"Torch.a.0.forward": {"input_args": [m("0000abcd"), {"type": "int", "value": 1}], "output": [m("33334444")]}})
    assert rep.mode == "md5"
    assert col(rep, "NPU MD5") == ["0000abcd", "83dcefb7", "11112222"]
    assert col(rep, "Result") == ["pass", "pass", "Different"]
    # no statistics next to the CRC: a differing output whose inputs are equal is red
    assert rep.failing == 1 and rep.styles.tolist() == [0, 0, hl.RED]
    assert rep.why[2] == "CRC32 differs (no statistics recorded) while its inputs agree within fp32 rounding"


def test_pairs_cover_every_output_input_combination():
    po, pi = hl._pairs(["a", "a", "a", "a", "b", "b"], ["input", "parameters", "output", "output", "input", "output"])
    assert list(zip(po.tolist(), pi.tolist())) == [(2, 0), (2, 1), (3, 0), (3, 1), (5, 4)]


def test_repeated_names_pair_in_order():
    """The same row name twice (e.g. tensor files named alike): the k-th occurrence pairs with the k-th,
    rows are not multiplied, and the dtype filter looks at the right target row."""
    from msprobe.core.compare.match import match_exact
    from msprobe.core.dump.reader import DumpRows

    def rows(names, dtypes):
        r = DumpRows(path="x", task="statistics", level="L0", framework="pytorch")
        r.names, r.shape, r.dtype = list(names), ["[2]"] * len(names), list(dtypes)
        return r

    t = rows(["a", "b", "a", "c"], ["torch.float32"] * 4)
    g = rows(["a", "a", "b"], ["torch.float32", "torch.int64", "torch.float32"])
    m = match_exact(t, g)
    assert m.target.tolist() == [0, 1, 2, 3]
    assert m.golden.tolist() == [0, 2, -1, -1]  # 2nd 'a' has an int64 golden: unmatched by the dtype filter
    assert m.rule == ["exact", "exact", "unmatched", "unmatched"]
