"""The compare logic of each config_check checker: two packs in, one sheet (header + rows) and a verdict out.

Sheets, columns and verdicts are the reference's (``pass`` / ``warning`` / ``error``); where the reference
gets something wrong (the env sheet's swapped bench/cmp values, a relative difference divided by a
negative bench value, NaN statistics never equal, ...) this module does it right; docs/compatibility.md
lists each difference.
"""

from __future__ import annotations

import math
import os
import re
from difflib import SequenceMatcher
from typing import Dict, List, NamedTuple, Optional

from msprobe.core.config_check import pack as P
from msprobe.core.config_check.collect import normalise_package, parse_pip

PASS, WARNING, ERROR = "pass", "warning", "error"
STATS = ("max", "min", "mean", "norm")


class CheckResult(NamedTuple):
    name: str  # summary row name and sheet name
    verdict: str
    header: List[str]
    rows: List[list]


def worst(levels) -> str:
    levels = set(levels)
    return ERROR if ERROR in levels else WARNING if WARNING in levels else PASS


# ---------------------------------------------------------------------------------------------- env
#: the variables compared, by device kind: (name, default when unset); the reference's resource/env.yaml
ENV_TABLE = (
    {"npu": ("HCCL_DETERMINISTIC", "False"), "gpu": ("NCCL_DETERMINISTIC", "False")},
    {"npu": ("HCCL_ALGO", "None"), "gpu": ("NCCL_ALGO", "None")},
    {"npu": ("HCCL_INTRA_ROCE_ENABLE", "0")},
    {"npu": ("HCCL_INTRA_PCIE_ENABLE", "1")},
    {"npu": ("ASCEND_LAUNCH_BLOCKING", "0"), "gpu": ("CUDA_LAUNCH_BLOCKING", "0")},
    {"npu": ("ASCEND_RT_VISIBLE_DEVICES", "None"), "gpu": ("CUDA_VISIBLE_DEVICES", "None")},
)
ENV_HEADER = ["bench_env_name", "cmp_env_name", "bench_value", "cmp_value", "level"]


def device_kind(env: dict) -> str:
    """``npu`` when any variable name holds ``ASCEND`` (the reference's test), else ``gpu``."""
    return "npu" if any("ASCEND" in k for k in env) else "gpu"


def _env_value(env: dict, name: str, default: str) -> str:
    value = env.get(name)
    return default if value is None else str(value)


def compare_env(bench: dict, cmp: dict) -> CheckResult:
    bench_kind, cmp_kind = device_kind(bench), device_kind(cmp)
    rows = []
    for spec in ENV_TABLE:
        b, c = spec.get(bench_kind), spec.get(cmp_kind)
        if b and c:
            bv, cv = _env_value(bench, *b), _env_value(cmp, *c)
            if bv != cv:
                rows.append([b[0], c[0], bv, cv, ERROR])
        elif c:
            rows.append(["only cmp has this env", c[0], "", _env_value(cmp, *c), WARNING])
        elif b:
            rows.append([b[0], "only bench has this env", _env_value(bench, *b), "", WARNING])
    return CheckResult(P.ENV, worst(r[-1] for r in rows), ENV_HEADER, rows)


# ---------------------------------------------------------------------------------------------- pip
#: packages compared (the reference's resource/dependency.yaml), plus the framework's own package
DEPENDENCIES = ("transformers", "deepspeed", "megatron", "numpy", "datasets", "peft")
FRAMEWORK_PACKAGES = {"pytorch": ("torch",), "mindspore": ("mindspore",), None: ("torch", "mindspore")}
PIP_HEADER = ["package", "bench version", "cmp version", "level"]


def compare_pip(bench_text: str, cmp_text: str, fmk: Optional[str]) -> CheckResult:
    bench, cmp = parse_pip(bench_text), parse_pip(cmp_text)
    rows = []
    for package in DEPENDENCIES + FRAMEWORK_PACKAGES.get(fmk, FRAMEWORK_PACKAGES[None]):
        key = normalise_package(package)
        bv, cv = bench.get(key) or None, cmp.get(key) or None
        if bv != cv:
            rows.append([package, bv or "None", cv or "None", ERROR])
    return CheckResult(P.PIP, worst(r[-1] for r in rows), PIP_HEADER, rows)


# ---------------------------------------------------------------------------------- hyperparameters
HYPER_HEADER = ["file_name", "bench_para", "cmp_para", "bench_value", "cmp_value", "matched_with", "level"]
#: canonical name -> aliases (the reference's resource/hyperparameter.yaml)
ALIASES = {
    "learning_rate": ("lr", "learningrate"),
    "batch_size": ("batch", "bs", "batch_size_per_gpu"),
    "epochs": ("num_epochs", "max_epochs", "epoch"),
    "weight_decay": ("wd", "weightdecay"),
    "dropout_rate": ("dropout", "drop_rate"),
    "compute_dtype": ("bf16", "fp32"),
    "residual_dtype": ("fp32_residual_connection",),
    "softmax_compute_dtype": ("attention_softmax_in_fp32",),
}
SIMILARITY_THRESHOLD = 0.8


def _short_name(key: str) -> str:
    return key.split(".")[-1].replace("-", "_")


def _match(name: str, available: Dict[str, str]):
    """(matched short name, matched_with) of a bench parameter among the cmp ones not matched yet."""
    if name in available:
        return name, "pure name"
    canonical = next((c for c, aliases in ALIASES.items() if name == c or name in aliases), None)
    if canonical:
        for candidate in (canonical,) + ALIASES[canonical]:
            if candidate in available:
                return candidate, "mapping"
    best, best_ratio = None, SIMILARITY_THRESHOLD
    for candidate in available:
        ratio = SequenceMatcher(None, name.lower(), candidate.lower()).ratio()
        if ratio > best_ratio:
            best, best_ratio = candidate, ratio
    if best is not None:
        return best, f"similarity:{best_ratio}"
    return None, None


def _is_number_text(v) -> bool:
    return isinstance(v, str) and re.fullmatch(r"\s*[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?\s*", v) is not None


def _same_value(a, b) -> bool:
    """Equal as the reference sees them (numbers as their text), and numbers written differently but equal
    (``1e-4`` in a script, ``0.0001`` in a yaml file)."""
    def norm(v):
        return str(v) if isinstance(v, (int, float)) else v

    if norm(a) == norm(b):
        return True
    if isinstance(a, bool) or isinstance(b, bool):
        return False
    if (isinstance(a, (int, float)) or _is_number_text(a)) and (isinstance(b, (int, float)) or _is_number_text(b)):
        try:
            return float(a) == float(b)
        except (TypeError, ValueError):
            return False
    return False


def _cell(v):
    if isinstance(v, bool):
        return str(v)
    if isinstance(v, (int, float, str)) or v is None:
        return str(v) if isinstance(v, (int, float)) else v
    return str(v)


def compare_hyper_params(bench: dict, cmp: dict, file_name: str) -> List[list]:
    if not isinstance(bench, dict) or not isinstance(cmp, dict):
        return []
    bench_short = {}
    for key in bench:
        bench_short.setdefault(_short_name(key), key)
    cmp_short = {}
    for key in cmp:
        cmp_short.setdefault(_short_name(key), key)
    rows = []
    for short, bench_key in bench_short.items():
        matched, how = _match(short, cmp_short)
        bv = bench[bench_key]
        if matched is None:
            rows.append([file_name, bench_key, "Only in benchmark", _cell(bv), "", "", WARNING])
            continue
        cmp_key = cmp_short.pop(matched)
        cv = cmp[cmp_key]
        if not _same_value(bv, cv):
            rows.append([file_name, bench_key, cmp_key, _cell(bv), _cell(cv), how, ERROR])
    for cmp_key in cmp_short.values():
        rows.append([file_name, "Only in comparison", cmp_key, "", _cell(cmp[cmp_key]), "", WARNING])
    rows.sort(key=lambda r: (str(r[1]), str(r[2])))
    return rows


def compare_hyperparameters(bench_pack: P.Pack, cmp_pack: P.Pack) -> CheckResult:
    rows = []
    for file_name in P.HYPER_FILES:
        name = f"{P.HYPER_DIR}/{file_name}"
        if bench_pack.has(name) and cmp_pack.has(name):
            rows.extend(compare_hyper_params(bench_pack.json(name), cmp_pack.json(name), file_name))
    return CheckResult(P.HYPER_DIR, worst(r[-1] for r in rows), HYPER_HEADER, rows)


# ------------------------------------------------------------------------------- weights and dataset
WEIGHTS_HEADER = ["step", "rank", "weight_name", "equal", "max_relative_diff", "min_relative_diff",
                  "mean_relative_diff", "norm_relative_diff"]
DATASET_HEADER = ["step", "rank", "tag", "equal", "max_relative_diff", "min_relative_diff",
                  "mean_relative_diff", "norm_relative_diff"]
ONLY_BENCH, ONLY_CMP = "only bench have", "only cmp have"


def _num(v) -> Optional[float]:
    if isinstance(v, bool) or v is None:
        return None
    try:
        return float(v)
    except (TypeError, ValueError):
        return None


def _stat_equal(a, b) -> bool:
    fa, fb = _num(a), _num(b)
    if fa is None or fb is None:
        return a == b
    return fa == fb or (math.isnan(fa) and math.isnan(fb))


def _relative_diff(b, c) -> Optional[float]:
    """|bench - cmp| / |bench|; None when bench is 0 or a value is missing or not finite."""
    fb, fc = _num(b), _num(c)
    if fb is None or fc is None or fb == 0 or not math.isfinite(fb) or not math.isfinite(fc):
        return None
    return abs(fb - fc) / abs(fb)


def _is_stats(v) -> bool:
    return isinstance(v, dict) and set(v) == set(STATS)


def _stats_row(bv: dict, cv: dict) -> list:
    if not _is_stats(cv):
        return [False, None, None, None, None]
    equal = all(_stat_equal(bv[k], cv[k]) for k in STATS)
    return [equal] + [_relative_diff(bv[k], cv[k]) for k in STATS]


def _verdict_of_equal(rows, column: int) -> str:
    values = [r[column] for r in rows]
    if any(v is False for v in values):
        return ERROR
    if any(isinstance(v, str) for v in values):
        return WARNING
    return PASS


def compare_weights(bench_pack: P.Pack, cmp_pack: P.Pack) -> CheckResult:
    bench_files, cmp_files = P.step_rank_files(bench_pack, P.WEIGHTS), P.step_rank_files(cmp_pack, P.WEIGHTS)
    rows = []
    for key in sorted(set(bench_files) | set(cmp_files)):
        step, rank = key
        bench = bench_pack.json(bench_files[key]) if key in bench_files else None
        cmp = cmp_pack.json(cmp_files[key]) if key in cmp_files else None
        bench = bench if isinstance(bench, dict) else ({} if key in bench_files else None)
        cmp = cmp if isinstance(cmp, dict) else ({} if key in cmp_files else None)
        if cmp is None or bench is None:
            only, data = (ONLY_BENCH, bench) if cmp is None else (ONLY_CMP, cmp)
            rows.extend([step, rank, name, only, None, None, None, None] for name in data)
            continue
        for name, bv in bench.items():
            if name not in cmp:
                rows.append([step, rank, name, ONLY_BENCH, None, None, None, None])
            elif _is_stats(bv):
                rows.append([step, rank, name] + _stats_row(bv, cmp[name]))
        rows.extend([step, rank, name, ONLY_CMP, None, None, None, None] for name in cmp if name not in bench)
    return CheckResult(P.WEIGHTS, _verdict_of_equal(rows, 3), WEIGHTS_HEADER, rows)


def _dataset_rows(bench: dict, cmp: dict, tag: str, out: list, depth: int = 0) -> None:
    if depth > 100:
        return
    for key, bv in bench.items():
        new_tag = f"{tag}.{key}" if tag else str(key)
        if key not in cmp:
            out.append((new_tag, [False, None, None, None, None]))  # the reference's status 'delete'
            continue
        if not isinstance(bv, dict):
            continue
        if _is_stats(bv):
            out.append((new_tag, _stats_row(bv, cmp[key])))
        elif isinstance(cmp[key], dict):
            _dataset_rows(bv, cmp[key], new_tag, out, depth + 1)
        else:
            out.append((new_tag, [False, None, None, None, None]))
    for key in cmp:
        if key not in bench:  # the reference's status 'added'
            out.append((f"{tag}.{key}" if tag else str(key), [False, None, None, None, None]))


def compare_dataset(bench_pack: P.Pack, cmp_pack: P.Pack) -> CheckResult:
    bench_files, cmp_files = P.step_rank_files(bench_pack, P.DATASET), P.step_rank_files(cmp_pack, P.DATASET)
    rows = []
    for key in sorted(set(bench_files) | set(cmp_files)):
        step, rank = key
        if key not in cmp_files or key not in bench_files:
            rows.append([step, rank, "", ONLY_BENCH if key in bench_files else ONLY_CMP, None, None, None, None])
            continue
        bench, cmp = bench_pack.json(bench_files[key]), cmp_pack.json(cmp_files[key])
        found: list = []
        _dataset_rows(bench if isinstance(bench, dict) else {}, cmp if isinstance(cmp, dict) else {}, "", found)
        rows.extend([step, rank, tag] + values for tag, values in found)
    return CheckResult(P.DATASET, _verdict_of_equal(rows, 3), DATASET_HEADER, rows)


# -------------------------------------------------------------------------------------------- random
RANDOM_HEADER = ["op", "rank", "bench_stack", "cmp_stack", "bench_count", "cmp_count", "check_result"]
NO_MATCH = "no match stack"
_FRAME_RE = re.compile(r"^File (?P<path>.*?), line (?P<line>\d+), in (?P<func>[^,]*), ?(?P<code>.*)$", re.S)


def _frame_parts(frame: str):
    m = _FRAME_RE.match(frame) if isinstance(frame, str) else None
    if not m:
        return "", "", str(frame)
    return os.path.basename(m.group("path").replace("\\", "/")), m.group("func"), m.group("code")


def stacks_match(a: List[str], b: List[str], threshold: float = SIMILARITY_THRESHOLD) -> bool:
    """Two call stacks are the same place when they have as many frames and every frame scores at least
    ``threshold``: (same file name + same function + similarity of the code line) / 3.  Paths and line
    numbers may differ between environments."""
    if len(a) != len(b):
        return False
    for fa, fb in zip(a, b):
        pa, fna, ca = _frame_parts(fa)
        pb, fnb, cb = _frame_parts(fb)
        score = ((1.0 if pa and pa == pb else 0.0) + (1.0 if fna == fnb else 0.0)
                 + SequenceMatcher(None, ca, cb).ratio()) / 3.0
        if score < threshold:
            return False
    return True


def merged_random(pack: P.Pack, first_only=frozenset()) -> Dict[int, Dict[str, list]]:
    """{rank: {op: [{"count", "stack"}]}}: the calls up to the first forward plus those of later steps
    (msprobe's ``random/step{S}/rank{R}.json``), or only the former for the ranks in ``first_only``."""
    out: Dict[int, Dict[str, list]] = {}
    for rank, names in P.random_files(pack).items():
        if rank in first_only:
            names = [n for n in names if "/step" not in n]
        ops: Dict[str, list] = {}
        for name in names:
            data = pack.json(name)
            if not isinstance(data, dict):
                continue
            for op, entries in data.items():
                merged = ops.setdefault(str(op), [])
                for entry in entries if isinstance(entries, list) else []:
                    if not isinstance(entry, dict):
                        continue
                    raw = entry.get("stack")
                    stack = [str(x) for x in raw] if isinstance(raw, list) else ([] if raw is None else [str(raw)])
                    count = _num(entry.get("count"))
                    count = int(count) if count is not None and math.isfinite(count) and count >= 0 else 0
                    for have in merged:
                        if have["stack"] == stack:
                            have["count"] += count
                            break
                    else:
                        merged.append({"count": count, "stack": stack})
        out[rank] = ops
    return out


def compare_random(bench_pack: P.Pack, cmp_pack: P.Pack) -> CheckResult:
    # a pack of the reference's (no per-step random files) is compared on the calls up to the first forward
    both_steps = bench_pack.has(P.MARKER) and cmp_pack.has(P.MARKER)
    first_only = frozenset() if both_steps else frozenset(set(P.random_files(bench_pack)) | set(P.random_files(cmp_pack)))
    bench_all, cmp_all = merged_random(bench_pack, first_only), merged_random(cmp_pack, first_only)
    rows = []
    for rank in sorted(set(bench_all) | set(cmp_all)):
        bench_ops, cmp_ops = bench_all.get(rank, {}), cmp_all.get(rank, {})
        for op in sorted(set(bench_ops) | set(cmp_ops)):
            bench_entries, cmp_entries = bench_ops.get(op, []), list(cmp_ops.get(op, []))
            used = [False] * len(cmp_entries)
            pairs = []
            for be in bench_entries:  # identical stacks first, then similar ones; each cmp stack used once
                j = next((j for j, ce in enumerate(cmp_entries) if not used[j] and ce["stack"] == be["stack"]), None)
                pairs.append(j)
                if j is not None:
                    used[j] = True
            for i, be in enumerate(bench_entries):
                if pairs[i] is None:
                    j = next((j for j, ce in enumerate(cmp_entries)
                              if not used[j] and stacks_match(be["stack"], ce["stack"])), None)
                    pairs[i] = j
                    if j is not None:
                        used[j] = True
            for be, j in zip(bench_entries, pairs):
                bstack = "\n".join(be["stack"])
                if j is None:
                    rows.append([op, rank, bstack, NO_MATCH, be["count"], 0, False])
                else:
                    ce = cmp_entries[j]
                    rows.append([op, rank, bstack, "\n".join(ce["stack"]), be["count"], ce["count"],
                                 be["count"] == ce["count"]])
            for j, ce in enumerate(cmp_entries):
                if not used[j]:
                    rows.append([op, rank, NO_MATCH, "\n".join(ce["stack"]), 0, ce["count"], False])
    verdict = ERROR if any(r[-1] is False for r in rows) else PASS
    return CheckResult(P.RANDOM, verdict, RANDOM_HEADER, rows)


# ----------------------------------------------------------------------------------------- all of it
def run_checkers(bench: P.Pack, cmp: P.Pack, fmk: Optional[str]) -> List[CheckResult]:
    """Every checker whose entry both packs hold, in the reference's order
    (env, pip, dataset, weights, hyperparameters, random)."""
    results = []
    if bench.has(P.ENV) and cmp.has(P.ENV):
        b, c = bench.json(P.ENV), cmp.json(P.ENV)
        results.append(compare_env(b if isinstance(b, dict) else {}, c if isinstance(c, dict) else {}))
    if bench.has(P.PIP) and cmp.has(P.PIP):
        results.append(compare_pip(bench.text(P.PIP), cmp.text(P.PIP), fmk))
    if bench.has_dir(P.DATASET) and cmp.has_dir(P.DATASET):
        results.append(compare_dataset(bench, cmp))
    if bench.has_dir(P.WEIGHTS) and cmp.has_dir(P.WEIGHTS):
        results.append(compare_weights(bench, cmp))
    if bench.has_dir(P.HYPER_DIR) and cmp.has_dir(P.HYPER_DIR):
        results.append(compare_hyperparameters(bench, cmp))
    if bench.has_dir(P.RANDOM) and cmp.has_dir(P.RANDOM):
        results.append(compare_random(bench, cmp))
    return results
