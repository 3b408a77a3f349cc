"""The MindSpore test network and training loop (run as a script, in its own process).

The network, seed, inputs and loop are those of ../shared/fixtures/reference/mindspore_cpu_mix/tiny_ms.py
(the reference's generating script), so dumps can be compared with that fixture:
Conv2d -> ReLU -> Flatten -> Dense -> Block[Dense -> LayerNorm -> ReLU -> ops.relu -> mint.matmul*0.5 + x]
-> Dense, MSELoss, value_and_grad + SGD, 2 steps with start(net)/stop()/step() around each.

usage: ms_net.py OUT_DIR SIDE LEVEL TASK [--steps N] [--no-debugger] [--bf16] [--overflow] [--break-stats]
       [--extra-config JSON]
Prints one JSON line: {"losses": [...], "params": {name: sum}}.
"""
import argparse
import json
import os
import sys

import numpy as np
import mindspore as ms
from mindspore import Tensor, ops

from ms_model import Net, inputs, training_step_fn  # this script's folder is on sys.path

ap = argparse.ArgumentParser()
ap.add_argument("out")
ap.add_argument("side", choices=["golden", "target"])
ap.add_argument("level")
ap.add_argument("task")
ap.add_argument("--steps", type=int, default=2)
ap.add_argument("--no-debugger", action="store_true")
ap.add_argument("--bf16", action="store_true", help="also run a bf16 cast and a float16 op inside the loop")
ap.add_argument("--overflow", action="store_true", help="make one activation overflow in step 1")
ap.add_argument("--break-stats", action="store_true", help="make the tool's statistics raise (tool failure)")
ap.add_argument("--extra-config", default="{}")
a = ap.parse_args()

ms.set_context(mode=ms.PYNATIVE_MODE)
ms.set_device("CPU")
task = a.task
cfg = {"task": task, "dump_path": os.path.join(a.out, a.side), "rank": [], "step": [], "level": a.level,
       "async_dump": False}
cfg[task] = {} if task == "overflow_check" else {"scope": [], "list": [], "data_mode": ["all"]}
if task == "statistics":
    cfg[task]["summary_mode"] = "statistics"
cfg.update(json.loads(a.extra_config))
os.makedirs(a.out, exist_ok=True)
cfg_path = os.path.join(a.out, f"config_{a.side}_{a.level}_{task}.json")
with open(cfg_path, "w") as f:
    json.dump(cfg, f, indent=2)

ms.set_seed(1)


net = Net()
if a.side == "target":
    w = net.block.dense.weight
    w.set_data(w + Tensor(np.full(w.shape, 1e-3, np.float32)))

debugger = None
if not a.no_debugger:
    from msprobe.mindspore import PrecisionDebugger
    debugger = PrecisionDebugger(config_path=cfg_path)
    if a.break_stats:
        from msprobe.mindspore.dump import collector as _col

        def _boom(self, arr, rec):
            raise RuntimeError("statistics exploded (injected by the test)")
        _col.Collector._stats = _boom

gf, opt = training_step_fn(net)
x, y = inputs()
losses = []
for step in range(a.steps):
    if debugger is not None:
        debugger.start(net)
    loss, grads = gf(x, y)
    opt(grads)
    if a.bf16:
        b = x.to(ms.bfloat16)
        h = x.to(ms.float16) * 2
        _ = (b, h)
    if a.overflow and step == 1:
        big = ops.exp(x * 1000.0)      # inf in float32
        _ = big
    if debugger is not None:
        debugger.stop()
        debugger.step()
    losses.append(float(loss))
params = {p.name: float(p.asnumpy().astype(np.float64).sum()) for p in net.trainable_params()}
sys.stdout.write(json.dumps({"losses": losses, "params": params}) + "\n")
