"""Fault injection on torchvision models (code nobody here wrote: tests/tvmodels.py, faults planted by
tests/fault_injection/tv.py), a fast subset of ``TV_CASES`` (the whole sweep: ``python benchmarks/fault_score.py
--family tv``, results in benchmarks/fault_score_results.md).

The subset: an activation changed (MobileNetV3's stem Hardswish -> ReLU: the target runs another op, named by the
smallest matched scope around it), a wrong attention scale inside the recorded ``F.multi_head_attention_forward``
(ViT), a changed stochastic-depth rate (md5), a user's full backward hook on a ConvNeXt block, a user's forward
hook on a Swin shifted-window attention in bf16; and control pairs found red before the verdict fixes (MobileNetV3
fp16 vs fp32: one extreme element of the SE block's product; Swin bf16 vs fp32: stochastic depth's
``torch.empty(dtype=x.dtype)``).
"""

from __future__ import annotations

import pytest

pytest.importorskip("torch")
pytest.importorskip("openpyxl")

from fault_injection.evaluate import (control_problems, culprit_misses, disagreements, generate_pairs,  # noqa: E402
                                      missing_culprits, outcomes)
from fault_injection.tv import TV_CASES, TV_CONTROLS, TV_FAULTS, TV_MODELS, torchvision_missing  # noqa: E402

_SKIP = torchvision_missing()
pytestmark = pytest.mark.skipif(_SKIP is not None, reason=_SKIP or "")

SUBSET = ("tv_mobilenet_hardswish_relu_stat", "tv_vit_attn_scale_stat", "tv_convnext_sd_p_md5",
          "tv_convnext_bw_hook_stat", "tv_swin_attn_scale_bf16_stat",
          "tv_ctl_mobilenet_fp16_stat", "tv_ctl_swin_bf16_stat")
CASES = [c for c in TV_CASES if c.name in SUBSET]


@pytest.fixture(scope="session")
def tv_pairs(tmp_path_factory):
    return generate_pairs(tmp_path_factory.mktemp("tv_fault_pairs"), "--family", "tv", "--only", *SUBSET, timeout=300)


@pytest.fixture(scope="session")
def tv_outcomes(tv_pairs, tmp_path_factory):
    return outcomes(tv_pairs, tmp_path_factory.mktemp("tv_fault_out"), CASES)


def test_the_sweep_covers_the_models_tasks_levels_and_dtypes():
    assert len(CASES) == len(SUBSET)
    assert {c.model for c in TV_CASES} <= set(TV_MODELS)
    for model in ("tv_resnet", "tv_mobilenet", "tv_vit", "tv_convnext", "tv_swin"):
        assert len([c for c in TV_FAULTS if c.model == model]) >= 3, model
    assert len(TV_FAULTS) >= 12 and len(TV_CONTROLS) >= 4
    assert {c.task for c in TV_FAULTS} == {"statistics", "md5", "tensor"}
    assert {c.level for c in TV_FAULTS} == {"mix", "L1"}
    assert {c.target_dtype for c in TV_CONTROLS} >= {"bf16", "fp16", "fp32"}
    assert {c.family for c in TV_CASES} == {"tv"}


def test_pairs_hold_the_expected_culprit(tv_pairs):
    missing = missing_culprits(tv_pairs, CASES, sides=("target",))
    assert not missing, missing


def test_advisor_and_diff_analyze_name_the_injected_op(tv_outcomes):
    misses = culprit_misses(CASES, tv_outcomes)
    assert not misses, "\n".join(misses)


def test_a_swapped_layer_is_listed_in_the_advisors_reason(tv_outcomes):
    """Hardswish -> ReLU: the named block's reason lists the sub-module the golden run has no row of."""
    import glob
    import os

    out = tv_outcomes["tv_mobilenet_hardswish_relu_stat"].out_dir
    files = glob.glob(os.path.join(out, "**", "advisor_*.txt"), recursive=True)
    assert len(files) == 1, files
    with open(files[0], encoding="utf-8") as fh:
        reason = [line for line in fh if line.startswith("Reason:")]
    assert reason and "Inside it the target ran Module.features.0.2.ReLU.forward.0, which the golden run has " \
                      "not" in reason[0], reason


def test_control_pairs_name_no_op(tv_outcomes):
    problems = control_problems(CASES, tv_outcomes)
    assert not problems, "\n".join(problems)


def test_colours_result_summary_and_advisor_agree(tv_outcomes):
    problems = disagreements(CASES, tv_outcomes)
    assert not problems, "\n".join(problems[:40])