"""Hooks never hurt training (issue 17 item 8, docs/reliability.md "Hooks never hurt training").

A small model (Linear, LayerNorm, GELU, softmax, matmul, dropout p=0, a module returning a tuple) is trained
for a few steps with and without PrecisionDebugger, same seed, in this process: the losses and the parameter
gradients are identical (``torch.equal``: same process, same ops), the run finishes, and a failure of the
tool is written to dump_error_info.log once per place (never once per step) and warned about once.

* exceptions injected into every internal entry point the hooks call (records, statistics, md5, tensor
  files, dump.json, stack, construct bookkeeping, the step's own bookkeeping);
* tensors whose values cannot be measured the usual way (subclasses, Parameter subclasses, meta, sparse COO
  and CSR, a released storage) and ``torch.compile``'d modules;
* config.json files mutated by ``tools/fuzz.py``'s mutator: refused with one ``MsprobeError`` line at
  construction, or the training runs to the end with the same losses.
"""

from __future__ import annotations

import collections
import copy
import importlib
import json
import logging
import random
import re
import shutil
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from conftest import ROOT  # noqa: E402
from msprobe.core.dump.errorlog import place  # noqa: E402
from msprobe.core.errors import MsprobeError  # noqa: E402
from msprobe.pytorch import PrecisionDebugger  # noqa: E402

STEPS = 3


# ------------------------------------------------------------------------------------------ the model
class Block(nn.Module):
    """Returns a tuple."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.ln = nn.LayerNorm(8)

    def forward(self, x):
        h = self.ln(self.fc(x))
        return h, F.gelu(h)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.block = Block()
        self.head = nn.Linear(8, 4)
        self.drop = nn.Dropout(0.0)

    def forward(self, x, extra=None):
        a, b = self.block(x)
        att = torch.softmax(a @ b.transpose(-1, -2), dim=-1)
        h = torch.matmul(att, b) + a
        if extra is not None:
            h = extra(h)
        return self.head(self.drop(h))


torch.manual_seed(0)
_INIT = Net().state_dict()
_X = torch.randn(2, 5, 8)


def train(dbg=None, steps=STEPS, extra=None, wrap=None, prepare=None):
    """[(loss, {param: grad})] per step; the debugger (if any) records each step."""
    m = Net()
    m.load_state_dict(copy.deepcopy(_INIT))
    if prepare is not None:
        prepare(m)
    run = wrap(m) if wrap is not None else m
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    out = []
    for _ in range(steps):
        if dbg is not None:
            dbg.start(model=m)
        loss = run(_X, extra).pow(2).mean()
        loss.backward()
        grads = {n: p.grad.clone() for n, p in m.named_parameters()}
        opt.step()
        opt.zero_grad()
        if dbg is not None:
            dbg.stop()
            dbg.step()
        out.append((loss.detach().clone(), grads))
    return out


_BASE = {}


def baseline(key="plain", **kw):
    if key not in _BASE:
        _BASE[key] = train(None, **kw)
    return _BASE[key]


def assert_same_training(base, got, steps=STEPS):
    assert len(got) == steps
    for s, ((l0, g0), (l1, g1)) in enumerate(zip(base, got)):
        assert torch.equal(l0, l1), (s, l0.item(), l1.item())
        assert sorted(g0) == sorted(g1)
        for n in g0:
            assert torch.equal(g0[n], g1[n]), (s, n)


# ------------------------------------------------------------------------------------------ fixtures
def _drop_leaked_modes():
    modes = []
    while torch._C._len_torch_function_stack():
        modes.append(torch._C._pop_torch_function_stack())
    for m in reversed(modes):
        if not type(m).__module__.startswith("msprobe"):
            torch._C._push_on_torch_function_stack(m)


class _Warnings(logging.Handler):
    def __init__(self):
        super().__init__(logging.WARNING)
        self.messages = []

    def emit(self, record):
        try:
            self.messages.append(record.getMessage())
        except Exception:  # noqa: BLE001
            pass


@pytest.fixture(autouse=True)
def _clean_state():
    PrecisionDebugger._reset_for_tests()
    _drop_leaked_modes()
    det = torch.are_deterministic_algorithms_enabled()
    rng = torch.get_rng_state()
    yield
    PrecisionDebugger._reset_for_tests()
    _drop_leaked_modes()
    torch.use_deterministic_algorithms(det)
    torch.set_rng_state(rng)


@pytest.fixture
def warnings_seen():
    h = _Warnings()
    log = logging.getLogger("msprobe")
    log.addHandler(h)
    yield h.messages
    log.removeHandler(h)


def write_config(path: Path, dump: Path, task="statistics", level="mix", **section):
    cfg = {"task": task, "dump_path": str(dump), "rank": [], "step": [], "level": level, "async_dump": False}
    for k in ("api_capture", "precision", "async_dump"):
        if k in section:
            cfg[k] = section.pop(k)
    sec = {"scope": [], "list": [], "data_mode": ["all"]}
    sec.update(section)
    if task in ("statistics", "tensor"):
        cfg[task] = sec
    path.write_text(json.dumps(cfg, indent=2), encoding="utf-8")
    return str(path)


LOG_LINE = re.compile(r"^\[[^\]]+\] msprobe could not record (.+?): (\w+): ", re.M)


def error_entries(dump: Path):
    """[(where, exception type, step)] of every entry of every step's dump_error_info.log."""
    out = []
    for p in _logs(dump):
        step = int(p.parent.parent.name[4:]) if p.parent != dump else -1
        out += [(w, t, step) for w, t in LOG_LINE.findall(p.read_text(encoding="utf-8"))]
    return out


def _logs(dump: Path):
    """The error logs: one per step directory, and dump_path's own when no step directory could be made."""
    own = [p for p in [dump / "dump_error_info.log"] if p.is_file()]
    return own + sorted(dump.glob("step*/rank*/dump_error_info.log"))


def log_text(dump: Path):
    return "\n".join(p.read_text(encoding="utf-8") for p in _logs(dump))


def assert_logged_once(dump: Path):
    entries = error_entries(dump)
    keys = collections.Counter((place(w), t) for w, t, _s in entries)
    twice = {k: n for k, n in keys.items() if n > 1}
    assert not twice, f"logged more than once: {twice}"
    return entries


def dump_data(dump: Path, step=0):
    p = dump / f"step{step}" / "rank" / "dump.json"
    return json.loads(p.read_text(encoding="utf-8"))["data"] if p.is_file() else None


# ------------------------------------------------------------------------------------------ a. injected failures
def _resolve(dotted):
    mod, _, attr = dotted.partition(":")
    owner = importlib.import_module(mod)
    *path, name = attr.split(".")
    for p in path:
        owner = getattr(owner, p)
    return owner, name


C = "msprobe.pytorch.dump.collector:"
CB = "msprobe.core.dump.collector_base:CollectorBase."
H = "msprobe.pytorch.dump.hooks:"
S = "msprobe.pytorch.dump.stats:"

# (target, what the config needs, exception type)
INJECTED = [
    (C + "Collector.api_inputs", {}, RuntimeError),                 # API forward record (inputs)
    (C + "Collector.api_outputs", {}, RuntimeError),                # API forward record (outputs)
    (C + "Collector.api_inputs", {}, MemoryError),
    (CB + "module_enter", {}, RuntimeError),                         # module forward pre-hook
    (CB + "module_inputs", {}, RuntimeError),
    (CB + "module_forward", {}, RuntimeError),                       # module forward hook
    (CB + "module_exit", {}, RuntimeError),
    (C + "Collector.api_backward", {}, RuntimeError),               # API backward node hook
    (C + "Collector.module_backward", {}, RuntimeError),            # module backward hooks
    (C + "Collector.param_grad", {}, RuntimeError),                 # parameter grad hooks
    (C + "Collector.param_grad_placeholder", {}, RuntimeError),
    (C + "Collector.convert", {}, RuntimeError),
    (S + "StatBuffer.add", {}, RuntimeError),                       # statistics
    (S + "StatBuffer.add", {}, MemoryError),
    (S + "StatBuffer.cached", {}, RuntimeError),
    (S + "StatBuffer.resolve", {}, RuntimeError),
    (C + "crc32_deferred", {"summary_mode": "md5"}, RuntimeError),  # md5
    (S + "crc32_hex", {"summary_mode": "md5"}, MemoryError),
    (C + "save_tensor", {"task": "tensor"}, OSError),               # tensor file write (writer thread)
    (C + "TensorWriter.save", {"task": "tensor"}, RuntimeError),
    ("msprobe.core.dump.writer:write_step_files", {}, OSError),     # dump.json writer
    (C + "Collector.flush", {}, RuntimeError),                      # flush
    ("msprobe.core.dump.stack:StackTable.add", {}, RuntimeError),   # stack capture
    ("msprobe.core.dump.stack:StackTable.to_json", {}, RuntimeError),
    (H + "Hooks._module_backward_hooks", {}, RuntimeError),         # module backward bookkeeping
    (H + "Hooks._api_backward_hook", {}, RuntimeError),
    (H + "Hooks._on_grad", {}, RuntimeError),
    (H + "Hooks._written", {}, RuntimeError),
    (H + "_RefTree.enter", {"api_capture": "reference"}, RuntimeError),   # construct bookkeeping
    (H + "_RefTree.sync", {"api_capture": "reference"}, RuntimeError),
    (C + "Collector.module_backward", {"api_capture": "reference"}, RuntimeError),
    (C + "Collector.reset", {}, RuntimeError),                      # step(): the step's own bookkeeping
    ("msprobe.core.fileio:make_dirs", {}, PermissionError),         # start(): the step directory
]


def _ids(case):
    target, need, exc = case
    extra = ",".join(f"{k}={v}" for k, v in need.items())
    return f"{target.split(':')[1]}-{exc.__name__}" + (f"-{extra}" if extra else "")


@pytest.mark.parametrize("case", INJECTED, ids=[_ids(c) for c in INJECTED])
def test_injected_failure_never_changes_training_and_is_logged_once(tmp_path, monkeypatch, warnings_seen, case):
    target, need, exc_type = case
    need = dict(need)
    task = need.pop("task", "statistics")
    dump = tmp_path / "dump"
    cfg = write_config(tmp_path / "config.json", dump, task=task, level="mix", **need)
    dbg = PrecisionDebugger(config_path=cfg)     # built before the injection: construction is not a hook
    owner, attr = _resolve(target)
    calls = {"n": 0}
    message = f"injected failure in {attr}"

    def broken(*args, **kwargs):
        calls["n"] += 1
        raise exc_type(message)

    monkeypatch.setattr(owner, attr, broken)
    got = train(dbg)
    monkeypatch.undo()
    assert calls["n"] > 0, f"{target} was never called: not an entry point of this configuration"
    assert_same_training(baseline(), got)
    entries = assert_logged_once(dump)
    text = log_text(dump)
    assert message in text and exc_type.__name__ in text, text[:3000]
    assert any(t == exc_type.__name__ for _w, t, _s in entries)
    # the steps after the first add nothing new for this cause: it was reported when first seen
    assert not [e for e in entries if e[2] > min(s for _w, _t, s in entries)
                and (place(e[0]), e[1]) in {(place(w), t) for w, t, s in entries if s == entries[0][2]}]
    # one warning on the console for the cause, however many records and steps it hit
    warned = [m for m in warnings_seen if message in m]
    assert len(warned) == 1, warned


class _NotJson:
    def __str__(self):
        return "<not json>"


def test_a_value_json_cannot_hold_costs_only_that_value(tmp_path, monkeypatch):
    """A recorder bug that puts a value JSON has no type for into a record (a jagged tensor's symbolic size did)
    must not cost the step's dump.json: the file is written with the value's text, the problem logged once."""
    from msprobe.pytorch.dump import collector as col_mod

    orig = col_mod.Collector.convert

    def convert(self, v, path, save, depth=0):
        out = orig(self, v, path, save, depth)
        if path.endswith(".kwargs.dim"):
            out = {"type": "int", "value": _NotJson()}
        return out

    dump = tmp_path / "dump"
    dbg = PrecisionDebugger(config_path=write_config(tmp_path / "config.json", dump))
    monkeypatch.setattr(col_mod.Collector, "convert", convert)
    got = train(dbg)
    monkeypatch.undo()
    assert_same_training(baseline(), got)
    for s in range(STEPS):
        data = dump_data(dump, s)
        assert data["Torch.softmax.0.forward"]["input_kwargs"]["dim"] == {"type": "int", "value": "<not json>"}
    entries = assert_logged_once(dump)
    assert [(w, t) for w, t, _s in entries] == [("flush", "TypeError")]
    assert "_NotJson" in log_text(dump) and "dump.json" in log_text(dump)


class _Unprintable(RuntimeError):
    def __str__(self):
        raise ValueError("no message")


def test_an_exception_whose_message_fails_is_still_logged_once(tmp_path, monkeypatch, warnings_seen):
    from msprobe.pytorch.dump import stats

    def broken(*args, **kwargs):
        err = _Unprintable()
        err.__cause__ = err           # a cycle in the cause chain, too
        raise err

    dump = tmp_path / "dump"
    dbg = PrecisionDebugger(config_path=write_config(tmp_path / "config.json", dump))
    monkeypatch.setattr(stats.StatBuffer, "add", broken)
    got = train(dbg)
    monkeypatch.undo()
    assert_same_training(baseline(), got)
    entries = assert_logged_once(dump)
    assert entries and all(t == "_Unprintable" for _w, t, _s in entries)
    assert "message cannot be shown" in log_text(dump)
    assert len([m for m in warnings_seen if "_Unprintable" in m]) == 1


def test_log_places_ignore_call_counters():
    assert place("Functional.linear.3.forward") == place("Functional.linear.0.forward") == "Functional.linear.forward"
    assert place("Module.layers.1.Linear.backward.2") == "Module.layers.Linear.backward"
    assert place("Functional.linear.0.forward.input.1.statistics") == "Functional.linear.forward.input.statistics"
    assert place("Module.fc.Linear.parameters_grad") == "Module.fc.Linear.parameters_grad"


# ------------------------------------------------------------------------------------------ b. unusual tensors
class PlainSub(torch.Tensor):
    pass


class FuncSub(torch.Tensor):
    """A subclass with its own __torch_function__ (counts the calls it sees)."""
    seen = 0

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        cls.seen += 1
        return super().__torch_function__(func, types, args, kwargs or {})


class MyParam(nn.Parameter):
    pass


def _plain_sub(h):
    return h + torch.ones(8).as_subclass(PlainSub)


def _func_sub(h):
    return (h.as_subclass(FuncSub) * 2).as_subclass(torch.Tensor)


def _meta(h):
    m = torch.empty(3, 4, device="meta")
    torch.relu(m @ m.t())
    return h


def _sparse_coo(h):
    s = torch.eye(8).to_sparse()
    y = torch.sparse.mm(s, torch.ones(8, 8))
    z = s * 2                                   # a sparse output
    return h + y.sum(0) * 0 + z.to_dense().sum() * 0


def _sparse_csr(h):
    s = torch.eye(8).to_sparse_csr()
    return h + (s @ torch.ones(8, 1)).sum() * 0


def _released(h):
    t = torch.ones(4, 4)
    t.untyped_storage().resize_(0)              # as FSDP frees a gathered parameter
    e = torch.empty_like(t)                     # reads only the metadata
    z = torch.zeros(t.shape)
    return h + z.sum() + e.shape[0] * 0


def _nested(h):
    n = torch.nested.nested_tensor([torch.ones(2), torch.ones(3)])        # strided layout: no plain sizes
    n * 2
    return h


def _jagged(h):
    n = torch.nested.nested_tensor([torch.ones(2, 4), torch.ones(3, 4)], layout=torch.jagged)   # a ragged dim
    n * 2
    return h


def _param_subclass(m):
    m.head.weight = MyParam(m.head.weight.detach().clone())


UNUSUAL = {
    "plain_subclass": (dict(extra=_plain_sub), "Tensor.__add__"),
    "torch_function_subclass": (dict(extra=_func_sub), "Tensor.__mul__"),
    "parameter_subclass": (dict(prepare=_param_subclass), "Module.head.Linear"),
    "meta": (dict(extra=_meta), "Torch.relu"),
    "sparse_coo": (dict(extra=_sparse_coo), "Tensor.__mul__"),
    "sparse_csr": (dict(extra=_sparse_csr), "Tensor.__matmul__"),
    "released_storage": (dict(extra=_released), "Torch.empty_like"),
    "nested": (dict(extra=_nested), "Tensor.__mul__"),
    "nested_jagged": (dict(extra=_jagged), "Tensor.__mul__"),
}
CONFIGS = {
    "statistics_mix": dict(task="statistics", level="mix"),
    "md5_L1": dict(task="statistics", level="L1", summary_mode="md5"),
    "tensor_mix": dict(task="tensor", level="mix"),
}


@pytest.mark.parametrize("config", list(CONFIGS))
@pytest.mark.parametrize("kind", list(UNUSUAL))
def test_unusual_tensors_are_recorded_without_failure(tmp_path, kind, config):
    kw, name = UNUSUAL[kind]
    if config == "md5_L1" and name.startswith("Module."):
        name = "Functional.linear"
    dump = tmp_path / "dump"
    dbg = PrecisionDebugger(config_path=write_config(tmp_path / "config.json", dump, **CONFIGS[config]))
    got = train(dbg, **kw)
    assert_same_training(baseline(kind, **kw), got)
    # nothing failed: these tensors are legitimate, their records are written (values where readable)
    assert error_entries(dump) == [], log_text(dump)[:3000]
    data = dump_data(dump, 0)
    recs = {k: v for k, v in data.items() if k.startswith(name + ".")}
    assert recs, sorted(data)
    if kind in ("meta", "released_storage"):
        rec = recs[f"{name}.0.forward"]
        leaf = rec["input_args"][0]
        assert leaf["shape"] and leaf["Max"] is None and leaf.get("md5") is None and "data_name" not in leaf
    if kind == "sparse_coo":
        # measured through its dense values: eye(8) * 2
        rec = recs["Tensor.__mul__.0.forward"]
        assert rec["output"][0]["Max"] == 2.0 and rec["output"][0]["Min"] == 0.0
        assert rec["output"][0]["Mean"] == pytest.approx(0.25)
    if kind.startswith("nested"):
        # measured through the elements of its components: ones * 2; a ragged dimension is null in the shape
        out = recs["Tensor.__mul__.0.forward"]["output"][0]
        assert out["Max"] == 2.0 and out["Min"] == 2.0 and out["shape"][0] == 2 and None in out["shape"]


COMPILE_BACKENDS = ["eager", "aot_eager", "inductor"]


@pytest.mark.parametrize("backend", COMPILE_BACKENDS)
def test_compiled_module_under_the_debugger(tmp_path, backend):
    if backend == "inductor":
        if shutil.which("g++") is None and shutil.which("c++") is None and shutil.which("clang++") is None:
            pytest.skip("inductor on CPU needs a C++ compiler (none on PATH)")
    torch._dynamo.reset()
    base = train(None, wrap=lambda m: torch.compile(m, backend=backend))
    torch._dynamo.reset()
    dump = tmp_path / "dump"
    dbg = PrecisionDebugger(config_path=write_config(tmp_path / "config.json", dump))
    got = train(dbg, wrap=lambda m: torch.compile(m, backend=backend))
    torch._dynamo.reset()
    assert_same_training(base, got)     # inductor: bit-identical only when the tool adds no graph break
    # nothing the compiler traced (fake tensors) reached the statistics: every step's files are written
    assert error_entries(dump) == [], log_text(dump)[:3000]
    for s in range(STEPS):
        data = dump_data(dump, s)
        assert data, f"step {s} has no dump.json"
        assert "Tensor.pow.0.forward" in data and "Torch.ones_like.0.forward" in data


def test_the_debugger_adds_no_graph_break(tmp_path):
    """Under torch.compile the tool records nothing while dynamo traces and is not traced itself: the same
    graphs as without it (a graph break would give inductor another program, and other rounding)."""
    def run(dbg):
        graphs = []

        def backend(gm, example_inputs):
            graphs.append(sorted(str(n.target) for n in gm.graph.nodes if n.op == "call_function"))
            return gm.forward

        torch._dynamo.reset()
        got = train(dbg, steps=2, wrap=lambda m: torch.compile(m, backend=backend))
        torch._dynamo.reset()
        return got, graphs

    base, plain_graphs = run(None)
    dump = tmp_path / "dump"
    got, tool_graphs = run(PrecisionDebugger(config_path=write_config(tmp_path / "config.json", dump)))
    assert_same_training(base, got, steps=2)
    assert len(plain_graphs) == 1 and len(tool_graphs) == 1, (plain_graphs, tool_graphs)


# ------------------------------------------------------------------------------------------ c. mutated configs
N_CONFIGS = 200


def _base_configs(dump: str):
    common = {"dump_path": dump, "rank": [], "step": [], "async_dump": False}
    return [
        dict(common, task="statistics", level="mix",
             statistics={"scope": [], "list": [], "data_mode": ["all"], "summary_mode": "statistics"}),
        dict(common, task="statistics", level="L1",
             statistics={"scope": [], "list": [], "data_mode": ["forward"], "summary_mode": "md5"}),
        dict(common, task="tensor", level="L0", tensor={"scope": [], "list": [], "data_mode": ["all"]}),
        dict(common, task="statistics", level="L0", step=[1], precision="high", seed=1234,
             statistics={"scope": [], "list": ["linear"], "data_mode": ["backward"], "tensor_list": ["gelu"]}),
        dict(common, task="overflow_check", level="L1", overflow_check={"overflow_nums": 1}),
        dict(common, task="structure", level="mix", api_capture="reference"),
    ]


def _fuzz_module():
    tools = str(ROOT / "tools")
    if tools not in sys.path:
        sys.path.insert(0, tools)
    import fuzz
    return fuzz


def test_mutated_configs_are_refused_at_construction_or_never_change_training(tmp_path, monkeypatch):
    fuzz = _fuzz_module()
    cwd = tmp_path / "a" / "b" / "c" / "d" / "e" / "cwd"     # relative dump paths ("../../..") stay in tmp_path
    cwd.mkdir(parents=True)
    monkeypatch.chdir(cwd)
    log = logging.getLogger("msprobe")
    level = log.level
    log.setLevel(logging.ERROR)      # the refusals and dump warnings of 200 configs: not this test's subject
    try:
        _mutated_configs(fuzz, tmp_path)
    finally:
        log.setLevel(level)


def _mutated_configs(fuzz, tmp_path):
    base = baseline("plain2", steps=2)
    rnd = random.Random(20261125)
    outcomes = collections.Counter()
    for i in range(N_CONFIGS):
        work = tmp_path / f"c{i}"
        work.mkdir()
        cfg = work / "config.json"
        doc = rnd.choice(_base_configs(str(work / "dump")))
        cfg.write_text(json.dumps(doc, indent=2), encoding="utf-8")
        mutations = []
        for _ in range(rnd.choice((1, 1, 1, 2, 3))):
            if not cfg.is_file():
                break
            # half of them one structural change (a value of the wrong type, a missing key, NaN ...), which
            # often still parses, so that many configs get as far as training; the rest any file mutation
            changed = fuzz._structural(cfg.read_bytes(), rnd, "json") if rnd.random() < 0.6 else None
            if changed is not None:
                cfg.write_bytes(changed)
                mutations.append("structural")
            else:
                mutations.append(fuzz.mutate_file(cfg, rnd))
        PrecisionDebugger._reset_for_tests()
        try:
            dbg = PrecisionDebugger(config_path=str(cfg))
        except MsprobeError as exc:
            text = str(exc)
            assert text and "\n" not in text, (i, mutations, text)
            outcomes["refused"] += 1
            continue
        except BaseException as exc:  # noqa: BLE001 - anything but MsprobeError is the bug looked for
            pytest.fail(f"config {i} ({mutations}): {type(exc).__name__} at construction: {exc}\n"
                        f"{cfg.read_bytes()[:500] if cfg.is_file() else '(not a file)'}")
        try:
            got = train(dbg, steps=2)
        except BaseException as exc:  # noqa: BLE001
            pytest.fail(f"config {i} ({mutations}): {type(exc).__name__} raised into training: {exc}\n"
                        f"{cfg.read_bytes()[:500]}")
        assert_same_training(base, got, steps=2)
        outcomes["trained"] += 1
        torch.use_deterministic_algorithms(False)
    assert outcomes["refused"] + outcomes["trained"] == N_CONFIGS
    assert outcomes["refused"] > 100 and outcomes["trained"] > 10, outcomes


# ------------------------------------------------------------------------------------------ MindSpore
MS_PY = ROOT / ".venv-ms" / "bin" / "python"


def _ms_net(out: Path, task: str, *flags):
    import os
    import subprocess

    env = {k: v for k, v in os.environ.items()
           if not k.startswith("PYTEST_") and k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update(PYTHONPATH=str(ROOT), GLOG_v="3")
    res = subprocess.run([str(MS_PY), str(ROOT / "tests" / "mindspore" / "ms_net.py"), str(out), "golden", "mix", task,
                          "--steps", str(STEPS), *flags], capture_output=True, text=True, timeout=600, env=env,
                         cwd=str(ROOT))
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    return json.loads(res.stdout.strip().splitlines()[-1]), res.stderr


@pytest.mark.parametrize("task", ["statistics", "tensor"])
def test_mindspore_statistics_failure_never_changes_training_and_is_logged_once(tmp_path, task):
    """.venv-ms: the tool's statistics raise for every tensor (tests/mindspore/ms_net.py --break-stats), 3 steps."""
    if not MS_PY.exists():
        pytest.skip(f"{MS_PY.relative_to(ROOT)} not found: run `make ms-venv` to build the MindSpore 2.10 venv")
    base, _ = _ms_net(tmp_path / "base", task, "--no-debugger")
    got, stderr = _ms_net(tmp_path / "tool", task, "--break-stats")
    assert got == base                     # losses and trained parameters
    dump = tmp_path / "tool" / "golden"
    assert_logged_once(dump)
    assert "statistics exploded" in log_text(dump)
    warned = [ln for ln in stderr.splitlines() if "msprobe: could not record" in ln]
    assert len(warned) == 1, warned
    # the records stay (without values): the dump of every step is complete but for the statistics
    for s in range(STEPS):
        data = dump_data(dump, s)
        assert data and "Cell.conv.Conv2d.forward.0" in data, s
        leaf = data["Cell.conv.Conv2d.forward.0"]["input_args"][0]
        assert leaf["Max"] is None and leaf["shape"]
        if task == "tensor":
            assert leaf["data_name"].endswith(".npy")
