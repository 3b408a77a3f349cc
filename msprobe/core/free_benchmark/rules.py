"""The comparison rule of free_benchmark, per dtype (no framework imports).

Spec checks_and_monitors.md 2.5.  The framework adapter computes, per chunk of the flattened outputs, the
element ratio ``max(|orig|, tol) / max(|pert|, tol)`` (or finds a sign flip); everything else is decided here:
the constants, the number of chunks, the verdict and the ``max_rel`` written to the CSV.  Dtypes are named
without their framework prefix ("bfloat16", "float32").
"""

from __future__ import annotations

import math

#: noise added by add_noise, and the smallest max|x| a tensor must reach to be perturbed (add/bit noise)
NOISE = {"bfloat16": 1e-4, "float16": 1e-6, "float32": 1e-8, "float64": 1e-16}
DEFAULT_NOISE = 1e-8
#: consistent iff 1/thr <= ratio <= thr, by the ORIGINAL output's dtype (others: float32's)
THRESHOLD = {"float16": 1.002, "bfloat16": 1.004, "float32": 1.0002}
DEFAULT_THRESHOLD = 1.0002
NO_CHANGE_THRESHOLD = 1.0
BACKWARD_ABS_TOL = 1e-3
SYMBOL_FLIPPING = "symbol_flipping"
MAX_CHUNKS = 128
#: CPU ("single benchmark") rule: (rtol, small_value, small_value_atol, err_balance) by the tested dtype
SINGLE_BENCHMARK = {"float32": (2 ** -14, 1.0, 2 ** -14, 1e-4),
                    "float16": (2 ** -11, 1.0, 2 ** -11, 1e-4),
                    "bfloat16": (2 ** -8, 1.0, 2 ** -8, 1e-4)}
LOW_PRECISION = ("float16", "bfloat16")


def dtype_key(dtype) -> str:
    """"torch.bfloat16" / "Float32" / a dtype object -> "bfloat16" / "float32"."""
    text = str(dtype).rsplit(".", 1)[-1].lower()
    return {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32", "half": "float16", "float": "float32",
            "double": "float64"}.get(text, text)


def noise_value(dtype) -> float:
    return NOISE.get(dtype_key(dtype), DEFAULT_NOISE)


def abs_tol(pert_dtype, stage: str = "forward") -> float:
    """Values below this are clamped before the ratio: sqrt(noise of the PERTURBED output's dtype) forward,
    1e-3 backward."""
    if stage == "backward":
        return BACKWARD_ABS_TOL
    return math.sqrt(noise_value(pert_dtype))


def threshold(orig_dtype, pert_mode: str) -> float:
    if pert_mode == "no_change":
        return NO_CHANGE_THRESHOLD
    return THRESHOLD.get(dtype_key(orig_dtype), DEFAULT_THRESHOLD)


def chunk_count(nbytes: int) -> int:
    """Pieces a flattened output is compared in: clamp(2^(floor(log2(MiB)) - 4), 1, 128), so the temporaries of
    one piece stay a small fraction of the tensor (a 1 GiB output: 64 pieces of 16 MiB)."""
    mib = nbytes / float(1 << 20)
    if mib <= 0:
        return 1
    return int(min(max(2 ** (math.floor(math.log2(mib)) - 4), 1), MAX_CHUNKS))


def chunk_ratio(max_ratio: float, min_ratio: float) -> float:
    """One piece's ratio from its largest and smallest element ratio (NaN element ratios count as 1)."""
    if math.isnan(max_ratio):
        max_ratio = 1.0
    if math.isnan(min_ratio):
        min_ratio = 1.0
    inv = math.inf if min_ratio <= 0 else 1.0 / min_ratio
    return max(max_ratio, inv)


def is_consistent(ratio, thr: float) -> bool:
    """``ratio``: a float or SYMBOL_FLIPPING (always inconsistent)."""
    if ratio == SYMBOL_FLIPPING:
        return False
    return 1.0 / thr <= ratio <= thr


def max_rel(ratio):
    """The CSV's max_rel: ratio - 1, or the text symbol_flipping."""
    return ratio if ratio == SYMBOL_FLIPPING else ratio - 1.0


def single_benchmark_limits(dtype) -> tuple:
    return SINGLE_BENCHMARK.get(dtype_key(dtype), SINGLE_BENCHMARK["float32"])
