"""Statistics of one MindSpore tensor on its own device, as one small vector (no host transfer here).

``StatPlan(ops, eps)(t)`` returns a 1-D float64 tensor of *raw* values, one per numeric op in the config's
order: ``min``/``max``, ``norm`` as the sum of squares, ``mean`` as the sum, ``zeros`` as the count of
|x| < eps, ``nans`` as the count of NaN, ``id`` the value of a 0-D tensor (else NaN).  The monitor stacks the
vectors of a step and brings them to the host with one ``asnumpy``; :meth:`StatPlan.finish` then turns the
raw values into the statistics with numpy (square root, division by the element count), as the PyTorch
monitor does.  Floating tensors are reduced in float32 (float64 stays float64), integer and bool tensors in
float64.  An empty tensor gives NaN for every op.  The input is taken through ``stop_gradient``: nothing here
enters a gradient graph.

On the CPU there is no host transfer to save, and each PyNative op costs far more than its arithmetic on
small tensors (about ten ops a tensor made a step of a 2-layer MLP with every switch on about 10x slower):
there the tensor is read with ``asnumpy`` and reduced with numpy at once, into the same raw vector
(``host=True``; the default where the device target is CPU).
"""

from __future__ import annotations

import numpy as np
import mindspore as ms
from mindspore import ops

from msprobe.core.monitor.trainer_base import finish_stats

_LOW = (ms.float16, ms.bfloat16, ms.float32)


class StatPlan:
    def __init__(self, ops_list, eps=1e-8, host=None):
        self.ops = [o for o in ops_list if o not in ("shape", "dtype")]
        self.eps = float(eps)
        self.k = len(self.ops)
        self._cols = {op: i for i, op in enumerate(self.ops)}
        if host is None:
            try:
                host = ms.get_context("device_target") == "CPU"
            except Exception:   # noqa: BLE001
                host = False
        self.host = bool(host)

    def __call__(self, t):
        """The raw vector of ``t``: a float64 MindSpore tensor (device path) or numpy array (host path)."""
        if self.host:
            return self._numpy(t)
        t = ops.stop_gradient(t)
        if t.dtype in _LOW:
            if t.dtype != ms.float32:
                t = t.astype(ms.float32)
        elif t.dtype != ms.float64:
            t = t.astype(ms.float64)
        if t.size == 0:
            return ms.Tensor(np.full((self.k,), np.nan), ms.float64)
        flat = t.reshape(-1)
        out = []
        nan = None
        if "min" in self._cols or "max" in self._cols:
            # a NaN makes min and max NaN (as numpy and torch.aminmax), whatever the device's kernel does
            nan = ops.isnan(flat).any()
        for op in self.ops:
            if op == "min":
                out.append(ops.select(nan, ms.Tensor(float("nan"), flat.dtype), flat.min()))
            elif op == "max":
                out.append(ops.select(nan, ms.Tensor(float("nan"), flat.dtype), flat.max()))
            elif op == "norm":
                out.append((flat * flat).sum())
            elif op == "mean":
                out.append(flat.sum())
            elif op == "zeros":
                out.append((ops.abs(flat) < self.eps).astype(flat.dtype).sum())
            elif op == "nans":
                out.append(ops.isnan(flat).astype(flat.dtype).sum())
            elif op == "id":
                out.append(t.reshape(()) if t.ndim == 0 else ms.Tensor(float("nan"), flat.dtype))
        return ops.stack(out).astype(ms.float64)

    def _numpy(self, t) -> np.ndarray:
        if t.dtype not in (ms.float32, ms.float64) and t.dtype in _LOW:
            t = t.astype(ms.float32)                     # numpy has no bfloat16
        a = t.asnumpy()
        if a.dtype.kind not in "f":
            a = a.astype(np.float64)
        if a.size == 0:
            return np.full((self.k,), np.nan)
        flat = a.reshape(-1)
        out = np.empty(self.k)
        for j, op in enumerate(self.ops):
            if op == "min":
                out[j] = flat.min()
            elif op == "max":
                out[j] = flat.max()
            elif op == "norm":
                out[j] = np.dot(flat, flat)
            elif op == "mean":
                out[j] = flat.sum(dtype=np.float64)
            elif op == "zeros":
                out[j] = np.count_nonzero(np.abs(flat) < self.eps)
            elif op == "nans":
                out[j] = np.count_nonzero(np.isnan(flat))
            elif op == "id":
                out[j] = flat[0] if a.ndim == 0 else np.nan
        return out

    @staticmethod
    def to_host(vecs) -> np.ndarray:
        """The step's raw vectors as one float64 matrix: one ``asnumpy`` for device vectors."""
        if not vecs:
            return np.zeros((0, 0))
        if isinstance(vecs[0], np.ndarray) and all(isinstance(v, np.ndarray) for v in vecs):
            return np.vstack(vecs)
        dev = [i for i, v in enumerate(vecs) if not isinstance(v, np.ndarray)]
        host = ops.stack([vecs[i] for i in dev]).asnumpy().astype(np.float64)
        if len(dev) == len(vecs):
            return host
        out = np.empty((len(vecs), host.shape[1]))
        out[dev] = host
        rest = [i for i, v in enumerate(vecs) if isinstance(v, np.ndarray)]
        out[rest] = np.vstack([vecs[i] for i in rest])
        return out

    def finish(self, raw: np.ndarray, numel: np.ndarray) -> np.ndarray:
        """Raw values (rows x ops, float64) -> statistics, in place (msprobe.core.monitor.trainer_base)."""
        return finish_stats(self._cols, raw, numel)
