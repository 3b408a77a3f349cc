"""One timing run for ms_dump_bench.py (run by it, in its own process and interpreter).

usage: ms_bench_worker.py IMPL LEVEL STEPS OUT      IMPL: none | ours | ref (mindstudio-probe, with the CPU norm shim)
Prints one JSON line: {"times": [seconds per step, ...]}. A step is start(net), forward+backward
(value_and_grad), SGD update, stop(), step(); the network is the test network of tests/mindspore/ms_net.py.
"""
import json
import os
import sys

import mindspore as ms
from mindspore import mint, ops

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "mindspore"))
from ms_model import Net, inputs, training_step_fn  # noqa: E402  the test network
from harness import time_steps  # noqa: E402  benchmarks/harness.py, next to this file

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


net = Net()
gf, opt = training_step_fn(net)
x, y = inputs()


def step():
    if debugger is not None:
        debugger.start(net)
    loss, grads = gf(x, y)
    opt(grads)
    float(loss)
    if debugger is not None:
        debugger.stop()
        debugger.step()


times = [t / 1000.0 for t in time_steps(step, steps)[0]]  # seconds
sys.stdout.write(json.dumps({"times": times}) + "\n")
