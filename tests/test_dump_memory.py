"""The dump keeps no tensor of the training alive past its use (no reference cycles through the hooks).

Hooks registered on tensors and autograd nodes hold closures; a closure that reaches back to the tensor the
hook sits on makes a cycle that only the cyclic garbage collector frees (and the dump raises its threshold
while dumping), so activations and gradients would stay in memory past their use: more memory, and on big
models page faults every step when the allocator gives the memory back late.
"""

from __future__ import annotations

import gc
import json
import weakref

import pytest

torch = pytest.importorskip("torch")
import torch.nn as nn  # noqa: E402

from msprobe.pytorch import PrecisionDebugger  # noqa: E402


@pytest.fixture(autouse=True)
def _reset_debugger():
    PrecisionDebugger._reset_for_tests()
    yield
    PrecisionDebugger._reset_for_tests()


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(8, 16)
        self.fc2 = nn.Linear(16, 8)

    def forward(self, x):
        return x + self.fc2(torch.relu(self.fc1(x)))


@pytest.mark.parametrize("level", ["mix", "L1", "L0"])
def test_module_outputs_freed_without_garbage_collection(tmp_path, level):
    torch.manual_seed(0)
    model = nn.Sequential(Block(), Block())
    cfg = {"task": "statistics", "dump_path": str(tmp_path / "dump"), "rank": [], "step": [], "level": level,
           "async_dump": False,
           "statistics": {"scope": [], "list": [], "data_mode": ["all"], "summary_mode": "statistics"}}
    (tmp_path / "c.json").write_text(json.dumps(cfg))
    dbg = PrecisionDebugger(config_path=str(tmp_path / "c.json"))
    refs = []

    def keep_ref(_mod, _inp, out):
        refs.append(weakref.ref(out))

    handles = [m.register_forward_hook(keep_ref) for m in model.modules() if m is not model]
    gc.collect()
    gc.disable()
    try:
        dbg.start(model)
        loss = model(torch.randn(4, 8)).sum()
        loss.backward()
        dbg.stop()
        dbg.step()
        del loss
        alive = [r() for r in refs if r() is not None]
        assert refs and not alive, f"{len(alive)} module outputs kept alive by reference cycles"
    finally:
        gc.enable()
        for h in handles:
            h.remove()
