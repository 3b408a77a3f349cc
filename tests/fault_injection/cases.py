"""The fault-injection cases and the control pairs.

``expected`` maps a rank (``"rank"`` for a single process, ``"rank0"``/``"rank1"`` for the 2-rank MLP) to
the names that count as the right top suspect: the injected op's API name (``Tensor.__mul__.1.forward``)
and, where one wraps exactly that op, its leaf module (``Module.blocks.0.ln2.LayerNorm.forward.0``).
A named row or op counts when it equals one of them or starts with it followed by ``.``.
Control pairs have ``expected = None``: no op may be named.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Dict, List, Optional


@dataclass
class Case:
    name: str
    model: str            # tf | cnn | dist, or a transformers arch (HF_ARCHS: llama, gpt2, t5, mixtral, ...)
    fault: dict
    task: str             # statistics | md5 | tensor
    level: str            # mix | L1
    what: str             # the fault, in words
    expected: Optional[Dict[str, List[str]]]
    target_dtype: str = "fp32"
    golden_dtype: str = "fp32"
    golden_fault: dict = field(default_factory=dict)   # the golden run's settings (same structure, no fault)
    target_only: bool = False   # the culprit is an op only the target runs (no golden row of that name)
    compare_args: tuple = ()    # extra ``msprobe compare`` options (``("-fm",)``)

    @property
    def family(self) -> str:
        """``hf`` for a tiny transformers model (tests/real_models), ``tv`` for a torchvision model (``tv_<arch>``,
        tests/fault_injection/tv.py), ``base`` for the models written here."""
        if self.model.startswith("tv_"):
            return "tv"
        return "hf" if self.model in HF_ARCHS else "base"

    @property
    def control(self) -> bool:
        return self.expected is None

    def to_json(self) -> dict:
        d = asdict(self)
        d["fault"] = repr(self.fault)
        d["golden_fault"] = repr(self.golden_fault)
        return d


HF_ARCHS = ("llama", "gpt2", "t5", "mixtral", "bert", "vit")


def _one(*names):
    return {"rank": list(names)}


ATTN_MUL_1 = "Tensor.__mul__.1.forward"          # block 1: scores * scale
LN_0_LN2 = ("Functional.layer_norm.1.forward", "Module.blocks.0.ln2.LayerNorm.forward.0")

CASES: List[Case] = [
    # ---- transformer, forward
    Case("tf_attn_scale_stat", "tf", {"attn_scale": {1: 1.5}}, "statistics", "mix",
         "block 1 attention scores x1.5 before softmax", _one(ATTN_MUL_1)),
    Case("tf_attn_scale_md5", "tf", {"attn_scale": {1: 1.5}}, "md5", "L1",
         "block 1 attention scores x1.5 before softmax", _one(ATTN_MUL_1)),
    Case("tf_attn_scale_tensor", "tf", {"attn_scale": {1: 1.5}}, "tensor", "mix",
         "block 1 attention scores x1.5 before softmax", _one(ATTN_MUL_1)),
    Case("tf_attn_scale_bf16_stat", "tf", {"attn_scale": {1: 1.5}}, "statistics", "mix",
         "block 1 attention scores x1.5 before softmax; bf16 autocast target vs fp32 golden", _one(ATTN_MUL_1),
         target_dtype="bf16"),
    Case("tf_extra_mul_stat", "tf", {"extra_mul": {1: 1.5}}, "statistics", "mix",
         "block 1: the target alone multiplies the scores by 1.5 (an op with no golden counterpart)",
         _one("Tensor.mul.0.forward"), target_only=True),
    Case("tf_extra_mul_bf16_tensor", "tf", {"extra_mul": {0: 1.5}}, "tensor", "L1",
         "block 0: the target alone multiplies the scores by 1.5; bf16 target vs fp32 golden",
         _one("Tensor.mul.0.forward"), target_dtype="bf16", target_only=True),
    Case("tf_ln_eps_stat", "tf", {"ln_eps": {"0.ln2": 0.1}}, "statistics", "L1",
         "block 0 ln2 LayerNorm eps=0.1 instead of 1e-5", _one(LN_0_LN2[0])),
    Case("tf_ln_eps_tensor", "tf", {"ln_eps": {"0.ln2": 0.1}}, "tensor", "mix",
         "block 0 ln2 LayerNorm eps=0.1 instead of 1e-5", _one(*LN_0_LN2)),
    Case("tf_ln_eps_bf16_both_stat", "tf", {"ln_eps": {"0.ln2": 0.1}}, "statistics", "mix",
         "block 0 ln2 LayerNorm eps=0.1; both runs bf16 autocast", _one(*LN_0_LN2),
         target_dtype="bf16", golden_dtype="bf16"),
    Case("tf_ln_eps_bf16_tensor", "tf", {"ln_eps": {"0.ln2": 0.1}}, "tensor", "mix",
         "block 0 ln2 LayerNorm eps=0.1; bf16 autocast target vs fp32 golden", _one(*LN_0_LN2),
         target_dtype="bf16"),
    Case("tf_gelu_out_stat", "tf", {"gelu_out": {0: 1.05}}, "statistics", "mix",
         "block 0 GELU output x1.05 (perturbed kernel, same arguments)", _one("FaultOps.gelu.0.forward")),
    Case("tf_gelu_out_md5", "tf", {"gelu_out": {0: 1.05}}, "md5", "mix",
         "block 0 GELU output x1.05 (perturbed kernel, same arguments)", _one("FaultOps.gelu.0.forward")),
    Case("tf_gelu_out_tensor", "tf", {"gelu_out": {0: 1.05}}, "tensor", "L1",
         "block 0 GELU output x1.05 (perturbed kernel, same arguments)", _one("FaultOps.gelu.0.forward")),
    Case("tf_gelu_out_bf16_stat", "tf", {"gelu_out": {0: 1.05}}, "statistics", "mix",
         "block 0 GELU output x1.05; bf16 autocast target vs fp32 golden", _one("FaultOps.gelu.0.forward"),
         target_dtype="bf16"),
    Case("tf_fused_softmax_bf16_stat", "tf", {"fused_softmax": {1: 1.5}}, "statistics", "mix",
         "block 1 fused softmax scales its scores x1.5 inside the kernel; bf16 target vs fp32 golden",
         _one("FaultOps.softmax.0.forward"), target_dtype="bf16", golden_fault={"fused_softmax": {1: None}}),
    Case("tf_fused_softmax_md5", "tf", {"fused_softmax": {1: 1.5}}, "md5", "L1",
         "block 1 fused softmax scales its scores x1.5 inside the kernel",
         _one("FaultOps.softmax.0.forward"), golden_fault={"fused_softmax": {1: None}}),
    Case("tf_fused_softmax_tensor", "tf", {"fused_softmax": {0: 1.5}}, "tensor", "mix",
         "block 0 fused softmax scales its scores x1.5 inside the kernel",
         _one("FaultOps.softmax.0.forward"), golden_fault={"fused_softmax": {0: None}}),
    Case("tf_gelu_tanh_stat", "tf", {"head_gelu": "tanh"}, "statistics", "mix",
         'GELU before the head with approximate="tanh" instead of "none"', _one("Functional.gelu.0.forward")),
    # ---- transformer, backward
    Case("tf_gelu_grad_stat", "tf", {"gelu_grad": {1: 1.5}}, "statistics", "mix",
         "block 1 GELU backward: gradient x1.5", _one("FaultOps.gelu.1.backward")),
    Case("tf_gelu_grad_tensor", "tf", {"gelu_grad": {1: 1.5}}, "tensor", "L1",
         "block 1 GELU backward: gradient x1.5", _one("FaultOps.gelu.1.backward")),
    Case("tf_gelu_grad_md5", "tf", {"gelu_grad": {1: 1.5}}, "md5", "mix",
         "block 1 GELU backward: gradient x1.5", _one("FaultOps.gelu.1.backward")),
    Case("tf_gelu_grad_bf16_stat", "tf", {"gelu_grad": {1: 1.5}}, "statistics", "mix",
         "block 1 GELU backward: gradient x1.5; bf16 autocast target vs fp32 golden",
         _one("FaultOps.gelu.1.backward"), target_dtype="bf16"),
    Case("tf_probs_grad_stat", "tf", {"probs_grad": {0: 1.5}}, "statistics", "mix",
         "block 0 gradient reaching the softmax output x1.5 (tensor hook)", _one("Functional.softmax.0.backward")),
    # ---- transformer, parameter gradient
    Case("tf_param_grad_stat", "tf", {"param_grad": {"blocks.1.mlp.fc2.weight": 1.5}}, "statistics", "mix",
         "blocks.1.mlp.fc2.weight gradient x1.5 (parameter hook)",
         _one("Module.blocks.1.mlp.fc2.Linear.parameters_grad")),
    Case("tf_param_grad_bf16_stat", "tf", {"param_grad": {"blocks.0.attn.qkv.weight": 1.5}}, "statistics",
         "mix", "blocks.0.attn.qkv.weight gradient x1.5 (parameter hook); bf16 target vs fp32 golden",
         _one("Module.blocks.0.attn.qkv.Linear.parameters_grad"), target_dtype="bf16"),
    Case("tf_param_grad_tensor", "tf", {"param_grad": {"blocks.1.mlp.fc2.weight": 1.5}}, "tensor", "mix",
         "blocks.1.mlp.fc2.weight gradient x1.5 (parameter hook)",
         _one("Module.blocks.1.mlp.fc2.Linear.parameters_grad")),
    # ---- CNN
    Case("cnn_gn_groups_stat", "cnn", {"gn_groups": 2}, "statistics", "L1",
         "GroupNorm with 2 groups instead of 4", _one("Functional.group_norm.0.forward")),
    Case("cnn_gn_groups_bf16_stat", "cnn", {"gn_groups": 2}, "statistics", "mix",
         "GroupNorm with 2 groups instead of 4; bf16 autocast target vs fp32 golden",
         _one("Functional.group_norm.0.forward", "Module.gn.GroupNorm.forward.0"), target_dtype="bf16"),
    Case("cnn_bn_eps_md5", "cnn", {"bn_eps": 0.5}, "md5", "L1",
         "BatchNorm eps=0.5 instead of 1e-5", _one("Functional.batch_norm.0.forward")),
    Case("cnn_relu_out_tensor", "cnn", {"relu_out": {1: 1.05}}, "tensor", "mix",
         "second ReLU output x1.05 (perturbed kernel)", _one("FaultOps.relu.1.forward")),
    Case("cnn_relu_out_bf16_stat", "cnn", {"relu_out": {0: 1.05}}, "statistics", "mix",
         "first ReLU output x1.05 (perturbed kernel); bf16 target vs fp32 golden", _one("FaultOps.relu.0.forward"),
         target_dtype="bf16"),
    Case("cnn_param_grad_stat", "cnn", {"param_grad": {"conv1.weight": 1.5}}, "statistics", "mix",
         "conv1.weight gradient x1.5 (parameter hook)", _one("Module.conv1.Conv2d.parameters_grad")),
    # ---- 2-rank MLP (gloo)
    Case("dist_act_allreduce_stat", "dist", {"allreduce_out": {"0.1": 1.05}}, "statistics", "mix",
         "activation all_reduce result x1.05 on rank 1", {"rank1": ["Distributed.all_reduce.0.forward"]}),
    Case("dist_grad_allreduce_tensor", "dist", {"allreduce_out": {"2.1": 1.5}}, "tensor", "mix",
         "fc1.bias gradient all_reduce result x1.5 on rank 1", {"rank1": ["Distributed.all_reduce.2.forward"]}),
    Case("dist_act_allreduce_bf16_stat", "dist", {"allreduce_out": {"0.1": 1.05}}, "statistics", "mix",
         "activation all_reduce result x1.05 on rank 1; bf16 target vs fp32 golden",
         {"rank1": ["Distributed.all_reduce.0.forward"]}, target_dtype="bf16"),
    Case("dist_reduce_op_md5", "dist", {"reduce_op": "max"}, "md5", "L1",
         "activation all_reduce with ReduceOp.MAX instead of SUM (both ranks)",
         {"rank0": ["Distributed.all_reduce.0.forward"], "rank1": ["Distributed.all_reduce.0.forward"]}),
    # ---- control pairs: no fault
    Case("ctl_tf_bf16_stat", "tf", {}, "statistics", "mix", "no fault; bf16 autocast vs fp32", None,
         target_dtype="bf16"),
    Case("ctl_tf_bf16_tensor", "tf", {}, "tensor", "mix", "no fault; bf16 autocast vs fp32", None,
         target_dtype="bf16"),
    Case("ctl_tf_fp16_stat", "tf", {}, "statistics", "L1", "no fault; fp16 autocast vs fp32", None,
         target_dtype="fp16"),
    Case("ctl_tf_fp16_tensor", "tf", {}, "tensor", "L1", "no fault; fp16 autocast vs fp32", None,
         target_dtype="fp16"),
    Case("ctl_cnn_bf16_stat", "cnn", {}, "statistics", "mix", "no fault; bf16 autocast vs fp32", None,
         target_dtype="bf16"),
    Case("ctl_cnn_fp16_tensor", "cnn", {}, "tensor", "L1", "no fault; fp16 autocast vs fp32", None,
         target_dtype="fp16"),
    Case("ctl_tf_fp32_md5", "tf", {}, "md5", "mix", "no fault; fp32 vs fp32 (identical runs)", None),
    Case("ctl_dist_bf16_stat", "dist", {}, "statistics", "mix", "no fault; 2 ranks, bf16 autocast vs fp32", None,
         target_dtype="bf16"),
]

FAULTS = [c for c in CASES if not c.control]
CONTROLS = [c for c in CASES if c.control]


# ---------------------------------------------------------------------------------------- transformers models
# Tiny random-init models from transformers configs (tests/real_models, tests/fault_injection/hf.py for the fault
# keys): modeling code nobody here wrote.  The expected names come from a dump of the clean model (the n-th call of
# an API in one step: ``Tensor.__add__.8`` is the ``variance + eps`` of llama's layer-0 post-attention RMSNorm).
def _hf_act(path, kind, out=None, grad=None):
    """The activation at ``path`` replaced by FaultOps.<kind> (scaled in the target, plain in the golden run)."""
    return {"act": {path: [kind, out, grad]}}, {"act": {path: [kind, None, None]}}


_L_SILU0_OUT = _hf_act("model.layers.0.mlp.act_fn", "silu", out=1.05)
_L_SILU1_GRAD = _hf_act("model.layers.1.mlp.act_fn", "silu", grad=1.5)
_G_GELU1_OUT = _hf_act("transformer.h.1.mlp.act", "gelu", out=1.05)
_G_GELU0_GRAD = _hf_act("transformer.h.0.mlp.act", "gelu", grad=1.5)
_T_RELU_DEC1_OUT = _hf_act("decoder.block.1.layer.2.DenseReluDense.act", "relu", out=1.05)
_T_RELU_ENC0_GRAD = _hf_act("encoder.block.0.layer.1.DenseReluDense.act", "relu", grad=1.5)
_M_SILU1_OUT = _hf_act("model.layers.1.mlp.experts.act_fn", "silu", out=1.05)
_M_SILU0_GRAD = _hf_act("model.layers.0.mlp.experts.act_fn", "silu", grad=1.5)
_B_GELU0_OUT = _hf_act("bert.encoder.layer.0.intermediate.intermediate_act_fn", "gelu", out=1.05)
_V_GELU1_GRAD = _hf_act("vit.layers.1.mlp.activation_fn", "gelu", grad=1.5)


def _eps(path, value=0.1, attr="variance_epsilon"):
    return {"attr": {path: {attr: value}}}


def _scaling(path, m=1.5):
    return {"attr": {path: {"scaling": ("mul", m)}}}


HF_CASES: List[Case] = [
    # ---- llama (rotary, GQA, RMSNorm, SiLU MLP)
    Case("hf_llama_rms_eps_stat", "llama", _eps("model.layers.0.post_attention_layernorm"), "statistics", "L1",
         "layer 0 post-attention RMSNorm eps=0.1 instead of 1e-6 (the scalar of variance + eps)",
         _one("Tensor.__add__.8.forward")),
    Case("hf_llama_rms_eps_bf16_tensor", "llama", _eps("model.layers.0.post_attention_layernorm"), "tensor", "mix",
         "layer 0 post-attention RMSNorm eps=0.1; bf16 autocast target vs fp32 golden",
         _one("Tensor.__add__.8.forward", "Module.model.layers.0.post_attention_layernorm.LlamaRMSNorm.forward.0"),
         target_dtype="bf16"),
    Case("hf_llama_attn_scale_md5", "llama", _scaling("model.layers.1.self_attn"), "md5", "L1",
         "layer 1 attention scaling x1.5 (the scalar of scores * scaling)", _one("Tensor.__mul__.19.forward")),
    Case("hf_llama_silu_out_tensor", "llama", _L_SILU0_OUT[0], "tensor", "mix",
         "layer 0 MLP SiLU output x1.05 (perturbed kernel, same arguments)", _one("FaultOps.silu.0.forward"),
         golden_fault=_L_SILU0_OUT[1]),
    Case("hf_llama_silu_grad_stat", "llama", _L_SILU1_GRAD[0], "statistics", "mix",
         "layer 1 MLP SiLU backward: gradient x1.5", _one("FaultOps.silu.0.backward"), golden_fault=_L_SILU1_GRAD[1]),
    Case("hf_llama_param_grad_bf16_stat", "llama", {"param_grad": {"model.layers.1.mlp.down_proj.weight": 1.5}},
         "statistics", "mix", "model.layers.1.mlp.down_proj.weight gradient x1.5; bf16 target vs fp32 golden",
         _one("Module.model.layers.1.mlp.down_proj.Linear.parameters_grad"), target_dtype="bf16"),
    Case("hf_llama_oproj_hook_stat", "llama", {"out_hook": {"model.layers.0.self_attn.o_proj": 1.05}},
         "statistics", "mix", "a user forward hook scales layer 0 o_proj's output x1.05",
         _one("Module.model.layers.0.self_attn.LlamaAttention.forward.0", "Tensor.__add__.7.forward")),
    # the hook's multiply is a recorded Tensor.__mul__ that only the target calls (the later ones are numbered one
    # higher): exact matching pairs it with the golden's act * up (a float argument against a tensor), -fm leaves
    # it unmatched and names the next mul's input, which it made
    Case("hf_llama_act_hook_op_stat", "llama", {"op_hook": {"model.layers.1.mlp.act_fn": 1.05}},
         "statistics", "mix", "a user forward hook multiplies layer 1's SiLU output by 1.05 (a recorded x * 1.05)",
         _one("Tensor.__mul__.22.forward")),
    Case("hf_llama_act_hook_op_stat_fm", "llama", {"op_hook": {"model.layers.1.mlp.act_fn": 1.05}},
         "statistics", "mix", "a user forward hook multiplies layer 1's SiLU output by 1.05 (a recorded x * 1.05); "
         "compare -fm", _one("Tensor.__mul__.22.forward", "Tensor.__mul__.23.forward"), compare_args=("-fm",)),
    # (the sdpa attention: one Functional.scaled_dot_product_attention per layer, the scaling its ``scale=``)
    Case("hf_llama_sdpa_scale_stat", "llama", {"attn_impl": "sdpa", **_scaling("model.layers.1.self_attn")},
         "statistics", "mix", "sdpa attention: layer 1 scale x1.5",
         _one("Functional.scaled_dot_product_attention.1.forward"), golden_fault={"attn_impl": "sdpa"}),
    # ---- gpt2 (Conv1D, LayerNorm, gelu_new)
    Case("hf_gpt2_ln_eps_stat", "gpt2", _eps("transformer.h.0.ln_2", attr="eps"), "statistics", "mix",
         "block 0 ln_2 LayerNorm eps=0.1 instead of 1e-5",
         _one("Functional.layer_norm.1.forward", "Module.transformer.h.0.ln_2.LayerNorm.forward.0")),
    Case("hf_gpt2_attn_scale_tensor", "gpt2", _scaling("transformer.h.1.attn"), "tensor", "L1",
         "block 1 attention scaling x1.5", _one("Tensor.__mul__.2.forward")),
    Case("hf_gpt2_gelu_out_md5", "gpt2", _G_GELU1_OUT[0], "md5", "L1",
         "block 1 MLP GELU output x1.05 (perturbed kernel)", _one("FaultOps.gelu.0.forward"),
         golden_fault=_G_GELU1_OUT[1]),
    Case("hf_gpt2_gelu_grad_bf16_stat", "gpt2", _G_GELU0_GRAD[0], "statistics", "mix",
         "block 0 MLP GELU backward: gradient x1.5; bf16 target vs fp32 golden", _one("FaultOps.gelu.0.backward"),
         target_dtype="bf16", golden_fault=_G_GELU0_GRAD[1]),
    Case("hf_gpt2_param_grad_tensor", "gpt2", {"param_grad": {"transformer.h.1.attn.c_attn.weight": 1.5}},
         "tensor", "mix", "transformer.h.1.attn.c_attn.weight gradient x1.5 (parameter hook)",
         _one("Module.transformer.h.1.attn.c_attn.Conv1D.parameters_grad")),
    # (msprobe's module hook runs before the user's hooks, as the reference's does: c_fc's own record holds the
    # unscaled output; the first row that sees the scaled one is the activation's first op's input, an input no
    # recorded op produced.  In bf16 such an input must differ beyond 16 bf16 units (6.25%) to count: x1.05 is
    # within, x1.25 is not)
    Case("hf_gpt2_cfc_hook_bf16_stat", "gpt2", {"out_hook": {"transformer.h.1.mlp.c_fc": 1.25}}, "statistics",
         "mix", "a user forward hook scales block 1 c_fc's output x1.25; bf16 target vs fp32 golden",
         _one("Tensor.__rmul__.3.forward", "Module.transformer.h.1.mlp.act.NewGELUActivation.forward.0"),
         target_dtype="bf16"),
    Case("hf_gpt2_cfc_hook_stat", "gpt2", {"out_hook": {"transformer.h.1.mlp.c_fc": 1.05}}, "statistics",
         "L1", "a user forward hook scales block 1 c_fc's output x1.05",
         _one("Tensor.__rmul__.3.forward")),
    # ---- t5 (encoder-decoder, relative position bias, T5LayerNorm, ReLU)
    Case("hf_t5_ln_eps_stat", "t5", _eps("encoder.block.0.layer.1.layer_norm"), "statistics", "mix",
         "encoder block 0 FF T5LayerNorm eps=0.1 instead of 1e-6",
         _one("Tensor.__add__.4.forward", "Module.encoder.block.0.layer.1.layer_norm.T5LayerNorm.forward.0")),
    Case("hf_t5_xattn_scale_tensor", "t5", _scaling("decoder.block.0.layer.1.EncDecAttention"), "tensor", "mix",
         "decoder block 0 cross-attention scaling 1.5 instead of 1", _one("Tensor.__mul__.20.forward")),
    Case("hf_t5_relu_out_md5", "t5", _T_RELU_DEC1_OUT[0], "md5", "L1",
         "decoder block 1 FF ReLU output x1.05 (perturbed kernel)", _one("FaultOps.relu.0.forward"),
         golden_fault=_T_RELU_DEC1_OUT[1]),
    Case("hf_t5_relu_grad_stat", "t5", _T_RELU_ENC0_GRAD[0], "statistics", "L1",
         "encoder block 0 FF ReLU backward: gradient x1.5", _one("FaultOps.relu.0.backward"),
         golden_fault=_T_RELU_ENC0_GRAD[1]),
    Case("hf_t5_param_grad_bf16_stat", "t5", {"param_grad": {"encoder.block.1.layer.1.DenseReluDense.wo.weight": 1.5}},
         "statistics", "mix", "encoder block 1 wo.weight gradient x1.5; bf16 target vs fp32 golden",
         _one("Module.encoder.block.1.layer.1.DenseReluDense.wo.Linear.parameters_grad"), target_dtype="bf16"),
    Case("hf_t5_param_grad_bf16_stat_fm", "t5",
         {"param_grad": {"encoder.block.1.layer.1.DenseReluDense.wo.weight": 1.5}}, "statistics", "mix",
         "encoder block 1 wo.weight gradient x1.5; bf16 target vs fp32 golden; compare -fm",
         _one("Module.encoder.block.1.layer.1.DenseReluDense.wo.Linear.parameters_grad"), target_dtype="bf16",
         compare_args=("-fm",)),
    Case("hf_t5_relbias_hook_stat", "t5",
         {"out_hook": {"encoder.block.0.layer.0.SelfAttention.relative_attention_bias": 1.5}}, "statistics", "mix",
         "a user forward hook scales the encoder's relative position bias embedding x1.5",
         _one("Tensor.permute.0.forward")),   # the first op that reads the hooked output (see the gpt2 hook case)
    # ---- mixtral (mixture of experts: top-2 router over 4 experts)
    Case("hf_mixtral_topk_stat", "mixtral", {"attr": {"model.layers.0.mlp.gate": {"top_k": 1}}}, "statistics",
         "mix", "layer 0 router keeps the top 1 expert instead of 2 (the k of topk)",
         _one("Torch.topk.0.forward", "Module.model.layers.0.mlp.gate.MixtralTopKRouter.forward.0")),
    Case("hf_mixtral_rms_eps_md5", "mixtral", _eps("model.layers.1.input_layernorm"), "md5", "L1",
         "layer 1 input RMSNorm eps=0.1 instead of 1e-6", _one("Tensor.__add__.10.forward")),
    Case("hf_mixtral_attn_scale_bf16_stat", "mixtral", _scaling("model.layers.0.self_attn"), "statistics", "mix",
         "layer 0 attention scaling x1.5; bf16 target vs fp32 golden", _one("Tensor.__mul__.9.forward"),
         target_dtype="bf16"),
    Case("hf_mixtral_expert_act_tensor", "mixtral", _M_SILU1_OUT[0], "tensor", "mix",
         "layer 1 experts' SiLU output x1.05 (perturbed kernel)", _one("FaultOps.silu.0.forward"),
         golden_fault=_M_SILU1_OUT[1]),
    Case("hf_mixtral_expert_grad_stat", "mixtral", _M_SILU0_GRAD[0], "statistics", "L1",
         "layer 0 experts' SiLU backward: gradient x1.5", _one("FaultOps.silu.0.backward"),
         golden_fault=_M_SILU0_GRAD[1]),
    Case("hf_mixtral_expert_wgrad_stat", "mixtral", {"param_grad": {"model.layers.1.mlp.experts.down_proj": 1.5}},
         "statistics", "mix", "layer 1 experts' down_proj gradient x1.5 (parameter hook)",
         _one("Module.model.layers.1.mlp.experts.MixtralExperts.parameters_grad")),
    # ---- bert (encoder-only, post-norm, dropout 0.1 with the same seed on both sides)
    Case("hf_bert_ln_eps_stat", "bert", _eps("bert.encoder.layer.1.attention.output.LayerNorm", attr="eps"),
         "statistics", "L1", "layer 1 attention output LayerNorm eps=0.1 instead of 1e-12",
         _one("Functional.layer_norm.3.forward")),
    Case("hf_bert_gelu_out_md5", "bert", _B_GELU0_OUT[0], "md5", "mix",
         "layer 0 intermediate GELU output x1.05 (perturbed kernel)", _one("FaultOps.gelu.0.forward"),
         golden_fault=_B_GELU0_OUT[1]),
    Case("hf_bert_attn_scale_tensor", "bert", _scaling("bert.encoder.layer.0.attention.self"), "tensor", "L1",
         "layer 0 attention scaling x1.5", _one("Tensor.__mul__.0.forward")),
    Case("hf_bert_param_grad_bf16_stat", "bert",
         {"param_grad": {"bert.encoder.layer.0.attention.self.query.weight": 1.5}}, "statistics", "mix",
         "layer 0 query.weight gradient x1.5; bf16 target vs fp32 golden",
         _one("Module.bert.encoder.layer.0.attention.self.query.Linear.parameters_grad"), target_dtype="bf16"),
    Case("hf_bert_attn_dropout_md5", "bert", {"attr": {"bert.encoder.layer.1.attention.self.dropout": {"p": 0.3}}},
         "md5", "L1", "layer 1 attention-probability dropout p=0.3 instead of 0.1",
         _one("Functional.dropout.4.forward")),
    # ---- vit (vision: conv patch embedding, pre-norm)
    Case("hf_vit_ln_eps_stat", "vit", _eps("vit.layers.1.layernorm_before", attr="eps"), "statistics", "L1",
         "layer 1 layernorm_before eps=0.1 instead of 1e-12", _one("Functional.layer_norm.2.forward")),
    Case("hf_vit_gelu_grad_tensor", "vit", _V_GELU1_GRAD[0], "tensor", "mix",
         "layer 1 MLP GELU backward: gradient x1.5", _one("FaultOps.gelu.0.backward"), golden_fault=_V_GELU1_GRAD[1]),
    Case("hf_vit_patch_hook_bf16_stat", "vit", {"out_hook": {"vit.embeddings.patch_embeddings.projection": 1.25}},
         "statistics", "mix", "a user forward hook scales the patch projection's output x1.25; bf16 vs fp32",
         _one("Tensor.flatten.0.forward"), target_dtype="bf16"),
    Case("hf_vit_param_grad_stat", "vit", {"param_grad": {"vit.layers.0.mlp.fc1.weight": 1.5}}, "statistics", "mix",
         "layer 0 fc1.weight gradient x1.5 (parameter hook)", _one("Module.vit.layers.0.mlp.fc1.Linear.parameters_grad")),
    # ---- control pairs: no fault
    Case("hf_ctl_llama_bf16_stat", "llama", {}, "statistics", "mix", "no fault; bf16 autocast vs fp32", None,
         target_dtype="bf16"),
    Case("hf_ctl_llama_bf16_tensor", "llama", {}, "tensor", "L1", "no fault; bf16 autocast vs fp32", None,
         target_dtype="bf16"),
    Case("hf_ctl_llama_sdpa_bf16_stat", "llama", {"attn_impl": "sdpa"}, "statistics", "mix",
         "no fault; sdpa attention; bf16 autocast vs fp32", None, target_dtype="bf16", golden_fault={"attn_impl": "sdpa"}),
    Case("hf_ctl_gpt2_bf16_stat", "gpt2", {}, "statistics", "mix", "no fault; bf16 autocast vs fp32", None,
         target_dtype="bf16"),
    Case("hf_ctl_gpt2_bf16_tensor", "gpt2", {}, "tensor", "mix", "no fault; bf16 autocast vs fp32", None,
         target_dtype="bf16"),
    Case("hf_ctl_t5_bf16_stat", "t5", {}, "statistics", "mix", "no fault; bf16 autocast vs fp32", None,
         target_dtype="bf16"),
    Case("hf_ctl_t5_bf16_tensor", "t5", {}, "tensor", "L1", "no fault; bf16 autocast vs fp32", None,
         target_dtype="bf16"),
    # T5's FF block casts to wo.weight's dtype only when they differ: a bf16 run calls Tensor.to once more per FF
    # layer, every later Tensor.to.N is another call than the golden's Tensor.to.N; -fm pairs the k-th call of
    # each shape instead
    Case("hf_ctl_t5_bf16_stat_fm", "t5", {}, "statistics", "mix", "no fault; bf16 autocast vs fp32; compare -fm",
         None, target_dtype="bf16", compare_args=("-fm",)),
    # another attention implementation on each side (the target's fused sdpa, the golden's eager matmul/softmax):
    # whole calls pair by their arguments with -fm, and the backward calls with their forwards' partners
    Case("hf_ctl_llama_sdpa_vs_eager_stat_fm", "llama", {"attn_impl": "sdpa"}, "statistics", "mix",
         "no fault; sdpa attention (target) vs eager (golden); compare -fm", None, compare_args=("-fm",)),
    Case("hf_ctl_mixtral_bf16_stat", "mixtral", {}, "statistics", "mix", "no fault; bf16 autocast vs fp32", None,
         target_dtype="bf16"),
    Case("hf_ctl_mixtral_fp32_md5", "mixtral", {}, "md5", "mix", "no fault; fp32 vs fp32 (identical runs)", None),
    Case("hf_ctl_bert_bf16_stat", "bert", {}, "statistics", "mix", "no fault; bf16 autocast vs fp32", None,
         target_dtype="bf16"),
    Case("hf_ctl_vit_bf16_stat", "vit", {}, "statistics", "mix", "no fault; bf16 autocast vs fp32", None,
         target_dtype="bf16"),
    Case("hf_ctl_vit_fp16_tensor", "vit", {}, "tensor", "L1", "no fault; fp16 autocast vs fp32", None,
         target_dtype="fp16"),
]

HF_FAULTS = [c for c in HF_CASES if not c.control]
HF_CONTROLS = [c for c in HF_CASES if c.control]
