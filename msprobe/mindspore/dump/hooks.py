"""Capturing MindSpore PyNative API, Primitive and Cell calls without changing the training.

How calls are seen
  * APIs (L1, mix): ``mindspore.ops.*`` (``Functional.*``), ``mindspore.mint.*`` (``Mint.*``),
    ``mindspore.mint.nn.functional.*`` (``MintFunctional.*``), ``Tensor`` methods (``Tensor.*``) and the
    distributed functions are wrapped attributes, set at ``start()`` and restored at ``stop()``. MindSpore's
    own layers look these up at call time (``ops.relu``), so their calls are seen too. Only the
    outermost call of a chain is recorded (a per-thread depth counter, which also hides the tool's own work).
  * Primitives (L1, mix, with a model): every ``Primitive`` held as an attribute of a Cell of the model
    gets its class swapped for a subclass whose ``__call__`` records ``Primitive.{attr}.{Class}.{n}``.
  * Cells (L0, mix): forward pre-hooks and forward hooks (``Cell.{path}.{Class}.forward.{n}``).

Backward
  Gradients are observed through ``ops.HookBackward``, an identity in the forward pass whose callback
  sees the gradient flowing back (and returns None, so the gradient is unchanged): one around the
  float tensor inputs (grads w.r.t. the inputs: the record's ``output``) and one around the outputs
  (grads w.r.t. the outputs: the record's ``input``). Weight gradients come from ``Parameter.register_hook``.
  HookBackward is only inserted while MindSpore is building a gradient graph.

Every hook body runs inside :func:`guarded`: an exception is written once per name to
``dump_error_info.log`` and training goes on.
"""
import functools
import logging
import threading

import mindspore as ms
from mindspore import ops
from mindspore.common.api import _pynative_executor
from mindspore.ops.primitive import Primitive

from msprobe.core.dump.patching import MISSING, undo_patches

log = logging.getLogger("msprobe")
_MISSING = MISSING
_FLOAT_PREFIXES = ("Float", "BFloat", "Complex")


class _TLS(threading.local):
    depth = 0


TLS = _TLS()


class _Runtime:
    on = False          # between start() and stop() of a dumped step
    primitives_on = False


RT = _Runtime()


def api_lists():
    from msprobe.mindspore.dump.api_lists import API_LISTS
    return API_LISTS


def guarded(errors, where, fn, *args):
    """Run tool code from a hook: nested calls are not recorded; an exception is logged, not raised."""
    TLS.depth += 1
    try:
        return fn(*args)
    except Exception as exc:
        errors.record(where, exc)
        return None
    finally:
        TLS.depth -= 1


_FLOAT_DTYPES = {}


def _is_float(t):
    d = t.dtype
    r = _FLOAT_DTYPES.get(d)
    if r is None:
        r = _FLOAT_DTYPES[d] = str(d).startswith(_FLOAT_PREFIXES)
    return r


def _grad_on():
    try:
        return _pynative_executor.requires_grad()
    except Exception:
        return False


def _hook_backward(fn, tensors):
    """``ops.HookBackward(fn)`` applied to ``tensors``; returns the identity outputs as a list."""
    res = ops.HookBackward(fn)(*tensors)
    if len(tensors) == 1:
        return [res[0] if isinstance(res, tuple) else res]
    return list(res)


class Hooks:
    def __init__(self, service):
        self.service = service
        self.col = service.collector
        self.errors = service.errors
        self.api_level = service.cfg.level in ("L1", "mix")
        self.cell_level = service.cfg.level in ("L0", "mix")
        self._targets = []
        self._plan = None
        self._patched = []
        self.hooked_models = []
        self._cell_handles = []
        self._param_handles = []
        self._hooked_cells = []      # (cell, our hook functions): taken off while a jit graph compiles and runs
        self._bprop_constructs = []  # (cell, its own construct attribute or None, our wrapper): custom-bprop Cells
        self._prim_classes = {}      # (original class, attr) -> wrapped subclass
        self._prims = []             # (instance, original class)
        self.prim_count = {}
        # another task's handler of wrapped API calls instead of recording them: (name, func, args, kwargs,
        # distributed) -> the call's output (task free_benchmark: msprobe.mindspore.free_benchmark)
        self.api_handler = None

    # ------------------------------------------------------------------ APIs
    def install_api_patches(self):
        if not self.api_level or self._targets:
            return
        lists = api_lists()
        from mindspore import mint
        groups = [(ops, "ops", "Functional"), (ms.Tensor, "tensor", "Tensor"), (mint, "mint", "Mint")]
        try:
            from mindspore.mint.nn import functional as mint_f
            groups.append((mint_f, "mint.nn.functional", "MintFunctional"))
        except Exception:
            pass
        try:
            from mindspore.communication import comm_func
            groups.append((comm_func, "communication.comm_func", "Distributed"))
        except Exception:
            pass
        try:
            from mindspore.mint import distributed as mint_dist
            groups.append((mint_dist, "mint.distributed", "MintDistributed"))
        except Exception:
            pass
        targets = []
        for owner, key, prefix in groups:
            for n in lists.get(key, ()):
                if isinstance(owner, type):
                    raw = owner.__dict__.get(n, _MISSING)
                    if raw is _MISSING:
                        raw = getattr(owner, n, None)
                    if raw is None or isinstance(raw, (staticmethod, classmethod, property)) or not callable(raw):
                        continue
                elif not callable(getattr(owner, n, None)) or isinstance(getattr(owner, n), type):
                    continue
                targets.append((owner, n, f"{prefix}.{n}"))
        self._targets = targets

    def patch_on(self):
        install_jit(self)
        if self._patched or not self._targets:
            return
        if self._plan is None:
            plan = []
            for owner, attr, name in self._targets:
                current = getattr(owner, attr, None)
                if current is None or getattr(current, "__msprobe_original__", None) is not None:
                    continue
                stored = owner.__dict__.get(attr, _MISSING) if isinstance(owner, type) else current
                plan.append((owner, attr, stored, self._wrapper(name, current)))
            self._plan = plan
        for owner, attr, stored, wrapper in self._plan:
            try:
                setattr(owner, attr, wrapper)
            except Exception:
                continue
            self._patched.append((owner, attr, stored))

    def patch_off(self):
        undo_patches(self._patched)
        self._patched = []

    def _api_patches_off(self):
        undo_patches(self._patched)
        self._patched = []

    def _detach_cell_hooks(self):
        """Take msprobe's forward hooks off the hooked Cells (a Cell called inside a jit function would have
        them compiled into the graph, which MindSpore rejects); returns what to put back, order kept."""
        out = []
        for cell, fns in self._hooked_cells:
            for attr in _HOOK_DICTS:
                d = cell.__dict__.get(attr)
                if not d:
                    continue
                items = list(d.items())
                keep = [(k, v) for k, v in items if not any(v is f for f in fns)]
                if len(keep) != len(items):
                    d.clear()
                    d.update(keep)
                    out.append(functools.partial(_refill, d, items))
        for cell, orig, wrapper in self._bprop_constructs:   # (the compiler parses a construct's source)
            if cell.__dict__.get("construct") is wrapper:
                _set_construct(cell, orig)
                out.append(functools.partial(_set_construct, cell, wrapper))
        return out

    # ------------------------------------------------------------------ @jit regions
    def call_jit(self, executor, run, args, kwargs):
        """One call of a ``@mindspore.jit`` function or Cell construct: ``Jit.{name}.{n}.forward`` with the
        call's arguments (without the Cell itself) and output. The API patches are taken off while the graph
        compiles and runs (the compiler must see MindSpore's own functions), then put back."""
        if not self.api_level:            # L0: no Jit record, only the Cell hooks are taken off
            detached = self._detach_cell_hooks()
            try:
                return run(*args, **kwargs)
            finally:
                for undo in detached:
                    undo()
        col = self.col
        obj = getattr(executor, "obj", None)
        fn = getattr(executor, "fn", None)
        name = f"Jit.{type(obj).__name__ if obj is not None else getattr(fn, '__name__', 'function')}"
        shown = args[1:] if obj is not None and args and args[0] is obj else args
        n = col.api_count.get(name, 0)
        fwd = f"{name}.{n}.forward"
        rec = None
        TLS.depth += 1
        try:
            try:
                rec = col.api_inputs(fwd, shown, kwargs)
            except Exception as exc:
                self.errors.record(fwd, exc)
            state = None
            if col.want_backward and _grad_on():
                # Jit.{name}.{n}.backward: gradients of the outputs (input) and of the float tensor arguments
                # (output), through the same HookBackward identities as an API's backward record
                try:
                    lead = len(args) - len(shown)
                    hooked, state = self._hook_inputs(f"{name}.{n}.backward", tuple(shown))
                    args = tuple(args[:lead]) + tuple(hooked)
                except Exception as exc:
                    state = None
                    self.errors.record(fwd, exc)
            patched = bool(self._patched)
            self._api_patches_off()
            detached = self._detach_cell_hooks()
            try:
                out = run(*args, **kwargs)
            finally:
                for undo in detached:
                    undo()
                if patched:
                    self.patch_on()
            col.api_count[name] = n + 1
            try:
                col.api_outputs(fwd, rec, out, shown)
                if state is not None:
                    out = self._hook_outputs(state, out)
            except Exception as exc:
                self.errors.record(fwd, exc)
            return out
        finally:
            TLS.depth -= 1

    def _wrapper(self, name, func):
        call = self.call

        @functools.wraps(func)
        def wrapper(*args, **kwargs):
            if TLS.depth or not RT.on:
                return func(*args, **kwargs)
            return call(name, func, args, kwargs)

        wrapper.__msprobe_original__ = func
        return wrapper

    def call(self, name, func, args, kwargs):
        if self.api_handler is not None:
            return self.api_handler(name, func, args, kwargs, False)
        col = self.col
        n = col.api_count.get(name, 0)
        fwd = f"{name}.{n}.forward"
        TLS.depth += 1
        try:
            rec = None
            shown = args
            try:
                rec = col.api_inputs(fwd, args, kwargs)
            except Exception as exc:
                self.errors.record(fwd, exc)
            state = None
            if col.want_backward and _grad_on():
                try:
                    args, state = self._hook_inputs(f"{name}.{n}.backward", args)
                except Exception as exc:
                    self.errors.record(fwd, exc)
            out = func(*args, **kwargs)
            col.api_count[name] = n + 1
            try:
                col.api_outputs(fwd, rec, out, shown)
                if state is not None:
                    out = self._hook_outputs(state, out)
                if col.terminated:
                    self.service.overflow_done()
            except Exception as exc:
                self.errors.record(fwd, exc)
            return out
        finally:
            TLS.depth -= 1

    def _backward_state(self, bname, parent=None):
        return {"name": bname, "out": None, "has_in": False, "done": False, "gen": self.col.generation,
                "n_in": 0}

    def _hook_float_items(self, state, items, on_grads):
        """Wrap the float tensors among ``items`` in one HookBackward that calls ``on_grads(state, grads)``
        (guarded, for the current step only, once).  Returns (the new items, the count), or (None, 0)."""
        idx = [i for i, a in enumerate(items) if isinstance(a, ms.Tensor) and _is_float(a)]
        if not idx:
            return None, 0
        col = self.col
        errors = self.errors

        def hook(grads):
            if state["gen"] == col.generation and not state["done"] and not TLS.depth:
                guarded(errors, state["name"], on_grads, state, grads)
            return None

        hooked = _hook_backward(hook, [items[i] for i in idx])
        new = list(items)
        for i, t in zip(idx, hooked):
            new[i] = t
        return new, len(idx)

    def _hook_inputs(self, bname, args):
        """HookBackward around the float tensor args (grads w.r.t. the inputs end the backward record)."""
        state = self._backward_state(bname)
        new, n = self._hook_float_items(state, args, self._finish_backward)
        if new is None:
            return args, state
        state["has_in"] = True
        state["n_in"] = n
        return tuple(new), state

    def _hook_outputs(self, state, out):
        """HookBackward around the float tensor outputs (grads w.r.t. the outputs)."""
        if isinstance(out, ms.Tensor):
            items, kind = [out], "t"
        elif isinstance(out, (tuple, list)):
            items, kind = list(out), type(out)
        else:
            return out
        items, _ = self._hook_float_items(state, items, self._got_output_grads)
        if items is None:
            return out
        if kind == "t":
            return items[0]
        if kind is tuple or kind is list:
            return kind(items)
        try:
            return kind(items)
        except Exception:
            return out

    def _got_output_grads(self, state, grads):
        state["out"] = grads
        if not state["has_in"]:
            self._finish_backward(state, ())
            return
        col = self.col
        col.pending_backward[state["name"]] = lambda: self._finish_backward(state, [None] * state["n_in"])

    def _finish_backward(self, state, grads):
        if state["done"]:
            return
        state["done"] = True
        col = self.col
        col.pending_backward.pop(state["name"], None)
        col.backward(state["name"], state["out"] if state["out"] is not None else (), grads)

    # ------------------------------------------------------------------ primitives
    def register_primitives(self, model):
        """Swap the class of every Primitive held by a Cell of ``model`` for a recording subclass."""
        models = list(model) if isinstance(model, (list, tuple)) else [model]
        seen = set()
        for root in models:
            inside = jit_inside(root)
            for _, cell in root.cells_and_names():
                if id(cell) in inside or _is_jit_cell(cell):
                    continue             # compiled by @jit: recorded as one Jit.* call, not per Primitive
                for attr, val in list(vars(cell).items()):
                    if not isinstance(val, Primitive) or id(val) in seen:
                        continue
                    seen.add(id(val))
                    cls = type(val)
                    if getattr(cls, "__msprobe_primitive__", False):
                        continue
                    sub = self._prim_classes.get((cls, attr))
                    if sub is None:
                        sub = self._prim_classes[(cls, attr)] = self._primitive_class(cls, attr)
                    try:
                        val.__class__ = sub
                        self._prims.append((val, cls))
                    except Exception as exc:
                        self.errors.record(f"Primitive.{attr}.{cls.__name__}", exc)

    def _primitive_class(self, cls, attr):
        key = f"{attr}.{cls.__name__}"
        hooks = self
        orig_call = cls.__call__

        def __call__(prim, *args, **kwargs):
            n = hooks.prim_count.get(key, -1) + 1
            hooks.prim_count[key] = n
            if TLS.depth or not RT.primitives_on:
                return orig_call(prim, *args, **kwargs)
            return hooks.call_primitive(f"Primitive.{key}.{n}", orig_call, prim, args, kwargs)

        return type(cls.__name__, (cls,), {"__call__": __call__, "__msprobe_primitive__": True,
                                            "__module__": cls.__module__})

    def call_primitive(self, base, orig_call, prim, args, kwargs):
        col = self.col
        fwd = f"{base}.forward"
        bname = f"{base}.backward"
        TLS.depth += 1
        try:
            rec = None
            try:
                rec = col.api_inputs(fwd, args, kwargs)      # the arguments as passed (parameters stay parameters)
            except Exception as exc:
                self.errors.record(fwd, exc)
            shown = args
            captured = None
            if col.want_backward and _grad_on():
                try:
                    args, captured = self._hook_primitive_inputs(bname, args)
                except Exception as exc:
                    self.errors.record(fwd, exc)
            out = orig_call(prim, *args, **kwargs)
            try:
                col.api_outputs(fwd, rec, out, shown)
                if captured is not None:
                    out = self._hook_primitive_outputs(bname, captured, out)
                if col.terminated:
                    self.service.overflow_done()
            except Exception as exc:
                self.errors.record(fwd, exc)
            return out
        finally:
            TLS.depth -= 1

    def _primitive_grad(self, bname, captured, side, grads):
        """A primitive's backward record, updated as each gradient arrives (in arrival order)."""
        captured[side].extend(grads)
        self.col.backward(bname, captured["input"], captured["output"])

    def _hook_primitive_inputs(self, bname, args):
        captured = {"input": [], "output": [], "gen": self.col.generation}
        col = self.col
        errors = self.errors

        def in_hook(grads):
            if captured["gen"] == col.generation and not TLS.depth:
                guarded(errors, bname, self._primitive_grad, bname, captured, "output", grads)
            return None

        new = list(args)
        for i, a in enumerate(args):
            if isinstance(a, ms.Tensor) and _is_float(a):
                new[i] = _hook_backward(in_hook, [a])[0]
        return tuple(new), captured

    def _hook_primitive_outputs(self, bname, captured, out):
        col = self.col
        errors = self.errors

        def out_hook(grads):
            if captured["gen"] == col.generation and not TLS.depth:
                guarded(errors, bname, self._primitive_grad, bname, captured, "input", grads)
            return None

        if isinstance(out, ms.Tensor):
            return _hook_backward(out_hook, [out])[0] if _is_float(out) else out
        if isinstance(out, tuple):
            return tuple(_hook_backward(out_hook, [t])[0] if isinstance(t, ms.Tensor) and _is_float(t) else t
                         for t in out)
        return out

    # ------------------------------------------------------------------ cells
    def register_model(self, model):
        if any(model is m for m in self.hooked_models):
            return
        self.hooked_models.append(model)
        models = list(model) if isinstance(model, (list, tuple)) else [model]
        many = isinstance(model, (list, tuple))
        for i, root in enumerate(models):
            inside = jit_inside(root)
            for path, cell in root.cells_and_names():
                if cell is root or id(cell) in inside:
                    continue
                prefix = f"Cell.{i}.{path}" if many else f"Cell.{path}"
                self._hook_cell(cell, f"{prefix}.{cell.__class__.__name__}")

    def _hook_cell(self, cell, prefix):
        hooks = self
        col = self.col
        errors = self.errors
        frames = []
        params = [(n.split(".")[-1], p) for n, p in cell.parameters_dict(recurse=False).items()]

        def record_inputs(args, kwargs):
            name, n, parent, expand, inputs = col.module_enter(prefix, args, kwargs)
            state = None
            new_args = None
            if col.want_backward and _grad_on():
                state = hooks._backward_state(f"{prefix}.backward.{n}")
                state["cell"] = True
                new_args, _ = hooks._cell_hook_inputs(state, args)
            frames.append((name, parent, expand, inputs, col.generation, state))
            return new_args

        def record_outputs(frame, output):
            name, parent, expand, inputs, _gen, state = frame
            col.module_exit(name, expand)
            col.module_forward(name, parent, inputs, output, params)
            if state is not None:
                return hooks._cell_hook_outputs(state, output)
            return None

        def pre(c, args, kwargs):
            if RT.on and not TLS.depth:
                new_args = guarded(errors, prefix, record_inputs, args, kwargs)
                if new_args is not None:
                    return new_args, kwargs
            return None

        def close(output, grads=True):
            """Record the call's outputs (``grads``: and hook them for its backward record); the hooked
            outputs, or None."""
            if frames:
                frame = frames.pop()
                if frame[4] == col.generation and RT.on and not TLS.depth:
                    return guarded(errors, frame[0], record_outputs, frame if grads else frame[:5] + (None,), output)
            return None

        def post(c, args, kwargs, output):
            return close(output)

        self._cell_handles.append(cell.register_forward_pre_hook(pre, with_kwargs=True))
        self._cell_handles.append(cell.register_forward_hook(post, with_kwargs=True))
        self._hooked_cells.append((cell, (pre, post)))
        if getattr(cell, "has_bprop", False) and callable(getattr(cell, "construct", None)):
            # MindSpore runs the pre-hook of a Cell with a custom bprop but not its forward hook: without this
            # its forward record was missing and every later record was nested inside it (construct.json).
            # Its construct's return closes the frame instead; its gradients stay MindSpore's bprop (no
            # output hook), as they were
            own = cell.__dict__.get("construct")
            orig = cell.construct

            def construct(*args, **kwargs):
                out = orig(*args, **kwargs)
                close(out, grads=False)
                return out

            _set_construct(cell, construct)
            self._bprop_constructs.append((cell, own, construct))
        for pn, p in params:
            if p.requires_grad:
                self._param_handles.append(p.register_hook(self._param_hook(prefix, pn)))

    def _cell_hook_inputs(self, state, args):
        new, n = self._hook_float_items(state, args, self._finish_cell_backward)
        state["n_in"] = n
        if new is None:
            return None, state
        state["has_in"] = True
        return tuple(new), state

    def _cell_hook_outputs(self, state, out):
        if isinstance(out, ms.Tensor):
            items, kind = [out], "t"
        elif isinstance(out, tuple):
            items, kind = list(out), tuple
        else:
            return None
        items, _ = self._hook_float_items(state, items, self._cell_backward_start)
        if items is None:
            return None
        return items[0] if kind == "t" else tuple(items)

    def _cell_backward_start(self, state, grads):
        col = self.col
        state["out"] = grads
        state["parent"] = col.bwd_module_stack[-1] if col.bwd_module_stack else None
        col.bwd_module_stack.append(state["name"])
        if col.module_construct:
            col.construct.setdefault(state["name"], state["parent"])
        col.pending_backward[state["name"]] = lambda: self._finish_cell_backward(state, [None] * state["n_in"])

    def _finish_cell_backward(self, state, grads):
        if state["done"]:
            return
        state["done"] = True
        col = self.col
        col.pending_backward.pop(state["name"], None)
        name = state["name"]
        if name in col.bwd_module_stack:
            col.bwd_module_stack.remove(name)
        col.backward(name, state["out"] if state["out"] is not None else (), grads,
                     parent=state.get("parent"))

    def _param_hook(self, prefix, pname):
        col = self.col
        errors = self.errors

        def hook(grad):
            if RT.on and not TLS.depth:
                guarded(errors, f"{prefix}.parameters_grad", col.param_grad, prefix, pname, grad)
            return None

        return hook

    # ------------------------------------------------------------------ teardown
    def restore(self):
        self.patch_off()
        uninstall_jit(self)
        for h in self._cell_handles + self._param_handles:
            try:
                h.remove()
            except Exception:
                pass
        self._cell_handles = []
        self._param_handles = []
        self._hooked_cells = []
        for cell, own, wrapper in self._bprop_constructs:
            if cell.__dict__.get("construct") is wrapper:
                _set_construct(cell, own)
        self._bprop_constructs = []
        for prim, cls in self._prims:
            try:
                prim.__class__ = cls
            except Exception:
                pass
        self._prims = []
        self.hooked_models = []


# ---------------------------------------------------------------------------------------------- @jit
# ``mindspore.jit`` wraps a function (or a Cell's construct) so that every call builds a
# ``mindspore.graph.api._JitExecutor`` and calls it. That class is looked up in its module at each call, so a
# subclass put there sees every jit call (the reference's JitDump does the same). No Python runs inside the
# compiled graph: the Cells under a jit construct get no hooks (their hook code would be compiled into the
# graph, which fails), and the jit call is one ``Jit.*`` record.

_JIT = {"hooks": None, "orig": None}
# where MindSpore 2.x keeps a Cell's forward hooks (lazily created OrderedDicts)
_HOOK_DICTS = ("_lazy_forward_pre_hook", "_lazy_forward_hook", "_lazy_forward_pre_hook_with_kwargs",
               "_lazy_forward_hook_with_kwargs", "_forward_pre_hook", "_forward_hook")


def _jit_module():
    try:
        from mindspore.graph import api as graph_api
        return graph_api if hasattr(graph_api, "_JitExecutor") else None
    except Exception:
        return None


def _is_jit_cell(cell):
    construct = getattr(cell, "construct", None)
    return bool(getattr(construct, "__wrapped_by_jit__", False) or
                getattr(getattr(construct, "__func__", None), "__wrapped_by_jit__", False))


def jit_inside(root):
    """ids of the Cells that run inside a jit-compiled construct of ``root`` (or of ``root`` itself)."""
    inside = set()
    try:
        for _, cell in root.cells_and_names():
            if id(cell) in inside or not _is_jit_cell(cell):
                continue
            for _, sub in cell.cells_and_names():
                if sub is not cell:
                    inside.add(id(sub))
    except Exception:
        pass
    return inside


def _mindspore_own(fn):
    module = getattr(fn, "__module__", None) or ""
    return module == "mindspore" or module.startswith("mindspore.")


def install_jit(hooks):
    """Route every jit call of the user's code through ``hooks.call_jit`` (a Jit.* record at levels L1/mix,
    msprobe's Cell hooks taken off meanwhile at every level). MindSpore's own jit functions (``nn.SGD.construct``)
    pass straight through: the reference on MindSpore 2.10 records none of them."""
    mod = _jit_module()
    if mod is None:
        return
    _JIT["hooks"] = hooks
    if _JIT["orig"] is not None:
        return
    base = mod._JitExecutor

    class JitDump(base):
        def __call__(self, *args, **kwargs):
            h = _JIT["hooks"]
            if h is None or TLS.depth or not RT.on or _mindspore_own(getattr(self, "fn", None)):
                return base.__call__(self, *args, **kwargs)
            return h.call_jit(self, lambda *a, **k: base.__call__(self, *a, **k), args, kwargs)

    JitDump.__name__ = JitDump.__qualname__ = base.__name__
    _JIT["orig"] = base
    mod._JitExecutor = JitDump


def _refill(d, items):
    d.clear()
    d.update(items)


def _set_construct(cell, fn):
    """Set (or, for None, remove) a Cell instance's own ``construct`` attribute."""
    if fn is None:
        cell.__dict__.pop("construct", None)
    else:
        cell.__dict__["construct"] = fn


def uninstall_jit(hooks):
    if _JIT["hooks"] is not hooks:
        return
    mod = _jit_module()
    if mod is not None and _JIT["orig"] is not None:
        mod._JitExecutor = _JIT["orig"]
    _JIT["orig"] = None
    _JIT["hooks"] = None
