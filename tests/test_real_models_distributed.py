"""msprobe's dump, compare, advisor (-da) and nan_analyze on real multi-rank training: a tiny random-init Llama
(tests/real_models) on 2 gloo processes under DistributedDataParallel, FSDP2 (``fully_shard``) and FSDP1
(``use_orig_params=True``), 2 steps each (tests/real_models/dist.py runs them all in one spawn).

What is checked, with real values:
* training is bit-identical with and without the debugger (losses, every gradient torch holds on the rank);
  FSDP2 with the dump used to stop in its first forward (``t.numpy()`` on an unsharded parameter made its
  storage non-resizable, and FSDP2 frees it with ``resize_(0)``);
* ``step{S}/rank{R}`` folders; module names under the wrappers (``Module.module.`` for DDP, none for FSDP2,
  ``Module._fsdp_wrapped_module.`` for FSDP1);
* ``parameters_grad`` holds the gradient each parameter received on that rank before the wrapper's
  communication (full size under FSDP: the unsharded parameter's), equal to torch's within fp32 rounding; the
  mean of both ranks' records is torch's reduced gradient. Under FSDP2/FSDP1 it used to be null everywhere;
* FSDP2's collectives (``all_gather_single``, ``reduce_scatter_single``, torch 2.13's names) are recorded, the
  output buffer among their inputs without values (it is leftover memory), and two clean runs compare equal
  (they used to differ in FSDP2's buffers: compare and -da named ``Tensor.narrow`` / ``Tensor.split``);
* a gradient fault planted on rank 1 (x1.5 on layer 1's ``mlp.down_proj.weight``) is named by the advisor and
  -da on rank 1 only; an activation fault (x1.05 on layer 1's MLP activation) too;
* nan_analyze names rank 1 and the op that wrote the NaN (``Tensor.__setitem__``), under DDP (before
  communication) and FSDP2 (during: its value reaches rank 0 through the gradients' reduce-scatter, after
  clean parameter all-gathers that used to hide the cause).
"""
from __future__ import annotations

import glob
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

torch = pytest.importorskip("torch")

from real_models import transformers_missing  # noqa: E402

JOBS = [
    {"name": "ddp_plain", "wrap": "ddp"},
    {"name": "ddp_a", "wrap": "ddp", "dump": {"level": "mix"}},
    {"name": "ddp_b", "wrap": "ddp", "dump": {"level": "mix"}},
    {"name": "ddp_md5", "wrap": "ddp", "dump": {"level": "L1", "mode": "md5"}},
    {"name": "ddp_grad", "wrap": "ddp", "dump": {"level": "mix"}, "fault": "grad"},
    {"name": "ddp_act", "wrap": "ddp", "dump": {"level": "mix"}, "fault": "act"},
    {"name": "ddp_nan", "wrap": "ddp", "dump": {"level": "mix"}, "fault": "nan"},
    {"name": "ddp_gradnan", "wrap": "ddp", "dump": {"level": "mix"}, "fault": "gradnan"},
    {"name": "f2_plain", "wrap": "fsdp2"},
    {"name": "f2_a", "wrap": "fsdp2", "dump": {"level": "mix"}},
    {"name": "f2_b", "wrap": "fsdp2", "dump": {"level": "mix"}},
    {"name": "f2_nan", "wrap": "fsdp2", "dump": {"level": "mix"}, "fault": "nan"},
    {"name": "bf_plain", "wrap": "fsdp2_bf16"},
    {"name": "bf_a", "wrap": "fsdp2_bf16", "dump": {"level": "mix"}},
    {"name": "bf_b", "wrap": "fsdp2_bf16", "dump": {"level": "mix"}},
    {"name": "f1_plain", "wrap": "fsdp1"},
    {"name": "f1_a", "wrap": "fsdp1", "dump": {"level": "mix"}},
    {"name": "f1_act", "wrap": "fsdp1", "dump": {"level": "mix"}, "fault": "act"},
    {"name": "g2_plain", "wrap": "fsdp2", "arch": "gpt2"},
    {"name": "g2_a", "wrap": "fsdp2", "arch": "gpt2", "dump": {"level": "mix", "mode": "md5"}},
]
FAULT_PARAM = "model.layers.1.mlp.down_proj.weight"


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    reason = transformers_missing()
    if reason:
        pytest.skip(reason)
    import torch.distributed as dist
    if not dist.is_available() or not dist.is_gloo_available():
        pytest.skip("torch.distributed with gloo is not available")
    try:
        from torch.distributed.fsdp import FullyShardedDataParallel, fully_shard  # noqa: F401
    except ImportError as exc:
        pytest.skip(f"this torch has no FSDP2 fully_shard / FSDP1 ({exc})")
    out = tmp_path_factory.mktemp("dist")
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(HERE), str(ROOT)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    env["OMP_NUM_THREADS"] = "1"
    p = subprocess.run([sys.executable, "-m", "real_models.dist", str(out), json.dumps(JOBS)], cwd=str(HERE),
                       env=env, capture_output=True, text=True, timeout=400)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-6000:]
    assert "Traceback" not in p.stderr, p.stderr[-6000:]
    return out


def result(out, name, rank):
    return torch.load(out / f"{name}_r{rank}.pt")


def data(out, name, step, rank):
    with open(out / name / f"step{step}" / f"rank{rank}" / "dump.json", encoding="utf-8") as f:
        return json.load(f)["data"]


def same(a, b):
    return a is None and b is None or (a is not None and b is not None and torch.equal(a, b))


@pytest.mark.parametrize("plain,dumped", [("ddp_plain", "ddp_a"), ("ddp_plain", "ddp_md5"), ("f2_plain", "f2_a"),
                                          ("bf_plain", "bf_a"), ("f1_plain", "f1_a"), ("g2_plain", "g2_a")])
def test_training_bit_identical(runs, plain, dumped):
    for rank in (0, 1):
        a, b = result(runs, plain, rank), result(runs, dumped, rank)
        assert all(torch.equal(x, y) for x, y in zip(a["losses"], b["losses"])), (rank, a["losses"], b["losses"])
        for step in range(2):
            assert a["grads"][step].keys() == b["grads"][step].keys()
            bad = [n for n in a["grads"][step] if not same(a["grads"][step][n], b["grads"][step][n])]
            assert not bad, (rank, step, bad)


def test_folders_and_module_names(runs):
    for name in ("ddp_a", "f2_a", "f1_a", "ddp_md5"):
        assert sorted(os.listdir(runs / name)) == ["step0", "step1"], name
        for step in (0, 1):
            assert sorted(os.listdir(runs / name / f"step{step}")) == ["rank0", "rank1"]
    prefixes = {"ddp_a": "Module.module.model.layers.1.mlp.down_proj.Linear",
                "f2_a": "Module.model.layers.1.mlp.down_proj.Linear",
                "f1_a": "Module._fsdp_wrapped_module.model.layers.1.mlp.down_proj.Linear"}
    for name, prefix in prefixes.items():
        d = data(runs, name, 0, 1)
        assert f"{prefix}.forward.0" in d and f"{prefix}.parameters_grad" in d, name
        # the forward record's parameters are the weight the forward used: full size under FSDP too
        w = d[f"{prefix}.forward.0"]["parameters"]["weight"]
        assert w["shape"] == [64, 128] and w["Norm"] is not None, (name, w)
    md5 = data(runs, "ddp_md5", 0, 0)
    assert not any(k.startswith("Module.") and not k.endswith("parameters_grad") for k in md5)   # L1
    lin = next(v for k, v in md5.items() if k.startswith("Functional.linear."))
    assert re.fullmatch(r"[0-9a-f]{8}", lin["output"][0]["md5"])


def _recorded_grads(d):
    """{parameter name under the unwrapped model: recorded statistics} from parameters_grad records."""
    out = {}
    for key, rec in d.items():
        if not key.endswith(".parameters_grad"):
            continue
        path = key[len("Module."):-len(".parameters_grad")].rsplit(".", 1)[0]
        for wrapper in ("module.", "_fsdp_wrapped_module."):
            if path.startswith(wrapper):
                path = path[len(wrapper):]
        for pname, (stat,) in rec.items():
            out[f"{path}.{pname}"] = stat
    return out


def _close(stat, t):
    assert stat is not None, "parameters_grad record is null"
    assert stat["shape"] == list(t.shape)
    assert stat["Norm"] == pytest.approx(float(t.norm()), rel=2e-6, abs=1e-12)
    assert stat["Max"] == pytest.approx(float(t.max()), rel=1e-6, abs=1e-12)
    assert stat["Min"] == pytest.approx(float(t.min()), rel=1e-6, abs=1e-12)


@pytest.mark.parametrize("name", ["ddp_a", "f2_a", "f1_a"])
def test_parameters_grad_values(runs, name):
    """parameters_grad is the gradient the parameter received on that rank, before the wrapper's reduce:
    under DDP the tensor hooks' values (exactly what DDP then all-reduces); under FSDP the unsharded,
    full-size gradient of the same training (the same weights and batch at step 0 as DDP). Both ranks'
    records average to the gradient torch holds after the reduce."""
    ddp = {r: result(runs, "ddp_plain", r) for r in (0, 1)}
    for step in (0, 1):
        recs = {r: _recorded_grads(data(runs, name, step, r)) for r in (0, 1)}
        assert len(recs[0]) == len(ddp[0]["local"][step]) == 21, sorted(recs[0])
        for r in (0, 1):
            local = ddp[r]["local"][step]
            assert set(recs[r]) == set(local)
            for pname, t in local.items():
                if name == "ddp_a" or step == 0:
                    _close(recs[r][pname], t)
                else:   # FSDP's step-0 average is rounded differently from DDP's: its own step 1 differs a bit
                    assert recs[r][pname]["Norm"] == pytest.approx(float(t.norm()), rel=1e-4)
        reduced = result(runs, name, 0)["full"][step] if name != "f1_a" else None
        if reduced is not None:
            for pname, t in reduced.items():
                pname = pname.replace("module.", "", 1) if name == "ddp_a" else pname
                mean = (recs[0][pname]["Mean"] + recs[1][pname]["Mean"]) / 2
                assert mean == pytest.approx(float(t.mean()), rel=1e-4, abs=1e-9), pname
    if name == "f2_a":   # what torch keeps on each rank is a shard of that reduced gradient
        shard = result(runs, "f2_a", 1)["grads"][0][FAULT_PARAM]
        assert shard.shape == (32, 128)


@pytest.mark.parametrize("name", ["f2_a", "bf_a"])
def test_fsdp2_collectives_recorded(runs, name):
    d = data(runs, name, 0, 1)
    gathers = [k for k in d if k.startswith("Distributed.all_gather_single.")]
    scatters = [k for k in d if k.startswith("Distributed.reduce_scatter_single.")]
    assert gathers and scatters, [k for k in d if k.startswith("Distributed.")]
    for k in gathers + scatters:   # FSDP2 passes the all-gather's by position, the reduce-scatter's by keyword
        kw = d[k]["input_kwargs"]
        buf, src = d[k]["input_args"][:2] if d[k]["input_args"] else (kw["output"], kw["input"])
        # the output buffer before the call holds leftover memory: no values; what is sent has them
        assert buf["Max"] is None and buf["Norm"] is None, (k, buf)
        assert src["Norm"] is not None and d[k]["output"][0]["Norm"] is not None, k
        assert d[k]["output"][0]["shape"] == buf["shape"]
    # the all-gather output holds both ranks' shards: rank 0 and rank 1 record the same values
    d0 = data(runs, name, 0, 0)
    assert d0[gathers[0]]["output"][0]["Norm"] == d[gathers[0]]["output"][0]["Norm"]
    # nothing was recorded from FSDP2's own copy-in/out and gradient code (it reads buffers before they are
    # written; with param_dtype bf16 a torch.split before a foreach copy): only its collectives, and the model
    internal = [k for k in d if k.startswith(("Tensor.narrow.", "Tensor.split.", "Torch.split.", "Torch.empty.",
                                              "Tensor.div_."))]
    assert not internal, internal
    if name == "bf_a":   # the forward ran on the bf16 unsharded weights, its gradient is theirs
        rec = d["Module.model.layers.1.mlp.down_proj.Linear.parameters_grad"]["weight"][0]
        assert rec["dtype"] == "torch.bfloat16" and rec["shape"] == [64, 128] and rec["Norm"] > 0


def _compare(target, golden, out, capsys):
    from msprobe.cli.main import main

    capsys.readouterr()
    rc = main(["compare", "-tp", str(target), "-gp", str(golden), "-o", str(out), "-da"])
    text = capsys.readouterr()
    assert rc in (0, 1), text.err[-3000:]
    return text.out + text.err


def _first_divergence(text):
    got = dict(re.findall(r"^\s+(rank_\d): (\S+)", text.split("first divergence", 1)[1], re.M))
    return got


@pytest.mark.parametrize("a,b", [("ddp_a", "ddp_b"), ("f2_a", "f2_b"), ("bf_a", "bf_b")])
def test_clean_runs_compare_equal(runs, tmp_path, capsys, a, b):
    for step in (0, 1):
        text = _compare(runs / a / f"step{step}", runs / b / f"step{step}", tmp_path / f"o{step}", capsys)
        assert text.count("no failing row: no row differs") == 2, text[-3000:]
        assert _first_divergence(text) == {"rank_0": "none", "rank_1": "none"}, text[-3000:]


def test_grad_fault_on_rank1_named(runs, tmp_path, capsys):
    text = _compare(runs / "ddp_grad" / "step0", runs / "ddp_a" / "step0", tmp_path / "o", capsys)
    want = "Module.module.model.layers.1.mlp.down_proj.Linear.parameters_grad.weight"
    assert f"advisor rank1: first failing row: {want}" in text, text[-3000:]
    assert "category: parameter gradient differs" in text
    # rank 0's own gradients are untouched: its records hold them before DDP's all-reduce mixes rank 1's in
    assert "advisor rank0: no failing row: no row differs" in text, text[-3000:]
    assert _first_divergence(text) == {"rank_0": "none", "rank_1": want}
    # the planted x1.5 is what the record shows
    f, g = (_recorded_grads(data(runs, n, 0, 1))[FAULT_PARAM] for n in ("ddp_grad", "ddp_a"))
    assert f["Norm"] == pytest.approx(1.5 * g["Norm"], rel=1e-6)


@pytest.mark.parametrize("target,golden,wrapper", [("ddp_act", "ddp_a", "module."),
                                                   ("f1_act", "f1_a", "_fsdp_wrapped_module.")])
def test_act_fault_on_rank1_named(runs, tmp_path, capsys, target, golden, wrapper):
    """(FSDP1: its unsharded flat-parameter buffer is torch.empty memory, chunked before the all-gather fills it;
    those records differed between the runs and were named first on both ranks.)"""
    text = _compare(runs / target / "step0", runs / golden / "step0", tmp_path / "o", capsys)
    div = _first_divergence(text)
    assert div["rank_0"] == "none", text[-3000:]
    # the hook's multiplication (o * 1.05) on rank 1 is the first failing op, inside layer 1's MLP
    op = div["rank_1"]
    assert op.startswith("Tensor.__mul__.") and op.endswith(".forward.output.0"), text[-3000:]
    rec = data(runs, target, 0, 1)[op[: -len(".output.0")]]
    assert rec["input_args"][1] == {"type": "float", "value": 1.05}
    with open(runs / target / "step0" / "rank1" / "construct.json", encoding="utf-8") as f:
        assert json.load(f)[op[: -len(".output.0")]] == f"Module.{wrapper}model.layers.1.mlp.LlamaMLP.forward.0"


@pytest.mark.parametrize("name,phase", [("ddp_nan", "before"), ("f2_nan", "during")])
def test_nan_analyze_names_rank1_setitem(runs, tmp_path, capsys, name, phase):
    from msprobe.cli.main import main

    capsys.readouterr()
    rc = main(["nan_analyze", "-i", str(runs / name / "step0"), "-o", str(tmp_path), "-q"])
    text = capsys.readouterr().out
    assert rc == 0
    assert f"First NaN/inf {phase} communication:\n  rank 1: Tensor.__setitem__.0.forward" in text, text
    assert "dist.py" in text.split("rank 1: Tensor.__setitem__.0.forward", 1)[1].splitlines()[1]   # the hook
    found = json.loads(Path(glob.glob(str(tmp_path / "anomaly_analyze_*.json"))[0]).read_text())
    assert list(found) == ["rank_1"] and found["rank_1"][0]["op_name"] == "Tensor.__setitem__.0.forward"
    if phase == "during":
        assert "passed on by Distributed.reduce_scatter_single.0.forward to rank(s) 0" in text, text


def test_nan_analyze_nan_weight_from_the_previous_step(runs, tmp_path, capsys):
    """Rank 1's gradient hook writes a NaN into layer 1's down_proj.weight gradient (step 0: named); DDP's
    all-reduce (not recorded) and the SGD update make that weight NaN on both ranks, so in step 1 no op makes
    the NaN: it comes in through the weight. LlamaMLP (no parameter of its own, finite input, NaN output) was
    named as the op that made it on both ranks."""
    from msprobe.cli.main import main

    capsys.readouterr()
    assert main(["nan_analyze", "-i", str(runs / "ddp_gradnan" / "step0"), "-o", str(tmp_path / "o0"), "-q"]) == 0
    text = capsys.readouterr().out
    assert "First NaN/inf before communication:\n  rank 1: Tensor.__setitem__.0.forward" in text, text
    assert 'g[0, 0] = float("nan")' in text
    assert main(["nan_analyze", "-i", str(runs / "ddp_gradnan" / "step1"), "-o", str(tmp_path / "o1"), "-q"]) == 0
    text = capsys.readouterr().out
    assert text.startswith("No op made a NaN or inf in this step"), text
    d = data(runs, "ddp_gradnan", 1, 0)
    down = [k for k in d if k.startswith("Functional.linear.") and k.endswith(".forward")
            and d[k]["input_args"][1]["shape"] == [64, 128] and d[k]["input_args"][1]["Max"] != d[k]["input_args"][1]["Max"]]
    assert down, "no linear with the NaN down_proj weight"
    for rank in (0, 1):
        assert f"rank {rank}: input.1 of {down[0].rsplit('.', 1)[0]}" in text, text
    assert not (tmp_path / "o1").exists()


def test_gpt2_fsdp2_tied_weight(runs):
    """GPT-2 under FSDP2 (Conv1D layers, lm_head.weight tied to wte.weight): every parameters_grad holds an md5,
    and the tied weight's two records (one per module that owns it) are the same full-size gradient."""
    d = data(runs, "g2_a", 0, 1)
    pg = {k: v for k, v in d.items() if k.endswith(".parameters_grad")}
    assert len(pg) == 16 and all(r[0] is not None and r[0]["md5"] for v in pg.values() for r in v.values()), pg
    wte = pg["Module.transformer.wte.Embedding.parameters_grad"]["weight"][0]
    head = pg["Module.lm_head.Linear.parameters_grad"]["weight"][0]
    assert wte["shape"] == head["shape"] == [128, 64] and wte["md5"] == head["md5"]
    assert "Module.transformer.h.1.mlp.c_fc.Conv1D.forward.0" in d


# ------------------------------------------------------------------------------------------ without processes
@pytest.mark.parametrize("strided", [False, True])
def test_statistics_leave_the_storage_resizable(strided):
    """FSDP2 frees an unsharded parameter with ``untyped_storage().resize_(0)``; measuring it (statistics,
    md5) must not pin the storage's size as ``Tensor.numpy()`` does."""
    from msprobe.pytorch.dump.stats import StatBuffer, crc32_hex

    t = torch.arange(64 * 128, dtype=torch.float32).reshape(64, 128) / 1000
    v = t.t() if strided else t
    buf = StatBuffer()
    rec = {"Max": None, "Min": None, "Mean": None, "Norm": None}
    buf.add(rec, v, v)
    buf.resolve()
    assert rec["Max"] == pytest.approx(float(v.max())) and rec["Norm"] == pytest.approx(float(v.norm()), rel=1e-6)
    assert rec["Min"] == 0.0 and rec["Mean"] == pytest.approx(float(v.mean()), rel=1e-6)
    assert crc32_hex(t) == crc32_hex(t.clone())
    t.untyped_storage().resize_(0)      # raised "Trying to resize storage that is not resizable"
    assert t.untyped_storage().nbytes() == 0


def test_nan_analyze_setitem_without_output(tmp_path, capsys):
    """x[i] = nan is recorded as Tensor.__setitem__ with output [null]: it is the op that made the NaN, not the
    next record holding the written tensor."""
    from msprobe.cli.main import main

    def t(v):
        return {"type": "torch.Tensor", "dtype": "torch.float32", "shape": [4], "Max": v, "Min": v, "Mean": v,
                "Norm": v, "requires_grad": False}
    records = {
        "Tensor.__setitem__.0.forward": {"input_args": [t(1.0), {"type": "int", "value": 0},
                                                        {"type": "float", "value": float("nan")}],
                                         "input_kwargs": {}, "output": [None]},
        "Tensor.__setitem__.1.forward": {"input_args": [t(1.0), {"type": "int", "value": 1},
                                                        {"type": "float", "value": 2.0}],
                                         "input_kwargs": {}, "output": [None]},
        "Module.block.Block.forward.0": {"input_args": [t(1.0)], "input_kwargs": {}, "output": [t(float("nan"))]},
    }
    rank = tmp_path / "step0" / "rank"
    rank.mkdir(parents=True)
    (rank / "dump.json").write_text(json.dumps({"task": "statistics", "level": "mix", "framework": "pytorch",
                                                "dump_data_dir": None, "data": records}))
    capsys.readouterr()
    assert main(["nan_analyze", "-i", str(tmp_path / "step0"), "-o", str(tmp_path / "o"), "-q"]) == 0
    text = capsys.readouterr().out
    assert "rank 0: Tensor.__setitem__.0.forward" in text, text
    assert "the scalar input.2 it writes in place" in text


def test_leftover_memory_recorded_without_values(tmp_path):
    """torch.empty's output and the output buffer among a collective's inputs hold leftover memory: recorded
    without values (they differ in every run); the collective's own output and the tensor it sends have them.
    all_gather_into_tensor (which calls all_gather_single in torch 2.13) is recorded once, under its name."""
    import torch.distributed as dist
    if not dist.is_available() or not dist.is_gloo_available():
        pytest.skip("torch.distributed with gloo is not available")
    from msprobe.pytorch import PrecisionDebugger

    cfg = {"task": "statistics", "dump_path": str(tmp_path / "dump"), "rank": [], "step": [], "level": "L1",
           "async_dump": False, "statistics": {"scope": [], "list": [], "data_mode": ["all"],
                                               "summary_mode": "statistics"}}
    (tmp_path / "c.json").write_text(json.dumps(cfg))
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        PrecisionDebugger._reset_for_tests()
        dbg = PrecisionDebugger(config_path=str(tmp_path / "c.json"))
        x = torch.arange(6, dtype=torch.float32) + 1
        dbg.start()
        buf = torch.empty(6)
        dist.all_gather_into_tensor(buf, x)
        y = buf * 2
        dbg.stop()
        dbg.step()
    finally:
        PrecisionDebugger._reset_for_tests()
        dist.destroy_process_group()
    assert torch.equal(y, x * 2)
    d = json.loads((tmp_path / "dump" / "step0" / "rank0" / "dump.json").read_text())["data"]
    assert [k for k in d if k.startswith("Distributed.")] == ["Distributed.all_gather_into_tensor.0.forward"]
    assert d["Torch.empty.0.forward"]["output"][0]["Max"] is None
    rec = d["Distributed.all_gather_into_tensor.0.forward"]
    assert rec["input_args"][0]["Max"] is None and rec["input_args"][0]["shape"] == [6]
    assert rec["input_args"][1]["Max"] == 6.0 and rec["output"][0]["Max"] == 6.0 and rec["output"][0]["Min"] == 1.0
    assert d["Tensor.__mul__.0.forward"]["input_args"][0]["Norm"] == pytest.approx(float(x.norm()))
