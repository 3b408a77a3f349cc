"""Per-tensor records: statistics on the tensor's device, resolved in one transfer per device per flush.

A tensor record is a plain dict in the reference's key order (type, dtype, shape, Max, Min, Mean,
Norm, requires_grad, then md5 or data_name). Its four statistics are launched as reductions on the
tensor's own device when the record is made (so in-place ops that follow cannot change them) and
kept there as 0-dim tensors; :meth:`StatBuffer.resolve` stacks every pending scalar of a device and
moves them to the host with a single ``tolist()``, then writes the numbers into the records.

Statistic semantics follow MindStudio Probe 8.x: integer, float64 and (with ``precision: high``)
every tensor is cast to float32 first; bf16/fp16 statistics are computed in their own dtype; bool
gives Max = any, Min = all; 0-dim tensors give the value itself four times; empty tensors give nulls.
"""
import math
import zlib

import torch

from msprobe.core.dump.writer import NonFinite, number

_FLOAT_KEEP = (torch.float32, torch.float16, torch.bfloat16)
_STAT_KEYS = ("Max", "Min", "Mean", "Norm")
_SKIP_TYPES = ()


def _tensor_type_name(t):
    cls = type(t)
    if cls is torch.Tensor or cls is torch.nn.Parameter:
        return "torch.Tensor"
    mod = cls.__module__
    return f"{mod}.{cls.__name__}" if mod and mod != "builtins" else cls.__name__


def _plain(t):
    """The dense local tensor behind subclasses (DTensor shard, nested values), detached."""
    try:
        if hasattr(t, "to_local") and callable(t.to_local):
            t = t.to_local()
        elif getattr(t, "is_nested", False):
            t = t.values()
    except Exception:
        pass
    return t.detach()


def _no_data(t):
    return t.numel() == 0 or t.device.type == "meta" or getattr(t, "is_fake", False)


def crc32_hex(t):
    """CRC-32 of the raw bytes of the contiguous tensor in its own dtype (bf16 as 16-bit words)."""
    if t.numel() == 0:
        return "00000000"
    c = t.detach()
    if c.device.type != "cpu":
        c = c.to("cpu")
    c = c.contiguous()
    if c.dtype in (torch.bfloat16,) or c.dtype.is_complex or str(c.dtype).startswith("torch.float8"):
        raw = c.view(torch.uint8) if c.dim() else c.reshape(1).view(torch.uint8)
    else:
        raw = c
    try:
        buf = raw.numpy().tobytes()
    except Exception:
        buf = bytes(c.untyped_storage())[c.storage_offset() * c.element_size():
                                         (c.storage_offset() + c.numel()) * c.element_size()]
    return "%08x" % (zlib.crc32(buf) & 0xFFFFFFFF)


class StatBuffer:
    """Pending on-device statistics of the records made since the last resolve."""

    __slots__ = ("precision_high", "_scalars", "_targets")

    def __init__(self, precision="low"):
        self.precision_high = precision == "high"
        self._scalars = {}   # device -> list of 0-dim tensors (4 per record)
        self._targets = {}   # device -> list of (record, kind)

    def __len__(self):
        return sum(len(v) for v in self._targets.values())

    def add(self, rec, t):
        """Launch the statistics of ``t`` (plain, detached) for ``rec``; fills nulls where none apply."""
        if _no_data(t):
            return
        dtype = t.dtype
        if dtype is torch.bool:
            vals = (torch.any(t), torch.all(t))
            kind = 1
        elif dtype.is_complex:
            a = torch.abs(t)
            if a.dtype not in _FLOAT_KEEP:
                a = a.float()
            mn, mx = torch.aminmax(a)
            vals = (mx, mn, torch.mean(a))
            kind = 2
        else:
            if dtype not in _FLOAT_KEEP or self.precision_high:
                t = t.float()
            if t.dim() == 0:
                vals = (t.clone(),)   # a copy: later in-place ops (all_reduce, add_) must not change it
                kind = 3
            else:
                mn, mx = torch.aminmax(t)
                vals = (mx, mn, torch.mean(t), torch.linalg.vector_norm(t))
                kind = 0
        dev = t.device
        lst = self._scalars.get(dev)
        if lst is None:
            lst = self._scalars[dev] = []
            self._targets[dev] = []
        lst.extend(vals)
        self._targets[dev].append((rec, kind))

    def resolve(self):
        """Move every pending statistic to the host (one transfer per device) and fill the records."""
        scalars, targets = self._scalars, self._targets
        self._scalars, self._targets = {}, {}
        for dev, lst in scalars.items():
            if not lst:
                continue
            with torch.no_grad():
                flat = torch.stack([s.float() if s.dtype is not torch.float32 else s for s in lst]).tolist()
            pos = 0
            for rec, kind in targets[dev]:
                if kind == 0:
                    mx, mn, mean, norm = flat[pos:pos + 4]
                    pos += 4
                elif kind == 1:
                    mx, mn = bool(flat[pos]), bool(flat[pos + 1])
                    mean = norm = None
                    pos += 2
                elif kind == 2:
                    mx, mn, mean = flat[pos:pos + 3]
                    norm = None
                    pos += 3
                else:
                    mx = mn = mean = norm = flat[pos]
                    pos += 1
                rec["Max"] = number(mx)
                rec["Min"] = number(mn)
                rec["Mean"] = number(mean)
                rec["Norm"] = number(norm)

    def clear(self):
        self._scalars, self._targets = {}, {}


def overflow_in(values):
    """True when any number in ``values`` is inf or nan."""
    for v in values:
        if isinstance(v, NonFinite) or (isinstance(v, float) and not math.isfinite(v)):
            return True
    return False
