"""The reference fixture's MindSpore network (../shared/fixtures/reference/mindspore_cpu_mix/tiny_ms.py),
shared by tests/mindspore/ms_net.py and benchmarks/ms_bench_worker.py.

Conv2d -> ReLU -> Flatten -> Dense -> Block[Dense -> LayerNorm -> ReLU -> ops.relu -> mint.matmul*0.5 + x]
-> Dense; MSELoss, value_and_grad + SGD; inputs from numpy RandomState(0).
"""
import numpy as np
import mindspore as ms
from mindspore import Tensor, mint, nn, ops


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


def inputs():
    """The fixture's (x, y)."""
    rng = np.random.RandomState(0)
    return (Tensor(rng.randn(2, 1, 4, 4).astype(np.float32)), Tensor(rng.randn(2, 2).astype(np.float32)))


def training_step_fn(net):
    """(value_and_grad function, optimizer) as in the fixture's script."""
    loss_fn = nn.MSELoss()
    opt = nn.SGD(net.trainable_params(), learning_rate=0.01)
    return ms.value_and_grad(lambda x, y: loss_fn(net(x), y), None, opt.parameters), opt
