"""MindSpore static-graph kernel dump -> msprobe dump layout (msprobe.core.dump.ms_graph), without MindSpore.

Input: the real GRAPH_MODE dumps of ../shared/fixtures/reference/mindspore_ir (MindSpore 2.10 CPU, tensor mode,
the IR rank_0/graphs/ms_output_trace_code_graph_0.ir), infer and train. Checked:
- names: Cells from the IR scopes (``Cell.network._backbone.block.dense.Dense.forward.0``), kernels as
  ``Primitive.{instance}.{OpType}.{n}.forward`` (``n`` per instance.OpType, in launch order), gradient
  kernels ``...{instance}_grad...backward``; construct.json parents; stack.json carries the IR code lines;
- values: every tensor record's statistics equal numpy's on the source .npy; IR constants are scalars;
  Cell inputs/outputs follow the IR data flow (Block's input is fc's output, its output the Add's);
- tensor task: dump_tensor_data files equal the source files;
- `msprobe compare` of the converted dump with itself: every row equal, none unmatched (statistics and tensor);
- statistic.csv (GPU/Ascend statistic mode; hand-made, CPU cannot write one) converts too;
- `-cm` against a PyTorch twin with the same weights (main venv): every Cell pairs with its Module, values equal;
- bad input: one MsprobeError line.
These run in the main venv (no MindSpore needed) and in .venv-ms.
"""
import csv
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
FIX = ROOT.parent / "shared" / "fixtures" / "reference" / "mindspore_ir"
TRAIN = FIX / "train" / "dump" / "rank_0"
INFER = FIX / "infer" / "dump" / "rank_0"

pytestmark = pytest.mark.skipif(not TRAIN.is_dir(), reason=f"fixture {FIX} is not there")


def _convert(out, rank_root=TRAIN, **kw):
    from msprobe.core.dump.ms_graph import convert_rank
    kw.setdefault("task", "statistics")
    kw.setdefault("level", "mix")
    rec = convert_rank(str(rank_root), str(out), **kw)
    load = lambda n: json.loads((Path(out) / n).read_text())  # noqa: E731
    return rec, load("dump.json"), load("construct.json"), load("stack.json")


def _src(rank_root, op_type, scope_key, io):
    d = rank_root / "Net" / "0" / "0"
    hits = [f for f in os.listdir(d) if f.startswith(f"{op_type}.{scope_key}.") and f".{io}." in f]
    assert len(hits) == 1, hits
    return np.load(d / hits[0])


def test_infer_names_parents_and_dataflow(tmp_path):
    rec, dump, construct, stack = _convert(tmp_path / "rank", INFER)
    data = dump["data"]
    assert dump["framework"] == "mindspore" and dump["level"] == "mix"
    assert list(data) == [
        "Cell.fc.Dense.forward.0", "Primitive.matmul.MatMul.0.forward", "Primitive.bias_add.BiasAdd.0.forward",
        "Cell.block.Block.forward.0", "Cell.block.dense.Dense.forward.0", "Primitive.matmul.MatMul.1.forward",
        "Primitive.bias_add.BiasAdd.1.forward", "Cell.block.act.ReLU.forward.0", "Primitive.relu.ReLU.0.forward",
        "Primitive.add.Add.0.forward", "Cell.head.Dense.forward.0", "Primitive.matmul.MatMul.2.forward",
        "Primitive.bias_add.BiasAdd.2.forward"]
    assert rec.unbound == 0 and rec.kernels == 8
    assert construct["Cell.block.dense.Dense.forward.0"] == "Cell.block.Block.forward.0"
    assert construct["Primitive.relu.ReLU.0.forward"] == "Cell.block.act.ReLU.forward.0"
    assert construct["Primitive.add.Add.0.forward"] == "Cell.block.Block.forward.0"
    assert construct["Cell.fc.Dense.forward.0"] is None
    # MatMul(x, weight, Bool(0), Bool(1)): the IR constants are scalars
    mm = data["Primitive.matmul.MatMul.0.forward"]
    assert [a.get("shape") for a in mm["input_args"][:2]] == [[2, 4], [8, 4]]
    assert mm["input_args"][2:] == [{"type": "bool", "value": False}, {"type": "bool", "value": True}]
    assert data["Primitive.bias_add.BiasAdd.0.forward"]["input_args"][2] == {"type": "int", "value": 0}
    # Block: input = fc's output (used twice inside, recorded once), output = the Add's output
    fc_out = _src(INFER, "BiasAdd", "Default_fc-Dense_BiasAdd-op0", "output")
    add_out = _src(INFER, "Add", "Default_block-Block_Add-op0", "output")
    block = data["Cell.block.Block.forward.0"]
    assert len(block["input_args"]) == 1 and len(block["output"]) == 1
    assert block["input_args"][0]["Max"] == pytest.approx(float(fc_out.max()))
    assert block["output"][0]["Norm"] == pytest.approx(float(np.sqrt((add_out.astype(np.float64) ** 2).sum())), rel=1e-6)
    # Cell parameters: the weights its own kernels read, by short name (as PyNative records them)
    fc = data["Cell.fc.Dense.forward.0"]
    assert {p: r["shape"] for p, r in fc["parameters"].items()} == {"weight": [8, 4], "bias": [8]}
    w = np.load([INFER / "Net" / "0" / "0" / f for f in os.listdir(INFER / "Net" / "0" / "0")
                 if f.startswith("Parameter.fc_weight.")][0])
    assert fc["parameters"]["weight"]["Max"] == float(w.max())
    assert "parameters" not in data["Cell.block.Block.forward.0"]      # Block's own kernel (Add) reads no weight
    # statistics equal numpy's on the source file
    relu_in = _src(INFER, "ReLU", "Default_block-Block_act-ReLU_ReLU-op0", "input")
    r = data["Primitive.relu.ReLU.0.forward"]["input_args"][0]
    assert (r["dtype"], r["shape"]) == ("Float32", [2, 8])
    assert (r["Max"], r["Min"]) == (float(relu_in.max()), float(relu_in.min()))
    assert r["Mean"] == pytest.approx(float(relu_in.mean()), rel=1e-6)
    # stack.json: the IR's code lines, the user's file and line, and the scope
    frames = {n: f for names, f in stack.values() for n in names}
    mm_frames = frames["Primitive.matmul.MatMul.1.forward"]
    assert mm_frames[-1] == "Scope Default/block-Block/dense-Dense/MatMul-op0"
    assert any(f.startswith("File ") and "graph_net.py, line 10, in MatMul-op0" in f for f in mm_frames)


def test_train_forward_backward_and_optimizer(tmp_path):
    rec, dump, construct, _ = _convert(tmp_path / "rank")
    data = dump["data"]
    assert rec.unbound == 0 and rec.kernels == 32
    for name in ("Cell.network.WithLossCell.forward.0", "Cell.network._backbone.Net.forward.0",
                 "Cell.network._backbone.block.dense.Dense.forward.0", "Cell.network._loss_fn.MSELoss.forward.0",
                 "Cell.optimizer.SGD.forward.0", "Primitive.relugrad_grad.ReluGrad.0.backward",
                 "Primitive.matmul_grad.MatMul.4.backward", "Primitive.sgd.SGD.5.forward"):
        assert name in data, name
    # the loss Cell takes the network output and the label, and gives the scalar loss
    loss = data["Cell.network._loss_fn.MSELoss.forward.0"]
    assert [a["shape"] for a in loss["input_args"]] == [[2, 2], [2, 2]]
    assert [o["shape"] for o in loss["output"]] == [[]]
    assert construct["Cell.network._backbone.Net.forward.0"] == "Cell.network.WithLossCell.forward.0"
    assert construct["Primitive.sgd.SGD.0.forward"] == "Cell.optimizer.SGD.forward.0"
    # the head's weight gradient: MatMul(dout, x, Bool(1), Bool(0)) -> [2, 8]
    grads = [n for n in data if n.startswith("Primitive.matmul_grad.MatMul.")]
    assert len(grads) == 5
    assert sorted(tuple(data[n]["output"][0]["shape"]) for n in grads) == [(2, 8), (2, 8), (2, 8), (8, 4), (8, 8)]


def test_levels_and_data_mode(tmp_path):
    _, l0, c0, _ = _convert(tmp_path / "l0", INFER, level="L0")
    assert all(n.startswith("Cell.") for n in l0["data"]) and len(l0["data"]) == 5
    _, l1, c1, _ = _convert(tmp_path / "l1", INFER, level="L1")
    assert all(n.startswith("Primitive.") for n in l1["data"]) and len(l1["data"]) == 8 and c1 == {}
    _, out_only, _, _ = _convert(tmp_path / "out", INFER, data_mode=("output",))
    assert all(set(v) == {"output"} for v in out_only["data"].values())
    _, bwd, _, _ = _convert(tmp_path / "bwd", data_mode=("backward",))
    assert bwd["data"] and all(n.endswith(".backward") for n in bwd["data"])
    assert all(set(v) == {"input_args", "input_kwargs", "output"} for v in bwd["data"].values())
    _, fwd_in, _, _ = _convert(tmp_path / "fwd_in", data_mode=("forward", "input"))
    assert all(n.endswith(".forward") or ".forward." in n for n in fwd_in["data"])
    assert all(set(v) - {"parameters"} == {"input_args", "input_kwargs"} for v in fwd_in["data"].values())


def test_tensor_task_and_md5(tmp_path):
    _, dump, _, _ = _convert(tmp_path / "rank", INFER, task="tensor")
    rec = dump["data"]["Primitive.relu.ReLU.0.forward"]["output"][0]
    saved = np.load(tmp_path / "rank" / "dump_tensor_data" / rec["data_name"])
    assert np.array_equal(saved, _src(INFER, "ReLU", "Default_block-Block_act-ReLU_ReLU-op0", "output"))
    assert dump["dump_data_dir"] == str(tmp_path / "rank" / "dump_tensor_data")
    _, md5, _, _ = _convert(tmp_path / "md5", INFER, summary_mode="md5")
    assert len(md5["data"]["Primitive.relu.ReLU.0.forward"]["output"][0]["md5"]) == 8


@pytest.mark.parametrize("task, fixture, rows_expected", [("statistics", TRAIN, 179), ("tensor", TRAIN, 179),
                                                         ("statistics", INFER, 48), ("tensor", INFER, 48)])
def test_self_compare_has_zero_differences(tmp_path, task, fixture, rows_expected):
    step = tmp_path / "dump" / "step0" / "rank"
    _convert(step, fixture, task=task)
    res = subprocess.run([sys.executable, "-m", "msprobe", "compare", "-tp", str(step), "-gp", str(step),
                          "-o", str(tmp_path / "cmp"), "--csv"], capture_output=True, text=True, timeout=300,
                         cwd=str(tmp_path), env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    [report] = (tmp_path / "cmp").glob("compare_result_*.csv")
    rows = list(csv.DictReader(report.open()))
    assert len(rows) == rows_expected
    assert all(r["Bench Name"] == r["NPU Name"] for r in rows)
    if task == "tensor":
        computed = [r for r in rows if r["Cosine"] not in ("unsupported", "N/A")]
        assert len(computed) > rows_expected // 2 and all(float(r["MaxAbsErr"]) == 0.0 and float(r["Cosine"]) == 1.0 for r in computed)
    else:
        assert all(r["Max diff"] in ("0.0", "N/A") for r in rows)
    assert f"red: 0  yellow: 0  within noise: 0  equal: {rows_expected}  not compared: 0" in res.stdout + res.stderr


def test_statistic_csv(tmp_path):
    """GPU/Ascend statistic mode: statistic.csv rows (format of MindSpore's docs) become the same records."""
    d = tmp_path / "ms" / "rank_0" / "Net" / "0" / "0"
    d.mkdir(parents=True)
    header = ["Op Type", "Op Name", "Task ID", "Stream ID", "Timestamp", "IO", "Slot", "Data Size", "Data Type",
              "Shape", "Max Value", "Min Value", "Avg Value", "L2Norm Value"]
    rows = [["MatMul", "Default_fc-Dense_MatMul-op0", "0", "0", "10", "input", "0", "32", "float32", "(2,4)", "1.5", "-2", "0.25", "3"],
            ["MatMul", "Default_fc-Dense_MatMul-op0", "0", "0", "11", "output", "0", "64", "float32", "(2,8)", "4", "-4", "0", "9"],
            ["BiasAdd", "Default_fc-Dense_BiasAdd-op0", "0", "0", "12", "output", "0", "64", "float32", "(2,8)", "5", "-3", "1", "8"]]
    with open(d / "statistic.csv", "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(header)
        w.writerows(rows)
    (tmp_path / "ms" / "rank_0" / "graphs").mkdir()
    shutil.copy(INFER / "graphs" / "ms_output_trace_code_graph_0.ir", tmp_path / "ms" / "rank_0" / "graphs")
    _, dump, construct, _ = _convert(tmp_path / "rank", tmp_path / "ms" / "rank_0")
    data = dump["data"]
    assert list(data) == ["Cell.fc.Dense.forward.0", "Primitive.matmul.MatMul.0.forward", "Primitive.bias_add.BiasAdd.0.forward"]
    mm = data["Primitive.matmul.MatMul.0.forward"]
    assert mm["input_args"][0] == {"type": "mindspore.Tensor", "dtype": "float32", "shape": [2, 4],
                                   "Max": 1.5, "Min": -2.0, "Mean": 0.25, "Norm": 3.0}
    assert data["Cell.fc.Dense.forward.0"]["output"][0]["Max"] == 5.0


def test_bad_input_is_one_line(tmp_path):
    from msprobe.core.dump.ms_graph import convert_rank
    from msprobe.core.errors import MsprobeError
    with pytest.raises(MsprobeError) as e:
        convert_rank(str(tmp_path / "nope"), str(tmp_path / "out"))
    assert "does not exist" in str(e.value) and "\n" not in str(e.value)
    (tmp_path / "empty").mkdir()
    with pytest.raises(MsprobeError) as e:
        convert_rank(str(tmp_path / "empty"), str(tmp_path / "out"))
    assert "holds no iteration" in str(e.value)
    assert not (tmp_path / "out").exists()


# ---------------------------------------------------------------------------------------------- the MindSpore config
# msprobe.mindspore.dump.static_graph imports MindSpore only inside functions: its config part runs anywhere.

def _cfg(**kw):
    from types import SimpleNamespace
    base = dict(task="statistics", level="mix", summary_mode="statistics", data_mode=("all",), list=(), step=(),
                rank=(), scope=())
    base.update(kw)
    return SimpleNamespace(**base)


def test_mindspore_dump_settings():
    from msprobe.mindspore.dump.static_graph import ms_dump_settings
    common = ms_dump_settings(_cfg(), "/d/mindspore_dump", "CPU")["common_dump_settings"]
    assert (common["saved_data"], common["iteration"], common["input_output"], common["dump_mode"]) == ("tensor", "all", 0, 0)
    assert common["path"] == "/d/mindspore_dump" and common["support_device"] == list(range(8))
    assert ms_dump_settings(_cfg(), "/d", "GPU")["common_dump_settings"]["saved_data"] == "statistic"
    assert ms_dump_settings(_cfg(summary_mode="md5"), "/d", "GPU")["common_dump_settings"]["saved_data"] == "tensor"
    l2 = ms_dump_settings(_cfg(level="L2", list=("Default/fc-Dense/MatMul-op0", "name-regex(Default/.+)"),
                               step=(0, 2), rank=(1,), data_mode=("output",)), "/d", "Ascend")["common_dump_settings"]
    assert (l2["dump_mode"], l2["kernels"], l2["iteration"], l2["support_device"], l2["input_output"]) == \
        (1, ["Default/fc-Dense/MatMul-op0", "name-regex(Default/.+)"], "0|2", [1], 2)
    assert ms_dump_settings(_cfg(list=("fc",)), "/d", "CPU")["common_dump_settings"]["kernels"] == []


@pytest.mark.parametrize("device, jit, kw, words", [
    ("FPGA", "", {}, ["'FPGA' backend does not have", "CPU, GPU, Ascend", "PYNATIVE_MODE"]),
    ("Ascend", "O2", {}, ["jit_level O2", "O0 or O1"]),
    ("CPU", "", {"task": "overflow_check"}, ['task "overflow_check"', "GRAPH_MODE"]),
    ("CPU", "", {"task": "free_benchmark"}, ['task "free_benchmark"']),
    ("CPU", "", {"level": "debug"}, ['level "debug"', "PyNative"]),
    ("CPU", "", {"scope": ("a", "b")}, ['"scope" is not supported in GRAPH_MODE']),
])
def test_static_config_bad_input_is_one_line(device, jit, kw, words):
    from msprobe.core.errors import MsprobeError
    from msprobe.mindspore.dump.static_graph import check_static_config
    with pytest.raises(MsprobeError) as e:
        check_static_config(_cfg(**kw), device, jit)
    assert "\n" not in str(e.value) and all(w in str(e.value) for w in words), str(e.value)
    check_static_config(_cfg(), "CPU", "O0")      # the default config is fine


def test_static_dump_vs_pytorch_twin_with_cell_mapping(tmp_path):
    """-cm: the converted static dump (Cell.fc.Dense...) against a PyTorch dump of the same network with the same
    weights (Module.fc.Linear...): every Cell (inputs, outputs, weights) pairs with its Module, the values agree within fp32 rounding."""
    try:
        import torch  # noqa: F401
    except Exception as exc:  # .venv-ms has no torch
        pytest.skip(f"torch is not importable here ({type(exc).__name__}); the PyTorch twin runs in the main venv")
    _convert(tmp_path / "ms" / "step0" / "rank", INFER)
    res = subprocess.run([sys.executable, str(HERE / "pt_graph_net_twin.py"), str(INFER / "Net" / "0" / "0"),
                          str(tmp_path / "pt")], capture_output=True, text=True, timeout=300, cwd=str(tmp_path),
                         env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    (tmp_path / "cells.yaml").write_text("Dense: Linear\n")
    res = subprocess.run([sys.executable, "-m", "msprobe", "compare", "-tp", str(tmp_path / "ms" / "step0" / "rank"),
                          "-gp", str(tmp_path / "pt" / "step0" / "rank"), "-o", str(tmp_path / "cmp"), "--csv",
                          "-cm", str(tmp_path / "cells.yaml")], capture_output=True, text=True, timeout=300,
                         cwd=str(tmp_path), env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    [report] = (tmp_path / "cmp").glob("compare_result_*.csv")
    pairs = {r["NPU Name"]: r for r in csv.DictReader(report.open()) if r["Bench Name"] != "N/A"}
    assert len(pairs) == 16                        # 10 Cell inputs/outputs, 6 weights
    assert pairs["Cell.fc.Dense.forward.0.parameters.weight"]["Bench Name"] == "Module.fc.Linear.forward.0.parameters.weight"
    assert pairs["Cell.block.dense.Dense.forward.0.output.0"]["Bench Name"] == "Module.block.dense.Linear.forward.0.output.0"
    assert all(abs(float(r["Max diff"])) <= 1e-6 and abs(float(r["Min diff"])) <= 1e-6 for r in pairs.values())
    assert "red: 0" in res.stdout + res.stderr
