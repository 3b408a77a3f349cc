"""MindSpore target against a PyTorch golden on real layers (tests/fault_injection/xf.py): a subset of XF_CASES.

The MindSpore model (tests/mindspore/xf_models.py) runs in .venv-ms as a subprocess, its PyTorch twin here;
``msprobe compare -da`` with the cross-framework flags must pair what pairs (counts; every unmatched row of a
known kind) and name the planted place; the control pair names nothing.  The whole XF_CASES sweep is
``benchmarks/fault_score.py --family xf``.
"""

from __future__ import annotations

import collections
import csv
import glob
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fault_injection import xf  # noqa: E402
from fault_injection.evaluate import consistency_problems, names_nothing, names_op, outcomes  # noqa: E402

SUBSET = ("xf_ctl_stat", "xf_ln_eps_stat", "xf_grad_hook_stat")

# why a MindSpore row has no PyTorch row to pair with, by name
UNMATCHED_KINDS = [
    ("MindSpore Primitive (PyTorch records the Functional.* API)", r"^Primitive\."),
    ("MindSpore-only internal op of a Cell (shape, rank, dtype casts)", r"^(Functional\.(shape|rank)|Tensor\.to)\."),
    ("ops.transpose's permutation tuple (torch.transpose takes two ints)", r"^Functional\.transpose\.\d+\.forward\.input\.1\.\d$"),
    ("ops.softmax's axis keyword (torch: dim)", r"^Functional\.softmax\.\d+\.forward\.input\.axis$"),
    ("nn.Flatten calls ops.flatten, PyTorch's Tensor.flatten", r"^Functional\.flatten\."),
    ("4-D torch.matmul's backward is recorded at its bmm view ([4, 8, 8])", r"^Functional\.matmul\.\d+\.backward\.output\.[01]$"),
    ("MindSpore's mse_loss backward also gives the target's gradient", r"^Functional\.mse_loss\.0\.backward\.output\.1$"),
    ("BatchNorm moving statistics (PyTorch buffers, not recorded)", r"\.parameters\.moving_(mean|variance)$"),
]


def _kind(name):
    return next((k for k, pat in UNMATCHED_KINDS if re.search(pat, name)), None)


@pytest.fixture(scope="module")
def pairs(tmp_path_factory):
    why = xf.mindspore_missing()
    if why:
        pytest.skip(why)
    probe = subprocess.run([str(xf.MS_PY), "-c", "import mindspore"], capture_output=True, timeout=120)
    if probe.returncode != 0:
        pytest.skip(f"mindspore does not import in {xf.MS_PY.relative_to(xf.REPO)}: run `make ms-venv`")
    root = tmp_path_factory.mktemp("xf")
    xf.generate(root / "pairs", only=list(SUBSET), workers=2)
    return root


@pytest.fixture(scope="module")
def answers(pairs):
    cases = [c for c in xf.XF_CASES if c.name in SUBSET]
    return {name: o for name, o in outcomes(pairs / "pairs", pairs / "out", cases, workers=2).items()}


def _report(out_dir):
    [f] = glob.glob(str(Path(out_dir) / "**" / "compare_result_*.xlsx"), recursive=True)
    return f


def _csv_rows(tmp_path, pairs, *flags):
    from msprobe.cli.main import main

    case = pairs / "pairs" / "xf_ctl_stat"
    out = tmp_path / "out"
    assert main(["compare", "-tp", str(case / "target/step0/rank"), "-gp", str(case / "golden/step0/rank"),
                 "-o", str(out), "--csv", "-c", "-q", *flags]) == 0
    [f] = glob.glob(str(out / "compare_result_*.csv"))
    with open(f, newline="") as fh:
        return list(csv.DictReader(fh))


@pytest.mark.parametrize("flags, paired", [
    (xf.XF_ARGS, {"cell": 187, "api table": 126, "exact": 57}),
    (("-lm",), {"layer": 347, "exact": 23}),
])
def test_control_pairs_what_pairs_and_every_unmatched_row_is_known(tmp_path, pairs, flags, paired):
    rows = _csv_rows(tmp_path, pairs, *flags)
    assert len(rows) == 963
    counts = collections.Counter(r["Match"] for r in rows)
    assert counts == {**paired, "unmatched": 593}
    unknown = [r["NPU Name"] for r in rows if r["Match"] == "unmatched" and _kind(r["NPU Name"]) is None]
    assert not unknown, unknown
    by = {r["NPU Name"]: r for r in rows}
    # Dense -> Linear by the yaml or by scope; LayerNorm gamma -> weight; the api table; parameter gradients
    assert by["Cell.blocks.0.attn.q.Dense.forward.0.output.0"]["Bench Name"] == "Module.blocks.0.attn.q.Linear.forward.0.output.0"
    assert by["Cell.blocks.1.ln2.LayerNorm.forward.0.parameters.gamma"]["Bench Name"] == \
        "Module.blocks.1.ln2.LayerNorm.forward.0.parameters.weight"
    assert by["Functional.softmax.1.forward.output.0"]["Bench Name"] == "Functional.softmax.1.forward.output.0"
    assert by["Functional.matmul.2.forward.input.0"]["Bench Name"] == "Torch.matmul.2.forward.input.0"
    assert by["Cell.embed.Embedding.parameters_grad.0.embedding_table"]["Bench Name"] == \
        "Module.embed.Embedding.parameters_grad.weight"
    # same weights and input: the first rows agree exactly, nothing is beyond fp32 rounding
    assert by["Cell.embed.Embedding.forward.0.output.0"]["Max diff"] == "0.0"
    for r in rows:
        if r["Match"] != "unmatched":
            assert r["Result"] != "Warning", (r["NPU Name"], r["Err_message"])


def test_control_names_nothing(answers):
    a = answers["xf_ctl_stat"].ranks["rank"]
    assert names_nothing(a, "advisor") and names_nothing(a, "da"), (a.advisor_file, a.da_first_text)
    assert a.red == 0 and a.yellow == 0


@pytest.mark.parametrize("name", ["xf_ln_eps_stat", "xf_grad_hook_stat"])
def test_fault_is_named(answers, name):
    case = next(c for c in xf.XF_CASES if c.name == name)
    o = answers[name]
    assert o.rc == 0, o.stderr[-2000:]
    a = o.ranks["rank"]
    assert names_op(a, "advisor", case.expected["rank"]), (a.advisor_file, a.advisor_console)
    assert names_op(a, "da", case.expected["rank"]), a.da_first_text
    assert not consistency_problems(a)
