"""Verdict rules met on transformers models (found by tests/fault_injection/hf.py, benchmarks/fault_score.py
--family hf): a module's forward output changed by code the dump does not see (a user's forward hook), and an
op fed an additive attention mask (torch.finfo.min where masked).

* a module's forward call is explained by its sub-modules' forward rows only, not by their backward rows
  (those differ as soon as anything downstream does, and run later);
* an input holding (about) its dtype's largest finite value is a sentinel, not a magnitude the op's output
  can be measured against (the cancellation rule);
* a module's forward output that differs while its inputs and sub-modules agree, and that no recorded op
  inside produced, is not rescaled to its (much larger) inputs' magnitude: a block's output is routinely
  30x smaller than the residual stream it reads.
"""

from __future__ import annotations

from msprobe.core.compare import verdict as vd

from test_verdict import assert_consistent, run, tensor

F32_MIN = -3.4028234663852886e38


def _mask():
    return tensor(0.0, F32_MIN, float("-inf"), float("inf"), shape=(2, 1, 16, 16))


def test_module_forward_is_not_explained_by_its_submodules_backward(tmp_path):
    x = tensor(1.0, -1.0, 0.01, 8.0)
    sub_out = tensor(0.9, -0.8, 0.02, 7.0)
    grad_t, grad_g = tensor(0.011, -0.011, 1e-4, 0.088), tensor(0.01, -0.01, 1e-4, 0.08)
    common = {
        "Module.blk.proj.Linear.forward.0": {"input_args": [x], "output": [sub_out]},
    }
    target = dict(common, **{
        "Module.blk.Block.forward.0": {"input_args": [x], "output": [tensor(0.945, -0.84, 0.021, 7.35)]},
        "Module.blk.proj.Linear.backward.0": {"input": [grad_t], "output": [grad_t]},
    })
    golden = dict(common, **{
        "Module.blk.Block.forward.0": {"input_args": [x], "output": [sub_out]},
        "Module.blk.proj.Linear.backward.0": {"input": [grad_g], "output": [grad_g]},
    })
    rep = run(tmp_path, target, golden)
    out = rep.names.index("Module.blk.Block.forward.0.output.0")
    assert rep.verdict[out] == vd.FAIL, rep.why[out]
    assert rep.why[out].endswith("differs by 4.76% relative while its inputs agree within fp32 rounding")
    assert rep.first_red == (out, "Module.blk.Block.forward.0.output.0")
    assert_consistent(rep)


def test_attention_mask_is_not_the_magnitude_of_an_ops_inputs(tmp_path):
    q = tensor(1.0, -1.0, 0.0, 16.0, shape=(2, 4, 16, 16))
    out_g = tensor(0.5, -0.5, 0.0, 8.0, shape=(2, 4, 16, 16))
    out_t = tensor(0.55, -0.55, 0.0, 8.8, shape=(2, 4, 16, 16))
    key = "Functional.scaled_dot_product_attention.0.forward"
    rep = run(tmp_path, {key: {"input_args": [q, q, q, _mask()], "output": [out_t]}},
              {key: {"input_args": [q, q, q, _mask()], "output": [out_g]}})
    out = rep.names.index(key + ".output.0")
    assert rep.verdict[out] == vd.FAIL, rep.why[out]
    assert rep.why[out].endswith("of magnitude while its inputs agree within fp32 rounding"), rep.why[out]
    assert_consistent(rep)


def test_module_output_changed_outside_any_recorded_op_is_red(tmp_path):
    # a pre-norm attention block: reads the residual stream (magnitude 3) and a mask, returns o_proj's output
    # (magnitude 0.07) x1.05 (a user's forward hook on o_proj: o_proj's own record is unscaled)
    h = tensor(3.1, -2.9, 0.002, 45.0, shape=(2, 16, 64))
    o = tensor(0.0702, -0.0951, -0.0015, 0.654, shape=(2, 16, 64))
    o_hooked = tensor(0.0702 * 1.05, -0.0951 * 1.05, -0.0015 * 1.05, 0.654 * 1.05, shape=(2, 16, 64))
    common = {"Module.attn.o_proj.Linear.forward.0": {"input_args": [tensor(0.4, -0.4, -0.008, 3.7, shape=(2, 16, 64))],
                                                       "output": [o]}}
    rep = run(tmp_path,
              dict(common, **{"Module.attn.Attention.forward.0": {"input_args": [h, _mask()], "output": [o_hooked]}}),
              dict(common, **{"Module.attn.Attention.forward.0": {"input_args": [h, _mask()], "output": [o]}}))
    out = rep.names.index("Module.attn.Attention.forward.0.output.0")
    assert rep.verdict[out] == vd.FAIL, rep.why[out]
    assert rep.why[out].endswith("while its inputs agree within fp32 rounding"), rep.why[out]
    assert_consistent(rep)


def test_module_output_an_inner_op_produced_keeps_the_cancellation_rule(tmp_path):
    # the same block whose output is an inner op's output (same statistics on both sides, recorded before
    # it): that op's row carries the verdict; the module's row is measured against its inputs as before
    h = tensor(3.1, -2.9, 0.002, 45.0, shape=(2, 16, 64))
    o_t = tensor(0.0702 * 1.05, -0.0951 * 1.05, -0.0015 * 1.05, 0.654 * 1.05, shape=(2, 16, 64))
    o_g = tensor(0.0702, -0.0951, -0.0015, 0.654, shape=(2, 16, 64))
    rep = run(tmp_path,
              {"Tensor.__mul__.0.forward": {"input_args": [o_g], "output": [o_t]},
               "Module.attn.Attention.forward.0": {"input_args": [h], "output": [o_t]}},
              {"Tensor.__mul__.0.forward": {"input_args": [o_g], "output": [o_g]},
               "Module.attn.Attention.forward.0": {"input_args": [h], "output": [o_g]}})
    assert rep.verdict[rep.names.index("Tensor.__mul__.0.forward.output.0")] == vd.FAIL
    assert rep.verdict[rep.names.index("Module.attn.Attention.forward.0.output.0")] == vd.NOISE
    assert_consistent(rep)


def test_pair_of_two_different_calls_is_yellow_not_where_an_error_enters(tmp_path):
    # T5 under bf16 autocast casts to wo.weight's dtype once more per FF layer (Tensor.to.1 below, target only):
    # every later Tensor.to.N of the target is another call than the golden's Tensor.to.N.  Target Tensor.to.2
    # reads Tensor.__add__.1's output, the golden's Tensor.to.2 reads Tensor.__add__.2's: each side's value comes
    # from a compared op, not the same one
    x1, x2, x3 = tensor(1.0, -1.0, 0.0, 8.0), tensor(2.0, -2.0, 0.1, 16.0), tensor(3.0, -3.0, 0.2, 24.0)
    h = tensor(0.5, -0.5, 0.0, 4.0, shape=(4, 16))
    g1, g2 = tensor(0.01, -0.01, 0.0, 0.08), tensor(0.05, -0.04, 0.001, 0.3)

    def call(inp, out):
        return {"input_args": [inp], "output": [out]}

    target = {"Tensor.__add__.0.forward": call(x1, x1), "Tensor.to.0.forward": call(x1, x1),
              "Tensor.to.1.forward": call(h, h), "Tensor.__add__.1.forward": call(x2, x2),
              "Tensor.to.2.forward": call(x2, x2), "Tensor.__add__.2.forward": call(x3, x3),
              "Tensor.to.3.forward": call(x3, x3),
              "Tensor.to.2.backward": {"input": [g1], "output": [g1]}}
    golden = {"Tensor.__add__.0.forward": call(x1, x1), "Tensor.to.0.forward": call(x1, x1),
              "Tensor.__add__.1.forward": call(x2, x2), "Tensor.to.1.forward": call(x2, x2),
              "Tensor.__add__.2.forward": call(x3, x3), "Tensor.to.2.forward": call(x3, x3),
              "Tensor.to.2.backward": {"input": [g2], "output": [g2]}}
    rep = run(tmp_path, target, golden)
    fwd = rep.names.index("Tensor.to.2.forward.input.0")
    bwd = rep.names.index("Tensor.to.2.backward.input.0")
    assert rep.verdict[fwd] == vd.WARN and rep.verdict[bwd] == vd.WARN
    assert "the two sides are different calls: the target's value comes from Tensor.__add__.1.forward.output.0, " \
           "the golden's from Tensor.__add__.2.forward.output.0" in rep.why[fwd]
    assert "its forward call's input Tensor.to.2.forward.input.0" in rep.why[bwd]
    assert rep.first_red is None and rep.red == 0
    assert_consistent(rep)


def test_input_made_by_a_target_only_op_still_enters(tmp_path):
    # the same shape of dump, but the target's value comes from an op the golden does not run (unmatched):
    # that is where a difference enters (red), not a pair of two different calls
    x1, x2 = tensor(1.0, -1.0, 0.0, 8.0), tensor(1.5, -1.5, 0.0, 12.0)

    def call(inp, out):
        return {"input_args": [inp], "output": [out]}

    rep = run(tmp_path,
              {"Tensor.__add__.0.forward": call(x1, x1), "Tensor.mul.0.forward": call(x1, x2),
               "Tensor.masked_fill.0.forward": call(x2, x2)},
              {"Tensor.__add__.0.forward": call(x1, x1), "Tensor.masked_fill.0.forward": call(x1, x1)})
    row = rep.names.index("Tensor.masked_fill.0.forward.input.0")
    assert rep.verdict[row] == vd.FAIL, rep.why[row]
    assert_consistent(rep)


def test_parameter_gradient_is_not_explained_by_the_input_gradient(tmp_path):
    """A conv weight gradient x3 under bf16 (torchvision ResNet, tv_resnet_param_grad_bf16_stat): the module's
    backward output (the gradient for its input, which the weight gradient does not read) had its Max 16% off (20% here)
    from bf16 rounding carried backwards, and 4 x 16% 'explained' the weight gradient 185% off. A parameter
    gradient is made of the forward's inputs and the gradient the backward received: those differ by 7.8%."""
    x = tensor(1.0, -1.0, 0.01, 8.0, shape=(4, 64, 8, 8), dtype="torch.bfloat16")
    x_g = tensor(1.0, -1.0, 0.01, 8.0, shape=(4, 64, 8, 8))
    w = tensor(0.1, -0.1, 0.0, 2.0, shape=(64, 64, 3, 3))
    gin_t, gin_g = tensor(0.0108, -0.0108, 0.0, 0.0862, shape=(4, 64, 8, 8)), tensor(0.01, -0.01, 0.0, 0.08, shape=(4, 64, 8, 8))
    gout_t, gout_g = tensor(0.012, -0.01, 0.0, 0.0863, shape=(4, 64, 8, 8)), tensor(0.01, -0.01, 0.0, 0.08, shape=(4, 64, 8, 8))
    wg_t, wg_g = tensor(0.3, -0.3, 0.0, 5.7, shape=(64, 64, 3, 3)), tensor(0.1, -0.1, 0.0, 2.0, shape=(64, 64, 3, 3))
    out = tensor(1.0, -1.0, 0.0, 9.0, shape=(4, 64, 8, 8))

    def side(xx, gin, gout, wg):
        return {"Module.c.Conv2d.forward.0": {"input_args": [xx], "parameters": {"weight": w}, "output": [out]},
                "Module.c.Conv2d.parameters_grad": {"weight": [wg]},
                "Module.c.Conv2d.backward.0": {"input": [gin], "output": [gout]}}
    rep = run(tmp_path, side(x, gin_t, gout_t, wg_t), side(x_g, gin_g, gout_g, wg_g))
    row = rep.names.index("Module.c.Conv2d.parameters_grad.weight")
    assert rep.verdict[row] == vd.FAIL, rep.why[row]
    assert rep.why[row].endswith("while its inputs differ by only 7.41%"), rep.why[row]
    assert_consistent(rep)


def test_tied_parameter_gradient_takes_every_holders_inputs(tmp_path):
    """GPT-2's lm_head.weight is transformer.wte.weight: one gradient, recorded under both modules. It is made
    of the embedding's backward input too, which carries a fault from deep in the network (a GELU gradient
    x1.5): the lm_head's own inputs agree, so its parameters_grad row was named first (hf_gpt2_gelu_grad_bf16_stat)."""
    x = tensor(1.0, -1.0, 0.01, 8.0, shape=(2, 16, 64))
    g_ok = tensor(0.01, -0.01, 0.0, 0.08, shape=(2, 16, 128))
    ge_t, ge_g = tensor(0.015, -0.015, 0.0, 0.12, shape=(2, 16, 64)), tensor(0.01, -0.01, 0.0, 0.08, shape=(2, 16, 64))
    w_t, w_g = tensor(0.3, -0.3, 0.0, 2.7), tensor(0.2, -0.2, 0.0, 1.8)
    ids = tensor(100.0, 0.0, 50.0, 900.0, dtype="torch.int64", shape=(2, 16))

    def side(ge, w):
        return {"Module.wte.Embedding.forward.0": {"input_args": [ids], "output": [x]},
                "Module.wte.Embedding.parameters_grad": {"weight": [w]},
                "Module.lm_head.Linear.forward.0": {"input_args": [x], "output": [tensor(2.0, -2.0, 0.0, 30.0, shape=(2, 16, 128))]},
                "Module.lm_head.Linear.parameters_grad": {"weight": [w]},
                "Module.lm_head.Linear.backward.0": {"input": [g_ok], "output": [x]},
                "Module.wte.Embedding.backward.0": {"input": [ge], "output": [None]}}
    rep = run(tmp_path, side(ge_t, w_t), side(ge_g, w_g))
    row = rep.names.index("Module.lm_head.Linear.parameters_grad.weight")
    assert rep.verdict[row] < vd.FAIL, rep.why[row]
    assert rep.first_red is None or rep.first_red[1] != "Module.lm_head.Linear.parameters_grad.weight"
    assert_consistent(rep)
