"""A tiny 2-block transformer dumped with our PrecisionDebugger, for the verdict tests (test_verdict.py).

Run as a script, in a process of its own (the debugger is a process-wide singleton; it is reset between
the dumps of one run):
    python tests/verdict_model.py ROOT VARIANT:MODE [VARIANT:MODE ...]
VARIANT: golden (fp32), target (bf16 autocast), attn_bug (bf16, block 1 attention scores x1.5 before
softmax), eps_bug (bf16, block 1 LayerNorm eps=0.1), grad_bug (bf16, the gradient reaching block 1's attention
output scaled by 1.5 in backward, by a tensor hook), mul_bug (bf16, block 1's MLP activation x1.02, a
2% error just above bf16 noise), pg_bug (bf16, block 0 fc1 weight gradient x1.5 by a parameter hook).
MODE: statistics, md5 or tensor.
Each dump lands in ROOT/VARIANT-MODE/step0/rank/ (level mix).
"""

from __future__ import annotations

import math
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

D, HEADS, T, B = 32, 4, 8, 2


class Block(nn.Module):
    def __init__(self, attn_scale: float = 1.0, ln_eps: float = 1e-5, grad_scale: float = 1.0, act_scale: float = 1.0):
        super().__init__()
        self.ln1 = nn.LayerNorm(D, eps=ln_eps)
        self.qkv = nn.Linear(D, 3 * D)
        self.proj = nn.Linear(D, D)
        self.ln2 = nn.LayerNorm(D)
        self.fc1 = nn.Linear(D, 4 * D)
        self.fc2 = nn.Linear(4 * D, D)
        self.attn_scale = attn_scale
        self.grad_scale = grad_scale
        self.act_scale = act_scale

    def forward(self, x):
        h = self.ln1(x)
        q, k, v = self.qkv(h).chunk(3, dim=-1)
        q, k, v = (t.reshape(B, T, HEADS, D // HEADS).transpose(1, 2) for t in (q, k, v))
        scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(D // HEADS)
        if self.attn_scale != 1.0:
            scores = scores * self.attn_scale
        mask = torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)
        scores = scores.masked_fill(mask, float("-inf"))
        att = F.softmax(scores, dim=-1)
        y = torch.matmul(att, v).transpose(1, 2).reshape(B, T, D)
        if self.grad_scale != 1.0 and y.requires_grad:
            y.register_hook(lambda g: g * self.grad_scale)
        x = x + self.proj(y)
        a = F.gelu(self.fc1(self.ln2(x)))
        if self.act_scale != 1.0:
            a = a * self.act_scale
        return x + self.fc2(a)


class Net(nn.Module):
    def __init__(self, variant: str):
        super().__init__()
        self.block0 = Block()
        self.block1 = Block(attn_scale=1.5 if variant == "attn_bug" else 1.0,
                            ln_eps=0.1 if variant == "eps_bug" else 1e-5,
                            grad_scale=1.5 if variant == "grad_bug" else 1.0,
                            act_scale=1.02 if variant == "mul_bug" else 1.0)
        if variant == "pg_bug":
            self.block0.fc1.weight.register_hook(lambda g: g * 1.5)
        self.ln_f = nn.LayerNorm(D)
        self.head = nn.Linear(D, 16)

    def forward(self, x):
        return self.head(self.ln_f(self.block1(self.block0(x))))


def run(out_dir: str, variant: str, task: str, summary_mode: str = "statistics", level: str = "mix") -> None:
    import json
    import os

    from msprobe.pytorch import PrecisionDebugger

    torch.manual_seed(0)
    model = Net(variant)
    x = torch.randn(B, T, D)
    target = torch.randn(B, T, 16)
    cfg = {"task": task, "dump_path": out_dir, "rank": [], "step": [], "level": level, "async_dump": False,
           task: {"scope": [], "list": [], "data_mode": ["all"]}}
    if task == "statistics":
        cfg[task]["summary_mode"] = summary_mode
    cfg_path = out_dir.rstrip("/\\") + ".config.json"
    os.makedirs(os.path.dirname(os.path.abspath(cfg_path)), exist_ok=True)
    with open(cfg_path, "w") as f:
        json.dump(cfg, f)
    dbg = PrecisionDebugger(config_path=cfg_path)
    dbg.start(model)
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=variant != "golden"):
        out = model(x)
    loss = F.mse_loss(out.float(), target)
    loss.backward()
    dbg.stop()


def main(root: str, specs) -> None:
    import os

    from msprobe.pytorch import PrecisionDebugger

    for spec in specs:
        variant, mode = spec.split(":")
        task, summary = ("statistics", "md5") if mode == "md5" else (mode, "statistics")
        PrecisionDebugger._reset_for_tests()
        run(os.path.join(root, f"{variant}-{mode}"), variant, task, summary)
    PrecisionDebugger._reset_for_tests()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
