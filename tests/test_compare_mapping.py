"""compare across frameworks: -am / -cm / -dm / -lm on the MindSpore fixture against a PyTorch twin."""

from __future__ import annotations

import collections
import csv
import glob
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import FIXTURES, ROOT
from msprobe.cli.main import main

DATA = Path(__file__).parent / "data" / "mapping"
MS_CASE = FIXTURES / "mindspore_cpu_mix"


def _ms_dump(side="target"):
    if not MS_CASE.is_dir():
        pytest.skip(f"reference fixtures not found at {FIXTURES} (../shared/fixtures is absent)")
    return next(iter(sorted((MS_CASE / side / "step0").glob("proc*/dump.json"))))


@pytest.fixture(scope="module")
def pt_twin(tmp_path_factory):
    pytest.importorskip("torch")
    out = tmp_path_factory.mktemp("pt_twin") / "dump"
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    subprocess.run([sys.executable, str(DATA / "tiny_pt.py"), str(out)], check=True, env=env, timeout=300)
    return out / "step0" / "rank" / "dump.json"


def run(tmp_path, target, golden, *flags, out="out"):
    rc = main(["compare", "-tp", str(target), "-gp", str(golden), "-o", str(tmp_path / out), "--csv", "-c", "-q", *flags])
    return rc


def rows(tmp_path, out="out"):
    files = sorted(glob.glob(str(tmp_path / out / "compare_result_*.csv")))
    assert len(files) == 1, files
    with open(files[0], newline="") as fh:
        return list(csv.DictReader(fh))


def pairs(report):
    return {r["NPU Name"]: (r["Bench Name"], r["Match"]) for r in report}


def write(tmp_path, name, text):
    p = tmp_path / name
    p.write_text(text)
    return p


CELLS = "fc_in.Dense: fc_in.Linear\nblock.dense.Dense: block.dense.Linear\nhead.Dense: head.Linear\n"


# ------------------------------------------------------------------------------------------ MindSpore vs MindSpore
def test_mindspore_fixture_target_vs_golden_all_rows_match(tmp_path):
    assert run(tmp_path, _ms_dump("target").parent.parent, _ms_dump("golden").parent.parent) == 0
    report = rows(tmp_path)
    assert len(report) == 174
    assert collections.Counter(r["Match"] for r in report) == {"exact": 174}
    # the perturbed block.dense weight shows up, the input of the network does not differ
    byname = {r["NPU Name"]: r for r in report}
    assert float(byname["Cell.block.dense.Dense.forward.0.parameters.weight"]["Max diff"]) == pytest.approx(1e-3, rel=1e-3)
    assert float(byname["Cell.conv.Conv2d.forward.0.input.0"]["Max diff"]) == 0.0


# ------------------------------------------------------------------------------------------ MindSpore vs PyTorch
def test_api_and_cell_mapping_against_the_pytorch_twin(tmp_path, pt_twin):
    cells = write(tmp_path, "cells.yaml", CELLS)
    assert run(tmp_path, _ms_dump(), pt_twin, "-am", "-cm", str(cells)) == 0
    report = rows(tmp_path)
    assert len(report) == 174  # every target row, in target order
    # 53 by cell: 49 by path, 4 more by the MindSpore -> PyTorch parameter names (LayerNorm gamma/beta -> weight/bias)
    assert collections.Counter(r["Match"] for r in report) == {"unmatched": 104, "cell": 53, "exact": 11, "api table": 6}
    p = pairs(report)
    assert p["Cell.block.ln.LayerNorm.forward.0.parameters.gamma"] == \
        ("Module.block.ln.LayerNorm.forward.0.parameters.weight", "cell")
    assert p["Cell.block.ln.LayerNorm.parameters_grad.0.beta"] == ("Module.block.ln.LayerNorm.parameters_grad.bias", "cell")
    assert p["Mint.matmul.0.forward.input.1"] == ("Torch.matmul.0.forward.input.1", "api table")
    assert p["Mint.matmul.0.backward.output.1"] == ("Torch.matmul.0.backward.output.1", "api table")
    assert p["Cell.fc_in.Dense.forward.0.output.0"] == ("Module.fc_in.Linear.forward.0.output.0", "cell")
    assert p["Cell.block.Block.backward.0.input.0"] == ("Module.block.Block.backward.0.input.0", "cell")
    # 26.x parameters_grad.<n> rows pair with 8.x parameters_grad rows
    assert p["Cell.head.Dense.parameters_grad.0.weight"] == ("Module.head.Linear.parameters_grad.weight", "cell")
    assert p["Tensor.__add__.0.forward.output.0"] == ("Tensor.__add__.0.forward.output.0", "exact")
    # Primitive ops have no PyTorch counterpart by name
    assert p["Primitive.conv2d.Conv2D.0.forward.input.0"] == ("N/A", "unmatched")
    # values: both runs feed the same numpy input, so the first conv input is identical across frameworks
    byname = {r["NPU Name"]: r for r in report}
    conv_in = byname["Cell.conv.Conv2d.forward.0.input.0"]
    assert conv_in["NPU Dtype"] == "Float32" and conv_in["Bench Dtype"] == "torch.float32"
    for col in ("Max diff", "Min diff", "Mean diff"):
        assert abs(float(conv_in[col])) < 1e-6
    assert float(conv_in["NPU max"]) == pytest.approx(float(conv_in["Bench max"]), rel=1e-6)


def test_without_mapping_only_identical_names_match(tmp_path, pt_twin):
    assert run(tmp_path, _ms_dump(), pt_twin) == 0
    report = rows(tmp_path)
    # Tensor.__mul__/__add__ are named alike in both frameworks; Float32 pairs with torch.float32
    assert collections.Counter(r["Match"] for r in report) == {"unmatched": 163, "exact": 11}


def test_api_mapping_alone_and_bare_cell_mapping(tmp_path, pt_twin):
    assert run(tmp_path, _ms_dump(), pt_twin, "-am", out="am") == 0
    counts = collections.Counter(r["Match"] for r in rows(tmp_path, "am"))
    assert counts["api table"] == 6 and counts["exact"] == 11 and "cell" not in counts
    assert run(tmp_path, _ms_dump(), pt_twin, "-cm", out="cm") == 0
    p = pairs(rows(tmp_path, "cm"))
    assert p["Cell.block.ln.LayerNorm.forward.0.output.0"][1] == "cell"  # same class name on both sides
    assert p["Cell.fc_in.Dense.forward.0.output.0"] == ("N/A", "unmatched")  # Dense vs Linear needs the yaml
    # a key found inside the path is applied too (no whole-path key here)
    sub = write(tmp_path, "sub.yaml", "Dense: Linear\n")
    assert run(tmp_path, _ms_dump(), pt_twin, "-cm", str(sub), out="cm2") == 0
    p = pairs(rows(tmp_path, "cm2"))
    assert p["Cell.block.dense.Dense.forward.0.output.0"] == ("Module.block.dense.Linear.forward.0.output.0", "cell")


def test_user_api_yaml_remaps_apis_and_indexes(tmp_path, pt_twin):
    user = write(tmp_path, "am.yaml", """
- ms_api: Functional.flatten      # ops.flatten inside nn.Flatten vs Tensor.flatten in PyTorch
  pt_api: Tensor.flatten
  ms_args: [0]
  pt_args: [0]
  ms_outputs: [0]
  pt_outputs: [0]
- ms_api: Mint.matmul
  pt_api: Torch.matmul
  ms_args: [0]
  pt_args: [0]
  ms_output: [0]                  # the singular spelling works too
  pt_output: [0]
""")
    assert run(tmp_path, _ms_dump(), pt_twin, "-am", str(user)) == 0
    p = pairs(rows(tmp_path))
    assert p["Functional.flatten.0.forward.input.0"] == ("Tensor.flatten.0.forward.input.0", "user api yaml")
    assert p["Functional.flatten.0.forward.output.0"] == ("Tensor.flatten.0.forward.output.0", "user api yaml")
    assert p["Mint.matmul.0.forward.input.0"] == ("Torch.matmul.0.forward.input.0", "user api yaml")
    # input 1 is not in the user's lists: left unmatched on purpose
    assert p["Mint.matmul.0.forward.input.1"] == ("N/A", "unmatched")


def test_data_mapping_pairs_named_rows_including_parameters_grad(tmp_path, pt_twin):
    dm = write(tmp_path, "dm.yaml", """
Cell.block.ln.LayerNorm.parameters_grad.0.gamma: Module.block.ln.LayerNorm.parameters_grad.weight
Cell.block.ln.LayerNorm.parameters_grad.0.beta: Module.block.ln.LayerNorm.parameters_grad.bias
Primitive.matmul.MatMul.0.forward.input.0: Functional.linear.0.forward.input.0
Cell.head.Dense.forward.0.output.0: Module.head.Linear.forward.0.output.0
""")
    assert run(tmp_path, _ms_dump(), pt_twin, "-dm", str(dm)) == 0
    report = rows(tmp_path)
    p = pairs(report)
    assert p["Cell.block.ln.LayerNorm.parameters_grad.0.gamma"] == ("Module.block.ln.LayerNorm.parameters_grad.weight", "data")
    assert p["Primitive.matmul.MatMul.0.forward.input.0"] == ("Functional.linear.0.forward.input.0", "data")
    assert p["Cell.head.Dense.forward.0.output.0"] == ("Module.head.Linear.forward.0.output.0", "data")
    assert collections.Counter(r["Match"] for r in report)["data"] == 4
    # explicit pairs win over the other rules
    assert run(tmp_path, _ms_dump(), pt_twin, "-dm", str(dm), "-cm", out="both") == 0
    assert pairs(rows(tmp_path, "both"))["Cell.head.Dense.forward.0.output.0"][1] == "data"


def test_layer_mapping_pairs_modules_and_their_apis(tmp_path, pt_twin):
    assert run(tmp_path, _ms_dump(), pt_twin, "-lm") == 0
    report = rows(tmp_path)
    p = pairs(report)
    # 66 by scope and suffix, 4 more by the MindSpore -> PyTorch parameter names (gamma/beta -> weight/bias)
    assert collections.Counter(r["Match"] for r in report) == {"unmatched": 104, "layer": 70}
    assert p["Cell.fc_in.Dense.forward.0.output.0"] == ("Module.fc_in.Linear.forward.0.output.0", "layer")
    assert p["Mint.matmul.0.forward.input.0"] == ("Torch.matmul.0.forward.input.0", "layer")  # API under block
    saved = glob.glob(str(tmp_path / "out" / "data_mapping_*.yaml"))
    assert len(saved) == 1
    import yaml

    mapping = yaml.safe_load(open(saved[0]))
    assert len(mapping) == 70 and mapping["Mint.matmul.0.forward.input.0"] == "Torch.matmul.0.forward.input.0"
    # the saved file is a valid -dm file giving the same pairs
    assert run(tmp_path, _ms_dump(), pt_twin, "-dm", saved[0], out="again") == 0
    assert collections.Counter(r["Match"] for r in rows(tmp_path, "again")) == {"unmatched": 104, "data": 70}


def test_layer_mapping_yaml_renames_a_layer(tmp_path, pt_twin):
    """The PyTorch twin calls its input layer fc_in; a model that calls it `embed` maps with a yaml."""
    import json

    src = pt_twin.parent
    dst = tmp_path / "renamed"
    dst.mkdir()
    for name in ("dump.json", "construct.json", "stack.json"):
        text = (src / name).read_text().replace("fc_in", "embed")
        (dst / name).write_text(text)
    lm = write(tmp_path, "lm.yaml", "TopLayer:\n  fc_in: embed\n")
    assert run(tmp_path, _ms_dump(), dst / "dump.json", "-lm", str(lm)) == 0
    p = pairs(rows(tmp_path))
    assert p["Cell.fc_in.Dense.forward.0.output.0"] == ("Module.embed.Linear.forward.0.output.0", "layer")
    json.loads((dst / "construct.json").read_text())  # still valid json


# ------------------------------------------------------------------------------------------ bad mapping files
BAD = [
    ("-am", "- ms_api: Mint.add\n  pt_api: Torch.add\n  ms_args: [0, 1]\n  pt_args: [0]\n",
     "ms_args has 2 indexes but pt_args has 1"),
    ("-am", "- ms_api: Mint.add\n  pt_api: Torch.add\n  ms_args: [0, 0]\n  pt_args: [1, 0]\n",
     "'ms_args' lists index 0 more than once"),
    ("-am", "- ms_api: Mint.add\n  pt_api: Torch.add\n  ms_argz: [0]\n", "unknown key 'ms_argz'"),
    ("-am", "ms_api: Mint.add\npt_api: Torch.add\n", "must be a list of entries"),
    ("-am", "- ms_api: Mint.add\n  pt_api: Torch.add\n  ms_args: [-1]\n  pt_args: [0]\n", "non-negative integers"),
    ("-am", "- ms_api: Mint.add\n  pt_api: Torch.add\n  ms_output: [0]\n  ms_outputs: [1]\n  pt_outputs: [0]\n",
     "'ms_output' and 'ms_outputs' disagree"),
    ("-am", "- pt_api: Torch.add\n", "'ms_api' must be an API name"),
    ("-cm", "- fc1.Dense: fc1.Linear\n", "must be a mapping like 'fc1.Dense: fc1.Linear', not a list"),
    ("-dm", "[a, b]\n", "must be a mapping of target row names to golden row names, not a list"),
    ("-dm", "a: [1]\n", "is not 'target row name: golden row name'"),
    ("-lm", "- a\n", "layer"),
    ("-am", "- ms_api: Mint.add\n  pt_api: [Torch.add\n", "is not valid yaml"),
]


@pytest.mark.parametrize("flag, text, expected", BAD)
def test_bad_mapping_files_are_one_line(tmp_path, capsys, flag, text, expected):
    bad = write(tmp_path, "bad.yaml", text)
    target = _ms_dump()
    assert run(tmp_path, target, _ms_dump("golden"), flag, str(bad)) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("msprobe: error: ") and expected in err[0], err
    assert str(bad) in err[0] or flag == "-lm"
    assert not (tmp_path / "out").exists() or not os.listdir(tmp_path / "out")


def test_user_index_out_of_range_for_the_dump(tmp_path, capsys, pt_twin):
    bad = write(tmp_path, "range.yaml", "- ms_api: Mint.matmul\n  pt_api: Torch.matmul\n  ms_args: [0, 5]\n  pt_args: [0, 1]\n")
    assert run(tmp_path, _ms_dump(), pt_twin, "-am", str(bad)) == 2
    err = [ln for ln in capsys.readouterr().err.strip().splitlines() if not ln.startswith("[msprobe] INFO ")]
    assert len(err) == 1 and "ms_args of Mint.matmul holds index 5, but the target dump records input 0..1 only" in err[0]


def test_layer_mapping_needs_construct_and_stack(tmp_path, capsys, pt_twin):
    lone = tmp_path / "lone"
    lone.mkdir()
    (lone / "dump.json").write_text(pt_twin.read_text())
    assert run(tmp_path, _ms_dump(), lone / "dump.json", "-lm") == 2
    err = capsys.readouterr().err
    assert "-lm needs construct.json and stack.json" in err and "construct.json or stack.json" in err


def test_api_table_is_data_and_packaged():
    """The table lives in config/ and ships in the package, identical; entries are prefix.api pairs."""
    import yaml

    repo = yaml.safe_load(open(ROOT / "config" / "ms_to_pt_api.yaml"))
    packaged = yaml.safe_load(open(ROOT / "msprobe" / "config" / "ms_to_pt_api.yaml"))
    assert repo == packaged and len(repo) > 500
    assert repo["Functional.dense"] == "Functional.linear" and repo["Tensor.swapaxes"] == "Tensor.transpose"
    assert repo["Functional.abs"] == "Torch.abs" and repo["Functional.softmax"] == "Functional.softmax"
    for k, v in repo.items():
        assert k.split(".")[0] in ("Functional", "Tensor") and v.split(".")[0] in ("Functional", "Torch", "Tensor")
    from msprobe.core.compare.mapping import table_api

    assert table_api("Mint.add", repo) == "Torch.add"
    assert table_api("MintFunctional.relu", repo) == "Functional.relu"
    assert table_api("Primitive.matmul.MatMul", repo) is None
