"""code_mapping benchmark: msprobe vs the reference (mindstudio-probe 8.3.3) on a generated IR + tensor dump.

    .venv/bin/python benchmarks/code_mapping_bench.py [--nodes 200000] [--files 20000] [--timeout 600]
                                                      [--workdir DIR (default: <tempdir>/cm_bench)] [--no-reference]

Generates a MindSpore kernel-graph IR in the layout of ms_output_trace_code_graph_0.ir (forward nodes with
a unique_id, backward "Gradients/..." nodes with a forward_unique_id, 3 type lines, a scope line, 4 to 8
code lines each; layers named layer0..layerN so that scopes such as .../MatMul-op1 and .../MatMul-op10
both exist) and one empty .npy per chosen node in dump/rank_0/Net/0/0.  Then times, each in a fresh
process with its own peak RSS (benchmarks/harness.py: GNU time's %M, else wait4):

* msprobe:    .venv/bin/msprobe -f mindspore code_mapping --ir IR --dump_data DUMP --output OUT
* reference:  $MSPROBE_REF_CACHE/venv833/bin/python tests/data/code_mapping/run_reference.py --ir IR --dump_data DUMP --output OUT
  (the reference's own code_mapping_main; the harness only stubs the mindspore import, which the
  reference needs for logging but not for this command)

and, when both finish, checks that the CSVs agree except for the rows the reference's substring matching
gets wrong (counted).  Results: benchmarks/code_mapping_results.md.
"""

from __future__ import annotations

import argparse
import csv
import os
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
import harness  # noqa: E402
from refvenv import ref_venv_or_missing  # noqa: E402
csv.field_size_limit(1 << 30)

OPS = ["MatMul", "BiasAdd", "ReLU", "Add", "Mul", "Softmax", "LayerNorm", "Cast"]


def _code(layer: int, op: str, depth: int) -> list:
    lines = [
        "In file /home/user/model/net.py:120~160, 4~30/    def construct(self, x):/",
        f"In file /home/user/model/net.py:{130 + layer % 20}, 12~40/        x = self.layers[{layer}](x)/",
        f"In file /home/user/model/block.py:{40 + depth}, 8~36/        y = self.{op.lower()}(x)/",
        f"In file /usr/local/lib/python3.11/site-packages/mindspore/ops/auto_generate/gen_ops_def.py:{2000 + depth}, 11~31/    return {op.lower()}_op(input)/",
    ]
    return lines[: 2 + depth % 3] + lines[2:]


def generate(workdir: Path, n_nodes: int, n_files: int, seed: int = 0) -> tuple:
    rng = random.Random(seed)
    ir_path = workdir / "graph.ir"
    dump_dir = workdir / "dump" / "rank_0" / "Net" / "0" / "0"
    if dump_dir.parent.parent.exists():
        shutil.rmtree(workdir / "dump")
    dump_dir.mkdir(parents=True)
    keys = []
    per_layer = 12
    n_fwd = n_nodes * 2 // 3
    with open(ir_path, "w", encoding="utf-8") as fh:
        w = fh.write
        w("# IR entry: @kernel_graph0\n# Total subgraphs: 1\n\n# Attrs:\nenable_zero_copy_in_graph: 1\n\n# Total params: 1\n# Params:\n")
        w("%para1_x: <Tensor[Float32], (2, 4)> : [2, 4]  :  <Float32xDefaultFormat[const vector]{2, 4}>  :  IsWeight: false\n\n")
        w("subgraph attr:\nenable_zero_copy_in_graph: 1\nsubgraph instance: kernel_graph0 : 0x55ba9f08bab0\n\n")
        w("subgraph @kernel_graph0() {\n")
        fwd_ids = []
        for i in range(n_nodes):
            if i < n_fwd:
                layer, k = divmod(i, per_layer)
                op = OPS[k % 9 % len(OPS)]  # k=1 and k=10: the same op, "...-op1" and "...-op10"
                scope = f"Default/network-Net/layers-CellList/{layer}-Block/{op}-op{k}"
                uid = str(10000 + i)
                fwd_ids.append((uid, op))
                attrs = f'cnode_primal_attrs: {{unique_id: "{uid}"}}'
                code = _code(layer, op, k)
            else:
                j = i - n_fwd
                uid, op = fwd_ids[rng.randrange(len(fwd_ids))]
                layer, k = divmod(j, per_layer)
                scope = f"Gradients/Default/network-Net/layers-CellList/{layer}-Block/Grad_{op}/{op}-op{k}"
                attrs = f'cnode_primal_attrs: {{forward_node_name: "{op}_{uid}", forward_unique_id: "{uid}"}}'
                code = ["Corresponding forward node candidate:"] + _code(layer, op, k) if j % 4 else []
            arg = f"%{i - 1}" if i else "%para1_x"
            w(f"  %{i}(CNode_{i + 100}) = PrimFunc_{op}({arg}, %para1_x) {{instance name: {op.lower()}}} "
              f"primitive_attrs: {{IsFeatureMapOutput: Bool(1), IsFeatureMapInputList: (0, 1)}} "
              f"cnode_attrs: {{checkpoint: Bool(1), is_dynamic_len: Bool(0)}} {attrs}\n")
            w("      : (<Tensor[Float32], (2, 8)>, <Tensor[Float32], (2, 8)>) -> (<Tensor[Float32], (2, 8)>)\n")
            w("      : (<Float32xDefaultFormat[const vector]{2, 8}>, <Float32xDefaultFormat[const vector]{2, 8}>) -> (<Float32xDefaultFormat[const vector]{2, 8}>)\n")
            w("      : (Tensor, Tensor) -> (Tensor)\n")
            w(f"      # Fullname with scope: ({scope})\n")
            for line in code:
                w(f"      # {line}\n")
            keys.append((op, scope.replace("/", "_")))
        w(f"  Return(%{n_nodes - 1})\n      : (<Tensor[Float32], (2, 8)>)\n      # Fullname with scope: (Default/Return-op0)\n}}\n")
    chosen = rng.sample(range(n_nodes), min(n_files, n_nodes))
    for n, i in enumerate(sorted(chosen)):
        op, key = keys[i]
        io = "output.0" if n % 2 else "input.0"
        (dump_dir / f"{op}.{key}.0.0.{1700000000000000 + n}.{io}.DefaultFormat.Float32.npy").touch()
    for name in ("head_weight", "head_bias"):
        (dump_dir / f"Parameter.{name}.0.0.1800000000000000.output.0.DefaultFormat.Float32.npy").touch()
    return ir_path, workdir / "dump", os.path.getsize(ir_path)


def timed(cmd: list, timeout: float) -> dict:
    r = harness.run(cmd, timeout=timeout)
    out = {"wall": r.secs, "rss_mb": r.rss_mb, "rc": r.rc}
    if r.rc != "timeout":
        out.update(cpu=r.cpu, err=r.stderr[-500:])
    return out


def _rows(out_dir: Path) -> dict:
    files = sorted(out_dir.glob("code_mapping_*.csv"))
    if not files:
        return {}
    with open(files[-1], newline="", encoding="utf-8") as fh:
        r = csv.reader(fh)
        next(r)
        return {row[0]: (row[1], row[2]) for row in r}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--nodes", type=int, default=200000)
    p.add_argument("--files", type=int, default=20000)
    p.add_argument("--timeout", type=float, default=600)
    p.add_argument("--workdir", default=os.path.join(tempfile.gettempdir(), "cm_bench"))
    p.add_argument("--ref-python", default=None,
                   help="the reference's interpreter (default: venv833 of benchmarks/refvenv.py, built on demand)")
    p.add_argument("--no-reference", action="store_true")
    a = p.parse_args()
    print(harness.machine_line())
    work = Path(a.workdir)
    work.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    ir, dump, size = generate(work, a.nodes, a.files)
    print(f"generated {a.nodes} nodes ({size / 1e6:.1f} MB IR) and {a.files + 2} dump files in {time.perf_counter() - t0:.1f} s")

    results = {}
    ours_out = work / "out_msprobe"
    shutil.rmtree(ours_out, ignore_errors=True)
    results["msprobe"] = timed([str(ROOT / ".venv" / "bin" / "msprobe"), "-f", "mindspore", "code_mapping", "--ir", str(ir),
                                "--dump_data", str(dump), "--output", str(ours_out)], a.timeout)
    if not a.no_reference and a.ref_python is None:
        a.ref_python = str(ref_venv_or_missing("venv833") / "bin" / "python")
    if not a.no_reference and Path(a.ref_python).exists():
        ref_out = work / "out_reference"
        shutil.rmtree(ref_out, ignore_errors=True)
        results["reference 8.3.3"] = timed([a.ref_python, str(ROOT / "tests" / "data" / "code_mapping" / "run_reference.py"),
                                            "--ir", str(ir), "--dump_data", str(dump), "--output", str(ref_out)], a.timeout)
    for name, r in results.items():
        extra = f", cpu {r['cpu']:.1f} s" if "cpu" in r else ""
        print(f"{name:16s} rc={r['rc']} wall {r['wall']:.1f} s{extra}, peak RSS {r['rss_mb']:.0f} MB")
        if r["rc"] not in (0, "timeout"):
            print("   ", r.get("err", "").strip().splitlines()[-1:] if r.get("err") else "")

    ours = _rows(ours_out)
    print(f"msprobe rows: {len(ours)}, with a scope: {sum(1 for v in ours.values() if v[1])}")
    if "reference 8.3.3" in results and results["reference 8.3.3"]["rc"] == 0:
        ref = _rows(work / "out_reference")
        same = bug = linked = other = 0
        for k, v in ref.items():
            mine = ours.get(k)
            if mine == v:
                same += 1
            elif "\n" in v[1]:
                bug += 1  # several substring matches (op1 inside op10 ...): ours has the exact one
            elif not v[0] and mine and mine[1] == v[1] and mine[0].startswith("Corresponding forward node candidate:"):
                linked += 1  # a backward node without code of its own: ours has its forward node's
            else:
                other += 1
        print(f"reference rows: {len(ref)}: identical {same}; substring-bug rows {bug}; "
              f"backward rows given their forward node's code by msprobe {linked}; other differences {other}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
