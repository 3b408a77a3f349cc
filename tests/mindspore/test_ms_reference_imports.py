"""The reference's MindSpore import paths and call forms, as integrations use them (issue 15 item 5).

``msprobe.mindspore.debugger.precision_debugger`` (8.x), ``msprobe.mindspore.dump.debugger.precision_debugger``
(26.x) and ``msprobe.mindspore.common.utils`` give the objects of ``msprobe.mindspore``; ``seed_all`` in its call
forms; ``PrecisionDebugger(config_path=...)`` and keyword construction with ``start(model=[cells])`` inside
``try/finally: stop(); step()`` write the step's records; ``start(model=net, token_range=[a, b], rank_id=R)``
records only those forwards, as rank R. Runs in .venv-ms (skips elsewhere).
"""
import importlib.metadata
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]

try:
    importlib.metadata.distribution("mindspore")
    SKIP = None
except importlib.metadata.PackageNotFoundError:
    SKIP = f"mindspore is not installed in this interpreter ({sys.executable}); run `make ms-venv`, then `make test-ms`"
pytestmark = pytest.mark.skipif(SKIP is not None, reason=SKIP or "")

SCRIPT = r'''
import json, os, sys
sys.path.insert(0, os.environ["MS_TESTS"])
import mindspore as ms
ms.set_context(mode=ms.PYNATIVE_MODE, device_target="CPU")
import msprobe.mindspore as top
from msprobe.mindspore.debugger.precision_debugger import PrecisionDebugger
from msprobe.mindspore.dump.debugger.precision_debugger import PrecisionDebugger as PD26
from msprobe.mindspore.common.utils import seed_all
assert PrecisionDebugger is top.PrecisionDebugger is PD26 and seed_all is top.seed_all
seed_all()
seed_all(1234, True)
seed_all(seed=1234, mode=False, rm_dropout=False)
from ms_model import Net, inputs, training_step_fn
out, form = sys.argv[1], sys.argv[2]
if form == "config_path":
    cfg = os.path.join(out, "config.json")
    with open(cfg, "w") as f:
        json.dump({"task": "statistics", "dump_path": os.path.join(out, "dump"), "level": "mix"}, f)
    debugger = PrecisionDebugger(config_path=cfg)
elif form == "tokens":
    debugger = PrecisionDebugger(task="statistics", dump_path=os.path.join(out, "dump"), level="mix")
    net = Net()
    x, _ = inputs()
    for _ in range(2):
        debugger.start(model=net, token_range=[1, 2], rank_id=5)
        try:
            for _ in range(4):
                net(x)
        finally:
            debugger.stop()
            debugger.step()
    print("OK")
    sys.exit(0)
else:
    debugger = PrecisionDebugger(task="statistics", dump_path=os.path.join(out, "dump"), level="L1", step=[1])
assert PD26(config_path=None) is debugger
net = Net()
grad_fn, opt = training_step_fn(net)
x, y = inputs()
for _ in range(2):
    debugger.start(model=[net])
    try:
        loss, grads = grad_fn(x, y)
        opt(grads)
    finally:
        debugger.stop()
        debugger.step()
print("OK")
'''


def _run(tmp_path, form):
    env = dict(os.environ, PYTHONPATH=str(ROOT), MS_TESTS=str(HERE), GLOG_v="3")
    res = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path), form], capture_output=True, text=True,
                         timeout=600, env=env, cwd=str(ROOT))
    assert res.returncode == 0 and "OK" in res.stdout, res.stdout[-2000:] + res.stderr[-3000:]
    root = tmp_path / "dump"
    return sorted(p for p in os.listdir(root) if p.startswith("step")), root


def _data(root, step):
    rank = [p for p in os.listdir(root / step)][0]
    with open(root / step / rank / "dump.json") as f:
        return json.load(f)["data"]


def test_config_path_form_list_of_cells(tmp_path):
    steps, root = _run(tmp_path, "config_path")
    assert steps == ["step0", "step1"]
    names = list(_data(root, "step1"))
    assert any(n.startswith("Cell.0.") for n in names), names[:10]     # the list index prefixes the cells
    assert any(n.startswith(("Functional.", "Mint.", "Tensor.", "Primitive.")) for n in names)


def test_keyword_form_step_filter(tmp_path):
    steps, root = _run(tmp_path, "keywords")
    assert steps == ["step1"]
    assert not any(n.startswith("Cell.") for n in _data(root, "step1"))


def test_token_range_records_only_those_forwards(tmp_path):
    """start(model=net, token_range=[1, 2]) records the network's forwards number 1 and 2 of each step."""
    steps, root = _run(tmp_path, "tokens")
    assert steps == ["step0", "step1"]
    for step in steps:
        assert os.listdir(root / step) == ["rank5"]            # 26.x start(rank_id=5)
        names = list(_data(root, step))
        assert sorted(n for n in names if n.startswith("Cell.head.Dense.forward")) == [
            "Cell.head.Dense.forward.0", "Cell.head.Dense.forward.1"], names
