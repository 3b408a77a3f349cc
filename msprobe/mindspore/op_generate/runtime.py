# ---------------------------------------------------------------------------------------------
# msprobe op_generate runtime for MindSpore.  This text is copied verbatim into every generated
# script, so the script runs with MindSpore (and numpy) alone, no msprobe needed.  It rebuilds the
# recorded inputs, runs the API on the device and again in higher precision (the benchmark), and
# judges the difference by the precision standard of the API - the same standards, metrics and
# verdicts as the PyTorch scripts (msprobe/core/acc_check/op_standards.py, pasted above).
# ---------------------------------------------------------------------------------------------
import argparse
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


# ---- argument records (the data block below the runtime is written with these) ----

class T:
    """A recorded tensor: dtype, shape, statistics and, for real data, its .npy file."""

    def __init__(self, dtype, shape, min=None, max=None, mean=None, norm=None, requires_grad=False, file=None):
        self.dtype, self.shape = dtype, list(shape)
        self.min, self.max, self.mean, self.norm = min, max, mean, norm
        self.requires_grad, self.file = bool(requires_grad), file

    def __repr__(self):
        return f"T({self.dtype!r}, {self.shape})"


class DType:
    """A mindspore dtype argument; the benchmark run raises floating dtypes to its precision."""

    def __init__(self, name):
        self.name = name


class Unrecorded:
    """An argument the dump recorded as {}; passed as None."""


# ---- building inputs ----

def _finite(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def random_array(spec, rng):
    """Random data (numpy) with the recorded shape that reproduces the recorded Min/Max (first and last
    element) and, when Mean and Norm are known, the recorded mean and spread."""
    name = dname(spec.dtype)
    shape = [int(s) for s in spec.shape]
    n = math.prod(shape)
    lo, hi = spec.min, spec.max
    if n == 0:
        return np.zeros(shape, dtype=np.float64 if name in FLOAT_NAMES else np.int64)
    if name == "bool":
        lo_b, hi_b = bool(lo) if lo is not None else False, bool(hi) if hi is not None else True
        if lo_b == hi_b:
            return np.full(shape, lo_b, dtype=bool)
        flat = rng.randint(0, 2, n).astype(bool)
        flat[0], flat[-1] = lo_b, hi_b
        return flat.reshape(shape)
    if name not in FLOAT_NAMES and not name.startswith("complex"):
        ilo = int(math.floor(lo)) if _finite(lo) else 0
        ihi = int(math.ceil(hi)) if _finite(hi) else max(ilo, 0) + 10
        ihi = max(ihi, ilo)
        flat = rng.randint(ilo, ihi + 1, n).astype(np.int64)
        flat[0], flat[-1] = ilo, ihi
        return flat.reshape(shape)
    if name.startswith("complex"):
        return (rng.randn(*shape) + 1j * rng.randn(*shape)).astype(np.complex128)
    flo = float(lo) if _finite(lo) else -1.0
    fhi = float(hi) if _finite(hi) else 1.0
    if fhi < flo:
        flo, fhi = fhi, flo
    mean, norm = spec.mean, spec.norm
    if _finite(mean) and _finite(norm) and n > 2 and fhi > flo:
        rms = float(norm) / math.sqrt(n)
        std = math.sqrt(max(rms * rms - float(mean) ** 2, 0.0))
        flat = np.clip(rng.randn(n) * std + float(mean), flo, fhi)
    else:
        flat = rng.rand(n) * (fhi - flo) + flo
    # the recorded extremes, including inf/nan when the dump saw them
    flat[0] = float(lo) if isinstance(lo, (int, float)) and not isinstance(lo, bool) else flo
    flat[-1] = float(hi) if isinstance(hi, (int, float)) and not isinstance(hi, bool) else fhi
    return flat.reshape(shape)


def load_array(spec):
    if not spec.file:
        raise SystemExit(f"error: no tensor file recorded for {spec!r}; use --data-mode random_data")
    if not os.path.isfile(spec.file):
        raise SystemExit(f"error: tensor file {spec.file} not found; use --data-mode random_data or fix the path")
    try:
        return np.load(spec.file, allow_pickle=False)
    except Exception as exc:  # noqa: BLE001 - report a damaged file in one line
        raise SystemExit(f"error: cannot load {spec.file}: {exc}")


class Value:
    """A rebuilt input: the numpy values and the recorded dtype."""

    def __init__(self, array, dtype):
        self.array, self.dtype = array, dtype


def materialise(obj, make):
    """Replace every T in a nested argument structure by Value(make(T), dtype), the values rounded to
    the recorded dtype (so the benchmark starts from exactly the device's inputs)."""
    if isinstance(obj, T):
        return Value(host(to_tensor(make(obj), parse_dtype(obj.dtype)))[0], obj.dtype)
    if isinstance(obj, list):
        return [materialise(v, make) for v in obj]
    if isinstance(obj, tuple):
        return tuple(materialise(v, make) for v in obj)
    if isinstance(obj, dict):
        return {k: materialise(v, make) for k, v in obj.items()}
    return obj


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


def flatten(obj):
    if isinstance(obj, (list, tuple)):
        out = []
        for v in obj:
            out.extend(flatten(v))
        return out
    return [obj]


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
    if d is None and b is None:
        return {"verdict": "pass", "message": "no gradient on either side (input unused)"}
    if isinstance(d, ms.Tensor) != isinstance(b, ms.Tensor) or (
            not isinstance(d, ms.Tensor) and type(d) is not type(b)):
        return {"verdict": "error", "message": "ERROR: out_device and out_bench is not the same type!"}
    if not isinstance(d, ms.Tensor):
        if d == b:
            return {"verdict": "pass", "message": "PASS: out_device and out_bench equals."}
        return {"verdict": "error", "message": f"ERROR: out_device and out_bench is not equal! ({d!r} vs {b!r})"}
    dn, dtext = host(d)
    bn, btext = host(b)
    ref = rounded(bn, dtext) if dn.shape == bn.shape and dname(dtext) in FLOAT_NAMES else None
    sc = host(scale)[0] if isinstance(scale, ms.Tensor) else None
    return assess_arrays(standard, dn, bn, ref, judged=dname(dtext), device_dtype=dtext, bench_dtype=btext,
                         scale=sc)


def compare_output(k, standard, d, b, scale=None):
    print(f"index {k}:")
    res = assess_output(standard, d, b, scale)
    if "rows" not in res:
        print(res["message"])
        return res["verdict"]
    print(table(res["head"] + res["rows"]))
    print(f"verdict: {res['verdict']}")
    return res["verdict"]


def check_recorded(outputs, recorded, real):
    """Warn when the reproduction's outputs differ in dtype or shape from what the dump recorded; with
    real data, also say how far the device result is from the recorded output."""
    if not recorded:
        return
    for k, (o, r) in enumerate(zip(outputs, flatten(recorded))):
        if not (isinstance(o, ms.Tensor) and isinstance(r, T)):
            continue
        if dname(o.dtype) != dname(r.dtype) or list(o.shape) != [int(x) for x in r.shape]:
            print(f"warning: output {k} is {o.dtype} {list(o.shape)} here but was recorded as {r.dtype} {r.shape}; "
                  f"the reproduction may not match the original call")
            continue
        if real and r.file and os.path.isfile(r.file):
            try:
                rec = np.load(r.file, allow_pickle=False)
            except Exception:  # noqa: BLE001 - informative only
                continue
            here = host(o)[0]
            if rec.shape == here.shape:
                diff = float(np.max(np.abs(here.astype(np.float64) - rec.astype(np.float64)))) if here.size else 0.0
                print(f"output {k} is identical to the recorded output" if diff == 0
                      else f"output {k} differs from the recorded output: max abs diff {diff:.6g}")


class RunFailed(Exception):
    def __init__(self, label, exc):
        super().__init__(f"{type(exc).__name__}: {exc}")
        self.label, self.exc = label, exc


def settled(outputs):
    """PyNative runs kernels asynchronously: a kernel that fails (e.g. one the CPU backend lacks) raises
    only when its result is used.  Fetch every output here, inside the caller's error handling."""
    for o in outputs:
        if isinstance(o, ms.Tensor):
            host(o)
    return outputs


def run_iteration(spec, fn, make, bdtype):
    """Rebuild the inputs and run the device and benchmark calls (and, for the ULP standard, the
    benchmark on the absolute values of the inputs); returns {label: outputs}."""
    propagation = spec["PROPAGATION"]
    args = materialise(spec["ARGS"], make)
    kwargs = materialise(spec["KWARGS"], make)
    grads = materialise(spec.get("GRADS", []), make)
    runs = {}
    for label, fdt in (("device", None), ("bench", bdtype)):
        try:
            runs[label] = settled(run_once(fn, place(args, fdt), place(kwargs, fdt), propagation, place(grads, fdt)))
        except (SystemExit, KeyboardInterrupt):
            raise
        except Exception as exc:  # noqa: BLE001 - reported by the caller
            if os.environ.get("MSPROBE_DEBUG"):
                raise
            raise RunFailed(label, exc) from exc
    if spec["STANDARD"] == "ulp":
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
    ap = argparse.ArgumentParser(description=f"Reproduce {spec['FULL_NAME']} ({target}) alone on the device and "
                                             f"judge it against a higher-precision run ({STANDARD_TITLES[spec['STANDARD']]}).")
    ap.add_argument("--device", choices=("auto", "ascend", "gpu", "cpu"), default="auto",
                    help="device under test (default: Ascend if present, else GPU, else CPU)")
    ap.add_argument("--data-mode", choices=("random_data", "real_data"), default=spec["DATA_MODE"],
                    help=f"random inputs from the recorded statistics, or the recorded .npy tensors (default {spec['DATA_MODE']})")
    ap.add_argument("--iter-times", type=int, default=spec["ITER_TIMES"], help="repetitions with fresh random data")
    ap.add_argument("--seed", type=int, default=spec["SEED"], help="random seed")
    opts = ap.parse_args()
    if opts.iter_times < 1:
        ap.error("--iter-times must be >= 1")
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
            runs = run_iteration(spec, fn, make, bdtype)
        except RunFailed as failed:  # one line; MSPROBE_DEBUG=1 shows the traceback
            exc = failed.exc
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
            print(f"error: the {failed.label} run of {target} on {device} failed: {type(exc).__name__}: {first} "
                  f"(set MSPROBE_DEBUG=1 for the traceback; edit ARGS/KWARGS if an argument was not recorded)",
                  file=sys.stderr)
            return 2
        print(f"iter: {i}:")
        print("Compare result:")
        dev_out, bench_out = runs["device"], runs["bench"]
        if len(dev_out) != len(bench_out):
            print("ERROR: the number of outputs of out_device and out_bench differs!")
            verdicts.append("error")
            continue
        if i == 0 and spec["PROPAGATION"] == "forward":
            check_recorded(dev_out, spec.get("RECORDED_OUTPUTS"), real)
        scale_out = runs.get("scale") or []
        for k, (d, b) in enumerate(zip(dev_out, bench_out)):
            sc = scale_out[k] if k < len(scale_out) else None
            verdicts.append(compare_output(k, spec["STANDARD"], d, b, sc))
    final = worst(verdicts)
    print("Compare finished.")
    if spec["STANDARD"] in ("benchmark", "ulp"):
        print("Ratio = device metric / metric of the benchmark rounded to the device dtype")
    print(f"RESULT: {final.upper()} ({spec['FULL_NAME']}, {STANDARD_TITLES[spec['STANDARD']]})")
    return 1 if final == "error" else 0
