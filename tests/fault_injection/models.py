"""Small models whose forward/backward can carry one planted fault.

Every model takes a ``fault`` dict (empty = clean run).  The target run and the golden run build the same
module classes with the same names and parameters, so every dump row pairs; only the faulty op's
behaviour (an argument, a perturbed output or gradient) differs.  Fault keys:

Transformer (``TinyTransformer``):
  ``attn_scale``   {block: m}  attention scores x m before softmax (the scalar of the ``Tensor.__mul__``)
  ``ln_eps``       {"<block>.ln1"|"<block>.ln2": eps}  a wrong LayerNorm eps
  ``gelu_out``     {block: s}  the MLP's GELU output x s (a perturbed kernel, arguments unchanged)
  ``head_gelu``    "tanh": the GELU before the head uses approximate="tanh" instead of "none"
  ``gelu_grad``    {block: s}  the GELU's gradient output x s (a wrong backward kernel)
  ``fused_softmax`` {block: m or None}  that block's softmax is ``FaultOps.softmax``, scaling its input by m
                   inside the kernel (None: no fault; the golden run of such a case uses None)
  ``extra_mul``    {block: m}  the target runs one more op, ``scores.mul(m)`` (``Tensor.mul``), before softmax
  ``probs_grad``   {block: s}  the gradient arriving at the softmax output x s (a tensor hook)
  ``param_grad``   {parameter name: s}  that parameter's gradient x s (a hook on the parameter)
CNN (``SmallCNN``):
  ``gn_groups``    groups of the first GroupNorm;  ``bn_eps``: eps of the BatchNorm
  ``relu_out``     {index: s} the index-th ReLU's output x s;  ``param_grad`` as above
2-rank MLP (``DistMLP``, see :mod:`.dist_worker`): ``allreduce_out`` {(call, rank): s}, ``reduce_op`` "max".
"""

from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from . import faultops


def add_param_grad_faults(model: nn.Module, fault: dict) -> None:
    """Hooks that scale one parameter's gradient (registered before the debugger's own hooks, so the dump
    records the scaled gradient, as a wrong weight-gradient kernel would produce)."""
    params = dict(model.named_parameters())
    for pname, s in fault.get("param_grad", {}).items():
        params[pname].register_hook(lambda g, s=s: g * s)


class Attention(nn.Module):
    def __init__(self, d, heads, idx, fault):
        super().__init__()
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.heads = heads
        self.idx = idx
        self.register_buffer("causal", torch.ones(16, 16, dtype=torch.bool).triu(1), persistent=False)
        self.fault = fault

    def forward(self, x):
        b, s, d = x.shape
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        q = q.reshape(b, s, self.heads, d // self.heads).transpose(1, 2)
        k = k.reshape(b, s, self.heads, d // self.heads).transpose(1, 2)
        v = v.reshape(b, s, self.heads, d // self.heads).transpose(1, 2)
        scale = 1.0 / math.sqrt(d // self.heads)
        scale *= self.fault.get("attn_scale", {}).get(self.idx, 1.0)
        scores = torch.matmul(q, k.transpose(-2, -1)) * scale
        extra = self.fault.get("extra_mul", {}).get(self.idx)
        if extra is not None:   # an op only the target runs
            scores = scores.mul(extra)
        scores = scores.masked_fill(self.causal[:s, :s], float("-inf"))   # identical -inf on both sides
        if self.idx in self.fault.get("fused_softmax", {}):
            with faultops.active(in_scale=self.fault["fused_softmax"][self.idx]):
                probs = faultops.softmax(scores, -1)
        else:
            probs = F.softmax(scores, dim=-1)
        s_grad = self.fault.get("probs_grad", {}).get(self.idx)
        if s_grad is not None and probs.requires_grad:
            probs.register_hook(lambda g: g * s_grad)
        out = torch.matmul(probs, v).transpose(1, 2).reshape(b, s, d)
        return self.proj(out)


class MLP(nn.Module):
    def __init__(self, d, idx, fault):
        super().__init__()
        self.fc1 = nn.Linear(d, 2 * d)
        self.fc2 = nn.Linear(2 * d, d)
        self.idx = idx
        self.fault = fault

    def forward(self, x):
        h = self.fc1(x)
        with faultops.active(out_scale=self.fault.get("gelu_out", {}).get(self.idx),
                             grad_scale=self.fault.get("gelu_grad", {}).get(self.idx)):
            h = faultops.gelu(h)
        return self.fc2(h)


class Block(nn.Module):
    def __init__(self, d, heads, idx, fault):
        super().__init__()
        eps = fault.get("ln_eps", {})
        self.ln1 = nn.LayerNorm(d, eps=eps.get(f"{idx}.ln1", 1e-5))
        self.attn = Attention(d, heads, idx, fault)
        self.ln2 = nn.LayerNorm(d, eps=eps.get(f"{idx}.ln2", 1e-5))
        self.mlp = MLP(d, idx, fault)

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class TinyTransformer(nn.Module):
    def __init__(self, fault=None, d=32, heads=4, blocks=2, out=8):
        super().__init__()
        fault = fault or {}
        self.fault = fault
        self.blocks = nn.ModuleList([Block(d, heads, i, fault) for i in range(blocks)])
        self.ln_f = nn.LayerNorm(d)
        self.head = nn.Linear(d, out)

    def forward(self, x):
        for blk in self.blocks:
            x = blk(x)
        return self.head(F.gelu(self.ln_f(x), approximate=self.fault.get("head_gelu", "none")))


class SmallCNN(nn.Module):
    def __init__(self, fault=None):
        super().__init__()
        fault = fault or {}
        self.fault = fault
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1)
        self.gn = nn.GroupNorm(fault.get("gn_groups", 4), 8)
        self.conv2 = nn.Conv2d(8, 16, 3, padding=1)
        self.bn = nn.BatchNorm2d(16, eps=fault.get("bn_eps", 1e-5))
        self.fc = nn.Linear(16, 10)

    def _relu(self, x, i):
        with faultops.active(out_scale=self.fault.get("relu_out", {}).get(i)):
            return faultops.relu(x)

    def forward(self, x):
        x = F.max_pool2d(self._relu(self.gn(self.conv1(x)), 0), 2)
        x = self._relu(self.bn(self.conv2(x)), 1)
        x = F.adaptive_avg_pool2d(x, 1).flatten(1)
        return self.fc(x)


class DistMLP(nn.Module):
    def __init__(self, d=16):
        super().__init__()
        self.fc1 = nn.Linear(d, 32)
        self.fc2 = nn.Linear(32, 4)

    def forward(self, x, allreduce):
        h = self.fc1(x)
        with torch.no_grad():  # in place, outside autograd (as DDP does); no backward formula saved h
            allreduce(h)
        return self.fc2(F.relu(h))
