"""Generate the benchmark inputs (reference dump format) into a work dir.

    python benchmarks/gen_inputs.py [WORKDIR]      (default bench_work/)

* stat/{target,golden}/step0/rank0: a statistics-mode pair of a deep transformer-like model at level mix,
  at least 40,000 tensor rows per side, with stack.json and construct.json;
* tensor/{target,golden}/step0/rank0: a tensor-mode pair with at least 2,000 .pt files and 1 GB per side
  (written with torch.save; needs torch);
* tiny/{target,golden}/step0/rank: the 73-row mlp_bf16_stat_mix fixture pair (start-up cost).

Existing inputs with the same parameters are reused (a stamp file records them).
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
FIXTURE = ROOT.parent / "shared" / "fixtures" / "reference" / "mlp_bf16_stat_mix"
STAT_LAYERS = 580  # -> about 41,000 rows per side
TENSOR_FILES = 2100
TENSOR_ELEMS = 128 * 1024  # float32 elements per file (512 KiB) -> 1.07 GB per side
VERSION = f"v2 layers={STAT_LAYERS} files={TENSOR_FILES} elems={TENSOR_ELEMS}"


def _stats(a: np.ndarray) -> dict:
    a64 = a.astype(np.float64)
    return {"Max": float(a64.max()), "Min": float(a64.min()), "Mean": float(a64.mean()), "Norm": float(np.linalg.norm(a64))}


class _Model:
    """Yields (api name, entry body builder) in call order for a transformer-like model."""

    def __init__(self, rng: np.random.Generator, noise: float, layers: int):
        self.rng = rng
        self.noise = noise
        self.layers = layers
        self.counts: dict = {}
        self.data: dict = {}
        self.stack: dict = {}

    def name(self, api: str, direction: str) -> str:
        k = (api, direction)
        n = self.counts.get(k, 0)
        self.counts[k] = n + 1
        return f"{api}.{n}.{direction}"

    def tensor(self, shape, seed, dtype="torch.float32", rg=True, scale=1.0):
        base = np.random.default_rng(seed).standard_normal(64).astype(np.float32) * scale
        vals = base * (1 + self.noise * self.rng.standard_normal(64).astype(np.float32))
        d = {"type": "torch.Tensor", "dtype": dtype, "shape": list(shape)}
        d.update(_stats(vals))
        d["requires_grad"] = rg
        return d

    def api(self, api, ins, outs, kwargs=None, direction="forward", stack=None):
        key = self.name(api, direction)
        if direction == "forward":
            body = {"input_args": ins, "input_kwargs": kwargs or {}, "output": outs}
        else:
            body = {"input": ins, "output": outs}
        self.data[key] = body
        if stack is not None:
            self.stack[key] = stack
        return key

    def build(self):
        s = 0
        hidden = [8, 128, 1024]
        for layer in range(self.layers):
            for direction in ("forward", "backward"):
                for op, scale in (("Functional.linear", 1.0), ("Functional.gelu", 0.5), ("Tensor.__add__", 1.0),
                                  ("Functional.layer_norm", 1.0), ("Torch.matmul", 2.0), ("Functional.softmax", 0.1),
                                  ("Functional.dropout", 1.0)):
                    s += 1
                    ins = [self.tensor(hidden, s, scale=scale), self.tensor([1024, 1024], s + 7, scale=0.02)]
                    kw = {}
                    if direction == "forward":
                        ins.append({"type": "float", "value": 0.1})
                        ins.append({"type": "bool", "value": False})
                        kw = {"dim": {"type": "int", "value": -1}}
                    out_dtype = "torch.bfloat16" if self.noise and op != "Functional.softmax" else "torch.float32"
                    outs = [self.tensor(hidden, s + 13, dtype=out_dtype, scale=scale * (40 if (layer == 97 and op == "Torch.matmul") else 1))]
                    if layer == 150 and op == "Functional.gelu" and self.noise:
                        outs[0]["Max"] = float("inf")
                    stack = [f"File /work/train/model.py, line {100 + layer}, in forward, \n x = {op}(x)",
                             "File /work/train/train.py, line 42, in step, \n loss = model(batch)"]
                    self.api(op, ins, outs, kw, direction, stack)
                mod = f"Module.layers.{layer}.mlp.Linear"
                key = f"{mod}.{direction}.0"
                s += 1
                if direction == "forward":
                    self.data[key] = {"input_args": [self.tensor(hidden, s)], "input_kwargs": {},
                                      "output": [self.tensor(hidden, s + 1)],
                                      "parameters": {"weight": self.tensor([1024, 1024], s + 2), "bias": self.tensor([1024], s + 3)}}
                else:
                    self.data[key] = {"input": [self.tensor(hidden, s)], "output": [self.tensor(hidden, s + 1)]}
                    self.data[f"{mod}.parameters_grad"] = {"weight": [self.tensor([1024, 1024], s + 4, rg=False)],
                                                           "bias": [self.tensor([1024], s + 5, rg=False)]}
        return self.data


def _write_dump(d: Path, data: dict, task: str, stack: dict) -> None:
    d.mkdir(parents=True, exist_ok=True)
    dump = {"task": task, "level": "mix", "framework": "pytorch", "dump_data_dir": str(d / "dump_tensor_data") if task == "tensor" else None, "data": data}
    text = json.dumps(dump, indent=1)
    (d / "dump.json").write_text(text.replace("Infinity", "Infinity"))
    groups: dict = {}
    for api, lines in stack.items():
        groups.setdefault(json.dumps(lines), []).append(api)
    (d / "stack.json").write_text(json.dumps({str(i): [apis, json.loads(k)] for i, (k, apis) in enumerate(groups.items())}, indent=1))
    (d / "construct.json").write_text(json.dumps({k: None for k in data}))


def gen_stat(work: Path) -> None:
    for side, noise in (("golden", 0.0), ("target", 2e-3)):
        m = _Model(np.random.default_rng(1 if side == "target" else 2), noise, STAT_LAYERS)
        data = m.build()
        _write_dump(work / "stat" / side / "step0" / "rank0", data, "statistics", m.stack)


def gen_tensor(work: Path) -> None:
    import torch

    rng = np.random.default_rng(0)
    pool = rng.standard_normal(TENSOR_ELEMS * 4).astype(np.float32)
    for side in ("golden", "target"):
        root = work / "tensor" / side / "step0" / "rank0"
        tdir = root / "dump_tensor_data"
        tdir.mkdir(parents=True, exist_ok=True)
        data = {}
        stack = {}
        for i in range(TENSOR_FILES // 3):
            api = f"Functional.linear.{i}.forward"
            entry = {"input_args": [], "input_kwargs": {}, "output": []}
            for sect, j in (("input_args", 0), ("input_args", 1), ("output", 0)):
                k = (i * 3 + j + (sect == "output") * 2) % 3
                arr = pool[k * TENSOR_ELEMS:(k + 1) * TENSOR_ELEMS].copy()
                if side == "target":
                    arr = arr * np.float32(1.0005)
                dtype = torch.float32
                if i % 10 == 0 and sect == "output":
                    dtype = torch.bfloat16 if side == "target" else torch.float32
                t = torch.from_numpy(arr.reshape(128, -1)).to(dtype)
                suffix = "input" if sect == "input_args" else "output"
                fname = f"{api}.{suffix}.{j}.pt"
                torch.save(t, tdir / fname)
                leaf = {"type": "torch.Tensor", "dtype": str(t.dtype), "shape": list(t.shape)}
                leaf.update(_stats(arr))
                leaf["requires_grad"] = False
                leaf["data_name"] = fname
                entry[sect].append(leaf)
            data[api] = entry
            stack[api] = [f"File /work/train/model.py, line {i}, in forward, \n y = F.linear(x, w)"]
        _write_dump(root, data, "tensor", stack)


def gen_tiny(work: Path) -> None:
    for side in ("target", "golden"):
        src = FIXTURE / side / "step0" / "rank"
        dst = work / "tiny" / side / "step0" / "rank"
        dst.mkdir(parents=True, exist_ok=True)
        for f in ("dump.json", "stack.json", "construct.json"):
            shutil.copy(src / f, dst / f)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    work = Path(argv[0] if argv else ROOT / "bench_work").resolve()
    stamp = work / ".inputs"
    if stamp.exists() and stamp.read_text() == VERSION:
        print(f"inputs in {work} are up to date")
        return 0
    if work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True)
    gen_tiny(work)
    gen_stat(work)
    gen_tensor(work)
    stamp.write_text(VERSION)
    print(f"inputs written to {work}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
