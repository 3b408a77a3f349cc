"""nan_analyze / overflow_check: the first node that made a NaN or inf, across ranks.

Real runs: 2 and 4 processes on gloo (127.0.0.1, a free port), a tiny model dumped with our PrecisionDebugger,
one step folder per scenario (a NaN/inf made before, during and after communication, on different ranks;
a clean step).  The workers are this file run as a script (``python test_nan_analyze.py RANK WORLD PORT OUT``).
Unit tests on hand-written step folders cover the phases, the cross-rank linking and the bad inputs.
"""

from __future__ import annotations

import json
import math
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent


# ------------------------------------------------------------------------------------------ worker
def _worker(rank, world, port, out):
    import torch
    import torch.distributed as dist
    import torch.nn as nn

    from msprobe.pytorch import PrecisionDebugger

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    torch.set_num_threads(1)
    cfg = {"task": "statistics", "dump_path": os.path.join(out, f"dump{world}"), "rank": [], "step": [],
           "level": "mix", "async_dump": False,
           "statistics": {"scope": [], "list": [], "data_mode": ["all"], "summary_mode": "statistics"}}
    cfg_path = os.path.join(out, f"config{world}_{rank}.json")
    with open(cfg_path, "w") as f:
        json.dump(cfg, f)
    dbg = PrecisionDebugger(config_path=cfg_path)
    torch.manual_seed(0)
    model = nn.Linear(4, 4)

    def x_of():
        return torch.rand(2, 4) + 0.5          # positive inputs

    def step(fn):
        x = x_of()
        if world == 2 and rank == 1 and fn.__name__ == "during_data":
            x[0, 0] = float("nan")
        dbg.start(model)
        fn(x)
        dbg.stop()
        dbg.step()

    if world == 2:
        def before(x):                        # step0: rank 1 makes a NaN (log of negatives) before the all_reduce
            y = torch.log(x - 10) if rank == 1 else torch.log(x + 1)
            z = model(y)
            dist.all_reduce(z)
            z.mul(2)

        def during(x):                        # step1: between two all_reduces rank 1 makes a NaN; the 2nd spreads it
            z = model(x)
            dist.all_reduce(z)
            w = torch.log(z - 100) if rank == 1 else torch.log(z.abs() + 1)
            dist.all_reduce(w)
            w.mul(2)

        def during_data(x):                   # step2: rank 1's data is NaN already (step() writes it before
                                              # start(): x[0, 0] = nan while dumping is Tensor.__setitem__,
                                              # the op that made the NaN); the all_reduce carries it
            z = model(x)
            dist.all_reduce(z)
            z.mul(2)

        def after(x):                         # step3: rank 0 overflows (exp) after the last collective
            z = model(x)
            dist.all_reduce(z)
            torch.exp(z.abs() * 1000 + 100 if rank == 0 else z * 0)

        def clean(x):                         # step4
            z = model(x)
            dist.all_reduce(z)
            torch.exp(z * 0)

        scenarios = (before, during, during_data, after, clean)
    else:
        def before(x):                        # step0: rank 2 makes a NaN before the all_reduce
            y = torch.log(x - 10) if rank == 2 else torch.log(x + 1)
            z = model(y)
            dist.all_reduce(z)

        def p2p(x):                           # step1: rank 3 makes a NaN and sends it to rank 0; 1 -> 2 clean
            z = model(x)
            dist.all_reduce(z)
            if rank == 3:
                t = torch.log(z - 100)
                dist.send(t, dst=0)
            elif rank == 0:
                buf = torch.zeros(2, 4)
                buf = buf.add(1).mul(1).sub(1)
                dist.recv(buf, src=3)
                buf.mul(2)
            elif rank == 1:
                dist.send(z.add(1), dst=2)
            else:
                buf = torch.zeros(2, 4)
                dist.recv(buf, src=1)

        def bcast(x):                         # step2: rank 2 overflows and broadcasts the result to all
            z = model(x)
            dist.all_reduce(z)
            t = torch.exp(z.abs() * 1000 + 100) if rank == 2 else z.add(1).mul(1).sub(1).add(0)
            dist.broadcast(t, src=2)
            t.mul(2)

        def after(x):                         # step3: rank 1 makes an inf after the last collective
            z = model(x)
            dist.all_reduce(z)
            torch.exp(z.abs() * 1000 + 100 if rank == 1 else z * 0)

        scenarios = (before, p2p, bcast, after)
    for fn in scenarios:
        step(fn)
    dist.destroy_process_group()



# ------------------------------------------------------------------------------------------ helpers
def run_cli(args, cwd, timeout=120):
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.pop("MSPROBE_DEBUG", None)
    return subprocess.run([sys.executable, "-m", "msprobe", *[str(a) for a in args]], cwd=str(cwd), env=env,
                          capture_output=True, text=True, timeout=timeout)


def result_files(out):
    return sorted(Path(out).glob("anomaly_analyze_*.json")) if Path(out).is_dir() else []


def read_result(out):
    from msprobe.core.fileio import load_json

    files = result_files(out)
    assert len(files) == 1, files
    return load_json(str(files[0]), "anomaly_analyze")


def found(out):
    """{rank key: [op names]} of the one result file in ``out``."""
    return {k: [n["op_name"] for n in v] for k, v in read_result(out).items()}


def analyze(step_dir, tmp_path, *extra):
    out = tmp_path / ("out_" + Path(step_dir).name)
    res = run_cli(["-f", "pytorch", "nan_analyze", "-i", step_dir, "-o", out, *extra], tmp_path)
    assert res.returncode == 0, res.stderr
    return out, res


def T(mx, mn=None, shape=(4,)):
    """A tensor record with these Max / Min (Mean, Norm follow Max)."""
    mn = mx if mn is None else mn
    return {"type": "torch.Tensor", "dtype": "torch.float32", "shape": list(shape), "Max": mx, "Min": mn,
            "Mean": mx, "Norm": mx, "requires_grad": False}


def I(v):
    return {"type": "int", "value": v}


def R(inputs=(), outputs=(), **kwargs):
    return {"input_args": list(inputs), "input_kwargs": kwargs, "output": list(outputs)}


NAN, INF = float("nan"), float("inf")
OK = T(1.0, -1.0)


def write_step(root, ranks, construct=None, stack=True):
    """ranks: {rank: {record name: body}} -> root/rankN/{dump,construct,stack}.json (json's bare NaN)."""
    root = Path(root)
    for r, data in ranks.items():
        d = root / f"rank{r}"
        d.mkdir(parents=True, exist_ok=True)
        (d / "dump.json").write_text(json.dumps({"task": "statistics", "level": "L1", "framework": "pytorch",
                                                  "dump_data_dir": None, "data": data}, indent=4))
        (d / "construct.json").write_text(json.dumps((construct or {}).get(r, {n: None for n in data})))
        if stack:
            frames = {str(k): [[n], [f"File /usr/lib/python3/site-packages/torch/x.py, line 1, in f, \n y = g()",
                                     f"File /home/u/train.py, line {10 + k}, in step, \n call_{k}()"]]
                      for k, n in enumerate(data)}
            (d / "stack.json").write_text(json.dumps(frames))
    return root


def analyze_dict(root):
    from msprobe.core.nan_analyze import analyze_step

    res = analyze_step(str(root))
    return res, {(a.rank, a.op_name) for a in res.anomalies}


# ------------------------------------------------------------------------------------------ unit tests
def test_before_communication_all_ranks_that_make_one(tmp_path):
    step = write_step(tmp_path / "s", {
        0: {"Torch.log.0.forward": R([OK], [T(NAN)]), "Distributed.all_reduce.0.forward": R([T(NAN)], [T(NAN)])},
        1: {"Torch.exp.0.forward": R([OK], [T(1.0)]), "Tensor.div.0.forward": R([OK, T(0.0)], [T(INF, -INF)]),
            "Distributed.all_reduce.0.forward": R([T(INF)], [T(NAN)])},
        2: {"Torch.exp.0.forward": R([OK], [T(1.0)]), "Distributed.all_reduce.0.forward": R([OK], [T(NAN)])},
    })
    res, got = analyze_dict(step)
    assert res.phase == "before"
    assert got == {(0, "Torch.log.0.forward"), (1, "Tensor.div.0.forward")}


def test_ignored_ops_strings_and_nested_inputs(tmp_path):
    """Torch.empty*/fill* never count; 'nan' / '-Infinity' strings count; a NaN inside a list input (cat)
    is an input (the op only passed it on)."""
    step = write_step(tmp_path / "s", {0: {
        "Torch.empty_like.0.forward": R([OK], [T(NAN)]),
        "Torch.cat.0.forward": R([[OK, T("nan")]], [T("nan")]),
        "Torch.sqrt.0.forward": R([T(-1.0)], [T("NaN", "-Infinity")]),
        "Distributed.all_reduce.0.forward": R([T(NAN)], [T(NAN)]),
    }})
    res, got = analyze_dict(step)
    assert got == {(0, "Torch.sqrt.0.forward")}


def test_during_cause_on_one_rank_carried_to_all(tmp_path):
    """all_reduce.1 carries rank 1's log NaN; rank 0's all_reduce (finite in, NaN out) is only the effect,
    even though fewer ops ran before it."""
    ar = "Distributed.all_reduce.{}.forward"
    step = write_step(tmp_path / "s", {
        0: {ar.format(0): R([OK], [OK]), ar.format(1): R([OK], [T(NAN)]), "Tensor.mul.0.forward": R([T(NAN)], [T(NAN)])},
        1: {ar.format(0): R([OK], [OK]), "Tensor.sub.0.forward": R([OK], [OK]), "Tensor.add.0.forward": R([OK], [OK]),
            "Torch.log.0.forward": R([OK], [T(NAN)]), ar.format(1): R([T(NAN)], [T(NAN)])},
    })
    res, got = analyze_dict(step)
    assert res.phase == "during" and got == {(1, "Torch.log.0.forward")}
    a = res.anomalies[0]
    assert a.via == ar.format(1) and a.peers == [0] and a.layer == 1 and a.sub_layer == 2


def test_during_effect_when_the_nan_came_with_the_data(tmp_path):
    step = write_step(tmp_path / "s", {
        0: {"Functional.linear.0.forward": R([OK], [OK]), "Distributed.all_reduce.0.forward": R([OK], [T(NAN)])},
        1: {"Functional.linear.0.forward": R([T(NAN)], [T(NAN)]), "Distributed.all_reduce.0.forward": R([T(NAN)], [T(NAN)])},
    })
    res, got = analyze_dict(step)
    assert got == {(0, "Distributed.all_reduce.0.forward")}
    assert res.first_inputs[1] == ("Functional.linear.0.forward", ["input.0"])


def test_p2p_positional_and_broadcast_root(tmp_path):
    """send(t, 2) / recv(t, 0) (positional peers) link; a broadcast's root (src kwarg) is the cause."""
    step = write_step(tmp_path / "s", {
        0: {"Torch.log.0.forward": R([OK], [OK]), "Distributed.all_reduce.0.forward": R([OK], [OK]),
            "Torch.exp.0.forward": R([OK], [T(INF)]), "Distributed.send.0.forward": R([T(INF), I(2)], [])},
        1: {"Distributed.all_reduce.0.forward": R([OK], [OK]), "Tensor.add.0.forward": R([OK], [OK])},
        2: {"Distributed.all_reduce.0.forward": R([OK], [OK]), "Distributed.recv.0.forward": R([OK, I(0)], [T(INF)])},
    })
    res, got = analyze_dict(step)
    assert got == {(0, "Torch.exp.0.forward")} and res.anomalies[0].peers == [2]
    bc = "Distributed.broadcast.0.forward"
    step = write_step(tmp_path / "b", {
        0: {"Distributed.all_reduce.0.forward": R([OK], [OK]), bc: R([OK], [T(INF)], src=I(2))},
        1: {"Distributed.all_reduce.0.forward": R([OK], [OK]), bc: R([OK], [T(INF)], src=I(2))},
        2: {"Distributed.all_reduce.0.forward": R([OK], [OK]),
            "Tensor.add.0.forward": R([OK], [OK]), "Tensor.mul.0.forward": R([OK], [OK]),
            "Torch.exp.0.forward": R([OK], [T(INF)]), bc: R([T(INF)], [T(INF)], src=I(2))},
    })
    res, got = analyze_dict(step)
    assert got == {(2, "Torch.exp.0.forward")} and res.anomalies[0].peers == [0, 1]


def test_ranks_read_in_worker_processes_give_the_same_answer(tmp_path):
    from msprobe.core.nan_analyze import analyze_step

    ar = "Distributed.all_reduce.{}.forward"
    step = write_step(tmp_path / "s", {r: {ar.format(0): R([OK], [OK]),
                                           **({"Torch.log.0.forward": R([OK], [T(NAN)])} if r == 2 else {}),
                                           ar.format(1): R([T(NAN) if r == 2 else OK], [T(NAN)])} for r in range(4)})
    one = analyze_step(str(step), jobs=1)
    many = analyze_step(str(step), jobs=4)
    assert [(a.rank, a.op_name, a.peers) for a in one.anomalies] == [(a.rank, a.op_name, a.peers) for a in many.anomalies] \
        == [(2, "Torch.log.0.forward", [0, 1, 3])]
    assert sorted(many.ranks) == [0, 1, 2, 3] and many.first_inputs == one.first_inputs


def test_groups_layers(tmp_path):
    """Two groups {0,1} and {2,3}, linked by their group ranks: in their second all_reduce (layer 1) rank 1
    brings a NaN of its data (rank 0's op is only an effect) and rank 2 a NaN its log made: the cause wins."""
    ar = "Distributed.all_reduce.{}.forward"

    def g(*ranks):
        return {"type": "torch.ProcessGroup", "group_ranks": list(ranks)}
    step = write_step(tmp_path / "s", {
        0: {ar.format(0): R([OK], [OK], group=g(0, 1)), ar.format(1): R([OK], [T(NAN)], group=g(0, 1))},
        1: {ar.format(0): R([OK], [OK], group=g(0, 1)), ar.format(1): R([T(NAN)], [T(NAN)], group=g(0, 1))},
        2: {ar.format(0): R([OK], [OK], group=g(2, 3)), "Torch.log.0.forward": R([OK], [T(NAN)]),
            ar.format(1): R([T(NAN)], [T(NAN)], group=g(2, 3))},
        3: {ar.format(0): R([OK], [OK], group=g(2, 3)), ar.format(1): R([OK], [T(NAN)], group=g(2, 3))},
    })
    res, got = analyze_dict(step)
    # both second all_reduces are layer 1; in that layer the cause (rank 2's log) wins
    assert got == {(2, "Torch.log.0.forward")}


def test_after_and_kept_local(tmp_path):
    ar = "Distributed.all_reduce.0.forward"
    step = write_step(tmp_path / "a", {
        0: {ar: R([OK], [OK]), "Tensor.mul.0.forward": R([OK], [OK]), "Torch.exp.0.forward": R([OK], [T(INF)])},
        1: {ar: R([OK], [OK]), "Torch.log.0.forward": R([OK], [T(NAN)])},
    })
    res, got = analyze_dict(step)
    assert res.phase == "after" and got == {(0, "Torch.exp.0.forward"), (1, "Torch.log.0.forward")}
    # a NaN made between two collectives that never reaches one: the reference finds nothing; we name it
    step = write_step(tmp_path / "l", {
        0: {ar: R([OK], [OK]), "Torch.log.0.forward": R([OK], [T(NAN)]),
            "Distributed.all_reduce.1.forward": R([OK], [OK])},
        1: {ar: R([OK], [OK]), "Distributed.all_reduce.1.forward": R([OK], [OK])},
    })
    res, got = analyze_dict(step)
    assert res.phase == "local" and got == {(0, "Torch.log.0.forward")}


def test_result_file_layout_and_console(tmp_path):
    step = write_step(tmp_path / "s", {
        0: {"Torch.log.0.forward": R([T(-6.0)], [T(NAN)]), "Distributed.all_reduce.0.forward": R([T(NAN)], [T(NAN)])},
        1: {"Distributed.all_reduce.0.forward": R([OK], [T(NAN)])},
    }, construct={0: {"Torch.log.0.forward": "Module.block.Block.forward.0",
                      "Module.block.Block.forward.0": "Module.model.Net.forward.0", "Module.model.Net.forward.0": None}})
    out, res = analyze(step, tmp_path)
    files = result_files(out)
    assert len(files) == 1 and files[0].name.startswith("anomaly_analyze_")
    raw = files[0].read_text()
    assert '"Max": NaN' in raw and '"NaN"' not in raw          # bare NaN, as Python's json writes it
    node = read_result(out)["rank_0"][0]
    assert list(node) == ["op_name", "data_info", "construct_info", "stack_info"]
    assert list(node["data_info"]) == ["input_args", "input_kwargs", "output"]
    assert math.isnan(node["data_info"]["output"][0]["Max"]) and node["data_info"]["input_args"][0]["Min"] == -6.0
    assert node["construct_info"] == ["Module.model.Net.forward.0", "Module.block.Block.forward.0", "Torch.log.0.forward"]
    assert node["stack_info"][1].startswith("File /home/u/train.py, line 10")
    assert "Start searching anomaly node before communication." in res.stderr
    assert f"The analyze result is saved in: {files[0]}" in res.stderr
    assert "rank 0: Torch.log.0.forward" in res.stdout
    assert "source: /home/u/train.py:10 in step: call_0()" in res.stdout
    assert "non-finite: output.0 (Max NaN, Min NaN)" in res.stdout
    # read back by our own readers
    from msprobe.core.dump.reader import read_dump
    rows = read_dump(str(write_step(tmp_path / "back", {0: node["data_info"] and {node["op_name"]: node["data_info"]}})
                         / "rank0" / "dump.json"), "back")
    assert math.isnan(rows.stat_max[-1])
    # a second run keeps the first file
    run_cli(["overflow_check", "-i", step, "-o", out], tmp_path)
    assert len(result_files(out)) == 2


def test_nothing_found_says_so_and_writes_nothing(tmp_path):
    step = write_step(tmp_path / "s", {0: {"Distributed.all_reduce.0.forward": R([OK], [OK])},
                                       1: {"Distributed.all_reduce.0.forward": R([OK], [OK])}}, stack=False)
    out, res = analyze(step, tmp_path)
    assert not out.exists()
    assert "Cannot find any anomaly node, no need to generate analyze file." in res.stderr
    assert "No NaN or inf found" in res.stdout
    step = write_step(tmp_path / "d", {0: {"Functional.linear.0.forward": R([T(NAN)], [T(NAN)])}})
    out, res = analyze(step, tmp_path)
    assert not out.exists() and "No op made a NaN or inf" in res.stdout
    assert "rank 0: input.0 of Functional.linear.0.forward" in res.stdout


def test_without_construct_and_stack(tmp_path):
    step = write_step(tmp_path / "s", {0: {"Torch.log.0.forward": R([OK], [T(NAN)])}}, stack=False)
    (step / "rank0" / "construct.json").unlink()
    out, res = analyze(step, tmp_path)
    node = read_result(out)["rank_0"][0]
    assert node["construct_info"] == ["Torch.log.0.forward"] and node["stack_info"] == {}
    assert "source: (no user frame in stack.json)" in res.stdout


@pytest.mark.parametrize("case", ["no_ranks", "steps", "md5_only", "tensor_no_stats", "bad_json", "task",
                                  "out_is_file", "mindspore"])
def test_bad_input_one_line(tmp_path, case):
    step = tmp_path / "step0"
    out = tmp_path / "out"
    args = ["nan_analyze", "-i", step, "-o", out]
    if case == "no_ranks":
        (step / "logs").mkdir(parents=True)
        want = "holds no rank folders"
    elif case == "steps":
        write_step(tmp_path / "step0" / "step3", {0: {"Torch.log.0.forward": R([OK], [T(NAN)])}})
        want = "holds step folders (step3)"
    elif case in ("md5_only", "tensor_no_stats"):
        leaf = ({"type": "torch.Tensor", "dtype": "torch.float32", "shape": [4], "md5": "0badf00d"} if case == "md5_only"
                else {"type": "torch.Tensor", "dtype": "torch.float32", "shape": [4], "data_name": "x.pt"})
        write_step(step, {0: {"Torch.log.0.forward": R([leaf], [leaf])}})
        want = "holds no statistics"
    elif case == "bad_json":
        write_step(step, {0: {"Torch.log.0.forward": R([OK], [OK])}})
        (step / "rank0" / "dump.json").write_text('{"task": "statistics", "data": {"x": [1, }')
        want = "is not valid JSON"
    elif case == "task":
        write_step(step, {0: {}})
        p = step / "rank0" / "dump.json"
        p.write_text(p.read_text().replace('"statistics"', '"structure"'))
        want = "nan_analyze works on dumps made with task"
    elif case == "out_is_file":
        write_step(step, {0: {"Torch.log.0.forward": R([OK], [T(NAN)])}})
        out.write_text("x")
        want = "exists and is not a directory"
    else:
        write_step(step, {0: {"Torch.log.0.forward": R([OK], [T(NAN)])}})
        args = ["-f", "mindspore"] + args
        want = "analyses PyTorch dumps"
    res = run_cli(args, tmp_path)
    assert res.returncode == 2, res.stderr
    lines = [ln for ln in res.stderr.splitlines() if ln.startswith("msprobe: error:")]
    assert len(lines) == 1 and want in lines[0], res.stderr
    assert "Traceback" not in res.stderr
    assert not out.exists() or out.is_file()


def test_folder_layouts(tmp_path):
    """A single rank folder, proc folders (numbered in order), and two folders for one rank (refused)."""
    from msprobe.core.errors import MsprobeError
    from msprobe.core.nan_analyze import analyze_step

    step = write_step(tmp_path / "s", {3: {"Torch.log.0.forward": R([OK], [T(NAN)])}})
    assert [(a.rank, a.op_name) for a in analyze_step(str(step / "rank3")).anomalies] == [(3, "Torch.log.0.forward")]
    step = write_step(tmp_path / "p", {0: {"Tensor.add.0.forward": R([OK], [OK])}, 1: {"Torch.log.0.forward": R([OK], [T(NAN)])}})
    (step / "rank0").rename(step / "proc4711")
    (step / "rank1").rename(step / "proc4712")
    assert [(a.rank, a.op_name) for a in analyze_step(str(step)).anomalies] == [(1, "Torch.log.0.forward")]
    step = write_step(tmp_path / "d", {0: {"Torch.log.0.forward": R([OK], [T(NAN)])}})
    (step / "rank").mkdir()
    with pytest.raises(MsprobeError, match="both rank 0"):
        analyze_step(str(step))


def test_backward_record_layout(tmp_path):
    step = write_step(tmp_path / "s", {0: {
        "Functional.linear.0.forward": {"input_args": [OK], "input_kwargs": {}, "output": [OK]},
        "Functional.linear.0.backward": {"input": [OK], "output": [T(INF, -INF), OK]}}})
    out, res = analyze(step, tmp_path)
    node = read_result(out)["rank_0"][0]
    assert node["op_name"] == "Functional.linear.0.backward" and list(node["data_info"]) == ["input", "output"]
    assert node["data_info"]["output"][0]["Min"] == -INF
    assert "non-finite: output.0 (Max Infinity, Min -Infinity)" in res.stdout


def test_mindspore_dump_and_negative_jobs(tmp_path):
    step = write_step(tmp_path / "s", {0: {"Tensor.add.0.forward": R([OK], [OK])}})
    p = step / "rank0" / "dump.json"
    p.write_text(p.read_text().replace('"pytorch"', '"mindspore"'))
    res = run_cli(["overflow_check", "-i", step, "-o", tmp_path / "o"], tmp_path)
    assert res.returncode == 2 and "is a mindspore dump" in res.stderr
    res = run_cli(["overflow_check", "-i", step, "-j", "-1"], tmp_path)
    assert res.returncode == 2 and "-j/--jobs must be 0" in res.stderr


def test_works_when_torch_cannot_be_imported(tmp_path):
    """msprobe.core never imports torch: nan_analyze runs where `import torch` raises."""
    fake = tmp_path / "fake" / "torch"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text('raise RuntimeError("Failed to load the backend extension: torch_npu.")\n')
    step = write_step(tmp_path / "s", {0: {"Torch.log.0.forward": R([OK], [T(NAN)])}})
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(fake.parent), str(ROOT)]))
    res = subprocess.run([sys.executable, "-m", "msprobe", "nan_analyze", "-i", str(step), "-o", str(tmp_path / "o")],
                         env=env, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert "rank 0: Torch.log.0.forward" in res.stdout


def test_source_line_is_the_users_frame():
    from msprobe.core.nan_analyze.report import source_line

    torch_frame = "File /venv/lib/python3.11/site-packages/torch/nn/functional.py, line 5, in f, \n return g()"
    assert source_line([torch_frame, "File /home/u/train.py, line 9, in step, \n loss = f(x)"]) == \
        "/home/u/train.py:9 in step: loss = f(x)"
    # code installed as a package (Megatron): the first frame outside torch and msprobe
    assert source_line([torch_frame, "File /venv/lib/python3.11/site-packages/megatron/core/x.py, line 3, in fwd, \n y = h(x)"]) \
        == "/venv/lib/python3.11/site-packages/megatron/core/x.py:3 in fwd: y = h(x)"
    assert source_line(["File /a, b/t.py, line 1, in <module>, \n x()"]) == "/a, b/t.py:1 in <module>: x()"
    assert source_line([]) is None and source_line({}) is None


def test_damaged_construct_and_stack_only_warn(tmp_path):
    step = write_step(tmp_path / "s", {0: {"Torch.log.0.forward": R([OK], [T(NAN)])}})
    (step / "rank0" / "construct.json").write_text('{"Torch.log.0.forward": ')
    (step / "rank0" / "stack.json").write_text('{"0": [["Torch.log.0.forward"], "not a list"]}')
    out, res = analyze(step, tmp_path)
    node = read_result(out)["rank_0"][0]
    assert node["construct_info"] == ["Torch.log.0.forward"] and node["stack_info"] == {}
    assert "the result lists no parent modules" in res.stderr and "the result has no call stacks" in res.stderr


def test_mutated_inputs_never_crash(tmp_path, capsys):
    """Random damage to dump.json, construct.json and stack.json (cuts, junk values, deleted characters):
    exit status 0 or 2, at most one error line, never a traceback or an internal error, inputs unchanged."""
    import random

    from msprobe.cli.main import main

    rnd = random.Random(1234)
    ar = "Distributed.all_reduce.{}.forward"
    junk = ["null", "[]", "{}", '"x"', "1e999", "-Infinity", "true", '{"type": "torch.ProcessGroup"}', "[[[]]]", '"nan"']
    base = {0: {ar.format(0): R([OK], [OK], group={"type": "torch.ProcessGroup", "group_ranks": [0, 1]}),
                "Torch.log.0.forward": R([OK], [T(NAN)]), "Distributed.send.0.forward": R([T(NAN)], [], dst=I(1))},
            1: {ar.format(0): R([OK], [OK]), "Distributed.recv.0.forward": R([OK, I(0)], [T(NAN)]),
                "Tensor.mul.0.forward": R([T(NAN)], [T(NAN)])}}
    for k in range(40):
        step = write_step(tmp_path / f"m{k}", base)
        target = step / f"rank{rnd.randint(0, 1)}" / rnd.choice(["dump.json", "dump.json", "construct.json", "stack.json"])
        text = target.read_text()
        how = rnd.choice(["cut", "junk", "delete"])
        if how == "cut":
            text = text[:rnd.randint(0, len(text))]
        elif how == "junk":
            starts = [i for i, c in enumerate(text) if c in "[{0123456789-\"ntf" and text[i - 1] in ":[, "]
            i = rnd.choice(starts)
            j = i + 1
            while j < len(text) and text[j] not in ",]}":
                j += 1
            text = text[:i] + rnd.choice(junk) + text[j:]
        else:
            i = rnd.randrange(len(text))
            text = text[:i] + text[i + 1:]
        target.write_text(text)
        before = {p: p.read_bytes() for p in step.rglob("*.json")}
        rc = main(["nan_analyze", "-i", str(step), "-o", str(tmp_path / f"o{k}"), "-j", "1", "-q"])
        cap = capsys.readouterr()
        assert rc in (0, 2), (k, how, target.name, cap.err)
        assert "Traceback" not in cap.err and "internal error" not in cap.err, (k, cap.err)
        assert len([ln for ln in cap.err.splitlines() if ln.startswith("msprobe: error:")]) == (1 if rc else 0)
        assert {p: p.read_bytes() for p in step.rglob("*.json")} == before


def test_help_names_both_spellings(tmp_path):
    res = run_cli(["nan_analyze", "-h"], tmp_path)
    assert res.returncode == 0 and "-i STEP_DIR" in res.stdout and "anomaly_analyze_" in res.stdout
    assert "overflow_check" in res.stdout
    res = run_cli(["-h"], tmp_path)
    assert "nan_analyze" in res.stdout and "overflow_check" in res.stdout


# ------------------------------------------------------------------------------------------ real gloo runs
def _free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _gloo_run(out, world):
    pytest.importorskip("torch")
    import torch.distributed as dist
    if not dist.is_available() or not dist.is_gloo_available():
        pytest.skip("torch.distributed with gloo is not available")
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env["OMP_NUM_THREADS"] = "1"
    port = _free_port()
    procs = [subprocess.Popen([sys.executable, str(Path(__file__).resolve()), str(r), str(world), str(port), str(out)],
                              cwd=str(out), env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for r in range(world)]
    logs = []
    for p in procs:
        try:
            logs.append(p.communicate(timeout=180)[0])
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            pytest.fail(f"the {world}-rank gloo run did not finish in 180 s")
    for p, log in zip(procs, logs):
        assert p.returncode == 0, f"worker failed (rc {p.returncode}):\n{log[-4000:]}"
    return Path(out) / f"dump{world}"


@pytest.fixture(scope="module")
def dump2(tmp_path_factory):
    return _gloo_run(tmp_path_factory.mktemp("gloo2"), 2)


@pytest.fixture(scope="module")
def dump4(tmp_path_factory):
    return _gloo_run(tmp_path_factory.mktemp("gloo4"), 4)


#: (world, step) -> (phase, {rank key: [op]})
EXPECTED = {
    (2, 0): ("before", {"rank_1": ["Torch.log.0.forward"]}),
    (2, 1): ("during", {"rank_1": ["Torch.log.0.forward"]}),
    (2, 2): ("during", {"rank_0": ["Distributed.all_reduce.0.forward"]}),
    (2, 3): ("after", {"rank_0": ["Torch.exp.0.forward"]}),
    (4, 0): ("before", {"rank_2": ["Torch.log.0.forward"]}),
    (4, 1): ("during", {"rank_3": ["Torch.log.0.forward"]}),
    (4, 2): ("during", {"rank_2": ["Torch.exp.0.forward"]}),
    (4, 3): ("after", {"rank_1": ["Torch.exp.0.forward"]}),
}


@pytest.mark.parametrize("step", [0, 1, 2, 3])
def test_gloo_2_ranks(dump2, tmp_path, step):
    phase, want = EXPECTED[(2, step)]
    out, res = analyze(dump2 / f"step{step}", tmp_path)
    assert found(out) == want
    assert f"First NaN/inf {phase} communication" in res.stdout
    assert "source: " + str(Path(__file__).resolve()) in res.stdout   # the user's line, not torch's
    if step == 1:
        assert "passed on by Distributed.all_reduce.1.forward to rank(s) 0" in res.stdout
        assert "rank 0: input.0 of Tensor.mul.0.forward" in res.stdout
    if step == 2:   # rank 1's data was NaN already: where it entered
        assert "rank 1: input.0 of Functional.linear.0.forward" in res.stdout


def test_gloo_2_ranks_clean(dump2, tmp_path):
    out, res = analyze(dump2 / "step4", tmp_path, )
    assert not out.exists() and "No NaN or inf found" in res.stdout


@pytest.mark.parametrize("step", [0, 1, 2, 3])
def test_gloo_4_ranks(dump4, tmp_path, step):
    phase, want = EXPECTED[(4, step)]
    out, res = analyze(dump4 / f"step{step}", tmp_path)
    assert found(out) == want
    assert f"First NaN/inf {phase} communication" in res.stdout
    if step == 1:
        assert "passed on by Distributed.send.0.forward to rank(s) 0" in res.stdout
    if step == 2:
        assert "passed on by Distributed.broadcast.0.forward to rank(s) 0, 1, 3" in res.stdout


# ------------------------------------------------------------------------------------------ the reference
def _ref_python(name="venv833", module="nan_analyze"):
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        from refvenv import ref_venv
    finally:
        sys.path.pop(0)
    venv = ref_venv(name)
    exe = venv / "bin" / "python"
    if not exe.exists() or not list((venv / "lib").glob(f"python*/site-packages/msprobe/{module}")):
        return None, f"the reference venv {venv} with msprobe/{module} is missing; benchmarks/README.md says how to build it"
    return exe, None


#: the reference runs on these of our steps, all in one process per version (its import takes seconds)
REF_CASES = [(2, 1), (2, 2), (4, 1), (4, 2)]
#: version -> (venv, package folder, the analyser's class)
REF_VERSIONS = {"8.3.3": ("venv833", "nan_analyze", "msprobe.nan_analyze.analyzer:NanAnalyzer"),
                "26.2.0": ("venv2620", "overflow_check", "msprobe.overflow_check.analyzer:OverFlowCheck")}
_REF_SCRIPT = """
import importlib, sys
mod, cls = sys.argv[1].split(":")
Analyzer = getattr(importlib.import_module(mod), cls)
args = sys.argv[2:]
for dump, out in zip(args[::2], args[1::2]):
    Analyzer(dump, out).analyze()
"""


@pytest.fixture(scope="module")
def reference(dump2, dump4, tmp_path_factory):
    """{version: {(world, step): (our output dir, the reference's output dir, its log)}} on our gloo dumps;
    a version whose venv is missing maps to the reason."""
    base = tmp_path_factory.mktemp("ref")
    dumps = {2: dump2, 4: dump4}
    ours = {}
    for world, step in REF_CASES:
        (base / f"ours{world}_{step}").mkdir()
        ours[(world, step)], _ = analyze(dumps[world] / f"step{step}", base / f"ours{world}_{step}")
    out = {}
    for version, (venv, folder, cls) in REF_VERSIONS.items():
        exe, why = _ref_python(venv, folder)
        if exe is None:
            out[version] = why
            continue
        argv = []
        for world, step in REF_CASES:
            argv += [str(dumps[world] / f"step{step}"), str(base / f"ref{version}_{world}_{step}")]
        res = subprocess.run([str(exe), "-c", _REF_SCRIPT, cls, *argv], capture_output=True, text=True, timeout=600,
                             cwd=str(base))
        assert res.returncode == 0, res.stderr[-3000:]
        out[version] = {case: (ours[case], base / f"ref{version}_{case[0]}_{case[1]}", res.stdout + res.stderr)
                        for case in REF_CASES}
    return out


def _ref_of(reference, version):
    got = reference[version]
    if isinstance(got, str):
        pytest.skip(got)
    return got


@pytest.mark.parametrize("version", list(REF_VERSIONS))
@pytest.mark.parametrize("world,step", [(2, 1), (2, 2), (4, 1)])
def test_reference_agrees_on_our_dumps(reference, version, world, step):
    """The reference's nan_analyze (8.3.3) / overflow_check (26.2.0) on our dumps names the same rank and op,
    in a byte-identical file.  (Not on (4, 2): see test_reference_differs_on_broadcast_root.)"""
    ours, ref_out, _ = _ref_of(reference, version)[(world, step)]
    assert found(ref_out) == found(ours) == EXPECTED[(world, step)][1]
    assert result_files(ref_out)[0].read_bytes() == result_files(ours)[0].read_bytes()


@pytest.mark.parametrize("version", list(REF_VERSIONS))
def test_reference_differs_on_broadcast_root(reference, version):
    """docs/nan_analyze.md NA1: the reference does not link the receivers of broadcast(t, src=2) to the root
    and names a receiver's broadcast (an effect); msprobe names the root's exp that made the inf."""
    ours, ref_out, log = _ref_of(reference, version)[(4, 2)]
    assert 'Cannot find connected communication node for "2.Distributed.broadcast.0.forward"' in log
    ref = found(ref_out)
    assert list(ref.values()) == [["Distributed.broadcast.0.forward"]] and "rank_2" not in ref
    assert found(ours) == {"rank_2": ["Torch.exp.0.forward"]}


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    _worker(int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4])
