"""``PrecisionDebugger.save`` at level ``debug``: single-point saving of user values into debug.json.

Framework-free: a framework passes a :class:`SaveAdapter` that knows its tensors, how to register a
gradient hook and how to run tool code guarded.  Records are ``{name}.{n}.debug`` (the value, any
nesting of tensors, numbers, str, lists/tuples and str-keyed dicts) and, with ``save_backward``,
``{name}_grad.{n}.debug`` (the same structure holding the gradients as they arrive).
"""

from __future__ import annotations

import logging

log = logging.getLogger("msprobe")
MAX_DEPTH = 400


class SaveAdapter:
    """What debug_save needs of a framework."""

    def is_tensor(self, value) -> bool:
        raise NotImplementedError

    def wants_grad(self, tensor) -> bool:
        """Whether a gradient of ``tensor`` can arrive (it takes part in autograd)."""
        raise NotImplementedError

    def grad_enabled(self) -> bool:
        return True

    def register_hook(self, tensor, hook) -> None:
        tensor.register_hook(hook)

    def guarded(self, errors, where, fn, *args):
        raise NotImplementedError

    def in_tool(self) -> bool:
        """True while tool code runs (hooks firing then are the tool's own)."""
        return False


def check_value(value, is_tensor, depth: int = 0):
    """None when ``value`` can be saved, else why not."""
    if depth > MAX_DEPTH:
        return "it is nested more than 400 levels deep"
    if is_tensor(value) or isinstance(value, (bool, int, float, str)) or value is None:
        return None
    if isinstance(value, (list, tuple)):
        for x in value:
            why = check_value(x, is_tensor, depth + 1)
            if why:
                return why
        return None
    if isinstance(value, dict):
        for k, x in value.items():
            if not isinstance(k, str):
                return f"dict key {k!r} is not a str"
            why = check_value(x, is_tensor, depth + 1)
            if why:
                return why
        return None
    return f"{type(value).__name__} values cannot be saved (tensors, numbers, str and lists/tuples/dicts of them can)"


def _grad_template(value, adapter: SaveAdapter, slots, path=()):
    if adapter.is_tensor(value):
        if adapter.wants_grad(value):
            slots.append((path, value))
        return None
    if isinstance(value, (list, tuple)):
        return [_grad_template(x, adapter, slots, path + (i,)) for i, x in enumerate(value)]
    if isinstance(value, dict):
        return {k: _grad_template(x, adapter, slots, path + (k,)) for k, x in value.items()}
    return None


def _put(template, path, grad):
    if not path:
        return grad
    node = template
    for p in path[:-1]:
        node = node[p]
    node[path[-1]] = grad
    return template


def debug_save(service, adapter: SaveAdapter, value, name, save_backward=True) -> None:
    if not isinstance(name, str) or not name:
        log.warning("msprobe: PrecisionDebugger.save: name must be a non-empty str; nothing saved")
        return
    why = check_value(value, adapter.is_tensor)
    if why:
        log.warning("msprobe: PrecisionDebugger.save(%r): %s; nothing saved", name, why)
        return
    if service.ended:
        return
    col = service.collector

    def record():
        service._open_step()
        return col.debug_save(name, value)

    n = adapter.guarded(service.errors, f"{name}.debug", record)
    if n is None:
        return
    if not save_backward or not adapter.grad_enabled():
        return
    slots = []
    template = _grad_template(value, adapter, slots)
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
            if col.generation == gen and not adapter.in_tool():
                adapter.guarded(service.errors, key, record_grad, path, grad)
            return None
        return hook

    for path, t in slots:
        try:
            adapter.register_hook(t, make_hook(path))
        except Exception as exc:  # noqa: BLE001 - a tensor outside autograd: no gradient to save
            service.errors.record(key, exc)
