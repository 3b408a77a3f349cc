"""The training side of the online pre-check (PyTorch): ``PrecisionDebugger`` with task "tensor" and
``"online_run_ut": true`` in the tensor block.

Every selected forward API call (level L1 patches; scope/list apply; ``Distributed.*`` is skipped) is captured as
its inputs (copied before the call: an in-place API changes them) and its output, copied to CPU, and handed to the
:class:`~msprobe.core.acc_check.online.client.Sender`, which streams it to the checker (``run_ut -config`` with
``is_online``). Nothing is written into dump_path. The call itself runs exactly as without the tool, and a failure
of the capture is logged and never reaches the training. The sender ends (STOP, totals in the log) when the last
configured step has passed, at ``PrecisionDebugger`` end, or at exit.

The aten ops of the backward are sent too, as ``Aten.{op}.{n}`` calls (msprobe.pytorch.acc_check.online_backward),
unless ``online_run_ut_recompute`` is true.
"""

from __future__ import annotations

import atexit
import logging
import os
import threading

import torch

from msprobe.core.acc_check.online import aten as A
from msprobe.core.acc_check.online.client import Sender
from msprobe.core.acc_check.online.protocol import ITEMSIZE
from msprobe.pytorch.dump.hooks import RT, TLS, _compiling, _DisableTF
from msprobe.pytorch.dump.service import Service

log = logging.getLogger("msprobe")
_TENSOR_TYPES = {torch.nn.Parameter: "torch.nn.parameter.Parameter"}


class _Capture:
    """Turns call values into a dump-style record whose tensor leaves point into a list of raw buffers."""

    def __init__(self, collector):
        self.col = collector
        self.tensors = []

    def value(self, v, path, key=None):
        if isinstance(v, torch.Tensor):
            t = v.detach()
            if t.is_sparse or t.is_quantized or t.is_meta or t.is_nested:
                return None
            dtype = str(t.dtype)
            if dtype not in ITEMSIZE:  # not sent (float8 ...): the checker skips the call, naming the tensor
                return {"type": _TENSOR_TYPES.get(type(v), "torch.Tensor"), "dtype": dtype, "shape": list(t.shape),
                        "requires_grad": bool(v.requires_grad)}
            c = t.to("cpu", copy=True).contiguous()
            self.tensors.append((dtype, list(c.shape), c))
            return {"type": _TENSOR_TYPES.get(type(v), "torch.Tensor"), "dtype": dtype, "shape": list(c.shape),
                    "requires_grad": bool(v.requires_grad), "data_name": f"@{len(self.tensors) - 1}"}
        if isinstance(v, (list, tuple)) and not isinstance(v, torch.Size) and not hasattr(v, "_fields"):
            return [self.value(x, f"{path}.{i}") for i, x in enumerate(v)]
        if isinstance(v, dict):
            return {str(k): self.value(x, f"{path}.{k}", k) for k, x in v.items()}
        if key is not None:
            return self.col.kwargs_value(key, v, path, False)
        return self.col.convert(v, path, False)


def _raw(entry):
    """(dtype, shape, tensor) -> (dtype, shape, bytes view) in the sender thread (no copy)."""
    dtype, shape, c = entry
    if c.numel() == 0:
        return dtype, shape, b""
    return dtype, shape, c.reshape(-1).view(torch.uint8).numpy().data


class OnlineHandler:
    """``Hooks.api_handler`` of the online mode."""

    def __init__(self, service):
        self.service = service
        self.sender = None
        self.step = 0
        self.warned = set()
        self.backward_on = False    # set by OnlineService: torch >= 2 and online_run_ut_recompute false
        self._count_lock = threading.Lock()

    def begin(self, step, rank):
        self.step = step
        if self.sender is None:
            try:
                self.sender = Sender(self.service.cfg.online, rank if rank is not None else 0)
            except Exception as exc:  # noqa: BLE001 - never into the training: nothing is sent then
                self._warn("the sender", exc)

    def __call__(self, name, func, args, kwargs, distributed=False):
        TLS.depth += 1      # calls made by this one (and by the capture) are not captured
        try:
            col = self.service.collector
            n = col.api_count.get(name, 0)
            col.api_count[name] = n + 1
            full = f"{name}.{n}"
            capture = rec = None
            if distributed:
                if "dist" not in self.warned:
                    self.warned.add("dist")
                    log.info("msprobe online run_ut: api %s is not supported, skip", full)
            elif self.sender is not None:
                try:
                    if col.wanted(f"{full}.forward"):
                        with _DisableTF():
                            capture = _Capture(col)
                            rec = {"input_args": [capture.value(a, f"{full}.input.{i}") for i, a in enumerate(args)],
                                   "input_kwargs": {k: capture.value(v, f"{full}.kwargs.{k}", k)
                                                    for k, v in kwargs.items() if k != "device"}}
                except Exception as exc:  # noqa: BLE001 - never into the training
                    self._warn(full, exc)
                    capture = None
            out = func(*args, **kwargs)
            if capture is not None:
                try:
                    with _DisableTF():
                        outs = out if isinstance(out, (tuple, list)) and not isinstance(out, torch.Size) else [out]
                        rec["output"] = [capture.value(o, f"{full}.output.{i}") for i, o in enumerate(outs)]
                        raws = [_raw(e) for e in capture.tensors]
                    self.sender.submit(full, self.step, rec, raws)
                except Exception as exc:  # noqa: BLE001
                    self._warn(full, exc)
            return out
        finally:
            TLS.depth -= 1

    # ------------------------------------------------------------------ backward aten ops (online_backward)
    def capturing(self):
        """Whether a backward starting now has its aten ops sent."""
        svc = self.service
        return (self.backward_on and self.sender is not None and RT.on and not TLS.depth and not _compiling()
                and os.getpid() == svc.pid and not svc.ended)

    def aten_before(self, op, overload, args, kwargs):
        """Called by the dispatch mode before an aten op runs: its number, and its inputs copied (None when the
        op is not sent). Never raises."""
        if TLS.depth or self.sender is None:
            return None         # an op run by a captured API call or by the tool itself
        full = op
        TLS.depth += 1
        try:
            col = self.service.collector
            key = f"{A.PREFIX}.{op}"
            with self._count_lock:      # the engine may run a CUDA backward on its device threads
                n = col.api_count.get(key, 0)
                col.api_count[key] = n + 1
            full = A.call_name(op, n)
            if not A.listed(self.service.cfg.list or (), full):
                return None
            from msprobe.pytorch.acc_check.online_backward import _AtenCapture, _plain_tensors
            if not (_plain_tensors(args) and _plain_tensors(kwargs)):
                if "subclass" not in self.warned:
                    self.warned.add("subclass")
                    log.info("msprobe online run_ut: %s takes a tensor subclass or meta tensor: backward ops like it "
                             "are not sent", full)
                return None
            with _DisableTF():
                capture = _AtenCapture(self.service.collector)
                rec = {"input_args": [capture.value(a, f"{full}.input.{i}") for i, a in enumerate(args)],
                       "input_kwargs": {k: capture.value(v, f"{full}.kwargs.{k}", k) for k, v in kwargs.items()},
                       "overload": overload}
            return full, capture, rec
        except Exception as exc:  # noqa: BLE001 - never into the training
            self._warn(full, exc)
            return None
        finally:
            TLS.depth -= 1

    def aten_after(self, pending, out):
        """Called by the dispatch mode after the op: its outputs copied, the call queued. Never raises."""
        full, capture, rec = pending
        TLS.depth += 1
        try:
            with _DisableTF():
                outs = out if isinstance(out, (tuple, list)) else [out]
                rec["output"] = [capture.value(o, f"{full}.output.{i}") for i, o in enumerate(outs)]
                raws = [_raw(e) for e in capture.tensors]
            self.sender.submit(full, self.step, rec, raws)
        except Exception as exc:  # noqa: BLE001 - never into the training
            self._warn(full, exc)
        finally:
            TLS.depth -= 1

    def _warn(self, name, exc):
        key = type(exc).__name__
        if key not in self.warned:
            self.warned.add(key)
            log.warning("msprobe online run_ut: %s not captured: %s: %s (later failures of this kind are silent)",
                        name, key, exc)

    def close(self):
        if self.sender is not None:
            sender, self.sender = self.sender, None
            return sender.close()
        return None


class OnlineService(Service):
    """The dump service with every API call sent to the checker instead of recorded (no dump files)."""

    def __init__(self, cfg, npu_module=None):
        super().__init__(cfg, npu_module)
        self.online = OnlineHandler(self)
        self.hooks.api_handler = self.online
        self.stats = None
        self.backward_patch = None
        if not cfg.online.recompute:
            from msprobe.pytorch.acc_check.online_backward import BackwardPatch, supported
            why = supported()
            if why:
                log.warning("msprobe online run_ut: the backward aten ops are not sent with %s", why)
            else:
                self.online.backward_on = True
                self.backward_patch = BackwardPatch(self.online)
        atexit.register(self._close_at_exit)

    def _open_step(self):
        self.active_step = self.current_iter    # no step directory: nothing is written into dump_path

    def _mark_recording(self):
        pass

    def _flush(self):
        pass

    def _begin(self, model):
        self.online.begin(self.current_iter, self.rank())
        super()._begin(model)
        if self.backward_patch is not None:
            try:
                self.backward_patch.install()
            except Exception as exc:  # noqa: BLE001 - never into the training
                self.online._warn("the backward", exc)

    def _remove_backward_patch(self):
        if self.backward_patch is not None:
            try:
                self.backward_patch.remove()
            except Exception:  # noqa: BLE001
                pass

    def _not_dumped(self):
        super()._not_dumped()
        self._remove_backward_patch()

    def end(self):
        was = self.ended
        super().end()
        self._remove_backward_patch()
        if not was:
            self.stats = self.online.close()

    def _close_at_exit(self):
        try:
            if os.getpid() == self.pid and self.online.sender is not None:
                self._switch_off()
                self._remove_backward_patch()
                self.stats = self.online.close()
        except Exception:  # noqa: BLE001 - nothing may fail at exit
            pass
