"""One verdict per report row (msprobe.core.compare.verdict, docs/compare.md "Rule set"): colours, Result,
the console summary and worst ops all follow it.

Hand-made dumps check single rules; a tiny 2-block transformer dumped with our PrecisionDebugger
(tests/verdict_model.py: fp32 golden, bf16 autocast target, and two planted bugs) checks the whole chain:
a control pair names nothing, a planted bug is red where it enters.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from msprobe.cli.compare import summary_lines
from msprobe.core.compare import highlight as hl
from msprobe.core.compare import verdict as vd
from msprobe.core.compare.config import CompareConfig
from msprobe.core.compare.engine import compare_dumps

HERE = Path(__file__).resolve().parent
BF16 = 2.0 ** -8


# ------------------------------------------------------------------------------------------ helpers
def tensor(mx, mn, mean, norm, dtype="torch.float32", shape=(4, 8)):
    return {"type": "torch.Tensor", "dtype": dtype, "shape": list(shape), "Max": mx, "Min": mn, "Mean": mean,
            "Norm": norm, "requires_grad": False}


def write(path: Path, data: dict, task="statistics") -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"task": task, "level": "L1", "framework": "pytorch", "dump_data_dir": None, "data": data}))
    return str(path)


def run(tmp_path, target, golden, **kw):
    tp = write(tmp_path / "t" / "dump.json", target)
    gp = write(tmp_path / "g" / "dump.json", golden)
    return compare_dumps(CompareConfig(target=tp, golden=gp, **kw), tp, gp)


def col(rep, name):
    return rep.columns[rep.header.index(name)]


def row(rep, name):
    return rep.names.index(name)


def assert_consistent(rep):
    """Colours, Result, summary counts and worst ops agree with the verdict on every row."""
    v = rep.verdict
    assert v is not None and len(v) == rep.rows and len(rep.why) == rep.rows
    if rep.styles is not None:
        want = np.where(v == vd.FAIL, hl.RED, np.where(v == vd.WARN, hl.YELLOW, 0))
        assert rep.styles.tolist() == want.tolist()
    assert rep.red == int((v == vd.FAIL).sum()) and rep.yellow == int((v == vd.WARN).sum())
    assert rep.failing == rep.red
    if rep.mode == "statistics":
        result = col(rep, "Result")
        for i in range(rep.rows):
            if v[i] >= vd.WARN:
                assert result[i] == "Warning", rep.names[i]
            elif result[i] == "Warning":
                raise AssertionError(f"{rep.names[i]}: Result Warning on a {vd.NAMES[int(v[i])]} row")
    if rep.mode == "md5":
        result = col(rep, "Result")
        for i in range(rep.rows):
            assert (result[i] == "Different") == (v[i] >= vd.WARN), (rep.names[i], result[i])
            if result[i] == "Different (within noise)":
                assert v[i] == vd.NOISE and col(rep, "NPU MD5")[i] != col(rep, "BENCH MD5")[i]
    msgs = col(rep, "Err_message") if "Err_message" in rep.header else None
    for i in np.flatnonzero(v >= vd.WARN).tolist():
        assert rep.why[i], rep.names[i]
        if msgs is not None:
            assert f"{vd.NAMES[int(v[i])]}: {rep.why[i]}" in msgs[i]
    fails = np.flatnonzero(v == vd.FAIL)
    if len(fails):
        first = int(fails[np.argmin(rep.exec_pos[fails])])  # first red in execution order
        assert rep.first_red == (first, rep.names[first])
    else:
        assert rep.first_red is None
    lines = summary_lines(rep)
    assert f"  red: {rep.red}  yellow: {rep.yellow}  " in "\n".join(lines)
    # worst ops: only red and yellow rows, red first
    ranks = [int(v[rep.names.index(name)]) for name, _ in rep.worst]
    assert ranks == sorted(ranks, reverse=True) and all(r >= vd.WARN for r in ranks)


# ------------------------------------------------------------------------------------------ single rules
def test_identical_minus_inf_is_pass_not_red(tmp_path):
    # a causal mask: both sides hold -inf (min, mean) and +inf (norm); the old rule R1 coloured it red
    masked_t = tensor(0.93359375, float("-inf"), float("-inf"), float("inf"), dtype="torch.bfloat16")
    masked_g = tensor(0.93359375, float("-inf"), float("-inf"), float("inf"))
    rep = run(tmp_path, {"Tensor.masked_fill.0.forward": {"input_args": [tensor(0.93359375, -2.0, 0.1, 3.0)],
                                                          "output": [masked_t]}},
              {"Tensor.masked_fill.0.forward": {"input_args": [tensor(0.93359375, -2.0, 0.1, 3.0)], "output": [masked_g]}})
    assert rep.ref_styles.tolist() == [0, hl.RED]  # the reference's rule R1
    assert rep.verdict.tolist() == [vd.PASS, vd.PASS]
    assert rep.styles.tolist() == [0, 0] and rep.first_red is None and rep.worst == []
    assert rep.why[1] == "both sides -inf/inf: equal"
    assert_consistent(rep)


def test_infinite_on_target_only_is_red_where_it_appears(tmp_path):
    rep = run(tmp_path,
              {"Torch.exp.0.forward": {"input_args": [tensor(90.0, -1.0, 3.0, 200.0)], "output": [tensor(float("inf"), 0.3, float("inf"), float("inf"))]},
               "Torch.log.0.forward": {"input_args": [tensor(float("inf"), 0.3, float("inf"), float("inf"))], "output": [tensor(float("inf"), -1.2, float("inf"), float("inf"))]}},
              {"Torch.exp.0.forward": {"input_args": [tensor(90.0, -1.0, 3.0, 200.0)], "output": [tensor(1.2e39, 0.3, 1e38, 1e39)]},
               "Torch.log.0.forward": {"input_args": [tensor(1.2e39, 0.3, 1e38, 1e39)], "output": [tensor(90.0, -1.2, 3.0, 200.0)]}})
    assert rep.verdict.tolist() == [vd.PASS, vd.FAIL, vd.WARN, vd.WARN]
    assert rep.why[1] == "NaN/inf on target only (Max inf)"
    assert_consistent(rep)


def test_near_zero_mean_gradient_is_noise(tmp_path):
    # bf16 gradient against fp32: mean -1e-9 vs 2e-9 (MeanRelativeErr 300%, the reference's Warning),
    # max and norm within bf16 rounding: noise, not a warning
    g_in = tensor(0.5, -0.5, 1e-3, 4.0)
    t_out = tensor(0.25, -0.2490234375, -1e-9, 1.5, dtype="torch.bfloat16")
    g_out = tensor(0.2501, -0.2493, 2e-9, 1.5007)
    rep = run(tmp_path, {"Tensor.__mul__.0.backward": {"input": [tensor(0.5, -0.5, 1e-3, 4.0, dtype="torch.bfloat16")], "output": [t_out]}},
              {"Tensor.__mul__.0.backward": {"input": [g_in], "output": [g_out]}})
    assert col(rep, "MeanRelativeErr")[1] == "150.0%"  # the reference's column is kept
    assert rep.verdict.tolist() == [vd.PASS, vd.NOISE]
    assert col(rep, "Result") == ["", ""]
    msg = col(rep, "Err_message")[1]
    assert msg.startswith("Need double check api accuracy. \nnoise: ")  # the reference's text, explained
    assert "within bf16 rounding" in msg and "near zero" in msg
    # Min: 0.00028 apart on a magnitude of 0.2501 (the largest |max|, |min| of both sides)
    assert rep.score[1] == pytest.approx((0.2493 - 0.2490234375) / 0.2501, rel=1e-6)
    assert_consistent(rep)


def test_error_from_equal_inputs_is_red_inherited_is_not(tmp_path):
    a = tensor(2.0, -2.0, 0.1, 10.0)
    rep = run(tmp_path,
              {"Functional.linear.0.forward": {"input_args": [a], "output": [tensor(3.0, -3.0, 0.2, 15.0)]},
               "Functional.relu.0.forward": {"input_args": [tensor(3.0, -3.0, 0.2, 15.0)], "output": [tensor(3.0, 0.0, 0.9, 12.0)]}},
              {"Functional.linear.0.forward": {"input_args": [a], "output": [tensor(2.0, -2.0, 0.15, 10.0)]},
               "Functional.relu.0.forward": {"input_args": [tensor(2.0, -2.0, 0.15, 10.0)], "output": [tensor(2.0, 0.0, 0.6, 8.0)]}})
    assert rep.verdict.tolist() == [vd.PASS, vd.FAIL, vd.WARN, vd.WARN]
    assert rep.why[1] == "Max differs by 33.3% of magnitude while its inputs agree within fp32 rounding"
    assert rep.why[3] == "Max differs by 33.3% of magnitude: inherited, its inputs already differ by 33.3%"
    assert rep.worst[0] == ("Functional.linear.0.forward.output.0", "fail: " + rep.why[1])
    assert_consistent(rep)


def test_differing_argument_is_red_and_ranked_first(tmp_path):
    x = tensor(3.0, -3.0, 0.0, 20.0)
    w = tensor(1.0, 1.0, 1.0, 5.656854)
    rep = run(tmp_path,
              {"Functional.linear.0.forward": {"input_args": [x], "output": [tensor(9.0, -9.0, 0.0, 60.0)]},
               "Functional.layer_norm.0.forward": {
                   "input_args": [x, [{"type": "int", "value": 32}], w, w, {"type": "float", "value": 0.1}],
                   "output": [tensor(2.95, -2.95, 0.0, 5.6)]},
               "Functional.softmax.0.forward": {"input_args": [x], "input_kwargs": {"dim": {"type": "int", "value": -1}},
                                                "output": [tensor(0.9, 0.01, 0.25, 2.0)]}},
              {"Functional.linear.0.forward": {"input_args": [x], "output": [tensor(3.0, -3.0, 0.0, 20.0)]},
               "Functional.layer_norm.0.forward": {
                   "input_args": [x, [{"type": "int", "value": 32}], w, w, {"type": "float", "value": 1e-05}],
                   "output": [tensor(3.0, -3.0, 0.0, 5.65)]},
               "Functional.softmax.0.forward": {"input_args": [x], "input_kwargs": {"dim": {"type": "int", "value": 0}},
                                                "output": [tensor(0.9, 0.01, 0.25, 2.0)]}})
    eps_row = row(rep, "Functional.layer_norm.0.forward.input.4")
    dim_row = row(rep, "Functional.softmax.0.forward.input.dim")
    assert rep.verdict[eps_row] == vd.FAIL and rep.verdict[dim_row] == vd.FAIL
    assert rep.why[eps_row] == "argument eps (position 4) differs: 0.1 vs 1e-05"
    assert rep.why[dim_row] == "argument dim differs: -1 vs 0"
    assert rep.verdict[row(rep, "Functional.layer_norm.0.forward.input.1.0")] == vd.PASS
    # ranked before the larger tensor error of linear (200% of magnitude)
    assert [name for name, _ in rep.worst[:2]] == ["Functional.layer_norm.0.forward.input.4",
                                                   "Functional.softmax.0.forward.input.dim"]
    assert rep.worst[2][0] == "Functional.linear.0.forward.output.0"
    assert col(rep, "Result")[eps_row] == "Warning" and rep.styles[eps_row] == hl.RED
    assert_consistent(rep)


def test_argument_differing_in_tensor_mode_is_compared_by_value(tmp_path):
    entry = lambda eps: {"Functional.layer_norm.0.forward": {  # noqa: E731
        "input_args": [{"type": "float", "value": eps}], "output": []}}
    tp = write(tmp_path / "t" / "dump.json", entry(0.1), task="tensor")
    gp = write(tmp_path / "g" / "dump.json", entry(1e-5), task="tensor")
    rep = compare_dumps(CompareConfig(target=tp, golden=gp), tp, gp)
    msg = col(rep, "Err_message")[0]
    assert "NPU does not have data file" not in msg
    assert msg == "Non-tensor argument, compared by value: differs.\nfail: argument eps (position 4) differs: 0.1 vs 1e-05" \
        or msg.endswith("differs: 0.1 vs 1e-05")
    assert col(rep, "Accuracy Reached or Not")[0] == "None"  # the reference's column, as it computes it
    assert rep.verdict.tolist() == [vd.FAIL]


def test_requires_grad_difference_is_yellow(tmp_path):
    a = tensor(1.0, -1.0, 0.0, 2.0)
    b = dict(a, requires_grad=True)
    rep = run(tmp_path, {"Torch.exp.0.forward": {"input_args": [b], "output": [a]}},
              {"Torch.exp.0.forward": {"input_args": [a], "output": [a]}})
    assert rep.verdict.tolist() == [vd.WARN, vd.PASS]
    assert rep.why[0] == "requires_grad differs between target and golden"


def test_worst_ops_label_and_order(tmp_path):
    x = tensor(1.0, -1.0, 0.0, 4.0)
    target, golden = {}, {}
    for k, (t_out, g_out) in enumerate([
            (tensor(1.1, -1.0, 0.0, 4.0), tensor(1.0, -1.0, 0.0, 4.0)),    # Max 9.09% of magnitude
            (tensor(1.0, -1.0, 0.6, 4.0), tensor(1.0, -1.0, 1e-9, 4.0)),   # Mean 60% (the reference: 6e10%)
            (tensor(1.0, -1.0, 0.0, 2.0), tensor(1.0, -1.0, 0.0, 4.0))]):  # L2 norm 50% relative
        target[f"Torch.op{k}.0.forward"] = {"input_args": [x], "output": [t_out]}
        golden[f"Torch.op{k}.0.forward"] = {"input_args": [x], "output": [g_out]}
    rep = run(tmp_path, target, golden)
    assert float(col(rep, "MeanRelativeErr")[3].rstrip("%")) == pytest.approx(6e10)
    assert [w[0] for w in rep.worst] == ["Torch.op1.0.forward.output.0", "Torch.op2.0.forward.output.0",
                                         "Torch.op0.0.forward.output.0"]
    assert rep.worst[0][1].startswith("fail: Mean differs by 60% of magnitude")
    assert rep.worst[1][1].startswith("fail: L2 norm differs by 50% relative")
    assert rep.worst[2][1].startswith("fail: Max differs by 9.09% of magnitude")
    text = "\n".join(summary_lines(rep))
    assert "worst ops (red first, then yellow; error = |target - golden| of the named statistic over the tensor's " \
           "magnitude max(|max|, |min|), L2 norm relative):" in text
    assert text.index("1. Torch.op1") < text.index("2. Torch.op2") < text.index("3. Torch.op0")
    assert_consistent(rep)


def test_mostly_unmatched_warns_and_claims_nothing(tmp_path):
    x = tensor(1.0, -1.0, 0.0, 4.0)
    target = {f"Torch.a{k}.0.forward": {"input_args": [x], "output": [x]} for k in range(5)}
    golden = {"Torch.a0.0.forward": {"input_args": [x], "output": [x]},
              "Torch.other.0.forward": {"input_args": [x], "output": [x]}}
    rep = run(tmp_path, target, golden)
    assert (rep.rows, rep.matched) == (10, 2)
    text = "\n".join(summary_lines(rep))
    assert "WARNING: 8 of 10 target rows (80%) have no golden counterpart" in text
    assert "-fm" in text and "-am" in text and "-lm" in text
    assert "not compared: 8" in text
    assert "all 2 compared rows are equal" in text and "all 10" not in text
    assert "meet" not in text
    half = run(tmp_path, {k: target[k] for k in list(target)[:2]}, golden)  # 2 of 4 rows unmatched: no warning
    assert "WARNING" not in "\n".join(summary_lines(half))


def test_scaled_error_and_units():
    t = np.array([[1.0], [-1.0], [1e-9], [5.0]])
    g = np.array([[1.0], [-1.0], [-1e-9], [5.0]])
    score, stat, identical, _, _ = vd.scaled_errors(t, g)
    assert score[0] == pytest.approx(2e-9) and vd.STAT_LABELS[stat[0]] == "Mean" and not identical[0]
    u = vd.unit_roundoff(["torch.bfloat16", "torch.float16", "torch.float32", "torch.int64", "<class 'float'>", "Float16"])
    assert u[:4].tolist() == [2.0 ** -8, 2.0 ** -11, 2.0 ** -24, 0.0]
    assert np.isnan(u[4]) and u[5] == 2.0 ** -11


def test_verdict_without_highlighting(tmp_path):
    a = tensor(1.0, -1.0, 0.0, 2.0)
    rep = run(tmp_path, {"Torch.exp.0.forward": {"input_args": [a], "output": [tensor(3.0, 0.0, 1.0, 4.0)]}},
              {"Torch.exp.0.forward": {"input_args": [a], "output": [tensor(2.0, 0.0, 1.0, 4.0)]}}, highlight=False)
    assert rep.styles is None and rep.verdict.tolist() == [vd.PASS, vd.FAIL]
    assert col(rep, "Result") == ["", "Warning"] and rep.red == 1
    assert_consistent(rep)


# ------------------------------------------------------------------------------------------ real dumps
MODEL_DUMPS = ["golden:statistics", "target:statistics", "attn_bug:statistics", "eps_bug:statistics", "grad_bug:statistics",
               "mul_bug:statistics", "pg_bug:statistics",
               "golden:tensor", "target:tensor", "eps_bug:tensor", "golden:md5", "target:md5"]


@pytest.fixture(scope="module")
def model_dumps(tmp_path_factory):
    pytest.importorskip("torch")
    root = tmp_path_factory.mktemp("verdict_model")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(HERE.parent), os.environ.get("PYTHONPATH", "")]))
    res = subprocess.run([sys.executable, str(HERE / "verdict_model.py"), str(root)] + MODEL_DUMPS,
                         capture_output=True, text=True, env=env, timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    return root


def compare_model(root, variant, mode):
    t = str(root / f"{variant}-{mode}" / "step0" / "rank" / "dump.json")
    g = str(root / f"golden-{mode}" / "step0" / "rank" / "dump.json")
    return compare_dumps(CompareConfig(target=t, golden=g), t, g)


@pytest.mark.parametrize("mode", ["statistics", "md5", "tensor"])
def test_control_pair_names_nothing(model_dumps, mode):
    rep = compare_model(model_dumps, "target", mode)
    c = vd.counts(rep.verdict)
    assert c[vd.FAIL] == 0 and c[vd.WARN] == 0
    assert c[vd.NOISE] > 100  # bf16 against fp32 differs nearly everywhere, within rounding
    if mode == "md5":
        assert col(rep, "Result").count("Different (within noise)") == c[vd.NOISE]
    assert rep.worst == [] and rep.first_red is None
    text = "\n".join(summary_lines(rep))
    assert "no culprit: all" in text and "compared rows agree within bf16 rounding" in text
    # the largest difference stays inside the rounding allowance of bf16
    assert np.nanmax(rep.score[rep.verdict == vd.NOISE]) <= vd.K_ROUND * BF16
    assert_consistent(rep)


def test_attention_bug_is_red_where_it_enters(model_dumps):
    rep = compare_model(model_dumps, "attn_bug", "statistics")
    # scores * 1.5 is a target-only Tensor.__mul__ (unmatched); the first compared row that receives its
    # result is where the difference enters
    assert rep.first_red[1] == "Tensor.masked_fill.1.forward.input.0"
    assert "no compared op produced" in rep.why[rep.first_red[0]]
    unmatched_mul = [n for n, b in zip(rep.names, col(rep, "Bench Name")) if n.startswith("Tensor.__mul__") and b == "N/A"]
    assert unmatched_mul and rep.names.index(unmatched_mul[0]) < rep.first_red[0]
    # nothing before it is red or yellow (block 0 is identical up to rounding)
    assert (rep.verdict[: rep.first_red[0]] <= vd.NOISE).all()
    # downstream rows inherit: yellow or noise, never another red
    assert rep.red == 1 and rep.yellow > 0
    assert rep.worst[0][0] == "Tensor.masked_fill.1.forward.input.0"
    assert_consistent(rep)


def test_backward_fault_is_red_where_it_enters(model_dumps):
    # a tensor hook scales the gradient reaching block 1's attention output by 1.5; the hook's multiply is
    # recorded as a target-only Tensor.__mul__ (unmatched), and the backward call that receives its
    # result is where the difference enters
    rep = compare_model(model_dumps, "grad_bug", "statistics")
    assert rep.red == 1 and rep.first_red[1] == "Tensor.reshape.7.backward.input.0"
    assert "no compared op produced" in rep.why[rep.first_red[0]]
    # forward rows, and backward rows computed before it, are all within rounding
    fwd = [i for i, a in enumerate(rep.apis) if ".backward" not in a and "parameters_grad" not in a]
    assert (rep.verdict[fwd] <= vd.NOISE).all()
    # parameter gradients are computed after it (listed with the forward call in the dump): inherited
    pg = [i for i, n in enumerate(rep.names) if "parameters_grad" in n and n.startswith("Module.block0.")]
    assert (rep.verdict[pg] != vd.FAIL).all() and (rep.verdict[pg] == vd.WARN).any()
    assert_consistent(rep)


def test_small_forward_fault_next_to_a_target_only_op(model_dumps):
    # block 1's activation x1.02: a 2% difference (bf16 noise stays below 1%) produced by a target-only
    # Tensor.__mul__; the input that receives it is red and names that op
    rep = compare_model(model_dumps, "mul_bug", "statistics")
    assert rep.red == 1 and rep.first_red[1] == "Functional.linear.7.forward.input.0"
    assert rep.why[rep.first_red[0]].endswith("nearest unmatched op above: Tensor.__mul__.0.forward")
    assert_consistent(rep)


def test_parameter_gradient_fault(model_dumps):
    rep = compare_model(model_dumps, "pg_bug", "statistics")
    assert rep.red == 1 and rep.first_red[1] == "Module.block0.fc1.Linear.parameters_grad.weight"
    assert rep.why[rep.first_red[0]] == "L2 norm differs by 33.3% relative while its inputs agree within bf16 rounding"
    assert_consistent(rep)


@pytest.mark.parametrize("mode", ["statistics", "tensor"])
def test_eps_bug_flags_the_argument_first(model_dumps, mode):
    rep = compare_model(model_dumps, "eps_bug", mode)
    name = "Functional.layer_norm.2.forward.input.4"
    assert rep.first_red == (rep.names.index(name), name)
    assert rep.why[rep.first_red[0]] == "argument eps (position 4) differs: 0.1 vs 1e-05"
    assert rep.worst[0] == (name, "fail: argument eps (position 4) differs: 0.1 vs 1e-05")
    # the LayerNorm whose inputs agree and whose output differs is red too; nothing before it is
    out = rep.names.index("Functional.layer_norm.2.forward.output.0")
    assert rep.verdict[out] == vd.FAIL and "while its inputs agree within bf16 rounding" in rep.why[out]
    assert (rep.verdict[: rep.first_red[0]] <= vd.NOISE).all()
    if mode == "tensor":
        msgs = col(rep, "Err_message")
        assert not any("NPU does not have data file" in m for m, v in zip(msgs, rep.verdict) if v != vd.NOT_COMPARED
                       and rep.names[msgs.index(m)].endswith(".4"))
        assert msgs[rep.first_red[0]].startswith("Non-tensor argument, compared by value: differs.")
    assert_consistent(rep)


def test_written_xlsx_colours_follow_the_verdict(model_dumps, tmp_path):
    openpyxl = pytest.importorskip("openpyxl")
    from msprobe.core.compare.runner import write_report

    rep = compare_model(model_dumps, "eps_bug", "statistics")
    path = write_report(rep, str(tmp_path / "r.xlsx"), "xlsx")
    ws = openpyxl.load_workbook(path).worksheets[0]
    fills = []
    for r in ws.iter_rows(min_row=2):
        fs = {c.fill.fgColor.rgb for c in r if c.fill is not None and c.fill.fill_type == "solid"}
        fills.append(fs.pop() if fs else None)
    want = [{vd.FAIL: "FFFF0000", vd.WARN: "00FFFF00"}.get(int(v)) for v in rep.verdict]
    assert fills == want and "FFFF0000" in fills


def test_integer_result_of_noisy_inputs_is_not_red(tmp_path):
    # argmax of bf16 logits against fp32 ones: one index flips; identical inputs with a different index
    # are red
    def idx(mx, mn, mean):
        return tensor(mx, mn, mean, 20.0, dtype="torch.int64", shape=(8,))
    t_logits = tensor(2.0, -2.0, 0.1, 9.0, dtype="torch.bfloat16")
    g_logits = tensor(2.001, -2.0, 0.1, 9.0)
    rep = run(tmp_path,
              {"Torch.argmax.0.forward": {"input_args": [t_logits], "output": [idx(7, 0, 3.5)]},
               "Torch.argmax.1.forward": {"input_args": [g_logits], "output": [idx(7, 0, 3.5)]}},
              {"Torch.argmax.0.forward": {"input_args": [g_logits], "output": [idx(7, 0, 3.25)]},
               "Torch.argmax.1.forward": {"input_args": [g_logits], "output": [idx(7, 0, 3.25)]}})
    assert rep.verdict.tolist() == [vd.NOISE, vd.NOISE, vd.PASS, vd.FAIL]
    assert "integer/bool result" in rep.why[1]
    assert_consistent(rep)
