"""Write a level-debug dump (debug.json) of a few saved values.  usage: python debug_save.py DUMP_DIR SHIFT"""
import sys

import torch

from msprobe.pytorch import PrecisionDebugger

out, shift = sys.argv[1], float(sys.argv[2])
torch.manual_seed(0)
x = torch.randn(4, 8) + shift
w = torch.randn(8, 3, requires_grad=True)
PrecisionDebugger(task="statistics", level="debug", dump_path=out)
PrecisionDebugger.save(x, "x")
y = x @ w
PrecisionDebugger.save({"y": y, "scale": 0.5, "parts": [y.sum(), y.mean()]}, "out", save_backward=False)
PrecisionDebugger.step()
