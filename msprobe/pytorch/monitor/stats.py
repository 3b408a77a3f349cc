"""Statistics of one tensor on its own device, as one small vector (no host transfer here).

``StatPlan(ops, eps)(t)`` returns a 1-D tensor with one value per numeric op, in the config's order:
``min``/``max`` (one ``aminmax`` pass), ``norm`` (L2), ``mean``, ``zeros`` (fraction of |x| < eps), ``nans``
(count of NaN), ``id`` (the value of a 0-D tensor, else NaN).  Floating tensors are reduced in float32
(float64 stays float64); integer and bool tensors are reduced as float64.  An empty tensor gives NaN for
every op.  The monitor stacks the vectors of a step and moves them to the host once.
"""

from __future__ import annotations

import torch

class StatPlan:
    def __init__(self, ops, eps=1e-8):
        self.ops = [o for o in ops if o not in ("shape", "dtype")]
        self.eps = float(eps)
        self.k = len(self.ops)
        self._minmax = "min" in self.ops or "max" in self.ops

    @torch.no_grad()
    def __call__(self, t: torch.Tensor) -> torch.Tensor:
        t = t.detach()
        if t.is_complex():
            t = t.abs()
        if not t.is_floating_point():
            t = t.to(torch.float64)
        if t.dtype is not torch.float32 and t.dtype is not torch.float64:
            t = t.float()
        acc = t.dtype
        n = t.numel()
        if n == 0:
            return torch.full((self.k,), float("nan"), dtype=acc, device=t.device)
        if self._minmax:
            mn, mx = torch.aminmax(t)
        flat = t.reshape(-1)
        buf = None
        out = []
        for op in self.ops:
            if op == "min":
                out.append(mn)
            elif op == "max":
                out.append(mx)
            elif op == "norm":
                if acc is torch.float32 and flat.is_contiguous() and t.device.type == "cpu":
                    out.append(torch.sqrt(torch.dot(flat, flat)))      # BLAS, no temporary
                else:
                    out.append(torch.linalg.vector_norm(flat))
            elif op == "mean":
                out.append(torch.sum(flat) / n)
            elif op in ("zeros", "nans"):
                # comparisons written into a float buffer and summed: several times faster on CPU than
                # summing the bool tensors of isnan / abs() < eps
                if buf is None:
                    buf = torch.empty_like(flat)
                if op == "nans":
                    torch.ne(flat, flat, out=buf)
                    out.append(torch.sum(buf))
                else:
                    torch.abs(flat, out=buf)
                    buf.lt_(self.eps)
                    out.append(torch.sum(buf) / n)
            elif op == "id":
                out.append(t.reshape(()) if t.dim() == 0
                           else torch.tensor(float("nan"), dtype=acc, device=t.device))
        return torch.stack([x.to(acc) for x in out])


def shape_dtype(t):
    return list(t.shape), str(t.dtype)
