"""The advisor and -da walk the rows in EXECUTION order (issue 16 items 1, 5, 6 and the first-divergence block):

* parameter gradients (``Module.X.parameters_grad``, written in the forward section of a G8 / msprobe dump)
  count after the backward records that compute them, so they never hide the real first divergence;
* the advisor file's ``Line`` and the console's ``report row`` are the same number, the xlsx / csv row;
* a failing input names the op that produced it (a target-only op is a strong suspect);
* ``-da`` works on md5 reports and prints ``rank_N: none (<reason>)`` when nothing fails;
* the failing rows are the verdict's FAIL rows when the report has verdicts, else the mode's rule.
"""

import csv
import json
import re

import numpy as np
import pytest

from msprobe.core.advisor import advisor as adv
from msprobe.core.advisor.diff_analyze import first_divergence, format_first
from msprobe.core.advisor.table import OpTable, execution_group_order
from msprobe.core.compare import verdict as vd
from test_diff_analyze import entry, pair, run, tensor


# ---------------------------------------------------------------------------------------------- helpers
def md5_tensor(crc, dtype="torch.float32"):
    t = tensor(dtype=dtype)
    t["md5"] = crc
    return t


def mix_dump(bad_grad=0.0, bad_gelu=0.0, md5=False):
    """A mix-level dump of fc1 -> gelu in the reference's (G8) layout: fc1's parameters_grad placeholder
    right after its forward record, backward records in the order backward ran.  ``bad_grad``: relative
    error of fc1's weight gradient; ``bad_gelu``: of gelu's forward output (and everything after it)."""
    def t(err=0.0, crc="00000000"):
        rec = tensor(1.0, err)
        if md5:
            rec["md5"] = crc if err == 0.0 else "deadbeef"
        return rec

    return {
        "Functional.linear.0.forward": entry([t()], [t()]),
        "Module.fc1.Linear.forward.0": entry([t()], [t()]),
        "Module.fc1.Linear.parameters_grad": {"weight": [t(bad_grad)]},
        "Functional.gelu.0.forward": entry([t()], [t(bad_gelu)]),
        "Module.act.GELU.forward.0": entry([t()], [t(bad_gelu)]),
        "Functional.gelu.0.backward": {"input": [t(bad_gelu)], "output": [t(bad_gelu)]},
        "Module.act.GELU.backward.0": {"input": [t(bad_gelu)], "output": [t(bad_gelu)]},
        "Module.fc1.Linear.backward.0": {"input": [t(bad_gelu)], "output": []},
        "Functional.linear.0.backward": {"input": [t(bad_gelu)], "output": [t(bad_gelu)]},
    }


def advisor_file(out):
    (f,) = out.glob("advisor*.txt")
    fields = {}
    for line in f.read_text().splitlines():
        key, sep, value = line.partition(": ")
        if sep and key in ("Line", "Suspect Nodes", "Expert Advice", "Category", "Reason", "Producer"):
            fields[key] = value
    return fields


class Rep:
    """A minimal in-memory statistics report (what engine.Report offers the advisor)."""

    mode = "statistics"

    def __init__(self, names, apis, dtype="torch.float32", bench_dtype=None, result=None, verdict=None,
                 matched=None, stats=None):
        n = len(names)
        self.names, self.apis = names, apis
        bench = [nm if (matched is None or matched[k]) else "N/A" for k, nm in enumerate(names)]
        st = stats or [(1.0, -1.0, 0.1, 4.0)] * n
        self.header = ["NPU Name", "Bench Name", "NPU Dtype", "Bench Dtype", "NPU Tensor Shape", "NPU max", "NPU min",
                       "NPU mean", "NPU l2norm", "Result"]
        self.columns = [names, bench, [dtype] * n, [bench_dtype or dtype] * n, ["[4, 4]"] * n,
                        [s[0] for s in st], [s[1] for s in st], [s[2] for s in st], [s[3] for s in st],
                        result or [""] * n]
        self.verdict = None if verdict is None else np.asarray(verdict, dtype=np.int8)


# ---------------------------------------------------------------------------------------------- the order
G8 = ["Functional.linear.0.forward", "Module.fc1.Linear.forward.0", "Module.fc1.Linear.parameters_grad",
      "Functional.gelu.0.forward", "Module.act1.GELU.forward.0", "Functional.linear.1.forward",
      "Module.fc2.Linear.forward.0", "Module.fc2.Linear.parameters_grad", "Functional.cross_entropy.0.forward",
      "Functional.cross_entropy.0.backward", "Functional.linear.1.backward", "Module.fc2.Linear.backward.0",
      "Functional.gelu.0.backward", "Module.act1.GELU.backward.0", "Module.fc1.Linear.backward.0",
      "Functional.linear.0.backward", "Distributed.all_reduce.0.forward"]


def test_parameter_gradients_follow_the_backward_that_computes_them():
    order = [G8[i] for i in execution_group_order(G8)]
    assert order == [
        "Functional.linear.0.forward", "Module.fc1.Linear.forward.0", "Functional.gelu.0.forward",
        "Module.act1.GELU.forward.0", "Functional.linear.1.forward", "Module.fc2.Linear.forward.0",
        "Functional.cross_entropy.0.forward", "Functional.cross_entropy.0.backward", "Functional.linear.1.backward",
        "Module.fc2.Linear.backward.0", "Module.fc2.Linear.parameters_grad",  # after its module's backward
        "Functional.gelu.0.backward", "Module.act1.GELU.backward.0", "Module.fc1.Linear.backward.0",
        # fc1's input needs no gradient: its module hook fires before linear.0's backward, which computes the grad
        "Functional.linear.0.backward", "Module.fc1.Linear.parameters_grad",
        "Distributed.all_reduce.0.forward",
    ]


def test_order_of_other_layouts():
    # G26: parameters_grad.<k> is written when the gradient is accumulated, inside backward: kept in place
    g26 = ["Functional.linear.0.forward", "Module.fc.Linear.forward.0", "Functional.linear.0.backward",
           "Module.fc.Linear.parameters_grad.0", "Module.fc.Linear.backward.0"]
    assert execution_group_order(g26).tolist() == [0, 1, 2, 3, 4]
    # no module backward record (L0 module missing): to the end of the backward records that follow it
    lone = ["Module.fc.Linear.forward.0", "Module.fc.Linear.parameters_grad", "Functional.relu.0.forward",
            "Functional.relu.0.backward", "Functional.mul.0.backward", "Functional.add.0.forward"]
    assert [lone[i] for i in execution_group_order(lone)] == [
        "Module.fc.Linear.forward.0", "Functional.relu.0.forward", "Functional.relu.0.backward",
        "Functional.mul.0.backward", "Module.fc.Linear.parameters_grad", "Functional.add.0.forward"]
    # forward only (no backward recorded): dump order
    fwd = ["Module.fc.Linear.forward.0", "Module.fc.Linear.parameters_grad", "Functional.relu.0.forward"]
    assert execution_group_order(fwd).tolist() == [0, 1, 2]
    # rows inside a group keep their order
    rep = Rep(["a.input.0", "a.output.0", "g.weight", "g.bias", "b.input.0"],
              ["Module.m.L.forward.0", "Module.m.L.forward.0", "Module.m.L.parameters_grad",
               "Module.m.L.parameters_grad", "Module.m.L.backward.0"])
    t = OpTable(rep)
    assert t.exec_order().tolist() == [0, 1, 4, 2, 3]
    assert t.exec_position().tolist() == [0, 1, 3, 4, 2]


# ---------------------------------------------------------------------------------------------- item 1
@pytest.mark.parametrize("md5", [False, True], ids=["statistics", "md5"])
def test_a_parameter_gradient_earlier_in_the_dump_does_not_hide_the_first_divergence(tmp_path, capsys, md5):
    t, g = pair(tmp_path, mix_dump(0.9, 0.9, md5), mix_dump(md5=md5), task="statistics")
    out = tmp_path / "out"
    code, stdout, err = run(["compare", "-tp", t, "-gp", g, "-o", out, "-q", "-da"], capsys)
    assert code == 0, err
    f = advisor_file(out)
    assert f["Suspect Nodes"] == "Functional.gelu.0.forward.output.0"  # not Module.fc1.Linear.parameters_grad.weight
    assert f["Category"] == adv.CAT_FORWARD
    assert f"advisor: first failing row: Functional.gelu.0.forward.output.0 (report row {f['Line']}," in stdout
    assert f"  rank_0: Functional.gelu.0.forward.output.0 (report row {f['Line']})" in stdout
    (analyze,) = out.glob("diff_analyze_*.json")
    doc = json.loads(analyze.read_text())
    assert doc["msprobe_suspects"]["first_divergence"]["rank_0"]["row"] == "Functional.gelu.0.forward.output.0"
    # the reference rule (dump order) stays in the json for compatibility
    assert [n["op_name"] for n in doc["rank_0"]] == ["Module.fc1.Linear.parameters_grad"]


def test_verdict_fail_rows_in_execution_order():
    names = ["Module.fc.L.forward.0.output.0", "Module.fc.L.parameters_grad.weight", "Functional.gelu.0.forward.output.0",
             "Module.fc.L.backward.0.input.0"]
    apis = ["Module.fc.L.forward.0", "Module.fc.L.parameters_grad", "Functional.gelu.0.forward", "Module.fc.L.backward.0"]
    # the verdict wins over the mode's Result: row 0's Warning is bf16 noise, rows 1 and 2 FAIL
    rep = Rep(names, apis, result=["Warning", "", "", ""], verdict=[vd.NOISE, vd.FAIL, vd.FAIL, vd.PASS])
    a = adv.advise(rep)
    assert (a.line, a.node, a.report_row, a.failing) == (2, names[2], 4, 2)
    assert adv.advise(Rep(names, apis, result=["Warning", "", "", ""])).node == names[0]  # no verdict: the mode's rule
    only_grad = Rep(names, apis, verdict=[vd.PASS, vd.FAIL, vd.PASS, vd.PASS])
    a = adv.advise(only_grad)
    assert a.category == adv.CAT_PARAMS_GRAD and "no row that ran before it" in a.reason


# ---------------------------------------------------------------------------------------------- none
@pytest.mark.parametrize("verdicts,dtype,reason", [
    ([vd.PASS, vd.NOISE, vd.NOISE], "torch.bfloat16", "all differences are within bf16 rounding"),
    ([vd.PASS, vd.PASS, vd.PASS], "torch.float32", "no row differs"),
    ([vd.PASS, vd.NOT_COMPARED, vd.NOISE], "torch.float16", "all differences are within fp16 rounding; 1 of 3 rows were not compared"),
    ([vd.NOT_COMPARED] * 3, "torch.float32", "no row was compared"),
])
def test_no_failing_row_says_why(verdicts, dtype, reason):
    names = [f"Functional.op{k}.0.forward.output.0" for k in range(3)]
    rep = Rep(names, [n.rsplit(".", 2)[0] for n in names], dtype=dtype, bench_dtype="torch.float32", verdict=verdicts)
    a = adv.advise(rep)
    assert a.line is None and a.reason.startswith(reason)
    assert adv.summary_lines(a) == [f"advisor: no failing row: {a.reason.rstrip('.')}"]
    assert "meet" not in adv.summary_lines(a)[0]
    if vd.NOT_COMPARED in verdicts:
        assert a.expert_advice != adv.NO_ERR_SUGGEST  # never "all data meets the requirements" about unmatched rows
    fd = first_divergence(OpTable(rep))
    assert format_first("rank_0", fd).startswith(f"  rank_0: none ({reason}")


def test_control_pair_names_no_row(tmp_path, capsys):
    t, g = pair(tmp_path, mix_dump(), mix_dump())
    out = tmp_path / "out"
    code, stdout, err = run(["compare", "-tp", t, "-gp", g, "-o", out, "-q", "-da"], capsys)
    assert code == 0, err
    assert "  rank_0: none (" in stdout
    assert "advisor: no failing row: " in stdout and "all rows meet" not in stdout
    assert advisor_file(out)["Line"] == "NA"


# ---------------------------------------------------------------------------------------------- item 5
@pytest.mark.parametrize("fmt", ["xlsx", "csv"])
def test_file_and_console_give_the_row_a_user_sees(tmp_path, capsys, fmt):
    t, g = pair(tmp_path, mix_dump(0.9, 0.9), mix_dump())
    out = tmp_path / "out"
    code, stdout, err = run(["compare", "-tp", t, "-gp", g, "-o", out, "-q"] + (["--csv"] if fmt == "csv" else []), capsys)
    assert code == 0, err
    f = advisor_file(out)
    line = int(f["Line"])
    assert re.search(rf"first failing row: {re.escape(f['Suspect Nodes'])} \(report row {line},", stdout)
    (report,) = out.glob(f"compare_result_*.{fmt}")
    if fmt == "xlsx":
        import openpyxl

        ws = openpyxl.load_workbook(report, read_only=True).worksheets[0]
        assert ws.cell(row=1, column=1).value == "NPU Name"
        assert ws.cell(row=line, column=1).value == f["Suspect Nodes"]
    else:
        with open(report, newline="", encoding="utf-8-sig") as fh:
            rows = list(csv.reader(fh))
        assert rows[0][0] == "NPU Name"
        assert rows[line - 1][0] == f["Suspect Nodes"]  # csv line N (1-based) is the same row


# ---------------------------------------------------------------------------------------------- item 6
def _mul_case(md5=False, record_mul=True):
    """target: op0 -> Tensor.__mul__ (only in the target) -> softmax; golden: op0 -> softmax."""
    def t(err=0.0, crc="0000000a"):
        rec = tensor(1.0, err)
        if md5:
            rec["md5"] = crc
        return rec

    scaled = tensor(1.0, 0.9)  # md5 dumps hold the statistics too
    if md5:
        scaled["md5"] = "beefbeef"
    target = {"Functional.op0.0.forward": entry([t()], [t()])}
    if record_mul:
        target["Tensor.__mul__.0.forward"] = entry([t(), {"type": "float", "value": 1.5}], [scaled])
    out = tensor(1.0, 0.3)
    if md5:
        out["md5"] = "cafecafe"
    target["Functional.softmax.0.forward"] = entry([scaled], [out])
    golden = {"Functional.op0.0.forward": entry([t()], [t()]),
              "Functional.softmax.0.forward": entry([t()], [t(crc="0000000b")])}
    return target, golden


@pytest.mark.parametrize("md5", [False, True], ids=["statistics", "md5"])
def test_failing_input_names_the_target_only_producer(tmp_path, capsys, md5):
    target, golden = _mul_case(md5)
    t, g = pair(tmp_path, target, golden)
    out = tmp_path / "out"
    code, stdout, err = run(["compare", "-tp", t, "-gp", g, "-o", out, "-q", "-da"], capsys)
    assert code == 0, err
    f = advisor_file(out)
    assert f["Suspect Nodes"] == "Functional.softmax.0.forward.input.0" and f["Line"] == "7"
    # rows: op0 in/out (2, 3), mul in.0/in.1/out (4, 5, 6), softmax in (7)
    assert f["Producer"] == ("produced by Tensor.__mul__.0.forward (Tensor.__mul__.0.forward.output.0, report row 6), "
                             "which has no counterpart in the golden run: an op only the target calls, a strong suspect")
    assert f["Category"] == adv.CAT_TARGET_ONLY
    assert "produced by Tensor.__mul__.0.forward" in f["Reason"]
    assert ("  rank_0: Functional.softmax.0.forward.input.0 (report row 7), produced by "
            "Tensor.__mul__.0.forward.output.0 (report row 6), which only the target has") in stdout
    (analyze,) = out.glob("diff_analyze_*.json")
    fd = json.loads(analyze.read_text())["msprobe_suspects"]["first_divergence"]["rank_0"]
    assert fd["suspect"] == "Tensor.__mul__.0.forward"
    assert fd["producer"] == {"row": "Tensor.__mul__.0.forward.output.0", "report_row": 6,
                              "op_name": "Tensor.__mul__.0.forward", "matched": False}


def test_failing_input_without_a_recorded_producer(tmp_path, capsys):
    target, golden = _mul_case(record_mul=False)
    t, g = pair(tmp_path, target, golden)
    out = tmp_path / "out"
    code, stdout, err = run(["compare", "-tp", t, "-gp", g, "-o", out, "-q"], capsys)
    assert code == 0, err
    f = advisor_file(out)
    assert f["Suspect Nodes"] == "Functional.softmax.0.forward.input.0"
    assert f["Producer"].startswith("the op that produced this input was not recorded")
    assert f["Category"] == adv.CAT_INPUT


def test_producer_prefers_the_api_over_the_module_holding_the_same_tensor():
    s = (2.0, -2.0, 0.5, 8.0)
    names = ["Functional.linear.0.forward.output.0", "Module.fc.Linear.forward.0.output.0",
             "Functional.gelu.0.forward.input.0"]
    apis = ["Functional.linear.0.forward", "Module.fc.Linear.forward.0", "Functional.gelu.0.forward"]
    rep = Rep(names, apis, verdict=[vd.PASS, vd.PASS, vd.FAIL], stats=[s, s, s])
    a = adv.advise(rep)
    assert a.producer == 0 and "produced by Functional.linear.0.forward" in a.producer_note
    assert "still matches the golden run" in a.producer_note and a.culprit == 2


# ---------------------------------------------------------------------------------------------- -da on md5
def test_diff_analyze_on_an_md5_dump_with_bool_arguments(tmp_path, capsys):
    # issue 17: ValueError: 'NPU max' is not in list (phase 1 converted bool cells of statistics columns)
    def md5_dump(bad):
        flag = {"type": "bool", "value": True}
        out = tensor(1.0, 0.9 if bad else 0.0)
        out["md5"] = "deadbeef" if bad else "00000003"
        return {"Functional.op0.0.forward": entry([md5_tensor("00000001"), flag], [md5_tensor("00000002")]),
                "Functional.op1.0.forward": entry([md5_tensor("00000002")], [out])}

    t, g = pair(tmp_path, md5_dump(True), md5_dump(False))
    out = tmp_path / "out"
    code, stdout, err = run(["compare", "-tp", t, "-gp", g, "-o", out, "-q", "-da"], capsys)
    assert code == 0, err
    assert "  rank_0: Functional.op1.0.forward.output.0 (report row 6)" in stdout
    (per_rank,) = out.glob("compare_result_rank*.json")
    item = json.loads(per_rank.read_text())["Functional.op0.0.forward"]["op_items"][1]
    assert item["NPU Dtype"] == "<class 'bool'>" and "NPU max" not in item


# ---------------------------------------------------------------------------------------------- real dumps
def _torch():
    return pytest.importorskip("torch")


def _dump_transformer(tmp_path, name, bug, task):
    """A 1-block transformer, one training step, dumped at level mix; ``bug``: attention scores x1.5 before softmax."""
    torch = _torch()
    import torch.nn as nn
    import torch.nn.functional as F

    from msprobe.pytorch import PrecisionDebugger

    class Attn(nn.Module):
        def __init__(self, d, h):
            super().__init__()
            self.h, self.qkv, self.proj = h, nn.Linear(d, 3 * d), nn.Linear(d, d)

        def forward(self, x):
            b, s, d = x.shape
            q, k, v = (t.view(b, s, self.h, d // self.h).transpose(1, 2) for t in self.qkv(x).chunk(3, dim=-1))
            a = torch.matmul(q, k.transpose(-2, -1)) / (d // self.h) ** 0.5
            if bug:
                a = a * 1.5
            a = F.softmax(a, dim=-1)
            return self.proj(torch.matmul(a, v).transpose(1, 2).reshape(b, s, d))

    class Net(nn.Module):
        def __init__(self, vocab=40, d=16):
            super().__init__()
            self.emb, self.ln1, self.attn = nn.Embedding(vocab, d), nn.LayerNorm(d), Attn(d, 2)
            self.ln2, self.fc, self.head = nn.LayerNorm(d), nn.Linear(d, d), nn.Linear(d, vocab)

        def forward(self, i):
            x = self.emb(i)
            x = x + self.attn(self.ln1(x))
            x = x + F.gelu(self.fc(self.ln2(x)))
            return self.head(x)

    PrecisionDebugger._reset_for_tests()
    torch.manual_seed(0)
    model = Net()
    idx, tgt = torch.randint(0, 40, (2, 6)), torch.randint(0, 40, (2, 6))
    section = {"scope": [], "list": [], "data_mode": ["all"]}
    if task == "md5":
        section["summary_mode"] = "md5"
    kind = "tensor" if task == "tensor" else "statistics"
    cfg = {"task": kind, "dump_path": str(tmp_path / name), "rank": [], "step": [], "level": "mix",
           "async_dump": False, kind: section}
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(cfg))
    dbg = PrecisionDebugger(config_path=str(path))
    dbg.start(model)
    F.cross_entropy(model(idx).reshape(-1, 40), tgt.reshape(-1)).backward()
    dbg.stop()
    dbg.step()
    PrecisionDebugger._reset_for_tests()
    return tmp_path / name / "step0" / "rank"


@pytest.mark.parametrize("task", ["statistics", "md5", "tensor"])
def test_softmax_bug_in_real_dumps(tmp_path, capsys, task):
    _torch()
    t = _dump_transformer(tmp_path, "bug", True, task)
    g = _dump_transformer(tmp_path, "good", False, task)
    out = tmp_path / "out"
    code, stdout, err = run(["compare", "-tp", t, "-gp", g, "-o", out, "-q", "-da"], capsys)
    assert code == 0, err
    f = advisor_file(out)
    node, line = f["Suspect Nodes"], int(f["Line"])
    assert "parameters_grad" not in node
    assert f"(report row {line}," in stdout and f"  rank_0: {node} (report row {line})" in stdout
    apis = list(json.loads((t / "dump.json").read_text())["data"])
    order = [apis[i] for i in execution_group_order(apis)]
    api = node[:node.index(".forward") + 8] if ".forward." in node else node[:node.index(".backward") + 9]
    assert order.index(api) >= order.index("Tensor.__mul__.0.forward")  # nothing before the bug is blamed
    if task == "md5":  # bit-exact before the bug: the softmax input is the first difference, the mul its producer
        assert node == "Functional.softmax.0.forward.input.0"
        assert f["Producer"].startswith("produced by Tensor.__mul__.0.forward (Tensor.__mul__.0.forward.output.0, "
                                        "report row ")
        assert "which only the target has" in stdout
    # control: the same run twice names nothing
    g2 = _dump_transformer(tmp_path, "good2", False, task)
    out2 = tmp_path / "out2"
    code, stdout, err = run(["compare", "-tp", g2, "-gp", g, "-o", out2, "-q", "-da"], capsys)
    assert code == 0, err
    assert "  rank_0: none (" in stdout and "advisor: no failing row: " in stdout


def test_a_failing_low_precision_row_is_not_excused_as_rounding():
    """A FAIL row held in bf16 against fp32 was judged beyond bf16 rounding by the verdict: the advisor must not
    say "part of the difference is expected rounding" about it (it did, on a 50% error)."""
    names = ["Functional.relu.0.forward.input.0", "Functional.relu.0.forward.output.0"]
    apis = ["Functional.relu.0.forward"] * 2
    rep = Rep(names, apis, dtype="torch.bfloat16", bench_dtype="torch.float32", verdict=[vd.NOISE, vd.FAIL])
    a = adv.advise(rep)
    assert a.node == names[1]
    assert "expected rounding" not in a.reason and "larger than that rounding explains" in a.reason
    # without verdicts (a report read back from a file) the old hint stays
    old = Rep(names, apis, dtype="torch.bfloat16", bench_dtype="torch.float32", result=["", "Warning"])
    assert "expected rounding" in adv.advise(old).reason


@pytest.mark.parametrize("md5", [False, True], ids=["statistics", "md5"])
def test_a_minus_inf_fill_value_on_both_sides_is_no_overflow(tmp_path, capsys, md5):
    """masked_fill(mask, -inf) after a target-only multiply: the -inf fill value is an input of the failing
    API on both sides, so it is no overflow; the advisor names the target-only producer (it said
    'overflow/NaN ... look at the op that produced it' and named nothing)."""
    target, golden = _mul_case(md5)
    for side in (target, golden):
        side["Tensor.masked_fill.0.forward"] = side.pop("Functional.softmax.0.forward")
        side["Tensor.masked_fill.0.forward"]["input_args"].append({"type": "float", "value": float("-inf")})
    t, g = pair(tmp_path, target, golden)
    out = tmp_path / "out"
    code, stdout, err = run(["compare", "-tp", t, "-gp", g, "-o", out, "-q"], capsys)
    assert code == 0, err
    f = advisor_file(out)
    assert f["Category"] == adv.CAT_TARGET_ONLY, f
    assert "produced by Tensor.__mul__.0.forward" in f["Reason"]


def test_md5_within_noise_rows_count_as_no_error():
    rep = Rep(["a.0.forward.output.0", "b.0.forward.output.0", "c.0.forward.output.0"],
              ["a.0.forward", "b.0.forward", "c.0.forward"])
    rep.mode = "md5"
    rep.header = rep.header[:-1] + ["Result"]
    rep.columns[-1] = ["pass", "Different (within noise)", "Different"]
    err = OpTable(rep).row_error()
    assert err.tolist() == [0.0, 0.0, 1.0]
