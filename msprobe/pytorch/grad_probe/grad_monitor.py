"""grad_probe for PyTorch: ``PrecisionDebugger(config).monitor(model)`` with ``"task": "grad_probe"``.

``monitor(model)`` remembers the model's parameter names and registers one process-wide optimizer-step
pre-hook (``torch.optim.optimizer.register_optimizer_step_pre_hook``, as the reference does): every
``optimizer.step()`` of the process advances the step counter (first step 0).  On a step that is not in
``step`` the hook only counts.  On a recorded step, before the update, for every selected parameter it takes
``param.main_grad`` if present, else ``param.grad``, and computes on the gradient's device: max, min, norm
(float32 values), at L2 the bounds histogram and the zero count, at L1/L2 the direction ``grad > 0``.  The
numbers of all parameters are stacked into one tensor and brought to the host at once (one transfer; the
directions are concatenated into a second one when the gradients are not on the CPU); the files are written
by a background thread (:mod:`msprobe.core.grad_probe.writer`).  A failure is logged once and training goes
on unchanged: the hook never modifies a gradient or a parameter.
"""
from __future__ import annotations

import logging
from typing import Dict, List

import numpy as np

from msprobe.core.crc import crc32_hex
from msprobe.core.errors import MsprobeError
from msprobe.core.grad_probe import stats
from msprobe.core.grad_probe.monitor_base import GradientMonitorBase, GradProbeServiceBase, split_flat
from msprobe.core.grad_probe.writer import StepRecord
from msprobe.pytorch.monitor.fsdp import local

log = logging.getLogger("msprobe")


def _rank() -> tuple:
    """(rank, whether torch.distributed is initialised)."""
    try:
        import torch.distributed as dist
        if dist.is_available() and dist.is_initialized():
            return dist.get_rank(), True
    except Exception:  # noqa: BLE001
        pass
    return 0, False


class GradientMonitor(GradientMonitorBase):
    """The grad_probe recorder of one process (created by PrecisionDebugger for task grad_probe)."""

    def __init__(self, cfg, threaded: bool = True):
        super().__init__(cfg, threaded)
        self._params: Dict[object, str] = {}     # parameter -> name (insertion order = CSV order)
        self._handle = None
        self._none_logged = set()
        self._bounds_cache = {}

    # ------------------------------------------------------------------ attach
    def monitor(self, model) -> None:
        import torch
        if not isinstance(model, torch.nn.Module):
            raise MsprobeError(f"PrecisionDebugger.monitor(model): model must be a torch.nn.Module, got "
                               f"{type(model).__name__} (MindSpore takes the optimizer: msprobe.mindspore)")
        if isinstance(model, torch.jit.ScriptModule):
            raise MsprobeError("PrecisionDebugger.monitor(model): a torch.jit traced/scripted model cannot be "
                               "monitored; pass the original nn.Module")
        named = list(model.named_parameters())
        if self.param_list:
            have = {n for n, _ in named}
            missing = [n for n in self.param_list if n not in have]
            if missing:
                shown = ", ".join(n for n, _ in named[:12]) + (" ..." if len(named) > 12 else "")
                raise MsprobeError(f'grad_probe "param_list" names {missing} are not parameters of this model; '
                                   f"its parameters are: {shown or '(none)'}")
        self.rank, distributed = _rank()
        if self.rank == 0:
            log.info("> parameter names:")
        for name, param in named:
            if self.rank == 0:
                log.info("\t%s", name)
            if not self.param_list or name in self.param_list:
                self._params[param] = name
        if distributed and self.ranks and self.rank not in self.ranks:
            return
        if self._handle is None:
            from torch.optim.optimizer import register_optimizer_step_pre_hook
            self._handle = register_optimizer_step_pre_hook(self._pre_step)
        self._open_writer()

    # ------------------------------------------------------------------ per optimizer step
    def _pre_step(self, optimizer, args, kwargs):
        self._next_step(self._record)
        return None

    def _bounds_tensor(self, device):
        import torch
        t = self._bounds_cache.get(device)
        if t is None:
            # float32 like the reference (torch.Tensor(bounds)): a gradient equal to float32(bound) closes it
            t = self._bounds_cache[device] = torch.tensor(self.bounds, dtype=torch.float32, device=device)
        return t

    def _record(self, step: int) -> None:
        import torch
        names: List[str] = []
        grads = []
        for param, name in self._params.items():
            grad = getattr(param, "main_grad", None)
            if grad is None:
                grad = param.grad
            if grad is None:
                if name not in self._none_logged:
                    self._none_logged.add(name)
                    log.info("grad is None: %s", name)
                continue
            names.append(name)
            # FSDP2 (fully_shard): a DTensor gradient is recorded as this rank's shard, the tensor the
            # optimizer updates here (its statistics as a DTensor would need collectives: it failed before)
            grads.append(local(grad).detach())
        if not names:
            self._writer.submit(StepRecord(step, [], [], np.zeros((0, 3))))
            return
        shapes = [tuple(g.shape) for g in grads]
        with torch.no_grad():
            record = self._compute(step, names, shapes, grads)
        self._writer.submit(record)

    def _compute(self, step, names, shapes, grads) -> StepRecord:
        return compute_step(self.level, self.bounds, step, names, shapes, grads, self._bounds_tensor)

    @staticmethod
    def _to_host(flat_tensors) -> List[np.ndarray]:
        return _to_host(flat_tensors)

    # ------------------------------------------------------------------ lifecycle
    def end(self) -> None:
        if self._handle is not None:
            self._handle.remove()
            self._handle = None
        self._close_writer()


def compute_step(level, bounds, step, names, shapes, grads, bounds_tensor=None) -> StepRecord:
    """The numbers (one stacked tensor, one transfer), CRC strings and directions of one step's gradients
    (call under ``torch.no_grad()``)."""
    import torch
    if bounds_tensor is None:
        def bounds_tensor(device):
            return torch.tensor(bounds, dtype=torch.float32, device=device)
    floats = [g if g.dtype in (torch.float32, torch.float64) else g.float() for g in grads]
    mx, mn = [], []
    for g in floats:
        if g.numel():
            a, b = torch.aminmax(g)
        else:
            a = b = torch.full((), float("nan"), dtype=g.dtype, device=g.device)
        mn.append(a)
        mx.append(b)
    try:
        norms = torch._foreach_norm(floats)
    except Exception:  # noqa: BLE001 - older torch / mixed devices
        norms = [torch.linalg.vector_norm(g) for g in floats]
    device = floats[0].device
    same_device = all(g.device == device for g in floats)

    def to(t):
        return t if same_device else t.to(device)

    def col(ts):   # float32 values (as the reference writes them), held in float64
        return torch.stack([to(t).float() for t in ts]).double()

    numbers = torch.stack([col(mx), col(mn), col(norms)], 1)
    if stats.has_distribution(level):
        extra = []
        nb = len(bounds) + 1 if bounds else 0
        for g in floats:
            counts = []
            if nb:
                bucket = torch.bucketize(g.reshape(-1), bounds_tensor(g.device))
                counts.append(torch.bincount(bucket, minlength=nb).double())
            counts.append((g == 0).sum().double().reshape(1))
            extra.append(to(torch.cat(counts)))
        numbers = torch.cat([numbers, torch.stack(extra)], 1)
    md5s = None
    directions = None
    if stats.has_md5(level):
        host = _to_host([g.float().reshape(-1) for g in floats])
        md5s = [crc32_hex(memoryview(h)) for h in host]
    if stats.has_direction(level):
        dirs = [(g > 0).reshape(-1) for g in grads]
        directions = [d.reshape(s) for d, s in zip(_to_host(dirs), shapes)]
    numbers_host = numbers.cpu().numpy()          # the one transfer of the numbers
    return StepRecord(step, names, shapes, numbers_host, md5s, directions)


def _to_host(flat_tensors) -> List[np.ndarray]:
    """numpy arrays of 1-D tensors: views on the CPU; one concatenated transfer from a device."""
    import torch
    if all(t.device.type == "cpu" for t in flat_tensors):
        return [t.contiguous().numpy() for t in flat_tensors]
    host = torch.cat([t.to(flat_tensors[0].device) for t in flat_tensors]).cpu().numpy()
    return split_flat(host, [t.numel() for t in flat_tensors])


class GradProbeService(GradProbeServiceBase):
    """PrecisionDebugger's ``service`` for task grad_probe: ``monitor(model)`` attaches the probe."""

    def __init__(self, cfg):
        super().__init__(cfg, GradientMonitor(cfg))
