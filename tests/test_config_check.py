"""config_check: static packs (env, pip, hyperparameters), the compare's sheets and verdicts, dynamic
collection on a real 2-process gloo run, the checkpoint similarity mode, bad input.

The gloo workers are this file run as a script (``python test_config_check.py RANK PORT OUT``).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
WORLD = 2


# ------------------------------------------------------------------------------------ gloo worker
def _worker(rank, port, out):
    """Both environments in one 2-rank run (half the cost of two runs): two copies of one model, each with
    its own ConfigChecker and pack; the 'cmp' copy sees rank 1's batch of step 1 changed."""
    from msprobe.core.config_check import ConfigChecker

    ConfigChecker.apply_patches("pytorch")  # before anything draws random numbers
    import copy

    import torch
    import torch.distributed as dist
    import torch.nn as nn

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=WORLD)
    torch.set_num_threads(1)
    torch.manual_seed(0)
    models = {"bench": nn.Sequential(nn.Linear(8, 4), nn.ReLU(), nn.Linear(4, 2))}
    models["cmp"] = copy.deepcopy(models["bench"])
    opts = {}
    for variant, model in models.items():
        ConfigChecker(model=model, shell_path=[], output_zip_path=os.path.join(out, f"{variant}.zip"), fmk="pytorch")
        opts[variant] = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(2):
        g = torch.Generator().manual_seed(100 * step + rank)
        x = torch.randn(3, 8, generator=g)
        noise = torch.rand(1)  # a random op called from the training loop, counted by call stack
        for variant, model in models.items():
            batch = x.clone()
            if variant == "cmp" and rank == 1 and step == 1:
                batch[0, 0] += 1.0  # the one difference: rank 1's batch of step 1
            loss = model(batch).sum() + 0 * noise.sum()
            opts[variant].zero_grad()
            loss.backward()
            for p in model.parameters():
                dist.all_reduce(p.grad)
            opts[variant].step()
    dist.barrier()
    dist.destroy_process_group()


def _free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _gloo_run(out: Path):
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env["OMP_NUM_THREADS"] = "1"
    port = _free_port()
    procs = [subprocess.Popen([sys.executable, str(Path(__file__).resolve()), str(r), str(port), str(out)],
                              cwd=str(out), env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True) for r in range(WORLD)]
    logs = []
    for p in procs:
        try:
            logs.append(p.communicate(timeout=150)[0])
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            pytest.fail("the 2-rank gloo run did not finish in 150 s")
    for p, log in zip(procs, logs):
        assert p.returncode == 0, f"worker failed (rc {p.returncode}):\n{log[-4000:]}"
    return logs


# ------------------------------------------------------------------------------------------ helpers
def _cli(*argv):
    from msprobe.cli.main import main

    return main(list(argv))


def _sheets(path):
    import openpyxl

    wb = openpyxl.load_workbook(path, read_only=True)
    out = {}
    for ws in wb.worksheets:
        rows = [list(r) for r in ws.iter_rows(values_only=True)]
        out[ws.title] = [dict(zip(rows[0], r)) for r in rows[1:]]
    wb.close()
    return out


def _fake_package(root: Path, name: str, version: str) -> Path:
    d = root / f"{name}-{version}.dist-info"
    d.mkdir(parents=True)
    (d / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    return root


SCRIPT = """#!/bin/bash
LR={lr}
GPT_ARGS="
    --num-layers 2 \\
    --seq-length 4096 \\
"
torchrun --nproc_per_node 2 pretrain_gpt.py $GPT_ARGS \\
    --lr $LR \\
    --use-flash-attn \\
    --micro-batch-size 1   # a comment
"""


def _static_pack(tmp_path, monkeypatch, name, *, nccl, peft, lr):
    """One environment's static pack: NCCL_DETERMINISTIC, the installed 'peft' version and the script's lr."""
    work = tmp_path / name
    work.mkdir()
    script = work / "train.sh"
    script.write_text(SCRIPT.format(lr=lr))
    (work / "model.yaml").write_text("model:\n  hidden_size: 64\n  layers: [1, 2]\n")
    site = _fake_package(work / "site", "peft", peft)
    with monkeypatch.context() as m:
        m.syspath_prepend(str(site))
        for var in ("NCCL_DETERMINISTIC", "CUDA_LAUNCH_BLOCKING", "NCCL_ALGO", "CUDA_VISIBLE_DEVICES"):
            m.delenv(var, raising=False)
        m.delenv("ASCEND_HOME_PATH", raising=False)
        for var in [k for k in os.environ if "ASCEND" in k]:
            m.delenv(var)
        if nccl is not None:
            m.setenv("NCCL_DETERMINISTIC", nccl)
        out = work / "pack.zip"
        assert _cli("-f", "pytorch", "config_check", "-d", str(script), str(work / "model.yaml"), "-o", str(out)) == 0
    return out


# ------------------------------------------------------------------------------------------ static
def test_static_packs_one_env_one_package_one_lr(tmp_path, monkeypatch):
    a = _static_pack(tmp_path, monkeypatch, "bench", nccl=None, peft="0.10.0", lr="0.0001")
    b = _static_pack(tmp_path, monkeypatch, "cmp", nccl="1", peft="0.11.1", lr="0.0002")
    with zipfile.ZipFile(a) as zf:
        names = set(zf.namelist())
        hyper = json.loads(zf.read("hyperparameters/hyperparameters_static.json"))
    assert {"env", "pip", "hyperparameters/hyperparameters_static.json"} <= names
    assert hyper["lr"] == "0.0001" and hyper["seq-length"] == "4096" and hyper["use-flash-attn"] is True
    assert hyper["micro-batch-size"] == "1" and hyper["model.hidden_size"] == 64 and hyper["model.layers"] == [1, 2]

    out = tmp_path / "result"
    assert _cli("-f", "pytorch", "config_check", "-c", str(a), str(b), "-o", str(out)) == 0
    sheets = _sheets(out / "result.xlsx")
    assert list(sheets) == ["summary", "env", "pip", "hyperparameters"]
    assert {r["filename"]: r["pass_check"] for r in sheets["summary"]} == {
        "env": "error", "pip": "error", "hyperparameters": "error"}
    # the env sheet holds bench's value under bench_value (the reference swaps them)
    assert sheets["env"] == [{"bench_env_name": "NCCL_DETERMINISTIC", "cmp_env_name": "NCCL_DETERMINISTIC",
                              "bench_value": "False", "cmp_value": "1", "level": "error"}]
    assert sheets["pip"] == [{"package": "peft", "bench version": "0.10.0", "cmp version": "0.11.1", "level": "error"}]
    assert sheets["hyperparameters"] == [{"file_name": "hyperparameters_static.json", "bench_para": "lr",
                                          "cmp_para": "lr", "bench_value": "0.0001", "cmp_value": "0.0002",
                                          "matched_with": "pure name", "level": "error"}]
    assert (out / "bench" / "env").is_file() and (out / "cmp" / "pip").is_file()


def test_identical_packs_all_pass(tmp_path, monkeypatch):
    a = _static_pack(tmp_path, monkeypatch, "bench", nccl="1", peft="0.10.0", lr="0.0001")
    b = _static_pack(tmp_path, monkeypatch, "cmp", nccl="1", peft="0.10.0", lr="0.0001")
    out = tmp_path / "result"
    assert _cli("config_check", "-c", str(a), str(b), "-o", str(out)) == 0
    sheets = _sheets(out / "result.xlsx")
    assert [(r["filename"], r["pass_check"]) for r in sheets["summary"]] == [
        ("env", "pass"), ("pip", "pass"), ("hyperparameters", "pass")]
    assert sheets["env"] == [] and sheets["pip"] == [] and sheets["hyperparameters"] == []


def test_existing_outputs_are_never_replaced(tmp_path, monkeypatch, capsys):
    a = _static_pack(tmp_path, monkeypatch, "bench", nccl=None, peft="1.0", lr="1")
    before = a.read_bytes()
    assert _cli("config_check", "-d", "-o", str(a)) == 2
    assert a.read_bytes() == before
    out = tmp_path / "result"
    assert _cli("config_check", "-c", str(a), str(a), "-o", str(out)) == 0
    stamp = (out / "result.xlsx").read_bytes()
    capsys.readouterr()
    assert _cli("config_check", "-c", str(a), str(a), "-o", str(out)) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "already holds" in err and "Traceback" not in err
    assert (out / "result.xlsx").read_bytes() == stamp


# ------------------------------------------------------------------------------------------ checkers
def test_env_values_follow_their_side_and_device_kinds():
    from msprobe.core.config_check.checkers import compare_env

    res = compare_env({"CUDA_LAUNCH_BLOCKING": "1"}, {})
    assert res.verdict == "error"
    assert res.rows == [["CUDA_LAUNCH_BLOCKING", "CUDA_LAUNCH_BLOCKING", "1", "0", "error"]]
    # an NPU bench against a GPU cmp: names are paired, NPU-only variables are warnings
    res = compare_env({"ASCEND_HOME_PATH": "/x", "HCCL_DETERMINISTIC": "true"}, {"NCCL_DETERMINISTIC": "true"})
    assert res.verdict == "warning"
    assert ["HCCL_INTRA_ROCE_ENABLE", "only bench has this env", "0", "", "warning"] in res.rows
    assert not any(r[0] == "HCCL_DETERMINISTIC" for r in res.rows)


def test_hyperparameter_matching_and_values():
    from msprobe.core.config_check.checkers import compare_hyper_params

    rows = compare_hyper_params({"learning_rate": "1e-4", "seq-length": "4096", "train.epochs": 3, "bench_only": 1},
                                {"lr": 0.0001, "seq_length": "2048", "num_epochs": 3, "cmp_only": "x"}, "f.json")
    by_bench = {r[1]: r for r in rows}
    assert "learning_rate" not in by_bench  # 1e-4 == 0.0001: equal numbers written differently
    assert by_bench["seq-length"][2:] == ["seq_length", "4096", "2048", "pure name", "error"]
    assert "train.epochs" not in by_bench  # matched to num_epochs through the alias table, equal
    assert by_bench["bench_only"][2] == "Only in benchmark" and by_bench["bench_only"][-1] == "warning"
    assert ["f.json", "Only in comparison", "cmp_only", "", "x", "", "warning"] in rows
    rows = compare_hyper_params({"lr": "0.1"}, {"learning_rate": "0.2"}, "f.json")
    assert rows == [["f.json", "lr", "learning_rate", "0.1", "0.2", "mapping", "error"]]


def test_shell_parsing_forms(tmp_path):
    from msprobe.core.config_check.collect import parse_shell

    cases = {
        "msrun": ("export MBS=4\nmsrun --worker_num=8 train.py --mbs ${MBS} --name 'a b' --flag\n",
                  {"worker_num": "8", "mbs": "4", "name": "a b", "flag": True}),
        "launch": ("python3 -m torch.distributed.launch --nproc_per_node=2 t.py --lr -0.5 --wd 0 # x\n",
                   {"nproc_per_node": "2", "lr": "-0.5", "wd": "0"}),
        "plain": ("# python old.py --lr 9\npython train.py --lr 0.1 --epochs 3\n", {"lr": "0.1", "epochs": "3"}),
        "none": ("echo hello\n", {}),
    }
    for name, (text, want) in cases.items():
        path = tmp_path / f"{name}.sh"
        path.write_text(text)
        assert parse_shell(str(path)) == want, name


def test_megatron_merge_pipeline_and_virtual_stages(tmp_path):
    """Layer numbers of pipeline / virtual-pipeline stages become global; tensor-parallel shards are joined
    (the merge logic alone, with a stand-in loader: no torch)."""
    import numpy as np

    from msprobe.core.config_check.ckpt import load_megatron, state_weights

    it = tmp_path / "iter_0000001"
    shards = {}
    for tp in range(2):
        for pp in range(2):
            d = it / f"mp_rank_{tp:02d}_{pp:03d}"
            d.mkdir(parents=True)
            (d / "model_optim_rng.pt").write_bytes(b"")
            models = {f"model{v}": {"language_model": {"encoder": {
                "layers.0.self_attention.query_key_value.weight": np.full((2, 3), 10 * pp + v + tp / 10),
                "layers.0.mlp.dense_4h_to_h.weight": np.full((3, 2), 1.0)}}} for v in range(2)}
            shards[str(d / "model_optim_rng.pt")] = state_weights(models)
    args = {"pipeline_model_parallel_size": 2, "expert_model_parallel_size": 1}
    weights = load_megatron(str(it), lambda path: (shards[path], args))
    # 2 pipeline stages x 2 virtual stages x 1 layer: global layer = local + (pp_size * vpp + pp) * 1
    assert sorted(weights) == sorted(f"decoder.layers.{n}.{k}" for n in range(4)
                                     for k in ("self_attention.linear_qkv.weight", "mlp.linear_fc2.weight"))
    qkv = weights["decoder.layers.3.self_attention.linear_qkv.weight"]  # pp 1, vpp 1
    assert qkv.shape == (4, 3) and qkv[0, 0] == 11.0 and qkv[2, 0] == pytest.approx(11.1)  # tp 0 then tp 1 rows
    assert weights["decoder.layers.1.mlp.linear_fc2.weight"].shape == (3, 4)  # row parallel: joined on dim 1


def test_weights_relative_diff_and_nan():
    from msprobe.core.config_check.checkers import _relative_diff, _stats_row

    assert _relative_diff(-2.0, -1.0) == pytest.approx(0.5)  # |b - c| / |b|, never negative
    assert _relative_diff(0.0, 1.0) is None
    nan = float("nan")
    row = _stats_row({"max": nan, "min": 1.0, "mean": 1.0, "norm": 2.0}, {"max": nan, "min": 1.0, "mean": 1.0, "norm": 2.0})
    assert row[0] is True  # NaN statistics on both sides are the same data


def test_damaged_random_entries_are_read_not_crashed_on():
    """Fuzzer finding: a random entry whose stack is a number or whose count is not a finite count made the
    compare raise TypeError / OverflowError (an internal error) instead of reading what it could."""
    from msprobe.core.config_check import pack as P
    from msprobe.core.config_check.checkers import compare_random

    odd = P.to_json({"torch.rand": [{"count": "x", "stack": 5}, {"count": float("inf"), "stack": None}, 7]})
    res = compare_random(P.Pack("a", {"random/rank0.json": odd}), P.Pack("b", {"random/rank0.json": b"{}"}))
    assert res.verdict == "error" and [r[2] for r in res.rows] == ["5", ""] and [r[4] for r in res.rows] == [0, 0]


def test_random_stacks_match_across_paths():
    from msprobe.core.config_check.checkers import stacks_match

    a = ["File /home/a/train.py, line 10, in main, x = torch.rand(3)"]
    b = ["File /opt/b/train.py, line 12, in main, x = torch.rand(3)"]
    c = ["File /opt/b/other.py, line 12, in run, y = np.random.rand(3)"]
    assert stacks_match(a, b) and not stacks_match(a, c) and not stacks_match(a, a + a)


# ------------------------------------------------------------------------------------------ dynamic
@pytest.fixture(scope="module")
def gloo_packs(tmp_path_factory):
    pytest.importorskip("torch")
    import torch.distributed as dist
    if not dist.is_available() or not dist.is_gloo_available():
        pytest.skip("torch.distributed with gloo is not available")
    out = tmp_path_factory.mktemp("cc_gloo")
    _gloo_run(out)
    return out, {variant: out / f"{variant}.zip" for variant in ("bench", "cmp")}


def test_dynamic_gloo_dataset_names_rank_and_step(gloo_packs):
    out, packs = gloo_packs
    with zipfile.ZipFile(packs["cmp"]) as zf:
        names = set(zf.namelist())
        weights = json.loads(zf.read("weights/step0/rank1/weight.json"))
        randoms = json.loads(zf.read("random/rank0.json"))
    for step in range(2):
        for rank in range(WORLD):
            assert f"weights/step{step}/rank{rank}/weight.json" in names
            assert f"dataset/step{step}/rank{rank}/dataset.json" in names
    assert {"env", "pip", "random/rank0.json", "random/rank1.json"} <= names
    assert set(weights) == {"0.weight", "0.bias", "2.weight", "2.bias"}
    assert set(weights["0.weight"]) == {"max", "min", "mean", "norm"}
    assert "torch.manual_seed" in randoms  # called before the first forward
    assert any(n.startswith("random/step1/") for n in names)  # torch.rand of step 1, after the first forward

    res = out / "result"
    assert _cli("-f", "pytorch", "config_check", "-c", str(packs["bench"]), str(packs["cmp"]), "-o", str(res)) == 0
    sheets = _sheets(res / "result.xlsx")
    summary = {r["filename"]: r["pass_check"] for r in sheets["summary"]}
    assert summary == {"env": "pass", "pip": "pass", "dataset": "error", "weights": "pass", "random": "pass"}
    bad = [r for r in sheets["dataset"] if r["equal"] is not True]
    assert [(r["step"], r["rank"], r["tag"], r["equal"]) for r in bad] == [(1, 1, "args.0", False)]
    assert bad[0]["max_relative_diff"] is not None
    assert len(sheets["dataset"]) == 4  # one input per step and rank
    assert all(r["equal"] is True for r in sheets["weights"]) and len(sheets["weights"]) == 16
    assert {r["op"] for r in sheets["random"]} >= {"torch.manual_seed", "torch.rand"}
    rand = [r for r in sheets["random"] if r["op"] == "torch.rand"]
    assert all(r["bench_count"] == r["cmp_count"] == 2 for r in rand) and {r["rank"] for r in rand} == {0, 1}
    # the same run compared with itself is all pass
    res2 = out / "result_same"
    assert _cli("config_check", "-c", str(packs["cmp"]), str(packs["cmp"]), "-o", str(res2)) == 0
    assert {r["pass_check"] for r in _sheets(res2 / "result.xlsx")["summary"]} == {"pass"}


REF_SCRIPT = """
import sys
import torch
import torch.nn as nn
from msprobe.core.config_check import ConfigChecker
ConfigChecker.apply_patches("pytorch")
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(8, 4), nn.ReLU(), nn.Linear(4, 2))  # rank 0 of the gloo worker, one process
ConfigChecker(model=model, output_zip_path=sys.argv[1], fmk="pytorch")
for step in range(2):
    x = torch.randn(3, 8, generator=torch.Generator().manual_seed(100 * step))
    model(x).sum().backward()
ConfigChecker.compare(sys.argv[2], sys.argv[1], sys.argv[3])  # the reference reads our pack (bench)
"""


def _ref_python():
    import importlib.util

    spec = importlib.util.spec_from_file_location("_msprobe_refvenv", ROOT / "benchmarks" / "refvenv.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.ref_venv("venv833") / "bin" / "python"


def test_packs_travel_both_ways_with_the_reference(gloo_packs, tmp_path):
    """A dynamic pack of the reference's 8.3.3 ConfigChecker compares with ours, and its compare reads ours."""
    ref_py = _ref_python()
    if not ref_py.exists():
        pytest.skip(f"the reference (mindstudio-probe 8.3.3) is not installed at {ref_py} "
                    "($MSPROBE_REF_CACHE/venv833); build it with the venv833 line of benchmarks/README.md")
    _, packs = gloo_packs
    script = tmp_path / "ref_train.py"
    script.write_text(REF_SCRIPT)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "RANK")}
    env["OMP_NUM_THREADS"] = "1"
    res = subprocess.run([str(ref_py), str(script), str(tmp_path / "ref.zip"), str(packs["bench"]),
                          str(tmp_path / "ref_result")], cwd=str(tmp_path), env=env, capture_output=True, text=True,
                         timeout=300)
    assert res.returncode == 0, res.stderr[-4000:]
    theirs = _sheets(tmp_path / "ref_result" / "result.xlsx")  # the reference on our pack
    assert {"summary", "env", "pip", "dataset", "weights", "random"} <= set(theirs)
    assert [r["equal"] for r in theirs["dataset"] if r["rank"] == 0] == [True, True]
    assert all(r["equal"] is True for r in theirs["weights"] if r["rank"] == 0 and r["step"] == 0)
    out = tmp_path / "ours"
    assert _cli("-f", "pytorch", "config_check", "-c", str(tmp_path / "ref.zip"), str(packs["bench"]), "-o", str(out)) == 0
    ours = _sheets(out / "result.xlsx")  # ours on the reference's pack
    assert [s["filename"] for s in ours["summary"]] == ["env", "pip", "dataset", "weights", "random"]
    by = {(r["step"], r["rank"]): r["equal"] for r in ours["dataset"]}
    assert by == {(0, 0): True, (1, 0): True, (0, 1): "only cmp have", (1, 1): "only cmp have"}
    step0 = [r for r in ours["weights"] if (r["step"], r["rank"]) == (0, 0)]
    assert len(step0) == 4 and all(r["equal"] is True for r in step0)


def test_dynamic_pack_of_an_earlier_run_is_refused(gloo_packs, tmp_path, monkeypatch):
    pytest.importorskip("torch")
    import shutil
    import time

    import torch.nn as nn

    from msprobe.core.config_check import ConfigChecker
    from msprobe.core.errors import MsprobeError

    _, packs = gloo_packs
    zip_path = tmp_path / "pack.zip"
    shutil.copyfile(packs["bench"], zip_path)
    before = zip_path.read_bytes()
    monkeypatch.delenv("RANK", raising=False)
    # a sibling rank of the same run (started before the zip was written, holding none of its entries) joins
    monkeypatch.setenv("RANK", "2")
    ConfigChecker(model=nn.Linear(2, 2), output_zip_path=str(zip_path), fmk="pytorch")
    before = zip_path.read_bytes()
    for rank in ("1", "0"):  # the zip already holds this rank's entries
        monkeypatch.setenv("RANK", rank)
        with pytest.raises(MsprobeError, match="earlier run"):
            ConfigChecker(model=nn.Linear(2, 2), output_zip_path=str(zip_path), fmk="pytorch")
    monkeypatch.delenv("RANK")
    old = tmp_path / "old.zip"
    shutil.copyfile(packs["bench"], old)
    os.utime(old, (time.time() - 3600, time.time() - 3600))  # last written before this process started
    with pytest.raises(MsprobeError, match="earlier run"):
        ConfigChecker(model=nn.Linear(2, 2), output_zip_path=str(old), fmk="pytorch")
    fresh = tmp_path / "fresh.zip"
    ConfigChecker(model=nn.Linear(2, 2), output_zip_path=str(fresh), fmk="pytorch")
    with pytest.raises(MsprobeError, match="earlier run"):  # a second checker of this process on the same zip
        ConfigChecker(model=nn.Linear(2, 2), output_zip_path=str(fresh), fmk="pytorch")
    assert zip_path.read_bytes() == before
    with pytest.raises(MsprobeError, match="ends with '.zip'"):
        ConfigChecker(model=nn.Linear(2, 2), output_zip_path="pack.tar", fmk="pytorch")
    with pytest.raises(MsprobeError, match="not torch.nn.Module"):
        ConfigChecker(model=object(), output_zip_path=str(tmp_path / "new.zip"), fmk="pytorch")
    with pytest.raises(MsprobeError, match="fmk must be one of"):
        ConfigChecker(output_zip_path=str(tmp_path / "new2.zip"), fmk="tensorflow")


def test_hook_failure_never_stops_training(tmp_path):
    torch = pytest.importorskip("torch")

    from msprobe.core.config_check import ConfigChecker

    model = torch.nn.Linear(3, 1)
    zip_path = tmp_path / "p.zip"
    checker = ConfigChecker(model=model, output_zip_path=str(zip_path), fmk="pytorch")
    zip_path.unlink()
    zip_path.mkdir()  # the pack can no longer be written
    y = model(torch.ones(2, 3))  # the forward still runs and gives the same result
    assert torch.equal(y, torch.nn.functional.linear(torch.ones(2, 3), model.weight, model.bias))
    assert checker._failed


def test_tensor_statistics():
    torch = pytest.importorskip("torch")
    from msprobe.pytorch.config_check.adapter import features, features_many

    ts = [torch.tensor([1.0, -2.0, 3.0]), torch.tensor([1, 2, 3]), torch.zeros(0),
          torch.tensor([0.5, 1.5], dtype=torch.bfloat16), torch.tensor([1 + 1j]), torch.tensor(2.0, dtype=torch.float64)]
    many = features_many(ts)
    assert many == [features(t) for t in ts]
    assert many[0] == {"max": 3.0, "min": -2.0, "mean": pytest.approx(2 / 3, rel=1e-6),
                       "norm": pytest.approx(14 ** 0.5, rel=1e-6)}
    assert many[1] == {"max": 3.0, "min": 1.0, "mean": 2.0, "norm": pytest.approx(14 ** 0.5, rel=1e-6)}
    assert many[2] == many[4] == {"max": None, "min": None, "mean": None, "norm": None}
    assert many[3]["mean"] == 1.0 and many[5] == {"max": 2.0, "min": 2.0, "mean": 2.0, "norm": 2.0}


def test_megatron_arguments_become_hyperparameters_dynamic(tmp_path, monkeypatch):
    from msprobe.core.config_check import checker as C
    from msprobe.core.config_check.checkers import compare_hyper_params

    pkg = tmp_path / "megatron"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "training.py").write_text(
        "import argparse\n_ARGS = argparse.Namespace(lr=0.0001, seq_length=4096, fn=print)\n"
        "def get_args():\n    return _ARGS\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(C, "_megatron_args", {})
    try:
        C.patch_megatron()
        import megatron.training as mt

        assert mt.get_args().lr == 0.0001  # unchanged for the training
        entries = C.base_entries(None)
    finally:
        for name in [n for n in sys.modules if n == "megatron" or n.startswith("megatron.")]:
            del sys.modules[name]
    dyn = json.loads(entries["hyperparameters/hyperparameters_dynamic.json"])
    assert dyn == {"lr": 0.0001, "seq_length": 4096, "fn": None}
    assert compare_hyper_params(dyn, dict(dyn, lr=0.0002), "hyperparameters_dynamic.json") == [
        ["hyperparameters_dynamic.json", "lr", "lr", "0.0001", "0.0002", "pure name", "error"]]


def test_public_import_paths_do_not_import_torch():
    code = ("import sys; from msprobe.core.config_check import ConfigChecker as A; "
            "from msprobe.pytorch.config_check import ConfigChecker as B; "
            "from msprobe.core.config_check.config_checker import ConfigChecker as C; "
            "assert A is B is C; print('torch' in sys.modules)")
    res = subprocess.run([sys.executable, "-c", code], cwd=str(ROOT), capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "False"


MS_PY = ROOT / ".venv-ms" / "bin" / "python"
MS_SCRIPT = """
import sys
from msprobe.core.config_check import ConfigChecker
ConfigChecker.apply_patches("mindspore")
import mindspore as ms
ms.set_context(mode=ms.PYNATIVE_MODE)
ms.set_seed(0)
net = ms.nn.Dense(4, 2)
ConfigChecker(model=net, output_zip_path=sys.argv[1], fmk="mindspore")
for step in range(2):
    y = net(ms.ops.randn(3, 4))
"""


def test_mindspore_dynamic_pack(tmp_path):
    """The MindSpore adapter for real, in .venv-ms (MindSpore 2.10 CPU, PyNative)."""
    if not MS_PY.exists():
        pytest.skip(".venv-ms not found: run `make ms-venv` to build the MindSpore venv")
    script = tmp_path / "train_ms.py"
    script.write_text(MS_SCRIPT)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["PYTHONPATH"] = str(ROOT)
    res = subprocess.run([str(MS_PY), str(script), str(tmp_path / "ms.zip")], cwd=str(tmp_path), env=env,
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-4000:]
    with zipfile.ZipFile(tmp_path / "ms.zip") as zf:
        names = set(zf.namelist())
        weights = json.loads(zf.read("weights/step0/rank0/weight.json"))
        randoms = json.loads(zf.read("random/rank0.json"))
    assert {"dataset/step0/rank0/dataset.json", "dataset/step1/rank0/dataset.json", "random/step1/rank0.json"} <= names
    assert set(weights) == {"weight", "bias"} and set(weights["weight"]) == {"max", "min", "mean", "norm"}
    assert "mindspore.set_seed" in randoms and "mindspore.ops.randn" in randoms
    out = tmp_path / "res"
    assert _cli("-f", "mindspore", "config_check", "-c", str(tmp_path / "ms.zip"), str(tmp_path / "ms.zip"),
                "-o", str(out)) == 0
    assert {r["pass_check"] for r in _sheets(out / "result.xlsx")["summary"]} == {"pass"}


def test_random_steps_compared_only_between_msprobe_packs():
    from msprobe.core.config_check import pack as P
    from msprobe.core.config_check.checkers import compare_random

    stack = ["File /x/train.py, line 3, in main, torch.rand(1)"]
    first = P.to_json({"torch.rand": [{"count": 1, "stack": stack}]})
    later = P.to_json({"torch.rand": [{"count": 1, "stack": stack}]})
    marker = P.to_json({"writer": "msprobe"})
    ours_more = P.Pack("a.zip", {P.MARKER: marker, "random/rank0.json": first, "random/step1/rank0.json": later})
    ours_less = P.Pack("b.zip", {P.MARKER: marker, "random/rank0.json": first})
    reference = P.Pack("c.zip", {"random/rank0.json": first})
    res = compare_random(ours_more, ours_less)  # a random call more in step 1: an error
    assert res.verdict == "error" and [r[4:] for r in res.rows] == [[2, 1, False]]
    res = compare_random(ours_more, reference)  # the reference's pack only covers up to the first forward
    assert res.verdict == "pass" and [r[4:] for r in res.rows] == [[1, 1, True]]


# ------------------------------------------------------------------------------------------ bad input
@pytest.mark.parametrize("case", ["not_zip", "zip_not_pack", "missing", "traversal", "bomb", "bad_json"])
def test_bad_packs_one_line(tmp_path, monkeypatch, capsys, case):
    good = _static_pack(tmp_path, monkeypatch, "good", nccl=None, peft="1.0", lr="1")
    bad = tmp_path / "bad.zip"
    if case == "not_zip":
        bad.write_text("hello")
        want = "not a zip file"
    elif case == "zip_not_pack":
        with zipfile.ZipFile(bad, "w") as zf:
            zf.writestr("readme.txt", "x")
        want = "not a config_check pack"
    elif case == "traversal":
        with zipfile.ZipFile(bad, "w") as zf:
            zf.writestr("env", "{}")
            zf.writestr("../evil", "x")
        want = "outside the pack"
    elif case == "bomb":
        with zipfile.ZipFile(bad, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=9) as zf:
            zf.writestr("env", b"0" * (50 << 20))
        want = "zip bomb"
    elif case == "bad_json":
        with zipfile.ZipFile(bad, "w") as zf:
            zf.writestr("env", "{not json")
        want = "entry env of pack"
    else:
        want = "does not exist"
    capsys.readouterr()
    out = tmp_path / "res"
    assert _cli("config_check", "-c", str(good), str(bad), "-o", str(out)) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and want in err and "Traceback" not in err, err
    assert not (out / "result.xlsx").exists() and not (out / "bench").exists()
    assert not (tmp_path / "evil").exists()


def test_unwritable_output_one_line(tmp_path, monkeypatch, capsys):
    good = _static_pack(tmp_path, monkeypatch, "good", nccl=None, peft="1.0", lr="1")
    blocker = tmp_path / "afile"
    blocker.write_text("x")
    capsys.readouterr()
    assert _cli("config_check", "-c", str(good), str(good), "-o", str(blocker / "res")) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert _cli("config_check", "-d", "-o", str(blocker / "p.zip")) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert _cli("config_check", "-d", "-o", str(tmp_path / "p.tar")) == 2
    assert "ends with '.zip'" in capsys.readouterr().err
    assert _cli("config_check", "-vc", "a.log", "b.log") == 2  # 26.x log modes: refused in one line
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "not implemented" in err


# ------------------------------------------------------------------------------------------ checkpoints
class _Hostile:
    def __reduce__(self):
        return (os.system, ("touch PWNED",))


class _MegatronEnum:  # stands for a class of Megatron's pickled in args (never importable on the compare side)
    def __init__(self, v):
        self.v = v


def _megatron_ckpt(root: Path, scale: float, tp: int = 2, extra=None):
    import torch

    it = root / "iter_0000005"
    torch.manual_seed(1)
    qkv = torch.randn(8, 4)
    proj = torch.randn(4, 6)
    norm = torch.ones(4)
    args = argparse.Namespace(tensor_model_parallel_size=tp, pipeline_model_parallel_size=1,
                              expert_model_parallel_size=1, num_experts=None, attn=_MegatronEnum(2),
                              extra=extra)
    for r in range(tp):
        d = it / f"mp_rank_{r:02d}"
        d.mkdir(parents=True)
        model = {"decoder.layers.0.self_attention.linear_qkv.weight": qkv.chunk(tp, 0)[r] * scale,
                 "decoder.layers.0.self_attention.linear_proj.weight": proj.chunk(tp, 1)[r],
                 "decoder.layers.0.input_layernorm.weight": norm}
        torch.save({"model": model, "args": args, "iteration": 5}, d / "model_optim_rng.pt")
    (root / "latest_checkpointed_iteration.txt").write_text("5")
    return root


def test_checkpoint_similarity(tmp_path, monkeypatch):
    pytest.importorskip("torch")
    monkeypatch.chdir(tmp_path)
    a = _megatron_ckpt(tmp_path / "a", 1.0)
    b = _megatron_ckpt(tmp_path / "b", 2.0)
    out = tmp_path / "sim.json"
    assert _cli("-f", "pytorch", "config_check", "-c", str(a), str(b), "-o", str(out)) == 0
    res = json.loads(out.read_text())
    assert set(res) == {"decoder.layers.0.self_attention.linear_qkv.weight",
                        "decoder.layers.0.self_attention.linear_proj.weight",
                        "decoder.layers.0.input_layernorm.weight"}
    qkv = res["decoder.layers.0.self_attention.linear_qkv.weight"]
    assert qkv["shape"] == [8, 4] and qkv["numel"] == 32  # the two tensor-parallel halves joined
    assert qkv["cos"] == pytest.approx(1.0, abs=1e-6) and qkv["l2"] > 0
    proj = res["decoder.layers.0.self_attention.linear_proj.weight"]
    assert proj["shape"] == [4, 6] and proj["l2"] == 0.0 and proj["cos"] == pytest.approx(1.0, abs=1e-6)
    assert _cli("config_check", "-c", str(a), str(b), "-o", str(out)) == 2  # never overwritten


def test_checkpoint_with_a_hostile_pickle_is_refused(tmp_path, monkeypatch, capsys):
    pytest.importorskip("torch")
    monkeypatch.chdir(tmp_path)
    a = _megatron_ckpt(tmp_path / "a", 1.0)
    b = _megatron_ckpt(tmp_path / "b", 1.0, extra=_Hostile())
    capsys.readouterr()
    assert _cli("config_check", "-c", str(a), str(b), "-o", str(tmp_path / "sim.json")) == 2
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if line.startswith("msprobe: error:")]
    assert len(errors) == 1 and "posix.system" in errors[0] and "nothing was run" in errors[0]
    assert "Traceback" not in err
    assert not (tmp_path / "PWNED").exists() and not (tmp_path / "sim.json").exists()


if __name__ == "__main__":  # a gloo worker
    _worker(int(sys.argv[1]), int(sys.argv[2]), sys.argv[3])
