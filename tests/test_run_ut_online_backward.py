"""Online run_ut, backward: the aten ops of ``loss.backward()`` are sent as ``Aten.{op}.{n}`` calls and judged by
the checker like the forward calls; the capture leaves the gradients bit-identical, leaves out the blacklisted
ops, is off with ``online_run_ut_recompute``, and never reaches the training when it fails."""

import copy
import json
import logging
import os
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")

from msprobe.core.acc_check.online import aten as A  # noqa: E402
from msprobe.core.acc_check.online import protocol as P  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_run_ut_online import _env, finish, rows, start_checker, stats_of  # noqa: E402


class Model(torch.nn.Module):
    """conv1d without bias (convolution_backward has an absent output), relu, linear, log_softmax + nll_loss
    (_log_softmax_backward_data takes a positional dtype)."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv1d(2, 4, 3, bias=False)
        self.fc = torch.nn.Linear(16, 5)

    def forward(self, x):
        h = torch.relu(self.conv(x)).flatten(1)
        return torch.log_softmax(self.fc(h), -1)


def batch(seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(3, 2, 6, generator=g), torch.randint(0, 5, (3,), generator=g)


class FakeSender:
    """Collects what the training side hands to the sender."""
    calls = []
    fail = False

    def __init__(self, cfg, rank, **kw):
        pass

    def submit(self, name, step, record, tensors):
        if FakeSender.fail:
            raise RuntimeError("planted sender failure")
        FakeSender.calls.append((name, step, record, [bytes(t[2]) for t in tensors]))
        return True

    def close(self, timeout=None):
        return {"captured": len(FakeSender.calls)}


@pytest.fixture
def debugger(tmp_path, monkeypatch):
    from msprobe.pytorch import PrecisionDebugger
    import msprobe.pytorch.acc_check.online_client as oc
    monkeypatch.setattr(oc, "Sender", FakeSender)
    FakeSender.calls, FakeSender.fail = [], False
    PrecisionDebugger._reset_for_tests()
    made = []

    def make(**tensor):
        cfg = tmp_path / "train.json"
        cfg.write_text(json.dumps({"task": "tensor", "dump_path": str(tmp_path / "dump"), "level": "L1",
                                   "tensor": dict({"online_run_ut": True, "nfs_path": str(tmp_path)}, **tensor)}))
        made.append(PrecisionDebugger(config_path=str(cfg)))
        return made[-1]
    yield make
    PrecisionDebugger._reset_for_tests()


def train(dbg, steps=2):
    """``steps`` steps under the debugger; each step's gradients against the same step run without it."""
    torch.manual_seed(0)
    model = Model()
    equal = []
    for s in range(steps):
        x, y = batch(s)
        ref = copy.deepcopy(model)
        torch.nn.functional.nll_loss(ref(x), y).backward()
        dbg.start(model)
        loss = torch.nn.functional.nll_loss(model(x), y)
        loss.backward()
        dbg.stop()
        dbg.step()
        equal.append(all(torch.equal(p.grad, q.grad) for p, q in zip(model.parameters(), ref.parameters())))
        for p in model.parameters():
            p.grad = None
    return equal


def ops_run_by_backward():
    """Every aten op a plain backward of the model runs (blacklisted ones too), by a counting mode of our own."""
    from torch.utils._python_dispatch import TorchDispatchMode
    seen = set()

    class Count(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            seen.add(func.__name__.split(".")[0])
            return func(*args, **(kwargs or {}))
    torch.manual_seed(0)
    x, y = batch(0)
    loss = torch.nn.functional.nll_loss(Model()(x), y)
    with Count():
        torch.autograd.backward(loss)
    return seen


def test_backward_aten_ops_sent_gradients_unchanged(debugger):
    original = torch.autograd.backward
    dbg = debugger()
    assert train(dbg) == [True, True]                       # gradients bit-identical with the capture on
    dbg.service.end()
    assert torch.autograd.backward is original              # the wrapper is gone at the end
    names = [(c[0], c[1]) for c in FakeSender.calls]
    aten = [(n, s) for n, s in names if n.startswith("Aten.")]
    for step in (0, 1):                                     # numbers restart every step, as the forward ones
        got = [n for n, s in aten if s == step]
        assert {"Aten.convolution_backward.0", "Aten.threshold_backward.0", "Aten.mm.0",
                "Aten._log_softmax_backward_data.0", "Aten.nll_loss_backward.0"} <= set(got), got
        assert len(got) == len(set(got))
        assert ("Functional.conv1d.0", step) in names and ("Functional.linear.0", step) in names
    run = ops_run_by_backward()
    left_out = {"detach", "view"} & run
    assert left_out, run                                    # the backward does run blacklisted ops ...
    sent_ops = {n.split(".")[1] for n, _ in aten}
    assert not sent_ops & A.BLACKLIST                       # ... which are not sent
    assert sent_ops <= run
    rec = {c[0]: c[2] for c in FakeSender.calls if c[1] == 0}
    assert rec["Aten.sum.0"]["overload"] == "dim_IntList"
    assert rec["Aten._log_softmax_backward_data.0"]["input_args"][3] == {"type": "torch.dtype",
                                                                         "value": "torch.float32"}
    assert rec["Aten.convolution_backward.0"]["output"][2] is None      # no bias: no bias gradient


@pytest.mark.parametrize("reentrant", [True, False])
def test_checkpoint_backward_inside_backward(debugger, reentrant):
    """torch.utils.checkpoint: the recomputed forward runs inside the backward (a reentrant one calls
    torch.autograd.backward again): one capture goes on, every op once, the gradients unchanged."""
    import torch.utils.checkpoint as cp
    dbg = debugger()
    torch.manual_seed(0)
    mods = torch.nn.ModuleList([torch.nn.Linear(8, 8), torch.nn.Linear(8, 1)])
    ref = copy.deepcopy(mods)
    x = torch.randn(4, 8, requires_grad=True)

    def loss(m):
        return m[1](cp.checkpoint(lambda t: torch.relu(m[0](t)), x, use_reentrant=reentrant)).sum()
    loss(ref).backward()
    dbg.start(mods)
    loss(mods).backward()
    dbg.stop()
    assert all(torch.equal(p.grad, q.grad) for p, q in zip(mods.parameters(), ref.parameters()))
    aten = [c[0] for c in FakeSender.calls if c[0].startswith("Aten.")]
    assert len(aten) == len(set(aten)) and {"Aten.addmm.0", "Aten.threshold_backward.0"} <= set(aten)


def test_recompute_turns_the_backward_capture_off(debugger):
    original = torch.autograd.backward
    dbg = debugger(online_run_ut_recompute=True)
    assert train(dbg, 1) == [True]
    assert torch.autograd.backward is original
    names = [c[0] for c in FakeSender.calls]
    assert "Functional.conv1d.0" in names and not [n for n in names if n.startswith("Aten.")]


def test_list_selects_backward_ops_too(debugger):
    dbg = debugger(list=["Aten.mm", "linear"])
    train(dbg, 1)
    assert sorted(c[0] for c in FakeSender.calls) == ["Aten.mm.0", "Aten.mm.1", "Functional.linear.0"]


def test_a_failing_capture_never_reaches_the_training(debugger, caplog, monkeypatch):
    dbg = debugger()
    FakeSender.fail = True
    from msprobe.pytorch.acc_check import online_backward

    def broken(self, v, path, key=None):
        raise ValueError("planted capture failure")
    with caplog.at_level(logging.WARNING, logger="msprobe"):
        assert train(dbg, 1) == [True]                      # the sender raises on every call
        monkeypatch.setattr(online_backward._AtenCapture, "value", broken)
        assert train(dbg, 1) == [True]                      # the capture of every aten op raises
    lines = [r.getMessage() for r in caplog.records if "not captured" in r.getMessage()]
    assert any("RuntimeError: planted sender failure" in ln for ln in lines)
    assert any("ValueError: planted capture failure" in ln for ln in lines)
    assert len(lines) == 2                                  # once per kind of failure


# ------------------------------------------------------------------ the checker's side, in-process
@pytest.fixture(autouse=True)
def _threads():
    n = torch.get_num_threads()     # make_judge sets one thread, as the checker process runs
    yield
    torch.set_num_threads(n)


def _frame(name, overload, args, out):
    tensors, bufs = [], []

    def rec(v):
        if isinstance(v, torch.Tensor):
            t = v.detach().contiguous()
            tensors.append({"dtype": str(t.dtype), "shape": list(t.shape), "nbytes": t.numel() * t.element_size()})
            bufs.append(t.reshape(-1).view(torch.uint8).numpy().data)
            return {"type": "torch.Tensor", "dtype": str(t.dtype), "shape": list(t.shape), "requires_grad": False,
                    "data_name": f"@{len(bufs) - 1}"}
        if isinstance(v, list):
            return [rec(x) for x in v]
        return {"type": type(v).__name__, "value": v}
    record = {"input_args": [rec(a) for a in args], "input_kwargs": {}, "overload": overload}
    record["output"] = [rec(o) for o in (out if isinstance(out, (list, tuple)) else [out])]
    head = {"seq": 0, "session": "s", "rank": 0, "step": 0, "name": name, "record": record, "tensors": tensors}
    return P.parse_bytes(P.encode_bytes(P.DATA, head, bufs))


def test_judge_rebuilds_the_aten_op():
    from msprobe.pytorch.acc_check.online_checker import aten_skip_reason, make_judge
    judge = make_judge({})
    g = torch.Generator().manual_seed(1)
    grad, act = torch.randn(4, 6, generator=g), torch.randn(4, 6, generator=g)
    good = torch.ops.aten.threshold_backward.default(grad, act, 0.0)
    f = _frame("Aten.threshold_backward.0", "default", [grad, act, 0.0], good)
    res = judge(f.header, P.tensor_views(f))
    assert res["forward"] == "pass"
    assert res["details"][0]["API Name"] == "Aten.threshold_backward.0.forward.output.0"
    bad = good * 1.01
    f = _frame("Aten.threshold_backward.0", "default", [grad, act, 0.0], bad)
    assert judge(f.header, P.tensor_views(f))["forward"] == "error"
    x = torch.randn(4, 6, generator=g)
    f = _frame("Aten.sum.0", "dim_IntList", [x, [0], True], x.sum(0, keepdim=True))   # a recorded overload
    assert judge(f.header, P.tensor_views(f))["forward"] == "pass"
    f = _frame("Aten.sum.0", "no_such_overload", [x], x.sum())
    assert "does not exist" in judge(f.header, P.tensor_views(f))["message"]
    assert "does not exist" in aten_skip_reason("Aten.no_such_op.0")
    assert "does not exist" in aten_skip_reason("Aten.__class__.0")
    assert "creates, copies, views or casts" in aten_skip_reason("Aten.view.0")
    assert "random" in aten_skip_reason("Aten.bernoulli_.0", "float")
    assert aten_skip_reason("Aten.mm.0") == ""
    for name in ("Aten.save.0", "Aten.from_file.0"):        # never anything that takes a file name
        assert "SKIP" in aten_skip_reason(name)


# ------------------------------------------------------------------ end to end: training -> checker
TRAIN = r'''
import copy, json, logging, sys
logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s")
import torch
sys.path.insert(0, sys.argv[2])
from test_run_ut_online_backward import Model, batch
from msprobe.pytorch import PrecisionDebugger
dbg = PrecisionDebugger(config_path=sys.argv[1])
torch.manual_seed(0)
model = Model()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for s in range(2):
    if s == 1:   # a faulty ReLU backward kernel from step 1 on: 1.5 times the right gradient
        lib = torch.library.Library("aten", "IMPL")
        lib.impl("threshold_backward",
                 lambda g, x, t: torch.where(x <= t, torch.zeros_like(g), g) * 1.5, "CPU")
    x, y = batch(s)
    ref = copy.deepcopy(model)
    torch.nn.functional.nll_loss(ref(x), y).backward()
    dbg.start(model)
    loss = torch.nn.functional.nll_loss(model(x), y)
    opt.zero_grad()
    loss.backward()
    dbg.stop()
    dbg.step()
    same = all(torch.equal(p.grad, q.grad) for p, q in zip(model.parameters(), ref.parameters()))
    print(f"step {s} grads_equal {same}", flush=True)
    opt.step()
print("STATS " + json.dumps(dbg.service.online.close()), flush=True)
'''


def test_backward_rows_judged_and_a_faulty_kernel_found(tmp_path):
    nfs = tmp_path / "nfs"
    nfs.mkdir()
    block = {"nfs_path": str(nfs)}
    out = tmp_path / "out"
    checker = start_checker(tmp_path, block, out)
    cfg = tmp_path / "train.json"
    cfg.write_text(json.dumps({"task": "tensor", "dump_path": str(tmp_path / "dump"), "level": "L1",
                               "tensor": dict(block, online_run_ut=True)}))
    script = tmp_path / "train.py"
    script.write_text(TRAIN)
    train_proc = subprocess.Popen([sys.executable, str(script), str(cfg), os.path.dirname(os.path.abspath(__file__))],
                                  cwd=str(tmp_path), env=_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                  text=True)
    try:
        rc, output = finish(train_proc)
        assert rc == 0, output
        assert checker.wait(90) == 0, (tmp_path / "checker.log").read_text()
    finally:
        for p in (checker, train_proc):
            if p.poll() is None:
                p.kill()
    assert "step 0 grads_equal True" in output and "step 1 grads_equal True" in output
    stats = stats_of(output)
    assert stats["dropped"] == 0
    verdicts = {r[0]: r[1] for r in rows(out)}
    assert len(verdicts) == stats["captured"] == stats["judged"]
    aten = {n: v for n, v in verdicts.items() if n.startswith("Aten.")}
    assert {"Aten.threshold_backward.0.step0", "Aten.convolution_backward.0.step0", "Aten.mm.0.step1",
            "Aten.nll_loss_backward.0.step1", "Aten._log_softmax_backward_data.0.step1"} <= set(aten)
    assert not {n.split(".")[1] for n in aten} & A.BLACKLIST
    assert aten.pop("Aten.threshold_backward.0.step1") == "error"     # the faulty kernel, found at its op
    assert set(aten.values()) == {"pass"}                            # every other backward op: its own inputs
    assert all(v == "pass" for n, v in verdicts.items() if n.startswith("Functional."))
    assert not [n for n in verdicts if n.startswith("Tensor.__")]   # the faulty kernel's own torch calls: part of it
    details = {r[0]: r for r in rows(out, "details")}
    conv = [n for n in details if n.startswith("Aten.convolution_backward.0.step0.forward.output.")]
    assert len(conv) == 3                                             # grad input, grad weight, no bias grad


def test_cpu_checker_judges_low_precision_against_its_own_cpu_run(monkeypatch):
    """bfloat16 layer-norm backward: the weight/bias gradients of the CPU kernel are not the float32 benchmark
    rounded to bfloat16; the ratio standard compares the training's error with the checker's CPU run in
    bfloat16 (a second implementation), so a clean call passes and a 2 % fault is an error."""
    from msprobe.pytorch.acc_check import online_checker as oc
    judge = oc.make_judge({})
    g = torch.Generator().manual_seed(3)
    x, gy = (torch.randn(16, 64, generator=g).bfloat16() for _ in range(2))
    w, b = (torch.randn(64, generator=g).bfloat16() for _ in range(2))
    _, mean, rstd = torch.ops.aten.native_layer_norm.default(x, [64], w, b, 1e-5)
    args = [gy, x, [64], mean, rstd, w, b, [True, True, True]]
    res = list(torch.ops.aten.native_layer_norm_backward.default(*args))

    def verdicts(outs):
        f = _frame("Aten.native_layer_norm_backward.0", "default", args, outs)
        return [d["Status"] for d in judge(f.header, P.tensor_views(f))["details"]]
    assert "error" not in verdicts(res)
    assert verdicts([res[0], res[1] * 1.02, res[2]]) == ["pass", "error", "pass"]
    run = oc.OnlineCallChecker._run

    def rounded_benchmark_only(self, *a, **k):     # what the ratio was against before: clean is an error
        runs, failure = run(self, *a, **k)
        self.reference_on_cpu = False
        return runs, failure
    monkeypatch.setattr(oc.OnlineCallChecker, "_run", rounded_benchmark_only)
    assert "error" in verdicts(res)
