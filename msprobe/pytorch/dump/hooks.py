"""Capturing PyTorch API calls and module calls without changing the training.

How calls are seen
  * ``torch.*``, ``torch.nn.functional.*`` and ``torch._VF.*``: through a ``TorchFunctionMode`` that
    is pushed at ``start()`` and popped at ``stop()``. Nothing is monkey-patched for them, so names
    bound before the debugger existed (``from torch import relu``) are seen, and identity checks such
    as ``activation_func is F.gelu`` keep holding.
  * ``torch.Tensor`` methods (``__add__``, ``add_``, ...): the class attributes are wrapped, because
    the reference names ``x + y`` ``Tensor.__add__`` and a function mode only sees ``add``. Method
    lookups happen at call time, so early binding is not an issue for them.
  * ``torch.distributed`` and ``torch_npu`` functions: wrapped module attributes (they do not go
    through ``__torch_function__``).
  Only the outermost call of a chain is recorded (a per-thread depth counter); the tool's own
  tensor work runs at depth > 0 and under ``DisableTorchFunction``, so it is never recorded.

Backward
  * API backward: a post-hook on the ``grad_fn`` node of the first output tensor (the reference's
    semantics: ``input`` = grads of the node's outputs, ``output`` = grads of its inputs). An op that
    returns its input unchanged has no node of its own: the identity on the gradient through it
    (the share of the module running it when the tensor is that module's input, else a tensor hook).
  * Module backward: tensor hooks on the module's outputs (grads flowing in; for an output the module
    also consumes itself, minus that own use) and post-hooks on the nodes inside the module that
    consume its inputs (grads flowing out, this module's share only).
    No node is inserted into the autograd graph, so gradient values and their accumulation order
    are exactly those of a run without the tool.
  * Collectives, custom and NPU ops write through a backend without bumping ``_version``: after
    them the statistics cache is dropped; async ones are recorded when their Work completes.
  * Parameter gradients: tensor hooks on the parameters (the incoming gradient, as 8.x records).

Every hook body runs inside :func:`guarded`: an exception is written to ``dump_error_info.log`` once per
place and error type (msprobe.core.dump.errorlog) and training goes on. While torch.compile traces, nothing is
recorded and the wrappers step aside without a graph break.
"""
import functools
import gc
import json
import os
import sys
import threading
import weakref

import torch
from torch.overrides import TorchFunctionMode

from msprobe.core.dump.patching import MISSING, undo_patches


_HERE = os.path.dirname(os.path.abspath(__file__))
_TENSOR_BACKWARD = torch.Tensor.backward
_AUTOGRAD_BACKWARD = torch.autograd.backward
_MISSING = MISSING
_WALK_LIMIT = 20000
_DisableTF = torch._C.DisableTorchFunction
# torch.compile tracing (fake tensors): nothing is recorded, the traced code stays the user's own
_compiling = getattr(getattr(torch, "compiler", None), "is_compiling", None) or (lambda: False)


class _TLS(threading.local):
    depth = 0
    comm_depth = -1     # inside a framework's internals (_internal): the depth at which collectives are recorded


TLS = _TLS()


class _Runtime:
    """Process-wide switches read on every wrapped call (kept as plain attributes: one lookup)."""
    on = False
    service = None
    hooks = None        # the Hooks that switched recording on (push_mode)


RT = _Runtime()


@functools.lru_cache(maxsize=1)
def api_lists():
    with open(os.path.join(_HERE, "api_lists.json"), encoding="utf-8") as f:
        data = json.load(f)
    data.pop("_comment", None)
    return data


def _resolve(root, dotted):
    obj = root
    for part in dotted.split("."):
        obj = getattr(obj, part, None)
        if obj is None:
            return None
    return obj


def function_names():
    """{function object: "Prefix.name"} for everything the function mode records."""
    import torch.nn.functional as F
    lists = api_lists()
    names = {}

    def add(obj, label):
        if obj is None or not callable(obj):
            return
        try:
            if obj in names:
                return
        except TypeError:
            return
        names[obj] = label

    # Functional first: F.conv2d is torch.conv2d, and the reference's nn modules reach it through F.
    for n in lists["functional"]:
        add(getattr(F, n, None), f"Functional.{n}")
    for n in lists["_VF"]:
        add(getattr(torch._VF, n, None), f"VF.{n}")
    for n in lists["torch"]:
        add(_resolve(torch, n), f"Torch.{n.split('.')[-1]}")
    return names


_INPLACE_DUNDERS = {"__iadd__", "__isub__", "__imul__", "__itruediv__", "__ifloordiv__", "__imod__", "__ipow__",
                    "__iand__", "__ior__", "__ixor__", "__ilshift__", "__irshift__", "__imatmul__", "__idiv__",
                    "__setitem__"}


#: FSDP internals run unrecorded but for the collectives they call (Hooks._opaque_on):
#: (module, owner in it (None: the module, "ops": torch.ops.fsdp), attributes, record their collectives)
_INTERNAL_FSDP = (
    ("torch.distributed.fsdp._fully_shard._fsdp_param_group", None,
     ("foreach_all_gather", "foreach_all_gather_copy_out", "foreach_reduce"), True),
    ("torch.distributed.fsdp._fully_shard._fsdp_collectives", "ops",
     ("all_gather_copy_in", "split_with_sizes_copy", "chunk_cat"), False),
    ("torch.distributed.fsdp._flat_param", "FlatParamHandle",
     ("init_flat_param_attributes", "unshard", "reshard", "post_unshard", "post_reshard", "_use_sharded_views",
      "_use_sharded_grad_views", "_use_unsharded_grad_views", "prepare_gradient_for_backward",
      "prepare_gradient_for_optim"), True),
    ("torch.distributed.fsdp._runtime_utils", None,
     ("_reduce_grad", "_cast_buffers_to_dtype_and_device", "_register_post_backward_hook"), True),
)


def _internal(orig, comm):
    """``orig`` run as a framework's internals: nothing inside is recorded, except (``comm``) the collectives it
    calls itself when it was not called from inside a recorded call."""
    def run(*args, **kwargs):
        outer = TLS.depth
        TLS.depth = outer + 1
        prev = TLS.comm_depth
        if comm and not outer:
            TLS.comm_depth = outer + 1
        try:
            return orig(*args, **kwargs)
        finally:
            TLS.comm_depth = prev
            TLS.depth = outer
    run.__msprobe_original__ = orig
    try:
        functools.update_wrapper(run, orig)
        run.__msprobe_original__ = orig
    except Exception:   # noqa: BLE001
        pass
    return run

#: APIs whose output is leftover memory: recorded without values
_EMPTY_APIS = frozenset(("Torch.empty", "Torch.empty_like"))


def _write_kind(name, distributed):
    """What a call of API ``name`` may write that the version counter may not show: 2 = anything
    (collectives, NPU ops: written through a backend, views included), 1 = its first argument (in-place
    methods and functions), 0 = nothing beyond ``out=`` (checked per call)."""
    if distributed or name.startswith("NPU."):
        return 2
    api = name.rsplit(".", 1)[-1]
    if api in _INPLACE_DUNDERS or (api.endswith("_") and not api.startswith("__")):
        return 1
    return 0


def _is_work(out):
    """The result of an async collective: a Work, or a list of them (batch_isend_irecv)."""
    if out is None or isinstance(out, torch.Tensor):
        return False
    if isinstance(out, (list, tuple)):
        return bool(out) and all(hasattr(w, "wait") and not isinstance(w, torch.Tensor) for w in out)
    return hasattr(out, "wait") and hasattr(out, "is_completed")


def _is_argument(t, args, kwargs):
    """``t`` is one of the call's own (top-level) arguments."""
    for a in args:
        if a is t:
            return True
    if kwargs:
        for a in kwargs.values():
            if a is t:
                return True
    return False


def iter_tensors(obj, depth=0):
    """The tensors in ``obj`` (nested lists, tuples, dict values), depth first, in order."""
    if isinstance(obj, torch.Tensor):
        yield obj
    elif depth < 50 and isinstance(obj, (list, tuple)):
        for x in obj:
            yield from iter_tensors(x, depth + 1)
    elif depth < 50 and isinstance(obj, dict):
        for x in obj.values():
            yield from iter_tensors(x, depth + 1)



_FunctionType = type(lambda: None)
_CALL_OPS = {"CALL", "CALL_KW", "CALL_FUNCTION", "CALL_FUNCTION_KW", "CALL_METHOD"}


@functools.lru_cache(maxsize=4096)
def _call_sites(code):
    """{bytecode offset: (n positional, keyword names)} for every plain call in ``code``."""
    import dis
    sites = {}
    ins_list = list(dis.get_instructions(code))
    for i, ins in enumerate(ins_list):
        if ins.opname not in _CALL_OPS or ins.arg is None:
            continue
        kw = ()
        for prev in reversed(ins_list[max(0, i - 3):i]):
            if prev.opname == "KW_NAMES":
                kw = code.co_consts[prev.arg]
                break
            if ins.opname in ("CALL_KW", "CALL_FUNCTION_KW") and prev.opname == "LOAD_CONST":
                kw = prev.argval
                break
        if not isinstance(kw, tuple):
            continue
        end = ins_list[i + 1].offset if i + 1 < len(ins_list) else ins.offset + 2
        for off in range(ins.offset, end, 2):
            sites[off] = (ins.arg - len(kw), kw)
    return sites


def _as_called(func, args, kwargs):
    """Python-level torch functions hand their parameters to ``__torch_function__`` re-packed (most
    as keywords). Rebuild the caller's own split into positional and keyword arguments from the
    call site's bytecode, so records match what the user wrote (and the reference's records)."""
    try:
        f = sys._getframe(3)           # _as_called <- __torch_function__ <- handle_torch_function
        while f is not None and f.f_code.co_name == "handle_torch_function":
            f = f.f_back
        if f is None:
            return args, kwargs
        impl = f.f_code                # the function that dispatched (its parameters order args/kwargs)
        params = impl.co_varnames[:impl.co_argcount + impl.co_kwonlyargcount]
        code = func.__code__
        for _ in range(12):
            if f is None or f.f_code is code:
                break
            f = f.f_back
        if f is None or f.f_code is not code or f.f_back is None:
            return args, kwargs
        caller = f.f_back
        site = _call_sites(caller.f_code).get(caller.f_lasti)
        if site is None or not params:
            return args, kwargs
        npos, kwnames = site
        values = dict(zip(params, args))
        values.update(kwargs)
        new_args = tuple(values[p] for p in params[:npos] if p in values)
        if len(new_args) != npos:
            return args, kwargs
        return new_args, {k: values[k] for k in kwnames if k in values}
    except Exception:
        return args, kwargs


def guarded(errors, where, fn, *args):
    """Run tool code ``fn(*args)`` from a hook: nested calls are not recorded, torch-function handling
    is off, and an exception is logged (once per name) instead of reaching the training."""
    TLS.depth += 1
    try:
        with _DisableTF():
            return fn(*args)
    except Exception as exc:
        errors.record(where, exc)
        return None
    finally:
        TLS.depth -= 1


class _Mode(TorchFunctionMode):
    """Records ``torch.*`` / ``F.*`` / ``_VF.*`` calls by function object."""

    def __init__(self, hooks):
        super().__init__()
        self.hooks = hooks
        self.names = hooks.func_names

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if kwargs is None:
            kwargs = {}
        if TLS.depth or not RT.on or _compiling():
            return func(*args, **kwargs)
        try:
            name = self.names.get(func)
        except TypeError:
            name = None
        if name is not None:
            if func.__class__ is _FunctionType:
                return self.hooks.call(name, func, args, kwargs, shown=_as_called(func, args, kwargs))
            return self.hooks.call(name, func, args, kwargs)
        if func is _TENSOR_BACKWARD:
            return self.hooks.tensor_backward(func, args, kwargs)
        if func is _AUTOGRAD_BACKWARD:
            return self.hooks.autograd_backward(func, args, kwargs)
        return func(*args, **kwargs)


def _ref_first_tensor(out):
    """The tensor whose node the reference hooks for an API's backward (see Hooks._ref_api_backward_hook)."""
    v = out
    for _ in range(50):
        if isinstance(v, torch.Tensor):
            return v
        if isinstance(v, dict):
            v = next((x for x in v.values() if isinstance(x, torch.Tensor)), None)
            if v is None:
                return None
        elif isinstance(v, (list, tuple)) and v:
            v = v[0]
        else:
            return None
    return None


def _ref_setup(setup, value):
    """``setup`` (a BackwardHook's setup_input_hook / setup_output_hook) on every tensor in ``value``
    that requires grad, nested ones included; ``value`` rebuilt with the returned tensors, or None when
    there is none. The returned tensors are views of the originals: their creation meta is reset so that
    an in-place op on them stays allowed, as on the originals."""
    if not torch.is_grad_enabled():
        return None
    tensors = [t for t in iter_tensors(value) if t.requires_grad]
    if not tensors:
        return None
    new = iter(setup(tuple(tensors)))
    set_meta = getattr(torch._C._autograd, "_set_creation_meta", None)
    default_meta = getattr(torch._C._autograd, "CreationMeta", None)

    def rebuild(v, depth=0):
        if isinstance(v, torch.Tensor):
            if not v.requires_grad:
                return v
            r = next(new)
            if r._base is not None and set_meta is not None and default_meta is not None:
                try:
                    set_meta(r, default_meta(0))
                except Exception:
                    pass
            return r
        if depth >= 50:
            return v
        if isinstance(v, list):
            for i, x in enumerate(v):
                v[i] = rebuild(x, depth + 1)
            return v
        if isinstance(v, dict):
            for k in [k for k, x in v.items() if isinstance(x, (torch.Tensor, list, tuple, dict))]:
                v[k] = rebuild(v[k], depth + 1)
            return v
        if isinstance(v, tuple):
            items = [rebuild(x, depth + 1) for x in v]
            return type(v)(*items) if hasattr(v, "_fields") else type(v)(items)
        return v

    return rebuild(value)


class _RefTree:
    """construct.json as the reference builds it (api_capture reference).

    A module call (forward pre-hook) or module backward (its output gradients arrive) *enters*: its
    parent is the top of one stack shared by forward and backward, or with an empty stack the last
    open module whose name has the parent's form; it is pushed and becomes the parent of the APIs that
    follow. Its end (forward hook, or its input gradients computed) *exits*: the stack's top is popped
    (whichever it is) and the new top is the APIs' parent. Entries reach construct.json when the next
    record is written, after that record's own entry (APIs at level mix only)."""

    def __init__(self, col, level):
        self.col = col
        self.mix = level == "mix"
        self.on = level in ("L0", "mix")
        self.gen = None

    def _fresh(self):
        if self.gen != self.col.generation:
            self.gen = self.col.generation
            self.stack = []
            self.open = {}          # insertion-ordered: modules entered and not yet exited
            self.api_parent = None
            self.pending = []       # (name, parent) not yet in construct.json

    @staticmethod
    def _parent_form(name):
        return name.split(".")

    def _find_last(self, name):
        parts = name.split(".")
        if len(parts) < 5:
            return None
        prefix = ".".join(parts[:-4])
        if prefix in ("Module", "Cell"):
            return None
        for cand in reversed(self.open):
            cparts = cand.split(".")
            if len(cparts) < 5:
                return None
            if ".".join(cparts[:-3]) == prefix:
                return cand
        return None

    def enter(self, name):
        if not self.on:
            return
        self._fresh()
        parent = self.stack[-1] if self.stack else self._find_last(name)
        self.pending.append((name, parent))
        self.open[name] = True
        self.stack.append(name)
        self.api_parent = name

    def exit(self, name):
        if not self.on:
            return
        self._fresh()
        self.open.pop(name, None)
        self.api_parent = None
        if self.stack:
            self.stack.pop()
        if self.stack:
            self.api_parent = self.stack[-1]

    def sync(self, name, is_api):
        if not self.on:
            return
        self._fresh()
        construct = self.col.construct
        if is_api and self.mix:
            construct[name] = self.api_parent
        for n, parent in self.pending:
            construct[n] = parent
        self.pending.clear()


class Hooks:
    """Installs and removes the capture machinery; routes captured calls to the collector."""

    def __init__(self, service):
        RT.hooks = self
        self.service = service
        self.col = service.collector
        self.errors = service.errors
        self.api_level = service.cfg.level in ("L1", "mix", "L2")
        self.kernel_target = service.cfg.list[0] if service.cfg.level == "L2" and service.cfg.list else None
        self.func_names = function_names()
        self.mode = _Mode(self)
        self._patched = []          # (owner, attr, original) currently applied
        self._targets = []          # (owner, attr, name, distributed) to wrap while dumping
        self._plan = None           # [owner, attr, stored value, callable, wrapper, name, distributed]
        self._gc_threshold = None
        self._custom = {}           # (id(module), api) -> (module, api, original): register_custom_api
        self._mode_pushed = False
        self.apis_suspended = False
        self.pid = os.getpid()
        self.hooked_models = []
        self._module_handles = []
        # (id(tensor), record key) -> (weakref, hook handle): parameters (or their FSDP stand-ins) with a grad
        # hook; a tied weight has one per module that owns it
        self._hooked_params = {}
        self._hooked_prune_at = 4096
        self._writes = {}           # name -> what a call may write that _version does not show (_write_kind)
        self._open = []             # [edges, identity ops, generation] of the modules whose forward is running
        # ops returning their input get the identity record (_api_backward_hook); False: the reference's
        # records instead (its producer's node, except for an input of the module running the op, where
        # the reference's module hooks give that module's share, as here)
        self.identity_records = True
        self._work_classes = set()  # Work classes whose wait() is wrapped (async collectives)
        # another task's handler of wrapped API calls instead of recording them: (name, func, args, kwargs,
        # distributed) -> the call's output (task free_benchmark: msprobe.pytorch.free_benchmark)
        self.api_handler = None
        # api_capture "reference": record what MindStudio Probe 8.x records, in its order (see _RefTree)
        self.reference = getattr(service.cfg, "api_capture", "full") == "reference"
        self.tree = None
        if self.reference:
            self.identity_records = False
            self.tree = _RefTree(self.col, service.cfg.level)
            self.col.mix_construct = False          # construct.json is kept by the tree instead
            self.col.module_construct = False

    # ------------------------------------------------------------------ install
    def install_api_patches(self, npu_module=None):
        """Choose what gets wrapped (applied by :meth:`patch_on` at each effective start())."""
        if not self.api_level or self._targets:
            return
        lists = api_lists()
        targets = []
        for n in lists["tensor"]:
            raw = getattr(torch.Tensor, n, None)
            if raw is None or not callable(raw) or isinstance(torch.Tensor.__dict__.get(n),
                                                               (staticmethod, classmethod, property)):
                continue
            targets.append((torch.Tensor, n, f"Tensor.{n}", False))
        if self.reference:
            # torch.* / F.* / _VF.* as module attributes (no function mode): a call is recorded when it
            # looks the name up at call time, under the name it was called by, as the reference records it
            import torch.nn.functional as F
            for n in lists["functional"]:
                if callable(getattr(F, n, None)):
                    targets.append((F, n, f"Functional.{n}", False))
            for n in lists["_VF"]:
                if callable(getattr(torch._VF, n, None)):
                    targets.append((torch._VF, n, f"VF.{n}", False))
            for n in lists["torch"]:
                owner_path, _, attr = n.rpartition(".")
                owner = _resolve(torch, owner_path) if owner_path else torch
                if owner is not None and callable(getattr(owner, attr, None)):
                    targets.append((owner, attr, f"Torch.{attr}", False))
        try:
            import torch.distributed as dist
            import torch.distributed.distributed_c10d as c10d
            if dist.is_available():
                for n in lists["distributed"]:
                    for owner in (dist, c10d):
                        if callable(getattr(owner, n, None)):
                            targets.append((owner, n, f"Distributed.{n}", True))
        except Exception:
            pass
        if npu_module is not None:
            for n in lists["torch_npu"]:
                if callable(getattr(npu_module, n, None)):
                    targets.append((npu_module, n, f"NPU.{n}", False))
            dist_npu = getattr(npu_module, "distributed", None)
            if dist_npu is not None:
                for n in lists["npu_distributed"]:
                    if callable(getattr(dist_npu, n, None)):
                        targets.append((dist_npu, n, f"Distributed.{n}", True))
        self._targets = targets

    def patch_on(self):
        """Wrap the chosen attributes (only while dumping: outside start()/stop() nothing is wrapped)."""
        if self._patched or not self._targets:
            return
        plan = self._plan
        if plan is None:
            plan = self._plan = []
            for owner, attr, name, distributed in self._targets:
                current = getattr(owner, attr, None)
                if current is None or getattr(current, "__msprobe_original__", None) is not None:
                    continue
                stored = owner.__dict__.get(attr, _MISSING) if isinstance(owner, type) else current
                plan.append([owner, attr, stored, current, self._wrapper(name, current, distributed),
                             name, distributed])
        patched = self._patched
        for item in plan:
            owner, attr, stored = item[0], item[1], item[2]
            now = owner.__dict__.get(attr, _MISSING) if isinstance(owner, type) else getattr(owner, attr, _MISSING)
            if now is not stored:
                # replaced since the last start (e.g. by torch_npu or the user): wrap what is there now
                if now is _MISSING and not isinstance(owner, type):
                    continue
                current = getattr(owner, attr, None)
                if current is None or getattr(current, "__msprobe_original__", None) is not None:
                    continue
                item[2], item[3] = now, current
                item[4] = self._wrapper(item[5], current, item[6])
            try:
                setattr(owner, attr, item[4])
            except Exception:
                continue
            patched.append((owner, attr, item[2]))

        self._opaque_on(patched)

    def _opaque_on(self, patched):
        """FSDP's own parameter and gradient handling runs while only its collectives are recorded, as DDP's
        C++ reducer is not looked into (_INTERNAL_FSDP): FSDP2's ``foreach_all_gather`` (copy-in),
        ``foreach_all_gather_copy_out`` and ``foreach_reduce`` (as ``_fsdp_param_group`` calls them) and its
        ``torch.ops.fsdp`` custom ops; FSDP1's ``FlatParamHandle`` unshard/reshard/view methods and its
        gradient reduction. Their Python code slices and splits buffers made by ``torch.empty`` before anything
        fills them (``narrow``, ``split``, ``chunk``; with a mixed-precision policy a ``torch.split`` before a
        foreach copy): those records read leftover memory, different in every run, and compare named them in
        two identical runs. The collectives they call are recorded as usual."""
        for mod_name, owner_name, attrs, comm in _INTERNAL_FSDP:
            mod = sys.modules.get(mod_name)
            if mod is None:
                continue
            if owner_name == "ops":
                try:
                    owner = torch.ops.fsdp
                except Exception:   # noqa: BLE001
                    continue
            else:
                owner = getattr(mod, owner_name, None) if owner_name else mod
            if owner is None:
                continue
            for attr in attrs:
                try:
                    orig = getattr(owner, attr)
                    stored = owner.__dict__.get(attr, _MISSING) if isinstance(owner, type) else orig
                except Exception:   # noqa: BLE001 - not in this torch
                    continue
                if not callable(orig) or getattr(orig, "__msprobe_original__", None) is not None:
                    continue
                try:
                    setattr(owner, attr, _internal(orig, comm))
                except Exception:   # noqa: BLE001
                    continue
                patched.append((owner, attr, stored))

    def patch_off(self):
        undo_patches(self._patched)
        self._patched = []
        self._work_classes = set()

    def _watch_work(self, works):
        """Wrap ``wait()`` of the Work classes of an async collective, so its outputs are recorded when
        the training waits for them (undone with the other patches)."""
        col = self.col
        errors = self.errors
        for w in works:
            cls = type(w)
            if cls in self._work_classes:
                continue
            orig = getattr(cls, "wait", None)
            if orig is None:
                continue
            stored = cls.__dict__.get("wait", _MISSING)

            def wait(work, *args, _orig=orig, **kwargs):
                result = _orig(work, *args, **kwargs)
                if col.pending_async and not TLS.depth:
                    guarded(errors, "Distributed wait", col.async_done, work)
                return result

            wait.__msprobe_original__ = orig
            try:
                setattr(cls, "wait", wait)
            except Exception:
                continue
            self._work_classes.add(cls)
            self._patched.append((cls, "wait", stored))

    def register_custom(self, module, api, prefix):
        key = (id(module), api)
        if key in self._custom:
            return
        orig = getattr(module, api)
        self._writes[f"{prefix}.{api}"] = 2       # a custom op may write through its backend
        setattr(module, api, self._wrapper(f"{prefix}.{api}", orig))
        self._custom[key] = (module, api, orig)

    def restore_custom(self, module, api):
        entry = self._custom.pop((id(module), api), None)
        if entry is not None:
            setattr(entry[0], entry[1], entry[2])

    def restore(self):
        for module, api, _orig in list(self._custom.values()):
            self.restore_custom(module, api)
        self.patch_off()
        self.pop_mode()
        for h in self._module_handles + [h for _ref, h in self._hooked_params.values()]:
            try:
                h.remove()
            except Exception:
                pass
        self._module_handles = []
        self._hooked_params = {}

    def _hook_param(self, p, grad_key, pname):
        """A gradient hook on tensor ``p`` (a parameter, or what stands in for it during the forward), once."""
        key = (id(p), grad_key)
        hooked = self._hooked_params
        ent = hooked.get(key)
        if ent is not None and ent[0]() is p:
            return
        try:
            hooked[key] = (weakref.ref(p), p.register_hook(self._param_hook(grad_key, pname)))
        except Exception:       # noqa: BLE001 - a tensor that takes no hook: no parameters_grad for it
            return
        if len(hooked) > self._hooked_prune_at:
            # FSDP1 makes new views every forward: forget those that are gone
            for k in [k for k, (ref, _h) in hooked.items() if ref() is None]:
                del hooked[k]
            self._hooked_prune_at = max(4096, 2 * len(hooked))

    def _live_params(self, mod, params, grad_key):
        """The module's direct parameters as its forward uses them now, each with a gradient hook.

        Usually the objects found when hooking (``params``). FSDP puts other tensors in their place for the
        forward: FSDP2 (``fully_shard``) swaps its sharded DTensor parameters for full-size unsharded ones
        (leaf Parameters that autograd accumulates into, before the reduce-scatter), FSDP1 with
        ``use_orig_params`` sets plain views of its unsharded flat parameter as attributes. The forward
        record's parameters and the gradient hook must be those (the sharded ones get no gradient through
        autograd: FSDP assigns their ``.grad`` after its reduce-scatter, so their hook never fires and every
        ``parameters_grad`` record stayed null)."""
        if not params:
            return params
        live = None
        got = mod._parameters
        for i, (pn, p) in enumerate(params):
            q = got.get(pn)
            if q is None:
                q = mod.__dict__.get(pn)
            if q is p or not isinstance(q, torch.Tensor):
                continue
            if live is None:
                live = list(params)
            live[i] = (pn, q)
            if q.requires_grad:
                self._hook_param(q, grad_key, pn)
        return params if live is None else live

    def _wrapper(self, name, orig, distributed=False):
        hooks = self

        if distributed:
            def wrapper(*args, **kwargs):
                if not RT.on or (TLS.depth and TLS.depth != TLS.comm_depth):
                    out = orig(*args, **kwargs)
                    if RT.on:                      # not recorded (nested), but it still wrote
                        hooks.col.stats.forget_all()
                    return out
                return hooks.call(name, orig, args, kwargs, distributed)
        else:
            def wrapper(*args, **kwargs):
                if not RT.on or TLS.depth or _compiling():
                    return orig(*args, **kwargs)
                # RT.hooks, not a closure over ``hooks``: torch.compile inlines this wrapper and cannot hold
                # a Hooks object taken from a closure (a graph break, and a different compiled program)
                return RT.hooks.call(name, orig, args, kwargs, distributed)

        try:
            functools.update_wrapper(wrapper, orig)
        except Exception:
            pass
        wrapper.__msprobe_original__ = orig
        return wrapper

    def push_mode(self):
        RT.hooks = self
        self.patch_on()
        if self._gc_threshold is None:
            # records are many small dicts: collect cyclic garbage in bigger batches while dumping
            # (restored at stop(); what is collected does not change, only how often the collector runs)
            self._gc_threshold = gc.get_threshold()
            if self._gc_threshold[0] and self._gc_threshold[0] < 50000:
                gc.set_threshold(50000, *self._gc_threshold[1:])
        if self.api_level and not self._mode_pushed and not self.reference:
            torch._C._push_on_torch_function_stack(self.mode)
            self._mode_pushed = True

    def pop_mode(self):
        # wrapped attributes stay between dumped steps (a wrapper costs one flag check while off);
        # Service removes them when a step is not dumped and at the end
        if self._gc_threshold is not None:
            try:
                gc.set_threshold(*self._gc_threshold)
            finally:
                self._gc_threshold = None
        if not self._mode_pushed:
            return
        self._mode_pushed = False
        try:
            n = torch._C._len_torch_function_stack()
            above = []
            while n > 0:
                m = torch._C._pop_torch_function_stack()
                n -= 1
                if m is self.mode:
                    break
                above.append(m)
            for m in reversed(above):
                torch._C._push_on_torch_function_stack(m)
        except Exception:
            pass

    # ------------------------------------------------------------------ API calls
    def call(self, name, func, args, kwargs, distributed=False, shown=None):
        # torch.compile tracing and forked children (DataLoader workers): nothing recorded
        if _compiling() or self.apis_suspended or os.getpid() != self.pid:
            out = func(*args, **kwargs)
            if distributed:
                self.col.stats.forget_all()
            return out
        if self.api_handler is not None:
            return self.api_handler(name, func, args, kwargs, distributed)
        col = self.col
        if col.pending_async:
            guarded(self.errors, "Distributed wait", col.async_done)
        n = col.api_count.get(name, 0)
        fwd = f"{name}.{n}.forward"
        if self.kernel_target is not None:
            return self._kernel_dump(name, n, fwd, func, args, kwargs)
        TLS.depth += 1
        try:
            rec = None
            try:
                with _DisableTF():
                    if shown is None:
                        rec = col.api_inputs(fwd, args, kwargs)
                    else:
                        rec = col.api_inputs(fwd, shown[0], shown[1])
            except Exception as exc:
                self.errors.record(fwd, exc)
            out = func(*args, **kwargs)
            col.api_count[name] = n + 1
            try:
                with _DisableTF():
                    writes = self._writes.get(name)
                    if writes is None:
                        writes = self._writes[name] = _write_kind(name, distributed)
                    if writes or "out" in kwargs:
                        self._written(writes, args, kwargs)
                    if distributed and _is_work(out):
                        works = out if isinstance(out, (list, tuple)) else [out]
                        self._watch_work(works)
                        col.api_outputs_later(fwd, rec, works, args, kwargs)
                    elif name in _EMPTY_APIS:     # its output is leftover memory: recorded without values
                        col.buffer_ids = {id(out)}
                        try:
                            col.api_outputs(fwd, rec, out, distributed, args, kwargs)
                        finally:
                            col.buffer_ids = ()
                        if self.tree is not None:
                            self.tree.sync(fwd, True)
                    else:
                        col.api_outputs(fwd, rec, out, distributed, args, kwargs)
                        if self.tree is not None:
                            self.tree.sync(fwd, True)
                        if col.want_backward and not distributed:
                            self._api_backward_hook(name, n, out, args, kwargs, writes)
                    if col.terminated:
                        self.service.overflow_done()
            except Exception as exc:
                self.errors.record(fwd, exc)
            return out
        finally:
            TLS.depth -= 1

    def _written(self, writes, args, kwargs):
        """Stop reusing cached statistics of what the call may have written (measured afresh next time)."""
        stats = self.col.stats
        if writes == 2:
            stats.forget_all()
            return
        if writes == 1 and args and isinstance(args[0], torch.Tensor):
            stats.forget(args[0])
        out = kwargs.get("out")
        if out is not None:
            for t in iter_tensors(out):
                stats.forget(t)

    def _kernel_dump(self, name, n, fwd, func, args, kwargs):
        """Level L2: CANN kernel dump (torch_npu) around the one API named in ``list``."""
        col = self.col
        TLS.depth += 1
        try:
            if fwd != self.kernel_target and f"{name}.{n}.backward" != self.kernel_target:
                out = func(*args, **kwargs)
                col.api_count[name] = n + 1
                return out
            npu = self.service.npu_module
            started = False
            if fwd == self.kernel_target:
                try:
                    step_root = os.path.dirname(col.step_dir)
                    kernel_dir = os.path.join(step_root, "kernel_dump")
                    os.makedirs(kernel_dir, mode=0o750, exist_ok=True)
                    cfg_path = os.path.join(step_root, f"kernel_config_{os.getpid()}.json")
                    from msprobe.core.dump.writer import write_json
                    write_json(cfg_path, {"dump": {"dump_list": [], "dump_path": kernel_dir, "dump_mode": "all",
                                                   "dump_op_switch": "on"}})
                    npu.npu.init_dump()
                    npu.npu.set_dump(cfg_path)
                    started = True
                except Exception as exc:
                    self.errors.record(fwd, exc)
            else:
                self.errors.record(self.kernel_target, RuntimeError(
                    "kernel dump of a backward API is not supported; list the forward name"))
            try:
                out = func(*args, **kwargs)
            finally:
                if started:
                    try:
                        npu.npu.finalize_dump()
                    except Exception as exc:
                        self.errors.record(fwd, exc)
            col.api_count[name] = n + 1
            return out
        finally:
            TLS.depth -= 1

    def _api_backward_hook(self, name, n, out, args, kwargs, writes=0):
        """Hook the backward of API call ``name``.n.

        The record is the autograd node that produced the first output tensor (the reference's rule).
        An op that returns one of its inputs unchanged (``x.float()`` on fp32, ``x.to(x.dtype)``,
        ``dropout(p=0)``, ``type_as`` of the same type...) has no node of its own: the tensor's node is
        its producer's. Its record is the identity (``input`` = ``output``, the op's own shapes) on the
        gradient that flows through it: where the tensor is an input of the module running the op
        (RMSNorm's ``h.to(float32)``), that module's share of the input's gradient (written when the
        module's backward ends; the residual use outside is not part of it); otherwise the gradient
        reaching the tensor (a tensor hook). No node is added to the graph (an identity node would
        regroup the sum of the input's gradient when the input is used elsewhere too, which changes
        its last bits). In-place ops return their input with their own node: recorded as any op."""
        if not torch.is_grad_enabled():
            return
        if self.reference:
            return self._ref_api_backward_hook(f"{name}.{n}.backward", out)
        t = next(iter_tensors(out), None)
        if t is None or not t.requires_grad:
            return
        col = self.col
        gen = col.generation
        bname = f"{name}.{n}.backward"
        errors = self.errors
        if writes != 1 and _is_argument(t, args, kwargs) and not kwargs.get("inplace"):
            opened = self._open[-1] if self._open else None
            if opened is not None and opened[2] == gen:
                for j, _fn, _nr, a in opened[0][0]:
                    if a is t:               # an input of the module running it: that module's share
                        opened[1].append((j, bname))
                        return
            if self.identity_records:
                def identity(grad):
                    if col.generation == gen and not TLS.depth:
                        guarded(errors, bname, col.api_backward, bname, (grad,), (grad,))
                    return None
                self._on_grad(t, 1, identity, gen)
                return
        node = t.grad_fn
        if node is None:
            return

        def post(grad_inputs, grad_outputs):
            if col.generation == gen and not TLS.depth:
                guarded(errors, bname, col.api_backward, bname, grad_outputs, grad_inputs)
            return None

        node.register_hook(post)

    def tensor_backward(self, func, args, kwargs):
        """``loss.backward()``: make the implicit ones-gradient through a recorded ``torch.ones_like``
        (as autograd itself does), so the dump matches the reference's ``Torch.ones_like`` entry."""
        t = args[0] if args else kwargs.get("self")
        gradient = args[1] if len(args) > 1 else kwargs.get("gradient")
        if gradient is None and isinstance(t, torch.Tensor) and t.requires_grad and t.numel() == 1 \
                and "Torch.ones_like" in self.func_names.values():
            gradient = self.call("Torch.ones_like", torch.ones_like, (t,), {"memory_format": torch.preserve_format})
            args = (t, gradient) + tuple(args[2:])
            kwargs = {k: v for k, v in kwargs.items() if k not in ("self", "gradient")}
        return func(*args, **kwargs)

    def autograd_backward(self, func, args, kwargs):
        """``torch.autograd.backward(tensors)`` without grad_tensors: same as :meth:`tensor_backward`."""
        tensors = args[0] if args else kwargs.get("tensors")
        grads = args[1] if len(args) > 1 else kwargs.get("grad_tensors")
        if grads is None and "Torch.ones_like" in self.func_names.values():
            single = isinstance(tensors, torch.Tensor)
            seq = [tensors] if single else list(tensors) if isinstance(tensors, (list, tuple)) else None
            if seq and all(isinstance(t, torch.Tensor) and t.requires_grad and t.numel() == 1 for t in seq):
                made = [self.call("Torch.ones_like", torch.ones_like, (t,), {"memory_format": torch.preserve_format})
                        for t in seq]
                rest = {k: v for k, v in kwargs.items() if k not in ("tensors", "grad_tensors")}
                return func(tensors, made[0] if single else made, *args[2:], **rest)
        return func(*args, **kwargs)

    # ------------------------------------------------------------------ modules
    def register_model(self, model):
        if any(model is m for m in self.hooked_models):
            return
        self.hooked_models.append(model)
        models = list(model) if isinstance(model, (list, tuple)) else [model]
        many = isinstance(model, (list, tuple))
        for i, root in enumerate(models):
            for qual, mod in root.named_modules():
                if mod is root:
                    continue
                if type(mod).__name__ == "FullyShardedDataParallel":
                    continue
                prefix = f"Module.{i}.{qual}" if many else f"Module.{qual}"
                prefix = f"{prefix}.{type(mod).__name__}"
                self._hook_module(mod, prefix)

    def _ref_api_backward_hook(self, bname, out):
        """api_capture reference: a post-hook on the node of the output's first tensor, found as the
        reference finds it (first dict value that is a tensor, else element 0 of a list/tuple, down to a
        tensor; none when element 0 is not a container or tensor). With the module hooks' identity nodes
        in the graph (:meth:`_hook_module_ref`), that node is the one the reference hooks."""
        t = _ref_first_tensor(out)
        if t is None or not t.requires_grad or t.grad_fn is None:
            return
        col = self.col
        tree = self.tree
        errors = self.errors
        gen = col.generation

        def record(grad_inputs, grad_outputs):
            col.api_backward(bname, grad_outputs, grad_inputs)
            tree.sync(bname, True)

        def post(grad_inputs, grad_outputs):
            if col.generation == gen and not TLS.depth:
                guarded(errors, bname, record, grad_inputs, grad_outputs)
            return None

        t.grad_fn.register_hook(post)

    def _hook_module_ref(self, mod, prefix):
        """api_capture reference: module backward through ``torch.utils.hooks.BackwardHook`` (the identity
        nodes a full backward hook puts around the module's tensors, as the reference does), so that
        autograd runs the nodes, and the records are written, in the reference's order. Unlike the
        default mode this adds nodes to the graph (gradient values are unchanged: they are identities)."""
        from torch.utils.hooks import BackwardHook
        hooks = self
        col = self.col
        tree = self.tree
        errors = self.errors
        frames = []
        params = [(n, p) for n, p in mod.named_parameters(recurse=False)]
        grad_key = f"{prefix}.parameters_grad"

        def bw_pre(bname, gen):
            def hook(module, grad_output):
                if col.generation == gen and not TLS.depth:
                    guarded(errors, bname, tree.enter, bname)
                return None
            return hook

        def bw_record(bname, grad_input, grad_output):
            col.module_backward(bname, None, list(grad_output), list(grad_input))
            tree.sync(bname, False)
            tree.exit(bname)

        def bw_hook(bname, gen):
            def hook(module, grad_input, grad_output):
                if col.generation == gen and not TLS.depth:
                    guarded(errors, bname, bw_record, bname, grad_input, grad_output)
                return None
            return hook

        def enter(args, kwargs):
            # inputs are recorded at the forward hook, after the module ran (an in-place op inside
            # shows), as the reference records them
            name, n, _parent, expand, inputs = col.module_enter(prefix, (), {})
            tree.enter(name)
            bw = None
            new_args = None
            if col.want_backward and torch.is_grad_enabled():
                bname = f"{prefix}.backward.{n}"
                bw = BackwardHook(mod, [bw_hook(bname, col.generation)], [bw_pre(bname, col.generation)])
                new_args = _ref_setup(bw.setup_input_hook, args)
            frames.append((name, expand, inputs, col.generation, bw))
            return new_args

        def leave(frame, args, kwargs, output):
            name, expand, inputs, _gen, bw = frame
            if inputs is not None:
                inputs = col.module_inputs(name, args, kwargs)
            col.module_exit(name, expand)
            live = hooks._live_params(mod, params, grad_key)
            kept = col.module_forward(name, None, inputs, output, live)
            if kept and live and col.want_backward and any(p.requires_grad for _, p in live):
                col.param_grad_placeholder(grad_key, [pn for pn, p in live if p.requires_grad])
            tree.sync(name, False)
            tree.exit(name)
            if bw is not None and torch.is_grad_enabled():
                return _ref_setup(bw.setup_output_hook, output)
            return None

        def pre(module, args, kwargs):
            if not _compiling() and RT.on and not TLS.depth:
                new_args = guarded(errors, prefix, enter, args, kwargs)
                if new_args is not None:
                    return new_args, kwargs
            return None

        def post(module, args, kwargs, output):
            if frames:
                frame = frames.pop()
                if frame[3] == col.generation:
                    new = guarded(errors, frame[0], leave, frame, args, kwargs, output)
                    if new is not None:
                        return new
            return None

        self._module_handles.append(mod.register_forward_pre_hook(pre, with_kwargs=True))
        self._module_handles.append(mod.register_forward_hook(post, with_kwargs=True, prepend=True))
        for pn, p in params:
            if p.requires_grad:
                self._hook_param(p, grad_key, pn)

    def _hook_module(self, mod, prefix):
        if self.reference:
            return self._hook_module_ref(mod, prefix)
        hooks = self
        col = self.col
        frames = []
        params = [(n, p) for n, p in mod.named_parameters(recurse=False)]
        grad_key = f"{prefix}.parameters_grad"

        def record_inputs(args, kwargs):
            name, n, parent, expand, inputs = col.module_enter(prefix, args, kwargs)
            edges = None
            if col.want_backward and torch.is_grad_enabled():
                # the backward record's "output" has one entry per positional tensor that requires grad,
                # nested ones included (the reference's module hooks see exactly those)
                tensor_args = [x for x in iter_tensors(args) if x.requires_grad]
                edges = ([(j, a.grad_fn, a.output_nr, a) for j, a in enumerate(tensor_args)], len(tensor_args))
            opened = None
            if edges is not None and edges[0]:
                stack = hooks._open
                if stack and stack[0][2] != col.generation:
                    stack.clear()        # left by a forward that raised in an earlier step
                opened = [edges, [], col.generation]
                stack.append(opened)
            frames.append((name, n, parent, expand, inputs, col.generation, edges, opened))

        def record_outputs(frame, args, output):
            name, n, parent, expand, inputs, _gen, edges, opened = frame
            col.module_exit(name, expand)
            live = hooks._live_params(mod, params, grad_key)
            kept = col.module_forward(name, parent, inputs, output, live)
            if kept and live and col.want_backward and any(p.requires_grad for _, p in live):
                col.param_grad_placeholder(grad_key, [pn for pn, p in live if p.requires_grad])
            if edges is not None and torch.is_grad_enabled():
                hooks._module_backward_hooks(prefix, n, edges, output, opened[1] if opened else ())

        def pre(module, args, kwargs):
            if not _compiling() and RT.on and not TLS.depth:
                guarded(hooks.errors, prefix, record_inputs, args, kwargs)
            return None

        def post(module, args, kwargs, output):
            if frames:
                frame = frames.pop()
                opened = frame[7]
                if opened is not None:
                    stack = hooks._open
                    while stack:          # down to this module's entry (a child that raised left its own)
                        if stack.pop() is opened:
                            break
                if frame[5] == col.generation:
                    guarded(hooks.errors, frame[0], record_outputs, frame, args, output)
            return None

        self._module_handles.append(mod.register_forward_pre_hook(pre, with_kwargs=True))
        self._module_handles.append(mod.register_forward_hook(post, with_kwargs=True, prepend=True))
        for pn, p in params:
            if p.requires_grad:
                self._hook_param(p, grad_key, pn)

    def _param_hook(self, key, pname):
        col = self.col
        errors = self.errors

        def hook(grad):
            if not TLS.depth and key in col.data:
                guarded(errors, key, col.param_grad, key, pname, grad)
            return None

        return hook

    def _module_backward_hooks(self, prefix, n, edges, output, identity_ops=()):
        """Backward of a module without touching the autograd graph.

        ``input`` (grads of the outputs): a tensor hook on each output. ``output`` (grads of the
        inputs, this module's contribution only, as a full backward hook reports them): post-hooks on
        the nodes inside the module that consume each input, found by walking the graph from the
        outputs back to the inputs' producers; a record is complete when all of them have run.
        """
        outs = [t for t in iter_tensors(output) if t.requires_grad]
        if not outs:
            return
        edges, n_ins = edges
        col = self.col
        errors = self.errors
        gen = col.generation
        name = f"{prefix}.backward.{n}"
        by_edge = {}
        by_leaf = {}
        # an input that is a view an in-place op inside the module overwrote (``Dropout(inplace=True)`` on
        # ``torch.flatten(x, 1)``): autograd re-based it, its old view node is out of the graph, and the gradient of
        # the overwritten value leaves through the base's ``CopySlices`` node towards the base's old producer. That
        # node's gradient, cut to the view (its size, stride and offset in the base), is the module's share
        rebased = {}                       # (base's old node, nr) -> (input index, view geometry)
        for j, fn, nr, a in edges:
            if fn is None:
                by_leaf[id(a)] = j
            else:
                by_edge[(fn, nr)] = j
                base = a._base
                if base is not None and a.grad_fn is not fn and len(fn.next_functions) == 1 \
                        and fn.next_functions[0][0] is not None and base.is_contiguous():
                    rebased[fn.next_functions[0]] = (j, (tuple(a.size()), tuple(a.stride()),
                                                         a.storage_offset() - base.storage_offset(),
                                                         tuple(base.size())))
        input_fns = {fn for (fn, _nr) in by_edge}
        input_fns.update(fn for (fn, _nr) in rebased)
        identity = []                      # (output index, input index) for outputs that are inputs
        for i, t in enumerate(outs):
            j = by_edge.get((t.grad_fn, t.output_nr)) if t.grad_fn is not None else by_leaf.get(id(t))
            if j is not None:
                identity.append((i, j))
        consumers = {}
        # outputs the module also consumes itself (attention weights returned next to the attention
        # output): their tensor hook sees the module's own use too; the nodes inside that consume them
        # tell that share apart (``inner``: node -> [(position, output index)])
        out_keys = {(t.grad_fn, t.output_nr): i for i, t in enumerate(outs) if t.grad_fn is not None} \
            if len(outs) > 1 else None
        inner = {}
        if edges or out_keys:
            seen = set()
            todo = [t.grad_fn for t in outs if t.grad_fn is not None and t.grad_fn not in input_fns]
            while todo:
                node = todo.pop()
                if node in seen:
                    continue
                seen.add(node)
                if len(seen) > _WALK_LIMIT:
                    consumers = None
                    inner = {}
                    break
                for pos, (nf, nr) in enumerate(node.next_functions):
                    if nf is None:
                        continue
                    if out_keys:
                        i = out_keys.get((nf, nr))
                        if i is not None:
                            inner.setdefault(node, []).append((pos, i))
                    j = by_edge.get((nf, nr))
                    if j is None and by_leaf and type(nf).__name__ == "AccumulateGrad":
                        j = by_leaf.get(id(getattr(nf, "variable", None)))
                    if j is None and rebased:
                        r = rebased.get((nf, nr))
                        if r is not None and type(node).__name__ == "CopySlices":
                            consumers.setdefault(node, []).append((pos, r[0], r[1]))
                            continue
                    if j is not None:
                        consumers.setdefault(node, []).append((pos, j))
                    elif nf not in input_fns and type(nf).__name__ != "AccumulateGrad":
                        todo.append(nf)
        if consumers is None:
            consumers = {}
        own = [None] * len(outs) if inner else None     # the module's own use of each output
        # the hooks' closures must not hold the outputs: a hook on a tensor reaching the tensor is a reference
        # cycle, freed only by the garbage collector (activations and gradients kept past their use)
        n_outs = len(outs)
        state = {"out": [None] * len(outs), "got_out": 0, "in": [None] * n_ins,
                 "left": len(consumers), "parent": None, "started": False, "done": False}
        need_in = bool(edges)

        def finish():
            if state["done"]:
                return
            state["done"] = True
            for i, j in identity:
                if state["in"][j] is None:
                    state["in"][j] = state["out"][i]
            for j, bname in identity_ops:
                # an op inside that returned input j unchanged: the gradient through it is this
                # module's share of input j (the residual use outside excluded)
                g = state["in"][j]
                if g is not None:
                    col.api_backward(bname, (g,), (g,))
            if name in col.bwd_module_stack:
                col.bwd_module_stack.remove(name)
            col.module_backward(name, state["parent"], state["out"], state["in"] if need_in else [])
            col.pending_backward.pop(name, None)

        def got_inner_grads(slots, grad_inputs):
            for pos, i in slots:
                g = grad_inputs[pos] if pos < len(grad_inputs) else None
                if g is not None:
                    own[i] = g if own[i] is None else own[i] + g

        def got_output_grad(i, grad):
            if own is not None and own[i] is not None:
                # the gradient summed into this output = the module's own use (added here in the order
                # autograd added it: the same bits) + what came from outside; nothing from outside: null
                with torch.no_grad():
                    grad = None if torch.equal(grad, own[i]) else grad - own[i]
            state["out"][i] = grad
            state["got_out"] += 1
            if not state["started"]:
                state["started"] = True
                state["parent"] = col.bwd_module_stack[-1] if col.bwd_module_stack else None
                col.bwd_module_stack.append(name)
                col.pending_backward[name] = finish
            if state["left"] <= 0 and state["got_out"] >= n_outs:
                finish()

        def got_input_grads(slots, grad_inputs):
            with torch.no_grad():
                for pos, j, *view in slots:
                    g = grad_inputs[pos] if pos < len(grad_inputs) else None
                    if g is None:
                        continue
                    if view:               # the base's gradient, cut to the re-based view (see above)
                        size, stride, offset, base_size = view[0]
                        if tuple(g.size()) != base_size:
                            continue
                        g = g.contiguous().as_strided(size, stride, offset)
                    prev = state["in"][j]
                    state["in"][j] = g if prev is None else prev + g
            state["left"] -= 1
            if state["left"] <= 0:
                finish()

        def out_hook(i):
            def hook(grad):
                if col.generation == gen and not state["done"] and not TLS.depth:
                    guarded(errors, name, got_output_grad, i, grad)
                return None
            return hook

        def node_hook(slots):
            def hook(grad_inputs, grad_outputs):
                if col.generation == gen and not state["done"] and not TLS.depth:
                    guarded(errors, name, got_input_grads, slots, grad_inputs)
                return None
            return hook

        def inner_hook(slots):
            def hook(grad_inputs, grad_outputs):
                if col.generation == gen and not state["done"] and not TLS.depth:
                    guarded(errors, name, got_inner_grads, slots, grad_inputs)
                return None
            return hook

        for i, t in enumerate(outs):
            self._on_grad(t, 2, out_hook(i), gen)
        for node, slots in consumers.items():
            node.register_hook(node_hook(slots))
        for node, slots in inner.items():
            node.register_hook(inner_hook(slots))

    def _on_grad(self, t, slot, fn, gen):
        """One tensor hook per tensor value per step; consumers' input-grad handlers run before producers'
        output-grad handlers, so a module's backward ends before the one feeding it begins.

        A tensor hook belongs to the node that made the tensor when it was registered: after an in-place op
        (``nn.ReLU(inplace=True)`` returns its input, now made by ``ReluBackward``) the hook registered before
        it gets the gradient of the overwritten value. So the entry is per (step, node): a module returning
        the tensor after an in-place op gets a hook of its own, on the new node."""
        node = id(t.grad_fn)
        entry = getattr(t, "_msprobe_grad_hooks", None)
        if entry is None or entry[0] != gen or entry[3] != node:
            entry = [gen, [], [], node]
            try:
                t._msprobe_grad_hooks = entry
            except Exception:
                pass

            def dispatch(grad, e=entry):
                for f in e[1]:
                    f(grad)
                # outputs: the module registered last (the outer one, returning its child's output)
                # starts its backward first, as with nested full backward hooks
                for f in reversed(e[2]):
                    f(grad)
                return None

            self.col.grad_hook_handles.append(t.register_hook(dispatch))
        entry[slot].append(fn)
