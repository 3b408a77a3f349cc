"""Child process of benchmarks/dump_bench.py: time training steps of a TinyTransformer under one dump config.

    <venv python> benchmarks/dump_bench_worker.py --impl ours|ref8|ref26|none --model d64|d256
                  [--config cfg.json] [--steps N] [--warmup 3]

Builds the model, optionally constructs ``msprobe.pytorch.PrecisionDebugger(config_path=cfg.json)``, runs
``--warmup`` untimed steps and ``--steps`` timed steps, each

    dbg.start(model); opt.zero_grad(); out = model(x); loss = CE(out, y); loss.backward(); dbg.stop();
    opt.step(); dbg.step()

and prints, as the last line of stdout, one JSON object starting with ``{"dump_bench": 1`` (median and every
step time in ms, wall clock and process CPU time (all threads), which msprobe was imported and from where).  Whatever msprobe prints goes to the same
stdout/stderr; the parent keeps only the JSON line (and the stderr tail on failure).

The worker does not touch sys.path (it imports benchmarks/harness.py from its own folder): which msprobe it imports is decided by the interpreter and PYTHONPATH the
parent gives it (the reference venvs run it from a directory outside the repository without PYTHONPATH, ours
with PYTHONPATH=<repo root>).  The model classes are copied from
shared/fixtures/reference/_gen/models.py (TinyTransformer, as built by ``models.build("transformer", ...)``) so
that the worker runs without that directory.
"""

import argparse
import json
import os
import statistics
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

from harness import time_steps  # benchmarks/harness.py, next to this file (sys.path[0] of a script)

# ---------------------------------------------------------------------------------------------------------------------
# model (copy of shared/fixtures/reference/_gen/models.py: Attention, Block, TinyTransformer, build("transformer"))
# ---------------------------------------------------------------------------------------------------------------------


class Attention(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.h = heads
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)

    def forward(self, x):
        b, s, d = x.shape
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        q = q.view(b, s, self.h, d // self.h).transpose(1, 2)
        k = k.view(b, s, self.h, d // self.h).transpose(1, 2)
        v = v.view(b, s, self.h, d // self.h).transpose(1, 2)
        att = torch.matmul(q, k.transpose(-2, -1)) / (d // self.h) ** 0.5
        att = F.softmax(att, dim=-1)
        att = F.dropout(att, p=0.0, training=self.training)
        y = torch.matmul(att, v).transpose(1, 2).reshape(b, s, d)
        return self.proj(y)


class Block(nn.Module):
    def __init__(self, d=32, heads=4):
        super().__init__()
        self.ln1 = nn.LayerNorm(d)
        self.attn = Attention(d, heads)
        self.ln2 = nn.LayerNorm(d)
        self.fc1 = nn.Linear(d, 4 * d)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(4 * d, d)

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        x = x + self.fc2(self.act(self.fc1(self.ln2(x))))
        return x


class TinyTransformer(nn.Module):
    def __init__(self, vocab=100, d=32, heads=4, n_layers=1, seq=8):
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        self.pos = nn.Parameter(torch.zeros(1, seq, d))
        self.blocks = nn.ModuleList([Block(d, heads) for _ in range(n_layers)])
        self.ln_f = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab)

    def forward(self, idx):
        x = self.emb(idx) + self.pos
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.ln_f(x))


# name -> TinyTransformer kwargs; batch 2 as models.build("transformer") makes it
MODELS = {
    "d64": dict(n_layers=4, d=64, seq=8),
    "d256": dict(n_layers=4, d=256, seq=128),
}


# a Llama-style decoder from transformers (random init from a config, nothing downloaded): RMSNorm, rotary
# embeddings, grouped-query attention (8 heads, 4 KV heads), SwiGLU MLP; eager attention; batch 1
LLAMA = dict(vocab_size=8192, hidden_size=512, intermediate_size=1408, num_hidden_layers=4, num_attention_heads=8,
             num_key_value_heads=4, max_position_embeddings=1024, tie_word_embeddings=False)
LLAMA_SEQ = 512


class _LogitsOnly(nn.Module):
    """The transformers model returning its logits tensor (the step code is the same for every model)."""

    def __init__(self, inner):
        super().__init__()
        self.inner = inner

    def forward(self, idx):
        return self.inner(input_ids=idx, use_cache=False).logits


def build_llama(seed):
    from transformers import LlamaConfig, LlamaForCausalLM
    cfg = LlamaConfig(**LLAMA)
    cfg._attn_implementation = "eager"
    torch.manual_seed(seed)
    m = _LogitsOnly(LlamaForCausalLM(cfg))
    torch.manual_seed(seed + 1)
    x = torch.randint(0, LLAMA["vocab_size"], (1, LLAMA_SEQ))
    y = torch.randint(0, LLAMA["vocab_size"], (1, LLAMA_SEQ))
    return m, x, y


def build(model_name, seed=1234):
    if model_name == "llama":
        return build_llama(seed)
    kw = MODELS[model_name]
    torch.manual_seed(seed)
    m = TinyTransformer(**kw)
    torch.manual_seed(seed + 1)
    x = torch.randint(0, 100, (2, kw["seq"]))
    y = torch.randint(0, 100, (2, kw["seq"]))
    return m, x, y


# ---------------------------------------------------------------------------------------------------------------------
# the floor: the same tensors, measured with no tool around them
# ---------------------------------------------------------------------------------------------------------------------

_KEEP = (torch.float32, torch.float16, torch.bfloat16)


def capture_measured(step_fn):
    """Run one dumped step with our debugger and return clones of the tensors whose statistics it measured
    (each distinct value once: the set a tool must reduce at the least)."""
    from msprobe.pytorch.dump import stats as S
    captured = []
    orig_add = S.StatBuffer.add

    def add(self, rec, t, orig=None):
        if t.numel() and not t.is_meta:
            captured.append(t.detach().clone())
        return orig_add(self, rec, t, orig)
    S.StatBuffer.add = add
    try:
        step_fn()
    finally:
        S.StatBuffer.add = orig_add
    return captured


def _reduce_all(tensors):
    """max/min/mean/norm of every tensor in the cheapest way known: one fused pass (msprobe's compiled float32
    kernel, when built) for contiguous float32 CPU tensors, else aminmax + sum + dot (float32); one transfer."""
    try:
        from msprobe._native import f32_stats
    except Exception:   # the reference's venvs: no floor is computed there
        f32_stats = None
    vals = []
    host = []
    for t in tensors:
        if f32_stats is not None and t.dtype is torch.float32 and t.is_cpu and t.dim() and t.is_contiguous():
            host.append(f32_stats(t.numpy()))
            continue
        if t.dtype is torch.bool:
            vals += [t.any(), t.all()]
            continue
        if t.dtype not in _KEEP:
            t = t.float()
        if t.dim() == 0:
            vals.append(t.float())
            continue
        mn, mx = torch.aminmax(t)
        v = t.reshape(-1)
        vals += [mx, mn, torch.sum(v, dtype=torch.float32),
                 torch.dot(v, v) if v.dtype is torch.float32 else torch.linalg.vector_norm(v)]
    return (torch.stack([x.float() for x in vals]).tolist() if vals else []) + host


def _crc_all(tensors):
    try:
        from msprobe.core.crc import crc32 as crc   # zlib-ng when installed: the fastest CRC-32 at hand
    except Exception:
        from zlib import crc32 as crc
    out = []
    for t in tensors:
        c = t.contiguous()
        if c.dtype is torch.bfloat16:
            c = c.view(torch.uint8) if c.dim() else c.reshape(1).view(torch.uint8)
        out.append(crc(c.numpy()))
    return out


def _write_all(tensors, directory):
    for i, t in enumerate(tensors):
        c = t.contiguous()
        c = c.reshape(-1).view(torch.uint8) if c.dtype is torch.bfloat16 else c.reshape(-1)
        fd = os.open(os.path.join(directory, f"{i}.bin"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o640)
        try:
            os.write(fd, c.numpy().data.cast("B"))
        finally:
            os.close(fd)


def floors(tensors, reps=5):
    """Process-CPU and wall ms (minimum over reps) of the reductions alone, + CRC-32, + raw file writes."""
    import shutil
    import tempfile
    d = tempfile.mkdtemp(prefix="floor_", dir=".")
    parts = {"stat": lambda: _reduce_all(tensors), "crc": lambda: _crc_all(tensors),
             "write": lambda: _write_all(tensors, d)}
    best = {}
    try:
        for _ in range(reps):
            for k, fn in parts.items():
                c0, t0 = time.process_time(), time.perf_counter()
                fn()
                w, c = (time.perf_counter() - t0) * 1e3, (time.process_time() - c0) * 1e3
                bw, bc = best.get(k, (w, c))
                best[k] = (min(bw, w), min(bc, c))
    finally:
        shutil.rmtree(d, ignore_errors=True)
    stat = best["stat"]
    return {"tensors": len(tensors), "mb": round(sum(t.numel() * t.element_size() for t in tensors) / 1e6, 2),
            "stat_ms": stat[0], "stat_cpu_ms": stat[1],
            "md5_ms": stat[0] + best["crc"][0], "md5_cpu_ms": stat[1] + best["crc"][1],
            "tensor_ms": stat[0] + best["write"][0], "tensor_cpu_ms": stat[1] + best["write"][1]}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--impl", required=True, help="label only (ours, ref8, ref26, none)")
    ap.add_argument("--model", required=True, choices=sorted(MODELS) + ["llama"])
    ap.add_argument("--config", default=None, help="msprobe config.json; without it no debugger is constructed")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--baseline", action="store_true",
                    help="first time the same steps without a debugger in this process (same-process A/B)")
    ap.add_argument("--floor", action="store_true",
                    help="ours only: after the timed steps, capture the tensors one dumped step measures and time "
                         "the floor (reductions alone; + CRC-32; + raw file writes) on them")
    a = ap.parse_args()

    torch.set_num_threads(1)
    model, x, y = build(a.model)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)

    dbg = None
    info = {"msprobe_file": None, "msprobe_version": None}
    t_import = t_ctor = 0.0

    def one_step(dbg):
        if dbg is not None:
            dbg.start(model)
        opt.zero_grad()
        out = model(x)
        loss = F.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1))
        loss.backward()
        if dbg is not None:
            dbg.stop()
        opt.step()
        if dbg is not None:
            dbg.step()
        return loss

    def run_steps(dbg):
        last = [None]

        def step():
            last[0] = one_step(dbg)

        times, cpu_times = time_steps(step, a.steps, a.warmup)
        return times, cpu_times, last[0]

    baseline = None
    if a.baseline:
        b_times, b_cpu, _ = run_steps(None)
        baseline = {"baseline_median_ms": statistics.median(b_times),
                    "baseline_cpu_median_ms": statistics.median(b_cpu)}
    if a.config:
        t0 = time.perf_counter()
        import msprobe
        from msprobe.pytorch import PrecisionDebugger
        t_import = time.perf_counter() - t0
        info["msprobe_file"] = getattr(msprobe, "__file__", None)
        try:
            from importlib.metadata import version
            info["msprobe_version"] = version("mindstudio-probe")
        except Exception:  # ours is not installed under that name
            info["msprobe_version"] = getattr(msprobe, "__version__", None)
        t0 = time.perf_counter()
        dbg = PrecisionDebugger(config_path=a.config)
        t_ctor = time.perf_counter() - t0
    times, cpu_times, loss = run_steps(dbg)
    floor = None
    if a.floor and dbg is not None:
        floor = floors(capture_measured(lambda: one_step(dbg)))

    res = {"dump_bench": 1, "impl": a.impl, "model": a.model, "debugger": dbg is not None,
           "median_ms": statistics.median(times), "min_ms": min(times), "steps_ms": [round(t, 3) for t in times],
           "cpu_median_ms": statistics.median(cpu_times), "cpu_steps_ms": [round(t, 3) for t in cpu_times],
           "warmup": a.warmup, "import_s": round(t_import, 3), "ctor_s": round(t_ctor, 3),
           "loss": float(loss.item()) if loss is not None else None, "torch": torch.__version__,
           "python": sys.executable, "floor": floor, **info, **(baseline or {})}
    sys.stdout.flush()
    sys.stdout.write("\n" + json.dumps(res) + "\n")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
