"""Dump one training step of a small transformer block (level L1) for the accuracy pre-check tests.

usage: python dump_transformer.py DUMP_DIR TASK     (TASK: statistics or tensor)
"""
import math
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

from msprobe.pytorch import PrecisionDebugger, seed_all


class Block(nn.Module):
    def __init__(self, vocab=32, d=16, heads=2):
        super().__init__()
        self.heads = heads
        self.emb = nn.Embedding(vocab, d)
        self.qkv = nn.Linear(d, 3 * d)
        self.out = nn.Linear(d, d)
        self.ln1 = nn.LayerNorm(d)
        self.ln2 = nn.LayerNorm(d)
        self.fc1 = nn.Linear(d, 2 * d)
        self.fc2 = nn.Linear(2 * d, d)
        self.head = nn.Linear(d, vocab)

    def forward(self, tokens, target):
        b, t = tokens.shape
        x = self.emb(tokens)                                           # Functional.embedding
        h = self.ln1(x)                                                # Functional.layer_norm
        q, k, v = self.qkv(h).chunk(3, dim=-1)                         # Functional.linear, Tensor.chunk
        q = q.reshape(b, t, self.heads, -1).transpose(1, 2)            # Tensor.reshape, Tensor.transpose
        k = k.reshape(b, t, self.heads, -1).transpose(1, 2)
        v = v.reshape(b, t, self.heads, -1).transpose(1, 2)
        att = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(q.shape[-1])   # Torch.matmul, Tensor.__truediv__
        mask = torch.triu(torch.ones(t, t, dtype=torch.bool), diagonal=1)    # Torch.ones, Torch.triu
        att = att.masked_fill(mask, float("-inf"))                     # Tensor.masked_fill
        att = F.softmax(att, dim=-1)                                   # Functional.softmax
        att = F.dropout(att, p=0.1, training=True)                     # Functional.dropout (random: skipped)
        y = torch.matmul(att, v).transpose(1, 2).reshape(b, t, -1)
        x = torch.add(x, self.out(y))                                  # Torch.add (residual)
        h = self.ln2(x)
        x = torch.add(x, self.fc2(F.gelu(self.fc1(h))))                # Functional.gelu
        logits = self.head(x)
        return F.cross_entropy(logits.reshape(b * t, -1), target.reshape(-1))  # Functional.cross_entropy


def main():
    dump_dir, task = sys.argv[1], sys.argv[2]
    seed_all(11)
    torch.set_num_threads(1)
    net = Block()
    tokens = torch.randint(0, 32, (2, 6))
    target = torch.randint(0, 32, (2, 6))
    dbg = PrecisionDebugger(task=task, level="L1", dump_path=dump_dir)
    dbg.start()
    loss = net(tokens, target)
    loss.backward()
    dbg.stop()
    dbg.step()


if __name__ == "__main__":
    main()
