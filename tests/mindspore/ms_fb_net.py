"""A tiny MindSpore PyNative network for the free_benchmark tests (run as a script in .venv-ms).

Dense (float32) -> float16 -> ops.tanh -> *3 -> ops.sigmoid -> float32 -> Dense -> MSE; value_and_grad + SGD.
Kinds: ``fragile``: ops.tanh and ops.sigmoid are replaced (before the debugger wraps them) by versions that
compute, in their input's dtype, an extra term that is chaotic in the input's last bits (the two ops
free_benchmark must list); ``lossy``: ops.tanh computes ``tanh((x + 512) - 512)`` in its input's dtype (float16
keeps multiples of 0.5 only); ``clean``.  ``fp32``: no float16 section.

usage: ms_fb_net.py OUT_DIR RUNS_JSON   (RUNS_JSON: [{"kind": ..., "fp32": false, "steps": 2, "config": {...}|null}])
Prints one JSON line per run: {"losses": [...], "grads": [sums], "rows": [[csv row], ...]}.
"""
import csv
import glob
import json
import os
import sys

import numpy as np
import mindspore as ms
from mindspore import Tensor, nn, ops

ms.set_context(mode=ms.PYNATIVE_MODE)
ms.set_device("CPU")
_tanh, _sigmoid = ops.tanh, ops.sigmoid
KINDS = {"clean": (_tanh, _sigmoid),
         "fragile": (lambda x: _tanh(x) * (1 + 0.02 * ops.sin(x * 1000)),
                     lambda x: _sigmoid(x) * (1 + 0.02 * ops.cos(x * 1000))),
         "lossy": (lambda x: _tanh((x + 512) - 512), _sigmoid)}


class Net(nn.Cell):
    def __init__(self, fp32):
        super().__init__()
        self.fp32 = fp32
        self.d1 = nn.Dense(16, 32)
        self.d2 = nn.Dense(32, 4)

    def construct(self, x):
        h = self.d1(x)
        if not self.fp32:
            h = h.astype(ms.float16)
        h = ops.sigmoid(ops.tanh(h) * 3)
        return self.d2(h.astype(ms.float32))


def run(out, i, kind="clean", fp32=False, steps=2, config=None):
    ops.tanh, ops.sigmoid = KINDS[kind]
    ms.set_seed(3)
    rng = np.random.default_rng(0)
    x = Tensor(rng.standard_normal((8, 16)).astype(np.float32) * 3)
    y = Tensor(rng.standard_normal((8, 4)).astype(np.float32))
    net = Net(fp32)
    opt = nn.SGD(net.trainable_params(), learning_rate=0.01)
    loss_fn = nn.MSELoss()
    grad_fn = ms.value_and_grad(lambda a, b: loss_fn(net(a), b), None, opt.parameters)
    dbg = dump = None
    if config is not None:
        from msprobe.mindspore import PrecisionDebugger
        dump = os.path.join(out, f"dump{i}")
        path = os.path.join(out, f"config{i}.json")
        with open(path, "w") as f:
            json.dump(dict(config, dump_path=dump), f)
        dbg = PrecisionDebugger(config_path=path)
    losses, grads = [], []
    for _ in range(steps):
        if dbg:
            dbg.start(net)
        loss, g = grad_fn(x, y)
        if dbg:
            dbg.stop()
        opt(g)
        if dbg:
            dbg.step()
        losses.append(float(loss.asnumpy()))
        grads = [float(t.asnumpy().astype(np.float64).sum()) for t in g]
    rows = []
    if dbg:
        type(dbg)._reset_for_tests()
        for p in sorted(glob.glob(os.path.join(dump, "step*", "rank*", "free_benchmark.csv"))):
            with open(p, newline="") as fh:
                rows.extend(list(csv.reader(fh))[1:])
    ops.tanh, ops.sigmoid = _tanh, _sigmoid
    return {"losses": losses, "grads": grads, "rows": rows}


if __name__ == "__main__":
    os.makedirs(sys.argv[1], exist_ok=True)
    for k, spec in enumerate(json.loads(sys.argv[2])):
        print(json.dumps(run(sys.argv[1], k, **spec)), flush=True)
