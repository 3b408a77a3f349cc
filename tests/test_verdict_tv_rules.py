"""Verdict rules met on torchvision models (tests/fault_injection/tv.py, benchmarks/fault_score.py --family tv).

1. MobileNetV3: an fp16 autocast run against fp32, no fault, was red at the squeeze-excitation's ``scale * x``
(``Tensor.__mul__.8.forward.output.0``): its Max 3.3% apart while its inputs' Max differ by 0.2% - but their
elements by 3.3% (the tensor dump's MaxAbsErr), which the statistics do not show, and the largest element of an
elementwise product sits at another position.  Mean and L2 norm agree.

A forward output of a reduced-precision pair whose Max or Min alone is off while its Mean and L2 norm are within
what its inputs explain is noise ("one extreme element"); a planted bug (x1.05) moves the L2 norm and stays red,
and in an fp32 pair an extreme element alone is still red.

2. Swin / ConvNeXt stochastic depth under bf16 autocast, no fault: ``torch.empty(shape, dtype=x.dtype)`` records a
``dtype`` argument torch.bfloat16 against torch.float32, which was red.  A dtype argument that differs as the two
runs' tensors do (the target's tensors hold it, the golden's hold the golden value, and not the target's) is noise;
in a same-precision pair a differing dtype argument stays red.

3. Swin bf16 vs fp32, no fault: ``Torch.empty.0.forward.output.0`` red (``NaN/inf on target only``): uninitialised
memory holds whatever the allocator left.  Its output, and the input that is that tensor before it is filled
(``bernoulli_``'s), are noise.
"""

from __future__ import annotations

from msprobe.core.compare import verdict as vd

from test_verdict import assert_consistent, run, tensor

KEY = "Tensor.__mul__.8.forward"
SHAPE = (4, 288, 1, 1)


def _pair(out_t, dtype="torch.float16"):
    """The recorded statistics of the MobileNetV3-small fp16 vs fp32 control (rounded)."""
    s_t = tensor(0.60889, 0.36279, 0.50195, 17.07812, dtype, SHAPE)
    s_g = tensor(0.60822, 0.36242, 0.50214, 17.08405, "torch.float32", SHAPE)
    x_t = tensor(0.67139, -0.34131, 0.01043, 4.27734, dtype, SHAPE)
    x_g = tensor(0.67004, -0.34125, 0.01042, 4.27754, "torch.float32", SHAPE)
    out_g = tensor(0.34265, -0.17068, 0.00532, 2.14803, "torch.float32", SHAPE)
    return ({KEY: {"input_args": [s_t, x_t], "output": [out_t]}},
            {KEY: {"input_args": [s_g, x_g], "output": [out_g]}})


def test_one_extreme_element_of_a_low_precision_product_is_noise(tmp_path):
    target, golden = _pair(tensor(0.35449, -0.17065, 0.00532, 2.14844, "torch.float16", SHAPE))
    rep = run(tmp_path, target, golden)
    out = rep.names.index(KEY + ".output.0")
    assert rep.verdict[out] == vd.NOISE, rep.why[out]
    assert "one extreme element of a fp16 result" in rep.why[out], rep.why[out]
    assert rep.first_red is None
    assert_consistent(rep)


def test_a_scaled_low_precision_product_stays_red(tmp_path):
    # x1.05 on every element: Max, Mean and L2 norm move together
    target, golden = _pair(tensor(0.3598, -0.1792, 0.00559, 2.2554, "torch.float16", SHAPE))
    rep = run(tmp_path, target, golden)
    out = rep.names.index(KEY + ".output.0")
    assert rep.verdict[out] == vd.FAIL, rep.why[out]
    assert rep.first_red == (out, KEY + ".output.0")
    assert_consistent(rep)


def test_an_extreme_element_alone_in_fp32_stays_red(tmp_path):
    target, golden = _pair(tensor(0.35449, -0.17068, 0.00532, 2.14803, "torch.float32", SHAPE),
                           dtype="torch.float32")
    target[KEY]["input_args"] = golden[KEY]["input_args"]
    rep = run(tmp_path, target, golden)
    out = rep.names.index(KEY + ".output.0")
    assert rep.verdict[out] == vd.FAIL, rep.why[out]
    assert_consistent(rep)


def _empty(dtype_arg, out_dtype):
    return {"Torch.empty.0.forward": {
        "input_args": [{"type": "int", "value": 4}],
        "input_kwargs": {"dtype": {"type": "torch.dtype", "value": dtype_arg}},
        "output": [tensor(1.0, 0.0, 0.5, 2.0, out_dtype)]}}


def _linear(dtype):
    x = tensor(1.0, -1.0, 0.01, 8.0, dtype)
    return {"Functional.linear.0.forward": {"input_args": [x], "output": [x]}}


def test_a_dtype_argument_that_follows_autocast_is_noise(tmp_path):
    target = dict(_linear("torch.bfloat16"), **_empty("torch.bfloat16", "torch.bfloat16"))
    golden = dict(_linear("torch.float32"), **_empty("torch.float32", "torch.float32"))
    rep = run(tmp_path, target, golden)
    i = rep.names.index("Torch.empty.0.forward.input.dtype")
    assert rep.verdict[i] == vd.NOISE, rep.why[i]
    assert "as the two runs' precisions do" in rep.why[i]
    assert rep.first_red is None
    assert_consistent(rep)


def test_a_dtype_argument_in_a_same_precision_pair_stays_red(tmp_path):
    target = dict(_linear("torch.float32"), **_empty("torch.bfloat16", "torch.bfloat16"))
    golden = dict(_linear("torch.float32"), **_empty("torch.float32", "torch.float32"))
    rep = run(tmp_path, target, golden)
    i = rep.names.index("Torch.empty.0.forward.input.dtype")
    assert rep.verdict[i] == vd.FAIL, rep.why[i]
    assert rep.first_red == (i, "Torch.empty.0.forward.input.dtype")


def test_uninitialised_memory_is_not_where_the_runs_part(tmp_path):
    nan = float("nan")

    def side(garbage, dtype):
        x = tensor(1.0, -1.0, 0.01, 8.0, dtype)
        mask = tensor(1.0, 0.0, 0.9, 3.0, dtype)
        return {
            "Functional.linear.0.forward": {"input_args": [x], "output": [x]},
            "Torch.empty.0.forward": {"input_args": [{"type": "int", "value": 4}], "output": [garbage]},
            "Tensor.bernoulli_.0.forward": {"input_args": [garbage, {"type": "float", "value": 0.9}],
                                            "output": [mask]},
        }
    target = side(tensor(nan, nan, nan, nan, "torch.bfloat16"), "torch.bfloat16")
    golden = side(tensor(3.0e38, -1.0e-30, 1.0e36, float("inf"), "torch.float32"), "torch.float32")
    rep = run(tmp_path, target, golden)
    for name in ("Torch.empty.0.forward.output.0", "Tensor.bernoulli_.0.forward.input.0"):
        i = rep.names.index(name)
        assert rep.verdict[i] == vd.NOISE, (name, rep.why[i])
        assert rep.why[i].startswith("uninitialised memory"), rep.why[i]
    assert rep.first_red is None and rep.red == 0 and rep.yellow == 0
    assert_consistent(rep)


def test_the_tensor_an_inplace_fill_overwrites_is_not_an_input(tmp_path):
    """Since the dump records torch.empty's output without values (leftover memory, FSDP2's buffers), nothing
    links bernoulli_'s input to it: Swin bf16 vs fp32 (no fault) was red at Tensor.bernoulli_.0.forward.input.0
    (CI). bernoulli_/uniform_/fill_/copy_ ... overwrite every element without reading it: not an input."""
    def side(garbage, dtype):
        empty = {"type": "torch.Tensor", "dtype": dtype, "shape": [4, 8], "Max": None, "Min": None, "Mean": None,
                 "Norm": None, "requires_grad": False}
        return {
            "Torch.empty.0.forward": {"input_args": [{"type": "int", "value": 4}], "output": [empty]},
            "Tensor.bernoulli_.0.forward": {"input_args": [garbage, {"type": "float", "value": 0.9}],
                                            "output": [tensor(1.0, 0.0, 0.9, 5.4, dtype)]},
        }
    rep = run(tmp_path, side(tensor(7.0e30, -2.0, 1.0e29, 9.0e30, "torch.bfloat16"), "torch.bfloat16"),
              side(tensor(1.0e-3, -5.0, 0.2, 3.0, "torch.float32"), "torch.float32"))
    i = rep.names.index("Tensor.bernoulli_.0.forward.input.0")
    assert rep.verdict[i] == vd.NOISE, rep.why[i]
    assert rep.why[i].startswith("the tensor this call overwrites without reading it"), rep.why[i]
    assert rep.first_red is None and rep.red == 0 and rep.yellow == 0
    # a fill whose result differs is still judged
    bad = side(tensor(1.0, -1.0, 0.0, 3.0, "torch.float32"), "torch.float32")
    bad["Tensor.bernoulli_.0.forward"]["output"] = [tensor(1.0, 0.0, 0.5, 4.0)]
    rep2 = run(tmp_path / "2", bad, side(tensor(1.0, -1.0, 0.0, 3.0, "torch.float32"), "torch.float32"))
    assert rep2.first_red is not None and rep2.first_red[1] == "Tensor.bernoulli_.0.forward.output.0"
