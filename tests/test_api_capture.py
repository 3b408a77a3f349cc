"""api_capture: our dumps of tiny transformers models against the reference's golden record lists.

The golden lists (tests/golden_records/*.json.gz) were made once with MindStudio Probe 8.3.3 by
tests/golden_records/make_golden.py (same models, seed, inputs and step as here). Under
``"api_capture": "reference"`` our dump.json must hold exactly the reference's records in its order, with
the same structure, and construct.json must be the reference's (key order included). Under the default
``"full"`` every golden record is present with the same name and structure, except the documented
deliberate differences: identity backward records of ops returning their input (docs/compatibility.md
D16) and extra records of calls the reference cannot see (early-bound functions, ``-x`` / ``x /= y``
dispatched to Tensor.neg / Tensor.div_; D1).
"""
import gzip
import importlib.util
import json
import os
import re
import sys

import pytest
import torch

from msprobe.core.dump.config import load_dump_config  # noqa: E402
from msprobe.core.errors import MsprobeError  # noqa: E402
from msprobe.pytorch import PrecisionDebugger  # noqa: E402

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "golden_records")
sys.path.insert(0, HERE)
import models  # noqa: E402
from golden import golden_of  # noqa: E402
from make_golden import CASES, REF_DUMP_CASE, case_name  # noqa: E402

needs_tf = pytest.mark.skipif(importlib.util.find_spec("transformers") is None,
                              reason="transformers is not installed (test extra)")

# records "full" mode may have on top of the reference's (docs/dump.md "api_capture"): calls the reference
# does not see (C-level dispatch of -x and x /= y, functions bound before the debugger started)
EXTRA_OK = re.compile(r"^(Tensor\.(neg|div_)|Functional\.gelu)\.\d+\.(forward|backward)$")
# backward records that "full" writes as the identity (D16): ops that may return their input
IDENTITY_OK = re.compile(r"^(Tensor\.(to|float|double|half|bfloat16|type_as|type)|Functional\.dropout)\.\d+\.backward$")


def _golden(case):
    path = os.path.join(HERE, case_name(case) + ".json.gz")
    if not os.path.exists(path):
        pytest.skip(f"{path} missing: run tests/golden_records/make_golden.py")
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return json.load(f)


def _dump(tmp_path, case, capture):
    PrecisionDebugger._reset_for_tests()
    try:
        rank_dir = models.run(case[0], case[1], case[2], str(tmp_path / capture), {"api_capture": capture})
    finally:
        PrecisionDebugger._reset_for_tests()
    return golden_of(rank_dir)


@needs_tf
@pytest.mark.parametrize("case", CASES, ids=case_name)
def test_reference_mode_equals_golden(tmp_path, case):
    gold = _golden(case)
    ours = _dump(tmp_path, case, "reference")
    assert ours["names"] == gold["names"]
    for name in gold["names"]:
        assert ours["records"][name] == gold["records"][name], name
    assert ours["construct"] == gold["construct"]
    assert list(ours["construct"]) == list(gold["construct"])


@needs_tf
# (handmade: in-place ops on module inputs/outputs make the reference's module hooks lose records and
# record module inputs after the module changed them; full keeps them, see test_small_model_both_modes)
@pytest.mark.parametrize("case", [c for c in CASES if c[1] == "mix" and c[0] != "handmade"], ids=case_name)
def test_full_mode_holds_every_golden_record(tmp_path, case):
    gold = _golden(case)
    ours = _dump(tmp_path, case, "full")
    missing = [n for n in gold["names"] if n not in ours["records"]]
    assert not missing
    extra = [n for n in ours["names"] if n not in gold["records"]]
    assert all(EXTRA_OK.match(n) for n in extra), [n for n in extra if not EXTRA_OK.match(n)]
    for name in gold["names"]:
        a, b = gold["records"][name], ours["records"][name]
        if a != b:
            # only the identity record of an op returning its input: input == output, one tensor each
            assert IDENTITY_OK.match(name), name
            assert b["input"] == b["output"] and len(b["input"]) == 1, name


@needs_tf
def test_full_mode_extras_and_order_differ_from_reference_mode(tmp_path):
    """BERT's activation is bound at model construction (self.act = F.gelu): full records it, reference not."""
    case = ("bert", "mix", "fp32")
    full = _dump(tmp_path, case, "full")
    ref = _dump(tmp_path, case, "reference")
    assert any(n.startswith("Functional.gelu.") for n in full["names"])
    assert not any(n.startswith("Functional.gelu.") for n in ref["names"])


@needs_tf
def test_compare_against_reference_dump(tmp_path):
    """Our compare of our dump (reference mode) against the reference's dump of the same fp32 run:
    every reference row matched; statistics equal within float32 rounding."""
    path = os.path.join(HERE, f"ref_dump_{case_name(REF_DUMP_CASE)}.json.gz")
    if not os.path.exists(path):
        pytest.skip(f"{path} missing: run tests/golden_records/make_golden.py")
    import diffdump
    with gzip.open(path, "rt", encoding="utf-8") as f:
        ref = json.load(f)
    ref_side = {"names": list(ref["data"]), "records": {}, "construct": None, "raw": ref["data"]}
    from golden import skeleton
    ref_side["records"] = {n: skeleton(r) for n, r in ref["data"].items()}
    ours = _dump(tmp_path, REF_DUMP_CASE, "reference")
    lines = []
    ours_side = dict(ours, construct=None)
    assert diffdump.diff(ref_side, ours_side, out=lines.append, rtol=2e-6) == 0, lines

    from msprobe.cli.main import main as cli_main
    ref_dir = tmp_path / "ref_rank"
    ref_dir.mkdir()
    (ref_dir / "dump.json").write_text(json.dumps(ref), encoding="utf-8")
    our_dir = tmp_path / "reference" / "step0" / "rank"
    out = tmp_path / "cmp"
    rc = cli_main(["compare", "-tp", str(our_dir / "dump.json"), "-gp", str(ref_dir / "dump.json"),
                   "-o", str(out), "--csv", "-q"])
    assert rc in (0, None)
    import csv
    report = [p for p in os.listdir(out) if p.startswith("compare_result") and p.endswith(".csv")]
    with open(out / report[0], encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    assert rows
    unmatched = [r["NPU Name"] for r in rows if r["Bench Name"] in ("N/A", "")]
    assert not unmatched
    bad = [r["NPU Name"] for r in rows if r["Result"] not in ("", "pass", "Pass")]
    assert not bad
    # reference mode computes the L2 norm as the reference does (vector_norm, not a BLAS dot): every statistic of
    # the identical fp32 run is equal to float32 rounding of its reductions (rows holding -inf on both sides give
    # a NaN difference). Bit-equal on the machine and thread count that recorded the reference dump; elsewhere a
    # sum over a batch (a LayerNorm weight's gradient) may be split differently across threads: a few ulp.
    bench = {"Max diff": "Bench max", "Min diff": "Bench min", "Mean diff": "Bench mean", "L2norm diff": "Bench l2norm"}
    # A Mean near zero is summation-order noise: it is judged at the tensor's magnitude (max(|Max|, |Min|)).

    def scale(r, c):
        if c != "Mean diff":
            return abs(float(r[bench[c]]))
        vals = [abs(float(r[k])) for k in ("Bench max", "Bench min") if r[k] not in ("N/A", "", "nan", "NaN")]
        return max(vals + [abs(float(r[bench[c]]))])

    nonzero = [(r["NPU Name"], c, r[c]) for r in rows for c in bench
               if r[c] not in ("0", "0.0", "N/A", "nan", "NaN", "Nan", "")
               and abs(float(r[c])) > 1e-6 * max(scale(r, c), 1e-30)]
    assert not nonzero, nonzero[:5]


def test_api_capture_key_validated(tmp_path):
    cfg = tmp_path / "config.json"
    for value, ok in (("full", True), ("reference", True), ("referense", False), (1, False)):
        cfg.write_text(json.dumps({"task": "statistics", "dump_path": str(tmp_path / "d"), "api_capture": value}))
        if ok:
            assert load_dump_config(str(cfg)).api_capture == value
        else:
            with pytest.raises(MsprobeError) as err:
                load_dump_config(str(cfg))
            assert "api_capture" in str(err.value)
            if value == "referense":
                assert 'did you mean "reference"' in str(err.value)
    cfg.write_text(json.dumps({"task": "statistics", "dump_path": str(tmp_path / "d")}))
    assert load_dump_config(str(cfg)).api_capture == "full"



def _run_small(tmp_path, capture):
    PrecisionDebugger._reset_for_tests()
    try:
        rank_dir = models.run("handmade", "mix", "fp32", str(tmp_path / capture), {"api_capture": capture})
    finally:
        PrecisionDebugger._reset_for_tests()
    return golden_of(rank_dir)


def _grads(capture, tmp_path):
    """Gradients of the handmade model's step: without the tool (capture None) or under ``capture``."""
    model, batch = models.build("handmade")
    if capture is None:
        model(**batch).loss.backward()
    else:
        PrecisionDebugger._reset_for_tests()
        cfg = tmp_path / f"g_{capture}.json"
        cfg.write_text(json.dumps(dict(models.config_json(str(tmp_path / f"g_{capture}"), "mix"),
                                       api_capture=capture)))
        try:
            dbg = PrecisionDebugger(config_path=str(cfg))
            dbg.start(model)
            model(**batch).loss.backward()
            dbg.stop()
        finally:
            PrecisionDebugger._reset_for_tests()
    return [batch["x"].grad] + [p.grad for p in model.parameters()]


def test_small_model_both_modes(tmp_path):
    """Hand-made module (no transformers): an in-place op on a module input (allowed under the identity
    nodes), an in-place ReLU module, an early-bound function, -y and /= (recorded by full only)."""
    want = _grads(None, tmp_path)
    for a, b in zip(want, _grads("full", tmp_path)):
        assert torch.equal(a, b)                      # full: bit-identical to the run without the tool
    for a, b in zip(want, _grads("reference", tmp_path)):
        assert torch.allclose(a, b, rtol=1e-6, atol=1e-7)
    full = _run_small(tmp_path, "full")
    ref = _run_small(tmp_path, "reference")
    for name in ("Functional.gelu.0.forward", "Tensor.neg.0.forward", "Tensor.div_.0.forward"):
        assert name in full["names"]
        assert name not in ref["names"]
    assert set(ref["names"]) <= set(full["names"])
    # records the reference's hooks lose when in-place ops touch a module's input/output: full has them
    for name in ("Module.relu.ReLU.backward.0", "Module.inner._Inner.backward.0", "Module.pre.Linear.backward.0",
                 "Tensor.float.0.backward"):
        assert name in full["names"] and name not in ref["names"]
    assert ref["construct"]["Module.inner.lin.Linear.backward.0"] == "Module.inner._Inner.backward.0"
    assert ref["construct"]["Tensor.__add__.1.forward"] is None
