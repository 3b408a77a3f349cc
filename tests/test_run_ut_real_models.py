"""run_ut (the API pre-check) on dumps of tiny random-init ``transformers`` models (tests/real_models): a clean
fp32 CPU model must have every API judged and none an error.

Found on these dumps: a causal LM's ``cross_entropy`` was a SKIP "UT Error: Target -33 is out of bounds"
(random labels drawn between ignore_index -100 and the largest class), T5's ``x[..., 1:] = y``
(``Tensor.__setitem__``) was a SKIP with an empty Message (its result is ``x``, written in place, not the
``None`` it returns)."""

import csv
import glob
import os

import pytest

torch = pytest.importorskip("torch")

from real_models import build, transformers_missing  # noqa: E402
from real_models.run import dump_step  # noqa: E402
from msprobe.cli.main import main  # noqa: E402
from msprobe.pytorch.op_generate import runtime as rt  # noqa: E402

pytestmark = pytest.mark.skipif(transformers_missing() is not None, reason=str(transformers_missing()))


def _rows(out, kind):
    files = glob.glob(os.path.join(str(out), f"accuracy_checking_{kind}_*.csv"))
    assert len(files) == 1, files
    with open(files[0], encoding="utf-8-sig", newline="") as fh:
        return list(csv.reader(fh))


@pytest.fixture(scope="module")
def t5_results(tmp_path_factory):
    base = tmp_path_factory.mktemp("t5")
    dump_step(build("t5"), str(base / "dump"), task="statistics", level="L1")
    (dump_json,) = glob.glob(str(base / "dump" / "**" / "step0" / "*" / "dump.json"), recursive=True)
    out = base / "ut"
    assert main(["-f", "pytorch", "run_ut", "-api_info", dump_json, "-o", str(out), "-q"]) == 0
    return _rows(out, "result"), _rows(out, "details")


def test_clean_t5_every_api_judged_and_none_fails(t5_results):
    result, _ = t5_results
    assert result[0] == ["API name", "Forward Test Success", "Backward Test Success", "Message"]
    rows = result[1:]
    assert len(rows) > 250
    bad = [r for r in rows if r[1] != "pass" or r[2] not in ("pass", " ")]
    assert bad == []


def test_cross_entropy_random_labels_with_ignore_index(t5_results):
    result, details = t5_results
    (row,) = [r for r in result if r[0] == "Functional.cross_entropy.0"]
    assert row[1:3] == ["pass", "pass"]
    assert any(d[0] == "Functional.cross_entropy.0.forward.output.0" and d[-2] == "pass" for d in details)


def test_setitem_is_judged_by_the_tensor_it_writes(t5_results):
    result, details = t5_results
    rows = [r for r in result if r[0].startswith("Tensor.__setitem__.")]
    assert len(rows) == 2 and all(r[1] == "pass" for r in rows)
    (d,) = [d for d in details if d[0] == "Tensor.__setitem__.0.forward.output.0"]
    assert d[1:4] == ["torch.int64", "torch.int64", "(2, 8)"] and d[-2] == "pass"


def test_class_targets_keep_extremes_and_real_targets():
    logits = torch.zeros(16, 10)
    target = torch.arange(-100, 28, 8)[:16].clone()       # -100 .. 20: ignore_index, negatives, classes, >= C
    target[-1] = 9
    rt.prepare_api_inputs(("Functional", "cross_entropy"), [logits, target], {}, 3)
    assert target[0] == -100 and target[-1] == 9
    assert bool(((target == -100) | ((target >= 0) & (target < 10))).all())
    assert int((target == -100).sum()) == 1
    again = torch.arange(-100, 28, 8)[:16].clone()
    again[-1] = 9
    rt.prepare_api_inputs(("Functional", "cross_entropy"), [logits, again], {}, 3)
    assert torch.equal(again, target)                      # the same seed, the same labels
    real = torch.tensor([3, -100, 7, 0])
    rt.prepare_api_inputs(("Functional", "nll_loss"), [torch.zeros(4, 8), real], {}, 0)
    assert real.tolist() == [3, -100, 7, 0]
    custom = torch.tensor([-1, -5, 2])                     # ignore_index=-1 given by keyword
    rt.prepare_api_inputs(("Functional", "cross_entropy"), [torch.zeros(3, 4)], {"target": custom,
                                                                                 "ignore_index": -1}, 0)
    assert custom[0] == -1 and 0 <= int(custom[1]) < 4 and custom[2] == 2


def test_skip_row_message_is_the_first_skip_reason():
    from msprobe.core.acc_check.details import result_message
    details = [{"Status": "SKIP", "Message": "Bench output is None, skip this test."}]
    assert result_message("SKIP", " ", "", details) == "Bench output is None, skip this test."
    assert result_message("pass", "SKIP", "backward failed: x", []) == "backward failed: x"
    assert result_message("pass", "pass", "", [{"Status": "pass", "Message": "ok"}]) == ""


def test_spec_converts_int32_targets_and_integer_histc():
    """The reference's convert lists (spec 1.6.1): int32 class targets as int64, an integer histc input as
    float32, so that the CPU kernels run them."""
    args = [torch.zeros(3, 5), torch.tensor([1, 4, 0], dtype=torch.int32)]
    rt.prepare_api_inputs(("Functional", "cross_entropy"), args, {}, 0)
    assert args[1].dtype == torch.int64 and args[1].tolist() == [1, 4, 0]
    torch.nn.functional.cross_entropy(*args)
    h = [torch.tensor([0, 3, 3, 7])]
    rt.prepare_api_inputs(("Torch", "histc"), h, {"bins": 4, "min": 0, "max": 8}, 0)
    assert h[0].dtype == torch.float32
    assert torch.histc(h[0], bins=4, min=0, max=8).tolist() == [1.0, 2.0, 0.0, 1.0]
