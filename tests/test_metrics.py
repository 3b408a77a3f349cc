"""Metric edge cases, with the values the reference (8.3.3) gives (compare.md §4.1, §4.4 table)."""

import numpy as np
import pytest

from msprobe.core.compare import stats as st
from msprobe.core.compare import tensor as tm
from msprobe.core.compare.match import dtypes_compatible, fuzzy_key
from msprobe.core.compare.refparse import reference_parse


def metrics(n, b):
    return tm.compare_arrays(np.asarray(n), np.asarray(b))


def test_identical_float_tensors():
    x = np.linspace(-1, 1, 50, dtype=np.float32)
    cos, euc, mae, mre, one, five, msg = metrics(x, x.copy())
    assert (cos, euc, mae, mre, one, five, msg) == (1.0, 0.0, 0.0, 0.0, 1.0, 1.0, "")
    assert tm.check_accuracy(cos, mae) == "Yes"


def test_bool_tensors_that_differ():
    x = np.array([1, -1, 2, -2, 3, -3, 4, -4], dtype=np.float32)
    cos, euc, mae, mre, one, five, msg = metrics(x > 0, x < 0)
    assert cos == 0.0
    assert euc == pytest.approx(np.sqrt(8))
    assert mae == 1.0
    assert mre == 4503599627370496.0  # 1/eps from a zero bench element
    assert (one, five) == (0.0, 0.0)
    assert tm.check_accuracy(cos, mae) == "No"


def test_int64_tensors():
    a = np.arange(6, dtype=np.int64) * 2
    cos, euc, mae, mre, one, five, msg = metrics(a, a + 1)
    assert cos == 0.996656840122
    assert euc == pytest.approx(np.sqrt(6))
    assert (mae, mre, one, five) == (1.0, 1.0, 0.0, 0.0)
    assert tm.check_accuracy(cos, mae) == "Yes"


def test_nan_at_same_positions_is_zeroed():
    cos, euc, mae, mre, one, five, msg = metrics(np.array([1, np.nan, 2], np.float32), np.array([1, np.nan, 2.5], np.float32))
    assert cos == 0.996545758245
    assert mae == 0.5
    assert mre == 0.20000000298
    assert one == five == 0.666666666667
    assert tm.check_accuracy(cos, mae) == "Yes"


def test_nan_at_different_positions():
    out = metrics(np.array([1, np.nan, 2], np.float32), np.array([np.nan, 1, 2], np.float32))
    assert out[:6] == ("N/A",) * 6
    assert out[6] == tm.MSG_NAN_POS
    assert tm.check_accuracy(out[0], out[2]) == "No"


def test_empty_tensor():
    out = metrics(np.zeros((0, 3), np.float32), np.zeros((0, 3), np.float32))
    assert out == ("unsupported",) * 6 + (tm.MSG_EMPTY,)
    assert tm.check_accuracy(out[0], out[2]) == "None"


def test_zero_d_tensor_message_once():
    cos, euc, mae, mre, one, five, msg = metrics(np.float32(3.0), np.float32(3.5))
    assert (cos, euc, one, five) == ("unsupported",) * 4
    assert mae == 0.5
    assert mre == 0.142857149243
    assert msg == tm.MSG_ZERO_D  # the reference repeats it 16 times
    assert tm.check_accuracy(cos, mae) == "None"


def test_length_one_tensor():
    cos, euc, mae, mre, one, five, msg = metrics(np.array([5.0], np.float32), np.array([4.0], np.float32))
    assert cos == "unsupported" and msg == tm.MSG_LEN1
    assert (euc, mae, mre, one, five) == (1.0, 1.0, 0.25, 0.0, 0.0)


def test_npu_all_zero():
    cos, euc, mae, mre, one, five, msg = metrics(np.zeros(5, np.float32), np.ones(5, np.float32))
    assert cos == "Nan" and tm.MSG_COS_NPU_ZERO in msg
    assert (mae, mre) == (1.0, 1.0)
    assert tm.check_accuracy(cos, mae) == "Yes"  # NaN cosine with MaxAbsErr <= 1 passes, as in the reference


def test_bench_all_zero_and_both_zero():
    assert metrics(np.ones(4, np.float32), np.zeros(4, np.float32))[0] == "Nan"
    assert metrics(np.zeros(4, np.float32), np.zeros(4, np.float32))[0] == 1.0


def test_fp16_vs_fp32_reports_dtype_and_still_computes():
    x = np.linspace(0.1, 1, 16, dtype=np.float32)
    cos, euc, mae, mre, one, five, msg = metrics(x.astype(np.float16), x)
    assert msg == tm.MSG_DTYPE
    assert isinstance(cos, float) and cos > 0.9999


def test_shape_mismatch():
    out = metrics(np.ones((2, 3)), np.ones((3, 2)))
    assert out == ("shape unmatched",) * 6 + (tm.MSG_SHAPE,)
    assert tm.check_accuracy(out[0], out[2]) == "Unmatched"


def test_accuracy_rules():
    assert tm.check_accuracy(0.98, 0.002) == "No"
    assert tm.check_accuracy(0.98, 0.0005) == "Yes"
    assert tm.check_accuracy(0.89, 0.0) == "No"
    assert tm.check_accuracy(0.999, 1.5) == "No"
    assert tm.check_accuracy("N/A", 0.1) == "No"
    assert tm.check_accuracy("unsupported", 0.1) == "None"


def test_read_failure_is_a_row_message(tmp_path):
    good = tmp_path / "a.npy"
    np.save(good, np.ones(3))
    bad = tmp_path / "b.npy"
    bad.write_bytes(b"not numpy")
    from msprobe.core.io.tensors import load_tensor

    out = tm.compare_pair(str(good), str(bad), load_tensor)
    assert out[0] == "No data" and out[4] == "unsupported"
    assert out[6] == "Dump file: a.npy, b.npy not found or read failed."


def test_compare_files_keeps_order(tmp_path):
    from msprobe.core.io.tensors import load_tensor

    pairs = []
    for i in range(20):
        a, b = tmp_path / f"a{i}.npy", tmp_path / f"b{i}.npy"
        np.save(a, np.full(10, i + 1.0))
        np.save(b, np.full(10, i + 2.0))
        pairs.append((str(a), str(b)))
    out = tm.compare_files(pairs, load_tensor, jobs=4)
    assert [o[2] for o in out] == [1.0] * 20
    assert [o[3] for o in out] == [tm.format_value(1 / (i + 2.0)) for i in range(20)]


# statistics mode


def test_stat_diffs_rules():
    npu = [2.0, float("nan"), 1.0, None, "True", 5, float("inf"), 3.0]
    bench = [1.0, 1.0, 0.0, 1.0, "True", 4, float("inf"), 2.0]
    matched = np.array([True] * 7 + [False])
    diff_cells, rel_cells, _, rel, warn = st.stat_diffs(npu, bench, matched)
    assert diff_cells == [1.0, "Nan", 1.0, "N/A", "N/A", 1.0, "Nan", "N/A"]
    assert rel_cells == ["100.0%", "Nan", "N/A", "N/A", "N/A", "25.0%", "Nan", "N/A"]
    assert warn.tolist() == [False, False, True, False, False, False, False, False]  # 1/(2+1e-10) is not > 0.5


def test_display_values():
    assert st.display([1.5, float("nan"), None, "x"]) == [1.5, "Nan", "None", "x"]


def test_reference_parse_matches_pandas_legacy_parser():
    # pandas < 2.2 parses '-1.9474745988845825' one ulp off; the reference's diffs come from that value
    assert reference_parse(np.array([-1.9474745988845825]))[0] == -1.9474745988845823
    vals = np.array([0.1, 2.5, 1e-5, 123.0, float("inf"), float("nan"), 0.0, -0.0, 16.099653244018555])
    out = reference_parse(vals)
    assert np.array_equal(out[[0, 1, 2, 3, 6]], vals[[0, 1, 2, 3, 6]])
    assert np.isinf(out[4]) and np.isnan(out[5])


# matching helpers


@pytest.mark.parametrize("name,key", [
    ("Functional.linear.3.forward.input.0", "Functional.linear.forward.input.0"),
    ("Module.layer.Linear.forward.2.input.0", "Module.layer.Linear.forward.input.0"),
    ("Module.feed_forward.Linear.backward.1.output.0", "Module.feed_forward.Linear.backward.output.0"),
    ("Module.fc.Linear.parameters_grad.weight", "Module.fc.Linear.parameters_grad.weight"),
])
def test_fuzzy_key(name, key):
    assert fuzzy_key(name) == key


def test_dtype_groups():
    assert dtypes_compatible("torch.bfloat16", "torch.float32")
    assert dtypes_compatible("Float16", "BFloat16")
    assert not dtypes_compatible("torch.float32", "torch.int64")
    # across frameworks (MindSpore target, PyTorch golden) the dtype family decides (compare.md §3.3)
    assert dtypes_compatible("torch.float32", "Float32")
    assert dtypes_compatible("Int32", "torch.int64")
    assert not dtypes_compatible("Float32", "torch.int64")
    assert not dtypes_compatible("Bool", "torch.float32")


def test_blocked_kernel_equals_whole_array_formulas():
    rng = np.random.default_rng(0)
    n = rng.standard_normal(3 * tm.CHUNK + 17).astype(np.float32)
    b = (n * (1 + 1e-3 * rng.standard_normal(n.size))).astype(np.float32)
    b[5] = 0.0
    n[7] = b[7] = np.inf
    cos, euc, mae, mre, one, five, msg = metrics(n, b)
    nz, bz = n.copy(), b.copy()
    nz[7] = bz[7] = 0
    nf, bf = nz.astype(np.float64), bz.astype(np.float64)
    rb = bz.copy()
    rn = nz.copy()
    rn[bz == 0] += tm.EPS64
    rb[bz == 0] += tm.EPS64
    rel = np.abs((rn - rb) / rb)
    assert cos == round(tm.format_value(nf @ bf / np.linalg.norm(nf) / np.linalg.norm(bf)), 6)
    assert euc == pytest.approx(np.linalg.norm(nf - bf), rel=1e-12)
    assert mae == tm.format_value(np.max(np.abs(nf - bf)))
    assert mre == tm.format_value(float(rel.max()))
    assert one == tm.format_value(np.count_nonzero(rel < 0.001) / rel.size)
    assert five == tm.format_value(np.count_nonzero(rel < 0.005) / rel.size)
    assert msg == ""
    # a NaN position that differs in the last block is found
    b2 = b.copy()
    b2[-1] = np.nan
    assert metrics(n, b2)[6] == tm.MSG_NAN_POS
