"""Fault injection on modeling code nobody here wrote: tiny random-init transformers models (tests/real_models;
faults planted by tests/fault_injection/hf.py), a fast subset of ``HF_CASES`` (the whole sweep:
``python benchmarks/fault_score.py --family hf``, results in benchmarks/fault_score_results.md).

The subset covers one case per kind of fault met on those models: a user's forward hook that changes a
module's output (msprobe records the module before the hook runs, as the reference does), a perturbed
backward kernel in bf16, an md5 dump at L1, a changed argument (Mixtral's router top-k), tensor mode, a
hook in a vision model, plus control pairs (bf16 autocast vs fp32; T5, whose bf16 run calls ``Tensor.to`` once
more per FF layer, so that exact matching pairs different calls of it, with and without -fm).  The pairs are generated once per session (one subprocess, about 5 s).
"""

from __future__ import annotations

import json
import re

import pytest

pytest.importorskip("torch")
pytest.importorskip("openpyxl")

from fault_injection.cases import HF_ARCHS, HF_CASES, HF_CONTROLS, HF_FAULTS  # noqa: E402
from fault_injection.evaluate import (answer, consistency_problems, generate_pairs, names_nothing,  # noqa: E402
                                      names_op, outcomes)
from real_models import transformers_missing  # noqa: E402

_SKIP = transformers_missing()
pytestmark = pytest.mark.skipif(_SKIP is not None, reason=_SKIP or "")

SUBSET = ("hf_llama_oproj_hook_stat", "hf_llama_silu_out_tensor", "hf_gpt2_gelu_grad_bf16_stat",
          "hf_t5_relu_out_md5", "hf_mixtral_topk_stat", "hf_vit_patch_hook_bf16_stat",
          "hf_ctl_llama_bf16_stat", "hf_ctl_t5_bf16_stat", "hf_ctl_t5_bf16_stat_fm")
CASES = [c for c in HF_CASES if c.name in SUBSET]


@pytest.fixture(scope="session")
def hf_pairs(tmp_path_factory):
    return generate_pairs(tmp_path_factory.mktemp("hf_fault_pairs"), "--family", "hf", "--only", *SUBSET, timeout=300)


@pytest.fixture(scope="session")
def hf_outcomes(hf_pairs, tmp_path_factory):
    return outcomes(hf_pairs, tmp_path_factory.mktemp("hf_fault_out"), CASES)


def test_the_sweep_covers_the_archs_tasks_levels_and_dtypes():
    assert len(CASES) == len(SUBSET)
    for arch in ("llama", "gpt2", "t5", "mixtral"):
        faults = [c for c in HF_FAULTS if c.model == arch]
        assert len(faults) >= 4, arch
        assert any(c.target_dtype == "bf16" for c in faults), arch
        assert any(c.control for c in HF_CONTROLS if c.model == arch), arch
    assert {c.model for c in HF_CASES} <= set(HF_ARCHS)
    assert {c.task for c in HF_FAULTS} == {"statistics", "md5", "tensor"}
    assert {c.level for c in HF_FAULTS} == {"mix", "L1"}
    assert {c.family for c in HF_CASES} == {"hf"}


def test_pairs_hold_the_expected_culprit(hf_pairs):
    """The expected names follow the models (an API's n-th call in one step, a module's dotted path)."""
    missing = []
    for case in CASES:
        if case.control:
            continue
        for side in ("target", "golden"):
            with open(hf_pairs / case.name / side / "step0" / "rank" / "dump.json", encoding="utf-8") as fh:
                data = json.load(fh)["data"]
            for n in case.expected["rank"]:
                if not any(k == n or k.startswith(n + ".") for k in data):
                    missing.append(f"{case.name} {side}: {n}")
    assert not missing, missing


def test_advisor_and_diff_analyze_name_the_injected_op(hf_outcomes):
    misses = []
    for case in CASES:
        if case.control:
            continue
        out = hf_outcomes[case.name]
        a = out.ranks.get("rank")
        assert out.rc == 0 and "Traceback" not in out.stderr, (case.name, out.stderr[-2000:])
        for which in ("advisor", "da"):
            if a is None or not names_op(a, which, case.expected["rank"]):
                misses.append(f"{case.name} {which}: expected {case.expected['rank']}, named "
                              f"{answer(a, which) if a else '(no answer)'}")
    assert not misses, "\n".join(misses)


def test_control_pairs_name_no_op(hf_outcomes):
    problems = []
    for case in CASES:
        if not case.control:
            continue
        a = hf_outcomes[case.name].ranks.get("rank")
        if a is None:
            problems.append(f"{case.name}: no answer")
            continue
        for which in ("advisor", "da"):
            if not names_nothing(a, which):
                problems.append(f"{case.name} {which}: named {answer(a, which)}")
        if not re.match(r"^rank_?\d*: none \(.+\)", a.da_first_text):
            problems.append(f"{case.name}: no 'rank_N: none (<reason>)' line (got {a.da_first_text!r})")
        if a.growth:
            problems.append(f"{case.name}: growth ranking names {a.growth[:3]}")
    assert not problems, "\n".join(problems)


def test_colours_result_summary_and_advisor_agree(hf_outcomes):
    problems = []
    for case in CASES:
        for rank, ans in sorted(hf_outcomes[case.name].ranks.items()):
            problems += [f"{case.name} {rank}: {p}" for p in consistency_problems(ans)]
    assert not problems, "\n".join(problems[:40])
