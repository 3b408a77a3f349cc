"""A Cell with a custom ``bprop``: MindSpore runs its forward pre-hook but not its forward hook. Its forward
record used to be missing and every later record was nested inside it in construct.json; msprobe now closes
its frame when its construct returns (msprobe/mindspore/dump/hooks.py). Runs in .venv-ms."""

import glob
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from ms_skip import SKIP_REASON  # noqa: E402 (this folder is on sys.path)

if SKIP_REASON is not None:      # (not importorskip: tests/mindspore itself imports as a namespace "mindspore")
    pytest.skip(SKIP_REASON, allow_module_level=True)

import mindspore as ms  # noqa: E402
from mindspore import nn, ops  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class Gelu15(nn.Cell):
    def construct(self, x):
        return ops.gelu(x)

    def bprop(self, x, out, dout):
        return (dout * 1.5,)


class Net(nn.Cell):
    def __init__(self):
        super().__init__()
        self.a = nn.Dense(4, 4)
        self.g = Gelu15()
        self.b = nn.Dense(4, 4)

    def construct(self, x):
        return self.b(self.g(self.a(x)))


def _net():
    ms.set_seed(0)
    return Net()


def _grads(net, x):
    return [g.asnumpy() for g in ms.grad(lambda x: net(x).sum(), grad_position=None,
                                         weights=net.trainable_params())(x)]


def _run(out_dir, level, jit):
    """One dump in this process (PrecisionDebugger is one per process): writes result.json into out_dir."""
    from msprobe.mindspore import PrecisionDebugger

    ms.set_context(mode=ms.PYNATIVE_MODE)
    cfg = os.path.join(out_dir, "c.json")
    with open(cfg, "w") as fh:
        json.dump({"task": "statistics", "dump_path": os.path.join(out_dir, "dump"), "level": level,
                   "rank": [], "step": []}, fh)
    x = ms.Tensor(np.linspace(-1, 1, 8, dtype=np.float32).reshape(2, 4))
    clean = _grads(_net(), x)
    net = _net()
    dbg = PrecisionDebugger(cfg)
    dbg.start(net)
    res = {}
    if jit:
        def forward(x):
            return net(x)

        out = ms.jit(forward)(x).asnumpy()
        res["jit_out_finite"] = bool(out.shape == (2, 4) and np.isfinite(out).all())
    else:
        grads = _grads(net, x)
        res["grads_equal"] = all(np.array_equal(a, b) for a, b in zip(grads, clean)) and len(grads) == len(clean)
    dbg.stop()
    dbg.step()
    gelu = ops.gelu(net.a(x)).asnumpy()
    res.update(gelu_max=float(gelu.max()), gelu_min=float(gelu.min()))
    with open(os.path.join(out_dir, "result.json"), "w") as fh:
        json.dump(res, fh)


def _dump(tmp_path, level, jit=False):
    tmp_path.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.run([sys.executable, __file__, str(tmp_path), level, "1" if jit else "0"], env=env,
                          cwd=str(tmp_path), capture_output=True, text=True, timeout=300)  # (MindSpore's own files)
    assert proc.returncode == 0, proc.stderr[-3000:]
    res = json.load(open(tmp_path / "result.json"))
    run = glob.glob(str(tmp_path / "dump" / "**" / "dump.json"), recursive=True)
    assert len(run) == 1, run
    data = json.load(open(run[0]))["data"]
    construct = json.load(open(os.path.join(os.path.dirname(run[0]), "construct.json")))
    return res, data, construct


def test_forward_record_and_nesting(tmp_path):
    res, data, construct = _dump(tmp_path, "mix")
    out = data["Cell.g.Gelu15.forward.0"]["output"][0]
    assert out["Max"] == pytest.approx(res["gelu_max"], rel=1e-6)
    assert out["Min"] == pytest.approx(res["gelu_min"], rel=1e-6)
    assert construct["Cell.g.Gelu15.forward.0"] is None
    assert construct["Functional.gelu.0.forward"] == "Cell.g.Gelu15.forward.0"
    # what comes after it is not nested inside it any more
    assert construct["Cell.b.Dense.forward.0"] is None
    assert construct["Tensor.sum.0.forward"] is None
    assert "Cell.g.Gelu15.backward.0" in data
    # training unchanged: the custom bprop still scales the gradient (bit-identical to a run without msprobe)
    assert res["grads_equal"]


def test_l0_and_a_jit_region(tmp_path):
    _, data, construct = _dump(tmp_path / "l0", "L0")
    assert "Cell.g.Gelu15.forward.0" in data and construct["Cell.b.Dense.forward.0"] is None
    # inside a jit function the wrapper is taken off while the graph compiles and runs
    res, _, _ = _dump(tmp_path / "jit", "mix", jit=True)
    assert res["jit_out_finite"]


if __name__ == "__main__":
    _run(sys.argv[1], sys.argv[2], sys.argv[3] == "1")
