"""PyTorch dump of collectives, for real: 2 processes on gloo (127.0.0.1, a free port), a small MLP whose
gradients are all_reduce'd (the reference's multirank fixture run, ``_gen/gen_multirank.py``), then
collectives on views, async collectives and a broadcast.

A collective writes its tensors through the backend without bumping ``tensor._version``; the dump must
still record the value after the call as its output (the reduced value, equal on both ranks), and the
next op reading that tensor must see the reduced value as its input. Async collectives are recorded
once their Work completes.

The workers are this file run as a script (``python test_pytorch_distributed.py RANK PORT OUT``).
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
FIXTURE_CASE = "multirank_mlp_bf16_stat_mix"
WORLD = 2
STATS = ("Max", "Min", "Mean", "Norm")


# ------------------------------------------------------------------------------------------ worker
def _worker(rank, port, out):
    import torch
    import torch.distributed as dist
    import torch.nn as nn
    import torch.nn.functional as F

    from msprobe.pytorch import PrecisionDebugger

    class MLP(nn.Module):           # the fixtures' MLP (_gen/models.py): same layers, same init order
        def __init__(self):
            super().__init__()
            self.fc1 = nn.Linear(32, 64)
            self.act1 = nn.GELU()
            self.fc2 = nn.Linear(64, 64)
            self.act2 = nn.ReLU()
            self.fc3 = nn.Linear(64, 10)

        def forward(self, x):
            return self.fc3(self.act2(self.fc2(self.act1(self.fc1(x)))))

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=WORLD)
    torch.set_num_threads(1)
    cfg = {"task": "statistics", "dump_path": os.path.join(out, "dump"), "rank": [], "step": [], "level": "mix",
           "async_dump": False,
           "statistics": {"scope": [], "list": [], "data_mode": ["all"], "summary_mode": "statistics"}}
    cfg_path = os.path.join(out, f"config{rank}.json")
    with open(cfg_path, "w") as f:
        json.dump(cfg, f)
    dbg = PrecisionDebugger(config_path=cfg_path)
    torch.manual_seed(1234)
    model = MLP()
    expected = {}

    # steps 0 (fp32: the fixture's golden side) and 1 (bf16 autocast: its target side), as gen_multirank.py
    for step, autocast in ((0, False), (1, True)):
        model.zero_grad(set_to_none=True)
        torch.manual_seed(100 + rank)
        x = torch.randn(8, 32)
        y = torch.randint(0, 10, (8,))
        dbg.start(model)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            loss = F.cross_entropy(model(x), y)
        loss.backward()
        for p in model.parameters():
            dist.all_reduce(p.grad, op=dist.ReduceOp.SUM)
            p.grad.div_(WORLD)
        loss_sum = loss.detach().clone()
        dist.all_reduce(loss_sum)
        dbg.stop()
        dbg.step()
        # the reduced gradients (div_ by 2 is exact) and loss, taken outside the dump
        expected[f"step{step}"] = [p.grad * WORLD for p in model.parameters()] + [loss_sum.clone()]

    # step 2: a collective on a buffer whose view was recorded before; async collectives; a broadcast
    base = torch.arange(1.0, 7.0) * (rank + 1)
    view = base[:3]
    t = torch.ones(4) * (rank + 1)
    u = torch.arange(4.0) + 10 * rank
    s = torch.full((3,), float(rank + 5))
    dbg.start(model)
    _ = view + 0                          # Tensor.__add__.0: the view before the reduction
    dist.all_reduce(base)                 # Distributed.all_reduce.0: writes the view too, no version bump
    _ = view * 1                          # Tensor.__mul__.0: reads the reduced view
    work = dist.all_reduce(t, async_op=True)          # Distributed.all_reduce.1: recorded at wait()
    work.wait()
    t.div_(2)                                         # Tensor.div_.0: reads the reduced t
    work2 = dist.all_reduce(u, async_op=True)         # Distributed.all_reduce.2: waited through its future
    work2.get_future().wait()
    u.add_(0)                                         # Tensor.add_.0: reads the reduced u
    dist.broadcast(s, src=0)                          # Distributed.broadcast.0
    work3 = dist.all_reduce(s, async_op=True)         # Distributed.all_reduce.3: waited after stop()
    dbg.stop()
    work3.wait()                                      # (recorded then, written at step())
    dbg.step()
    expected["step2"] = [base.clone(), t * 2, u.clone(), s.clone()]
    torch.save(expected, os.path.join(out, f"expected{rank}.pt"))
    dist.destroy_process_group()


# ------------------------------------------------------------------------------------------ running
def _free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    pytest.importorskip("torch")
    import torch.distributed as dist
    if not dist.is_available() or not dist.is_gloo_available():
        pytest.skip("torch.distributed with gloo is not available")
    out = tmp_path_factory.mktemp("dist")
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env["OMP_NUM_THREADS"] = "1"
    port = _free_port()
    procs = [subprocess.Popen([sys.executable, str(Path(__file__).resolve()), str(r), str(port), str(out)],
                              cwd=str(out), env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for r in range(WORLD)]
    logs = []
    for p in procs:
        try:
            logs.append(p.communicate(timeout=120)[0])
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            pytest.fail("the 2-rank gloo run did not finish in 120 s")
    for p, log in zip(procs, logs):
        assert p.returncode == 0, f"worker failed (rc {p.returncode}):\n{log[-4000:]}"
    import torch
    return {"out": out,
            "expected": [torch.load(out / f"expected{r}.pt") for r in range(WORLD)],
            "data": {(step, r): _load(out / "dump" / f"step{step}" / f"rank{r}" / "dump.json")["data"]
                     for step in range(3) for r in range(WORLD)},
            "construct": {(step, r): _load(out / "dump" / f"step{step}" / f"rank{r}" / "construct.json")
                          for step in range(2) for r in range(WORLD)}}


def _load(path):
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def _stats(t):
    t = t.detach().float()
    if t.dim() == 0:
        v = t.item()
        return {"Max": v, "Min": v, "Mean": v, "Norm": v}
    return {"Max": t.max().item(), "Min": t.min().item(), "Mean": t.mean().item(),
            "Norm": t.double().norm().item()}


def _assert_stats(rec, t, what):
    assert list(rec["shape"]) == list(t.shape), what
    want = _stats(t)
    scale = max(abs(want["Max"]), abs(want["Min"]), 1e-30)
    for k in STATS:
        assert math.isclose(rec[k], want[k], rel_tol=1e-5, abs_tol=1e-6 * scale), (what, k, rec[k], want[k])


# ------------------------------------------------------------------------------------------ tests
@pytest.mark.parametrize("step", [0, 1])
def test_all_reduce_output_is_the_reduced_value(run, step):
    """Distributed.all_reduce.N.forward output = the reduced gradient (the actual tensor), equal on both
    ranks, different from the rank's own input; Tensor.div_.N.forward's input is that reduced value."""
    for r in range(WORLD):
        data = run["data"][(step, r)]
        reduced = run["expected"][r][f"step{step}"]
        assert len(reduced) == 7
        for i, want in enumerate(reduced):
            rec = data[f"Distributed.all_reduce.{i}.forward"]
            _assert_stats(rec["output"][0], want, f"rank{r} all_reduce.{i} output")
            if i < 6:
                _assert_stats(data[f"Tensor.div_.{i}.forward"]["input_args"][0], want, f"rank{r} div_.{i} input")
                _assert_stats(data[f"Tensor.div_.{i}.forward"]["output"][0], want / WORLD, f"rank{r} div_.{i} out")
            assert rec["input_args"][0]["Norm"] != rec["output"][0]["Norm"]
    for i in range(7):
        outs = [run["data"][(step, r)][f"Distributed.all_reduce.{i}.forward"]["output"][0] for r in range(WORLD)]
        ins = [run["data"][(step, r)][f"Distributed.all_reduce.{i}.forward"]["input_args"][0] for r in range(WORLD)]
        assert all(math.isclose(outs[0][k], outs[1][k], rel_tol=1e-6, abs_tol=1e-12) for k in STATS)
        assert ins[0]["Norm"] != ins[1]["Norm"]       # the inputs are each rank's own gradients


def test_collective_on_a_buffer_updates_its_recorded_views(run):
    for r in range(WORLD):
        data = run["data"][(2, r)]
        base = run["expected"][r]["step2"][0]
        _assert_stats(data["Tensor.__add__.0.forward"]["input_args"][0],
                      (__import__("torch").arange(1.0, 7.0) * (r + 1))[:3], "view before")
        _assert_stats(data["Distributed.all_reduce.0.forward"]["output"][0], base, "buffer after")
        _assert_stats(data["Tensor.__mul__.0.forward"]["input_args"][0], base[:3], "view after")


def test_async_collectives_are_recorded_when_complete(run):
    import torch
    for r in range(WORLD):
        data = run["data"][(2, r)]
        _base, t2, u, s = run["expected"][r]["step2"]
        rec = data["Distributed.all_reduce.1.forward"]
        _assert_stats(rec["input_args"][0], torch.ones(4) * (r + 1), "async input")
        _assert_stats(rec["output"][0], t2, "async output (wait)")
        assert rec["output"][1:] == [{"type": "bool", "value": True}]          # async_op=True
        _assert_stats(data["Tensor.div_.0.forward"]["input_args"][0], t2, "div_ after wait")
        _assert_stats(data["Distributed.all_reduce.2.forward"]["output"][0], u, "async output (future)")
        _assert_stats(data["Tensor.add_.0.forward"]["input_args"][0], u, "add_ after future")
        _assert_stats(data["Distributed.broadcast.0.forward"]["output"][0], torch.full((3,), 5.0), "broadcast")
        _assert_stats(data["Distributed.all_reduce.3.forward"]["output"][0], s, "async output (wait after stop)")
        assert list(data) == ["Tensor.__add__.0.forward", "Distributed.all_reduce.0.forward",
                              "Tensor.__mul__.0.forward", "Distributed.all_reduce.1.forward",
                              "Tensor.div_.0.forward", "Distributed.all_reduce.2.forward", "Tensor.add_.0.forward",
                              "Distributed.broadcast.0.forward", "Distributed.all_reduce.3.forward"]


def test_collectives_have_no_backward_record(run):
    for (step, r), data in run["data"].items():
        assert not [k for k in data if k.startswith("Distributed.") and k.endswith(".backward")], (step, r)


# ------------------------------------------------------------------------------------------ one process
def _single_process_dump(tmp_path, body, task="statistics"):
    import torch  # noqa: F401
    from msprobe.pytorch import PrecisionDebugger
    PrecisionDebugger._reset_for_tests()
    cfg = {"task": task, "dump_path": str(tmp_path / "dump"), "rank": [], "step": [], "level": "L1",
           "async_dump": False}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    try:
        dbg = PrecisionDebugger(config_path=str(tmp_path / "config.json"))
        body(dbg)
    finally:
        PrecisionDebugger._reset_for_tests()
    return _load(tmp_path / "dump" / "step0" / "rank" / "dump.json")["data"]


@pytest.mark.parametrize("task", ["statistics", "tensor"])
def test_custom_api_writing_without_a_version_bump(tmp_path, task):
    """A registered custom op that writes its argument behind autograd's back (as a backend does): the
    next op reading that tensor records the new value, not the cached statistics (or, in tensor mode,
    a link to the file) of the old one."""
    torch = pytest.importorskip("torch")
    import types
    lib = types.ModuleType("backendlib")

    def fill(t, value):
        t.detach().numpy()[...] = value          # no _version bump, like a collective or an NPU kernel

    lib.fill = fill
    x = torch.ones(4)
    base = torch.zeros(6)
    view = base[2:]

    def body(dbg):
        dbg.register_custom_api(lib, "fill", "Backend")
        dbg.start()
        _ = x + 0
        _ = view + 0
        lib.fill(x, 5.0)
        lib.fill(base, 3.0)                      # written through the base: the view changes too
        _ = x * 1
        _ = view * 1
        torch.add(x, 1, out=x)                   # out=: measured afresh
        _ = x - 0
        dbg.stop()
        dbg.step()

    data = _single_process_dump(tmp_path, body, task)
    if task == "tensor":
        files = tmp_path / "dump" / "step0" / "rank" / "dump_tensor_data"
        for name, value in (("Tensor.__add__.0.forward.input.0.pt", 1.0), ("Tensor.__mul__.0.forward.input.0.pt", 5.0),
                            ("Tensor.__mul__.1.forward.input.0.pt", 3.0)):
            assert torch.load(files / name).tolist() == [value] * 4, name
    assert data["Tensor.__add__.0.forward"]["input_args"][0]["Max"] == 1.0
    assert data["Tensor.__mul__.0.forward"]["input_args"][0]["Max"] == 5.0
    assert data["Tensor.__add__.1.forward"]["input_args"][0]["Max"] == 0.0
    assert data["Tensor.__mul__.1.forward"]["input_args"][0]["Max"] == 3.0
    assert data["Tensor.__sub__.0.forward"]["input_args"][0]["Max"] == 6.0
    assert x.tolist() == [6.0] * 4                # the training's values are untouched by the tool


# ------------------------------------------------------------------------------------------ vs the reference
def _num_close(a, b, tol):
    if isinstance(a, bool) or isinstance(b, bool) or a is None or b is None:
        return a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return math.isclose(a, b, rel_tol=1e-5, abs_tol=tol)
    return a == b


def _diff(ours, ref, path, out, tol=0.0, derived=None):
    """``derived``: tests/lowprec.derived_records of the reference step: values out of bf16 kernels, compared
    within a few bf16 roundings (they differ between CPUs), everything else within float32 rounding."""
    derived = derived or {}
    if isinstance(ref, dict):
        if not isinstance(ours, dict) or list(ours) != list(ref):
            out.append(f"{path}: keys {list(ours) if isinstance(ours, dict) else ours} != {list(ref)}")
            return
        if "dtype" in ref and "shape" in ref:
            vals = [abs(ref[k]) for k in ("Max", "Min") if isinstance(ref.get(k), (int, float))]
            tol = 1e-6 * max(vals) if vals else 0.0
            tol = max(tol, derived.get(id(ref), 0.0))
        for k in ref:
            if k == "md5" and id(ref) in derived:          # a checksum of bf16 kernel output: its form only
                if not (isinstance(ours[k], str) and len(ours[k]) == len(ref[k])):
                    out.append(f"{path}.{k}: {ours[k]!r} is not a checksum like {ref[k]!r}")
                continue
            _diff(ours[k], ref[k], f"{path}.{k}", out, tol, derived)
    elif isinstance(ref, list):
        if not isinstance(ours, list) or len(ours) != len(ref):
            out.append(f"{path}: {ours} != {ref}")
            return
        for i, (a, b) in enumerate(zip(ours, ref)):
            _diff(a, b, f"{path}[{i}]", out, tol, derived)
    elif not _num_close(ours, ref, tol):
        out.append(f"{path}: {ours} != {ref}")


@pytest.mark.parametrize("side,step", [("golden", 0), ("target", 1)])
def test_matches_the_reference_multirank_fixture(run, side, step):
    """Same computation as the fixture's gen_multirank.py (fp32 golden, bf16-autocast target): every record
    of both ranks, in order, with the reference's statistics (float32 rounding)."""
    from conftest import FIXTURES
    case = FIXTURES / FIXTURE_CASE
    if not case.is_dir():
        pytest.skip(f"reference fixture {FIXTURE_CASE} not found under {FIXTURES}")
    for r in range(WORLD):
        ref_dir = case / side / "step0" / f"rank{r}"
        ref = _load(ref_dir / "dump.json")["data"]
        ours = run["data"][(step, r)]
        assert list(ours) == list(ref)
        problems = []
        from lowprec import derived_records      # the target runs under bf16 autocast: its kernels differ by CPU
        _diff(ours, ref, f"rank{r}", problems, derived=derived_records(ref, "torch.bfloat16" if side == "target"
                                                                       else None))
        assert not problems, "\n".join(problems[:20])
        assert run["construct"][(step, r)] == _load(ref_dir / "construct.json")


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    _worker(int(sys.argv[1]), int(sys.argv[2]), sys.argv[3])
