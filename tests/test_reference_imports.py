"""The reference's public import paths and call forms, used the way integrations use them (issue 15 item 5).

- Every alias module path of MindStudio Probe (8.x ``msprobe.pytorch.debugger.precision_debugger``,
  ``msprobe.pytorch.common.utils``, 26.x ``msprobe.pytorch.dump.debugger.precision_debugger``, and the MindSpore
  equivalents) resolves here to the very same objects as ``msprobe.pytorch`` / ``msprobe.mindspore``; importing
  the PyTorch ones does not import torch, the MindSpore ones without MindSpore raise the one-line
  ``MindSporeMissingError``.
- ``PrecisionDebugger`` constructed by config_path (keyword and positional), by keywords only, and with the
  8.x positional order (config_path, task, dump_path, level, model, step); ``start(model=[modules])`` inside
  ``try/finally: stop(); step()`` (also when the step raises); class-method calls; ``forward_backward_dump_end``;
  ``set_init_step``; ``module_dump``/``module_dump_end``; ``save`` at level debug; ``seed_all`` in its forms.
  Each writes the files the form promises (records checked by name and shape).
"""
from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys

import pytest

from conftest import ROOT
from msprobe.core.errors import MsprobeError

PT_ALIASES = [
    ("msprobe.pytorch.debugger.precision_debugger", ["PrecisionDebugger", "module_dump", "module_dump_end"]),
    ("msprobe.pytorch.dump.debugger.precision_debugger", ["PrecisionDebugger", "module_dump", "module_dump_end"]),
    ("msprobe.pytorch.common.utils", ["seed_all"]),
    ("msprobe.pytorch.common", ["seed_all"]),
    ("msprobe.pytorch.debugger", ["PrecisionDebugger", "seed_all", "module_dump", "module_dump_end"]),
]
MS_ALIASES = [
    ("msprobe.mindspore.debugger.precision_debugger", ["PrecisionDebugger"]),
    ("msprobe.mindspore.dump.debugger.precision_debugger", ["PrecisionDebugger"]),
    ("msprobe.mindspore.common.utils", ["seed_all"]),
]


def _run(code):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120,
                          cwd=str(ROOT))


def _mindspore_installed():
    import importlib.metadata
    try:
        importlib.metadata.distribution("mindspore")
        return True
    except importlib.metadata.PackageNotFoundError:
        return False


# ----------------------------------------------------------------------------------------- import paths
def test_pytorch_alias_paths_do_not_import_torch():
    imports = "\n".join(f"from {mod} import {', '.join(names)}" for mod, names in PT_ALIASES)
    res = _run("import sys\n" + imports + "\nassert 'torch' not in sys.modules, 'torch imported'\nprint('ok')")
    assert res.returncode == 0 and res.stdout.strip() == "ok", res.stderr[-2000:]


def test_mindspore_alias_paths_without_mindspore_are_one_line():
    if _mindspore_installed():
        pytest.skip("mindspore is installed in this interpreter (tests/mindspore covers the aliases there)")
    code = ("import importlib, sys\n"
            "from msprobe.core.errors import MsprobeError\n"
            "import msprobe.mindspore.common, msprobe.mindspore.dump.debugger\n"   # the packages alone work
            f"for mod in {[m for m, _ in MS_ALIASES]!r}:\n"
            "    try:\n"
            "        importlib.import_module(mod)\n"
            "    except ImportError as e:\n"
            "        assert isinstance(e, MsprobeError), type(e)\n"
            "        print(mod, '|', str(e))\n"
            "assert 'mindspore' not in sys.modules\n")
    res = _run(code)
    assert res.returncode == 0, res.stderr[-2000:]
    lines = res.stdout.strip().splitlines()
    assert [ln.split(" | ")[0] for ln in lines] == [m for m, _ in MS_ALIASES]
    for ln in lines:
        msg = ln.split(" | ", 1)[1]
        assert "needs MindSpore" in msg and 'pip install mindspore==2.10.0 "numpy<2"' in msg


torch = pytest.importorskip("torch")
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import msprobe.pytorch as mp  # noqa: E402
from msprobe.pytorch import PrecisionDebugger, module_dump, module_dump_end, seed_all  # noqa: E402


@pytest.mark.parametrize("mod,names", PT_ALIASES)
def test_pytorch_alias_is_the_same_object(mod, names):
    m = importlib.import_module(mod)
    for name in names:
        assert getattr(m, name) is getattr(mp, name), (mod, name)


# ----------------------------------------------------------------------------------------- helpers
@pytest.fixture(autouse=True)
def _fresh():
    PrecisionDebugger._reset_for_tests()
    det = torch.are_deterministic_algorithms_enabled()
    drop = (F.dropout, F.dropout2d, F.dropout3d)
    yield
    PrecisionDebugger._reset_for_tests()
    torch.use_deterministic_algorithms(det)
    F.dropout, F.dropout2d, F.dropout3d = drop


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x):
        return torch.relu(self.fc(x))


class Head(nn.Module):
    def __init__(self):
        super().__init__()
        self.out = nn.Linear(4, 2)

    def forward(self, x):
        return self.out(x).sigmoid()


def config(tmp_path, **kw):
    cfg = {"task": "statistics", "dump_path": str(tmp_path / "dump"), "rank": [], "step": [], "level": "mix"}
    cfg.update(kw)
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    return str(path)


def records(tmp_path, step=0, name="dump.json"):
    with open(tmp_path / "dump" / f"step{step}" / "rank" / name, encoding="utf-8") as f:
        return json.load(f)["data"]


def steps(tmp_path):
    return sorted(p for p in os.listdir(tmp_path / "dump") if p.startswith("step"))


def pipeline_step(debugger, parts, x, fail=False):
    """What a pipeline-parallel trainer does: start on its model chunks, stop/step in ``finally``."""
    debugger.start(model=parts)
    try:
        h = parts[0](x)
        if fail:
            raise RuntimeError("data loader broke")
        loss = parts[1](h).sum()
        loss.backward()
    finally:
        debugger.stop()
        debugger.step()


# ----------------------------------------------------------------------------------------- call forms
def test_integration_form_list_of_modules_try_finally(tmp_path):
    from msprobe.pytorch.common.utils import seed_all as seed_all_ref_path
    from msprobe.pytorch.debugger.precision_debugger import PrecisionDebugger as RefPathDebugger

    seed_all_ref_path(mode=True)
    assert torch.are_deterministic_algorithms_enabled()
    parts = [Block(), Head()]
    debugger = RefPathDebugger(config_path=config(tmp_path))
    assert debugger is PrecisionDebugger(config_path=config(tmp_path))      # one singleton on both paths
    x = torch.randn(3, 4)
    with pytest.raises(RuntimeError, match="data loader broke"):
        pipeline_step(debugger, parts, x, fail=True)
    pipeline_step(debugger, parts, x)
    assert steps(tmp_path) == ["step0", "step1"]
    d0, d1 = records(tmp_path, 0), records(tmp_path, 1)
    # the step that raised wrote its files (the forward of the first part only)
    assert "Module.0.fc.Linear.forward.0" in d0 and not any(k.startswith("Module.1.") for k in d0)
    # both model parts are recorded with their list index as the name prefix, forward and backward
    for k in ("Module.0.fc.Linear.forward.0", "Module.1.out.Linear.forward.0", "Module.1.out.Linear.backward.0",
              "Module.0.fc.Linear.backward.0", "Torch.relu.0.forward", "Tensor.sigmoid.0.forward"):
        assert k in d1, k
    assert d1["Module.1.out.Linear.forward.0"]["output"][0]["shape"] == [3, 2]
    construct = json.loads((tmp_path / "dump" / "step1" / "rank" / "construct.json").read_text())
    assert construct["Functional.linear.1.forward"] == "Module.1.out.Linear.forward.0"


def test_keyword_only_construction(tmp_path):
    """No config file: the packaged one, with task/dump_path/level/step from the keywords."""
    dump = str(tmp_path / "dump")
    debugger = PrecisionDebugger(task="statistics", dump_path=dump, level="L1", step=[1])
    model = Block()
    for _ in range(3):
        debugger.start()
        try:
            model(torch.ones(2, 4)).sum().backward()
        finally:
            debugger.stop()
            debugger.step()
    assert steps(tmp_path) == ["step1"]
    d = records(tmp_path, 1)
    assert list(d)[:2] == ["Functional.linear.0.forward", "Torch.relu.0.forward"]
    assert not any(k.startswith("Module.") for k in d)


def test_positional_8x_order_and_model_from_constructor(tmp_path):
    """8.3.3's order: (config_path, task, dump_path, level, model, step); start() then uses that model."""
    model = Block()
    debugger = PrecisionDebugger(config(tmp_path, level="L1"), "statistics", str(tmp_path / "dump"), "L0", model,
                                 [0])
    debugger.start()
    model(torch.ones(2, 4)).sum().backward()
    debugger.stop()
    debugger.step()
    d = records(tmp_path)
    assert set(d) == {"Module.fc.Linear.forward.0", "Module.fc.Linear.parameters_grad", "Module.fc.Linear.backward.0"}


def test_class_method_forms_forward_backward_dump_end_and_init_step(tmp_path):
    model = Block()
    PrecisionDebugger(config_path=config(tmp_path, level="L1"))
    PrecisionDebugger.set_init_step(5)
    for _ in range(2):                      # as called from another file of the trainer: through the class
        PrecisionDebugger.start(model)
        model(torch.ones(1, 4)).sum().backward()
        PrecisionDebugger.forward_backward_dump_end()
        PrecisionDebugger.step()
    assert steps(tmp_path) == ["step5", "step6"]
    assert "Torch.relu.0.backward" in records(tmp_path, 6)


def test_start_with_a_tuple_of_modules(tmp_path):
    parts = (Block(), Head())
    debugger = PrecisionDebugger(config_path=config(tmp_path, level="L0"))
    debugger.start(model=parts)
    parts[1](parts[0](torch.ones(2, 4))).sum().backward()
    debugger.stop()
    assert {"Module.0.fc.Linear.forward.0", "Module.1.out.Linear.forward.0"} <= set(records(tmp_path))


def test_start_without_model_at_mix_is_one_error(tmp_path):
    debugger = PrecisionDebugger(config_path=config(tmp_path))
    with pytest.raises(MsprobeError, match="model"):
        debugger.start()


@pytest.mark.parametrize("path", ["msprobe.pytorch", "msprobe.pytorch.debugger.precision_debugger",
                                  "msprobe.pytorch.dump.debugger.precision_debugger"])
def test_module_dump_forms(tmp_path, path):
    m = importlib.import_module(path)
    model = nn.Sequential(Block(), Head())
    debugger = m.PrecisionDebugger(config_path=config(tmp_path, level="L1"))
    debugger.start()
    try:
        h = model[0](torch.ones(2, 4))
        m.module_dump(model[1], "head")
        out = model[1](h)
        m.module_dump_end()
        out.sum().backward()
    finally:
        debugger.stop()
        debugger.step()
    d = records(tmp_path)
    assert "Module.head.Head.forward.0" in d and "Module.head.Head.backward.0" in d
    assert "Torch.relu.0.forward" in d                          # APIs outside module_dump are recorded
    assert not any(k.startswith(("Tensor.sigmoid", "Functional.linear.1")) for k in d)   # inside: not


def test_save_at_debug_level(tmp_path):
    debugger = PrecisionDebugger(config_path=config(tmp_path, level="debug"))
    x = torch.ones(2, 3, requires_grad=True)
    debugger.start()
    PrecisionDebugger.save(x * 2, "activation")
    (x * 2).sum().backward()
    debugger.stop()
    debugger.step()
    d = records(tmp_path, name="debug.json")
    assert d["activation.0.debug"]["shape"] == [2, 3]


def test_seed_all_forms():
    for call in (lambda: seed_all(), lambda: seed_all(1234), lambda: seed_all(seed=1234, mode=False),
                 lambda: seed_all(1234, False, False)):
        call()
        a = torch.rand(3)
        seed_all(1234)
        assert torch.equal(a, torch.rand(3))
    seed_all(7, True)
    assert torch.are_deterministic_algorithms_enabled()
    seed_all(mode=False)
    assert not torch.are_deterministic_algorithms_enabled()
    seed_all(rm_dropout=True)
    x = torch.ones(1000)
    assert torch.equal(F.dropout(x, p=0.5, training=True), x)
    assert torch.equal(nn.Dropout(0.9).train()(x), x)
    for bad, msg in (({"seed": -1}, "between"), ({"seed": 1.5}, "integer"), ({"mode": 1}, "mode"),
                     ({"rm_dropout": "yes"}, "rm_dropout")):
        with pytest.raises(MsprobeError, match=msg):
            seed_all(**bad)


def test_start_with_token_range_records_only_those_forwards(tmp_path):
    """Inference, as the reference's vLLM example: start(model=model, token_range=[1, 2]) records the model's
    forwards number 1 and 2 (counted from 0 at start) and nothing before or after; stop() writes them."""
    model = Block()
    debugger = PrecisionDebugger(config_path=config(tmp_path))
    with torch.no_grad():
        for step in range(2):
            debugger.start(model=model, token_range=[1, 2])
            try:
                x = torch.ones(1, 4)
                for _ in range(5):
                    x = model(x) + 1
            finally:
                debugger.stop()
                debugger.step()
    for step in (0, 1):
        d = records(tmp_path, step)
        assert sorted(k for k in d if k.startswith("Module.fc.Linear.forward")) == [
            "Module.fc.Linear.forward.0", "Module.fc.Linear.forward.1"]
        assert sum(k.startswith("Torch.relu.") for k in d) == 2
        x = torch.ones(1, 4)
        with torch.no_grad():
            x = model(x) + 1
            assert d["Functional.linear.0.forward"]["input_args"][0]["Max"] == pytest.approx(x.max().item())
    for bad in ([2, 1], [0], (-1, 2), [0, 1.5], "0-3", [True, 2]):
        with pytest.raises(MsprobeError, match="token_range"):
            debugger.start(model=model, token_range=bad)


def test_token_range_needs_the_model(tmp_path):
    debugger = PrecisionDebugger(config_path=config(tmp_path, level="L1"))
    with pytest.raises(MsprobeError, match="token_range"):
        debugger.start(token_range=[0, 1])


def test_config_path_with_keyword_overrides(tmp_path):
    """The reference's examples: PrecisionDebugger(config_path="./config.json", dump_path="./dump_path") and
    task/level/step overriding the file."""
    cfg = config(tmp_path, dump_path=str(tmp_path / "elsewhere"), level="L0", step=[5])
    debugger = PrecisionDebugger(config_path=cfg, dump_path=str(tmp_path / "dump"), level="L1", step=[0],
                                 task="statistics")
    model = Block()
    debugger.start()
    try:
        model(torch.ones(2, 4)).sum().backward()
    finally:
        debugger.stop()
        debugger.step()
    assert steps(tmp_path) == ["step0"] and not (tmp_path / "elsewhere").exists()
    assert "Functional.linear.0.forward" in records(tmp_path)


def test_start_with_rank_id(tmp_path):
    """26.x start(model, rank_id=R): the dump goes to rank{R} and the config's rank list filters on R."""
    model = Block()
    debugger = PrecisionDebugger(config_path=config(tmp_path, level="L1", rank=[3]))
    for rank_id in (3, 3):
        debugger.start(model=model, rank_id=rank_id)
        try:
            model(torch.ones(1, 4)).sum().backward()
        finally:
            debugger.stop()
            debugger.step()
    assert sorted(os.listdir(tmp_path / "dump" / "step0")) == ["rank3"]
    with open(tmp_path / "dump" / "step1" / "rank3" / "dump.json", encoding="utf-8") as f:
        assert "Functional.linear.0.forward" in json.load(f)["data"]
    for bad in (-1, "3", True, 1.0):
        with pytest.raises(MsprobeError, match="rank_id"):
            debugger.start(model=model, rank_id=bad)


def test_rank_id_outside_the_rank_list_records_nothing(tmp_path):
    model = Block()
    debugger = PrecisionDebugger(config_path=config(tmp_path, level="L1", rank=[0]))
    debugger.start(model=model, rank_id=2)
    model(torch.ones(1, 4)).sum().backward()
    debugger.stop()
    debugger.step()
    assert not (tmp_path / "dump").exists() or not steps(tmp_path)
