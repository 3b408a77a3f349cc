"""One timing run for ms_dump_bench.py (run by it, in its own process and interpreter).

usage: ms_bench_worker.py IMPL LEVEL STEPS OUT      IMPL: none | ours | ref (mindstudio-probe, with the CPU norm shim)
Prints one JSON line: {"times": [seconds per step, ...]}. A step is start(net), forward+backward
(value_and_grad), SGD update, stop(), step(); the network is the test network of tests/mindspore/ms_net.py.
"""
import json
import os
import sys
import time

import numpy as np
import mindspore as ms
from mindspore import Tensor, mint, nn, ops

impl, level, steps, out = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
ms.set_context(mode=ms.PYNATIVE_MODE)
ms.set_device("CPU")
debugger = None
if impl != "none":
    os.makedirs(out, exist_ok=True)
    cfg = {"task": "statistics", "dump_path": os.path.join(out, "dump"), "rank": [], "step": [], "level": level,
           "async_dump": False, "statistics": {"scope": [], "list": [], "data_mode": ["all"],
                                               "summary_mode": "statistics"}}
    cfg_path = os.path.join(out, "config.json")
    with open(cfg_path, "w") as f:
        json.dump(cfg, f)
    if impl == "ref":
        mint.norm = lambda t, *a, **k: ops.norm(t, *a, **k)   # CPU has no LinalgVectorNorm kernel (frameworks.md)
    from msprobe.mindspore import PrecisionDebugger
    debugger = PrecisionDebugger(config_path=cfg_path)
ms.set_seed(1)


class Block(nn.Cell):
    def __init__(s):
        super().__init__()
        s.dense = nn.Dense(16, 16)
        s.ln = nn.LayerNorm((16,))
        s.act = nn.ReLU()

    def construct(s, x):
        y = s.act(s.ln(s.dense(x)))
        y = ops.relu(y)
        y = mint.matmul(y, s.dense.weight) * 0.5
        return y + x


class Net(nn.Cell):
    def __init__(s):
        super().__init__()
        s.conv = nn.Conv2d(1, 4, 3, pad_mode="same")
        s.relu = nn.ReLU()
        s.flatten = nn.Flatten()
        s.fc_in = nn.Dense(64, 16)
        s.block = Block()
        s.head = nn.Dense(16, 2)

    def construct(s, x):
        x = s.fc_in(s.flatten(s.relu(s.conv(x))))
        return s.head(s.block(x))


net = Net()
loss_fn = nn.MSELoss()
opt = nn.SGD(net.trainable_params(), learning_rate=0.01)
gf = ms.value_and_grad(lambda x, y: loss_fn(net(x), y), None, opt.parameters)
rng = np.random.RandomState(0)
x = Tensor(rng.randn(2, 1, 4, 4).astype(np.float32))
y = Tensor(rng.randn(2, 2).astype(np.float32))
times = []
for i in range(steps):
    t0 = time.perf_counter()
    if debugger is not None:
        debugger.start(net)
    loss, grads = gf(x, y)
    opt(grads)
    float(loss)
    if debugger is not None:
        debugger.stop()
        debugger.step()
    times.append(time.perf_counter() - t0)
sys.stdout.write(json.dumps({"times": times}) + "\n")
