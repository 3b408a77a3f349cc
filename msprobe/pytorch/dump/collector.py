"""Turning captured values into dump records, and writing a step's files.

One :class:`Collector` lives per debugger. It owns the per-step state (records in insertion order,
construct.json, stack.json, call counters, pending statistics, tensor files being written) and the
rules of what to record (scope/list filters, data_mode, overflow_check). Hooks call its ``api_*``,
``module_*`` and ``param_grad`` methods; they never raise into training (the hook layer catches
and logs).
"""
import os
import queue
import threading
import zlib

import torch

from msprobe.core.dump import writer as jw
from msprobe.core.dump.collector_base import CollectorBase
from msprobe.core.dump.records import builtin_record
from msprobe.pytorch.tensor_io import save_tensor, tensor_file_name
from msprobe.pytorch.dump.stats import _PLAIN_TYPES, StatBuffer, _plain, _tensor_type_name, crc32_deferred, readable, \
    storage_covers

MAX_DEPTH = 400
FLUSH_STATS_EVERY = 4096     # pending tensors: resolve statistics so device scalars do not pile up

_TENSOR = torch.Tensor
_SIMPLE = {bool: "bool", int: "int", float: "float", str: "str"}
_DTYPE_NAMES = {}      # torch.dtype -> "torch.float32" (str() builds a new string every call)



#: collectives whose argument (position, keyword) is only written: the buffer the result goes to. Its record
#: among the inputs (taken before the call) has no values: the collective does not read it, and what it holds
#: is leftover memory (FSDP2's all-gather buffer is torch.empty), different in every run (compare named it)
_OUTPUT_BUFFERS = {
    "all_gather_single": (0, "output_tensor"), "all_gather_into_tensor": (0, "output_tensor"),
    "_all_gather_base": (0, "output_tensor"), "all_gather": (0, "tensor_list"),
    "reduce_scatter_single": (0, "output"), "reduce_scatter_tensor": (0, "output"),
    "_reduce_scatter_base": (0, "output"), "reduce_scatter": (0, "output"),
    "all_to_all_single": (0, "output"), "all_to_all": (0, "output_tensor_list"),
}


def _tensors_in(v):
    if isinstance(v, torch.Tensor):
        return [v]
    if isinstance(v, (list, tuple)):
        return [t for t in v if isinstance(t, torch.Tensor)]
    return []


def _tool_thread():
    """Mark the calling (tool-owned) thread as inside the tool: the patched torch APIs it calls while
    writing files (Tensor.view, numpy, ...) are not recorded as the model's calls."""
    try:
        from msprobe.pytorch.dump.hooks import TLS
        TLS.depth += 1
    except Exception:
        pass


def _completed(work):
    try:
        return bool(work.is_completed())
    except Exception:
        return False


MAX_PENDING_BYTES = 1 << 30   # tensor bytes queued for the writer thread before training waits for it
POOL_MAX_BYTES = 1 << 30       # snapshot buffers, free and in use together, at most (kept between steps)
_POOL_MIN_BYTES = 64 << 10    # smaller snapshots are plain clones (small allocations are recycled by malloc)


class _SnapshotPool:
    """Snapshot buffers (flat uint8 CPU tensors) recycled by exact byte size.

    Every buffer it hands out or keeps counts against ``limit``: free ones (``_held``) and those out with the
    writer (``_out``). A size it has no free buffer for is allocated while the total stays within the limit
    (free buffers of other sizes are let go first); past it the caller makes a plain clone. ``take`` runs on
    the training thread, ``give`` on the writer thread once the file is written."""

    def __init__(self, limit=None):
        self.limit = POOL_MAX_BYTES if limit is None else limit
        self._free = {}
        self._held = 0     # bytes in self._free
        self._out = 0      # bytes handed out and not given back
        self._lock = threading.Lock()

    def take(self, nbytes):
        with self._lock:
            lst = self._free.get(nbytes)
            if lst:
                self._held -= nbytes
                self._out += nbytes
                return lst.pop()
            if self._out + nbytes > self.limit:
                return None
            while self._held and self._out + self._held + nbytes > self.limit:
                size = max(k for k, v in self._free.items() if v)     # let the biggest free ones go first
                self._free[size].pop()
                self._held -= size
            self._out += nbytes
        return torch.empty(nbytes, dtype=torch.uint8)

    def give(self, buf):
        nbytes = buf.numel()
        with self._lock:
            self._out -= nbytes
            if self._out + self._held + nbytes <= self.limit:
                self._free.setdefault(nbytes, []).append(buf)
                self._held += nbytes

    def clear(self):
        with self._lock:
            self._free = {}
            self._held = 0


class TensorWriter:
    """Saves tensor files in submission order: inline, or on one background thread (``threaded``: the tensor
    task, whose flush waits for the files; ``background`` = async_dump: the step's JSON files are queued too
    and nobody waits). The thread overlaps file writing (CRC-32 and writev release the GIL) with training;
    the tensors it writes are snapshots (clones) taken when the record is made."""

    def __init__(self, background, threaded=None):
        self.background = background
        self.threaded = background if threaded is None else (threaded or background)
        self._q = None
        self._pending_bytes = 0
        self._cv = threading.Condition()
        self._pool = _SnapshotPool()
        self.errors = []       # failures on the writer thread; the service logs them at the next flush

    def _run(self):
        _tool_thread()
        while True:
            fn, nbytes = self._q.get()
            try:
                fn()
            except Exception as exc:
                self.errors.append(exc)
            finally:
                if nbytes:
                    with self._cv:
                        self._pending_bytes -= nbytes
                        self._cv.notify_all()
                self._q.task_done()

    def submit(self, fn, nbytes=0):
        """Run ``fn`` on the writer thread or now; ``nbytes``: memory it holds until done (back-pressure)."""
        if not self.threaded:
            fn()
            return
        if self._q is None:
            self._q = queue.Queue(maxsize=4096)   # back-pressure: training waits if the disk falls behind
            threading.Thread(target=self._run, name="msprobe-save", daemon=True).start()
        if nbytes:
            with self._cv:
                while self._pending_bytes and self._pending_bytes + nbytes > MAX_PENDING_BYTES:
                    self._cv.wait()
                self._pending_bytes += nbytes
        self._q.put((fn, nbytes))

    def save(self, tensor, path):
        # atomic: no partial .pt under its final name
        self.submit(lambda: save_tensor(tensor, path), tensor.numel() * tensor.element_size())

    def snapshot(self, t):
        """A compact copy of CPU tensor ``t`` taken now (later in-place ops must not reach the file), as
        ``(tensor, buffer)``; hand it to :meth:`save_taken` or :meth:`drop`. The copy goes into a buffer
        recycled from an earlier snapshot of the same size when there is one: a fresh allocation of that size
        costs page faults and zeroing of new pages, several times the copy itself, and training repeats its
        tensor sizes every step. Small tensors (and dtypes that cannot view raw bytes) get a plain clone."""
        nbytes = t.numel() * t.element_size()
        buf = self._pool.take(nbytes) if nbytes >= _POOL_MIN_BYTES else None
        if buf is not None:
            try:
                snap = buf.view(t.dtype).view(t.shape)
                snap.copy_(t)
                return snap, buf
            except Exception:
                self._pool.give(buf)
        return t.clone(memory_format=torch.contiguous_format), None

    def save_taken(self, taken, path):
        """Queue the file of a :meth:`snapshot`; its buffer returns to the pool once the file is written."""
        snap, buf = taken
        if buf is None:
            self.save(snap, path)
            return
        pool = self._pool

        def write():
            try:
                save_tensor(snap, path)
            finally:
                pool.give(buf)
        self.submit(write, buf.numel())

    def drop(self, taken):
        if taken[1] is not None:
            self._pool.give(taken[1])

    def save_snapshot(self, t, path):
        """Queue the file of a snapshot of ``t`` taken now (see :meth:`snapshot`)."""
        self.save_taken(self.snapshot(t), path)

    def save_now(self, tensor, path):
        """Write now, on the calling thread (files queued before are independent of it)."""
        save_tensor(tensor, path)

    def link(self, existing, path, tensor):
        """``path`` as a hard link to the already saved ``existing`` (same bytes); a copy where links fail.
        Queued after the save of ``existing`` on the same FIFO thread."""
        def make():
            try:
                os.link(existing, path)
            except OSError:
                save_tensor(tensor.clone().contiguous(), path)
        self.submit(make)

    def take_errors(self):
        errors, self.errors = self.errors, []
        return errors

    def wait(self):
        if self._q is not None:
            self._q.join()

    def release(self):
        """Drop the recycled snapshot buffers (the dump has ended)."""
        self._pool.clear()


def _dim_size(d):
    try:
        return int(d)
    except Exception:         # a ragged dimension (a nested int)
        return None


def _shape_of(t):
    """The record's shape as ints: a ragged dimension of a nested tensor is null, as are sizes it does not have."""
    try:
        return tuple(d if d.__class__ is int else _dim_size(d) for d in t.shape)
    except Exception:
        pass
    try:
        n = t.dim()
    except Exception:
        return ()
    try:
        first = int(t.size(0))
    except Exception:
        first = None
    return ((first,) + (None,) * (n - 1)) if n else ()


def _no_report(where, exc):
    pass


class Collector(CollectorBase):
    forward_extra = {"is_recompute": False}
    report = staticmethod(_no_report)   # (where, exception) -> None; the Service's ErrorLog.record

    def __init__(self, cfg, framework="pytorch"):
        self._init_rules(cfg)
        self.writer = TensorWriter(cfg.async_dump, threaded=cfg.task == "tensor")
        self.framework = framework
        self.stats = StatBuffer(cfg.precision, exact_norm=getattr(cfg, "api_capture", "full") == "reference")
        self.reset()

    def _settle_statistics(self):
        self.stats.resolve()

    def _settle_files(self):
        self.writer.wait()

    # ------------------------------------------------------------------ state
    def reset(self):
        for h in getattr(self, "grad_hook_handles", ()):
            try:
                h.remove()
            except Exception:
                pass
        self.grad_hook_handles = []
        self.pending_md5 = []
        self.pending_async = []      # (works, record, name, args, kwargs) of async collectives not yet complete
        # ids of tensors recorded without values while a record is made: the output buffers among a
        # collective's inputs (api_inputs), the result of torch.empty (hooks.call): leftover memory
        self.buffer_ids = ()
        self.stats.clear()
        self._reset_step()

    # ------------------------------------------------------------------ values
    def tensor_rec(self, t, data_name, save):
        dtype = t.dtype
        dname = _DTYPE_NAMES.get(dtype)
        if dname is None:
            dname = _DTYPE_NAMES[dtype] = str(dtype)
        try:
            shape = tuple(t.shape) if t.__class__ in _PLAIN_TYPES else _shape_of(t)
        except Exception:         # a nested tensor has no plain sizes
            shape = _shape_of(t)
        rec = {"type": _tensor_type_name(t), "dtype": dname, "shape": shape,
               "Max": None, "Min": None, "Mean": None, "Norm": None,
               "requires_grad": t.requires_grad}
        p = None
        slot = None
        blind = False       # the values of t cannot be read (meta / fake tensor, released storage)
        snap = None         # tensor task: the compact snapshot queued for the writer thread (and its buffer)
        if self.buffer_ids and id(t) in self.buffer_ids:
            # memory that torch.empty handed out, not written yet: no values (they differ from run to run)
            if self.md5 and not self.structure_only:
                rec["md5"] = None
            return rec
        if not self.structure_only:
            slot = self.stats.cached(t, rec)
            if slot is None:
                p = _plain(t)
                if p.__class__ in _PLAIN_TYPES and p.is_cpu and p.layout is torch.strided and p.numel() \
                        and storage_covers(p):
                    # one compact copy serves the statistics too (one pass of the float32 kernel over memory
                    # that is in cache, instead of strided reductions): the snapshot a saved tensor needs
                    # anyway, or for md5 the compact bytes the CRC needs anyway
                    try:
                        if save and self.tensor_dir is not None and self.writer.threaded:
                            snap = self.writer.snapshot(p)
                            p = snap[0]
                        elif self.md5 and not p.is_contiguous():
                            p = p.contiguous()
                    except Exception:   # noqa: BLE001 - no compact copy (memory): measured and saved as before
                        snap = None
                try:
                    slot = self.stats.add(rec, p, t)
                except Exception as exc:
                    p, slot = self._stats_fallback(t, rec, data_name, exc)
                    blind = p is None
            if self.md5:
                md5 = slot.md5 if slot is not None else None
                if md5 is None and not blind:
                    if p is None:
                        p = _plain(t)
                    try:
                        md5 = crc32_deferred(p)
                    except Exception as exc:
                        md5 = None
                        self._unreadable(t, data_name, "md5", exc)
                    if slot is not None:
                        slot.md5 = md5
                rec["md5"] = md5
                if md5 is not None and md5.__class__ is not str:
                    self.pending_md5.append(rec)
        if save and self.tensor_dir is not None and not blind:
            if p is None:
                p = _plain(t)
            if not p.is_meta:
                fname = tensor_file_name(data_name)   # no path separator from a module name
                path = os.path.join(self.tensor_dir, fname)
                first = slot.path if slot is not None and slot.path_shape == rec["shape"] else None
                try:
                    if first is not None and first != path:
                        # the same tensor, unchanged, was saved already this step: a hard link, not a second copy
                        self.writer.link(first, path, p)
                    else:
                        if snap is not None:
                            self.writer.save_taken(snap, path)
                            snap = None
                        elif self.writer.background or (self.writer.threaded and p.device.type == "cpu"):
                            # a snapshot (one compact copy) for the writer thread. Device tensors of the tensor
                            # task are written inline below: a thread would copy them on another stream
                            self.writer.save_snapshot(p, path)
                        else:
                            self.writer.save_now(p if p.is_contiguous() else p.contiguous(), path)
                        if slot is not None:
                            slot.path = path
                            slot.path_shape = rec["shape"]
                    rec["data_name"] = fname
                except Exception as exc:
                    self._unreadable(t, data_name, "tensor_file", exc)
        if snap is not None:        # taken but not written (a hard link sufficed, or the save failed)
            self.writer.drop(snap)
        return rec

    def _stats_fallback(self, t, rec, data_name, exc):
        """The statistics of ``t`` failed: a sparse tensor gets those of its dense values; a tensor whose values
        cannot be read (meta, fake, released storage) is recorded without values, silently; any other failure
        is reported (once per place) and the record keeps its type, dtype and shape. Returns (values, slot):
        values None when they cannot be read."""
        q = readable(t)
        if q is None:
            return None, None
        try:
            return q, self.stats.add(rec, q, t)
        except Exception as exc2:
            self.report(f"{data_name}.statistics", exc2)
            return q, None

    def _unreadable(self, t, data_name, what, exc):
        if readable(t) is not None:
            self.report(f"{data_name}.{what}", exc)

    def convert(self, v, path, save, depth=0):
        """JSON value of an argument/result; ``path`` is the data_name prefix for tensors."""
        if isinstance(v, _TENSOR):
            return self.tensor_rec(v, path, save)
        cls = v.__class__
        simple = _SIMPLE.get(cls)
        if simple is not None:
            return {"type": simple, "value": jw.number(v) if cls is float else v}
        if v is None:
            return None
        if depth >= MAX_DEPTH:
            return None
        if cls is list or cls is tuple or (isinstance(v, tuple) and not hasattr(v, "_fields")) \
                or isinstance(v, list):
            if isinstance(v, torch.Size):
                return {"type": "torch.Size", "value": list(v)}
            return [self.convert(x, f"{path}.{i}", save, depth + 1) for i, x in enumerate(v)]
        if isinstance(v, tuple):  # namedtuple
            return {k: self.convert(x, f"{path}.{k}", save, depth + 1) for k, x in zip(v._fields, v)}
        fields = getattr(cls, "__dataclass_fields__", None)
        if fields is not None and not isinstance(v, type):
            # a dataclass (transformers' ModelOutput is one, and a dict that hides its None fields): every
            # field, None ones included, in declaration order, as the reference records it
            return {str(k): self.convert(getattr(v, k, None), f"{path}.{k}", save, depth + 1) for k in fields}
        if isinstance(v, dict):
            return {str(k): self.convert(x, f"{path}.{k}", save, depth + 1) for k, x in v.items()}
        rec = builtin_record(v)
        if rec is not None:
            return rec
        if isinstance(v, torch.memory_format):
            return {"type": "torch.memory_format", "format": str(v).split(".")[-1]}
        if isinstance(v, (torch.dtype, torch.device)):
            return {}
        mod = cls.__module__
        if mod == "numpy":
            return self._numpy(v, path, save)
        if "ProcessGroup" in cls.__name__:
            return self._group(v)
        if cls.__name__ in ("ReduceOp", "RedOpType"):
            return {"type": "torch.distributed.ReduceOp", "value": str(v)}
        return None

    def kwargs_value(self, key, v, path, save):
        if key in ("dtype", "output_dtype") and isinstance(v, torch.dtype):
            return {"type": "torch.dtype", "value": str(v)}
        if key == "device":
            if isinstance(v, torch.device):
                return {"type": "torch.device", "value": f"{v.type}:{v.index}"}
            if isinstance(v, (str, int)):
                return {"type": "torch.device", "value": v}
        return self.convert(v, path, save)

    def _numpy(self, v, path, save):
        import numpy as np
        if isinstance(v, np.ndarray):
            rec = {"type": "numpy.ndarray", "dtype": str(v.dtype), "shape": list(v.shape),
                   "Max": None, "Min": None, "Mean": None, "Norm": None}
            if v.size and v.dtype.kind in "biuf":
                a = v.astype(np.float32) if v.dtype.kind != "f" or v.dtype == np.float64 else v
                rec.update(Max=jw.number(float(a.max())), Min=jw.number(float(a.min())),
                           Mean=jw.number(float(a.mean())), Norm=jw.number(float(np.linalg.norm(a.ravel()))))
            return rec
        if isinstance(v, np.generic):
            item = v.item()
            return {"type": type(v).__name__, "value": jw.number(item) if isinstance(item, float) else item}
        return None

    def _group(self, g):
        try:
            import torch.distributed as dist
            ranks = dist.get_process_group_ranks(g)
        except Exception:
            ranks = []
        return {"type": "torch.ProcessGroup", "group_ranks": ranks,
                "group_id": "%08x" % (zlib.crc32(str(ranks).encode()) & 0xFFFFFFFF)}

    # ------------------------------------------------------------------ APIs
    def api_inputs(self, name, args, kwargs):
        """Record forward inputs of API ``name``; returns the pending record (or None when filtered)."""
        if self.terminated:
            return None
        self.dirty = True
        if self.mix_construct:
            self.construct[name] = self.fwd_module_stack[-1] if self.fwd_module_stack else None
        if not self.wanted(name):
            return None
        if not (self.fwd_in or self.fwd_out):
            return None
        save = self._save_for(name)
        rec = {}
        if self.fwd_in:
            where = _OUTPUT_BUFFERS.get(name.split(".", 2)[1]) if name.startswith("Distributed.") else None
            if where is not None:
                buf = args[where[0]] if len(args) > where[0] else kwargs.get(where[1])
                self.buffer_ids = {id(t) for t in _tensors_in(buf)}
            try:
                rec["input_args"] = [self.convert(a, f"{name}.input.{i}", save) for i, a in enumerate(args)]
                rec["input_kwargs"] = {k: self.kwargs_value(k, v, f"{name}.kwargs.{k}", save)
                                       for k, v in kwargs.items()}
            finally:
                self.buffer_ids = ()
        rec["is_recompute"] = False
        if not self.overflow:
            self.data[name] = rec
        self.stack.add(name, skip=4)
        return rec

    def api_outputs(self, name, rec, out, distributed=False, args=(), kwargs=None):
        if rec is None:
            return
        save = self._save_for(name)
        if self.fwd_out:
            if distributed:
                # a collective writes its tensor arguments in place (through the backend): its output
                # is its arguments after the call, measured now (the hooks dropped the stale cache)
                vals = list(args) + list((kwargs or {}).values())
                rec["output"] = [self.convert(v, f"{name}.output.{i}", save) for i, v in enumerate(vals)]
            else:
                outs = out if isinstance(out, (tuple, list)) and not isinstance(out, torch.Size) else [out]
                rec["output"] = [self.convert(v, f"{name}.output.{i}", save) for i, v in enumerate(outs)]
        if self.overflow:
            self._overflow_check(name, rec)
        elif len(self.stats) >= FLUSH_STATS_EVERY:
            self.stats.resolve()

    def api_outputs_later(self, name, rec, works, args, kwargs):
        """An async collective (``async_op=True``, isend/irecv, batch_isend_irecv): its tensors are final
        only once its Work objects complete. The output is recorded at ``wait()``, or when a later
        captured call or a flush finds them completed. The tool never waits itself (a pipeline's
        irecv may complete only after this rank's next send): a work still running when the step
        ends leaves the record without ``output``."""
        self.pending_async.append((works, rec, name, args, kwargs))

    def async_done(self, work=None):
        """Record the outputs of the pending async collectives whose works are all complete (``work``:
        its ``wait()`` just returned)."""
        pending = self.pending_async
        if not pending:
            return
        keep = []
        done = []
        for entry in pending:
            if all(w is work or _completed(w) for w in entry[0]):
                done.append(entry)
            else:
                keep.append(entry)
        if not done:
            return
        self.pending_async = keep
        self.dirty = True
        self.stats.forget_all()          # the backend wrote without bumping any version counter
        for _works, rec, name, args, kwargs in done:
            if rec is not None:
                self.api_outputs(name, rec, None, True, args, kwargs)

    def api_backward(self, name, grad_outputs, grad_inputs):
        """Backward of API ``name``: grads w.r.t. its outputs (input) and inputs (output)."""
        if self.terminated:
            return None
        self.dirty = True
        if self.mix_construct:
            self.construct[name] = self.bwd_module_stack[-1] if self.bwd_module_stack else None
        if not self.wanted(name):
            return
        self._backward_record(name, grad_outputs, grad_inputs)

    def _backward_record(self, name, grad_outputs, grad_inputs):
        self.stats.new_scope()
        try:
            super()._backward_record(name, grad_outputs, grad_inputs)
        finally:
            self.stats.new_scope()

    # ------------------------------------------------------------------ modules
    def param_grad_placeholder(self, key, names):
        self.dirty = True
        if self.overflow or not self.want_backward:
            return
        self.data.pop(key, None)
        self.data[key] = {n: [None] for n in names}

    def param_grad(self, key, pname, grad):
        if self.terminated:
            return None
        self.dirty = True
        if self.overflow or not self.want_backward:
            return
        rec = self.data.get(key)
        if rec is None:
            rec = self.data[key] = {}
        save = self._save_for(key)
        self.stats.new_scope()
        rec[pname] = [self.convert(grad, f"{key}.{pname}", save)]

    def module_backward(self, name, parent, grad_outputs, grad_inputs):
        if self.terminated:
            return None
        self.dirty = True
        if self.module_construct:
            self.construct[name] = parent
        if not self.wanted(name):
            return
        self._backward_record(name, grad_outputs, grad_inputs)

    # ------------------------------------------------------------------ files
    def flush(self):
        """Resolve pending statistics and rewrite the step's JSON files."""
        if self.step_dir is None:
            return
        if not self.dirty and not len(self.stats) and not self.pending_backward and not self.pending_md5 \
                and not self.pending_async:
            return
        self.dirty = False
        self.async_done()
        for finish in list(self.pending_backward.values()):
            finish()
        self.stats.resolve()
        err, self.stats.error = self.stats.error, None
        if err is not None:
            self.report("statistics", err)
        self._resolve_md5()
        if self.writer.threaded and not self.writer.background:
            self.writer.wait()      # the tensor task: the step's .pt files are complete before its JSON
        step_dir = self.step_dir
        files = self.step_files()
        # async_dump: serialised now (the dicts keep changing), written on the writer thread
        jw.write_step_files(step_dir, files, self.writer.submit if self.writer.background else None)

    def _resolve_md5(self):
        pending, self.pending_md5 = self.pending_md5, []
        for rec in pending:
            fut = rec.get("md5")
            if fut is not None and fut.__class__ is not str:
                try:
                    rec["md5"] = fut.result()
                except Exception:
                    rec["md5"] = None

    def wait_writes(self):
        """Block until every queued tensor file and JSON file is on disk (async_dump); the dump has ended, so the
        recycled snapshot buffers are let go."""
        self.writer.wait()
        self.writer.release()
