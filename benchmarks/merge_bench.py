"""Benchmark of ``msprobe merge_result``: 64 rank reports of 20,000 rows each (statistics mode).

The reports are written with msprobe's own xlsx writer and hold the columns ``msprobe compare`` writes
for a statistics compare with stack.json (``--no-match-column`` by default, so the reference's
merge_result, which demands its exact header, can read the same files; ``--match-column`` adds it).
Rows follow a Llama-like layer pattern: Functional / Torch / Tensor APIs forward and backward, plus
Distributed.all_reduce and all_gather_into_tensor with their ``op`` / ``group`` arguments (N/A metrics,
the argument in NPU max / Bench max).  The first row of every API carries a stack of ten frames.

    .venv/bin/python benchmarks/merge_bench.py [--ranks 64] [--rows 20000] [--repeat 2] [--reference]

Reports are generated once into --dir (default <system temp dir>/msprobe_merge_bench/ranks{R}_rows{N}) and reused.
Two configs are timed: ``typical`` (two communication APIs and Functional.linear, every statistics
index: 9 sheets) and ``all`` (every row of every report, 9 sheets).  With --reference the reference
8.3.3 (venv $MSPROBE_REF8, else $MSPROBE_REF_CACHE/venv833, cache default ~/.cache/msprobe-ref) is timed on
the same reports and config (--ref-timeout seconds at most).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from msprobe.core.io.xlsx import write_xlsx  # noqa: E402

sys.path.insert(0, str(ROOT / "benchmarks"))
import harness  # noqa: E402
from refvenv import ref_venv_or_missing  # noqa: E402

HEADER = ["NPU Name", "Bench Name", "NPU Dtype", "Bench Dtype", "NPU Tensor Shape", "Bench Tensor Shape",
          "NPU Requires_grad", "Bench Requires_grad", "Max diff", "Min diff", "Mean diff", "L2norm diff",
          "MaxRelativeErr", "MinRelativeErr", "MeanRelativeErr", "NormRelativeErr", "NPU max", "NPU min",
          "NPU mean", "NPU l2norm", "Bench max", "Bench min", "Bench mean", "Bench l2norm",
          "Requires_grad Consistent", "Result", "Err_message", "NPU_Stack_Info"]

# (api, inputs, outputs) of one decoder layer, forward order
LAYER = [
    ("Functional.rms_norm", 2, 1), ("Functional.linear", 3, 1), ("Functional.linear", 3, 1),
    ("Functional.linear", 3, 1), ("Torch.matmul", 2, 1), ("Functional.softmax", 1, 1), ("Torch.matmul", 2, 1),
    ("Functional.linear", 3, 1), ("Distributed.all_reduce", 1, 1), ("Tensor.add", 2, 1),
    ("Functional.rms_norm", 2, 1), ("Functional.linear", 3, 1), ("Functional.silu", 1, 1),
    ("Tensor.__mul__", 2, 1), ("Functional.linear", 3, 1), ("Distributed.all_gather_into_tensor", 2, 1),
    ("Tensor.add", 2, 1),
]
COMM = ("Distributed.all_reduce", "Distributed.all_gather_into_tensor")
STACK = str([f"File /usr/local/lib/python3.11/site-packages/model/layer{i}.py, line {100 + i}, in forward, \n"
             f" return self.block{i}(hidden_states, attention_mask=mask)" for i in range(10)])

CONFIGS = {
    "typical": "api:\n- Distributed.all_reduce\n- Distributed.all_gather_into_tensor\n- Functional.linear\n",
    "all": "api:\n- Functional\n- Torch\n- Tensor\n- Distributed\n",
}


def layout(nrows: int):
    """Row names and kinds ('t' tensor, 'op' / 'group' communication argument) for one rank."""
    names, kinds, first = [], [], []
    counters: dict = {}
    while True:
        for direction in ("forward", "backward"):
            for api, nin, nout in (LAYER if direction == "forward" else LAYER[::-1]):
                key = (api, direction)
                n = counters.get(key, 0)
                counters[key] = n + 1
                base = f"{api}.{n}.{direction}"
                rows = [(f"{base}.input.{i}", "t") for i in range(nin)]
                if api in COMM and direction == "forward":
                    rows += [(f"{base}.input.op", "op"), (f"{base}.input.group", "group")]
                rows += [(f"{base}.output.{i}", "t") for i in range(nout)]
                if direction == "backward":  # gradients: outputs of backward are input grads
                    rows = [(r.replace(".input.", ".output.") if ".input." in r else r.replace(".output.", ".input."), k)
                            for r, k in rows if k == "t"]
                for j, (r, k) in enumerate(rows):
                    names.append(r)
                    kinds.append(k)
                    first.append(j == 0)
                    if len(names) == nrows:
                        return names, np.array(kinds), np.array(first)


def pct(x: np.ndarray) -> list:
    return [f"{v}%" for v in (np.abs(x) * 100).tolist()]


def make_rank(path: str, rank: int, nrows: int, match_column: bool) -> None:
    names, kinds, first = layout(nrows)
    rng = np.random.default_rng(rank)
    t = kinds == "t"
    n = nrows
    bench = rng.standard_normal((n, 4)) * np.array([3.0, 3.0, 0.01, 40.0])
    bench[:, 1] = -np.abs(bench[:, 1])
    bench[:, 0] = np.abs(bench[:, 0])
    npu = bench * (1 + rng.standard_normal((n, 4)) * 4e-3)
    diff = npu - bench
    rel = diff / np.where(bench == 0, 1, bench)
    group = f"tp-{rank // 8 * 8}-{rank // 8 * 8 + 1}-{rank // 8 * 8 + 2}-{rank // 8 * 8 + 3}"

    def obj(a):
        out = np.empty(n, dtype=object)
        out[:] = a
        return out

    cols = [names, names]
    dt = np.where(t, "torch.bfloat16", "<class 'str'>").tolist()
    cols += [dt, np.where(t, "torch.float32", "<class 'str'>").tolist()]
    shape = np.where(t, "[4096, 8192]", "[]").tolist()
    cols += [shape, shape]
    rg = np.where(t, "False", "N/A").tolist()
    cols += [rg, rg]
    for j in range(4):
        c = obj(diff[:, j])
        c[~t] = "N/A"
        cols.append(c)
    for j in range(4):
        c = obj(pct(rel[:, j]))
        c[~t] = "N/A"
        cols.append(c)
    arg = np.where(kinds == "op", "RedOpType.SUM", group)
    for side in (npu, bench):
        for j in range(4):
            c = obj(side[:, j])
            c[~t] = arg[~t]
            cols.append(c)
    cols.append(["True"] * n)
    cols.append([""] * n)
    cols.append([""] * n)
    cols.append(np.where(first, STACK, "N/A").tolist())
    header = list(HEADER)
    if match_column:
        header.append("Match")
        cols.append(["exact"] * n)
    write_xlsx(path, header, cols)


def generate(root: Path, ranks: int, rows: int, match_column: bool) -> Path:
    d = root / f"ranks{ranks}_rows{rows}{'_match' if match_column else ''}"
    done = d / ".complete"
    if done.exists():
        return d
    if d.exists():
        shutil.rmtree(d)
    d.mkdir(parents=True)
    t0 = time.perf_counter()
    for r in range(ranks):
        make_rank(str(d / f"compare_result_rank{r}_20260101120000.xlsx"), r, rows, match_column)
    done.write_text("ok\n")
    print(f"generated {ranks} reports of {rows} rows in {time.perf_counter() - t0:.1f} s: {d}", file=sys.stderr)
    return d


def timed(cmd, timeout=None):
    """(wall seconds, last output line) of a successful run, else (None, why) (benchmarks/harness.py)."""
    r = harness.run(cmd, timeout=timeout)
    if r.rc == "timeout":
        return None, "timeout"
    if not r.ok:
        return None, harness.last_line(r.stderr or r.stdout)
    return r.secs, harness.last_line(r.stdout)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", type=int, default=64)
    ap.add_argument("--rows", type=int, default=20000)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--dir", default=os.path.join(tempfile.gettempdir(), "msprobe_merge_bench"))
    ap.add_argument("--match-column", action="store_true", help="add our compare's Match column to the reports")
    ap.add_argument("--reference", action="store_true",
                    help="also time the reference 8.3.3 (venv $MSPROBE_REF8, else $MSPROBE_REF_CACHE/venv833; "
                         "cache default ~/.cache/msprobe-ref)")
    ap.add_argument("--ref-timeout", type=int, default=900)
    ap.add_argument("--configs", default="typical,all")
    args = ap.parse_args()

    root = Path(args.dir)
    inputs = generate(root, args.ranks, args.rows, args.match_column)
    size = sum(p.stat().st_size for p in inputs.glob("*.xlsx"))
    print(f"inputs: {inputs} ({args.ranks} x {args.rows} rows, {size / 1e6:.0f} MB of xlsx); cpus: {os.cpu_count()}")
    ours = [sys.executable, "-m", "msprobe", "merge_result", "-q"]
    for name in args.configs.split(","):
        cfg = root / f"config_{name}.yaml"
        cfg.write_text(CONFIGS[name])
        times = []
        for i in range(args.repeat):
            out = root / f"out_{name}"
            shutil.rmtree(out, ignore_errors=True)
            dt, msg = timed(ours + ["-i", str(inputs), "-o", str(out), "-config", str(cfg)])
            if dt is None:
                print(f"msprobe merge_result [{name}] failed: {msg}")
                return 1
            times.append(dt)
        print(f"msprobe merge_result [{name}]: best {min(times):.2f} s of {args.repeat} ({', '.join(f'{t:.2f}' for t in times)}); {msg[0] if msg else ''}")
        if args.reference:
            ref = str(ref_venv_or_missing("venv833", "MSPROBE_REF8") / "bin" / "msprobe")
            out = root / f"out_ref_{name}"
            shutil.rmtree(out, ignore_errors=True)
            dt, msg = timed([ref, "-f", "pytorch", "merge_result", "-i", str(inputs), "-o", str(out),
                             "-config", str(cfg)], timeout=args.ref_timeout)
            print(f"reference 8.3.3 merge_result [{name}]: "
                  + (f"{dt:.2f} s" if dt is not None else f"did not finish ({msg}, limit {args.ref_timeout} s)"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
