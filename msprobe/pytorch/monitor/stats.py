"""Statistics of one tensor on its own device, as one small vector (no host transfer here).

``StatPlan(ops, eps)(t)`` returns a 1-D tensor of *raw* values, one per numeric op in the config's order:
``min``/``max`` (one ``aminmax`` pass), ``norm`` as the sum of squares (one ``dot``), ``mean`` as the sum,
``zeros`` as the count of |x| < eps, ``nans`` as the count of NaN, ``id`` the value of a 0-D tensor (else NaN).
:meth:`StatPlan.finish` turns a whole step's matrix of raw values into the statistics on the host (numpy:
square root, division by the element count), so the device does only the passes over the data and one
``stack``.  Floating tensors are reduced in float32 (float64 stays float64); integer and bool tensors as
float64.  An empty tensor gives NaN for every op.  The monitor stacks the vectors of a step and moves them
to the host once.
"""

from __future__ import annotations

import numpy as np
import torch

from msprobe.core.monitor.trainer_base import finish_stats


class StatPlan:
    def __init__(self, ops, eps=1e-8):
        self.ops = [o for o in ops if o not in ("shape", "dtype")]
        self.eps = float(eps)
        self.k = len(self.ops)
        self._minmax = "min" in self.ops or "max" in self.ops
        self._cols = {op: i for i, op in enumerate(self.ops)}

    def __call__(self, t: torch.Tensor) -> torch.Tensor:
        # detached: nothing here is recorded by autograd (no no_grad context needed)
        t = t.detach()
        if t.is_complex():
            t = t.abs()
        if not t.is_floating_point():
            t = t.to(torch.float64)
        if t.dtype is not torch.float32 and t.dtype is not torch.float64:
            t = t.float()
        n = t.numel()
        if n == 0:
            return torch.full((self.k,), float("nan"), dtype=t.dtype, device=t.device)
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
                out.append(torch.dot(flat, flat))           # sum of squares (BLAS on CPU, no temporary)
            elif op == "mean":
                out.append(torch.sum(flat))
            elif op in ("zeros", "nans"):
                # comparisons written into a float buffer and summed: several times faster on CPU than
                # summing the bool tensors of isnan / abs() < eps
                if buf is None:
                    buf = torch.empty_like(flat)
                if op == "nans":
                    torch.ne(flat, flat, out=buf)
                else:
                    torch.abs(flat, out=buf)
                    buf.lt_(self.eps)
                out.append(torch.sum(buf))
            elif op == "id":
                out.append(t.reshape(()) if t.dim() == 0
                           else torch.tensor(float("nan"), dtype=t.dtype, device=t.device))
        return torch.stack(out)     # every part is already of t's dtype

    def finish(self, raw: np.ndarray, numel: np.ndarray) -> np.ndarray:
        """Raw values (rows x ops, float64) -> statistics, in place (msprobe.core.monitor.trainer_base)."""
        return finish_stats(self._cols, raw, numel)
