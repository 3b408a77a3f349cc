# ---------------------------------------------------------------------------------------------
# msprobe op_generate runtime for MindSpore.  This text is copied verbatim into every generated
# script, so the script runs with MindSpore (and numpy) alone, no msprobe needed.  It rebuilds the
# recorded inputs, runs the API on the device and again in higher precision (the benchmark), and
# judges the difference by the precision standard of the API - the same standards, metrics and
# verdicts as the PyTorch scripts (msprobe/core/acc_check/op_standards.py, pasted above).
# ---------------------------------------------------------------------------------------------
import math
import os
import sys

os.environ.setdefault("GLOG_v", "3")  # MindSpore's C++ warnings (e.g. probing for an Ascend plugin)

try:
    import numpy as np
    import mindspore as ms
    from mindspore import mint, ops
except ImportError as _exc:
    sys.exit(f"error: this script needs MindSpore: pip install mindspore==2.10.0 \"numpy<2\" ({_exc})")

from msprobe.core.acc_check.standards import *  # msprobe-only
from msprobe.core.acc_check.op_standards import *  # msprobe-only
from msprobe.core.op_generate.script_runtime import *  # msprobe-only

FLOAT_NAMES = ("float16", "bfloat16", "float32", "float64")
_DTYPE_TYPE = getattr(getattr(ms, "common", None), "dtype", None)
_DTYPE_TYPE = getattr(_DTYPE_TYPE, "Type", type(ms.float32).__mro__[-3])  # the base class of every mindspore dtype


def parse_dtype(text):
    """'Float32' / 'mindspore.float32' / 'BFloat16' / 'Bool' -> the mindspore dtype."""
    name = str(text).rsplit(".", 1)[-1].lower()
    value = getattr(ms, "bool_" if name == "bool" else name, None)
    if value is None or not isinstance(value, _DTYPE_TYPE):
        raise ValueError(f"unknown MindSpore dtype {text!r}")
    return value


def dname(dtype):
    return str(dtype).rsplit(".", 1)[-1].lower()


# ---- building inputs (the argument records T, DType and Unrecorded: script_runtime.py, pasted above) ----

def random_array(spec, rng):
    """Random data (numpy) with the recorded shape that reproduces the recorded Min/Max (first and last
    element) and, when Mean and Norm are known, the recorded mean and spread."""
    name = dname(spec.dtype)
    shape = [int(s) for s in spec.shape]
    n = math.prod(shape)
    if n == 0:
        return np.zeros(shape, dtype=np.float64 if name in FLOAT_NAMES else np.int64)
    if name == "bool":
        lo_b, hi_b = bool_bounds(spec)
        if lo_b == hi_b:
            return np.full(shape, lo_b, dtype=bool)
        flat = rng.randint(0, 2, n).astype(bool)
        flat[0], flat[-1] = lo_b, hi_b
        return flat.reshape(shape)
    if name not in FLOAT_NAMES and not name.startswith("complex"):
        ilo, ihi = int_bounds(spec)
        flat = rng.randint(ilo, ihi + 1, n).astype(np.int64)
        flat[0], flat[-1] = ilo, ihi
        return flat.reshape(shape)
    if name.startswith("complex"):
        return (rng.randn(*shape) + 1j * rng.randn(*shape)).astype(np.complex128)
    flo, fhi = float_bounds(spec)
    std = spread(spec, n, flo, fhi)
    if std is not None:
        flat = np.clip(rng.randn(n) * std + float(spec.mean), flo, fhi)
    else:
        flat = rng.rand(n) * (fhi - flo) + flo
    flat[0], flat[-1] = extremes(spec, flo, fhi)
    return flat.reshape(shape)


def load_array(spec):
    return load_recorded(spec, lambda path: np.load(path, allow_pickle=False))


class Value:
    """A rebuilt input: the numpy values and the recorded dtype."""

    def __init__(self, array, dtype):
        self.array, self.dtype = array, dtype


def value_of(spec, make):
    """A recorded tensor rebuilt as Value(make(T), dtype), the values rounded to the recorded dtype (so
    the benchmark starts from exactly the device's inputs)."""
    return Value(host(to_tensor(make(spec), parse_dtype(spec.dtype)))[0], spec.dtype)


def to_tensor(array, dtype):
    """numpy values as a mindspore Tensor of ``dtype`` (bfloat16 through float32)."""
    if dtype == ms.bfloat16:
        return ms.Tensor(np.asarray(array, dtype=np.float32)).astype(ms.bfloat16)
    return ms.Tensor(np.asarray(array)).astype(dtype)


def place(obj, float_dtype=None, magnitude=False):
    """Values -> mindspore Tensors (floating ones in float_dtype for the benchmark); DType / Unrecorded
    resolved.  ``magnitude``: absolute values of the floating tensors (ULP scale run)."""
    if isinstance(obj, Value):
        dtype = parse_dtype(obj.dtype)
        if float_dtype is not None and dname(dtype) in FLOAT_NAMES:
            dtype = float_dtype
        arr = obj.array
        if magnitude and dname(dtype) in FLOAT_NAMES:
            arr = np.abs(arr)
        return to_tensor(arr, dtype)
    if isinstance(obj, DType):
        d = parse_dtype(obj.name)
        return float_dtype if (float_dtype is not None and dname(d) in FLOAT_NAMES) else d
    if isinstance(obj, Unrecorded):
        return None
    if isinstance(obj, list):
        return [place(v, float_dtype, magnitude) for v in obj]
    if isinstance(obj, tuple):
        return tuple(place(v, float_dtype, magnitude) for v in obj)
    if isinstance(obj, dict):
        return {k: place(v, float_dtype, magnitude) for k, v in obj.items()}
    if magnitude and isinstance(obj, float):
        return abs(obj)
    return obj


API_ROOTS = {"Functional": "ops", "Mint": "mint", "MintFunctional": "mint.nn.functional", "Tensor": "Tensor"}


def resolve_api(kind, name):
    root = {"Functional": ops, "Mint": mint, "Tensor": ms.Tensor}.get(kind)
    if kind == "MintFunctional":
        root = mint.nn.functional
    fn = root
    for part in name.split("."):
        fn = getattr(fn, part, None)
        if fn is None:
            raise SystemExit(f"error: mindspore.{API_ROOTS[kind]}.{name} does not exist in MindSpore {ms.__version__}")
    return fn


def pick_device(choice):
    """The device target: Ascend if present, else GPU, else CPU (or the one asked for)."""
    names = {"ascend": "Ascend", "gpu": "GPU", "cpu": "CPU"}
    order = ["ascend", "gpu", "cpu"] if choice == "auto" else [choice]
    for c in order:
        if c == "cpu":
            return "CPU"
        try:
            if ms.hal.is_available(names[c]):
                return names[c]
        except Exception:  # noqa: BLE001 - no such backend: try the next
            pass
        if choice != "auto":
            raise SystemExit(f"error: --device {choice} asked for, but that backend is not available")
    return "CPU"


def bench_dtype(specs, device):
    """One benchmark dtype for all floating inputs: float64 if anything is float32/64 (float32 off the CPU,
    where float64 kernels are rare), else float32."""
    wide = any(dname(s.dtype) in ("float32", "float64") for s in specs)
    return ms.float64 if (wide and device == "CPU") else ms.float32


def tensor_positions(args):
    """Indexes of the positional floating tensors (the inputs whose gradients a backward produces)."""
    return [i for i, a in enumerate(args) if isinstance(a, ms.Tensor) and dname(a.dtype) in FLOAT_NAMES]


def run_once(fn, args, kwargs, propagation, grads):
    """Call the API (forward), or feed the recorded output gradients back through it (backward: the
    gradients of its floating tensor inputs).  Returns the list of compared outputs."""
    if propagation == "forward":
        return flatten(fn(*args, **kwargs))
    idx = tensor_positions(args)
    if not idx:
        raise SystemExit("error: this API has no floating tensor input: there is no backward to reproduce")

    def partial(*tensors):
        a = list(args)
        for i, t in zip(idx, tensors):
            a[i] = t
        return fn(*a, **kwargs)

    out, vjp_fn = ms.vjp(partial, *[args[i] for i in idx])
    outs = flatten(out)
    sens = [g for g in flatten(grads) if isinstance(g, ms.Tensor)]
    if len(sens) != len(outs):
        raise SystemExit(f"error: {len(sens)} recorded output gradients for {len(outs)} outputs")
    sens = [s.astype(o.dtype) for s, o in zip(sens, outs)]
    return list(flatten(vjp_fn(sens[0] if not isinstance(out, (tuple, list)) else tuple(sens))))


def host(t):
    """An output as numpy (bfloat16 widened exactly to float32) and its dtype text."""
    if isinstance(t, ms.Tensor):
        text = str(t.dtype)
        if t.dtype == ms.bfloat16:
            t = t.astype(ms.float32)
        return t.asnumpy(), text
    return t, type(t).__name__


def rounded(b, dtype_text):
    """The benchmark correctly rounded to the device dtype (the reference when there is no second
    implementation)."""
    name = dname(dtype_text)
    if name == "bfloat16":
        return ms.Tensor(np.asarray(b, dtype=np.float32)).astype(ms.bfloat16).astype(ms.float32).asnumpy()
    if name in ("float16", "float32", "float64"):
        return np.asarray(b).astype(name)
    return None


def assess_output(standard, d, b, scale=None):
    """Judge one output pair (mindspore Tensors or Python values); see op_standards.assess_arrays."""
    plain = plain_outcome(d, b, lambda x: isinstance(x, ms.Tensor), strict_type=False)
    if plain is not None:
        return plain
    dn, dtext = host(d)
    bn, btext = host(b)
    ref = rounded(bn, dtext) if dn.shape == bn.shape and dname(dtext) in FLOAT_NAMES else None
    sc = host(scale)[0] if isinstance(scale, ms.Tensor) else None
    return assess_arrays(standard, dn, bn, ref, judged=dname(dtext), device_dtype=dtext, bench_dtype=btext,
                         scale=sc)


def compare_output(k, standard, d, b, scale=None):
    return print_outcome(k, assess_output(standard, d, b, scale))


def check_recorded(outputs, recorded, real):
    """Warn when the reproduction's outputs differ in dtype or shape from what the dump recorded; with
    real data, also say how far the device result is from the recorded output."""
    def compare_file(k, o, path):
        try:
            rec = np.load(path, allow_pickle=False)
        except Exception:  # noqa: BLE001 - informative only
            return
        here = host(o)[0]
        if rec.shape == here.shape:
            diff = float(np.max(np.abs(here.astype(np.float64) - rec.astype(np.float64)))) if here.size else 0.0
            print(f"output {k} is identical to the recorded output" if diff == 0
                  else f"output {k} differs from the recorded output: max abs diff {diff:.6g}")

    check_recorded_outputs(outputs, recorded, real, lambda o: isinstance(o, ms.Tensor),
                           lambda o, r: dname(o.dtype) == dname(r.dtype), compare_file)


def settled(outputs):
    """PyNative runs kernels asynchronously: a kernel that fails (e.g. one the CPU backend lacks) raises
    only when its result is used.  Fetch every output here, inside the caller's error handling."""
    for o in outputs:
        if isinstance(o, ms.Tensor):
            host(o)
    return outputs


def run_iteration(spec, fn, make, bdtype, device):
    """Rebuild the inputs and run the device and benchmark calls (and, for the ULP standard, the
    benchmark on the absolute values of the inputs); returns {label: outputs}."""
    propagation = spec["PROPAGATION"]
    args = materialise(spec["ARGS"], lambda t: value_of(t, make))
    kwargs = materialise(spec["KWARGS"], lambda t: value_of(t, make))
    grads = materialise(spec.get("GRADS", []), lambda t: value_of(t, make))
    runs = {}
    for label, fdt in (("device", None), ("bench", bdtype)):
        runs[label] = guarded(label, device, lambda: settled(run_once(fn, place(args, fdt), place(kwargs, fdt),
                                                                      propagation, place(grads, fdt))))
    if spec["STANDARD"] in ("ulp", "absolute"):
        try:
            runs["scale"] = settled(run_once(fn, place(args, bdtype, True), place(kwargs, bdtype, True), propagation,
                                             place(grads, bdtype, True)))
        except (SystemExit, KeyboardInterrupt):
            raise
        except Exception:  # noqa: BLE001 - no scale: the plain ULP of the benchmark value
            runs["scale"] = None
    return runs


def reproduce(spec):
    """Run one generated case (``spec``: the data block of the script as a dict); returns the exit code."""
    kind, name = spec["API"]
    target = f"mindspore.{API_ROOTS[kind]}.{name}"
    opts = parse_options(spec, f"Reproduce {spec['FULL_NAME']} ({target}) alone on the device and judge it against "
                               f"a higher-precision run ({STANDARD_TITLES[spec['STANDARD']]}).",
                         ("ascend", "gpu", "cpu"), "device under test (default: Ascend if present, else GPU, else CPU)",
                         ".npy")
    device = pick_device(opts.device)
    ms.set_context(mode=ms.PYNATIVE_MODE)
    ms.set_device(device)
    fn = resolve_api(kind, name)
    everything = flatten([spec["ARGS"], list(spec["KWARGS"].values()), spec.get("GRADS", []),
                          spec.get("RECORDED_OUTPUTS") or []])
    bdtype = bench_dtype([s for s in everything if isinstance(s, T)]
                         + [T(d.name, []) for d in everything if isinstance(d, DType)], device)
    real = opts.data_mode == "real_data"
    iters = 1 if real else opts.iter_times
    print(f"{spec['FULL_NAME']}: {target} on {device}, benchmark on {device} in {dname(bdtype)}, "
          f"{'real data' if real else 'random data (seed %d)' % opts.seed}")
    rng = np.random.RandomState(opts.seed % (2 ** 32))
    ms.set_seed(opts.seed % (2 ** 31))
    verdicts = []
    for i in range(iters):
        make = load_array if real else (lambda s: random_array(s, rng))
        try:
            runs = run_iteration(spec, fn, make, bdtype, device)
        except RunFailed as failed:
            return report_failure(failed, target)
        verdicts += judge_iteration(i, spec, runs, lambda out: check_recorded(out, spec.get("RECORDED_OUTPUTS"), real),
                                    lambda k, d, b, sc: compare_output(k, spec["STANDARD"], d, b, sc))
    return finish(spec, verdicts, "the benchmark rounded to the device dtype")
