"""GRAPH_MODE LeNet-like network (Conv2d, BatchNorm2d with its tuple output, MaxPool2d, Flatten, split/concat, Dense,
LayerNorm) trained 2 steps with Adam under PrecisionDebugger mix/statistics: python ms_graph_lenet.py OUT."""
import sys, json
import numpy as np
import mindspore as ms
from mindspore import nn, Tensor, ops
ms.set_context(mode=ms.GRAPH_MODE); ms.set_device("CPU"); ms.set_seed(0)
from msprobe.mindspore import PrecisionDebugger
class LeNet(nn.Cell):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 4, 3); self.bn = nn.BatchNorm2d(4); self.relu = nn.ReLU()
        self.pool = nn.MaxPool2d(2, 2); self.flat = nn.Flatten(); self.fc = nn.Dense(4 * 4 * 4, 10)
        self.ln = nn.LayerNorm((10,))
    def construct(self, x):
        x = self.pool(self.relu(self.bn(self.conv1(x))))
        a, b = ops.split(x, 2, axis=1)
        x = ops.concat((b, a), axis=1)
        return self.ln(self.fc(self.flat(x)))
net = LeNet()
dbg = PrecisionDebugger(dump_path=sys.argv[1], level="mix", task="statistics")
train = nn.TrainOneStepCell(nn.WithLossCell(net, nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")), nn.Adam(net.trainable_params(), 0.01))
x = Tensor(np.random.RandomState(0).randn(2, 1, 8, 8).astype(np.float32)); y = Tensor(np.array([1, 3], np.int32))
for s in range(2):
    dbg.start(net); l = train(x, y); dbg.stop(); dbg.step()
print(float(l.asnumpy()))
