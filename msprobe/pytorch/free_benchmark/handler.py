"""The free_benchmark handler of wrapped API calls (installed as ``Hooks.api_handler``).

For every selected call: the API runs as usual; then, under ``torch.no_grad`` and on copies, it runs again with
perturbed inputs, with the random state the first run started from (and the state after the first run restored
afterwards), so the training's values, gradients, autograd graph and random stream are those of a run without the
tool.  ``check`` compares the two outputs and keeps a CSV row per inconsistent output; ``fix`` writes the re-run's
output (upcast or on CPU, cast back) into the original output tensor.  The backward stage re-computes the input
gradients of the call twice (original and perturbed inputs) when the gradient of its output arrives.
"""

import torch

from msprobe.core.free_benchmark import rules
from msprobe.core.free_benchmark.handler_base import HandlerBase
from msprobe.core.free_benchmark.preheat import Preheat
from msprobe.core.free_benchmark.results import Row
from msprobe.pytorch.dump.hooks import TLS, _write_kind, guarded
from msprobe.pytorch.free_benchmark import compare, perturb
from msprobe.pytorch.free_benchmark.perturb import Skip

# never re-run: no output to compare, or re-running means nothing
_NEVER = {"__setitem__", "backward", "set_", "zero_", "copy_", "detach_", "requires_grad_", "retain_grad",
          "record_stream", "uniform_", "normal_", "bernoulli_", "random_", "exponential_", "geometric_",
          "cauchy_", "log_normal_", "fill_", "manual_seed", "seed"}


def _device_of(args, kwargs):
    for t in perturb.tensors((args, kwargs)):
        return t.device
    return torch.device("cpu")


def _autocast_state(device_type):
    try:
        return torch.is_autocast_enabled(device_type), torch.get_autocast_dtype(device_type)
    except (TypeError, RuntimeError, AttributeError):
        return False, None


class _Rng:
    """Every random state the call may draw from, taken before the call and replayed for the re-run: the CPU
    generator, the current CUDA device's and the call's device's (a factory call like ``torch.randn(...,
    device="cuda")`` has no tensor argument), and any ``torch.Generator`` passed to the call."""

    __slots__ = ("states",)

    def __init__(self, device, args, kwargs):
        states = [(torch.get_rng_state, torch.set_rng_state, torch.get_rng_state())]
        cuda = getattr(torch, "cuda", None)
        if cuda is not None and cuda.is_available() and cuda.is_initialized():
            devices = {cuda.current_device()}
            if device.type == "cuda":
                devices.add(device.index if device.index is not None else cuda.current_device())
            for d in devices:
                states.append((lambda d=d: cuda.get_rng_state(d), lambda s, d=d: cuda.set_rng_state(s, d),
                               cuda.get_rng_state(d)))
        npu = getattr(torch, "npu", None)
        if device.type == "npu" and npu is not None:
            states.append((npu.get_rng_state, npu.set_rng_state, npu.get_rng_state()))
        for g in _generators(args, kwargs):
            states.append((g.get_state, g.set_state, g.get_state()))
        self.states = states

    def replay(self, fn):
        after = [get() for get, _set, _before in self.states]
        for _get, put, before in self.states:
            put(before)
        try:
            return fn()
        finally:
            for (_get, put, _before), state in zip(self.states, after):
                put(state)


def _generators(args, kwargs):
    gens = [a for a in args if isinstance(a, torch.Generator)]
    gens += [v for v in kwargs.values() if isinstance(v, torch.Generator)]
    return gens


# APIs that write into arguments other than their first (running statistics; embedding with max_norm renormalises
# the weight rows it looks up): their re-run gets copies of those tensors
_WRITES_OTHERS = ("batch_norm", "instance_norm", "embedding")


class FreeBenchmark(HandlerBase):
    def __init__(self, service):
        super().__init__(service)
        self.preheat = Preheat(self.cfg.preheat_step, self.cfg.max_sample) if self.cfg.if_preheat else None
        self.generation = 0

    # ------------------------------------------------------------------ per step
    def _new_step_dir(self):
        if self.preheat is not None:
            self.preheat.new_step()

    def end_step(self):
        super().end_step()
        self.generation += 1

    # ------------------------------------------------------------------ the wrapped call
    def __call__(self, name, func, args, kwargs, distributed):
        n = self.next_index(name)
        TLS.depth += 1
        try:
            cfg = self.cfg
            if distributed or name.rsplit(".", 1)[-1] in _NEVER:
                return func(*args, **kwargs)
            stage_name = f"{name}.{n}.{cfg.fuzz_stage}"
            if not cfg.selects(stage_name):
                return func(*args, **kwargs)
            prep = guarded(self.errors, stage_name, self._prepare, name, args, kwargs)
            out = func(*args, **kwargs)
            if prep is not None:
                guarded(self.errors, stage_name, self._after, prep, name, n, func, args, kwargs, out)
            return out
        finally:
            TLS.depth -= 1

    def _prepare(self, name, args, kwargs):
        """Before the call: what the re-run needs that the call may change (random state, an in-place target)."""
        plan = (True, False)
        if self.preheat is not None:
            plan = self.preheat.plan(name)
            if not plan[0]:
                return None
        device = _device_of(args, kwargs)
        inplace = _write_kind(name, False) == 1 or kwargs.get("inplace") is True
        first = None
        if inplace and args:
            first = perturb.map_tensors(args[0], lambda t: t.detach().clone())
        return plan, device, _autocast_state(device.type), _Rng(device, args, kwargs), inplace, first

    def _rerun_inputs(self, prep, name, args, kwargs):
        _plan, _device, _ac, _rng, inplace, first = prep
        if inplace and args:
            args = (first,) + tuple(args[1:])
        api = name.rsplit(".", 1)[-1]
        if "embedding" in api and kwargs.get("max_norm") is None and (len(args) < 4 or args[3] is None):
            api = ""                                      # no max_norm: the weight is only read
        if any(w in api for w in _WRITES_OTHERS) and args:
            copy = lambda t: t.detach().clone()          # noqa: E731
            args = (args[0],) + tuple(perturb.map_tensors(list(args[1:]), copy))
            kwargs = {k: perturb.map_tensors(v, copy) for k, v in kwargs.items()}
        if "out" in kwargs or "inplace" in kwargs:
            kwargs = {k: v for k, v in kwargs.items() if k != "out"}
            if "inplace" in kwargs:
                kwargs["inplace"] = False
        return args, kwargs

    def _run(self, prep, mode, func, args, kwargs, out=None):
        """The perturbed re-run (no autograd, replayed random state); None when the mode does not apply."""
        _plan, device, (ac_on, ac_dtype), rng, _inplace, _first = prep
        # under autocast an op whose output is fp16/bf16 ran in that dtype even with float32 inputs
        cast_by_autocast = ac_on and ac_dtype in perturb.LOW and any(
            t.dtype in perturb.LOW for t in perturb.tensors(out))
        if mode == "improve_precision" and not perturb.has_low(args, kwargs) and not cast_by_autocast:
            return None       # nothing runs in low precision: nothing to raise
        pargs, pkwargs = perturb.perturb(mode, args, kwargs, autocast_dtype=ac_dtype if cast_by_autocast else None)

        def run():
            if mode in ("improve_precision", "to_cpu"):
                dev = "cpu" if mode == "to_cpu" else device.type
                with torch.autocast(device_type=dev, enabled=False):
                    return func(*pargs, **pkwargs)
            return func(*pargs, **pkwargs)

        with torch.no_grad():
            return rng.replay(run)

    def _after(self, prep, name, n, func, args, kwargs, out):
        if not any(compare.comparable(t, t) for t in perturb.tensors(out)):
            return
        rargs, rkwargs = self._rerun_inputs(prep, name, args, kwargs)
        if self.cfg.backward:
            self._arm_backward(prep, name, n, func, rargs, rkwargs, out)
            return
        fwd = f"{name}.{n}.forward"
        try:
            pout = self._run(prep, self.mode, func, rargs, rkwargs, out)
        except Skip as why:
            self._skip(name, str(why))
            return
        if pout is None:
            return
        if self.cfg.fix:
            self._fix(out, pout)
            return
        plan = prep[0]
        sample = plan[1]
        golden = self._run(prep, "to_cpu", func, rargs, rkwargs, out) if sample else None
        for idx, o, p in compare.output_pairs(out, pout):
            if not compare.comparable(o, p):
                continue
            if self.mode == "to_cpu":
                if not compare.single_benchmark(o, p):
                    self._row(fwd, "forward", None, o, idx)
                continue
            ratio = compare.ratio(o, p, rules.abs_tol(p.dtype))
            thr = self.preheat.threshold(name, o.dtype) if self.preheat is not None else \
                rules.threshold(o.dtype, self.mode)
            if not rules.is_consistent(ratio, thr):
                self._row(fwd, "forward", rules.max_rel(ratio), o, idx)
            if sample:
                cpu_ok = True
                for gidx, go, gp in compare.output_pairs(out, golden):
                    if gidx == idx and compare.comparable(go, gp):
                        cpu_ok = compare.single_benchmark(go, gp)
                self.preheat.record(name, o.dtype, ratio, cpu_ok)
        if sample:
            self.preheat.sample_done(name)

    def _row(self, api_name, stage, rel, t, idx):
        self.results.add(Row(self.rank, self.mode, stage, self.step, api_name, rel, str(t.dtype), str(t.shape), idx))

    @staticmethod
    def _fix(out, pout):
        with torch.no_grad():
            for _idx, o, p in compare.output_pairs(out, pout):
                if compare.comparable(o, p) and o.shape == p.shape:
                    o.data.copy_(p.to(device=o.device, dtype=o.dtype))

    # ------------------------------------------------------------------ backward stage
    def _arm_backward(self, prep, name, n, func, args, kwargs, out):
        if not torch.is_grad_enabled():
            return
        outs = [t for t in perturb.tensors(out) if t.is_floating_point()]
        k = next((i for i, t in enumerate(outs) if t.requires_grad and t.grad_fn is not None), None)
        if k is None:
            return
        # detached aliases: no autograd graph is kept alive, and their _version follows the real tensors'
        dargs = perturb.map_tensors(args, lambda t: t.detach())
        dkwargs = perturb.map_tensors(kwargs, lambda t: t.detach())
        wants = [t.requires_grad and t.is_floating_point() for t in perturb.tensors(args)]
        versions = [t._version for t in perturb.tensors(dargs)]
        if not any(wants):
            return
        gen = self.generation
        bname = f"{name}.{n}.backward"
        low_out = any(t.dtype in perturb.LOW for t in outs)
        step = self.step
        errors = self.errors

        def hook(grad):
            if self.generation == gen and not TLS.depth:
                guarded(errors, bname, self._backward_check, prep, bname, func, dargs, dkwargs, wants, versions,
                        k, grad, step, low_out)
            return None

        outs[k].register_hook(hook)

    def _backward_check(self, prep, bname, func, args, kwargs, wants, versions, k, grad, step, low_out):
        if [t._version for t in perturb.tensors(args)] != versions:
            self._skip(bname, "an input was changed in place before the backward")
            return
        _plan, device, (ac_on, ac_dtype), rng, _inplace, _first = prep

        def grads(a, kw, g, autocast_on):
            leaves = []
            it = iter(wants)

            def leaf(t):
                if next(it, False):
                    t = t.detach().requires_grad_(True)
                    leaves.append(t)
                return t
            a = perturb.map_tensors(a, leaf)
            with torch.enable_grad(), torch.autocast(device_type=device.type, dtype=ac_dtype or torch.bfloat16,
                                                     enabled=autocast_on):
                o = func(*a, **kw)
                t = [x for x in perturb.tensors(o) if x.is_floating_point()][k]
                return torch.autograd.grad(t, leaves, g.to(t.dtype), allow_unused=True)

        def both():
            original = grads(args, kwargs, grad, ac_on)
            mode = self.mode
            cast_by_autocast = ac_on and ac_dtype in perturb.LOW and low_out
            if mode == "improve_precision" and not perturb.has_low(args, {}) and not cast_by_autocast:
                return original, None
            with torch.no_grad():
                pargs, pkw = perturb.perturb(mode, args, kwargs, upcast_kwargs=False,
                                             autocast_dtype=ac_dtype if cast_by_autocast else None)
            g = grad.float() if mode == "improve_precision" and grad.dtype in perturb.LOW else grad
            return original, grads(pargs, pkw, g, ac_on and mode not in ("improve_precision", "to_cpu"))

        try:
            original, perturbed = rng.replay(both)
        except Skip as why:
            self._skip(bname, str(why))
            return
        if perturbed is None:
            return
        # under fp16/bf16 autocast the backward of a low-precision op runs in that dtype and only casts the
        # gradients of float32 inputs to float32: judged by the float32 threshold (1.0002) every linear/matmul
        # weight gradient of a clean bf16 model was inconsistent (max_rel ~2^-8, bf16 rounding)
        ran_low = ac_dtype if ac_on and ac_dtype in perturb.LOW and low_out else None
        bad = []
        for j, (go, gp) in enumerate(zip(original, perturbed)):
            if go is None or gp is None or not compare.comparable(go, gp):
                continue
            ratio = compare.ratio(go, gp, rules.BACKWARD_ABS_TOL)
            judged = ran_low if ran_low is not None and go.dtype == torch.float32 else go.dtype
            if not rules.is_consistent(ratio, rules.threshold(judged, self.mode)):
                bad.append((j, rules.max_rel(ratio), go))
        # as 8.x reports it: the first inconsistent input gradient on its own (no index), then every inconsistent
        # one of the call's input gradients with its index
        for j, (idx, rel, go) in enumerate(bad[:1] + bad):
            self.results.add(Row(self.rank, self.mode, "backward", step, bname, rel, str(go.dtype), str(go.shape),
                                 None if j == 0 else idx))
