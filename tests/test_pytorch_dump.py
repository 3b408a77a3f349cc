"""PyTorch dump (msprobe.pytorch.PrecisionDebugger), in process, on tiny models: names and counters,
step filtering, early-bound functions, in-place inputs, statistics rules (spec dump.md §4.2, G8
semantics), md5, non-tensor arguments, tensor files, unchanged training, hook failures, off steps,
config errors, overflow_check, filters, module level and debug save().
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import re
import zlib
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

# Bound before any PrecisionDebugger exists (this module is imported before its tests run).
from torch import relu as early_relu  # noqa: E402

early_gelu = F.gelu

from conftest import FIXTURES  # noqa: E402
from msprobe.core.errors import MsprobeError  # noqa: E402
from msprobe.pytorch import PrecisionDebugger  # noqa: E402

_MISSING = object()


def _drop_leaked_modes():
    """Pop torch-function modes msprobe left behind (see test_overflow_check_leaves_no_function_mode),
    so one test's leak cannot change the next test's dump."""
    modes = []
    while torch._C._len_torch_function_stack():
        modes.append(torch._C._pop_torch_function_stack())
    for m in reversed(modes):
        if not type(m).__module__.startswith("msprobe"):
            torch._C._push_on_torch_function_stack(m)


@pytest.fixture(autouse=True)
def _reset_debugger():
    PrecisionDebugger._reset_for_tests()
    _drop_leaked_modes()
    yield
    PrecisionDebugger._reset_for_tests()
    _drop_leaked_modes()


# ------------------------------------------------------------------------------------------ helpers
def write_config(tmp_path, **kw):
    """config.json with the given top-level keys; ``section`` is the task section."""
    section = kw.pop("section", None)
    cfg = {"task": "statistics", "dump_path": str(tmp_path / "dump"), "rank": [], "step": [], "level": "L1",
           "async_dump": False}
    cfg.update(kw)
    if section is not None:
        cfg[cfg["task"]] = section
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    return str(path)


def rank_dir(tmp_path, step=0):
    return tmp_path / "dump" / f"step{step}" / "rank"


def load_dump(tmp_path, step=0):
    with open(rank_dir(tmp_path, step) / "dump.json", encoding="utf-8") as f:
        return json.load(f)


def data(tmp_path, step=0):
    return load_dump(tmp_path, step)["data"]


def step_dirs(tmp_path):
    root = tmp_path / "dump"
    return sorted(p.name for p in root.iterdir()) if root.is_dir() else []


def one_step(dbg, fn, model=None):
    dbg.start(model)
    out = fn()
    dbg.stop()
    dbg.step()
    return out


def f32(v):
    """A Python float rounded to float32 (what the dump writes for fp32 statistics)."""
    return torch.tensor(v, dtype=torch.float32).item()


def crc(t):
    t = t.detach().contiguous()
    if t.dtype == torch.bfloat16:
        t = t.view(torch.int16)
    return "%08x" % (zlib.crc32(t.numpy().tobytes()) & 0xFFFFFFFF)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 3)
        self.act = nn.ReLU()
        self.head = nn.Linear(3, 2)

    def forward(self, x):
        return self.head(self.act(self.fc(x)) * 2)


def net_step(dbg, model=None):
    torch.manual_seed(0)
    model = model or Net()
    x = torch.randn(5, 4)

    def fwd_bwd():
        loss = model(x).sum()
        loss.backward()
        return loss

    return one_step(dbg, fwd_bwd, model)


# ------------------------------------------------------------------------------------------ names, counters, steps
def test_api_names_and_counters_restart_each_step(tmp_path):
    dbg = PrecisionDebugger(task="statistics", level="L1", dump_path=str(tmp_path / "dump"))
    x = torch.randn(3, 4)
    w = torch.randn(5, 4)
    m = torch.randn(5, 2)

    def body():
        y = F.linear(x, w)
        y2 = F.linear(x, w)
        z = y + y2
        return torch.matmul(z, m)

    for _ in range(2):
        one_step(dbg, body)
    assert step_dirs(tmp_path) == ["step0", "step1"]
    expected = ["Functional.linear.0.forward", "Functional.linear.1.forward", "Tensor.__add__.0.forward",
                "Torch.matmul.0.forward"]
    for step in (0, 1):
        assert sorted(os.listdir(tmp_path / "dump" / f"step{step}")) == ["rank"]
        d = data(tmp_path, step)
        assert list(d) == expected
        rec = d["Torch.matmul.0.forward"]
        assert rec["input_args"][1]["shape"] == [5, 2]
        assert rec["input_args"][1]["Max"] == pytest.approx(m.max().item(), rel=1e-6)
        assert rec["output"][0]["shape"] == [3, 2]


def test_step_list_creates_only_listed_steps(tmp_path):
    dbg = PrecisionDebugger(task="statistics", level="L1", dump_path=str(tmp_path / "dump"), step=[1, "3-4"])
    x = torch.ones(2)
    for _ in range(6):
        one_step(dbg, lambda: x + 1)
    assert step_dirs(tmp_path) == ["step1", "step3", "step4"]
    for s in (1, 3, 4):
        assert list(data(tmp_path, s)) == ["Tensor.__add__.0.forward"]


def test_set_init_step(tmp_path):
    dbg = PrecisionDebugger(task="statistics", level="L1", dump_path=str(tmp_path / "dump"))
    PrecisionDebugger.set_init_step(5)
    x = torch.ones(2)
    one_step(dbg, lambda: x + 1)
    one_step(dbg, lambda: x + 1)
    assert step_dirs(tmp_path) == ["step5", "step6"]
    with pytest.raises(MsprobeError):
        PrecisionDebugger.set_init_step(-1)


def test_header_and_rank_dir(tmp_path):
    dbg = PrecisionDebugger(task="statistics", level="L1", dump_path=str(tmp_path / "dump"))
    x = torch.ones(2)
    one_step(dbg, lambda: x * 2)
    assert os.listdir(tmp_path / "dump" / "step0") == ["rank"]
    assert sorted(os.listdir(rank_dir(tmp_path))) == ["construct.json", "dump.json", "stack.json"]
    d = load_dump(tmp_path)
    assert list(d) == ["task", "level", "framework", "dump_data_dir", "data"]
    assert (d["task"], d["level"], d["framework"], d["dump_data_dir"]) == ("statistics", "L1", "pytorch", None)
    with open(rank_dir(tmp_path) / "construct.json") as f:
        assert json.load(f) == {}
    with open(rank_dir(tmp_path) / "stack.json") as f:
        stack = json.load(f)
    assert stack["0"][0] == ["Tensor.__mul__.0.forward"]
    assert any("test_pytorch_dump.py" in frame for frame in stack["0"][1])


# ------------------------------------------------------------------------------------------ early binding, identity
def test_early_bound_torch_function_is_recorded(tmp_path):
    dbg = PrecisionDebugger(task="statistics", level="L1", dump_path=str(tmp_path / "dump"))
    x = torch.tensor([-1.0, 2.0])
    out = one_step(dbg, lambda: early_relu(x))
    assert torch.equal(out, torch.tensor([0.0, 2.0]))
    d = data(tmp_path)
    assert list(d) == ["Torch.relu.0.forward"]
    assert d["Torch.relu.0.forward"]["output"][0]["Min"] == 0.0
    assert d["Torch.relu.0.forward"]["input_args"][0]["Min"] == -1.0


def test_function_identity_is_kept(tmp_path):
    dbg = PrecisionDebugger(task="statistics", level="L1", dump_path=str(tmp_path / "dump"))
    assert early_gelu is F.gelu
    x = torch.tensor([0.5, 1.0])
    dbg.start()
    try:
        assert early_gelu is F.gelu
        early_gelu(x)
    finally:
        dbg.stop()
        dbg.step()
    assert early_gelu is F.gelu
    assert list(data(tmp_path)) == ["Functional.gelu.0.forward"]


# ------------------------------------------------------------------------------------------ in-place
def test_inplace_inputs_are_taken_before_the_mutation(tmp_path):
    dbg = PrecisionDebugger(task="statistics", level="L1", dump_path=str(tmp_path / "dump"))
    x = torch.zeros(3)
    one_step(dbg, lambda: x.add_(1))
    assert torch.equal(x, torch.ones(3))
    rec = data(tmp_path)["Tensor.add_.0.forward"]
    assert rec["input_args"][0]["Max"] == 0.0
    assert rec["input_args"][0]["Norm"] == 0.0
    assert rec["input_args"][1] == {"type": "int", "value": 1}
    assert rec["output"][0]["Max"] == 1.0
    assert rec["output"][0]["Norm"] == f32(math.sqrt(3))


# ------------------------------------------------------------------------------------------ statistics rules
def test_statistics_rules(tmp_path):
    dbg = PrecisionDebugger(task="statistics", level="L1", dump_path=str(tmp_path / "dump"))
    ints = torch.arange(6)
    bools = torch.tensor([True, False, True])
    scalar = torch.tensor(-1.5)
    empty = torch.zeros(0, 3)
    nan = torch.tensor([1.0, float("nan")])
    bf = torch.tensor([1.0, 2.0, 3.0], dtype=torch.bfloat16)

    def body():
        ints * 1
        bools & bools
        scalar * 1
        empty + 1
        nan + 1
        bf + 0

    one_step(dbg, body)
    raw = (rank_dir(tmp_path) / "dump.json").read_text()
    d = json.loads(raw)["data"]
    assert list(d) == ["Tensor.__mul__.0.forward", "Tensor.__and__.0.forward", "Tensor.__mul__.1.forward",
                       "Tensor.__add__.0.forward", "Tensor.__add__.1.forward", "Tensor.__add__.2.forward"]

    i = d["Tensor.__mul__.0.forward"]["input_args"][0]
    assert (i["type"], i["dtype"], i["shape"], i["requires_grad"]) == ("torch.Tensor", "torch.int64", [6], False)
    assert (i["Max"], i["Min"], i["Mean"], i["Norm"]) == (5.0, 0.0, 2.5, 7.416198253631592)
    assert all(isinstance(i[k], float) for k in ("Max", "Min", "Mean", "Norm"))  # cast to fp32 (G8)

    b = d["Tensor.__and__.0.forward"]["input_args"][0]
    assert b["dtype"] == "torch.bool"
    assert b["Max"] is True and b["Min"] is False and b["Mean"] is None and b["Norm"] is None
    bo = d["Tensor.__and__.0.forward"]["output"][0]
    assert bo["Max"] is True and bo["Min"] is False

    s = d["Tensor.__mul__.1.forward"]["input_args"][0]
    assert s["shape"] == []
    assert (s["Max"], s["Min"], s["Mean"], s["Norm"]) == (-1.5, -1.5, -1.5, -1.5)

    e = d["Tensor.__add__.0.forward"]["input_args"][0]
    assert e["shape"] == [0, 3]
    assert (e["Max"], e["Min"], e["Mean"], e["Norm"]) == (None, None, None, None)

    n = d["Tensor.__add__.1.forward"]["input_args"][0]
    assert all(math.isnan(n[k]) for k in ("Max", "Min", "Mean", "Norm"))
    assert re.search(r'"Max": NaN', raw) and "null" not in raw.split("Tensor.__add__.1.forward")[1].split(
        "Tensor.__add__.2.forward")[0]

    h = d["Tensor.__add__.2.forward"]["input_args"][0]
    assert h["dtype"] == "torch.bfloat16"
    assert (h["Max"], h["Min"], h["Mean"]) == (3.0, 1.0, 2.0)
    assert h["Norm"] == torch.linalg.vector_norm(bf).float().item()  # computed in bf16: 3.734375


def test_md5_mode(tmp_path):
    cfg = write_config(tmp_path, section={"scope": [], "list": [], "data_mode": ["all"], "summary_mode": "md5"})
    dbg = PrecisionDebugger(config_path=cfg)
    x = torch.randn(4, 3)
    ints = torch.arange(6).reshape(2, 3)
    bools = ints > 2
    bf = torch.randn(5).to(torch.bfloat16)
    empty = torch.zeros(0)

    def body():
        x * 1
        ints * 1
        bools & bools
        bf * 1
        empty * 1

    one_step(dbg, body)
    d = data(tmp_path)
    cases = [("Tensor.__mul__.0.forward", x), ("Tensor.__mul__.1.forward", ints), ("Tensor.__and__.0.forward", bools),
             ("Tensor.__mul__.2.forward", bf)]
    for name, t in cases:
        rec = d[name]["input_args"][0]
        assert rec["md5"] == crc(t), name
        assert re.fullmatch(r"[0-9a-f]{8}", rec["md5"])
        assert list(rec)[-1] == "md5"
        assert rec["Max"] is not None  # statistics are still there in md5 mode
    assert d["Tensor.__mul__.1.forward"]["input_args"][0]["md5"] == "a1c6c70c"  # spec §4.3 empirical value
    assert d["Tensor.__mul__.2.forward"]["input_args"][0]["md5"] != "%08x" % zlib.crc32(bf.float().numpy().tobytes())
    assert d["Tensor.__mul__.3.forward"]["input_args"][0]["md5"] == "00000000"
    assert d["Tensor.__mul__.0.forward"]["output"][0]["md5"] == crc(x * 1)


# ------------------------------------------------------------------------------------------ non-tensor args
def test_non_tensor_arguments(tmp_path):
    dbg = PrecisionDebugger(task="statistics", level="L1", dump_path=str(tmp_path / "dump"))
    x = torch.randn(3, 4)
    a = torch.ones(2, 2)

    def body():
        torch.einsum("ij->ji", x)
        torch.sum(x, dim=0, keepdim=True)
        torch.clamp(x, None, 1.0)
        x[0:2, [0, 1]] = 1.5
        torch.cat([a, a], dim=0)
        torch.clamp(x, min=float("-inf"))
        F.pad(a, [1, 1])

    one_step(dbg, body)
    raw = (rank_dir(tmp_path) / "dump.json").read_text()
    d = json.loads(raw)["data"]

    def is_tensor(r, shape):
        return isinstance(r, dict) and r.get("type") == "torch.Tensor" and r["shape"] == shape

    r = d["Torch.einsum.0.forward"]
    assert r["input_args"][0] == {"type": "str", "value": "ij->ji"} and is_tensor(r["input_args"][1], [3, 4])
    r = d["Torch.sum.0.forward"]
    assert r["input_kwargs"] == {"dim": {"type": "int", "value": 0}, "keepdim": {"type": "bool", "value": True}}
    r = d["Torch.clamp.0.forward"]
    assert r["input_args"][1:] == [None, {"type": "float", "value": 1.0}]
    r = d["Tensor.__setitem__.0.forward"]
    assert r["input_args"][1] == [{"type": "slice", "value": [0, 2, None]},
                                  [{"type": "int", "value": 0}, {"type": "int", "value": 1}]]
    assert r["input_args"][2] == {"type": "float", "value": 1.5}
    assert r["output"] == [None]
    r = d["Torch.cat.0.forward"]
    assert len(r["input_args"]) == 1 and all(is_tensor(t, [2, 2]) for t in r["input_args"][0])
    assert len(r["input_args"][0]) == 2
    r = d["Torch.clamp.1.forward"]
    assert r["input_kwargs"]["min"]["type"] == "float" and r["input_kwargs"]["min"]["value"] == float("-inf")
    assert '"value": -Infinity' in raw
    r = d["Functional.pad.0.forward"]
    assert r["input_args"][1] == [{"type": "int", "value": 1}, {"type": "int", "value": 1}]


# ------------------------------------------------------------------------------------------ tensor mode
def test_tensor_mode_files(tmp_path):
    cfg = write_config(tmp_path, task="tensor", section={"scope": [], "list": [], "data_mode": ["all"]})
    dbg = PrecisionDebugger(config_path=cfg)
    x = torch.randn(3, 4, requires_grad=True)
    w = torch.randn(5, 4, requires_grad=True)
    b = torch.randn(5)
    z = torch.zeros(2)
    results = {}

    def body():
        y = F.linear(x, w, b)
        results["y"] = y.detach().clone()
        z.add_(2)
        y.relu().sum().backward()

    one_step(dbg, body)
    d = load_dump(tmp_path)
    tdir = rank_dir(tmp_path) / "dump_tensor_data"
    assert d["dump_data_dir"] == str(tdir)
    names = []

    def walk(o):
        if isinstance(o, dict):
            if "data_name" in o:
                names.append(o["data_name"])
            for v in o.values():
                walk(v)
        elif isinstance(o, list):
            for v in o:
                walk(v)

    walk(d["data"])
    assert names and sorted(names) == sorted(os.listdir(tdir))
    lin = d["data"]["Functional.linear.0.forward"]
    assert [r["data_name"] for r in lin["input_args"]] == [
        "Functional.linear.0.forward.input.0.pt", "Functional.linear.0.forward.input.1.pt",
        "Functional.linear.0.forward.input.2.pt"]
    assert lin["output"][0]["data_name"] == "Functional.linear.0.forward.output.0.pt"

    def load(name):
        return torch.load(tdir / name, weights_only=True)

    assert torch.equal(load("Functional.linear.0.forward.input.0.pt"), x.detach())
    assert torch.equal(load("Functional.linear.0.forward.input.1.pt"), w.detach())
    assert torch.equal(load("Functional.linear.0.forward.input.2.pt"), b)
    assert torch.equal(load("Functional.linear.0.forward.output.0.pt"), results["y"])
    assert not load("Functional.linear.0.forward.input.0.pt").requires_grad
    # in-place: the saved input is the value before add_
    assert torch.equal(load("Tensor.add_.0.forward.input.0.pt"), torch.zeros(2))
    assert torch.equal(load("Tensor.add_.0.forward.output.0.pt"), torch.full((2,), 2.0))
    # backward: relu grad and linear grads are files too
    bwd = d["data"]["Functional.linear.0.backward"]
    grads = [load(r["data_name"]) for r in bwd["output"] if r is not None]
    assert any(g.shape == x.shape and torch.allclose(g, x.grad) for g in grads)


# ------------------------------------------------------------------------------------------ training unchanged
def _fixture_models():
    path = FIXTURES / "_gen" / "models.py"
    if not path.is_file():
        return None
    spec = importlib.util.spec_from_file_location("msprobe_fixture_models", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


class _TinyBlock(nn.Module):
    def __init__(self, d=16):
        super().__init__()
        self.ln = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.fc = nn.Linear(d, d)

    def forward(self, x):
        q, k, v = self.qkv(self.ln(x)).chunk(3, dim=-1)
        att = F.softmax(q @ k.transpose(-2, -1) / 4.0, dim=-1)
        x = x + self.proj(att @ v)
        return x + F.gelu(self.fc(x))


class _TinyTransformer(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(50, 16)
        self.block = _TinyBlock()
        self.head = nn.Linear(16, 50)

    def forward(self, idx):
        return self.head(self.block(self.emb(idx)))


def _build(kind):
    mod = _fixture_models()
    if mod is not None:
        model, x, y = mod.build(kind)
        return model, x, y, lambda out, tgt: mod.loss_fn(kind, out, tgt)
    torch.manual_seed(1234)
    if kind == "mlp":
        model = nn.Sequential(nn.Linear(32, 64), nn.GELU(), nn.Linear(64, 10))
        x, y = torch.randn(8, 32), torch.randint(0, 10, (8,))
    else:
        model = _TinyTransformer()
        x, y = torch.randint(0, 50, (2, 8)), torch.randint(0, 50, (2, 8))
    return model, x, y, lambda out, tgt: F.cross_entropy(out.reshape(-1, out.shape[-1]), tgt.reshape(-1))


def _train(kind, steps, dbg=None):
    model, x, y, loss_fn = _build(kind)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    record = []
    for _ in range(steps):
        if dbg is not None:
            dbg.start(model)
        opt.zero_grad()
        out = model(x)
        loss = loss_fn(out, y)
        loss.backward()
        if dbg is not None:
            dbg.stop()
        grads = {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}
        opt.step()
        if dbg is not None:
            dbg.step()
        record.append((loss.detach().clone(), out.detach().clone(), grads))
    return record


@pytest.mark.parametrize("kind,steps,step_list", [("mlp", 2, []), ("transformer", 2, []), ("transformer", 3, [1])])
def test_training_is_unchanged(tmp_path, kind, steps, step_list):
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        _training_is_unchanged(tmp_path, kind, steps, step_list)
    finally:   # later tests (a committed reference dump) see the process's own thread count
        torch.set_num_threads(threads)


def _training_is_unchanged(tmp_path, kind, steps, step_list):
    base = _train(kind, steps)
    dbg = PrecisionDebugger(task="statistics", level="mix", dump_path=str(tmp_path / "dump"), step=step_list)
    got = _train(kind, steps, dbg)
    assert step_dirs(tmp_path) == ([f"step{s}" for s in range(steps)] if not step_list else
                                   [f"step{s}" for s in step_list])
    for s, ((l0, o0, g0), (l1, o1, g1)) in enumerate(zip(base, got)):
        assert torch.equal(l0, l1), (s, l0.item(), l1.item())
        assert torch.equal(o0, o1), s
        assert sorted(g0) == sorted(g1), s
        for n in g0:
            assert torch.equal(g0[n], g1[n]), (s, n)
    # the dump really recorded the model during the dumped step(s)
    d = data(tmp_path, step_list[0] if step_list else 0)
    assert any(k.startswith("Module.") and k.endswith(".backward.0") for k in d)
    assert any(k.endswith(".parameters_grad") for k in d)


# ------------------------------------------------------------------------------------------ hook failure
def test_hook_failure_does_not_stop_training(tmp_path, monkeypatch):
    from msprobe.pytorch.dump import stats

    base = _train("mlp", 2)
    orig = stats.StatBuffer.add
    calls = {"n": 0}

    def failing_add(self, *args, **kwargs):
        calls["n"] += 1
        if calls["n"] > 5:  # the first records succeed, then every statistic fails mid-training
            raise RuntimeError("injected statistics failure")
        return orig(self, *args, **kwargs)

    monkeypatch.setattr(stats.StatBuffer, "add", failing_add)
    dbg = PrecisionDebugger(task="statistics", level="mix", dump_path=str(tmp_path / "dump"))
    got = _train("mlp", 2, dbg)
    assert calls["n"] > 5
    for (l0, o0, g0), (l1, o1, g1) in zip(base, got):
        assert torch.equal(l0, l1) and torch.equal(o0, o1)
        assert all(torch.equal(g0[n], g1[n]) for n in g0)
    log = rank_dir(tmp_path) / "dump_error_info.log"
    assert log.is_file()
    logs = [p.read_text() for p in sorted((tmp_path / "dump").glob("step*/rank/dump_error_info.log"))]
    text = "\n".join(logs)
    assert "injected statistics failure" in text and "RuntimeError" in text
    where = re.findall(r"could not record (\S+?):", text)
    assert where, text[:2000]
    assert len(where) == len(set(where)), f"a name was logged twice: {where}"
    # the steps' JSON files are still written and readable
    assert step_dirs(tmp_path) == ["step0", "step1"]
    for s in (0, 1):
        load_dump(tmp_path, s)


# ------------------------------------------------------------------------------------------ off steps, restore
def test_off_steps_record_nothing_and_patches_are_restored(tmp_path):
    before = dict(torch.Tensor.__dict__)
    f_before = dict(vars(F))
    orig_add = torch.Tensor.__add__
    dbg = PrecisionDebugger(task="statistics", level="L1", dump_path=str(tmp_path / "dump"), step=[5])
    col = dbg.service.collector
    x = torch.ones(2)
    for s in range(7):
        dbg.start()
        y = x + 1
        z = F.relu(y)
        if s != 5:
            assert col.data == {} and col.api_count == {}, s
        dbg.stop()
        if s <= 2:
            assert step_dirs(tmp_path) == [], s
        dbg.step()
        assert torch.equal(z, torch.full((2,), 2.0))
    assert step_dirs(tmp_path) == ["step5"]
    assert list(data(tmp_path, 5)) == ["Tensor.__add__.0.forward", "Functional.relu.0.forward"]
    # after the last listed step the tool is gone: torch.Tensor is exactly as before
    assert torch.Tensor.__add__ is orig_add
    assert "__add__" not in torch.Tensor.__dict__
    after = dict(torch.Tensor.__dict__)
    assert set(after) == set(before)
    assert all(after[k] is before[k] for k in before)
    assert all(vars(F)[k] is v for k, v in f_before.items())
    assert torch._C._len_torch_function_stack() == 0


# ------------------------------------------------------------------------------------------ bad config
@pytest.mark.parametrize("kwargs,key", [
    ({"task": "no_such_task"}, "task"),
    ({"level": "L9"}, "level"),
    ({"bogus_key": 1}, "bogus_key"),
    ({"step": ["3-1"]}, "step"),
])
def test_bad_config_file(tmp_path, kwargs, key):
    cfg = write_config(tmp_path, **kwargs)
    with pytest.raises(MsprobeError, match=key):
        PrecisionDebugger(config_path=cfg)
    assert PrecisionDebugger._instance is None


def test_bad_config_arguments(tmp_path):
    afile = tmp_path / "a_file"
    afile.write_text("x")
    with pytest.raises(MsprobeError, match="dump_path"):
        PrecisionDebugger(task="statistics", level="L1", dump_path=str(afile))
    with pytest.raises(MsprobeError, match="task"):
        PrecisionDebugger(task="bogus", level="L1", dump_path=str(tmp_path / "d"))
    with pytest.raises(MsprobeError, match="level"):
        PrecisionDebugger(task="statistics", level="L7", dump_path=str(tmp_path / "d"))
    with pytest.raises(MsprobeError, match="step"):
        PrecisionDebugger(task="statistics", level="L1", dump_path=str(tmp_path / "d"), step=["3-1"])
    assert PrecisionDebugger._instance is None


def test_l0_start_without_model(tmp_path):
    dbg = PrecisionDebugger(task="statistics", level="L0", dump_path=str(tmp_path / "dump"))
    with pytest.raises(MsprobeError, match="model"):
        dbg.start()
    with pytest.raises(MsprobeError, match="model"):
        dbg.start(model="not a module")


def test_start_before_any_instance():
    PrecisionDebugger._reset_for_tests()
    with pytest.raises(MsprobeError):
        PrecisionDebugger.start()
    with pytest.raises(MsprobeError):
        PrecisionDebugger.stop()
    with pytest.raises(MsprobeError):
        PrecisionDebugger.step()


# ------------------------------------------------------------------------------------------ overflow_check
class _Overflow(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(3, 3)

    def forward(self, x):
        h = F.relu(self.fc(x)) + 1.0      # finite, > 0
        return torch.div(h, 0.0).sum()    # +inf: the only overflowing forward API


def _overflow_run(tmp_path):
    cfg = write_config(tmp_path, task="overflow_check", section={"overflow_nums": 1})
    dbg = PrecisionDebugger(config_path=cfg)
    torch.manual_seed(0)
    model = _Overflow()
    x = torch.ones(2, 3)
    losses = []
    for _ in range(2):
        dbg.start(model)
        loss = model(x)
        loss.backward()
        dbg.stop()
        dbg.step()
        losses.append(loss.item())
    return dbg, losses


def test_overflow_check_records_only_the_overflowing_api(tmp_path):
    dbg, losses = _overflow_run(tmp_path)
    assert losses == [float("inf")] * 2
    assert step_dirs(tmp_path) == ["step0"]
    d = load_dump(tmp_path)
    assert d["task"] == "overflow_check"
    assert d["dump_data_dir"] == str(rank_dir(tmp_path) / "dump_tensor_data")
    assert list(d["data"]) == ["Torch.div.0.forward"]
    rec = d["data"]["Torch.div.0.forward"]
    assert rec["output"][0]["Max"] == float("inf")
    tdir = rank_dir(tmp_path) / "dump_tensor_data"
    out = torch.load(tdir / rec["output"][0]["data_name"], weights_only=True)
    assert torch.isinf(out).all()
    inp = torch.load(tdir / rec["input_args"][0]["data_name"], weights_only=True)
    assert torch.isfinite(inp).all() and inp.min() >= 1.0
    # afterwards the debugger is off: patches removed, nothing more written
    assert "__add__" not in torch.Tensor.__dict__
    assert dbg.service.ended


# regression test (fixed bug)
def test_overflow_check_leaves_no_function_mode(tmp_path):
    _overflow_run(tmp_path)
    assert torch._C._len_torch_function_stack() == 0


def test_overflow_check_saves_only_that_apis_tensors(tmp_path):
    _overflow_run(tmp_path)
    d = load_dump(tmp_path)
    rec = d["data"]["Torch.div.0.forward"]
    expected = {r["data_name"] for r in rec["input_args"] + rec["output"] if isinstance(r, dict) and "data_name" in r}
    assert expected == {"Torch.div.0.forward.input.0.pt", "Torch.div.0.forward.output.0.pt"}
    assert set(os.listdir(rank_dir(tmp_path) / "dump_tensor_data")) == expected


# ------------------------------------------------------------------------------------------ filters
def test_data_mode_forward_has_no_backward(tmp_path):
    cfg = write_config(tmp_path, level="mix", section={"scope": [], "list": [], "data_mode": ["forward"]})
    net_step(PrecisionDebugger(config_path=cfg))
    names = list(data(tmp_path))
    assert names == ["Functional.linear.0.forward", "Module.fc.Linear.forward.0", "Functional.relu.0.forward",
                     "Module.act.ReLU.forward.0", "Tensor.__mul__.0.forward", "Functional.linear.1.forward",
                     "Module.head.Linear.forward.0", "Tensor.sum.0.forward", "Torch.ones_like.0.forward"]


# regression test (fixed bug)
def test_data_mode_backward_input(tmp_path):
    cfg = write_config(tmp_path, section={"scope": [], "list": [], "data_mode": ["backward", "input"]})
    net_step(PrecisionDebugger(config_path=cfg))
    d = data(tmp_path)
    assert d and all(k.endswith(".backward") for k in d)
    for rec in d.values():
        assert rec.get("output", []) == [] and rec["input"]


def test_list_filter(tmp_path):
    cfg = write_config(tmp_path, section={"scope": [], "list": ["relu"], "data_mode": ["all"]})
    net_step(PrecisionDebugger(config_path=cfg))
    assert list(data(tmp_path)) == ["Functional.relu.0.forward", "Functional.relu.0.backward"]


def test_scope_range_l1(tmp_path):
    cfg = write_config(tmp_path, section={"scope": ["Functional.relu.0.forward", "Functional.linear.1.forward"],
                                          "list": [], "data_mode": ["all"]})
    net_step(PrecisionDebugger(config_path=cfg))
    assert list(data(tmp_path)) == ["Functional.relu.0.forward", "Tensor.__mul__.0.forward",
                                    "Functional.linear.1.forward"]


# ------------------------------------------------------------------------------------------ L0
def test_module_level_l0(tmp_path):
    torch.manual_seed(0)
    model = Net()
    dbg = PrecisionDebugger(task="statistics", level="L0", dump_path=str(tmp_path / "dump"))
    net_step(dbg, model)
    d = data(tmp_path)
    assert list(d) == ["Module.fc.Linear.forward.0", "Module.fc.Linear.parameters_grad", "Module.act.ReLU.forward.0",
                       "Module.head.Linear.forward.0", "Module.head.Linear.parameters_grad",
                       "Module.head.Linear.backward.0", "Module.act.ReLU.backward.0", "Module.fc.Linear.backward.0"]
    assert not any(k.startswith("Module.Net") for k in d)  # root module absent
    fwd = d["Module.fc.Linear.forward.0"]
    assert list(fwd) == ["input_args", "input_kwargs", "output", "parameters", "is_recompute"]
    assert list(fwd["parameters"]) == ["weight", "bias"]
    w = fwd["parameters"]["weight"]
    assert w["shape"] == [3, 4] and w["requires_grad"] is True
    assert w["Max"] == model.fc.weight.max().item() and w["Min"] == model.fc.weight.min().item()
    assert d["Module.act.ReLU.forward.0"]["parameters"] == {}
    grads = d["Module.fc.Linear.parameters_grad"]
    assert list(grads) == ["weight", "bias"]
    for pname in ("weight", "bias"):
        [rec] = grads[pname]
        g = getattr(model.fc, pname).grad
        assert rec["shape"] == list(g.shape)
        assert rec["Max"] == g.max().item() and rec["Min"] == g.min().item()
        assert rec["Norm"] == pytest.approx(g.norm().item(), rel=1e-6)
    hb = d["Module.head.Linear.backward.0"]
    assert [r["shape"] for r in hb["input"]] == [[5, 2]]
    assert [r["shape"] for r in hb["output"]] == [[5, 3]]
    assert d["Module.fc.Linear.backward.0"]["output"] == []   # x does not require grad
    with open(rank_dir(tmp_path) / "construct.json") as f:
        construct = json.load(f)
    assert set(construct) == {k for k in d if "parameters_grad" not in k}


class Inner(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(4, 4)

    def forward(self, x):
        return self.proj(x)           # the module's output IS its child's output tensor


class Outer(nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = Inner()
        self.head = nn.Linear(4, 1)

    def forward(self, x):
        return self.head(self.inner(x))


# regression test (fixed bug)
def test_backward_parent_when_output_is_childs_output(tmp_path):
    torch.manual_seed(0)
    model = Outer()
    dbg = PrecisionDebugger(task="statistics", level="L0", dump_path=str(tmp_path / "dump"))
    x = torch.randn(2, 4, requires_grad=True)
    one_step(dbg, lambda: model(x).sum().backward(), model)
    with open(rank_dir(tmp_path) / "construct.json") as f:
        construct = json.load(f)
    assert construct["Module.inner.Inner.forward.0"] is None
    assert construct["Module.inner.proj.Linear.forward.0"] == "Module.inner.Inner.forward.0"
    assert construct["Module.inner.Inner.backward.0"] is None
    assert construct["Module.inner.proj.Linear.backward.0"] == "Module.inner.Inner.backward.0"


# ------------------------------------------------------------------------------------------ debug save
def _debug_save_available():
    try:
        return importlib.util.find_spec("msprobe.pytorch.dump.debug_save") is not None
    except ImportError:
        return False


@pytest.mark.xfail(not _debug_save_available(), strict=False,
                   reason="msprobe.pytorch.dump.debug_save (level debug save()) is not implemented yet")
def test_debug_save(tmp_path):
    dbg = PrecisionDebugger(task="statistics", level="debug", dump_path=str(tmp_path / "dump"))
    x = torch.tensor([1.0, -2.0, 3.0], requires_grad=True)
    dbg.start()
    y = x * 2
    PrecisionDebugger.save({"y": y, "n": 3, "s": "hi"}, "my_var")
    (y * y).sum().backward()
    dbg.stop()
    dbg.step()
    assert sorted(os.listdir(rank_dir(tmp_path))) == ["debug.json"]
    with open(rank_dir(tmp_path) / "debug.json") as f:
        d = json.load(f)
    assert (d["task"], d["level"], d["framework"], d["dump_data_dir"]) == ("statistics", "debug", "pytorch", None)
    assert list(d["data"]) == ["my_var.0.debug", "my_var_grad.0.debug"]
    v = d["data"]["my_var.0.debug"]
    assert list(v) == ["y", "n", "s"]
    assert (v["y"]["dtype"], v["y"]["shape"], v["y"]["requires_grad"]) == ("torch.float32", [3], True)
    assert (v["y"]["Max"], v["y"]["Min"], v["y"]["Mean"]) == (6.0, -4.0, f32(4.0 / 3))
    assert v["n"] == {"type": "int", "value": 3}
    assert v["s"] == {"type": "str", "value": "hi"}
    g = d["data"]["my_var_grad.0.debug"]
    assert g["n"] is None and g["s"] is None
    # d(sum(y*y))/dy = 2y = [4, -8, 12]
    assert (g["y"]["Max"], g["y"]["Min"], g["y"]["Mean"]) == (12.0, -8.0, f32(8.0 / 3))


# ------------------------------------------------------------------------------------------ big tensors
def test_md5_of_big_tensors_is_taken_before_in_place_changes(tmp_path):
    """Big tensors are hashed on a worker thread from a snapshot: an in-place op right after must not
    change the recorded CRC (fp32 and bf16 raw bytes)."""
    import zlib
    cfg = write_config(tmp_path, section={"scope": [], "list": [], "data_mode": ["all"], "summary_mode": "md5"})
    dbg = PrecisionDebugger(config_path=cfg)
    x = torch.randn(512, 1024)                     # 2 MiB: above the inline threshold
    xb = torch.randn(512, 1024).to(torch.bfloat16)
    before = "%08x" % zlib.crc32(x.numpy().tobytes())
    before_b = "%08x" % zlib.crc32(xb.view(torch.uint8).numpy().tobytes())
    dbg.start()
    x.add_(1.0)                                    # records x before the change
    xb.mul_(2)
    dbg.stop()
    dbg.step()
    d = data(tmp_path)
    assert d["Tensor.add_.0.forward"]["input_args"][0]["md5"] == before
    assert d["Tensor.add_.0.forward"]["output"][0]["md5"] == "%08x" % zlib.crc32(x.numpy().tobytes())
    assert d["Tensor.mul_.0.forward"]["input_args"][0]["md5"] == before_b


def test_norm_of_big_float32_tensor(tmp_path):
    cfg = write_config(tmp_path)
    dbg = PrecisionDebugger(config_path=cfg)
    x = torch.randn(300, 700)
    y = torch.randn(300, 700).t()                  # non-contiguous path
    dbg.start()
    torch.relu(x)
    torch.relu(y)
    dbg.stop()
    dbg.step()
    d = data(tmp_path)
    # A float32 reduction of n values depends on the kernel's summation order (CPU, vector width, threads), so
    # the recorded values are checked against a float64 reference within what float32 rounding explains for n
    # terms: a relative error of about sqrt(n) * eps for a sum of positive terms (Norm), and sqrt(n) * eps *
    # mean(|x|) in absolute terms for a signed sum divided by n (Mean), with a factor 4 of margin. Never against
    # one machine's float32 result.
    eps = torch.finfo(torch.float32).eps
    for name, t in (("Torch.relu.0.forward", x), ("Torch.relu.1.forward", y)):
        rec = d[name]["input_args"][0]
        t64 = t.double()
        spread = 4 * math.sqrt(t.numel()) * eps
        assert rec["Norm"] == pytest.approx(float(torch.linalg.vector_norm(t64)), rel=spread)
        assert rec["Mean"] == pytest.approx(float(t64.mean()), rel=0, abs=spread * float(t64.abs().mean()))
        assert rec["Max"] == float(t.max()) and rec["Min"] == float(t.min())        # exact: no rounding involved


def test_autograd_backward_records_implicit_ones_like(tmp_path):
    """torch.autograd.backward(loss) makes its implicit gradient through a recorded torch.ones_like, like
    loss.backward() (and like the reference, which records autograd's internal torch.ones_like call)."""
    cfg = write_config(tmp_path)
    dbg = PrecisionDebugger(config_path=cfg)
    w = torch.randn(3, requires_grad=True)
    dbg.start()
    loss = (w * 2).sum()
    torch.autograd.backward(loss)
    dbg.stop()
    dbg.step()
    d = data(tmp_path)
    assert "Torch.ones_like.0.forward" in d
    assert d["Torch.ones_like.0.forward"]["output"][0]["Max"] == 1.0
    assert torch.equal(w.grad, torch.full((3,), 2.0))


def test_register_custom_api(tmp_path):
    import types
    lib = types.ModuleType("mylib")
    lib.scale = lambda t, k=2.0: t * k
    cfg = write_config(tmp_path)
    dbg = PrecisionDebugger(config_path=cfg)
    PrecisionDebugger.register_custom_api(lib, "scale")
    with pytest.raises(MsprobeError, match="does not have"):
        PrecisionDebugger.register_custom_api(lib, "missing")
    dbg.start()
    out = lib.scale(torch.ones(3), k=3.0)
    dbg.stop()
    dbg.step()
    PrecisionDebugger.restore_custom_api(lib, "scale")
    assert not hasattr(lib.scale, "__msprobe_original__")
    d = data(tmp_path)
    assert torch.equal(out, torch.full((3,), 3.0))
    rec = d["mylib.scale.0.forward"]
    assert rec["input_kwargs"]["k"] == {"type": "float", "value": 3.0}
    assert rec["output"][0]["Max"] == 3.0
    assert "Tensor.__mul__.0.forward" not in d      # nested inside the custom API


@pytest.mark.parametrize("async_dump", [False, True])
def test_tensor_mode_saves_an_unchanged_tensor_once(tmp_path, async_dump):
    """A tensor recorded twice unchanged (an output feeding the next API) is written once; the second
    data_name is a hard link to the same bytes, so every data_name still names a loadable file."""
    section = {"scope": [], "list": ["relu", "sigmoid"] if async_dump else [], "data_mode": ["all"]}
    cfg = write_config(tmp_path, task="tensor", async_dump=async_dump, section=section)
    dbg = PrecisionDebugger(config_path=cfg)
    x = torch.randn(4, 5)
    dbg.start()
    y = torch.relu(x)
    z = torch.sigmoid(y)
    dbg.stop()
    dbg.step()
    PrecisionDebugger._reset_for_tests()      # async: ending the debugger waits for the writer thread
    d = data(tmp_path)
    tdir = rank_dir(tmp_path) / "dump_tensor_data"
    out_name = d["Torch.relu.0.forward"]["output"][0]["data_name"]
    in_name = d["Torch.sigmoid.0.forward"]["input_args"][0]["data_name"]
    assert (out_name, in_name) == ("Torch.relu.0.forward.output.0.pt", "Torch.sigmoid.0.forward.input.0.pt")
    assert os.stat(tdir / out_name).st_ino == os.stat(tdir / in_name).st_ino
    assert torch.equal(torch.load(tdir / in_name, weights_only=True), y)
    assert torch.equal(torch.load(tdir / "Torch.sigmoid.0.forward.output.0.pt", weights_only=True), z)


# ------------------------------------------------------------------------------------------ more filters and modes
def test_mix_list_expands_a_listed_module(tmp_path):
    """At mix, a listed module records everything executed inside it; APIs outside stay unrecorded."""
    cfg = write_config(tmp_path, level="mix", section={"scope": [], "list": ["Module.act."], "data_mode": ["all"]})
    net_step(PrecisionDebugger(config_path=cfg))
    names = set(data(tmp_path))
    assert "Module.act.ReLU.forward.0" in names and "Functional.relu.0.forward" in names
    assert "Functional.linear.0.forward" not in names and "Tensor.__mul__.0.forward" not in names


def test_module_dump_records_the_module_as_one_unit(tmp_path):
    from msprobe.pytorch import module_dump, module_dump_end
    cfg = write_config(tmp_path)
    dbg = PrecisionDebugger(config_path=cfg)
    net = Net()
    x = torch.randn(5, 4)
    dbg.start()
    module_dump(net.fc, "first")
    y = net.fc(x)
    module_dump_end()
    torch.relu(y)
    dbg.stop()
    dbg.step()
    d = data(tmp_path)
    assert "Module.first.Linear.forward.0" in d
    assert "Functional.linear.0.forward" not in d          # inner APIs are not recorded meanwhile
    assert "Torch.relu.0.forward" in d                     # ... and are again afterwards
    assert d["Module.first.Linear.forward.0"]["output"][0]["shape"] == [5, 3]


def test_rank_filter_without_distributed(tmp_path):
    """Not distributed counts as rank 0: rank [1] records nothing (no step directory)."""
    cfg = write_config(tmp_path, rank=[1])
    net_step(PrecisionDebugger(config_path=cfg))
    assert not (tmp_path / "dump" / "step0").exists()


def test_precision_high_casts_to_float32(tmp_path):
    cfg = write_config(tmp_path, precision="high")
    dbg = PrecisionDebugger(config_path=cfg)
    x = (torch.arange(10, dtype=torch.float32) / 3).to(torch.bfloat16)
    one_step(dbg, lambda: torch.relu(x))
    rec = data(tmp_path)["Torch.relu.0.forward"]["input_args"][0]
    assert rec["dtype"] == "torch.bfloat16"
    assert rec["Mean"] == pytest.approx(float(x.float().mean()), rel=1e-6)     # not rounded to bf16
    assert rec["Norm"] == pytest.approx(float(x.float().norm()), rel=1e-6)


def test_tensor_list_saves_only_matching_tensors(tmp_path):
    cfg = write_config(tmp_path, section={"scope": [], "list": [], "data_mode": ["all"],
                                          "summary_mode": "statistics", "tensor_list": ["relu"]})
    net_step(PrecisionDebugger(config_path=cfg))
    files = os.listdir(rank_dir(tmp_path) / "dump_tensor_data")
    assert files and all("relu" in f for f in files)
    assert "data_name" not in data(tmp_path)["Functional.linear.0.forward"]["input_args"][0]


def test_existing_dump_is_not_overwritten(tmp_path):
    """A rerun into the same dump_path is not refused (no exception into the training script): the earlier
    run's rank directory is moved to previous_<ts>/ intact, the new run's records are not mixed with it."""
    cfg = write_config(tmp_path)
    net_step(PrecisionDebugger(config_path=cfg))
    PrecisionDebugger._reset_for_tests()
    before = (rank_dir(tmp_path) / "dump.json").read_bytes()
    net_step(PrecisionDebugger(config_path=cfg))
    prev = [p for p in os.listdir(tmp_path / "dump") if p.startswith("previous_")]
    assert len(prev) == 1
    moved = tmp_path / "dump" / prev[0] / rank_dir(tmp_path).relative_to(tmp_path / "dump")
    assert (moved / "dump.json").read_bytes() == before
    assert (rank_dir(tmp_path) / "dump.json").is_file()


def test_distributed_all_reduce_single_rank(tmp_path):
    """A 1-process gloo group: Distributed.all_reduce is recorded (output = the arguments after the call)
    and the directory is rank0."""
    import torch.distributed as dist
    if not dist.is_available():
        pytest.skip("torch.distributed is not available in this build")
    store = dist.FileStore(str(tmp_path / "store"), 1)
    dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    try:
        cfg = write_config(tmp_path)
        dbg = PrecisionDebugger(config_path=cfg)
        t = torch.full((3,), 2.0)
        one_step(dbg, lambda: dist.all_reduce(t))
        d = json.loads((tmp_path / "dump" / "step0" / "rank0" / "dump.json").read_text())["data"]
        rec = d["Distributed.all_reduce.0.forward"]
        assert rec["input_args"][0]["Max"] == 2.0
        assert rec["output"][0]["Max"] == 2.0
    finally:
        dist.destroy_process_group()


def test_inference_mode_tensors(tmp_path):
    """Tensors made under torch.inference_mode() have no version counter; they are recorded all the same."""
    cfg = write_config(tmp_path)
    dbg = PrecisionDebugger(config_path=cfg)
    with torch.inference_mode():
        x = torch.arange(6, dtype=torch.float32)
        dbg.start()
        y = torch.relu(x)
        torch.sigmoid(y)
        dbg.stop()
    dbg.step()
    d = data(tmp_path)
    assert d["Torch.relu.0.forward"]["input_args"][0]["Max"] == 5.0
    assert d["Torch.sigmoid.0.forward"]["input_args"][0]["Max"] == 5.0
    assert not (rank_dir(tmp_path) / "dump_error_info.log").exists()


def test_async_write_failure_is_logged(tmp_path, monkeypatch):
    """A tensor file that the async writer thread cannot write is reported in dump_error_info.log."""
    from msprobe.pytorch.dump import collector as collector_mod

    def broken_save(obj, path):
        raise OSError(f"disk full while writing {path}")

    monkeypatch.setattr(collector_mod, "save_tensor", broken_save)
    section = {"scope": [], "list": ["relu"], "data_mode": ["all"]}
    cfg = write_config(tmp_path, task="tensor", async_dump=True, section=section)
    dbg = PrecisionDebugger(config_path=cfg)
    dbg.start()
    torch.relu(torch.ones(3))
    dbg.stop()
    dbg.service.collector.wait_writes()
    dbg.step()
    log = (rank_dir(tmp_path) / "dump_error_info.log").read_text()
    assert "disk full" in log and "tensor file" in log
