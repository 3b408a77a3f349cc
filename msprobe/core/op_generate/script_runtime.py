"""The framework-free part of the op_generate runtimes (msprobe/pytorch/op_generate/runtime.py and
msprobe/mindspore/op_generate/runtime.py): the argument records of the data block, the bounds of random
inputs, the command line, the per-iteration verdicts and the final result line.

Like op_standards.py, this file is copied into every generated script (after op_standards.py, before the
framework's own runtime), so it must stay plain Python with no msprobe import (lines marked
'# msprobe-only' are dropped when it is pasted).
"""
import argparse
import math
import os
import sys

from msprobe.core.acc_check.standards import STANDARD_TITLES  # msprobe-only
from msprobe.core.acc_check.op_standards import table, worst  # msprobe-only


# ---- argument records (the data block below the runtime is written with these) ----

class T:
    """A recorded tensor: dtype, shape, statistics and, for real data, its tensor file."""

    def __init__(self, dtype, shape, min=None, max=None, mean=None, norm=None, requires_grad=False, file=None):
        self.dtype, self.shape = dtype, list(shape)
        self.min, self.max, self.mean, self.norm = min, max, mean, norm
        self.requires_grad, self.file = bool(requires_grad), file

    def __repr__(self):
        return f"T({self.dtype!r}, {self.shape})"


class DType:
    """A dtype argument; the benchmark run raises floating dtypes to its precision."""

    def __init__(self, name):
        self.name = name


class Unrecorded:
    """An argument the dump recorded as {} (a positional dtype / device, say); passed as None."""


def flatten(obj):
    if isinstance(obj, (list, tuple)):
        out = []
        for v in obj:
            out.extend(flatten(v))
        return out
    return [obj]


def materialise(obj, make):
    """Replace every T in a nested argument structure by make(T)."""
    if isinstance(obj, T):
        return make(obj)
    if isinstance(obj, list):
        return [materialise(v, make) for v in obj]
    if isinstance(obj, tuple):
        return tuple(materialise(v, make) for v in obj)
    if isinstance(obj, dict):
        return {k: materialise(v, make) for k, v in obj.items()}
    return obj


# ---- random inputs: what the recorded statistics ask for (the framework draws the values) ----

def _finite(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def bool_bounds(spec):
    """The first and last element of a random bool tensor (the recorded Min and Max)."""
    lo, hi = spec.min, spec.max
    return (bool(lo) if lo is not None else False), (bool(hi) if hi is not None else True)


def int_bounds(spec):
    """The inclusive integer range of a random integer tensor (the recorded Min/Max, else 0..10)."""
    lo, hi = spec.min, spec.max
    ilo = int(math.floor(lo)) if _finite(lo) else 0
    ihi = int(math.ceil(hi)) if _finite(hi) else max(ilo, 0) + 10
    return ilo, max(ihi, ilo)


def float_bounds(spec):
    """The finite range of a random floating tensor (the recorded Min/Max, else -1..1)."""
    flo = float(spec.min) if _finite(spec.min) else -1.0
    fhi = float(spec.max) if _finite(spec.max) else 1.0
    return (fhi, flo) if fhi < flo else (flo, fhi)


def spread(spec, n, flo, fhi):
    """The standard deviation that gives ``n`` values around the recorded Mean the recorded Norm, or None
    when Mean or Norm is unknown (uniform values in [flo, fhi] then)."""
    mean, norm = spec.mean, spec.norm
    if _finite(mean) and _finite(norm) and n > 2 and fhi > flo:
        rms = float(norm) / math.sqrt(n)
        return math.sqrt(max(rms * rms - float(mean) ** 2, 0.0))
    return None


def extremes(spec, flo, fhi):
    """The first and last element of a random floating tensor: the recorded extremes, including inf/nan
    when the dump saw them."""
    lo, hi = spec.min, spec.max
    return (float(lo) if isinstance(lo, (int, float)) and not isinstance(lo, bool) else flo,
            float(hi) if isinstance(hi, (int, float)) and not isinstance(hi, bool) else fhi)


def load_recorded(spec, load):
    """The recorded tensor file of ``spec`` read by ``load(path)`` (real data); a missing or damaged
    file ends the script with one line."""
    if not spec.file:
        raise SystemExit(f"error: no tensor file recorded for {spec!r}; use --data-mode random_data")
    if not os.path.isfile(spec.file):
        raise SystemExit(f"error: tensor file {spec.file} not found; use --data-mode random_data or fix the path")
    try:
        return load(spec.file)
    except Exception as exc:  # noqa: BLE001 - report a damaged file in one line
        why = (str(exc).strip().splitlines() or [type(exc).__name__])[0]  # torch's weights_only text is a page
        raise SystemExit(f"error: cannot load {spec.file}: {why}")


# ---- judging ----

def plain_outcome(d, b, is_tensor, strict_type=True):
    """The verdict of an output pair decided before any metric (None when the metrics decide): no
    gradient on either side, types that differ (``strict_type``: any two types, else tensor or not and the
    types of non-tensors), non-tensors equal or not."""
    if d is None and b is None:
        return {"verdict": "pass", "message": "no gradient on either side (input unused)"}
    if (type(d) is not type(b)) if strict_type else (
            is_tensor(d) != is_tensor(b) or (not is_tensor(d) and type(d) is not type(b))):
        return {"verdict": "error", "message": "ERROR: out_device and out_bench is not the same type!"}
    if not is_tensor(d):
        if d == b:
            return {"verdict": "pass", "message": "PASS: out_device and out_bench equals."}
        return {"verdict": "error", "message": f"ERROR: out_device and out_bench is not equal! ({d!r} vs {b!r})"}
    return None


def print_outcome(k, res):
    """Print the judgement of output k (see op_standards.assess_arrays); returns its verdict."""
    print(f"index {k}:")
    if "rows" not in res:
        print(res["message"])
        return res["verdict"]
    print(table(res["head"] + res["rows"]))
    print(f"verdict: {res['verdict']}")
    return res["verdict"]


def check_recorded_outputs(outputs, recorded, real, is_tensor, same_dtype, compare_file):
    """Warn when the reproduction's outputs differ in dtype or shape from what the dump recorded; with
    real data, ``compare_file(k, output, path)`` says how far the device result is from the recorded output."""
    if not recorded:
        return
    for k, (o, r) in enumerate(zip(outputs, flatten(recorded))):
        if not (is_tensor(o) and isinstance(r, T)):
            continue
        if not same_dtype(o, r) or list(o.shape) != [int(x) for x in r.shape]:
            print(f"warning: output {k} is {o.dtype} {list(o.shape)} here but was recorded as {r.dtype} {r.shape}; "
                  f"the reproduction may not match the original call")
            continue
        if real and r.file and os.path.isfile(r.file):
            compare_file(k, o, r.file)


# ---- the script's command line and its result ----

def parse_options(spec, description, devices, device_help, file_kind):
    """The script's options: --device (auto or one of ``devices``), --data-mode, --iter-times, --seed."""
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--device", choices=("auto",) + tuple(devices), default="auto", help=device_help)
    ap.add_argument("--data-mode", choices=("random_data", "real_data"), default=spec["DATA_MODE"],
                    help=f"random inputs from the recorded statistics, or the recorded {file_kind} tensors "
                         f"(default {spec['DATA_MODE']})")
    ap.add_argument("--iter-times", type=int, default=spec["ITER_TIMES"], help="repetitions with fresh random data")
    ap.add_argument("--seed", type=int, default=spec["SEED"], help="random seed")
    opts = ap.parse_args()
    if opts.iter_times < 1:
        ap.error("--iter-times must be >= 1")
    return opts


class RunFailed(Exception):
    """One of the calls of an iteration raised (``label``: device, bench or reference)."""

    def __init__(self, label, device, exc):
        super().__init__(f"{type(exc).__name__}: {exc}")
        self.label, self.device, self.exc = label, device, exc


def guarded(label, device, call):
    """call(), a failure raised as RunFailed (with MSPROBE_DEBUG=1 as itself, for the traceback)."""
    try:
        return call()
    except (SystemExit, KeyboardInterrupt):
        raise
    except Exception as exc:  # noqa: BLE001 - reported by the caller
        if os.environ.get("MSPROBE_DEBUG"):
            raise
        raise RunFailed(label, device, exc) from exc


def report_failure(failed, target):
    """One line on stderr for a failed run (MSPROBE_DEBUG=1 shows the traceback); returns the exit code."""
    exc = failed.exc
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    print(f"error: the {failed.label} run of {target} on {failed.device} failed: {type(exc).__name__}: {first} "
          f"(set MSPROBE_DEBUG=1 for the traceback; edit ARGS/KWARGS if an argument was not recorded)",
          file=sys.stderr)
    return 2


def judge_iteration(i, spec, runs, check_recorded, compare):
    """Print and judge iteration ``i`` ({label: outputs}): ``check_recorded(device outputs)`` on the first
    forward iteration, ``compare(k, device, bench, scale)`` per output; returns the verdicts."""
    print(f"iter: {i}:")
    print("Compare result:")
    dev_out, bench_out = runs["device"], runs["bench"]
    if len(dev_out) != len(bench_out):
        print("ERROR: the number of outputs of out_device and out_bench differs!")
        return ["error"]
    if i == 0 and spec["PROPAGATION"] == "forward":
        check_recorded(dev_out)
    scale_out = runs.get("scale") or []
    return [compare(k, d, b, scale_out[k] if k < len(scale_out) else None)
            for k, (d, b) in enumerate(zip(dev_out, bench_out))]


def finish(spec, verdicts, ratio_base):
    """The closing lines (``ratio_base``: what the benchmark ratios divide by); returns the exit code."""
    final = worst(verdicts)
    print("Compare finished.")
    if spec["STANDARD"] in ("benchmark", "ulp"):
        print(f"Ratio = device metric / metric of {ratio_base}")
    print(f"RESULT: {final.upper()} ({spec['FULL_NAME']}, {STANDARD_TITLES[spec['STANDARD']]})")
    return 1 if final == "error" else 0
