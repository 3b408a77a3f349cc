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
    model: str            # tf | cnn | dist
    fault: dict
    task: str             # statistics | md5 | tensor
    level: str            # mix | L1
    what: str             # the fault, in words
    expected: Optional[Dict[str, List[str]]]
    target_dtype: str = "fp32"
    golden_dtype: str = "fp32"
    golden_fault: dict = field(default_factory=dict)   # the golden run's settings (same structure, no fault)
    target_only: bool = False   # the culprit is an op only the target runs (no golden row of that name)

    @property
    def control(self) -> bool:
        return self.expected is None

    def to_json(self) -> dict:
        d = asdict(self)
        d["fault"] = repr(self.fault)
        d["golden_fault"] = repr(self.golden_fault)
        return d


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
