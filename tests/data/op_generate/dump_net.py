"""Dump one training step of a small network that calls the twelve APIs op_generate is tested on.

usage: python dump_net.py DUMP_DIR TASK     (TASK: statistics or tensor; level L1)
"""
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

from msprobe.pytorch import PrecisionDebugger, seed_all


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(20, 8)
        self.conv = nn.Conv2d(1, 2, 3, padding=1)
        self.norm = nn.LayerNorm(8)
        self.fc = nn.Linear(16, 5)
        self.proj = nn.Parameter(torch.randn(8, 8) * 0.3)

    def forward(self, tokens, target):
        h = self.emb(tokens)                                   # Functional.embedding
        c = self.conv(h.unsqueeze(1)).mean(dim=1)              # Functional.conv2d, Tensor.mean
        h = h + c                                              # Tensor.__add__
        h = self.norm(h)                                       # Functional.layer_norm
        h = torch.matmul(h, self.proj)                         # Torch.matmul
        h = F.gelu(h)                                          # Functional.gelu
        h = F.dropout(h, p=0.0, training=True)                 # Functional.dropout
        a = F.softmax(h, dim=-1)                               # Functional.softmax
        flat = a.reshape(a.shape[0], -1)
        logits = self.fc(flat)                                 # Functional.linear
        loss = F.cross_entropy(logits, target)                 # Functional.cross_entropy
        reg = torch.sum(a * a) * 1e-3 + torch.mean(h)  * 1e-3  # Torch.sum, Torch.mean
        return loss + reg


def main():
    dump_dir, task = sys.argv[1], sys.argv[2]
    seed_all(7)
    net = Net()
    tokens = torch.randint(0, 20, (4, 2))
    target = torch.tensor([1, 0, 4, 2])
    dbg = PrecisionDebugger(task=task, level="L1", dump_path=dump_dir)
    dbg.start()
    loss = net(tokens, target)
    loss.backward()
    dbg.stop()
    dbg.step()


if __name__ == "__main__":
    main()
