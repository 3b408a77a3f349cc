"""Turning captured MindSpore values into dump records, and writing a step's files.

The MindSpore counterpart of :mod:`msprobe.pytorch.dump.collector`: the same record layout, filters,
construct/stack bookkeeping and file writing (shared pieces come from :mod:`msprobe.core.dump`), with
MindSpore's naming (``mindspore.Tensor``, MindSpore dtype names, no ``requires_grad``) and ``.npy``
tensor files.

Statistics are computed on the host with numpy from ``Tensor.asnumpy()``: on CPU that is a view of
the tensor's memory, it works for every dtype (MindSpore's CPU kernels have no bf16 reductions and no
``LinalgVectorNorm``), and it runs no MindSpore op, so nothing the tool does shows up in the dump or
changes the training's op stream. Rules (the reference's MindSpore rules):

* empty tensor: Max/Min/Mean/Norm null; bool: Max = any, Min = all, Mean/Norm null;
* 0-dim: all four are the value itself;
* complex: statistics of ``|z|`` (Norm included);
* int, float64, bf16 (and everything with ``precision: high``) are cast to float32 first; float16 and
  float32 are reduced in their own dtype (numpy accumulates float16 in float32 and rounds the result).
"""
import os
import zlib

import numpy as np

from msprobe.core.dump import writer as jw
from msprobe.core.dump.np_stats import fill_stats
from msprobe.core.dump.records import builtin_record
from msprobe.core.dump.collector_base import CollectorBase

MAX_DEPTH = 400
FLUSH_STATS_EVERY = 4096   # pending tensors: resolve statistics so that memory does not pile up
_SIMPLE = {bool: "bool", int: "int", float: "float", str: "str"}


_AUTO = object()   # backward(): parent taken from the backward cell stack


class Collector(CollectorBase):
    framework = "mindspore"

    def __init__(self, cfg):
        import mindspore as ms
        self.ms = ms
        self.tensor_cls = ms.Tensor
        try:
            from mindspore._c_expression.typing import Type as _DType
        except Exception:     # pragma: no cover
            _DType = type(ms.float32)
        self.dtype_cls = _DType
        self.param_cls = ms.Parameter
        self._init_rules(cfg)
        self.high = cfg.precision == "high"
        self.defer = not (self.md5 or self.save_tensors or self.overflow or self.tensor_list or self.structure_only)
        self.pending = []
        # (shape, dtype) of the model's parameters: a recorded tensor of such a shape may alias a parameter
        # (Tensor.to to the same dtype, identities) that the optimizer updates in place: copied when recorded
        self.param_keys = set()
        self.stat_errors = []
        self.reset()

    # ------------------------------------------------------------------ state
    def reset(self):
        self.pending = []
        self.param_grad_state = {}
        self._reset_step()

    # ------------------------------------------------------------------ values
    def _host(self, t):
        """numpy array of ``t`` (bf16 as float32; the array the statistics and files are made of)."""
        a = t.asnumpy()
        if a.dtype.kind not in "biufc":      # bfloat16 (ml_dtypes) and other extension types
            a = a.astype(np.float32)
        return a

    def resolve(self):
        """Fill in the statistics of the pending tensors (one synchronisation, then host reductions)."""
        pending, self.pending = self.pending, []
        if not pending:
            return
        try:
            from mindspore.common.api import _pynative_executor
            _pynative_executor.sync()
        except Exception as exc:
            self.stat_errors.append(exc)
        for t, rec in pending:
            try:
                self._stats(self._host(t), rec)
            except Exception as exc:     # reported by the service (dump_error_info.log); the record keeps nulls
                self.stat_errors.append(exc)

    def _stats(self, a, rec):
        fill_stats(a, rec, self.high)

    def tensor_rec(self, t, data_name, save):
        rec = {"type": "mindspore.Tensor", "dtype": str(t.dtype), "shape": list(t.shape),
               "Max": None, "Min": None, "Mean": None, "Norm": None}
        if self.structure_only:
            return rec
        if self.defer:
            # statistics only: read the values at the next flush, after one synchronisation, instead of
            # draining MindSpore's asynchronous op queue once per tensor (about 10 ms each on CPU). Parameters,
            # and tensors shaped like one (possible aliases), are copied now: the optimizer updates parameters
            # in place before stop().
            alias = (tuple(t.shape), t.dtype) in self.param_keys
            self.pending.append((t.copy() if alias or isinstance(t, self.param_cls) else t, rec))
            if len(self.pending) >= FLUSH_STATS_EVERY:
                self.resolve()
            return rec
        a = self._host(t)
        try:
            self._stats(a, rec)
        except Exception as exc:     # reported once by the service; the record (md5, file) stays, without values
            self.stat_errors.append(exc)
        if self.md5:
            rec["md5"] = "%08x" % (zlib.crc32(np.ascontiguousarray(a).tobytes()) & 0xFFFFFFFF)
        if save and self.tensor_dir is not None:
            fname = data_name.replace("/", "_").replace("\\", "_") + ".npy"   # no path separator from a name
            jw.write_file(os.path.join(self.tensor_dir, fname), lambda fh: np.save(fh, a))   # atomic, 0640
            rec["data_name"] = fname
        return rec

    def convert(self, v, path, save, depth=0):
        if isinstance(v, self.tensor_cls):
            return self.tensor_rec(v, path, save)
        cls = v.__class__
        simple = _SIMPLE.get(cls)
        if simple is not None:
            return {"type": simple, "value": jw.number(v) if cls is float else v}
        if v is None:
            return None
        if depth >= MAX_DEPTH:
            return None
        if isinstance(v, (list, tuple)):
            if isinstance(v, tuple) and hasattr(v, "_fields"):
                return {k: self.convert(x, f"{path}.{k}", save, depth + 1) for k, x in zip(v._fields, v)}
            return [self.convert(x, f"{path}.{i}", save, depth + 1) for i, x in enumerate(v)]
        if isinstance(v, dict):
            return {str(k): self.convert(x, f"{path}.{k}", save, depth + 1) for k, x in v.items()}
        rec = builtin_record(v)
        if rec is not None:
            return rec
        if isinstance(v, self.dtype_cls):
            return {"type": "mindspore.dtype", "value": str(v)}
        if isinstance(v, np.ndarray):
            rec = {"type": "numpy.ndarray", "dtype": str(v.dtype), "shape": list(v.shape),
                   "Max": None, "Min": None, "Mean": None, "Norm": None}
            if v.dtype.kind in "biufc":
                self._stats(v, rec)
            return rec
        if isinstance(v, np.generic):
            item = v.item()
            return {"type": type(v).__name__, "value": jw.number(item) if isinstance(item, float) else item}
        return None

    # ------------------------------------------------------------------ APIs and primitives
    def api_inputs(self, name, args, kwargs):
        """Forward inputs of API/primitive ``name``; returns the pending record (or None when filtered)."""
        if self.terminated:
            return None
        self.dirty = True
        if self.mix_construct:
            self.construct[name] = self.fwd_module_stack[-1] if self.fwd_module_stack else None
        if not self.wanted(name) or not (self.fwd_in or self.fwd_out):
            return None
        save = self._save_for(name)
        rec = {}
        if self.fwd_in:
            rec["input_args"] = [self.convert(a, f"{name}.input.{i}", save) for i, a in enumerate(args)]
            rec["input_kwargs"] = {k: self.convert(v, f"{name}.kwargs.{k}", save) for k, v in kwargs.items()}
        if not self.overflow:
            self.data[name] = rec
        self.stack.add(name, skip=4)
        return rec

    def api_outputs(self, name, rec, out, args=()):
        if rec is None:
            return
        if self.fwd_out:
            save = self._save_for(name)
            outs = out if isinstance(out, (tuple, list)) else [out]
            rec["output"] = [self.convert(v, f"{name}.output.{i}", save) for i, v in enumerate(outs)]
        if self.overflow:
            self._overflow_check(name, rec)

    def backward(self, name, grad_outputs, grad_inputs, parent=_AUTO):
        """Backward record: ``input`` = grads of the forward outputs, ``output`` = grads of the inputs."""
        if self.terminated:
            return
        self.dirty = True
        if self.mix_construct or (self.module_construct and name.startswith("Cell.")):
            if parent is _AUTO:
                parent = self.bwd_module_stack[-1] if self.bwd_module_stack else None
            self.construct[name] = parent
        if not self.wanted(name):
            return
        self._backward_record(name, grad_outputs, grad_inputs)

    # ------------------------------------------------------------------ cells
    def param_grad(self, prefix, pname, grad):
        """Gradient of parameter ``pname`` of the cell ``prefix``: ``{prefix}.parameters_grad.{k}``,
        ``k`` advancing when a parameter of that cell reports a second time in the step."""
        if self.terminated or self.overflow or not self.want_backward:
            return
        self.dirty = True
        state = self.param_grad_state.get(prefix)
        if state is None or pname in state[1]:
            k = 0 if state is None else state[0] + 1
            state = self.param_grad_state[prefix] = [k, set()]
        state[1].add(pname)
        key = f"{prefix}.parameters_grad.{state[0]}"
        if not self.wanted(key):
            return
        rec = self.data.pop(key, None)     # moved to the end on every update (the reference's order)
        if rec is None:
            rec = {}
        self.data[key] = rec
        rec[pname] = [self.convert(grad, f"{key}.{pname}", self._save_for(key))]

    # ------------------------------------------------------------------ files
    def flush(self):
        if self.step_dir is None:
            return
        if not self.dirty and not self.pending_backward:
            return
        for finish in list(self.pending_backward.values()):
            finish()
        self.resolve()
        self.dirty = False
        jw.write_step_files(self.step_dir, self.step_files())
