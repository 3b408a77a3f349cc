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

The worker does not touch sys.path: which msprobe it imports is decided by the interpreter and PYTHONPATH the
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


def build(model_name, seed=1234):
    kw = MODELS[model_name]
    torch.manual_seed(seed)
    m = TinyTransformer(**kw)
    torch.manual_seed(seed + 1)
    x = torch.randint(0, 100, (2, kw["seq"]))
    y = torch.randint(0, 100, (2, kw["seq"]))
    return m, x, y


# ---------------------------------------------------------------------------------------------------------------------


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--impl", required=True, help="label only (ours, ref8, ref26, none)")
    ap.add_argument("--model", required=True, choices=sorted(MODELS))
    ap.add_argument("--config", default=None, help="msprobe config.json; without it no debugger is constructed")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--baseline", action="store_true",
                    help="first time the same steps without a debugger in this process (same-process A/B)")
    a = ap.parse_args()

    torch.set_num_threads(1)
    model, x, y = build(a.model)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)

    dbg = None
    info = {"msprobe_file": None, "msprobe_version": None}
    t_import = t_ctor = 0.0

    def run_steps(dbg):
        times, cpu_times = [], []
        loss = None
        for i in range(a.warmup + a.steps):
            c0 = time.process_time()
            t0 = time.perf_counter()
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
            dt = time.perf_counter() - t0
            dc = time.process_time() - c0
            if i >= a.warmup:
                times.append(dt * 1000.0)
                cpu_times.append(dc * 1000.0)
        return times, cpu_times, loss

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

    res = {"dump_bench": 1, "impl": a.impl, "model": a.model, "debugger": dbg is not None,
           "median_ms": statistics.median(times), "min_ms": min(times), "steps_ms": [round(t, 3) for t in times],
           "cpu_median_ms": statistics.median(cpu_times), "cpu_steps_ms": [round(t, 3) for t in cpu_times],
           "warmup": a.warmup, "import_s": round(t_import, 3), "ctor_s": round(t_ctor, 3),
           "loss": float(loss.item()) if loss is not None else None, "torch": torch.__version__,
           "python": sys.executable, **info, **(baseline or {})}
    sys.stdout.flush()
    sys.stdout.write("\n" + json.dumps(res) + "\n")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
