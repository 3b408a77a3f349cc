"""MindSpore target against a PyTorch golden: three matcher rules found on the cross-framework fault cases
(tests/fault_injection/xf.py), on small hand-made dumps (no framework needed).

* a MindSpore row records no requires_grad: against a PyTorch row it is not "Requires_grad inconsistent"
  (the reference flags every cross-framework row so, a Warning on each);
* -cm and -lm translate MindSpore parameter names (LayerNorm/BatchNorm gamma/beta, Embedding's
  embedding_table) to PyTorch's (weight/bias), in ``parameters`` and ``parameters_grad`` rows;
* a pair -lm guessed whose shapes differ is left unmatched (a 4-D torch.matmul's backward is recorded at its
  bmm view, [4, 8, 8], MindSpore's at its inputs, [2, 2, 8, 8]), and the saved data_mapping yaml leaves it out.
"""

from __future__ import annotations

import csv
import glob
import json
import shutil
from pathlib import Path

import yaml

from msprobe.cli.main import main

LM_DATA = Path(__file__).resolve().parent / "data" / "layer_mapping"


def _t(fw, shape, v, rg=None):
    rec = {"type": f"{fw}.Tensor", "dtype": "Float32" if fw == "mindspore" else "torch.float32", "shape": shape,
           "Max": v, "Min": -v, "Mean": v / 10, "Norm": 3 * v}
    if rg is not None:
        rec["requires_grad"] = rg
    return rec


def _dump(path: Path, fw: str, data: dict) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    (path / "dump.json").write_text(json.dumps({"task": "statistics", "level": "L0", "framework": fw,
                                                "dump_data_dir": None, "data": data}))
    return path / "dump.json"


def _rows(out: Path):
    [f] = glob.glob(str(out / "compare_result_*.csv"))
    with open(f, newline="") as fh:
        return {r["NPU Name"]: r for r in csv.DictReader(fh)}


def _compare(tmp_path, target, golden, *flags):
    out = tmp_path / "out"
    assert main(["compare", "-tp", str(target), "-gp", str(golden), "-o", str(out), "--csv", "-c", "-q",
                 *flags]) == 0
    return _rows(out)


def test_mindspore_rows_without_requires_grad_and_parameter_names(tmp_path):
    ms = _dump(tmp_path / "ms", "mindspore", {
        "Cell.ln.LayerNorm.forward.0": {
            "input_args": [_t("mindspore", [2, 16], 1.0)], "input_kwargs": {},
            "output": [_t("mindspore", [2, 16], 2.0)],
            "parameters": {"gamma": _t("mindspore", [16], 1.0), "beta": _t("mindspore", [16], 0.5)}},
        "Cell.emb.Embedding.parameters_grad.0": {"embedding_table": [_t("mindspore", [8, 16], 0.25)]},
    })
    pt = _dump(tmp_path / "pt", "pytorch", {
        "Module.ln.LayerNorm.forward.0": {
            "input_args": [_t("torch", [2, 16], 1.0, True)], "input_kwargs": {},
            "output": [_t("torch", [2, 16], 2.0, True)],
            "parameters": {"weight": _t("torch", [16], 1.0, True), "bias": _t("torch", [16], 0.5, True)}},
        "Module.emb.Embedding.parameters_grad": {"weight": [_t("torch", [8, 16], 0.25, False)]},
    })
    rows = _compare(tmp_path, ms, pt, "-cm")
    pair = {n: (r["Bench Name"], r["Match"]) for n, r in rows.items()}
    assert pair["Cell.ln.LayerNorm.forward.0.parameters.gamma"] == ("Module.ln.LayerNorm.forward.0.parameters.weight", "cell")
    assert pair["Cell.ln.LayerNorm.forward.0.parameters.beta"] == ("Module.ln.LayerNorm.forward.0.parameters.bias", "cell")
    assert pair["Cell.emb.Embedding.parameters_grad.0.embedding_table"] == ("Module.emb.Embedding.parameters_grad.weight", "cell")
    for name, r in rows.items():
        assert r["Match"] == "cell", name
        # equal values, requires_grad known on one side only: not inconsistent, no Warning
        assert r["NPU Requires_grad"] == "N/A" and r["Bench Requires_grad"] in ("True", "False")
        assert r["Requires_grad Consistent"] == "N/A", name
        assert "Requires_grad inconsistent" not in r["Err_message"], (name, r["Err_message"])
        assert r["Result"] != "Warning", (name, r["Result"])


def test_pytorch_rows_with_differing_requires_grad_stay_inconsistent(tmp_path):
    a = _dump(tmp_path / "a", "pytorch", {"Torch.add.0.forward": {"input_args": [_t("torch", [4], 1.0, True)],
                                                                   "input_kwargs": {}, "output": []}})
    b = _dump(tmp_path / "b", "pytorch", {"Torch.add.0.forward": {"input_args": [_t("torch", [4], 1.0, False)],
                                                                   "input_kwargs": {}, "output": []}})
    r = _compare(tmp_path, a, b)["Torch.add.0.forward.input.0"]
    assert r["Requires_grad Consistent"] == "False" and "Requires_grad inconsistent" in r["Err_message"]


def test_layer_mapping_leaves_a_pair_of_two_shapes_unmatched(tmp_path):
    npu, bench = tmp_path / "npu", tmp_path / "bench"
    shutil.copytree(LM_DATA / "npu", npu)
    shutil.copytree(LM_DATA / "bench", bench)
    rows = _compare(tmp_path, npu / "dump.json", bench / "dump.json", "-lm", str(LM_DATA / "mapping.yaml"))
    name = "MintFunctional.linear.1.backward.input.0"  # these hand-made records keep input_args in backward too
    assert rows[name]["Bench Name"] == "Functional.linear.1.backward.input.0" and rows[name]["Match"] == "layer"
    # the golden backward recorded at another shape (a view's): no longer one tensor
    d = json.loads((bench / "dump.json").read_text())
    rec = d["data"]["Functional.linear.1.backward"]["input_args"][0]
    rec["shape"] = [8] if rec["shape"] != [8] else [4, 2]
    (bench / "dump.json").write_text(json.dumps(d))
    shutil.rmtree(tmp_path / "out")
    rows = _compare(tmp_path, npu / "dump.json", bench / "dump.json", "-lm", str(LM_DATA / "mapping.yaml"))
    assert rows[name]["Match"] == "unmatched" and rows[name]["Bench Name"] == "N/A"
    [saved] = glob.glob(str(tmp_path / "out" / "data_mapping_*.yaml"))
    mapping = yaml.safe_load(open(saved))
    assert name not in mapping and mapping["MintFunctional.linear.1.forward.input.0"] == "Functional.linear.1.forward.input.0"


def _stats_t(fw, shape, mx, mn, mean, norm, rg=None):
    rec = {"type": f"{fw}.Tensor", "dtype": "Float32" if fw == "mindspore" else "torch.float32", "shape": shape,
           "Max": mx, "Min": mn, "Mean": mean, "Norm": norm}
    if rg is not None:
        rec["requires_grad"] = rg
    return rec


def _l1_pair(tmp_path, scale):
    """A MindSpore L1 dump (a Dense's MatMul primitive, unmatched across frameworks, then an add) against the
    PyTorch one (Functional.linear, then the add); the add's second input x ``scale`` on the target."""
    x = (1.0, -1.0, 0.1, 3.0)
    y = (0.4086218476295471, -0.2984495162963867, 0.019670847803354263, 2.4791760444641113)
    yt = tuple(v * scale for v in y)
    s = tuple(a + b for a, b in zip(x, y))
    st = tuple(a + b for a, b in zip(x, yt))
    ms = _dump(tmp_path / "ms", "mindspore", {
        "Primitive.matmul.MatMul.0.forward": {"input_args": [_stats_t("mindspore", [2, 16], *x)], "input_kwargs": {},
                                              "output": [_stats_t("mindspore", [2, 16], *yt)]},
        "Tensor.__add__.0.forward": {"input_args": [_stats_t("mindspore", [2, 16], *x),
                                                    _stats_t("mindspore", [2, 16], *yt)], "input_kwargs": {},
                                     "output": [_stats_t("mindspore", [2, 16], *st)]}})
    pt = _dump(tmp_path / "pt", "pytorch", {
        "Functional.linear.0.forward": {"input_args": [_stats_t("torch", [2, 16], *x, True)], "input_kwargs": {},
                                        "output": [_stats_t("torch", [2, 16], *y, True)]},
        "Tensor.__add__.0.forward": {"input_args": [_stats_t("torch", [2, 16], *x, True),
                                                    _stats_t("torch", [2, 16], *y, True)], "input_kwargs": {},
                                     "output": [_stats_t("torch", [2, 16], *s, True)]}})
    return ms, pt


def test_fp32_rounding_on_an_input_after_an_unmatched_primitive_is_not_red(tmp_path, capsys):
    """The MindSpore L1 control pair of tests/fault_injection/xf.py: the add's input came from a MatMul primitive
    (unmatched: PyTorch has Functional.linear) and differs by 2 fp32 units (other kernels): no culprit."""
    ms, pt = _l1_pair(tmp_path, 1.0 + 2.2e-7)
    rows = _compare(tmp_path, ms, pt, "-am")
    assert rows["Tensor.__add__.0.forward.input.1"]["Match"] == "exact"
    out = capsys.readouterr().out
    assert "red: 0" in out and "first red row" not in out, out


def test_a_real_change_on_such_an_input_is_still_where_it_enters(tmp_path, capsys):
    ms, pt = _l1_pair(tmp_path, 1.05)
    _compare(tmp_path, ms, pt, "-am")
    out = capsys.readouterr().out
    assert "first red row: Tensor.__add__.0.forward.input.1" in out, out
    assert "nearest unmatched op above: Primitive.matmul.MatMul.0.forward" in out


def test_a_module_input_fed_by_another_op_is_where_the_runs_part(tmp_path, capsys):
    """The target leaves a residual add out (tests/fault_injection/xf.py xf_no_residual_b0_stat): its LayerNorm
    reads the attention output, the golden's reads the add after it, and Tensor.__add__.0 pairs the target's
    next add with that one.  The LayerNorm's input is fed by two different compared ops, but a module pairs by
    its path, not by a call number an extra op shifts: that input is where the runs part (red), not a pair of
    two different calls (yellow, which left the first red at a Dense three layers on)."""
    x, a = (1.0, -1.0, 0.1, 2.0), (0.5, -0.4, 0.05, 1.5)
    xa = (1.45, -1.3, 0.15, 3.1)
    l1, l2 = (1.9, -1.7, 0.0, 4.0), (1.8, -1.75, 0.0, 4.0)
    m1, m2 = (0.9, -0.7, 0.01, 2.0), (0.8, -0.75, 0.01, 2.0)
    s1, s2 = (1.3, -1.1, 0.06, 3.2), (2.2, -2.0, 0.16, 5.0)

    def rec(fw, mod, i, o, rg=None):
        return {"input_args": [_stats_t(fw, [2, 16], *i, rg)], "input_kwargs": {}, "output": [_stats_t(fw, [2, 16], *o, rg)]}

    def add(fw, i0, i1, o, rg=None):
        return {"input_args": [_stats_t(fw, [2, 16], *i0, rg), _stats_t(fw, [2, 16], *i1, rg)], "input_kwargs": {},
                "output": [_stats_t(fw, [2, 16], *o, rg)]}
    ms = _dump(tmp_path / "ms", "mindspore", {
        "Cell.attn.Attention.forward.0": rec("mindspore", "attn", x, a),
        "Cell.ln.LayerNorm.forward.0": rec("mindspore", "ln", a, l1),
        "Cell.fc.Dense.forward.0": rec("mindspore", "fc", l1, m1),
        "Tensor.__add__.0.forward": add("mindspore", a, m1, s1)})
    pt = _dump(tmp_path / "pt", "pytorch", {
        "Module.attn.Attention.forward.0": rec("torch", "attn", x, a, True),
        "Tensor.__add__.0.forward": add("torch", x, a, xa, True),
        "Module.ln.LayerNorm.forward.0": rec("torch", "ln", xa, l2, True),
        "Module.fc.Linear.forward.0": rec("torch", "fc", l2, m2, True),
        "Tensor.__add__.1.forward": add("torch", xa, m2, s2, True)})
    cells = tmp_path / "cells.yaml"
    cells.write_text("Dense: Linear\n")
    rows = _compare(tmp_path, ms, pt, "-cm", str(cells))
    assert rows["Cell.ln.LayerNorm.forward.0.input.0"]["Bench Name"] == "Module.ln.LayerNorm.forward.0.input.0"
    out = capsys.readouterr().out
    assert "first red row: Cell.ln.LayerNorm.forward.0.input.0" in out, out
