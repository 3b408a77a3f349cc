"""The network of ../shared/fixtures/reference/mindspore_ir/graph_net.py (same layers, seed, data), run with
msprobe's PrecisionDebugger in GRAPH_MODE (MindSpore's kernel dump, converted at step()) or PyNative.

    python ms_graph_net.py OUT graph|pynative LEVEL TASK [--infer] [--steps N] [--late] [--jit] [--no-debugger] [--start-net]

--no-debugger: the same run without msprobe.
--no-step: (with --infer) step() is never called; the dump is converted when the process ends.
--select-step1: the config's step is [1].
--start-net: debugger.start(net) instead of start(train) (Cell names relative to Net).
--late: the network runs once before PrecisionDebugger is created (MindSpore has compiled without the dump).
--jit: PyNative mode with Net.construct under @mindspore.jit (Jit.* records).
Prints one JSON line: {"losses": [...], "out": [...]}.
"""
import json
import sys

import numpy as np
import mindspore as ms
from mindspore import nn, Tensor

out_dir, mode, level, task = sys.argv[1:5]
flags = sys.argv[5:]
steps = int(flags[flags.index("--steps") + 1]) if "--steps" in flags else 2
ms.set_context(mode=ms.GRAPH_MODE if mode == "graph" else ms.PYNATIVE_MODE)
ms.set_device("CPU")
ms.set_seed(0)


class Block(nn.Cell):
    def __init__(self):
        super().__init__()
        self.dense = nn.Dense(8, 8)
        self.act = nn.ReLU()

    def construct(self, x):
        return self.act(self.dense(x)) + x


class Net(nn.Cell):
    def __init__(self):
        super().__init__()
        self.fc = nn.Dense(4, 8)
        self.block = Block()
        self.head = nn.Dense(8, 2)

    def construct(self, x):
        return self.head(self.block(self.fc(x)))


if "--jit" in flags:
    Net.construct = ms.jit(Net.construct)

net = Net()
x = Tensor(np.random.RandomState(0).randn(2, 4).astype(np.float32))
y = Tensor(np.zeros((2, 2), np.float32))
if "--late" in flags:
    net(x)



class _NoDebugger:
    def start(self, model=None):
        pass

    stop = step = start


if "--no-debugger" in flags:
    debugger = _NoDebugger()
else:
    from msprobe.mindspore import PrecisionDebugger  # noqa: E402
    debugger = PrecisionDebugger(dump_path=out_dir, level=level, task=task,
                                 step=[1] if "--select-step1" in flags else None)
result = {"losses": [], "out": []}
if "--infer" in flags:
    for _ in range(steps):
        debugger.start(net)
        result["out"].append(net(x).asnumpy().tolist())
        debugger.stop()
        if "--no-step" not in flags:
            debugger.step()
else:
    train = nn.TrainOneStepCell(nn.WithLossCell(net, nn.MSELoss()), nn.SGD(net.trainable_params(), 0.01))
    for _ in range(steps):
        debugger.start(net if "--start-net" in flags else train)
        result["losses"].append(float(train(x, y).asnumpy()))
        debugger.stop()
        debugger.step()
print(json.dumps(result))
