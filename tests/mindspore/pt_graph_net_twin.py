"""PyTorch twin of the mindspore_ir fixture network (graph_net.py: fc Dense(4, 8), block(dense Dense(8, 8), ReLU) + x,
head Dense(8, 2)) with the fixture's own weights and input (its Parameter.*.npy files), dumped by msprobe's PyTorch
PrecisionDebugger at mix level: python pt_graph_net_twin.py <fixture iteration dir> <dump_path>."""
import glob, sys
import numpy as np
import torch
from torch import nn
from msprobe.pytorch import PrecisionDebugger
src, out = sys.argv[1], sys.argv[2]
def param(name):
    [f] = glob.glob(f"{src}/Parameter.{name}.*.npy")
    return torch.from_numpy(np.load(f).copy())
class Block(nn.Module):
    def __init__(self):
        super().__init__(); self.dense = nn.Linear(8, 8); self.act = nn.ReLU()
    def forward(self, x):
        return self.act(self.dense(x)) + x
class Net(nn.Module):
    def __init__(self):
        super().__init__(); self.fc = nn.Linear(4, 8); self.block = Block(); self.head = nn.Linear(8, 2)
    def forward(self, x):
        return self.head(self.block(self.fc(x)))
net = Net()
with torch.no_grad():
    for mod, key in ((net.fc, "fc"), (net.block.dense, "block_dense"), (net.head, "head")):
        mod.weight.copy_(param(f"{key}_weight")); mod.bias.copy_(param(f"{key}_bias"))
x = param("x")
dbg = PrecisionDebugger(dump_path=out, level="mix", task="statistics")
dbg.start(net)
with torch.no_grad():
    y = net(x)
dbg.stop()
print(y.numpy().tolist())
