"""PrecisionDebugger in MindSpore GRAPH_MODE, for real (MindSpore 2.10 CPU, .venv-ms).

The network is the one of ../shared/fixtures/reference/mindspore_ir/graph_net.py (ms_graph_net.py: same layers,
seed, data, TrainOneStepCell with SGD), 2 training steps. Checked:
- the debugger writes MindSpore's dump config, MindSpore dumps, step() converts: step0/step1 dump.json,
  stack.json, construct.json; losses equal a run without msprobe;
- task statistics on CPU: one warning line saying MindSpore's CPU dump stores tensors only; the tensor
  files are removed after the conversion, the IR stays, no empty folder is left;
- task tensor: dump_tensor_data/, MindSpore's files kept, and `msprobe -f mindspore code_mapping` reads them;
- `msprobe compare` of the static dump with itself: all rows equal; against the PyNative dump of the same network
  (PrecisionDebugger mix, start(train)): every Cell and Primitive present in both pairs by name (and with -lm)
  and all compared rows are equal;
- bad input is one line: GRAPH_MODE with a task that needs Python hooks, a backend without dump support,
  start(token_range=...); a network compiled before the debugger existed gives one warning per step and no files;
- start(net) roots the Cell names as in PyNative; an earlier run's dump is moved aside; without step() the dump is
  converted at exit; BatchNorm's tuple output and split/concat (ms_graph_lenet.py) give the right Cell data flow;
- @jit in PyNative: Jit.*.forward/backward records, training unchanged, hooked Cells inside jit regions run unhooked.
"""
import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ms_skip import requires_mindspore

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
NET = HERE / "ms_graph_net.py"

pytestmark = requires_mindspore
_CACHE = {}


def _env():
    return dict(os.environ, PYTHONPATH=str(ROOT), GLOG_v="3")


def run_net(root, mode, level, task, *flags):
    key = (mode, level, task) + flags
    if key not in _CACHE:
        out = os.path.join(root, "_".join((mode, level, task) + tuple(f.strip("-") for f in flags)))
        res = subprocess.run([sys.executable, str(NET), out, mode, level, task, *flags], capture_output=True,
                             text=True, timeout=600, env=_env(), cwd=root)
        assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
        line = [ln for ln in res.stdout.splitlines() if ln.startswith("{")][-1]
        _CACHE[key] = (Path(out), json.loads(line), res.stderr)
    return _CACHE[key]


def msprobe(*args, cwd):
    return subprocess.run([sys.executable, "-m", "msprobe", *args], capture_output=True, text=True, timeout=600,
                          env=_env(), cwd=cwd)


def compare(tp, gp, out, *flags):
    res = msprobe("compare", "-tp", str(tp), "-gp", str(gp), "-o", str(out), "--csv", *flags, cwd=str(out.parent))
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    [report] = out.glob("compare_result_*.csv")
    return list(csv.DictReader(report.open())), res.stdout + res.stderr


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    return str(tmp_path_factory.mktemp("msgraph"))


def test_graph_mode_statistics_dump(root):
    out, result, err = run_net(root, "graph", "mix", "statistics")
    _, plain, _ = run_net(root, "graph", "mix", "statistics", "--no-debugger")
    assert result["losses"] == plain["losses"] and len(result["losses"]) == 2
    assert "MindSpore's CPU dump stores tensors only" in err
    for step in (0, 1):
        rank = out / f"step{step}" / "rank"
        assert sorted(os.listdir(rank)) == ["construct.json", "dump.json", "stack.json"]
        dump = json.loads((rank / "dump.json").read_text())
        assert dump["task"] == "statistics" and dump["framework"] == "mindspore"
        assert len(dump["data"]) == 41
        fc = dump["data"]["Cell.network._backbone.fc.Dense.forward.0"]
        assert fc["input_args"][0]["shape"] == [2, 4] and fc["output"][0]["shape"] == [2, 8]
        construct = json.loads((rank / "construct.json").read_text())
        assert construct["Primitive.relu.ReLU.0.forward"] == "Cell.network._backbone.block.act.ReLU.forward.0"
    raw = out / "mindspore_dump" / "rank_0"
    assert (raw / "graphs" / "ms_output_trace_code_graph_0.ir").is_file()
    assert not (raw / "Net").exists()          # the tensors went, and no empty folder is left
    # the weights changed between the steps: the head MatMul's weight input differs
    w = [json.loads((out / f"step{s}" / "rank" / "dump.json").read_text())["data"]
         ["Primitive.matmul.MatMul.2.forward"]["input_args"][1]["Norm"] for s in (0, 1)]
    assert w[0] != w[1]


def test_self_compare_zero_differences(root, tmp_path):
    out, _, _ = run_net(root, "graph", "mix", "statistics")
    rows, text = compare(out / "step1" / "rank", out / "step1" / "rank", tmp_path / "cmp")
    assert len(rows) == 179 and all(r["Bench Name"] == r["NPU Name"] for r in rows)
    assert "red: 0  yellow: 0  within noise: 0  equal: 179  not compared: 0" in text


@pytest.mark.parametrize("flag", [None, "-lm"])
def test_compare_with_pynative_dump(root, tmp_path, flag):
    static, s_res, _ = run_net(root, "graph", "mix", "statistics")
    pynative, p_res, _ = run_net(root, "pynative", "mix", "statistics")
    assert s_res["losses"] == p_res["losses"]
    rows, text = compare(static / "step0" / "rank", pynative / "step0" / "rank", tmp_path / "cmp",
                         *([flag] if flag else []))
    paired = {r["NPU Name"] for r in rows if r["Bench Name"] != "N/A"}
    for name in ("Cell.network.WithLossCell.forward.0.output.0", "Cell.network._backbone.block.Block.forward.0.input.0",
                 "Cell.network._backbone.head.Dense.forward.0.output.0", "Primitive.matmul.MatMul.2.forward.input.1",
                 "Primitive.relu.ReLU.0.forward.output.0", "Cell.network._loss_fn.MSELoss.forward.0.input.1"):
        assert name in paired, name
    assert len(paired) >= 49
    assert "red: 0  yellow: 0" in text
    assert all(r["Max diff"] in ("0.0", "N/A") for r in rows if r["Bench Name"] != "N/A")


def test_tensor_task_and_code_mapping(root, tmp_path):
    out, _, _ = run_net(root, "graph", "L2", "tensor", "--infer", "--steps", "1")
    rank = out / "step0" / "rank"
    dump = json.loads((rank / "dump.json").read_text())
    rec = dump["data"]["Primitive.relu.ReLU.0.forward"]["output"][0]
    assert (rank / "dump_tensor_data" / rec["data_name"]).is_file()
    raw = out / "mindspore_dump" / "rank_0"
    npys = list((raw / "Net" / "0" / "0").glob("*.npy"))
    assert len(npys) > 30
    res = msprobe("-f", "mindspore", "code_mapping", "--ir", str(raw / "graphs" / "ms_output_trace_code_graph_0.ir"),
                  "--dump_data", str(raw / "Net"), "--output", str(tmp_path / "cm"), cwd=str(tmp_path))
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    [mapping] = (tmp_path / "cm").glob("code_mapping_*.csv")
    rows = list(csv.DictReader(mapping.open()))
    relu = [r for r in rows if "ReLU-op0" in r["Scope Name"]]
    assert relu and "ms_graph_net.py" in relu[0]["Code Stack"]


def test_compiled_before_the_debugger_warns(root):
    out, result, err = run_net(root, "graph", "mix", "statistics", "--late", "--infer", "--steps", "1")
    assert "MindSpore wrote no kernel dump for step 0" in err
    assert not (out / "step0").exists()


def _construct_error(tmp_path, prelude, **cfg):
    code = ("import mindspore as ms\n"
            "ms.set_context(mode=ms.GRAPH_MODE)\n" + prelude +
            "from msprobe.mindspore import PrecisionDebugger\n"
            "from msprobe.core.errors import MsprobeError\n"
            "try:\n"
            f"    PrecisionDebugger(**{cfg!r})\n"
            "except MsprobeError as e:\n"
            "    print('ERR ' + str(e))\n")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=_env(),
                         cwd=str(tmp_path))
    lines = [ln[4:] for ln in res.stdout.splitlines() if ln.startswith("ERR ")]
    assert len(lines) == 1, res.stdout + res.stderr
    return lines[0]


def test_bad_input_one_line(tmp_path):
    d = str(tmp_path / "d")
    msg = _construct_error(tmp_path, "", dump_path=d, task="overflow_check", level="L1")
    assert "GRAPH_MODE" in msg and "overflow_check" in msg
    msg = _construct_error(tmp_path, "import msprobe.mindspore.dump.static_graph as sg\n"
                                     "sg._device_target = lambda: 'FPGA'\n", dump_path=d, task="statistics", level="L2")
    assert "'FPGA' backend does not have" in msg and "PYNATIVE_MODE" in msg
    msg = _construct_error(tmp_path, "", dump_path=d, task="statistics", level="debug")
    assert "debug" in msg and "PyNative" in msg
    assert not os.path.exists(d)


def test_token_range_in_graph_mode_is_one_line(tmp_path):
    code = ("import mindspore as ms\n"
            "from mindspore import nn\n"
            "ms.set_context(mode=ms.GRAPH_MODE)\n"
            "from msprobe.mindspore import PrecisionDebugger\n"
            "from msprobe.core.errors import MsprobeError\n"
            f"d = PrecisionDebugger(dump_path={str(tmp_path / 'd')!r}, task='statistics', level='L1')\n"
            "try:\n"
            "    d.start(nn.Dense(2, 2), token_range=[0, 1])\n"
            "except MsprobeError as e:\n"
            "    print('ERR ' + str(e))\n")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=_env(),
                         cwd=str(tmp_path))
    lines = [ln[4:] for ln in res.stdout.splitlines() if ln.startswith("ERR ")]
    assert len(lines) == 1 and "token_range" in lines[0] and "GRAPH_MODE" in lines[0], res.stdout + res.stderr


# ---------------------------------------------------------------------------------------------- @jit in PyNative

@pytest.mark.parametrize("level", ["mix", "L1"])
def test_jit_cell_in_pynative(root, level):
    """Net.construct under @ms.jit: the training is unchanged (the Cell hooks inside the jit region used to be
    compiled into the graph and broke it), the region is one Jit.Net.{n}.forward record, as the reference writes."""
    out, result, err = run_net(root, "pynative", level, "statistics", "--jit")
    _, plain, _ = run_net(root, "pynative", level, "statistics", "--jit", "--no-debugger")
    assert result["losses"] == plain["losses"]
    data = json.loads((out / "step0" / "rank" / "dump.json").read_text())["data"]
    jit = data["Jit.Net.0.forward"]
    assert [a["shape"] for a in jit["input_args"]] == [[2, 4]] and [o["shape"] for o in jit["output"]] == [[2, 2]]
    assert not any(n.startswith("Jit.SGD") for n in data)   # MindSpore's own @jit (nn.SGD.construct): not recorded
    assert not any(n.startswith(("Cell.network._backbone.fc", "Primitive.matmul")) for n in data)
    back = data["Jit.Net.0.backward"]            # the loss gradient w.r.t. the output; the data input has none
    assert [g["shape"] for g in back["input"]] == [[2, 2]] and back["output"] == [None]
    if level == "mix":
        cell = data["Cell.network._backbone.Net.forward.0"]
        assert cell["output"][0]["Norm"] == jit["output"][0]["Norm"]
        construct = json.loads((out / "step0" / "rank" / "construct.json").read_text())
        assert construct["Jit.Net.0.forward"] == "Cell.network._backbone.Net.forward.0"


def test_jit_function_in_pynative(tmp_path):
    script = HERE / "ms_jit_fn.py"
    runs = []
    for args in (["mix"], ["mix", "--no-debugger"]):
        res = subprocess.run([sys.executable, str(script), str(tmp_path / "d"), *args], capture_output=True, text=True,
                             timeout=300, env=_env(), cwd=str(tmp_path))
        assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
        runs.append(json.loads([ln for ln in res.stdout.splitlines() if ln.startswith("{")][-1]))
    assert runs[0] == runs[1]
    data = json.loads((tmp_path / "d" / "step1" / "rank" / "dump.json").read_text())["data"]
    assert [n for n in data if n.startswith("Jit.")] == ["Jit.f.0.forward", "Jit.f.1.forward", "Jit.g.0.forward",
                                                          "Jit.f.2.forward", "Jit.f.2.backward"]
    # ms.grad(lambda a: f(a, a).sum()): d out = 1; d x = 2 * relu'(x), d y = 1
    back = data["Jit.f.2.backward"]
    assert [(g["Max"], g["Min"]) for g in back["input"]] == [(1.0, 1.0)]
    assert [(g["Max"], g["Min"]) for g in back["output"]] == [(2.0, 0.0), (1.0, 1.0)]
    f0 = data["Jit.f.0.forward"]
    assert len(f0["input_args"]) == 2 and (f0["output"][0]["Max"], f0["output"][0]["Min"]) == (9.0, -2.0)
    assert "Cell.d.Dense.forward.0" in data       # a Cell outside the jit function keeps its hooks
    assert "Cell.d.Dense.forward.1" not in data   # ... and inside g it runs compiled, unhooked


def test_second_run_moves_the_first_aside(tmp_path):
    out = tmp_path / "d"
    for _ in range(2):
        res = subprocess.run([sys.executable, str(NET), str(out), "graph", "L1", "statistics", "--infer", "--steps", "1"],
                             capture_output=True, text=True, timeout=300, env=_env(), cwd=str(tmp_path))
        assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    assert "moved to previous_" in res.stderr
    [prev] = [p for p in out.iterdir() if p.name.startswith("previous_")]
    assert (prev / "step0" / "rank" / "dump.json").is_file() and (prev / "mindspore_dump" / "rank_0" / "graphs").is_dir()
    data = json.loads((out / "step0" / "rank" / "dump.json").read_text())["data"]
    assert list(data)[:2] == ["Primitive.matmul.MatMul.0.forward", "Primitive.bias_add.BiasAdd.0.forward"]
    assert len(data) == 8                          # this run's kernels only, not both runs'


def test_start_model_roots_the_cell_names(root, tmp_path):
    """debugger.start(net) with net inside the compiled TrainOneStepCell: Cell names are relative to net, as in
    a PyNative dump with start(net), so the two dumps pair by name without any mapping."""
    static, _, _ = run_net(root, "graph", "mix", "statistics", "--start-net")
    pynative, _, _ = run_net(root, "pynative", "mix", "statistics", "--start-net")
    data = json.loads((static / "step0" / "rank" / "dump.json").read_text())["data"]
    cells = [n for n in data if n.startswith("Cell.")]
    for name in ("Cell.fc.Dense.forward.0", "Cell.block.Block.forward.0", "Cell.block.dense.Dense.forward.0",
                 "Cell.block.act.ReLU.forward.0", "Cell.head.Dense.forward.0"):
        assert name in cells, cells
    assert not any(n.startswith("Cell.network._backbone") for n in cells)     # net itself: no record
    construct = json.loads((static / "step0" / "rank" / "construct.json").read_text())
    assert construct["Cell.fc.Dense.forward.0"] is None
    assert construct["Cell.block.dense.Dense.forward.0"] == "Cell.block.Block.forward.0"
    rows, text = compare(static / "step0" / "rank", pynative / "step0" / "rank", tmp_path / "cmp")
    paired = {r["NPU Name"] for r in rows if r["Bench Name"] != "N/A"}
    assert {"Cell.fc.Dense.forward.0.input.0", "Cell.head.Dense.forward.0.output.0",
            "Primitive.matmul.MatMul.1.forward.input.1", "Cell.head.Dense.forward.0.parameters.weight"} <= paired
    assert len(paired) == 36
    assert "red: 0  yellow: 0  within noise: 0  equal: 36" in text


def test_without_step_the_dump_is_converted_at_exit(root):
    out, result, _ = run_net(root, "graph", "L0", "statistics", "--infer", "--steps", "1", "--no-step")
    data = json.loads((out / "step0" / "rank" / "dump.json").read_text())["data"]
    assert list(data) == ["Cell.fc.Dense.forward.0", "Cell.block.Block.forward.0", "Cell.block.dense.Dense.forward.0",
                          "Cell.block.act.ReLU.forward.0", "Cell.head.Dense.forward.0"]
    assert data["Cell.head.Dense.forward.0"]["output"][0]["Max"] == pytest.approx(max(max(r) for r in result["out"][0]))


def test_tuple_outputs_and_split_concat(tmp_path):
    """BatchNorm's kernel has 5 outputs (y and the running statistics, taken through TupleGetItem): the Cell's
    output is y only; split/concat in the model's own construct do not leak into the loss Cell's inputs."""
    res = subprocess.run([sys.executable, str(HERE / "ms_graph_lenet.py"), str(tmp_path / "d")], capture_output=True,
                         text=True, timeout=300, env=_env(), cwd=str(tmp_path))
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    rank = tmp_path / "d" / "step1" / "rank"
    data = json.loads((rank / "dump.json").read_text())["data"]
    shapes = {n: ([a["shape"] for a in v["input_args"]], [o["shape"] for o in v["output"]])
              for n, v in data.items() if n.startswith("Cell.")}
    assert shapes["Cell.bn.BatchNorm2d.forward.0"] == ([[2, 4, 8, 8]], [[2, 4, 8, 8]])
    assert shapes["Cell.network.WithLossCell.forward.0"] == ([[2, 1, 8, 8], [2]], [[]])
    assert shapes["Cell.ln.LayerNorm.forward.0"] == ([[2, 10]], [[2, 10]])
    assert set(data["Cell.bn.BatchNorm2d.forward.0"]["parameters"]) == {"gamma", "beta", "moving_mean", "moving_variance"}
    rows, text = compare(rank, rank, tmp_path / "cmp")
    assert rows and "red: 0  yellow: 0  within noise: 0" in text and "not compared: 0" in text


def test_step_selects_the_iterations(root):
    out, _, err = run_net(root, "graph", "L1", "statistics", "--infer", "--steps", "3", "--select-step1")
    assert sorted(p.name for p in out.iterdir() if p.name.startswith("step")) == ["step1"]
    assert "wrote no kernel dump" not in err and "dumped none" not in err
    assert len(json.loads((out / "step1" / "rank" / "dump.json").read_text())["data"]) == 8
