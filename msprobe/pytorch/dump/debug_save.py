"""``PrecisionDebugger.save``: single-point saving of user values at level ``debug`` (debug.json)."""
import logging

import torch

from msprobe.pytorch.dump.hooks import TLS, guarded

log = logging.getLogger("msprobe")
_MAX_DEPTH = 400


def _check(value, depth=0):
    """None when ``value`` can be saved, else why not."""
    if depth > _MAX_DEPTH:
        return "it is nested more than 400 levels deep"
    if isinstance(value, (torch.Tensor, bool, int, float, str)) or value is None:
        return None
    if isinstance(value, (list, tuple)):
        for x in value:
            why = _check(x, depth + 1)
            if why:
                return why
        return None
    if isinstance(value, dict):
        for k, x in value.items():
            if not isinstance(k, str):
                return f"dict key {k!r} is not a str"
            why = _check(x, depth + 1)
            if why:
                return why
        return None
    return f"{type(value).__name__} values cannot be saved (tensors, numbers, str and lists/tuples/dicts of them can)"


def _grad_template(value, slots, path=()):
    if isinstance(value, torch.Tensor):
        if value.requires_grad:
            slots.append((path, value))
        return None
    if isinstance(value, (list, tuple)):
        return [_grad_template(x, slots, path + (i,)) for i, x in enumerate(value)]
    if isinstance(value, dict):
        return {k: _grad_template(x, slots, path + (k,)) for k, x in value.items()}
    return None


def _put(template, path, grad):
    if not path:
        return grad
    node = template
    for p in path[:-1]:
        node = node[p]
    node[path[-1]] = grad
    return template


def debug_save(service, value, name, save_backward=True):
    if not isinstance(name, str) or not name:
        log.warning("msprobe: PrecisionDebugger.save: name must be a non-empty str; nothing saved")
        return
    why = _check(value)
    if why:
        log.warning("msprobe: PrecisionDebugger.save(%r): %s; nothing saved", name, why)
        return
    if service.ended:
        return
    col = service.collector

    def record():
        service._open_step()
        return col.debug_save(name, value)

    n = guarded(service.errors, f"{name}.debug", record)
    if n is None:
        return
    if not save_backward or not torch.is_grad_enabled():
        return
    slots = []
    template = _grad_template(value, slots)
    if not slots:
        return
    key = f"{name}_grad.{n}.debug"
    gen = col.generation
    state = {"template": template}

    def record_grad(path, grad):
        state["template"] = _put(state["template"], path, grad)
        col.debug_grad(key, state["template"])

    def make_hook(path):
        def hook(grad):
            if col.generation == gen and not TLS.depth:
                guarded(service.errors, key, record_grad, path, grad)
            return None
        return hook

    for path, t in slots:
        t.register_hook(make_hook(path))
