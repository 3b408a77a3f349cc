"""Per-tensor records: statistics on the tensor's device, resolved in one transfer per device per flush.

A tensor record is a plain dict in the reference's key order (type, dtype, shape, Max, Min, Mean,
Norm, requires_grad, then md5 or data_name). Its statistics are launched as reductions on the
tensor's own device when the record is made (so in-place ops that follow cannot change them) and
kept there as 0-dim tensors; :meth:`StatBuffer.resolve` stacks every pending scalar of a device and
moves them to the host with a single ``tolist()``, then writes the numbers into the records.

A float32 CPU tensor (the common case of a CPU run) is measured in one pass by the compiled kernel of
msprobe/_native/fstats.c (contiguous, or row by row when only its last dimension is contiguous): Max,
Min, the sum and the sum of squares, the sums in float32 lanes over blocks of 256 values, then in double,
so Mean and Norm are as exact as torch's float32 reductions or more (a float32 sum that overflows is inf,
as torch's). Without that kernel, or for other strided views, Max and Min come from numpy on a view of
the same memory and the sums from torch. Other tensors take three reductions: ``aminmax`` (one pass),
``sum`` (accumulated in float32; the mean is ``sum / numel``, divided and rounded to the tensor's dtype
at resolve time, as ``torch.mean`` does) and ``vector_norm``. Under ``"api_capture": "reference"``
(exact_norm) the sums and the norm are torch's own, so both tools' numbers agree to the bit.

A tensor that is recorded again unchanged (same object, same version
counter: a weight used by several calls, an output that feeds the next API, a gradient passed
along) reuses its pending statistics instead of launching new reductions. The version counter is
only trusted for ops that bump it: after a call that may write through a backend (collectives,
custom and NPU ops) the hooks drop the whole cache (:meth:`StatBuffer.forget_all`), after in-place
methods and ``out=`` calls the written tensors (:meth:`StatBuffer.forget`).

Statistic semantics follow MindStudio Probe 8.x: integer, float64 and (with ``precision: high``)
every tensor is cast to float32 first; bf16/fp16 statistics are rounded to their own dtype; bool
gives Max = any, Min = all; 0-dim tensors give the value itself four times; empty tensors give nulls.
"""
import ctypes
import math
import queue
import struct
import threading
import weakref

import numpy as np
import torch

from msprobe._native import f32_stats as _F32_STATS
from msprobe.core.crc import crc32 as fast_crc32
from msprobe.core.dump.writer import number

_STRIDED = torch.strided     # sparse (COO, CSR, ...) tensors have no is_contiguous: never aliased
_FLOAT_KEEP = (torch.float32, torch.float16, torch.bfloat16)
_PLAIN_TYPES = (torch.Tensor, torch.nn.Parameter)
_F32 = torch.float32
_CPU = torch.device("cpu")
_NP_MAX = np.maximum.reduce
_F32_MAX = 3.4028234663852886e38
_NP_MIN = np.minimum.reduce


def _tensor_type_name(t):
    cls = type(t)
    if cls is torch.Tensor or cls is torch.nn.Parameter:
        return "torch.Tensor"
    mod = cls.__module__
    return f"{mod}.{cls.__name__}" if mod and mod != "builtins" else cls.__name__


def _plain(t):
    """The dense local tensor behind subclasses (DTensor shard, nested values), detached."""
    if type(t) in _PLAIN_TYPES:
        return t.detach()
    try:
        if hasattr(t, "to_local") and callable(t.to_local):
            t = t.to_local()
        elif getattr(t, "is_nested", False):
            t = t.values()
    except Exception:
        pass
    return t.detach()


def storage_covers(t):
    """Whether the storage of strided CPU tensor ``t`` holds every element it points to. numpy views and
    ``copy_`` read raw memory without torch's checks: a tensor whose storage was released or shrunk
    (``untyped_storage().resize_(0)``, FSDP's freed parameters) must not be read that way."""
    try:
        strides = t.stride()
        if strides and min(strides) < 0:
            return False
        last = t.storage_offset() + sum((d - 1) * st for d, st in zip(t.shape, strides))
        return (last + 1) * t.element_size() <= t.untyped_storage().nbytes()
    except Exception:   # noqa: BLE001 - no storage to ask: not readable this way
        return False


def np_view(t, np_dtype=np.float32):
    """A numpy view of strided CPU tensor ``t``'s memory, made from its data pointer, for reading it now
    (the caller keeps ``t`` alive while the view is used). ``t.numpy()`` would do, but it marks the tensor's
    storage as not resizable for good, and FSDP2 frees its unsharded parameters after each forward with
    ``untyped_storage().resize_(0)``: a parameter measured through ``numpy()`` made that raise
    ("Trying to resize storage that is not resizable") and stopped training. The caller checks
    :func:`storage_covers` first (no negative strides, every element inside the storage)."""
    es = t.element_size()
    strides = t.stride()
    span = 1 + sum((d - 1) * st for d, st in zip(t.shape, strides))
    a = np.frombuffer((ctypes.c_char * (span * es)).from_address(t.data_ptr()), dtype=np_dtype)
    if t.is_contiguous():
        return a.reshape(t.shape)
    return np.lib.stride_tricks.as_strided(a, t.shape, tuple(st * es for st in strides))


def _no_data(t):
    if t.numel() == 0 or t.is_meta:
        return True
    # a FakeTensor (torch.compile tracing, FakeTensorMode) has shapes but no values
    return type(t) not in _PLAIN_TYPES and (getattr(t, "is_fake", False) or hasattr(t, "fake_mode"))


_DENSE_MAX = 1 << 24     # a sparse tensor of up to this many elements is measured through its dense values
_SPARSE_COMPRESSED = tuple(getattr(torch, n) for n in ("sparse_csr", "sparse_csc", "sparse_bsr", "sparse_bsc")
                           if hasattr(torch, n))


def readable(t):
    """A dense tensor with the values of ``t`` (statistics, md5, files), or None when they cannot be read: a meta
    or fake tensor, a storage that was released (``untyped_storage().resize_(0)``, as FSDP does), a sparse tensor
    of more than ``_DENSE_MAX`` elements, another layout. Sparse tensors give their dense values, nested tensors
    the elements of all their components. Used when the common path failed (never on the hot path)."""
    try:
        p = _plain(t)
        if p.is_meta or (type(p) not in _PLAIN_TYPES and (getattr(p, "is_fake", False) or hasattr(p, "fake_mode"))):
            return None
        if getattr(p, "is_nested", False):       # a nested tensor without a flat values() view: its elements
            parts = [c.reshape(-1) for c in p.unbind()]
            return torch.cat(parts) if parts else None
        layout = p.layout
        if layout is not torch.strided:
            if (layout is torch.sparse_coo or layout in _SPARSE_COMPRESSED) and p.numel() <= _DENSE_MAX:
                return p.to_dense()
            return None
        if p.numel() and p.untyped_storage().nbytes() == 0:
            return None
        return p
    except Exception:
        return None


def crc32_hex(t):
    """CRC-32 of the raw bytes of the contiguous tensor in its own dtype (bf16 as 16-bit words)."""
    if t.numel() == 0:
        return "00000000"
    c = t.detach()
    if c.device.type != "cpu":
        c = c.to("cpu")
    c = c.contiguous()
    if c.dim() == 0:
        c = c.reshape(1)
    try:
        # a contiguous numpy view of the bytes: zlib reads it in place, no copy (and, unlike numpy(),
        # the storage stays resizable: see np_view)
        buf = np_view(c.reshape(-1).view(torch.uint8), np.uint8)
    except Exception:
        buf = bytes(c.reshape(-1).view(torch.uint8).tolist())
    return "%08x" % (fast_crc32(buf) & 0xFFFFFFFF)


_ASYNC_CRC_BYTES = 256 * 1024


class CrcJob:
    """A CRC being computed by the worker thread; ``result()`` waits for it."""
    __slots__ = ("value", "_done")

    def __init__(self):
        self.value = None
        self._done = False

    def result(self):
        if not self._done:
            _WORKER.wait()
        return self.value


class _CrcWorker:
    """One daemon thread hashing snapshots (zlib releases the GIL). Cheaper per job than an executor."""

    def __init__(self):
        self._q = None
        self._pending = 0
        self._lock = threading.Lock()
        self._idle = threading.Event()
        self._idle.set()

    def submit(self, job, buf, cuda_event=None):
        if self._q is None:
            self._q = queue.SimpleQueue()
            threading.Thread(target=self._run, name="msprobe-crc", daemon=True).start()
        with self._lock:
            self._pending += 1
            self._idle.clear()
        self._q.put((job, buf, cuda_event))

    def _run(self):
        try:   # a tool thread: its Tensor.view/numpy calls (CUDA snapshots) are not the model's calls
            from msprobe.pytorch.dump.hooks import TLS
            TLS.depth += 1
        except Exception:
            pass
        while True:
            job, buf, event = self._q.get()
            try:
                if event is not None:
                    event.synchronize()
                    buf = _bytes_of(buf)
                job.value = "%08x" % (fast_crc32(buf) & 0xFFFFFFFF)
            except Exception:
                job.value = None
            job._done = True
            with self._lock:
                self._pending -= 1
                if self._pending == 0:
                    self._idle.set()

    def wait(self):
        self._idle.wait()


_WORKER = _CrcWorker()


def _bytes_of(c):
    """A numpy view of a contiguous CPU tensor's bytes (dtypes numpy lacks are viewed as uint8)."""
    if c.dtype in (torch.bfloat16,) or c.dtype.is_complex or str(c.dtype).startswith("torch.float8"):
        c = c.view(torch.uint8)
    return c.numpy()


def crc32_deferred(t):
    """The CRC of ``t`` as a str, or (for big device tensors) a :class:`CrcJob` computed off the training
    thread from a pinned-memory snapshot copied without a host sync. CPU tensors are hashed now, in place:
    zlib reads a contiguous tensor's bytes without a copy, while a snapshot for the worker costs a copy into
    fresh pages that is about as slow as the CRC itself (and the CRC's CPU time on top)."""
    nbytes = t.numel() * t.element_size()
    if nbytes < _ASYNC_CRC_BYTES or t.device.type == "cpu":
        return crc32_hex(t)
    try:
        c = t.detach()
        if c.device.type == "cuda":
            host = torch.empty(c.shape, dtype=c.dtype, pin_memory=True)
            host.copy_(c, non_blocking=True)
            event = torch.cuda.Event()
            event.record(torch.cuda.current_stream(c.device))
            job = CrcJob()
            _WORKER.submit(job, host, event)
            return job
        return crc32_hex(t)
    except Exception:
        return crc32_hex(t)


class _Slot:
    """Pending statistics of one tensor value, shared by every record of that value."""
    __slots__ = ("kind", "recs", "numel", "dtype", "md5", "path", "path_shape", "mxmn")

    def __init__(self, kind, rec, numel, dtype):
        self.kind = kind
        self.recs = [rec]
        self.numel = numel
        self.dtype = dtype
        self.md5 = None
        self.path = None        # tensor mode: the file this value was first saved to
        self.path_shape = None  # ... and the shape it was saved with (an alias of another shape is not linked)
        self.mxmn = None        # float32 on CPU: kinds 5, 6 (Max, Min); kind 7 (Max, Min, sum, sum of squares)


class StatBuffer:
    """Pending on-device statistics of the records made since the last resolve."""

    __slots__ = ("precision_high", "exact_norm", "_scalars", "_slots", "_seen", "_alias", "_count", "_done", "error")

    def __init__(self, precision="low", exact_norm=False):
        self.precision_high = precision == "high"
        # exact_norm (api_capture "reference"): the L2 norm by vector_norm, as the reference computes it, so the
        # two tools' Norm agree to the bit; otherwise float32 CPU tensors use a faster BLAS dot (same value within
        # float32 rounding: the summation order differs)
        self.exact_norm = exact_norm
        self.error = None    # the last failure of resolve() (its records keep null statistics); the owner reports it
        self.clear()

    def __len__(self):
        return self._count

    def clear(self):
        self._scalars = {}   # device -> list of 0-dim tensors
        self._slots = {}     # device -> list of _Slot (in the order of their scalars)
        self._seen = {}      # id(tensor) -> (weakref, version, _Slot)
        self._alias = {}     # (id(root base), storage offset, numel, dtype) -> (weakref(root), version, _Slot)
        self._done = []      # slots whose numbers are known already (kind 7: the compiled float32 kernel)
        self._count = 0

    def cached(self, t, rec):
        """Share the pending statistics of ``t`` if it was recorded unchanged before; returns the slot."""
        ent = self._seen.get(id(t))
        same = ent is not None and ent[0]() is t
        if not same:
            # A contiguous alias of a contiguous tensor measured before (a view or reshape of it; in backward,
            # within one record: see new_scope): the same elements in the same order, so the same statistics
            # to the bit. Views share their root's version counter.
            if not self._alias or t.__class__ not in _PLAIN_TYPES or t.layout is not _STRIDED or not t.is_contiguous():
                return None
            base = t._base
            root = t if base is None else base
            ent = self._alias.get((id(root), t.storage_offset(), t.numel(), t.dtype))
            if ent is None or ent[0]() is not root:
                return None
        try:
            if ent[1] != t._version:
                return None
        except RuntimeError:      # inference tensors have no version counter
            return None
        slot = ent[2]
        slot.recs.append(rec)
        if same and t.__class__ in _PLAIN_TYPES and t.layout is _STRIDED and t.is_contiguous():
            self._note_alias(t, ent[1], slot)     # its views in this scope share the statistics too
        return slot

    def new_scope(self):
        """Aliases found from now on only among the tensors recorded from now on. Backward records start one
        each: inside the autograd engine a gradient buffer may be summed into in place without a version
        bump, so an alias is trusted only within one record (a view node's incoming gradient and the view of
        it that it hands on)."""
        if self._alias:
            self._alias = {}

    def forget(self, t):
        """``t`` may have been written without a version bump: do not reuse its pending statistics."""
        self._seen.pop(id(t), None)
        if self._alias:
            self._alias = {}

    def forget_all(self):
        """An op may have written through a backend (a collective, a custom or NPU op): its writes do
        not bump ``_version``, and they reach every view of the storage, so no cached value can be
        trusted any more. Pending statistics stay; only their reuse for later records stops."""
        if self._seen:
            self._seen = {}
        if self._alias:
            self._alias = {}

    def add(self, rec, t, orig=None):
        """Launch the statistics of ``t`` (plain, detached) for ``rec``; returns the slot (None if no data)."""
        if t.dtype is _F32 and t.__class__ in _PLAIN_TYPES and t.is_cpu:
            slot = self._add_f32_cpu(rec, t)   # the common case first
            if slot is not None:
                if orig is not None:
                    self._remember(orig, slot)
                return slot
        return self._add_general(rec, t, orig)

    def _add_f32_cpu(self, rec, t):
        """A dense float32 CPU tensor. With the compiled kernel (and not exact_norm), contiguous or with a
        contiguous last dimension: all four numbers now, in one pass (kind 7). Otherwise Max and Min now, by
        numpy's SIMD reductions on a view of the same memory (exact and NaN-propagating like torch's; 2-5x
        faster than ``torch.aminmax``, 20x on transposed views), the sum and the sum of squares (BLAS dot when
        contiguous, else ``vector_norm``) pending (kinds 5, 6). None when numpy cannot view it (empty, 0-dim,
        conj/neg-bit views, a released storage): the general path takes it."""
        n = t.numel()
        if not n or not t.ndim or t.layout is not _STRIDED:
            return None
        try:
            if not storage_covers(t):
                return None
            a = np_view(t)          # not t.numpy(): that would pin the storage's size (FSDP2 frees it)
        except (RuntimeError, TypeError, ValueError):
            return None
        if _F32_STATS is not None and not self.exact_norm and (a.flags.c_contiguous or a.strides[-1] == 4):
            # one pass of the compiled kernel (msprobe/_native/fstats.c), row by row for a strided view whose
            # last dimension is contiguous (a transpose of leading dimensions): the numbers are final now
            try:
                found = _F32_STATS(a)
            except (TypeError, ValueError, BufferError):   # a layout the kernel refuses: numpy and torch below
                found = None
            if found is not None:
                slot = _Slot(7, rec, n, _F32)
                slot.mxmn = found
                self._done.append(slot)
                self._count += 1
                return slot
        slot = _Slot(5, rec, n, _F32)
        slot.mxmn = (float(_NP_MAX(a, axis=None)), float(_NP_MIN(a, axis=None)))
        lst = self._scalars.get(_CPU)
        if lst is None:
            lst = self._scalars[_CPU] = []
            self._slots[_CPU] = []
        if not self.exact_norm and t.is_contiguous():
            v = t.view(-1)
            lst += (torch.sum(v), torch.dot(v, v))
        else:
            # exact_norm (api_capture "reference"): the norm by vector_norm, as the reference computes it
            slot.kind = 6
            lst += (torch.sum(t), torch.linalg.vector_norm(t))
        self._slots[_CPU].append(slot)
        self._count += 1
        return slot

    def _add_general(self, rec, t, orig):
        dtype = t.dtype
        if _no_data(t):
            return None
        kind = 0
        if dtype is torch.bool:
            vals = (torch.any(t), torch.all(t))
            kind = 1
        elif dtype.is_complex:
            a = torch.abs(t)
            if a.dtype not in _FLOAT_KEEP:
                a = a.float()
            mn, mx = torch.aminmax(a)
            vals = (mx, mn, torch.sum(a, dtype=_F32))
            kind = 2
            dtype = a.dtype
        else:
            if dtype not in _FLOAT_KEEP or self.precision_high:
                t = t.float()
                dtype = _F32
                if t.is_cpu:
                    slot = self._add_f32_cpu(rec, t)
                    if slot is not None:
                        self._remember(orig, slot)
                        return slot
            if t.dim() == 0:
                vals = (t.clone(),)   # a copy: later in-place ops (all_reduce, add_) must not change it
                kind = 3
            else:
                mn, mx = torch.aminmax(t)
                if dtype is _F32 and not self.exact_norm and t.is_contiguous() and t.device.type == "cpu":
                    v = t.view(-1)
                    vals = (mx, mn, torch.sum(v), torch.dot(v, v))   # BLAS dot: faster than vector_norm
                    kind = 4
                else:
                    vals = (mx, mn, torch.sum(t, dtype=_F32), torch.linalg.vector_norm(t))
        dev = t.device
        lst = self._scalars.get(dev)
        if lst is None:
            lst = self._scalars[dev] = []
            self._slots[dev] = []
        lst.extend(vals)
        slot = _Slot(kind, rec, t.numel(), dtype)
        self._slots[dev].append(slot)
        self._count += 1
        self._remember(orig, slot)
        return slot

    def _remember(self, orig, slot):
        if orig is not None:
            try:
                version = orig._version
                self._seen[id(orig)] = (weakref.ref(orig), version, slot)
                if orig.__class__ in _PLAIN_TYPES and orig.layout is _STRIDED and orig.is_contiguous():
                    self._note_alias(orig, version, slot)
            except (TypeError, RuntimeError):   # no weakref support / inference tensor without a version
                pass

    def _note_alias(self, t, version, slot):
        """``t`` (contiguous) has the statistics of ``slot``: so have its contiguous aliases (see cached)."""
        base = t._base
        root = t if base is None else base
        self._alias[(id(root), t.storage_offset(), t.numel(), t.dtype)] = (weakref.ref(root), version, slot)

    def resolve(self):
        """Move every pending statistic to the host (one transfer per device) and fill the records."""
        scalars, slots, done = self._scalars, self._slots, self._done
        self.clear()
        if done:
            _fill_done(done)
        low = {}   # dtype -> list of (slot index info) needing rounding of the mean / norm
        batches = []
        for dev, lst in scalars.items():
            if not lst:
                continue
            try:
                with torch.no_grad():
                    batches.append((torch.stack([s if s.dtype is _F32 else s.float() for s in lst]).tolist(),
                                    slots[dev]))
            except Exception as exc:   # one bad scalar (a fake or freed one) must not cost the whole step
                self.error = exc
                batches.append(_one_by_one(lst, slots[dev]))
        isfinite = math.isfinite
        sqrt = math.sqrt
        pack, unpack = _PACK_F32.pack, _PACK_F32.unpack
        for flat, dev_slots in batches:
            pos = 0
            for slot in dev_slots:
                kind = slot.kind
                if kind >= 5:
                    mx, mn = slot.mxmn   # float32 on CPU: Max and Min are already known
                    total, sq = flat[pos:pos + 2]
                    pos += 2
                    if kind == 5:
                        norm = unpack(pack(sqrt(sq)))[0] if sq == sq and sq >= 0 else sq
                    else:
                        norm = sq
                    mean = total / slot.numel
                    if isfinite(total) and isfinite(norm):
                        mean = unpack(pack(mean))[0]
                        _put(slot, mx, mn, mean, norm)
                    else:
                        _fill(slot, mx, mn, _round_f32(mean), norm)
                    continue
                if kind == 4:
                    # float32 on CPU (the common case): a finite sum means every element is finite, so Max and
                    # Min are too; with a finite sum of squares nothing needs the non-finite markers
                    mx, mn, total, sq = flat[pos:pos + 4]
                    if isfinite(total) and isfinite(sq):
                        pos += 4
                        mean = unpack(pack(total / slot.numel))[0]
                        norm = unpack(pack(sqrt(sq)))[0]
                        _put(slot, mx, mn, mean, norm)
                        continue
                if kind == 0 or kind == 4:
                    mx, mn, total, norm = flat[pos:pos + 4]
                    pos += 4
                    if kind == 4:
                        norm = _round_f32(math.sqrt(norm)) if norm == norm and norm >= 0 else norm
                    mean = total / slot.numel
                    if slot.dtype is not _F32:
                        low.setdefault(slot.dtype, []).append((slot, mx, mn, mean, norm))
                        continue
                    mean = _round_f32(mean)
                elif kind == 1:
                    mx, mn = bool(flat[pos]), bool(flat[pos + 1])
                    mean = norm = None
                    pos += 2
                elif kind == 2:
                    mx, mn, total = flat[pos:pos + 3]
                    mean = _round_f32(total / slot.numel)
                    norm = None
                    pos += 3
                else:
                    mx = mn = mean = norm = flat[pos]
                    pos += 1
                _fill(slot, mx, mn, mean, norm)
        for dtype, items in low.items():
            # torch.mean of a bf16/fp16 tensor accumulates in float and rounds the result to the dtype
            means = torch.tensor([it[3] for it in items], dtype=torch.float64).to(dtype).float().tolist()
            for (slot, mx, mn, _m, norm), mean in zip(items, means):
                _fill(slot, mx, mn, mean, norm)


_PACK_F32 = struct.Struct("f")
_N_SCALARS = {0: 4, 1: 2, 2: 3, 3: 1, 4: 4, 5: 2, 6: 2, 7: 0}     # scalars per slot, by kind


def _one_by_one(lst, slots):
    """(flat values, slots) for the slots whose own scalars can be read; the others keep null statistics."""
    flat, good = [], []
    pos = 0
    for slot in slots:
        n = _N_SCALARS[slot.kind]
        part = lst[pos:pos + n]
        pos += n
        try:
            with torch.no_grad():
                vals = torch.stack([s if s.dtype is _F32 else s.float() for s in part]).tolist()
        except Exception:
            continue
        flat += vals
        good.append(slot)
    return flat, good


def _to_f32(v):
    """``v`` rounded to float32, beyond float32's range +-inf (as a float32 reduction would have overflowed)."""
    try:
        return _PACK_F32.unpack(_PACK_F32.pack(v))[0]
    except OverflowError:
        return math.copysign(math.inf, v)


def _fill_done(slots):
    """Kind 7 slots: Max, Min, the sum and the sum of squares from the one-pass kernel (sums in double)."""
    isfinite, sqrt = math.isfinite, math.sqrt
    pack, unpack = _PACK_F32.pack, _PACK_F32.unpack
    for slot in slots:
        mx, mn, total, sq = slot.mxmn
        if isfinite(total) and isfinite(sq):
            mean = total / slot.numel
            norm = sqrt(sq)
            if abs(mean) < _F32_MAX and norm < _F32_MAX:
                mean = unpack(pack(mean))[0]
                norm = unpack(pack(norm))[0]
                _put(slot, mx, mn, mean, norm)
                continue
            _fill(slot, mx, mn, _to_f32(mean), _to_f32(norm))
            continue
        mean = total / slot.numel if total == total else total
        norm = sqrt(sq) if sq == sq else sq
        _fill(slot, mx, mn, mean, norm)


def _round_f32(v):
    """``v`` rounded to the nearest float32 (what a float32 division would have returned)."""
    try:
        return _PACK_F32.unpack(_PACK_F32.pack(v))[0]
    except OverflowError:
        return v


def _put(slot, mx, mn, mean, norm):
    """Write four finite statistics into every record of ``slot``."""
    for rec in slot.recs:
        rec["Max"] = mx
        rec["Min"] = mn
        rec["Mean"] = mean
        rec["Norm"] = norm


def _fill(slot, mx, mn, mean, norm):
    """Write four statistics, NaN / inf as their JSON markers, into every record of ``slot``."""
    mx, mn, mean, norm = number(mx), number(mn), number(mean), number(norm)
    for rec in slot.recs:
        rec["Max"] = mx
        rec["Min"] = mn
        rec["Mean"] = mean
        rec["Norm"] = norm
