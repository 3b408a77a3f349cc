"""@mindspore.jit functions called in PyNative (directly, from a Cell, under ms.grad, one calling a Cell), 2 steps with PrecisionDebugger
(python ms_jit_fn.py OUT LEVEL); prints the outputs as one JSON line."""
import sys, json
import numpy as np
import mindspore as ms
from mindspore import ops, Tensor, nn
ms.set_context(mode=ms.PYNATIVE_MODE)
from msprobe.mindspore import PrecisionDebugger

@ms.jit
def f(x, y):
    return ops.relu(x) * 2 + y

class M(nn.Cell):
    def __init__(self):
        super().__init__(); self.d = nn.Dense(3, 3)
    def construct(self, x):
        return f(self.d(x), x)

ms.set_seed(0)
net = M()


@ms.jit
def g(x):          # a hooked Cell inside a jit function: msprobe's hooks are taken off while it compiles and runs
    return net(x) * 2

x = Tensor(np.arange(6, dtype=np.float32).reshape(2, 3) - 2)


class _NoDebugger:
    def start(self, model=None):
        pass

    stop = step = start


if "--no-debugger" in sys.argv:
    dbg = _NoDebugger()
else:
    dbg = PrecisionDebugger(dump_path=sys.argv[1], level=sys.argv[2], task="statistics")
for _ in range(2):
    dbg.start(net)
    out = f(x, x)
    out2 = net(x)
    out3 = g(x)
    grad = ms.grad(lambda a: f(a, a).sum())(x)
    dbg.stop(); dbg.step()
print(json.dumps({"out": out.asnumpy().tolist(), "grad": grad.asnumpy().tolist(), "out2": out2.asnumpy().tolist(),
                  "out3": out3.asnumpy().tolist()}))
