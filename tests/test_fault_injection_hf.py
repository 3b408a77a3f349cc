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

import pytest

pytest.importorskip("torch")
pytest.importorskip("openpyxl")

from fault_injection.cases import HF_ARCHS, HF_CASES, HF_CONTROLS, HF_FAULTS  # noqa: E402
from fault_injection.evaluate import (control_problems, culprit_misses, disagreements, generate_pairs,  # noqa: E402
                                      missing_culprits, outcomes)
from real_models import transformers_missing  # noqa: E402

_SKIP = transformers_missing()
pytestmark = pytest.mark.skipif(_SKIP is not None, reason=_SKIP or "")

SUBSET = ("hf_llama_oproj_hook_stat", "hf_llama_silu_out_tensor", "hf_gpt2_gelu_grad_bf16_stat",
          "hf_t5_relu_out_md5", "hf_mixtral_topk_stat", "hf_vit_patch_hook_bf16_stat",
          "hf_ctl_llama_bf16_stat", "hf_ctl_t5_bf16_stat", "hf_ctl_t5_bf16_stat_fm", "hf_llama_act_hook_op_stat_fm",
          "hf_ctl_llama_sdpa_vs_eager_stat_fm")
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
    missing = missing_culprits(hf_pairs, CASES, every=True)
    assert not missing, missing


def test_advisor_and_diff_analyze_name_the_injected_op(hf_outcomes):
    misses = culprit_misses(CASES, hf_outcomes)
    assert not misses, "\n".join(misses)


def test_control_pairs_name_no_op(hf_outcomes):
    problems = control_problems(CASES, hf_outcomes)
    assert not problems, "\n".join(problems)


def test_colours_result_summary_and_advisor_agree(hf_outcomes):
    problems = disagreements(CASES, hf_outcomes)
    assert not problems, "\n".join(problems[:40])