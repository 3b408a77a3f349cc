"""Unreduced weight gradients under FSDP (spec 4.5.2): the rank's local, unsharded gradient of each parameter
before FSDP reduce-scatters it, recorded as ``grad_unreduced`` (kind ``pre_grad``).

* FSDP1 (``FullyShardedDataParallel``, ``use_orig_params=True`` required): a post-accumulate-grad hook on each
  ``FlatParameter``.  It runs inside autograd's AccumulateGrad, before the AccumulateGrad post-hook FSDP
  registers (its ``_post_backward_hook``, which reduce-scatters and replaces the gradient by its shard); at
  that moment ``flat_param.grad`` holds the rank's unsharded gradient (FSDP's documented precondition of that
  hook).  It is split back into the original parameters (``_numels_with_padding``, ``_is_padding_mask``,
  ``_shapes``, ``_params``).  The reference patches ``_post_backward_hook`` itself; a hook on the tensor
  sees the same gradient whether FSDP registered its hook before or after the monitor was attached.
* FSDP2 (``fully_shard``, DTensor parameters): ``foreach_reduce`` as ``_fsdp_param_group`` calls it is
  wrapped while a collected step's hooks are installed; its ``unsharded_grads`` are recorded against each
  ``FSDPParam.sharded_param`` before the original runs.

Nothing here changes a tensor or the order of FSDP's work; a failure is the monitor's usual logged failure.
"""

from __future__ import annotations

import logging

from msprobe.core.errors import MsprobeError

log = logging.getLogger("msprobe")


class FsdpConfigError(MsprobeError, ValueError):
    """FSDP1 without use_orig_params (the reference raises ValueError with this text)."""


FSDP1_FLAT_MESSAGE = "Only Support fsdp1 with use_orig_params=True"


def _fsdp1_class():
    try:
        from torch.distributed.fsdp import FullyShardedDataParallel
        return FullyShardedDataParallel
    except Exception:   # noqa: BLE001 - no distributed build
        return None


def _fsdp2_class():
    try:
        from torch.distributed.fsdp import FSDPModule
        return FSDPModule
    except Exception:   # noqa: BLE001
        try:
            from torch.distributed._composable.fsdp import FSDPModule
            return FSDPModule
        except Exception:   # noqa: BLE001
            return None


def find_fsdp(chunks):
    """(FSDP1 flat parameters, FSDP2 used) of the model chunks; FsdpConfigError for FSDP1 with flat
    parameters only (use_orig_params=False)."""
    fsdp1, fsdp2 = _fsdp1_class(), _fsdp2_class()
    flat, uses2 = [], False
    for chunk in chunks:
        for m in chunk.modules():
            if fsdp1 is not None and isinstance(m, fsdp1):
                handle = getattr(m, "_handle", None)
                if handle is None:
                    continue
                if not getattr(handle, "_use_orig_params", False):
                    raise FsdpConfigError(FSDP1_FLAT_MESSAGE)
                if all(handle.flat_param is not f for f in flat):
                    flat.append(handle.flat_param)
            elif fsdp2 is not None and isinstance(m, fsdp2):
                uses2 = True
    return flat, uses2


def fsdp1_params(flat_params):
    """The original parameters that the FSDP1 flat parameters hold."""
    out = set()
    for fp in flat_params:
        out.update(getattr(fp, "_params", None) or [])
        out.update(getattr(fp, "_shared_params", None) or [])
    return out


def fsdp2_params(chunks):
    """The parameters that fully_shard manages (DTensors registered on the modules)."""
    dtensor = _dtensor_class()
    return {p for chunk in chunks for p in chunk.parameters() if dtensor is not None and isinstance(p, dtensor)}


_DTENSOR = []


def _dtensor_class():
    if not _DTENSOR:
        try:
            from torch.distributed.tensor import DTensor
        except Exception:   # noqa: BLE001
            DTensor = None
        _DTENSOR.append(DTensor)
    return _DTENSOR[0]


def split_flat_grad(flat_param, grad):
    """[(original parameter, its gradient view)] of an unsharded FSDP1 flat gradient (padding skipped)."""
    out = []
    params = flat_param._params
    k = 0
    offset = 0
    for numel, is_pad in zip(flat_param._numels_with_padding, flat_param._is_padding_mask):
        if not is_pad:
            out.append((params[k], grad.narrow(0, offset, numel).view(flat_param._shapes[k])))
            k += 1
        offset += numel
    return out


class _Handle:
    def __init__(self, fn):
        self._fn = fn

    def remove(self):
        fn, self._fn = self._fn, None
        if fn is not None:
            fn()


def hook_fsdp1(flat_params, record):
    """Hooks calling ``record(param, unsharded_grad)`` for every original parameter of each flat parameter
    once its unsharded local gradient is accumulated (before FSDP reduce-scatters it)."""
    handles = []
    for fp in flat_params:
        def hook(flat_param):
            g = flat_param.grad
            if g is None:
                return
            for p, view in split_flat_grad(flat_param, g):
                record(p, view)
        handles.append(fp.register_post_accumulate_grad_hook(hook))
    return handles


# FSDP2: one wrapper of foreach_reduce in _fsdp_param_group, shared by the monitors that listen to it
_listeners = []
_saved = {}


def _group_module():
    try:
        from torch.distributed.fsdp._fully_shard import _fsdp_param_group
    except ImportError:     # torch < 2.6
        from torch.distributed._composable.fsdp import _fsdp_param_group
    return _fsdp_param_group


def _wrapped_foreach_reduce(fsdp_params, unsharded_grads, *args, **kwargs):
    for record in list(_listeners):
        try:
            for fp, g in zip(fsdp_params, unsharded_grads):
                record(getattr(fp, "sharded_param", None), g)
        except Exception as exc:   # noqa: BLE001 - the listener logs its own failures; never into training
            log.debug("msprobe monitor: foreach_reduce listener failed: %s", exc)
    return _saved["foreach_reduce"](fsdp_params, unsharded_grads, *args, **kwargs)


def _wraps_ours(fn):
    """Whether ``fn`` is the monitor's wrapper or a wrapper of it (the dump's FSDP wrappers keep what they wrap
    in ``__msprobe_original__``, functools.wraps in ``__wrapped__``)."""
    seen = 0
    while fn is not None and seen < 32:
        if fn is _wrapped_foreach_reduce:
            return True
        fn = getattr(fn, "__msprobe_original__", None) or getattr(fn, "__wrapped__", None)
        seen += 1
    return False


def hook_fsdp2(record):
    """``record(sharded_param, unsharded_grad)`` for each parameter FSDP2 reduces, until the handle is removed.
    The wrapper is put in once; another tool (the dump) may wrap it in turn and restore it later: the wrapper is
    never wrapped around itself, and it stays in as a pass-through when it cannot be taken out."""
    mod = _group_module()
    current = mod.foreach_reduce
    if not _wraps_ours(current):
        _saved["foreach_reduce"] = current
        mod.foreach_reduce = _wrapped_foreach_reduce
    _listeners.append(record)

    def undo():
        if record in _listeners:
            _listeners.remove(record)
        if not _listeners and mod.foreach_reduce is _wrapped_foreach_reduce:
            mod.foreach_reduce = _saved.pop("foreach_reduce")
    return [_Handle(undo)]


def local(t):
    """A DTensor's local shard (what this rank holds); any other tensor as it is."""
    dtensor = _dtensor_class()
    if dtensor is not None and isinstance(t, dtensor):
        return t.to_local()
    return t


__all__ = ["FsdpConfigError", "FSDP1_FLAT_MESSAGE", "find_fsdp", "fsdp1_params", "fsdp2_params",
           "hook_fsdp1", "hook_fsdp2", "local", "split_flat_grad"]
