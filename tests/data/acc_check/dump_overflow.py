"""Dump one forward pass of a small float16 network with overflows (level L1) for the run_overflow_check tests.

usage: python dump_overflow.py DUMP_DIR TASK [--break-tanh]
Normal overflows: torch.mul(x, x) of values up to 300 (90000 > 65504 in float16) and torch.exp of 20
(4.8e8). --break-tanh plays a faulty device kernel: torch.tanh returns inf in one element, where the true
result (|tanh| <= 1) always fits.
"""
import sys

import torch


def main():
    dump_dir, task = sys.argv[1], sys.argv[2]
    if "--break-tanh" in sys.argv:  # the CPU kernel of aten::tanh replaced by a faulty one
        import warnings

        warnings.filterwarnings("ignore", message=".*[Oo]verrid")
        lib = torch.library.Library("aten", "IMPL")  # noqa: F841 - kept alive until the end of main()

        def broken(x):
            out = (2 * torch.sigmoid(2 * x.double()) - 1).to(x.dtype)
            if out.dtype == torch.float16 and out.numel() > 1:
                out.view(-1)[1] = float("inf")
            return out

        lib.impl("tanh", broken, "CPU")
    from msprobe.pytorch import PrecisionDebugger, seed_all

    seed_all(3)
    torch.set_num_threads(1)
    x = (torch.rand(4, 8) * 300).to(torch.float16)
    x.view(-1)[0] = 300.0
    w = torch.randn(8, 8).to(torch.float16)
    dbg = PrecisionDebugger(task=task, level="L1", dump_path=dump_dir)
    dbg.start()
    sq = torch.mul(x, x)                                   # Torch.mul.0: inf (normal)
    small = torch.matmul(x / 300, w)                       # Tensor.__truediv__.0, Torch.matmul.0: finite
    th = torch.tanh(small)                                 # Torch.tanh.0: finite, or inf when broken (abnormal)
    big = torch.exp(torch.full((2, 3), 20.0, dtype=torch.float16))   # Torch.full.0, Torch.exp.0: inf (normal)
    y = torch.add(th, 1.0)                                 # Torch.add.0: inf input, inf output when broken
    z = torch.relu(sq)                                     # Torch.relu.0: inf in, inf out (normal)
    dbg.stop()
    dbg.step()
    return sq, big, y, z


if __name__ == "__main__":
    main()
