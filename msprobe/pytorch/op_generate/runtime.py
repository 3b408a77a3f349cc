# ---------------------------------------------------------------------------------------------
# msprobe op_generate runtime.  This text is copied verbatim into every generated script, so the
# script runs with torch alone (no msprobe needed).  It rebuilds the recorded inputs, runs the API
# on the device and on the CPU in higher precision, and judges the difference by the precision
# standard that applies to the API.
# ---------------------------------------------------------------------------------------------
import math
import os
import sys

try:
    import torch
except ImportError:
    sys.exit("error: this script needs PyTorch: pip install torch (on Ascend also torch_npu)")

from msprobe.core.acc_check.standards import *  # msprobe-only
from msprobe.core.acc_check.op_standards import *  # msprobe-only
from msprobe.core.op_generate.script_runtime import *  # msprobe-only

LOW_PRECISION = (torch.float16, torch.bfloat16)


def parse_dtype(text):
    """'torch.float16' -> torch.float16."""
    value = getattr(torch, str(text).rsplit(".", 1)[-1], None)
    if not isinstance(value, torch.dtype):
        raise ValueError(f"unknown dtype {text!r}")
    return value


# ---- argument records (T, DType and Unrecorded of the data block: script_runtime.py, pasted above) ----

class Device:
    """A device argument; every run substitutes its own device."""

    def __init__(self, recorded=None):
        self.recorded = recorded


# ---- building inputs ----

def random_tensor(spec, gen):
    """Random data with the recorded shape and dtype that reproduces the recorded Min/Max (first and
    last element) and, when Mean and Norm are known, the recorded mean and spread."""
    dtype = parse_dtype(spec.dtype)
    shape = [int(s) for s in spec.shape]
    n = math.prod(shape)
    if n == 0:
        return torch.empty(shape, dtype=dtype)
    if dtype == torch.bool:
        lo_b, hi_b = bool_bounds(spec)
        if lo_b == hi_b:
            return torch.full(shape, lo_b, dtype=torch.bool)
        flat = torch.randint(0, 2, (n,), generator=gen).bool()
        flat[0], flat[-1] = lo_b, hi_b
        return flat.reshape(shape)
    if not (dtype.is_floating_point or dtype.is_complex):
        ilo, ihi = int_bounds(spec)
        flat = torch.randint(ilo, ihi + 1, (n,), generator=gen, dtype=torch.int64)
        flat[0], flat[-1] = ilo, ihi
        return flat.to(dtype).reshape(shape)
    if dtype.is_complex:
        return torch.randn(shape, generator=gen, dtype=dtype)
    flo, fhi = float_bounds(spec)
    std = spread(spec, n, flo, fhi)
    if std is not None:
        flat = torch.randn(n, generator=gen, dtype=torch.float64) * std + float(spec.mean)
        flat = flat.clamp_(flo, fhi)
    else:
        flat = torch.rand(n, generator=gen, dtype=torch.float64) * (fhi - flo) + flo
    flat[0], flat[-1] = extremes(spec, flo, fhi)
    return flat.to(dtype).reshape(shape)


def load_tensor(spec):
    t = load_recorded(spec, lambda path: torch.load(path, map_location="cpu", weights_only=True))
    if not isinstance(t, torch.Tensor):
        raise SystemExit(f"error: {spec.file} does not hold a tensor")
    return t


def bench_dtype(specs):
    """One benchmark dtype for all floating inputs: float64 if anything is float32/64, else float32."""
    wide = any(s.dtype in ("torch.float32", "torch.float64", "torch.float", "torch.double") for s in specs)
    return torch.float64 if wide else torch.float32


def place(obj, device, float_dtype=None, dtype_map=None):
    """Copy tensors to a device (and floating tensors to float_dtype); resolve DType/Device/Unrecorded."""
    if isinstance(obj, torch.Tensor):
        t = obj.detach()
        if float_dtype is not None and t.is_floating_point():
            t = t.to(float_dtype)
        t = t.to(device).clone()
        return t
    if isinstance(obj, DType):
        d = parse_dtype(obj.name)
        return dtype_map.get(d, d) if dtype_map else d
    if isinstance(obj, Device):
        return torch.device(device)
    if isinstance(obj, Unrecorded):
        return None
    if isinstance(obj, list):
        return [place(v, device, float_dtype, dtype_map) for v in obj]
    if isinstance(obj, tuple):
        return tuple(place(v, device, float_dtype, dtype_map) for v in obj)
    if isinstance(obj, dict):
        return {k: place(v, device, float_dtype, dtype_map) for k, v in obj.items()}
    return obj


def grad_leaves(args, kwargs, specs_args, specs_kwargs):
    """Tensors that were recorded with requires_grad=True, marked as leaves that need a gradient."""
    leaves = []

    def walk(value, spec):
        if isinstance(spec, T) and isinstance(value, torch.Tensor):
            if spec.requires_grad and (value.is_floating_point() or value.is_complex()):
                value.requires_grad_(True)
                leaves.append(value)
        elif isinstance(spec, (list, tuple)) and isinstance(value, (list, tuple)):
            for v, s in zip(value, spec):
                walk(v, s)
        elif isinstance(spec, dict) and isinstance(value, dict):
            for k in spec:
                if k in value:
                    walk(value[k], spec[k])

    walk(args, specs_args)
    walk(kwargs, specs_kwargs)
    return leaves


def resolve_api(kind, name):
    root = {"Functional": torch.nn.functional, "Tensor": torch.Tensor, "Torch": torch, "Aten": torch.ops.aten}[kind]
    fn = root
    for part in name.split("."):
        fn = getattr(fn, part)
    return fn


def pick_device(choice):
    if choice in ("auto", "npu"):
        try:
            import torch_npu  # noqa: F401
            if torch.npu.is_available():
                return "npu:0"
        except Exception:  # noqa: BLE001 - no usable torch_npu: try the next device
            pass
        if choice == "npu":
            raise SystemExit("error: --device npu asked for, but torch_npu or an NPU is not available")
    if choice in ("auto", "cuda"):
        if torch.cuda.is_available():
            return "cuda:0"
        if choice == "cuda":
            raise SystemExit("error: --device cuda asked for, but CUDA is not available")
    return "cpu"


def map_tensors(obj, fn, counter=None):
    """Apply fn(index, tensor) to every tensor of a nested structure (indexes in traversal order)."""
    counter = [0] if counter is None else counter
    if isinstance(obj, torch.Tensor):
        i = counter[0]
        counter[0] += 1
        return fn(i, obj)
    if isinstance(obj, list):
        return [map_tensors(v, fn, counter) for v in obj]
    if isinstance(obj, tuple):
        return tuple(map_tensors(v, fn, counter) for v in obj)
    if isinstance(obj, dict):
        return {k: map_tensors(v, fn, counter) for k, v in obj.items()}
    return obj


def autocast_inputs(fn, args, kwargs, dtype, device):
    """The inputs as the API saw them under autocast: each wider floating input that autocast casts
    to ``dtype`` is rounded to ``dtype`` (kept in its own dtype), so the benchmark starts from the same
    values and the standard judges the API, not autocast's input cast.

    Which inputs autocast casts depends on the op; it is found by trying: an input whose rounding
    leaves the autocast result bit-identical is cast by autocast."""
    def call(a, kw):
        with torch.no_grad(), torch.autocast(device_type=torch.device(device).type, dtype=dtype):
            return [o.detach().cpu() if isinstance(o, torch.Tensor) else o
                    for o in flatten(fn(*place(a, device), **place(kw, device)))]

    def same(x, y):
        return len(x) == len(y) and all(
            (torch.equal(p, q) if isinstance(p, torch.Tensor) and isinstance(q, torch.Tensor) else p == q)
            for p, q in zip(x, y))

    try:
        base = call(args, kwargs)
    except Exception:  # noqa: BLE001 - the real run reports the failure
        return args, kwargs
    n = [0]
    map_tensors([args, kwargs], lambda i, t: n.__setitem__(0, n[0] + 1) or t)
    rounded = set()
    for k in range(n[0]):
        def round_k(i, t, k=k):
            if i == k and t.is_floating_point() and t.dtype.itemsize > dtype.itemsize:
                return t.to(dtype).to(t.dtype)
            return t
        a2, kw2 = map_tensors([args, kwargs], round_k)
        if all(torch.equal(x, y) for x, y in zip(flatten([a2, list(kw2.values())]), flatten([args, list(kwargs.values())]))
               if isinstance(x, torch.Tensor)):
            continue  # already representable in the autocast dtype
        try:
            if same(call(a2, kw2), base):
                rounded.add(k)
        except Exception:  # noqa: BLE001 - treat as not cast
            pass
    if not rounded:
        return args, kwargs
    a3, kw3 = map_tensors([args, kwargs], lambda i, t: t.to(dtype).to(t.dtype) if i in rounded else t)
    return a3, kw3


def run_once(fn, args, kwargs, propagation, grads, specs_args, specs_kwargs, autocast_dtype, device):
    """Call the API (and its backward); returns the list of compared outputs.

    ``propagation`` "both" (whole-dump checks): returns (forward outputs, input gradients), the gradients
    None when no input was recorded with requires_grad."""
    leaves = grad_leaves(args, kwargs, specs_args, specs_kwargs) if propagation != "forward" else []
    if autocast_dtype is not None:
        with torch.autocast(device_type=torch.device(device).type, dtype=autocast_dtype):
            out = fn(*args, **kwargs)
    else:
        out = fn(*args, **kwargs)
    if out is None and getattr(fn, "__name__", "") == "__setitem__" and args:
        out = args[0]  # x[index] = value returns nothing: what it made is x, written in place
    if propagation == "forward":
        return flatten(out)
    if propagation == "both":
        return flatten(out), (input_grads(out, grads, leaves) if leaves else None)
    if not leaves:
        raise SystemExit("error: no input of this API was recorded with requires_grad=True: there is no backward to reproduce")
    return input_grads(out, grads, leaves)


def input_grads(out, grads, leaves):
    """The gradients of ``leaves`` when the recorded output gradients are fed through the outputs."""
    outs, gouts = [], []
    for o, g in zip(flatten(out), flatten(grads)):
        if isinstance(o, torch.Tensor) and o.requires_grad and isinstance(g, torch.Tensor):
            outs.append(o)
            gouts.append(g.to(o.dtype) if g.dtype != o.dtype and g.is_floating_point() else g)
    if not outs:
        raise SystemExit("error: the recorded gradients do not match any output that requires grad")
    res = torch.autograd.grad(outputs=outs, inputs=leaves, grad_outputs=gouts, allow_unused=True)
    return list(res)


# ---- metrics: the framework-free precision standards (msprobe/core/acc_check/op_standards.py, pasted
# above in a generated script) applied to numpy copies of the outputs ----

_WIDEN = tuple(d for d in (torch.bfloat16, getattr(torch, "float8_e4m3fn", None), getattr(torch, "float8_e5m2", None))
               if d is not None)


def to_numpy(t):
    """A tensor's values as a numpy array (bfloat16 / float8 widened exactly to float32)."""
    t = t.detach().cpu()
    if t.dtype in _WIDEN:
        t = t.to(torch.float32)
    elif t.dtype == getattr(torch, "complex32", None):
        t = t.to(torch.complex64)
    return t.resolve_conj().resolve_neg().numpy()


def binary_metrics(d, b):
    return metrics_binary(to_numpy(d), to_numpy(b))


def absolute_metrics(d, b, dev_dtype):
    return metrics_absolute(to_numpy(d), to_numpy(b), dtype_name(dev_dtype))


def ulp_errors(d, b, dev_dtype, scale=None):
    return torch.from_numpy(errors_ulp(to_numpy(d), to_numpy(b), dtype_name(dev_dtype),
                                       None if scale is None else to_numpy(scale)))


def ulp_metrics(d, b, dev_dtype, scale=None):
    return metrics_ulp(to_numpy(d), to_numpy(b), dtype_name(dev_dtype), None if scale is None else to_numpy(scale))


def thousandth_metrics(d, b):
    return metrics_thousandth(to_numpy(d), to_numpy(b))


def benchmark_metrics(d, b, dev_dtype):
    return metrics_benchmark(to_numpy(d), to_numpy(b), dtype_name(dev_dtype))


def metrics_for(standard, d, b, dev_dtype, scale=None):
    return metrics_of(standard, to_numpy(d), to_numpy(b), dtype_name(dev_dtype),
                      None if scale is None else to_numpy(scale))


def ratio(x, y, dev_dtype):
    """Device metric over the reference implementation's metric, floored like the reference tool."""
    return ratio_of(x, y, dtype_name(dev_dtype))


def judge(standard, dev_dtype, m, ref=None):
    """Metric rows (name, value, ratio, verdict) and the worst verdict for one output (see judge_metrics)."""
    return judge_metrics(standard, dtype_name(dev_dtype), m, ref)


def assess_output(standard, d, b, ref, autocast=None, scale=None):
    """Judge one output pair; returns a dict with ``verdict`` and either ``message`` (an outcome decided
    before any metric: types, shapes, empty) or the table rows ``head`` + ``rows``, the ``metrics``, the
    ``standard`` used, the dtype whose thresholds applied (``judged``) and the compared CPU tensors.

    ``ref``: the reference implementation's output (None when the device is the CPU); ``autocast``: the
    dtype the call computed in, which sets the thresholds for float32 outputs of an autocast call;
    ``scale``: the output of the API on the absolute values of its inputs (ULP and absolute-threshold
    standards, see ulp_errors and op_standards.metrics_absolute).
    The metrics and verdicts are those of op_standards.assess_arrays, on numpy copies."""
    plain = plain_outcome(d, b, lambda x: isinstance(x, torch.Tensor))
    if plain is not None:
        return plain
    d = d.detach().cpu()
    b = b.detach().cpu()
    if d.is_complex() and b.is_complex():
        d, b = torch.view_as_real(d), torch.view_as_real(b)
    judged = autocast if (autocast is not None and d.dtype == torch.float32) else d.dtype
    r = None
    if d.is_floating_point() and b.is_floating_point() and d.shape == b.shape:
        if ref is not None and isinstance(ref, torch.Tensor) and ref.shape == (b.shape if not ref.is_complex()
                                                                                else b.shape[:-1]):
            r = ref.detach().cpu()
            r = torch.view_as_real(r) if r.is_complex() else r
            r = r if r.is_floating_point() else None
        if r is None:  # no second implementation: the benchmark correctly rounded to the device precision
            r = b.to(judged)
    sc = scale.detach().cpu() if isinstance(scale, torch.Tensor) else None
    res = assess_arrays(standard, to_numpy(d), to_numpy(b), None if r is None else to_numpy(r),
                        judged=dtype_name(judged), device_dtype=str(d.dtype), bench_dtype=str(b.dtype),
                        judged_text=f"{judged} (computed under autocast)" if judged != d.dtype else None,
                        scale=None if sc is None or not sc.is_floating_point() else to_numpy(sc))
    if "rows" in res:
        res.update(judged=judged, device=d, bench=b)
    return res


def compare_output(k, standard, d, b, ref, autocast=None, scale=None):
    """Print the comparison of output k (see assess_output); returns its verdict."""
    return print_outcome(k, assess_output(standard, d, b, ref, autocast, scale))


def check_recorded(outputs, recorded, real):
    """Warn when the reproduction's outputs differ in dtype or shape from what the dump recorded; with
    real data, also say how far the device result is from the recorded output tensor."""
    def compare_file(k, o, path):
        try:
            rec = torch.load(path, map_location="cpu", weights_only=True)
        except Exception:  # noqa: BLE001 - the comparison below is informative only
            return
        here = o.detach().cpu()
        if isinstance(rec, torch.Tensor) and rec.shape == here.shape:
            if torch.equal(rec, here):
                print(f"output {k} is identical to the recorded output")
            else:
                diff = (here.double() - rec.double()).abs().max().item()
                print(f"output {k} differs from the recorded output: max abs diff {diff:.6g}")

    check_recorded_outputs(outputs, recorded, real, lambda o: isinstance(o, torch.Tensor),
                           lambda o, r: str(o.dtype) == r.dtype, compare_file)


def setup(spec):
    """(function, autocast dtype, benchmark dtype, dtype map of the benchmark) of a case."""
    kind, name = spec["API"]
    fn = resolve_api(kind, name)
    autocast = parse_dtype(spec["AUTOCAST"]) if spec.get("AUTOCAST") else None
    everything = flatten([spec["ARGS"], list(spec["KWARGS"].values()), spec.get("GRADS", []),
                          spec.get("RECORDED_OUTPUTS") or []])
    bdtype = bench_dtype([s for s in everything if isinstance(s, T)]
                         + [T(d.name, []) for d in everything if isinstance(d, DType)])
    raise_dtype = {torch.float16: bdtype, torch.bfloat16: bdtype, torch.float32: bdtype}
    return fn, autocast, bdtype, raise_dtype


#: class-index losses: (target position, ignore_index position, its default)
CLASS_TARGET_LOSSES = {("Functional", "cross_entropy"): (1, 4, -100), ("Functional", "nll_loss"): (1, 4, -100)}


def _arg(args, kwargs, pos, key, default=None):
    return args[pos] if len(args) > pos else kwargs.get(key, default)


def _set_arg(args, kwargs, pos, key, value):
    if len(args) > pos:
        args[pos] = value
    else:
        kwargs[key] = value


def prepare_api_inputs(api, args, kwargs, seed):
    """The inputs some APIs need before they can run on the CPU (args is a list, changed in place):

    * ``cross_entropy`` / ``nll_loss``: an int32 class target becomes int64 (the reference's ``int32_to_int64``
      convert: the CPU kernels take Long targets only); random labels are drawn between the recorded Min and
      Max, and a causal LM's labels hold ignore_index (-100) besides the classes, so most drawn values would be
      neither a class nor ignore_index and the loss would raise (``Target -33 is out of bounds``; the reference
      draws them from 0 instead, never testing ignore_index): such elements become classes in [0, C) drawn from
      ``seed``, the recorded extremes (ignore_index, the largest class) stay. A recorded (real) target holds
      none, so it is never changed.
    * ``histc`` of an integer tensor: the tensor as float32 (the reference's ``int64_to_fp32``: the CPU has no
      integer histc)."""
    api = tuple(api)
    if not isinstance(args, list):
        return
    if api in (("Torch", "histc"), ("Tensor", "histc")):
        x = _arg(args, kwargs, 0, "input")
        if isinstance(x, torch.Tensor) and not (x.is_floating_point() or x.is_complex()):
            _set_arg(args, kwargs, 0, "input", x.float())
        return
    where = CLASS_TARGET_LOSSES.get(api)
    if where is None or not args or not isinstance(args[0], torch.Tensor):
        return
    t_pos, ig_pos, ig_default = where
    target = _arg(args, kwargs, t_pos, "target")
    if not isinstance(target, torch.Tensor) or target.is_floating_point() or target.dtype == torch.bool:
        return
    if target.dtype == torch.int32:
        target = target.long()
        _set_arg(args, kwargs, t_pos, "target", target)
    ignore = _arg(args, kwargs, ig_pos, "ignore_index", ig_default)
    inp = args[0]
    classes = inp.shape[1] if inp.dim() >= 2 else inp.shape[0] if inp.dim() == 1 else 0
    if classes <= 0:
        return
    bad = ((target < 0) | (target >= classes)) & (target != ignore)
    n = int(bad.sum())
    if n:
        gen = torch.Generator().manual_seed(int(seed))
        target[bad] = torch.randint(0, classes, (n,), generator=gen).to(target.dtype)


def run_iteration(spec, fn, device, make, seed, autocast, bdtype, raise_dtype, propagation=None):
    """Rebuild the inputs (``make(T)`` for every recorded tensor) and run the device, benchmark and
    reference calls; returns {label: outputs}.  A call that raises becomes RunFailed."""
    propagation = propagation or spec["PROPAGATION"]
    args_spec, kwargs_spec, grads_spec = spec["ARGS"], spec["KWARGS"], spec.get("GRADS", [])
    args = materialise(args_spec, make)
    kwargs = materialise(kwargs_spec, make)
    grads = materialise(grads_spec, make)
    prepare_api_inputs(spec["API"], args, kwargs, seed)
    bench_args, bench_kwargs = args, kwargs
    if autocast is not None:
        bench_args, bench_kwargs = autocast_inputs(fn, args, kwargs, autocast, device)
    runs = {}
    for label, dev, fdt, dmap, ac in (("device", device, None, None, autocast),
                                      ("bench", "cpu", bdtype, raise_dtype, None),
                                      ("reference", "cpu", None, None, autocast)):
        if label == "reference" and (dev == device or spec["STANDARD"] not in ("benchmark", "ulp")):
            runs[label] = ([], None) if propagation == "both" else []  # the CPU has no second implementation
            continue
        a = place(bench_args if label == "bench" else args, dev, fdt, dmap)
        kw = place(bench_kwargs if label == "bench" else kwargs, dev, fdt, dmap)
        g = place(grads, dev, fdt, dmap)
        torch.manual_seed(seed)
        runs[label] = guarded(label, dev, lambda: run_once(fn, a, kw, propagation, g, args_spec, kwargs_spec,
                                                           ac if fdt is None else None, dev))
    if spec["STANDARD"] in ("ulp", "absolute"):
        runs["scale"] = magnitude_run(spec, fn, bench_args, bench_kwargs, grads, bdtype, raise_dtype, propagation)
    return runs


def _magnitude(obj):
    if isinstance(obj, torch.Tensor):
        return obj.abs() if obj.is_floating_point() else obj
    if isinstance(obj, float):
        return abs(obj)
    if isinstance(obj, list):
        return [_magnitude(v) for v in obj]
    if isinstance(obj, tuple):
        return tuple(_magnitude(v) for v in obj)
    if isinstance(obj, dict):
        return {k: _magnitude(v) for k, v in obj.items()}
    return obj


def magnitude_run(spec, fn, args, kwargs, grads, bdtype, raise_dtype, propagation):
    """The ULP-standard APIs (matmul family) and the absolute-threshold ones (add, sub, mul, div, ...) are
    multilinear or elementwise: run on the absolute values of their inputs
    (and output gradients) in the benchmark dtype, each output element becomes the sum of the magnitudes
    of the terms it adds up, the scale its rounding noise follows.  None when that run fails."""
    try:
        a = _magnitude(place(args, "cpu", bdtype, raise_dtype))
        kw = _magnitude(place(kwargs, "cpu", bdtype, raise_dtype))
        g = _magnitude(place(grads, "cpu", bdtype, raise_dtype))
        with torch.no_grad() if propagation == "forward" else torch.enable_grad():
            return run_once(fn, a, kw, propagation, g, spec["ARGS"], spec["KWARGS"], None, "cpu")
    except (KeyboardInterrupt, SystemExit):
        raise
    except Exception:  # noqa: BLE001 - no scale: the plain ULP of the benchmark value
        return None


def reproduce(spec):
    """Run one generated case (``spec``: the data block of the script as a dict); returns the exit code."""
    opts = parse_options(spec, f"Reproduce {spec['FULL_NAME']} alone on the device and judge it against the CPU "
                               f"in higher precision ({STANDARD_TITLES[spec['STANDARD']]}).",
                         ("npu", "cuda", "cpu"), "device under test (default: NPU if present, else CUDA, else CPU)",
                         ".pt")
    device = pick_device(opts.device)
    kind, name = spec["API"]
    fn, autocast, bdtype, raise_dtype = setup(spec)
    real = opts.data_mode == "real_data"
    iters = 1 if real else opts.iter_times
    print(f"{spec['FULL_NAME']}: {kind}.{name} on {device}, benchmark on cpu in {bdtype}, "
          f"{'real data' if real else 'random data (seed %d)' % opts.seed}"
          + (f", autocast {autocast}" if autocast is not None else ""))
    gen = torch.Generator().manual_seed(opts.seed)
    torch.manual_seed(opts.seed)
    verdicts = []
    for i in range(iters):
        make = load_tensor if real else (lambda s: random_tensor(s, gen))
        try:
            runs = run_iteration(spec, fn, device, make, opts.seed + i, autocast, bdtype, raise_dtype)
        except RunFailed as failed:
            return report_failure(failed, f"{kind}.{name}")
        ref_out = runs["reference"]
        verdicts += judge_iteration(
            i, spec, runs, lambda out: check_recorded(out, spec.get("RECORDED_OUTPUTS"), real),
            lambda k, d, b, sc: compare_output(k, spec["STANDARD"], d, b,
                                               ref_out[k] if (device != "cpu" and k < len(ref_out)) else None,
                                               autocast, sc))
    return finish(spec, verdicts, "the benchmark rounded to the device dtype (the device is the CPU)"
                  if device == "cpu" else "the same API on the CPU in the device dtype")
