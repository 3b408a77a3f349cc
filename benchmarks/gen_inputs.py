"""Generate the benchmark inputs: dump pairs in the reference (msprobe 8.3.3 PyTorch) on-disk format.

    .venv/bin/python benchmarks/gen_inputs.py [--work-dir bench_work | WORKDIR] [--cases stat,tensor,tiny]
                                              [--stat-rows 40000] [--tensor-files 2000]
                                              [--tensor-mb 1100] [--seed 0] [--force]

Writes, under the work dir (default ``bench_work/`` in the repository root):

* ``stat/{target,golden}/step0/rank0/``: statistics mode, level mix, of a deep Llama-like decoder
  (embedding, per layer RMSNorm / attention with rotary embedding / RMSNorm / SwiGLU MLP, final norm,
  lm_head, cross entropy), forward and backward, Module.* entries with ``parameters`` and
  ``parameters_grad``, Functional/Torch/Tensor APIs with tensor and scalar (int/float/bool/str) arguments,
  nested tensor lists (torch.cat).  At least ``--stat-rows`` tensor rows per side.  The target is the
  golden with small relative noise (bf16-sized), with a few APIs carrying large output errors and a few
  inf/NaN statistics so that highlighting has work to do.  Includes stack.json (8.3.3+ format
  ``{"0": [[names], [frames]], ...}``) and construct.json.
* ``tensor/{target,golden}/step0/rank0/``: tensor mode (task "tensor", ``data_name`` fields,
  ``dump_tensor_data/*.pt`` written with ``torch.save``), the same model with small dimensions, at least
  ``--tensor-files`` .pt files and ``--tensor-mb`` MB per side: float32 mostly, some bfloat16 and float16
  layers, a few int64 tensors; target = golden * (1 + 1e-3 noise), a few tensors uncorrelated, NaN or inf.
* ``tiny/{target,golden}/step0/rank0/``: about 70 rows, a copy of the reference fixture
  ``mlp_bf16_stat_mix`` step0 (or, when the fixture is not available, a generated MLP of the same shape).

A case whose ``.params.json`` matches the requested parameters is left alone (use ``--force`` to rebuild).
Pure numpy except the tensor case, which needs torch (the project's .venv has it).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import sys
import time
from pathlib import Path

import numpy as np
from json.encoder import encode_basestring_ascii as quote  # what json.dump writes for a str

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_WORK = ROOT / "bench_work"
FIXTURE = Path(os.environ.get("MSPROBE_FIXTURES", ROOT.parent / "shared" / "fixtures" / "reference")) / "mlp_bf16_stat_mix"
GEN_VERSION = 5  # bump when the generated content changes

F32, BF16, F16, I64 = "torch.float32", "torch.bfloat16", "torch.float16", "torch.int64"


# ---------------------------------------------------------------------------------------------------------------------
# Model structure: a list of dump entries whose tensors are placeholders (T), shared by the stat and tensor renderers
# ---------------------------------------------------------------------------------------------------------------------

class T:
    """A tensor placeholder: shape, golden/target dtype, requires_grad. ``idx`` is its position in leaf order."""

    __slots__ = ("shape", "gdt", "tdt", "rg", "idx", "vid", "numel")

    def __init__(self, shape, gdt=F32, tdt=None, rg=True):
        self.shape = [int(s) for s in shape]
        self.gdt = gdt
        self.tdt = tdt or gdt
        self.rg = rg
        self.idx = -1   # occurrence (one report row / one .pt file)
        self.vid = -1   # value: the same tensor seen in several records (output of one API, input of the next)
        self.numel = int(np.prod(self.shape)) if self.shape else 1

    def like(self, rg=None, gdt=None, tdt=None):
        return T(self.shape, gdt or self.gdt, tdt or (self.tdt if gdt is None else gdt), self.rg if rg is None else rg)


def S(typ, value):
    return {"type": typ, "value": value}


class Builder:
    """Records forward entries (with parent modules) like the reference collector at level mix, then backward."""

    def __init__(self, frames_root: str = "/home/user/train"):
        self.data: dict = {}          # name -> entry (placeholders inside)
        self.parent: dict = {}        # name -> parent module entry name (construct.json)
        self.stack_site: dict = {}    # forward name -> call-site key (stack.json groups)
        self.api_count: dict = {}
        self.mod_count: dict = {}
        self.mod_stack: list = []     # open forward module names
        self.fwd_log: list = []       # (name, kind, info) in forward order, replayed backwards
        self.frames_root = frames_root

    # --- forward ---
    def _api_name(self, api: str) -> str:
        n = self.api_count.get(api, 0)
        self.api_count[api] = n + 1
        return f"{api}.{n}"

    def api(self, api: str, args: list, outs: list, kwargs: dict | None = None, site: str | None = None, grad=True):
        base = self._api_name(api)
        name = f"{base}.forward"
        self.data[name] = {"input_args": args, "input_kwargs": kwargs or {}, "is_recompute": False, "output": outs}
        self.parent[name] = self.mod_stack[-1] if self.mod_stack else None
        self.stack_site[name] = site or api
        if grad:
            self.fwd_log.append((base, "api", args, outs, self.parent[name]))
        return outs[0] if len(outs) == 1 else outs

    def module_begin(self, path: str, cls: str):
        key = f"Module.{path}.{cls}"
        n = self.mod_count.get(key, 0)
        self.mod_count[key] = n + 1
        self.mod_stack.append(f"{key}.forward.{n}")
        return key, n

    def module_end(self, handle, args: list, outs: list, params: dict | None = None, kwargs: dict | None = None,
                   site: str | None = None):
        key, n = handle
        name = self.mod_stack.pop()
        entry = {"input_args": args, "input_kwargs": kwargs or {}, "output": outs}
        if params is not None:
            entry["parameters"] = params
        entry["is_recompute"] = False
        self.data[name] = entry
        self.parent[name] = self.mod_stack[-1] if self.mod_stack else None
        self.stack_site[name] = site or ("module:" + key.split(".")[-1])
        if params:
            # 8.3.3 writes the parameters_grad placeholder right after the module's forward record
            self.data[f"{key}.parameters_grad"] = {p: [t.like(rg=False)] for p, t in params.items()}
        self.fwd_log.append((f"{key}.{{dir}}.{n}", "module", args + list((kwargs or {}).values()), outs,
                             self.parent[name]))
        return outs[0] if len(outs) == 1 else outs

    # --- backward: reverse forward order; grads of outputs in, grads of tensor inputs out ---
    def backward_records(self, graph: bool = False):
        """(name, entry, parent, is_module) of the backward records, in reversed forward order.  ``graph``: as
        8.3.3 writes them (only through outputs that require a gradient; a module whose inputs need none still
        gets a record, ``"output": []``); else a record wherever a float output and a gradient input exist."""
        for base, kind, args, outs, parent in reversed(self.fwd_log):
            ins = [o.like(rg=False) for o in outs if isinstance(o, T) and (o.rg or not graph) and o.gdt != I64]
            if not ins:
                continue
            outg = [grad_of(a) for a in args]
            if all(g is None for g in outg):
                if not (graph and kind == "module"):
                    continue
                outg = []
            name = f"{base}.backward" if kind == "api" else base.format(dir="backward")
            par = parent.replace(".forward.", ".backward.") if parent else None
            yield name, {"input": ins, "output": outg}, par, kind == "module"

    def backward(self):
        for name, entry, par, _ in self.backward_records():
            self.data[name] = entry
            self.parent[name] = par


def grad_of(x):
    """The gradient placeholder(s) of an argument: None where no gradient flows."""
    if isinstance(x, T):
        return x.like(rg=False) if (x.rg and x.gdt != I64) else None
    if isinstance(x, list):
        gs = [grad_of(e) for e in x]
        return gs if any(g is not None for g in gs) else None
    return None


def linear(b: Builder, path: str, x: T, out_features: int, act_dt, bias: bool, site: str):
    w = T([out_features, x.shape[-1]], F32)
    params = {"weight": w}
    args = [x, w]
    if bias:
        params["bias"] = T([out_features], F32)
        args.append(params["bias"])
    h = b.module_begin(path, "Linear")
    y = T(x.shape[:-1] + [out_features], *act_dt)
    b.api("Functional.linear", args, [y], site=site + ":linear")
    return b.module_end(h, [x], [y], params, site=site)


def rmsnorm(b: Builder, path: str, x: T, act_dt, site: str):
    h = b.module_begin(path, "LlamaRMSNorm")
    w = T([x.shape[-1]], F32)
    x32 = x.like(gdt=F32)
    p = b.api("Tensor.pow", [x32, S("int", 2)], [x32.like()], site=site + ":pow")
    var = b.api("Tensor.mean", [p, S("int", -1)], [T(x.shape[:-1] + [1], F32)],
                {"keepdim": S("bool", True)}, site=site + ":mean")
    var = b.api("Tensor.__add__", [var, S("float", 1e-06)], [var.like()], site=site + ":add")
    r = b.api("Torch.rsqrt", [var], [var.like()], site=site + ":rsqrt")
    y = b.api("Tensor.__mul__", [x32, r], [x32.like()], site=site + ":mul")
    y = b.api("Tensor.to", [y, S("torch.dtype", x.gdt)], [x.like()], site=site + ":to")
    out = b.api("Tensor.__mul__", [w, y], [x.like()], site=site + ":mulw")
    return b.module_end(h, [x], [out], {"weight": w}, site=site)


def rotary(b: Builder, q: T, cos: T, sin: T, site: str, sep: str = ":"):
    half = q.shape[:-1] + [q.shape[-1] // 2]
    x1, x2 = b.api("Torch.chunk", [q, S("int", 2)], [T(half, q.gdt, q.tdt), T(half, q.gdt, q.tdt)],
                   {"dim": S("int", -1)}, site=site + sep + "chunk")
    nx2 = b.api("Tensor.__neg__", [x2], [x2.like()], site=site + sep + "neg")
    rot = b.api("Torch.cat", [[nx2, x1]], [q.like()], {"dim": S("int", -1)}, site=site + sep + "cat")
    a = b.api("Tensor.__mul__", [q, cos], [q.like()], site=site + sep + "mulcos")
    c = b.api("Tensor.__mul__", [rot, sin], [q.like()], site=site + sep + "mulsin")
    return b.api("Tensor.__add__", [a, c], [q.like()], site=site + sep + "add")


def attention(b: Builder, path: str, x: T, mask: T, cfg: dict, act_dt, rope):
    """LlamaAttention; ``rope(q, k, v)`` applies the rotary embedding to the heads and returns (q, k)."""
    B, Sq, H = x.shape
    nh = cfg["heads"]
    hd = H // nh
    h = b.module_begin(path, "LlamaAttention")
    q = linear(b, f"{path}.q_proj", x, H, act_dt, cfg["qkv_bias"], "attn.q_proj")
    k = linear(b, f"{path}.k_proj", x, H, act_dt, cfg["qkv_bias"], "attn.k_proj")
    v = linear(b, f"{path}.v_proj", x, H, act_dt, cfg["qkv_bias"], "attn.v_proj")
    heads = []
    for nm, t in (("q", q), ("k", k), ("v", v)):
        t = b.api("Tensor.view", [t, S("int", B), S("int", Sq), S("int", nh), S("int", hd)],
                  [T([B, Sq, nh, hd], *act_dt)], site=f"attn.view_{nm}")
        t = b.api("Tensor.transpose", [t, S("int", 1), S("int", 2)], [T([B, nh, Sq, hd], *act_dt)],
                  site=f"attn.transpose_{nm}")
        heads.append(t)
    q, k, v = heads
    q, k = rope(q, k, v)
    kt = b.api("Tensor.transpose", [k, S("int", 2), S("int", 3)], [T([B, nh, hd, Sq], *act_dt)], site="attn.kt")
    sc = b.api("Torch.matmul", [q, kt], [T([B, nh, Sq, Sq], *act_dt)], site="attn.qk")
    sc = b.api("Tensor.__truediv__", [sc, S("float", math.sqrt(hd))], [sc.like()], site="attn.scale")
    sc = b.api("Tensor.__add__", [sc, mask], [sc.like()], site="attn.mask")
    pr = b.api("Functional.softmax", [sc], [T(sc.shape, F32)], {"dim": S("int", -1), "dtype": S("torch.dtype", F32)},
               site="attn.softmax")
    pr = b.api("Tensor.to", [pr, S("torch.dtype", act_dt[0])], [sc.like()], site="attn.to")
    pr = b.api("Functional.dropout", [pr], [pr.like()], {"p": S("float", 0.0), "training": S("bool", False),
                                                         "inplace": S("bool", False)}, site="attn.dropout")
    o = b.api("Torch.matmul", [pr, v], [T([B, nh, Sq, hd], *act_dt)], site="attn.pv")
    o = b.api("Tensor.transpose", [o, S("int", 1), S("int", 2)], [T([B, Sq, nh, hd], *act_dt)], site="attn.transpose_o")
    o = b.api("Tensor.reshape", [o, S("int", B), S("int", Sq), S("int", H)], [T([B, Sq, H], *act_dt)],
              site="attn.reshape")
    o = linear(b, f"{path}.o_proj", o, H, act_dt, False, "attn.o_proj")
    return b.module_end(h, [], [o], None, {"hidden_states": x, "attention_mask": mask}, site="module:attn")


def mlp(b: Builder, path: str, x: T, cfg: dict, act_dt):
    h = b.module_begin(path, "LlamaMLP")
    g = linear(b, f"{path}.gate_proj", x, cfg["inter"], act_dt, False, "mlp.gate")
    hs = b.module_begin(f"{path}.act_fn", "SiLU")
    a = b.api("Functional.silu", [g], [g.like()], {"inplace": S("bool", False)}, site="mlp.silu")
    a = b.module_end(hs, [g], [a], None, site="module:silu")
    u = linear(b, f"{path}.up_proj", x, cfg["inter"], act_dt, False, "mlp.up")
    m = b.api("Tensor.__mul__", [a, u], [u.like()], site="mlp.mul")
    d = linear(b, f"{path}.down_proj", m, x.shape[-1], act_dt, False, "mlp.down")
    return b.module_end(h, [x], [d], None, site="module:mlp")


def layer_dtypes(i: int) -> tuple:
    """(golden, target) activation dtype of layer i: float32 mostly; some float16 and bfloat16 layers, and some
    mixed-precision layers (target bfloat16 vs golden float32, as an NPU bf16 run against an fp32 golden)."""
    r = i % 8
    if r == 2:
        return (BF16, BF16)
    if r == 4:
        return (F32, BF16)
    if r == 5:
        return (F16, F16)
    return (F32, F32)


def embed_and_mask(b: Builder, cfg: dict) -> tuple:
    """The embedding module, the position ids and the causal mask APIs: (ids, embeddings, mask)."""
    B, Sq, H, V = cfg["batch"], cfg["seq"], cfg["hidden"], cfg["vocab"]
    ids = T([B, Sq], I64, rg=False)
    hm = b.module_begin("model.embed_tokens", "Embedding")
    wte = T([V, H], F32)
    x = b.api("Functional.embedding", [ids, wte], [T([B, Sq, H], F32)],
              {"padding_idx": S("int", 0), "scale_grad_by_freq": S("bool", False), "sparse": S("bool", False)},
              site="embedding")
    x = b.module_end(hm, [ids], [x], {"weight": wte}, site="module:embedding")
    b.api("Torch.arange", [S("int", 0), S("int", Sq)], [T([Sq], I64, rg=False)], {"device": S("str", "cpu")},
          site="arange", grad=False)
    mask = b.api("Torch.full", [[S("int", Sq), S("int", Sq)], S("float", float("-inf"))], [T([Sq, Sq], F32, rg=False)],
                 site="mask", grad=False)
    mask = b.api("Torch.triu", [mask], [mask.like()], {"diagonal": S("int", 1)}, site="triu", grad=False)
    mask = b.api("Tensor.expand", [mask, S("int", 1), S("int", 1), S("int", Sq), S("int", Sq)],
                 [T([1, 1, Sq, Sq], F32, rg=False)], site="mask_expand", grad=False)
    return ids, x, mask


def decoder(b: Builder, x: T, mask: T, cfg: dict, layers: int, rope) -> T:
    """``layers`` LlamaDecoderLayer modules (attention with ``rope``, see ``attention``), then the final norm."""
    Sq = cfg["seq"]
    for i in range(layers):
        dt = layer_dtypes(i)
        if dt[0] != x.gdt or dt[1] != x.tdt:
            x = b.api("Tensor.to", [x, S("torch.dtype", dt[0])], [T(x.shape, *dt)], site="layer.cast")
        path = f"model.layers.{i}"
        hl = b.module_begin(path, "LlamaDecoderLayer")
        x_in = x
        h = rmsnorm(b, f"{path}.input_layernorm", x, dt, "input_layernorm")
        a = attention(b, f"{path}.self_attn", h, T(mask.shape, F32, rg=False), cfg, dt, rope)
        x = b.api("Tensor.__add__", [x_in, a], [x_in.like()], site="layer.residual1")
        h = rmsnorm(b, f"{path}.post_attention_layernorm", x, dt, "post_attention_layernorm")
        m = mlp(b, f"{path}.mlp", h, cfg, dt)
        x = b.api("Tensor.__add__", [x, m], [x.like()], site="layer.residual2")
        x = b.module_end(hl, [x_in], [x], None, {"attention_mask": T(mask.shape, F32, rg=False),
                                                  "position_ids": T([1, Sq], I64, rg=False)}, site="module:layer")
    return rmsnorm(b, "model.norm", x, (x.gdt, x.tdt), "final_norm")


def loss_and_backward(b: Builder, logits: T, labels: T) -> None:
    """Cross entropy and the ones_like of backward's start, then the backward records."""
    loss = b.api("Functional.cross_entropy", [logits, labels], [T([], F32)],
                 {"ignore_index": S("int", -100), "reduction": S("str", "mean"), "label_smoothing": S("float", 0.0)},
                 site="loss")
    b.api("Torch.ones_like", [loss], [loss.like(rg=False)],
          {"memory_format": {"type": "torch.memory_format", "format": "preserve_format"}}, site="ones_like", grad=False)
    b.backward()


def build_llama(cfg: dict) -> Builder:
    b = Builder()
    B, Sq, H, V = cfg["batch"], cfg["seq"], cfg["hidden"], cfg["vocab"]
    ids, x, mask = embed_and_mask(b, cfg)
    hd = H // cfg["heads"]
    cos = b.api("Torch.cos", [T([Sq, hd], F32, rg=False)], [T([1, 1, Sq, hd], F32, rg=False)], site="cos", grad=False)
    sin = b.api("Torch.sin", [T([Sq, hd], F32, rg=False)], [T([1, 1, Sq, hd], F32, rg=False)], site="sin", grad=False)

    def rope(q, k, v):
        return rotary(b, q, cos, sin, "attn.rope_q"), rotary(b, k, cos, sin, "attn.rope_k")

    x = decoder(b, x, mask, cfg, cfg["layers"], rope)
    logits = linear(b, "lm_head", x, V, (F32, F32), False, "lm_head")
    lg = b.api("Tensor.view", [logits, S("int", -1), S("int", V)], [T([B * Sq, V], F32)], site="loss.view")
    loss_and_backward(b, lg, T([B * Sq], I64, rg=False))
    return b


def leaves(obj, out: list):
    """Tensor placeholders of an entry, in the order the compare tools walk them."""
    if isinstance(obj, T):
        out.append(obj)
    elif isinstance(obj, list):
        for e in obj:
            leaves(e, out)
    elif isinstance(obj, dict) and "type" not in obj:
        for e in obj.values():
            leaves(e, out)
    return out


def number_leaves(b: Builder) -> tuple:
    """Give every tensor occurrence its own placeholder (idx) while occurrences of the same tensor share a value id
    (vid). Returns (occurrences in leaf order, number of distinct values)."""
    seen: dict = {}
    allt: list = []

    def relabel(obj):
        if isinstance(obj, T):
            if id(obj) in seen:
                c = T(obj.shape, obj.gdt, obj.tdt, obj.rg)
                c.vid = seen[id(obj)]
                obj = c
            else:
                seen[id(obj)] = obj.vid = len(seen)
            obj.idx = len(allt)
            allt.append(obj)
            return obj
        if isinstance(obj, list):
            return [relabel(e) for e in obj]
        if isinstance(obj, dict) and "type" not in obj:
            return {k: relabel(v) for k, v in obj.items()}
        return obj

    for k in list(b.data):
        b.data[k] = relabel(b.data[k])
    return allt, len(seen)


def stack_and_construct(b: Builder, root: str) -> tuple:
    """stack.json (one group per call site, 8.3.3+ format) and construct.json of a built model."""
    groups: dict = {}
    for name, site in b.stack_site.items():
        groups.setdefault(site, []).append(name)
    stack = {}
    for gi, (site, names) in enumerate(groups.items()):
        first = names[0]
        if first.startswith("Module."):
            frames = ["File /usr/local/lib/python3.11/site-packages/torch/nn/modules/module.py, line 1843, in inner, \n"
                      " hook_result = hook(self, args, kwargs, result)"]
        else:
            frames = ["File /usr/local/lib/python3.11/site-packages/msprobe/core/data_dump/api_registry.py, line 94, "
                      "in api_function, \n return api_instance(*args, **kwargs)"]
        line = 40 + 3 * gi
        frames += [
            f"File {root}/modeling_llama.py, line {line}, in forward, \n hidden_states = self.{site.replace(':', '_')}(hidden_states)",
            "File /usr/local/lib/python3.11/site-packages/torch/nn/modules/module.py, line 1789, in _call_impl, \n"
            " return forward_call(*args, **kwargs)",
            "File /usr/local/lib/python3.11/site-packages/torch/nn/modules/module.py, line 1778, in _wrapped_call_impl, \n"
            " return self._call_impl(*args, **kwargs)",
            f"File {root}/modeling_llama.py, line 612, in forward, \n layer_outputs = decoder_layer(hidden_states, "
            "attention_mask=attention_mask, position_ids=position_ids)",
            "File /usr/local/lib/python3.11/site-packages/torch/nn/modules/module.py, line 1789, in _call_impl, \n"
            " return forward_call(*args, **kwargs)",
            f"File {root}/train.py, line 131, in train_step, \n outputs = model(input_ids=batch['input_ids'], labels=batch['labels'])",
            f"File {root}/train.py, line 188, in main, \n loss = train_step(model, batch)",
            f"File {root}/train.py, line 204, in <module>, \n main()",
        ]
        stack[str(gi)] = [names, frames]
    return stack, dict(b.parent)


# ---------------------------------------------------------------------------------------------------------------------
# Rendering
# ---------------------------------------------------------------------------------------------------------------------

def render(obj, leaf_fn):
    if isinstance(obj, T):
        return leaf_fn(obj)
    if isinstance(obj, list):
        return [render(e, leaf_fn) for e in obj]
    if isinstance(obj, dict) and "type" not in obj:
        return {k: render(v, leaf_fn) for k, v in obj.items()}
    return obj


def round_to(vals: np.ndarray, dtype: str) -> np.ndarray:
    """Round float64 values to the precision of a bf16/fp16 tensor element (as the stats of such tensors are)."""
    with np.errstate(over="ignore", invalid="ignore"):
        if dtype == F16:
            return vals.astype(np.float16).astype(np.float64)
        if dtype == BF16:
            u = vals.astype(np.float32).view(np.uint32).astype(np.uint64)
            u = ((u + 0x7FFF + ((u >> 16) & 1)) & 0xFFFF0000).astype(np.uint32)
            return u.view(np.float32).astype(np.float64)
    return vals.astype(np.float32).astype(np.float64)


def json_float(x: float) -> str:
    if x != x:
        return "NaN"
    if x in (math.inf, -math.inf):
        return "Infinity" if x > 0 else "-Infinity"
    return float.__repr__(x)


def encode(obj, leaf, level: int, out: list) -> None:
    """Append the text of ``obj`` as ``json.dump(obj, indent=1)`` writes it at nesting ``level`` (the collector's
    format) to ``out``; tensor placeholders (T) are written by ``leaf(t, level)``.  Much faster than the json
    module's pure-Python indenting encoder on 250,000 tensor dicts."""
    if isinstance(obj, T):
        out.append(leaf(obj, level))
    elif isinstance(obj, (dict, list, tuple)):
        is_dict = isinstance(obj, dict)
        if not obj:
            out.append("{}" if is_dict else "[]")
            return
        pad = "\n" + " " * (level + 1)
        sep = ("{" if is_dict else "[") + pad
        for k, v in (obj.items() if is_dict else enumerate(obj)):   # the keys are strings here
            out.append(sep + quote(k) + ": " if is_dict else sep)
            sep = "," + pad
            encode(v, leaf, level + 1, out)
        out.append("\n" + " " * level + ("}" if is_dict else "]"))
    elif obj is None:
        out.append("null")
    elif obj is True:
        out.append("true")
    elif obj is False:
        out.append("false")
    elif isinstance(obj, float):
        out.append(json_float(obj))
    elif isinstance(obj, int):
        out.append(int.__repr__(obj))
    elif isinstance(obj, str):
        out.append(quote(obj))
    else:
        out.append(json.dumps(obj))


def write_text(path: Path, chunks: list) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    with open(tmp, "w") as f:
        f.write("".join(chunks))
    os.replace(tmp, path)


def write_json(path: Path, obj) -> None:
    """json.dump with indent=1 (as the collector writes) through a temp file."""
    out: list = []
    encode(obj, None, 0, out)
    write_text(path, out)


def write_side(root: Path, task: str, data: dict, stack: dict, construct: dict, data_dir: str | None) -> None:
    root.mkdir(parents=True, exist_ok=True)
    write_json(root / "dump.json", {"task": task, "level": "mix", "framework": "pytorch", "dump_data_dir": data_dir,
                                    "data": data})
    write_json(root / "stack.json", stack)
    write_json(root / "construct.json", construct)


def pick_bad_entries(b: Builder, rng: np.random.Generator, frac: float, min_n: int) -> set:
    """Forward API entries (not modules) whose target outputs get large errors."""
    names = [n for n in b.data if n.endswith(".forward") and not n.startswith("Module.")]
    k = max(min_n, int(len(names) * frac))
    return set(rng.choice(names, size=min(k, len(names)), replace=False).tolist())


# --- statistics pair ---

STAT_CFG = {"batch": 4, "seq": 4096, "hidden": 4096, "heads": 32, "inter": 11008, "vocab": 32000, "qkv_bias": True}


def layers_to_reach(target: int, count) -> int:
    """The fewest layers whose model reaches ``target`` by ``count(layers)`` (linear in the layers)."""
    c1, c2 = count(1), count(2)
    return max(1, 1 + math.ceil((target - c1) / (c2 - c1)))


def stat_layers_for(rows: int) -> int:
    return layers_to_reach(rows, lambda layers: len(number_leaves(build_llama(dict(STAT_CFG, layers=layers)))[0]))


def value_reps(allt: list, nv: int) -> list:
    rep: list = [None] * nv
    for t in allt:
        if rep[t.vid] is None:
            rep[t.vid] = t
    return rep


def base_stats(rep: list, rng: np.random.Generator, noise: float) -> tuple:
    """(golden, target, ints): golden statistics [max, min, mean, norm] of plausible activations, one row per
    distinct tensor value (scale ~ lognormal, mean small, max/min a few sigma out; int64 tensors fixed); the
    target is the golden with relative noise of a bf16-ish run."""
    nv = len(rep)
    numel = np.array([t.numel for t in rep], dtype=np.float64)
    scale = np.exp(rng.normal(-1.5, 1.2, nv))
    mean = rng.normal(0, 0.05, nv) * scale
    mx = mean + scale * (2.5 + rng.random(nv) * 3)
    mn = mean - scale * (2.5 + rng.random(nv) * 3)
    g = np.stack([mx, mn, mean, np.sqrt(numel) * np.sqrt(scale ** 2 + mean ** 2)], axis=1)
    ints = np.array([t.gdt == I64 for t in rep])
    g[ints] = np.array([31999.0, 0.0, 15873.5, 1.2e6])
    tgt = g * (1 + rng.normal(0, noise, (nv, 4)))
    tgt[ints] = g[ints]
    tgt[:, 3] = np.abs(tgt[:, 3])
    return g, tgt, ints


def perturb_outputs(b: Builder, tgt: np.ndarray, names, rng: np.random.Generator, lo: float, hi: float,
                    flip_mean: bool = False) -> None:
    """Scale the target statistics of the float outputs of the ``names`` entries by U(lo, hi) (they propagate to
    the consumers' inputs, as in a real bad op); ``flip_mean``: and flip the sign of their mean."""
    for name in sorted(names):
        for t in leaves(b.data[name]["output"], []):
            if t.gdt != I64:
                tgt[t.vid] *= rng.uniform(lo, hi)
                if flip_mean:
                    tgt[t.vid, 2] *= -1


def add_specials(g: np.ndarray, tgt: np.ndarray, ints: np.ndarray, rng: np.random.Generator,
                 zero_mean: bool = True) -> None:
    """inf / NaN statistics on 22 float tensors (target only, or both sides); ``zero_mean``: 2 more with mean 0."""
    special = rng.choice(np.flatnonzero(~ints), size=24, replace=False)
    tgt[special[:8], 0] = np.inf                  # overflow on the target only
    tgt[special[8:12], 1] = -np.inf
    tgt[special[12:18]] = np.nan                  # NaN tensors on the target
    g[special[18:20], 0] = tgt[special[18:20], 0] = np.inf     # golden inf too (both sides)
    g[special[20:22]] = tgt[special[20:22]] = np.nan           # NaN on both sides
    if zero_mean:
        tgt[special[22:24], 2] = g[special[22:24], 2] = 0.0


def side_rows(vals: np.ndarray, rep: list, attr: str) -> list:
    """One side's statistics rows as the collector writes them: float32 (.item() of fp32 scalars), the max/min of
    bf16 / fp16 tensors (dtype attribute ``attr``: gdt or tdt) rounded to the element type."""
    vals = round_to(vals, F32)
    for dt in (BF16, F16):
        sel = np.array([getattr(t, attr) == dt for t in rep])
        if sel.any():
            vals[sel, :2] = round_to(vals[sel, :2], dt)
    return vals.tolist()


def gen_stat(out: Path, p: dict) -> dict:
    cfg = dict(STAT_CFG, layers=p["layers"])
    b = build_llama(cfg)
    allt, nv = number_leaves(b)
    rep = value_reps(allt, nv)
    rng = np.random.default_rng(p["seed"])
    g, tgt, ints = base_stats(rep, rng, p["noise"])
    bad = pick_bad_entries(b, rng, 0.004, 20)
    perturb_outputs(b, tgt, bad, rng, 1.5, 30.0, flip_mean=True)
    # moderate errors on a few more (output relative error 0.1-0.5 with clean inputs: yellow rows)
    names = sorted(n for n in b.data if n.endswith(".forward") and not n.startswith("Module.") and n not in bad)
    warn = set(rng.choice(names, size=min(16, len(names)), replace=False).tolist())
    perturb_outputs(b, tgt, warn, rng, 1.15, 1.45)
    add_specials(g, tgt, ints, rng)
    # a few tensors whose requires_grad differs between the sides (yellow "requires_grad is inconsistent")
    rg_flip = set(rng.choice(len(allt), size=6, replace=False).tolist())
    stack, construct = stack_and_construct(b, "/home/user/train")
    for side, vals, attr in (("golden", g, "gdt"), ("target", tgt, "tdt")):
        rows = side_rows(vals, rep, attr)
        flip = rg_flip if side == "target" else set()

        def leaf(t: T, rows=rows, attr=attr, flip=flip):
            mx_, mn_, me_, no_ = rows[t.vid]
            return {"type": "torch.Tensor", "dtype": getattr(t, attr), "shape": t.shape, "Max": mx_, "Min": mn_,
                    "Mean": me_, "Norm": no_, "requires_grad": (not t.rg) if t.idx in flip else t.rg}

        data = {k: render(v, leaf) for k, v in b.data.items()}
        write_side(out / side / "step0" / "rank0", "statistics", data, stack, construct, None)
    return {"entries": len(b.data), "tensor_rows": len(allt), "distinct_tensors": nv, "bad_apis": len(bad),
            "warn_apis": len(warn)}


# --- tensor pair ---

TENSOR_CFG = {"batch": 2, "seq": 256, "hidden": 256, "heads": 4, "inter": 688, "vocab": 4096, "qkv_bias": True}


def tensor_layers_for(files: int, nbytes: int) -> int:
    def count(layers):
        b = build_llama(dict(TENSOR_CFG, layers=layers))
        ts = number_leaves(b)[0]
        return len(ts), sum(t.numel * (8 if t.gdt == I64 else 2 if t.gdt in (BF16, F16) else 4) for t in ts)
    (f1, b1), (f11, b11) = count(1), count(11)
    pf, pb = (f11 - f1) / 10, (b11 - b1) / 10
    return max(1, 1 + math.ceil(max((files - f1) / pf, (nbytes - b1) / pb)))


def data_names(b: Builder) -> dict:
    """idx -> data_name, following the reference's naming ({record}.{input|output|parameters}.{i}[.{j}].pt,
    {module}.parameters_grad.{param}.pt)."""
    names: dict = {}

    def assign(obj, prefix):
        if isinstance(obj, T):
            names[obj.idx] = prefix + ".pt"
        elif isinstance(obj, list):
            for i, e in enumerate(obj):
                assign(e, f"{prefix}.{i}")
        elif isinstance(obj, dict) and "type" not in obj:
            for k, e in obj.items():
                assign(e, f"{prefix}.{k}")

    for name, entry in b.data.items():
        if name.endswith(".parameters_grad"):
            for pn, lst in entry.items():
                for t in leaves(lst, []):
                    names[t.idx] = f"{name}.{pn}.pt"
            continue
        for sect, tag in (("input_args", "input"), ("input_kwargs", "input"), ("input", "input"),
                          ("output", "output"), ("parameters", "parameters")):
            if sect in entry:
                assign(entry[sect], f"{name}.{tag}")
    return names


def gen_tensor(out: Path, p: dict) -> dict:
    import torch  # only this case needs torch

    cfg = dict(TENSOR_CFG, layers=p["layers"])
    b = build_llama(cfg)
    allt, nv = number_leaves(b)
    rep = value_reps(allt, nv)
    names = data_names(b)
    assert len(set(names.values())) == len(allt), "data_name collision"
    rng = np.random.default_rng(p["seed"] + 1)
    biggest = max(t.numel for t in allt)
    pool_n = max(biggest * 2, 1 << 22)
    # one golden pool of normal values and one target pool (golden * (1 + noise)), reused: every tensor is a
    # scaled copy of a slice at a per-value offset (same offset on both sides, so the pair is close)
    gpool = torch.from_numpy(rng.standard_normal(pool_n, dtype=np.float32))
    tpool = gpool * (1 + p["noise"] * torch.from_numpy(rng.standard_normal(pool_n, dtype=np.float32)))
    ipool = torch.from_numpy(rng.integers(0, cfg["vocab"], pool_n, dtype=np.int64))
    offs = rng.integers(0, pool_n - biggest, nv).tolist()
    scales = np.exp(rng.normal(-1.0, 1.0, nv)).tolist()
    bad = pick_bad_entries(b, rng, 0.005, 6)
    bad_v = {t.vid for nm in sorted(bad) for t in leaves(b.data[nm]["output"], []) if t.gdt != I64}
    fl = [t.vid for t in rep if t.gdt != I64 and t.numel > 8]
    special = rng.choice(fl, 5, replace=False).tolist()
    nan_v, inf_v = set(special[:3]), set(special[3:])
    tdt = {F32: torch.float32, BF16: torch.bfloat16, F16: torch.float16, I64: torch.int64}
    stack, construct = stack_and_construct(b, "/home/user/train")
    per_side = {}
    for side in ("golden", "target"):
        root = out / side / "step0" / "rank0"
        tdir = root / "dump_tensor_data"
        tdir.mkdir(parents=True, exist_ok=True)
        pool = gpool if side == "golden" else tpool
        attr = "gdt" if side == "golden" else "tdt"
        cache: dict = {}   # vid -> (tensor, stats) while its occurrences are written (they are close together)
        meta: list = [None] * len(allt)
        total = 0
        for t in allt:
            dt = getattr(t, attr)
            key = (t.vid, dt)
            if key not in cache:
                if len(cache) > 64:
                    cache.pop(next(iter(cache)))
                o = offs[t.vid]
                if dt == I64:
                    x = ipool[o:o + t.numel].clone()
                else:
                    if side == "target" and t.vid in bad_v:
                        o = (o + 7919) % (pool_n - biggest)          # uncorrelated with the golden
                    x = pool[o:o + t.numel] * scales[t.vid]
                    if side == "target" and t.vid in nan_v:
                        x[:: max(1, t.numel // 5)] = float("nan")
                    if t.vid in inf_v:
                        x[0] = float("inf")
                x = x.reshape(t.shape)
                if dt != F32:
                    x = x.to(tdt[dt])
                xf = x.float()
                mn, mx = torch.aminmax(xf)
                st = (mx.item(), mn.item(), xf.mean().item(), torch.linalg.vector_norm(xf).item())
                cache[key] = (x, st)
            x, st = cache[key]
            torch.save(x, tdir / names[t.idx])
            total += x.numel() * x.element_size()
            meta[t.idx] = (dt, st, names[t.idx])

        def leaf(t: T, meta=meta):
            dt, (mx_, mn_, me_, no_), dn = meta[t.idx]
            return {"type": "torch.Tensor", "dtype": dt, "shape": t.shape, "Max": mx_, "Min": mn_, "Mean": me_,
                    "Norm": no_, "requires_grad": t.rg, "data_name": dn}

        data = {k: render(v, leaf) for k, v in b.data.items()}
        write_side(root, "tensor", data, stack, construct, str(tdir.resolve()))
        per_side[side] = total
    return {"entries": len(b.data), "files_per_side": len(allt), "bytes_golden": per_side["golden"],
            "bytes_target": per_side["target"], "bad_apis": len(bad)}


# --- tiny pair ---

def gen_tiny(out: Path, p: dict) -> dict:
    src_ok = all((FIXTURE / s / "step0" / "rank" / "dump.json").is_file() for s in ("target", "golden"))
    if src_ok:
        for side in ("target", "golden"):
            dst = out / side / "step0" / "rank0"
            dst.mkdir(parents=True, exist_ok=True)
            for f in ("dump.json", "stack.json", "construct.json"):
                shutil.copyfile(FIXTURE / side / "step0" / "rank" / f, dst / f)
        return {"source": os.path.relpath(FIXTURE, ROOT)}  # relative to the repository: no machine path
    # no fixture (e.g. CI): a generated MLP pair of about the same size
    b = Builder()
    x = T([8, 32], F32, BF16, rg=False)
    for i, (w, act) in enumerate(((64, "gelu"), (64, "relu"), (10, None))):
        x = linear(b, f"fc{i + 1}", x, w, (F32, BF16), True, f"fc{i + 1}")
        if act:
            h = b.module_begin(f"act{i + 1}", act.upper() if act == "gelu" else "ReLU")
            y = b.api(f"Functional.{act}", [x], [x.like()], site=act)
            x = b.module_end(h, [x], [y], None, site=f"module:{act}")
    loss = b.api("Functional.cross_entropy", [x, T([8], I64, rg=False)], [T([], F32)], site="loss")
    b.api("Torch.ones_like", [loss], [loss.like(rg=False)], site="ones_like", grad=False)
    b.backward()
    allt, _ = number_leaves(b)
    rng = np.random.default_rng(p["seed"])
    g = np.abs(rng.normal(0, 1, (len(allt), 4)))
    g[:, 1] *= -1
    t_ = g * (1 + rng.normal(0, 3e-3, g.shape))
    stack, construct = stack_and_construct(b, "/home/user/train")
    for side, vals in (("golden", g), ("target", t_)):
        def leaf(t: T, vals=vals, side=side):
            r = vals[t.idx].tolist()
            return {"type": "torch.Tensor", "dtype": t.gdt if side == "golden" else t.tdt, "shape": t.shape,
                    "Max": r[0], "Min": r[1], "Mean": r[2], "Norm": r[3], "requires_grad": t.rg}
        data = {k: render(v, leaf) for k, v in b.data.items()}
        write_side(out / side / "step0" / "rank0", "statistics", data, stack, construct, None)
    return {"source": "generated", "tensor_rows": len(allt)}


# ---------------------------------------------------------------------------------------------------------------------

def params_for(case: str, a) -> dict:
    if case == "stat":
        return {"version": GEN_VERSION, "layers": stat_layers_for(a.stat_rows), "min_rows": a.stat_rows,
                "noise": 2e-3, "seed": a.seed}
    if case == "tensor":
        return {"version": GEN_VERSION, "layers": tensor_layers_for(a.tensor_files, a.tensor_mb * 1_000_000),
                "min_files": a.tensor_files, "min_mb": a.tensor_mb, "noise": 1e-3, "seed": a.seed}
    return {"version": GEN_VERSION, "seed": a.seed, "fixture": str(FIXTURE)}


GENERATORS = {"stat": gen_stat, "tensor": gen_tensor, "tiny": gen_tiny}


def ensure(work: Path, cases, a) -> dict:
    """Generate the cases that are missing or stale; return {case: info} (info from the stamp when reused)."""
    infos = {}
    for case in cases:
        out = work / case
        p = params_for(case, a)
        info = up_to_date(out, p, [out / s / "step0" / "rank0" / "dump.json" for s in ("target", "golden")], a.force)
        if info is not None:
            print(f"[gen] {case}: up to date in {out}")
        else:
            info = generate_fresh(out, p, GENERATORS[case])
            print(f"[gen] {case}: {info} -> {out}")
        infos[case] = info
    return infos


def up_to_date(out: Path, p: dict, files: list, force: bool = False):
    """The recorded info of a generated folder whose ``.params.json`` holds the parameters ``p`` and whose
    ``files`` exist; None when it must be (re)generated."""
    stamp = out / ".params.json"
    if force or not stamp.is_file():
        return None
    try:
        old = json.loads(stamp.read_text())
    except ValueError:
        old = {}
    if old.get("params") == p and all(f.is_file() for f in files):
        return old.get("info", {})
    return None


def generate_fresh(out: Path, p: dict, fn) -> dict:
    """Empty ``out``, run ``fn(out, p)`` and record its info (and the seconds it took) in ``.params.json``."""
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    t0 = time.perf_counter()
    info = fn(out, p)
    info["gen_seconds"] = round(time.perf_counter() - t0, 1)
    (out / ".params.json").write_text(json.dumps({"params": p, "info": info}, indent=1))
    return info


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("work", nargs="?", help="work dir (same as --work-dir)")
    ap.add_argument("--work-dir", default=str(DEFAULT_WORK))
    ap.add_argument("--cases", default="tiny,stat,tensor", help="comma-separated subset of tiny,stat,tensor")
    ap.add_argument("--stat-rows", type=int, default=40000, help="minimum tensor rows per side of the stat pair")
    ap.add_argument("--tensor-files", type=int, default=2000, help="minimum .pt files per side of the tensor pair")
    ap.add_argument("--tensor-mb", type=int, default=1100, help="minimum MB (1e6 bytes) of tensor data per side")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--force", action="store_true", help="regenerate even when up to date")
    return ap.parse_args(argv)


def main(argv=None) -> int:
    a = parse_args(argv)
    cases = [c.strip() for c in a.cases.split(",") if c.strip()]
    bad = [c for c in cases if c not in GENERATORS]
    if bad:
        print(f"unknown case(s): {', '.join(bad)}", file=sys.stderr)
        return 2
    ensure(Path(a.work or a.work_dir).resolve(), cases, a)
    return 0


if __name__ == "__main__":
    sys.exit(main())
