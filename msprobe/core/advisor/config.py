"""The one frozen configuration of the advisor / first-divergence analysis, and the noise-op list."""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import Iterable, Optional, Tuple

from msprobe.core.errors import MsprobeError

# The reference's -da skips these (substring of the API name, compare.md §7.2).
REFERENCE_NOISE_OPS: Tuple[str, ...] = ("Torch.empty", "Torch.fill", "Tensor.__setitem__")

# msprobe's default noise list: ops whose data differs between two healthy runs, or whose recorded data is
# not a result at all, so a "first difference" found on them is a false alarm.  Matched as a substring of
# the API name (the dump.json key), like the reference's list.  Users add to it with --noise-op or the
# ``noise_ops`` key of --da-config (``default_noise: false`` drops this list).
DEFAULT_NOISE_OPS: Tuple[str, ...] = REFERENCE_NOISE_OPS + (
    # uninitialised memory: empty buffers and the in-place ops that fill them (their inputs are garbage)
    "Tensor.new_empty",
    "Tensor.fill_",
    "Tensor.zero_",
    "Tensor.copy_",
    # masks: attention masks are filled with the dtype's minimum (-3.4e38 in fp32, -65504 in fp16), so a
    # bf16/fp16 run always "differs" from fp32 there
    "masked_fill",
    "Torch.triu",
    "Torch.tril",
    # random numbers differ between devices by design
    "Torch.rand",
    "Tensor.uniform_",
    "Tensor.normal_",
    "Tensor.bernoulli_",
    "Functional.dropout",
    # communication placeholders: no data of their own (handles, barriers, rank queries)
    "Distributed.wait",
    "Distributed.barrier",
    "Distributed.get_",
    "Distributed.is_",
    "Distributed.new_group",
    "Distributed.destroy_process_group",
)

THRESHOLD_METRICS = ("MaxRelativeErr", "MinRelativeErr", "MeanRelativeErr", "NormRelativeErr")


@dataclass(frozen=True)
class AnalysisConfig:
    """Settings of the advisor and of -da (built once by the CLI; never mutated)."""

    advisor: bool = True  # off with -c/--compare_only
    diff_analyze: bool = False  # -da
    noise_ops: Tuple[str, ...] = DEFAULT_NOISE_OPS  # substrings of API names skipped by -da
    # -da: an API differs when one of its relative statistics errors exceeds this fraction (reference: 0.5)
    thresholds: Tuple[Tuple[str, float], ...] = tuple((m, 0.5) for m in THRESHOLD_METRICS)
    top: int = 5  # suspects shown / written per rank
    output_dir: str = "./output"

    def is_noise(self, api: str) -> bool:
        return any(p in api for p in self.noise_ops)


def _str_list(value, what: str, src: str) -> Tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise MsprobeError(f"{src}: {what} must be a list of non-empty API name parts (strings), not {value!r}")
    return tuple(value)


def load_da_yaml(path: str) -> dict:
    """Read the -da configuration yaml (keys: noise_ops, default_noise, threshold, thresholds, top)."""
    import yaml

    from msprobe.core.fileio import check_path, yaml_safe_load

    path = check_path(path, "--da-config file", kind="file")
    try:
        with open(path, "r", encoding="utf-8") as fh:
            data = yaml_safe_load(fh, "--da-config file", path)
    except (OSError, UnicodeDecodeError) as exc:
        raise MsprobeError(f"--da-config file {path} cannot be read: {exc}; give a readable yaml file")
    except yaml.YAMLError as exc:
        where = getattr(exc, "problem_mark", None)
        line = f" (line {where.line + 1})" if where is not None else ""
        raise MsprobeError(f"--da-config file {path} is not valid yaml{line}; fix its syntax")
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise MsprobeError(f"--da-config file {path} must hold a mapping (noise_ops:, default_noise:, threshold:, top:)")
    known = {"noise_ops", "default_noise", "threshold", "thresholds", "top"}
    unknown = sorted(set(map(str, data)) - known)
    if unknown:
        raise MsprobeError(f"--da-config file {path}: unknown key(s) {', '.join(unknown)}; known keys: {', '.join(sorted(known))}")
    return data


def _number(value, what: str, src: str) -> float:
    # the reference's diff_analyze_threshold.yaml writes one-element lists; accept both forms
    if isinstance(value, list) and len(value) == 1:
        value = value[0]
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise MsprobeError(f"{src}: {what} must be a non-negative number (a fraction, 0.5 = 50%), not {value!r}")
    return float(value)


def build_config(
    advisor: bool = True,
    diff_analyze: bool = False,
    noise_ops: Iterable[str] = (),
    yaml_path: Optional[str] = None,
    top: Optional[int] = None,
    output_dir: str = "./output",
) -> AnalysisConfig:
    """Combine the defaults, a --da-config yaml and the command-line options (the CLI wins)."""
    data = load_da_yaml(yaml_path) if yaml_path else {}
    src = f"--da-config file {yaml_path}" if yaml_path else "-da"
    default_noise = data.get("default_noise", True)
    if not isinstance(default_noise, bool):
        raise MsprobeError(f"{src}: default_noise must be true or false, not {default_noise!r}")
    ops = list(DEFAULT_NOISE_OPS if default_noise else ())
    for p in _str_list(data.get("noise_ops"), "noise_ops", src) + _str_list(list(noise_ops) or None, "--noise-op", "--noise-op"):
        if p not in ops:
            ops.append(p)
    thresholds = dict((m, 0.5) for m in THRESHOLD_METRICS)
    if "threshold" in data:
        t = _number(data["threshold"], "threshold", src)
        thresholds = {m: t for m in THRESHOLD_METRICS}
    per = data.get("thresholds")
    if per is not None:
        if not isinstance(per, dict):
            raise MsprobeError(f"{src}: thresholds must map metric names ({', '.join(THRESHOLD_METRICS)}) to numbers")
        for k, v in per.items():
            if k not in THRESHOLD_METRICS:
                raise MsprobeError(f"{src}: thresholds: {k!r} is not one of {', '.join(THRESHOLD_METRICS)}")
            thresholds[k] = _number(v, f"thresholds.{k}", src)
    if top is None:
        top = data.get("top", 5)
        if isinstance(top, bool) or not isinstance(top, int) or top < 1:
            raise MsprobeError(f"{src}: top must be a positive whole number, not {top!r}")
    elif top < 1:
        raise MsprobeError(f"--top must be a positive whole number, not {top}")
    return AnalysisConfig(
        advisor=advisor, diff_analyze=diff_analyze, noise_ops=tuple(ops),
        thresholds=tuple((m, thresholds[m]) for m in THRESHOLD_METRICS), top=top,
        output_dir=os.path.abspath(output_dir or "./output"),
    )
