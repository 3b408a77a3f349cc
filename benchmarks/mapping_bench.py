"""Benchmark: MindSpore-vs-PyTorch statistics compare with -am (and -cm) against the same compare without mapping.

    .venv/bin/python benchmarks/mapping_bench.py [--rows 100000] [--repeat 3] [--work-dir bench_work/mapping]

Generates a MindSpore statistics dump (Cell / Mint / MintFunctional / Functional / Tensor / Primitive names,
MindSpore dtypes) of a stack of transformer-like blocks with at least ``--rows`` rows, and the PyTorch dump of
the same network (Module / Torch / Functional / Tensor names), then times ``msprobe compare`` in a fresh
process: plain, with ``-am``, and with ``-am -cm``.  Goal (issue 5): mapping within 2x of the plain compare.
Prints a markdown table; best of ``--repeat`` runs.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
import harness  # noqa: E402

# one block: (MindSpore entry prefix, PyTorch entry prefix, inputs, outputs) -- API calls inside cell "blocks.{i}"
BLOCK_APIS = [
    ("Functional.dense", "Functional.linear", 3, 1),
    ("Mint.matmul", "Torch.matmul", 2, 1),
    ("MintFunctional.softmax", "Functional.softmax", 1, 1),
    ("Functional.layer_norm", "Functional.layer_norm", 3, 1),
    ("Tensor.__add__", "Tensor.__add__", 2, 1),
    ("Tensor.__mul__", "Tensor.__mul__", 2, 1),
    ("Functional.gelu", "Functional.gelu", 1, 1),
    ("Tensor.swapaxes", "Tensor.transpose", 1, 1),
    ("Functional.concat", "Torch.cat", 2, 1),
    ("Primitive.cast.Cast", None, 1, 1),
]
CELLS = [("attn", "Attention", "Attention"), ("mlp.fc", "Dense", "Linear"), ("norm", "LayerNorm", "LayerNorm")]


def _stat(rng, dtype):
    v = rng.standard_normal(4)
    return {"type": "mindspore.Tensor" if not dtype.startswith("torch") else "torch.Tensor", "dtype": dtype,
            "shape": [8, 64], "Max": float(abs(v[0]) + 1), "Min": float(-abs(v[1]) - 1), "Mean": float(v[2] * 0.1),
            "Norm": float(abs(v[3]) + 10)}


def generate(work: Path, rows: int) -> tuple:
    rng = np.random.default_rng(0)
    ms, pt = {}, {}
    counters_ms, counters_pt = {}, {}
    per_block = sum(i + o for _, _, i, o in BLOCK_APIS) * 2 + sum(2 for _ in CELLS) * 2
    blocks = rows // per_block + 1
    for b in range(blocks):
        for direction in ("forward", "backward"):
            for ms_api, pt_api, n_in, n_out in BLOCK_APIS:
                k = counters_ms.get(ms_api, 0)
                counters_ms[ms_api] = k + 1
                ms_key = f"{ms_api}.{k}.{direction}" if direction == "forward" else f"{ms_api}.{k}.backward"
                body_ms = {"input_args" if direction == "forward" else "input": [_stat(rng, "Float32") for _ in range(n_in)],
                           "output": [_stat(rng, "Float32") for _ in range(n_out)]}
                ms[ms_key] = body_ms
                if pt_api is not None:
                    kp = counters_pt.get(pt_api, 0)
                    counters_pt[pt_api] = kp + 1
                    pt_key = f"{pt_api}.{kp}.{direction}"
                    pt[pt_key] = {k2: [dict(x, type="torch.Tensor", dtype="torch.float32") for x in v]
                                  for k2, v in body_ms.items()}
            for path, ms_cls, pt_cls in CELLS:
                ms_key = f"Cell.blocks.{b}.{path}.{ms_cls}.{direction}.0"
                pt_key = f"Module.blocks.{b}.{path}.{pt_cls}.{direction}.0"
                body = {"input_args" if direction == "forward" else "input": [_stat(rng, "Float32")],
                        "output": [_stat(rng, "Float32")]}
                ms[ms_key] = body
                pt[pt_key] = {k2: [dict(x, type="torch.Tensor", dtype="torch.float32") for x in v] for k2, v in body.items()}
    t = work / "ms" / "dump.json"
    g = work / "pt" / "dump.json"
    for path, data, fw in ((t, ms, "mindspore"), (g, pt, "pytorch")):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"task": "statistics", "level": "mix", "framework": fw, "dump_data_dir": None,
                                    "data": data}))
    cells = work / "cells.yaml"
    cells.write_text("Dense: Linear\n")
    return t, g, cells


def time_compare(t: Path, g: Path, out: Path, flags) -> tuple:
    cmd = [str(ROOT / ".venv" / "bin" / "msprobe"), "compare", "-tp", str(t), "-gp", str(g), "-o", str(out),
           "-q", "-c", *flags]
    r = harness.run(cmd)
    if not r.ok:
        sys.exit(f"compare failed: {r.stderr[-2000:]}")
    line = next(l for l in r.stdout.splitlines() if l.startswith("compare"))
    return r.secs, line


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=100_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--work-dir", default=str(ROOT / "bench_work" / "mapping"))
    args = ap.parse_args()
    work = Path(args.work_dir)
    t, g, cells = generate(work, args.rows)
    cases = [("plain", []), ("-am", ["-am"]), ("-am -cm", ["-am", "-cm", str(cells)])]
    results = {}
    for i in range(args.repeat):
        for label, flags in cases:
            out = work / f"out_{label.replace(' ', '')}_{i}"
            secs, line = time_compare(t, g, out, flags)
            best = results.get(label)
            if best is None or secs < best[0]:
                results[label] = (secs, line)
    base = results["plain"][0]
    print(f"MindSpore target {t} vs PyTorch golden {g}; best of {args.repeat}")
    print("| case | seconds | vs plain | summary |")
    print("|---|---:|---:|---|")
    for label, _ in cases:
        secs, line = results[label]
        print(f"| {label} | {secs:.2f} | {secs / base:.2f}x | {line} |")


if __name__ == "__main__":
    main()
