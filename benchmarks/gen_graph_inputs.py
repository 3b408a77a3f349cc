"""Generate the `msprobe graph` benchmark input: a target/golden dump pair of a big model graph.

    .venv/bin/python benchmarks/gen_graph_inputs.py [--nodes 100000] [--work-dir DIR] [--seed 0] [--force]

Writes ``{target,golden}/step0/rank0/{dump.json,stack.json,construct.json}`` in the reference's on-disk
format (msprobe 8.3.3 PyTorch dump, task statistics, level mix) under ``DIR`` (default
``bench_work/graph/<nodes>/``), reused while the parameters are unchanged (``.params.json``).

The model is a deep Llama-like decoder (``LlamaModel`` > ``LlamaDecoderLayer`` x L > attention / MLP /
RMSNorm > Linear / SiLU, a shared rotary-embedding module called once per layer, so ``forward.N`` runs up
to L-1), then a top-level ``lm_head`` and the loss APIs between modules (the reference groups them into an
``Apis_Between_Modules`` node), forward and backward.  Functional/Torch/Tensor API entries sit under their
modules (construct.json values are the parent module or null); forward module entries carry ``parameters``,
modules with parameters have a ``Module.X.parameters_grad`` entry right after their forward record (as
8.3.3 writes it), backward records have ``input``/``output``; module backward records come after the
backward records of their contents (post-order, as the hooks fire); a module whose inputs need no gradient
still gets a backward record with ``output: []`` (as 8.3.3 writes it).  stack.json is the 8.3.3+ grouped
format ``{"0": [[names], [frames]], ...}``, one group per call site.

"Graph nodes" = construct.json keys + ``parameters_grad`` entries (the nodes both tools make from a dump);
the reference also adds the root (``DefaultModel``) and one ``Apis_Between_Modules.N`` node per run of >= 2
top-level APIs: ``expected_ref_db_nodes`` in ``.params.json`` is that total, the row count of
``tb_nodes where data_source='NPU'`` in its .vis.db.  L is the smallest layer count that reaches ``--nodes``.

Statistics: golden values per distinct tensor (a tensor passed from one API to the next has the same
statistics in both records), float32-rounded (bf16/fp16 Max/Min rounded to the element type); the target is
the golden with small relative noise, a few APIs with large output errors (x1.5-30, sign-flipped mean),
a few with moderate ones, and a few inf/NaN statistics.  Pure numpy; helpers from ``gen_inputs.py``.
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import os
import shutil
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gen_inputs import (BF16, F16, F32, I64, S, STAT_CFG, Builder, T, layer_dtypes, leaves,  # noqa: E402
                        linear, mlp, number_leaves, rmsnorm, round_to, stack_and_construct, value_reps)

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_BASE = ROOT / "bench_work" / "graph"
GEN_VERSION = 1  # bump when the generated content changes
PARAMS_GRAD = ".parameters_grad"


# ---------------------------------------------------------------------------------------------------------------------
# model structure
# ---------------------------------------------------------------------------------------------------------------------

class GraphBuilder(Builder):
    """gen_inputs.Builder with 8.3.3's backward order and module backward records without input gradients."""

    def backward(self):
        def grad_of(x):
            if isinstance(x, T):
                return x.like(rg=False) if (x.rg and x.gdt != I64) else None
            if isinstance(x, list):
                gs = [grad_of(e) for e in x]
                return gs if any(g is not None for g in gs) else None
            return None

        pre = []  # (name, entry, parent, is_module) in reversed forward order = pre-order of the backward tree
        for base, kind, args, outs, parent in reversed(self.fwd_log):
            # backward runs only through outputs that require a gradient
            ins = [o.like(rg=False) for o in outs if isinstance(o, T) and o.rg and o.gdt != I64]
            if not ins:
                continue
            outg = [grad_of(a) for a in args]
            par = parent.replace(".forward.", ".backward.") if parent else None
            if kind == "api":
                if all(g is None for g in outg):
                    continue
                pre.append((f"{base}.backward", {"input": ins, "output": outg}, par, False))
            else:
                # 8.3.3 records a module's backward even when none of its inputs needs a gradient ("output": [])
                outg = [] if all(g is None for g in outg) else outg
                pre.append((base.format(dir="backward"), {"input": ins, "output": outg}, par, True))
        # a module's backward hook fires after the backward of everything inside it: emit modules post-order
        done = {n for n, *_ in pre}
        pending: list = []

        def emit(name, entry, par):
            self.data[name] = entry
            self.parent[name] = par

        for name, entry, par, is_mod in pre:
            if par is not None and par not in done:
                par = None
            if par in [p[0] for p in pending]:
                while pending[-1][0] != par:
                    emit(*pending.pop())
            else:
                while pending:
                    emit(*pending.pop())
            if is_mod:
                pending.append((name, entry, par))
            else:
                emit(name, entry, par)
        while pending:
            emit(*pending.pop())


def attention(b: Builder, path: str, x: T, mask: T, cfg: dict, act_dt, layer: int):
    """LlamaAttention with the shared ``model.rotary_emb`` module called from inside (forward.<layer>)."""
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
    hr = b.module_begin("model.rotary_emb", "LlamaRotaryEmbedding")
    pos = T([1, Sq], I64, rg=False)
    freqs = b.api("Torch.matmul", [T([1, hd // 2, 1], F32, rg=False), T([1, 1, Sq], F32, rg=False)],
                  [T([1, hd // 2, Sq], F32, rg=False)], site="rope.freqs", grad=False)
    emb = b.api("Torch.cat", [[freqs, freqs], S("int", -1)], [T([1, Sq, hd], F32, rg=False)], site="rope.cat",
                grad=False)
    cos = b.api("Torch.cos", [emb], [T([1, Sq, hd], act_dt[0], act_dt[1], rg=False)], site="rope.cos", grad=False)
    sin = b.api("Torch.sin", [emb], [T([1, Sq, hd], act_dt[0], act_dt[1], rg=False)], site="rope.sin", grad=False)
    b.module_end(hr, [v, pos], [cos, sin], None, site="module:rotary_emb")
    for nm in ("q", "k"):
        t = q if nm == "q" else k
        half = t.shape[:-1] + [t.shape[-1] // 2]
        x1, x2 = b.api("Torch.chunk", [t, S("int", 2)], [T(half, t.gdt, t.tdt), T(half, t.gdt, t.tdt)],
                       {"dim": S("int", -1)}, site=f"rope_{nm}.chunk")
        nx2 = b.api("Tensor.__neg__", [x2], [x2.like()], site=f"rope_{nm}.neg")
        rot = b.api("Torch.cat", [[nx2, x1]], [t.like()], {"dim": S("int", -1)}, site=f"rope_{nm}.cat")
        a = b.api("Tensor.__mul__", [t, cos], [t.like()], site=f"rope_{nm}.mulcos")
        c = b.api("Tensor.__mul__", [rot, sin], [t.like()], site=f"rope_{nm}.mulsin")
        t = b.api("Tensor.__add__", [a, c], [t.like()], site=f"rope_{nm}.add")
        if nm == "q":
            q = t
        else:
            k = t
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


def build_model(layers: int, cfg: dict = STAT_CFG) -> GraphBuilder:
    b = GraphBuilder()
    B, Sq, H, V = cfg["batch"], cfg["seq"], cfg["hidden"], cfg["vocab"]
    ids = T([B, Sq], I64, rg=False)
    hmod = b.module_begin("model", "LlamaModel")
    he = b.module_begin("model.embed_tokens", "Embedding")
    wte = T([V, H], F32)
    x = b.api("Functional.embedding", [ids, wte], [T([B, Sq, H], F32)],
              {"padding_idx": S("int", 0), "scale_grad_by_freq": S("bool", False), "sparse": S("bool", False)},
              site="embedding")
    x = b.module_end(he, [ids], [x], {"weight": wte}, site="module:embedding")
    b.api("Torch.arange", [S("int", 0), S("int", Sq)], [T([Sq], I64, rg=False)], {"device": S("str", "cpu")},
          site="arange", grad=False)
    mask = b.api("Torch.full", [[S("int", Sq), S("int", Sq)], S("float", float("-inf"))], [T([Sq, Sq], F32, rg=False)],
                 site="mask", grad=False)
    mask = b.api("Torch.triu", [mask], [mask.like()], {"diagonal": S("int", 1)}, site="triu", grad=False)
    mask = b.api("Tensor.expand", [mask, S("int", 1), S("int", 1), S("int", Sq), S("int", Sq)],
                 [T([1, 1, Sq, Sq], F32, rg=False)], site="mask_expand", grad=False)
    for i in range(layers):
        dt = layer_dtypes(i)
        if dt[0] != x.gdt or dt[1] != x.tdt:
            x = b.api("Tensor.to", [x, S("torch.dtype", dt[0])], [T(x.shape, *dt)], site="layer.cast")
        path = f"model.layers.{i}"
        hl = b.module_begin(path, "LlamaDecoderLayer")
        x_in = x
        h = rmsnorm(b, f"{path}.input_layernorm", x, dt, "input_layernorm")
        a = attention(b, f"{path}.self_attn", h, T(mask.shape, F32, rg=False), cfg, dt, i)
        x = b.api("Tensor.__add__", [x_in, a], [x_in.like()], site="layer.residual1")
        h = rmsnorm(b, f"{path}.post_attention_layernorm", x, dt, "post_attention_layernorm")
        m = mlp(b, f"{path}.mlp", h, cfg, dt)
        x = b.api("Tensor.__add__", [x, m], [x.like()], site="layer.residual2")
        x = b.module_end(hl, [x_in], [x], None, {"attention_mask": T(mask.shape, F32, rg=False),
                                                  "position_ids": T([1, Sq], I64, rg=False)}, site="module:layer")
    x = rmsnorm(b, "model.norm", x, (x.gdt, x.tdt), "final_norm")
    x = b.module_end(hmod, [ids], [x], None, {"attention_mask": T([B, Sq], I64, rg=False)}, site="module:model")
    # top level: lm_head, then the loss APIs between modules
    logits = linear(b, "lm_head", x, V, (F32, F32), False, "lm_head")
    lg = b.api("Tensor.float", [logits], [logits.like()], site="loss.float")
    sh = b.api("Tensor.__getitem__", [lg, S("slice", [None, -1, None])], [T([B, Sq - 1, V], F32)], site="loss.shift")
    sh = b.api("Tensor.contiguous", [sh], [sh.like()], site="loss.contiguous")
    sh = b.api("Tensor.view", [sh, S("int", -1), S("int", V)], [T([B * (Sq - 1), V], F32)], site="loss.view")
    labels = T([B * (Sq - 1)], I64, rg=False)
    loss = b.api("Functional.cross_entropy", [sh, labels], [T([], F32)],
                 {"ignore_index": S("int", -100), "reduction": S("str", "mean"), "label_smoothing": S("float", 0.0)},
                 site="loss")
    b.api("Torch.ones_like", [loss], [loss.like(rg=False)],
          {"memory_format": {"type": "torch.memory_format", "format": "preserve_format"}}, site="ones_like", grad=False)
    b.backward()
    return b


def graph_counts(b: Builder) -> dict:
    """Node counts of a built model, and the reference's .vis.db NPU row count for it."""
    construct = b.parent
    pgrad = [k for k in b.data if k.endswith(PARAMS_GRAD)]
    # the reference hangs X.parameters_grad under the last X.backward.N; without one it is not a node
    with_bwd = {k.rsplit(".", 2)[0] for k in construct if ".backward." in k}
    pgrad_nodes = sum(1 for k in pgrad if k[: -len(PARAMS_GRAD)] in with_bwd)
    # root children in construct order; runs of >= 2 consecutive APIs become one Apis_Between_Modules node
    groups, run = 0, 0
    for k, par in construct.items():
        if par is not None:
            continue
        if k.startswith("Module."):
            groups += run >= 2
            run = 0
        else:
            run += 1
    groups += run >= 2
    return {"construct_keys": len(construct), "parameters_grad": len(pgrad), "graph_nodes": len(construct) + len(pgrad),
            "apis_between_modules": groups,
            "expected_ref_db_nodes": len(construct) + pgrad_nodes + 1 + groups}


def layers_for(nodes: int) -> int:
    c1 = graph_counts(build_model(1))["graph_nodes"]
    c2 = graph_counts(build_model(2))["graph_nodes"]
    return max(1, 1 + math.ceil((nodes - c1) / (c2 - c1)))


# ---------------------------------------------------------------------------------------------------------------------
# statistics and writing
# ---------------------------------------------------------------------------------------------------------------------

def forward_apis(b: Builder) -> list:
    return [n for n in b.data if n.endswith(".forward") and not n.startswith("Module.")]


def _float(x: float) -> str:
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
    elif isinstance(obj, dict):
        if not obj:
            out.append("{}")
            return
        pad = "\n" + " " * (level + 1)
        first = True
        for k, v in obj.items():
            out.append(("{" if first else ",") + pad + json.dumps(k) + ": ")
            first = False
            encode(v, leaf, level + 1, out)
        out.append("\n" + " " * level + "}")
    elif isinstance(obj, list):
        if not obj:
            out.append("[]")
            return
        pad = "\n" + " " * (level + 1)
        first = True
        for v in obj:
            out.append(("[" if first else ",") + pad)
            first = False
            encode(v, leaf, level + 1, out)
        out.append("\n" + " " * level + "]")
    elif obj is None:
        out.append("null")
    elif obj is True:
        out.append("true")
    elif obj is False:
        out.append("false")
    elif isinstance(obj, float):
        out.append(_float(obj))
    elif isinstance(obj, int):
        out.append(int.__repr__(obj))
    else:
        out.append(json.dumps(obj))


def tensor_leaf(rows: list, attr: str):
    """leaf(t, level) -> the statistics dict of placeholder ``t`` as indent=1 JSON text."""
    cache: dict = {}

    def leaf(t: T, level: int) -> str:
        key = (level, getattr(t, attr), tuple(t.shape), t.rg)
        head = cache.get(key)
        if head is None:
            p1, p2 = "\n" + " " * (level + 1), "\n" + " " * (level + 2)
            shape = ("[" + ",".join(p2 + str(s) for s in t.shape) + p1 + "]") if t.shape else "[]"
            head = (("{" + p1 + '"type": "torch.Tensor",' + p1 + f'"dtype": "{getattr(t, attr)}",' + p1
                     + f'"shape": {shape},' + p1 + '"Max": %s,' + p1 + '"Min": %s,' + p1 + '"Mean": %s,' + p1
                     + '"Norm": %s,' + p1 + f'"requires_grad": {"true" if t.rg else "false"}' + "\n"
                     + " " * level + "}"))
            cache[key] = head
        mx, mn, me, no = rows[t.vid]
        return head % (_float(mx), _float(mn), _float(me), _float(no))

    return leaf


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


def generate(out: Path, p: dict) -> dict:
    t0 = time.perf_counter()
    b = build_model(p["layers"])
    counts = graph_counts(b)
    allt, nv = number_leaves(b)
    rep = value_reps(allt, nv)
    rng = np.random.default_rng(p["seed"])
    numel = np.array([t.numel for t in rep], dtype=np.float64)
    scale = np.exp(rng.normal(-1.5, 1.2, nv))
    mean = rng.normal(0, 0.05, nv) * scale
    g = np.stack([mean + scale * (2.5 + rng.random(nv) * 3), mean - scale * (2.5 + rng.random(nv) * 3), mean,
                  np.sqrt(numel) * np.sqrt(scale ** 2 + mean ** 2)], axis=1)
    ints = np.array([t.gdt == I64 for t in rep])
    g[ints] = np.array([31999.0, 0.0, 15873.5, 1.2e6])
    tgt = g * (1 + rng.normal(0, p["noise"], (nv, 4)))
    tgt[ints] = g[ints]
    tgt[:, 3] = np.abs(tgt[:, 3])
    names = sorted(forward_apis(b))
    bad = set(rng.choice(names, size=max(20, len(names) // 250), replace=False).tolist())
    for name in sorted(bad):
        for t in leaves(b.data[name]["output"], []):
            if t.gdt != I64:
                tgt[t.vid] *= rng.uniform(1.5, 30.0)
                tgt[t.vid, 2] *= -1
    rest = [n for n in names if n not in bad]
    warn = set(rng.choice(rest, size=max(16, len(rest) // 400), replace=False).tolist())
    for name in sorted(warn):
        for t in leaves(b.data[name]["output"], []):
            if t.gdt != I64:
                tgt[t.vid] *= rng.uniform(1.15, 1.45)
    special = rng.choice(np.flatnonzero(~ints), size=24, replace=False)
    tgt[special[:8], 0] = np.inf
    tgt[special[8:12], 1] = -np.inf
    tgt[special[12:18]] = np.nan
    g[special[18:20], 0] = tgt[special[18:20], 0] = np.inf
    g[special[20:22]] = tgt[special[20:22]] = np.nan
    stack, construct = stack_and_construct(b, "/home/user/train")
    t_model = time.perf_counter() - t0
    size = 0
    for side, vals, attr in (("golden", g, "gdt"), ("target", tgt, "tdt")):
        vals = round_to(vals, F32)
        for dt in (BF16, F16):
            sel = np.array([getattr(t, attr) == dt for t in rep])
            if sel.any():
                vals[sel, :2] = round_to(vals[sel, :2], dt)
        rows = vals.tolist()
        root = out / side / "step0" / "rank0"
        root.mkdir(parents=True, exist_ok=True)
        chunks: list = []
        encode({"task": "statistics", "level": "mix", "framework": "pytorch", "dump_data_dir": None, "data": b.data},
               tensor_leaf(rows, attr), 0, chunks)
        write_text(root / "dump.json", chunks)
        del chunks
        write_json(root / "stack.json", stack)
        write_json(root / "construct.json", construct)
        size = (root / "dump.json").stat().st_size
    return dict(counts, layers=p["layers"], dump_entries=len(b.data), tensor_rows=len(allt), distinct_tensors=nv,
                stack_groups=len(stack), bad_apis=len(bad), warn_apis=len(warn), dump_json_mb=round(size / 1e6, 1),
                model_seconds=round(t_model, 1))


def ensure(nodes: int, work: Path | None = None, seed: int = 0, force: bool = False, quiet: bool = False) -> dict:
    """Generate (or reuse) the pair for ``nodes``; return {"dir": ..., "params": ..., "info": ...}."""
    out = Path(work) if work else DEFAULT_BASE / str(nodes)
    p = {"version": GEN_VERSION, "nodes": nodes, "layers": layers_for(nodes), "noise": 2e-3, "seed": seed}
    stamp = out / ".params.json"
    files = [out / s / "step0" / "rank0" / f for s in ("target", "golden")
             for f in ("dump.json", "stack.json", "construct.json")]
    if not force and stamp.is_file():
        try:
            old = json.loads(stamp.read_text())
        except ValueError:
            old = {}
        if old.get("params") == p and all(f.is_file() for f in files):
            if not quiet:
                print(f"[gen] graph {nodes}: up to date in {out}", flush=True)
            return {"dir": str(out), "params": p, "info": old.get("info", {})}
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    t0 = time.perf_counter()
    gc.disable()  # millions of small objects, no cycles to collect: the collector only costs time here
    try:
        info = generate(out, p)
    finally:
        gc.enable()
    info["gen_seconds"] = round(time.perf_counter() - t0, 1)
    stamp.write_text(json.dumps({"params": p, "info": info}, indent=1))
    if not quiet:
        print(f"[gen] graph {nodes}: {info} -> {out}", flush=True)
    return {"dir": str(out), "params": p, "info": info}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, default=100000, help="graph nodes per side (construct keys + parameters_grad)")
    ap.add_argument("--work-dir", default=None, help="output dir (default bench_work/graph/<nodes>/)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--force", action="store_true", help="regenerate even when up to date")
    ap.add_argument("--json", action="store_true", help="print the result as one JSON line (for graph_bench.py)")
    a = ap.parse_args(argv)
    r = ensure(a.nodes, Path(a.work_dir).resolve() if a.work_dir else None, a.seed, a.force, quiet=a.json)
    if a.json:
        print(json.dumps(r))
    return 0


if __name__ == "__main__":
    sys.exit(main())
