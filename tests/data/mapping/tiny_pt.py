"""PyTorch twin of the MindSpore fixture network ../shared/fixtures/reference/mindspore_cpu_mix/tiny_ms.py.

Same layers, attribute names, shapes and inputs (numpy RandomState(0)); the weights differ (framework
initialisers).  usage: python tiny_pt.py DUMP_DIR [LEVEL] [TASK]   -> DUMP_DIR/step0/rank/...
"""
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from msprobe.pytorch import PrecisionDebugger


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.dense = nn.Linear(16, 16)
        self.ln = nn.LayerNorm((16,))
        self.act = nn.ReLU()

    def forward(self, x):
        y = self.act(self.ln(self.dense(x)))
        y = F.relu(y)
        y = torch.matmul(y, self.dense.weight) * 0.5
        return y + x


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 4, 3, padding="same", bias=False)  # MindSpore's Conv2d has no bias by default
        self.relu = nn.ReLU()
        self.flatten = nn.Flatten()
        self.fc_in = nn.Linear(64, 16)
        self.block = Block()
        self.head = nn.Linear(16, 2)

    def forward(self, x):
        x = self.fc_in(self.flatten(self.relu(self.conv(x))))
        return self.head(self.block(x))


def main():
    out = sys.argv[1]
    level = sys.argv[2] if len(sys.argv) > 2 else "mix"
    task = sys.argv[3] if len(sys.argv) > 3 else "statistics"
    torch.manual_seed(1)
    net = Net()
    rng = np.random.RandomState(0)
    x = torch.from_numpy(rng.randn(2, 1, 4, 4).astype(np.float32))
    y = torch.from_numpy(rng.randn(2, 2).astype(np.float32))
    opt = torch.optim.SGD(net.parameters(), lr=0.01)
    debugger = PrecisionDebugger(task=task, level=level, dump_path=out)
    debugger.start(net)
    loss = F.mse_loss(net(x), y)
    loss.backward()
    opt.step()
    debugger.stop()
    debugger.step()


if __name__ == "__main__":
    main()
