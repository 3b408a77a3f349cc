"""A small MindSpore PyNative network of mint / ops / Tensor APIs, dumped at level L1 by our PrecisionDebugger (one
forward and backward step on the CPU), for the run_ut tests (tests/mindspore/test_ms_run_ut.py).

usage: ms_acc_net.py DUMP_DIR TASK      (TASK: statistics or tensor)
"""
import json
import os
import sys

import numpy as np
import mindspore as ms
from mindspore import Tensor, mint, nn, ops

ms.set_context(mode=ms.PYNATIVE_MODE)
ms.set_device("CPU")


class Net(nn.Cell):
    def __init__(self):
        super().__init__()
        rng = np.random.RandomState(7)
        self.w1 = ms.Parameter(Tensor(rng.randn(16, 32).astype(np.float32) * 0.3), name="w1")
        self.w2 = ms.Parameter(Tensor(rng.randn(32, 8).astype(np.float32) * 0.3), name="w2")

    def construct(self, x):
        h = mint.matmul(x, self.w1)                         # Mint.matmul.0 (ULP standard)
        h = mint.nn.functional.relu(h)                      # MintFunctional.relu.0 (binary)
        h = ops.tanh(h * 0.5)                               # Tensor.__mul__.0 (absolute), Functional.tanh.0
        y = mint.matmul(h, self.w2)                         # Mint.matmul.1
        p = mint.nn.functional.softmax(y, dim=-1)           # MintFunctional.softmax.0 (benchmark)
        s = mint.sum(p * y, dim=-1)                         # Tensor.__mul__.1, Mint.sum.0
        return mint.exp(s).mean() + ops.sigmoid(y).sum()    # Mint.exp.0, Tensor.mean.0, Functional.sigmoid.0 ...


def main():
    dump_dir, task = sys.argv[1], sys.argv[2]
    os.makedirs(dump_dir, exist_ok=True)
    cfg = {"task": task, "dump_path": dump_dir, "rank": [], "step": [], "level": "L1", "async_dump": False,
           task: {"scope": [], "list": [], "data_mode": ["all"]}}
    cfg_path = os.path.join(dump_dir, "config.json")
    with open(cfg_path, "w") as fh:
        json.dump(cfg, fh)
    from msprobe.mindspore import PrecisionDebugger

    net = Net()
    x = Tensor(np.random.RandomState(0).randn(4, 16).astype(np.float32))
    grad_fn = ms.value_and_grad(net, None, net.trainable_params())
    dbg = PrecisionDebugger(config_path=cfg_path)
    dbg.start(net)
    loss, _ = grad_fn(x)
    dbg.stop()
    dbg.step()
    print(json.dumps({"loss": float(loss)}))


if __name__ == "__main__":
    main()
