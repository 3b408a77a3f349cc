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
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gen_inputs import (F32, I64, S, STAT_CFG, Builder, T, json_float, add_specials, base_stats,  # noqa: E402
                        decoder, embed_and_mask, encode, generate_fresh, layers_to_reach, linear, loss_and_backward,
                        number_leaves, perturb_outputs, rotary, side_rows, stack_and_construct, up_to_date,
                        value_reps, write_json, write_text)

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
        # (name, entry, parent, is_module) in reversed forward order = pre-order of the backward tree
        pre = list(self.backward_records(graph=True))
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


def shared_rope(b: Builder, seq: int):
    """rope(q, k, v) for ``attention``: the shared ``model.rotary_emb`` module called from inside each attention
    (forward.<layer>), then the rotation of q and k."""
    def rope(q: T, k: T, v: T):
        hd = q.shape[-1]
        hr = b.module_begin("model.rotary_emb", "LlamaRotaryEmbedding")
        pos = T([1, seq], I64, rg=False)
        freqs = b.api("Torch.matmul", [T([1, hd // 2, 1], F32, rg=False), T([1, 1, seq], F32, rg=False)],
                      [T([1, hd // 2, seq], F32, rg=False)], site="rope.freqs", grad=False)
        emb = b.api("Torch.cat", [[freqs, freqs], S("int", -1)], [T([1, seq, hd], F32, rg=False)], site="rope.cat",
                    grad=False)
        act = (q.gdt, q.tdt)
        cos = b.api("Torch.cos", [emb], [T([1, seq, hd], *act, rg=False)], site="rope.cos", grad=False)
        sin = b.api("Torch.sin", [emb], [T([1, seq, hd], *act, rg=False)], site="rope.sin", grad=False)
        b.module_end(hr, [v, pos], [cos, sin], None, site="module:rotary_emb")
        return rotary(b, q, cos, sin, "rope_q", sep="."), rotary(b, k, cos, sin, "rope_k", sep=".")

    return rope


def build_model(layers: int, cfg: dict = STAT_CFG) -> GraphBuilder:
    b = GraphBuilder()
    B, Sq, V = cfg["batch"], cfg["seq"], cfg["vocab"]
    hmod = b.module_begin("model", "LlamaModel")
    ids, x, mask = embed_and_mask(b, cfg)
    x = decoder(b, x, mask, cfg, layers, shared_rope(b, Sq))
    x = b.module_end(hmod, [ids], [x], None, {"attention_mask": T([B, Sq], I64, rg=False)}, site="module:model")
    # top level: lm_head, then the loss APIs between modules
    logits = linear(b, "lm_head", x, V, (F32, F32), False, "lm_head")
    lg = b.api("Tensor.float", [logits], [logits.like()], site="loss.float")
    sh = b.api("Tensor.__getitem__", [lg, S("slice", [None, -1, None])], [T([B, Sq - 1, V], F32)], site="loss.shift")
    sh = b.api("Tensor.contiguous", [sh], [sh.like()], site="loss.contiguous")
    sh = b.api("Tensor.view", [sh, S("int", -1), S("int", V)], [T([B * (Sq - 1), V], F32)], site="loss.view")
    loss_and_backward(b, sh, T([B * (Sq - 1)], I64, rg=False))
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
    return layers_to_reach(nodes, lambda layers: graph_counts(build_model(layers))["graph_nodes"])


# ---------------------------------------------------------------------------------------------------------------------
# statistics and writing
# ---------------------------------------------------------------------------------------------------------------------

def forward_apis(b: Builder) -> list:
    return [n for n in b.data if n.endswith(".forward") and not n.startswith("Module.")]


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
        return head % (json_float(mx), json_float(mn), json_float(me), json_float(no))

    return leaf


def generate(out: Path, p: dict) -> dict:
    t0 = time.perf_counter()
    b = build_model(p["layers"])
    counts = graph_counts(b)
    allt, nv = number_leaves(b)
    rep = value_reps(allt, nv)
    rng = np.random.default_rng(p["seed"])
    g, tgt, ints = base_stats(rep, rng, p["noise"])
    names = sorted(forward_apis(b))
    bad = set(rng.choice(names, size=max(20, len(names) // 250), replace=False).tolist())
    perturb_outputs(b, tgt, bad, rng, 1.5, 30.0, flip_mean=True)
    rest = [n for n in names if n not in bad]
    warn = set(rng.choice(rest, size=max(16, len(rest) // 400), replace=False).tolist())
    perturb_outputs(b, tgt, warn, rng, 1.15, 1.45)
    add_specials(g, tgt, ints, rng, zero_mean=False)
    stack, construct = stack_and_construct(b, "/home/user/train")
    t_model = time.perf_counter() - t0
    size = 0
    for side, vals, attr in (("golden", g, "gdt"), ("target", tgt, "tdt")):
        rows = side_rows(vals, rep, attr)
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
    files = [out / s / "step0" / "rank0" / f for s in ("target", "golden")
             for f in ("dump.json", "stack.json", "construct.json")]
    info = up_to_date(out, p, files, force)
    if info is not None:
        if not quiet:
            print(f"[gen] graph {nodes}: up to date in {out}", flush=True)
        return {"dir": str(out), "params": p, "info": info}

    def no_gc_generate(out, p):
        gc.disable()  # millions of small objects, no cycles to collect: the collector only costs time here
        try:
            return generate(out, p)
        finally:
            gc.enable()

    info = generate_fresh(out, p, no_gc_generate)
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
