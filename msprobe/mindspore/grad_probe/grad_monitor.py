"""grad_probe for MindSpore (PyNative): ``PrecisionDebugger(config).monitor(optimizer)``, task ``grad_probe``.

As the reference's PyNative path: a forward-pre-hook on the optimizer cell receives the gradient tuple (in
the order of ``optimizer.parameters``, names from ``Parameter.name``); every optimizer call advances the
step counter (first step 0).  On a recorded step the numbers of all selected parameters (max, min, norm as
float32 values; at L2 the bounds histogram and the zero count) are computed with MindSpore ops, stacked and
brought to the host in one ``asnumpy``; the directions (``grad > 0``) are concatenated into a second one.
The files, their layout and format are those of PyTorch (msprobe.core.grad_probe.stats), written by the
background writer.  A failure is logged once and training goes on.  Graph mode (the reference's TensorDump
path) is not supported: the debugger refuses it at construction.
"""
from __future__ import annotations

from typing import List

import numpy as np

from msprobe.core.crc import crc32_hex
from msprobe.core.errors import MsprobeError
from msprobe.core.grad_probe import stats
from msprobe.core.grad_probe.monitor_base import GradientMonitorBase, GradProbeServiceBase, split_flat
from msprobe.core.grad_probe.writer import StepRecord


def _rank() -> int:
    try:
        from mindspore.communication import get_rank
        return int(get_rank())
    except Exception:  # noqa: BLE001 - not initialised: rank 0, as the reference
        return 0


def _parameters(optimizer):
    for attr in ("_parameters", "parameters"):
        params = getattr(optimizer, attr, None)
        if params is not None and not callable(params):
            return list(params)
    raise MsprobeError(f"PrecisionDebugger.monitor(optimizer): {type(optimizer).__name__} has no '_parameters' or "
                       f"'parameters'; pass the mindspore.nn.Optimizer that updates the network")


class GradientMonitor(GradientMonitorBase):
    def __init__(self, cfg, threaded: bool = True):
        super().__init__(cfg, threaded)
        self._handles = []

    def monitor(self, optimizer) -> None:
        import mindspore as ms
        if not isinstance(optimizer, ms.nn.Cell):
            raise MsprobeError(f"PrecisionDebugger.monitor(optimizer): MindSpore takes the optimizer (a "
                               f"mindspore.nn.Optimizer), got {type(optimizer).__name__}")
        params = _parameters(optimizer)
        names = [p.name for p in params]
        if self.param_list:
            missing = [n for n in self.param_list if n not in names]
            if missing:
                shown = ", ".join(names[:12]) + (" ..." if len(names) > 12 else "")
                raise MsprobeError(f'grad_probe "param_list" names {missing} are not parameters of this optimizer; '
                                   f"its parameters are: {shown or '(none)'}")
        self.rank = _rank()
        if self.ranks and self.rank not in self.ranks:
            return
        selected = [i for i, n in enumerate(names) if not self.param_list or n in self.param_list]
        self._open_writer()

        def hook(cell, inputs):
            self._pre_step(inputs, names, selected)

        self._handles.append(optimizer.register_forward_pre_hook(hook))

    def _pre_step(self, inputs, names, selected) -> None:
        def record(step):
            grads = inputs[0] if len(inputs) == 1 and isinstance(inputs[0], (tuple, list)) else inputs
            chosen = [(names[i], grads[i]) for i in selected if i < len(grads) and grads[i] is not None]
            self._writer.submit(compute_step(self.level, self.bounds, step, [n for n, _ in chosen],
                                             [g for _, g in chosen]))

        self._next_step(record)

    def end(self) -> None:
        for h in self._handles:
            try:
                h.remove()
            except Exception:  # noqa: BLE001
                pass
        self._handles = []
        self._close_writer()


def compute_step(level, bounds, step, names, grads) -> StepRecord:
    import mindspore as ms
    from mindspore import ops

    shapes = [tuple(int(d) for d in g.shape) for g in grads]
    if not names:
        return StepRecord(step, [], [], np.zeros((0, 3)))
    floats = [g if g.dtype in (ms.float32, ms.float64) else g.astype(ms.float32) for g in grads]
    if _on_cpu():
        # per-op cost dominates here: one concatenation, one asnumpy, numpy reductions over the segments
        sizes = [int(np.prod(s, dtype=np.int64)) for s in shapes]
        flat = ops.cat([g.astype(ms.float32).reshape(-1) for g in floats]).asnumpy()
        numbers, md5s, dirs = stats.compute_flat(level, bounds, flat, sizes)
        directions = None
        if dirs is not None:
            offsets = np.cumsum([0] + sizes)
            directions = [dirs[offsets[i]:offsets[i + 1]].reshape(s) for i, s in enumerate(shapes)]
        return StepRecord(step, list(names), shapes, numbers, md5s, directions)
    rows = []
    for g in floats:
        if g.size:
            vals = [ops.amax(g).astype(ms.float32), ops.amin(g).astype(ms.float32), ops.norm(g).astype(ms.float32)]
        else:
            vals = [ms.Tensor(float("nan"), ms.float32)] * 2 + [ms.Tensor(0.0, ms.float32)]   # as stats.compute_flat
        vals = [v.astype(ms.float64).reshape(1) for v in vals]
        if stats.has_distribution(level):
            if bounds:
                bucket = ops.bucketize(g.astype(ms.float32).reshape(-1), [float(b) for b in bounds])
                vals.append(ops.bincount(bucket.astype(ms.int32), minlength=len(bounds) + 1).astype(ms.float64))
            vals.append((g == 0).astype(ms.float64).sum().reshape(1))
        rows.append(ops.cat(vals))
    numbers = ops.stack(rows).asnumpy()                  # the one transfer of the numbers
    md5s = None
    directions = None
    if stats.has_md5(level):
        host = _to_host([g.astype(ms.float32).reshape(-1) for g in floats])
        md5s = [crc32_hex(memoryview(h)) for h in host]
    if stats.has_direction(level):
        flat = _to_host([(g > 0).reshape(-1) for g in floats])
        directions = [d.reshape(s) for d, s in zip(flat, shapes)]
    return StepRecord(step, list(names), shapes, numbers, md5s, directions)


_CPU = []


def _on_cpu() -> bool:
    if not _CPU:
        try:
            import mindspore as ms
            _CPU.append(ms.get_context("device_target") == "CPU")
        except Exception:  # noqa: BLE001
            _CPU.append(False)
    return _CPU[0]


def _to_host(flat) -> List[np.ndarray]:
    """One concatenated asnumpy, split into per-parameter views."""
    from mindspore import ops
    if not flat:
        return []
    host = ops.cat(flat).asnumpy()
    return split_flat(host, [int(t.size) for t in flat])


class GradProbeService(GradProbeServiceBase):
    """PrecisionDebugger's ``service`` for task grad_probe (start/stop/step: nothing to do in PyNative);
    ``monitor(optimizer)`` attaches the probe."""

    def __init__(self, cfg):
        super().__init__(cfg, GradientMonitor(cfg))
