"""MindSpore target against a PyTorch golden: faults planted in a MindSpore model (tests/mindspore/xf_models.py),
compared with its PyTorch twin (here) through the cross-framework mappings.

The MindSpore run (``.venv-ms``) writes the initial weights to an ``.npz`` under the PyTorch names; the PyTorch twin
(the interpreter that has torch) loads them, takes the same input and does the same training step (forward, MSE
loss, backward, SGD).  Both dump with msprobe's PrecisionDebugger (``msprobe.mindspore`` / ``msprobe.pytorch``).
The golden run never has a fault, so one golden dump per (task, level) serves every case.

    python tests/fault_injection/xf.py OUT [--only CASE ...]        # writes OUT/<case>/{target,golden}/step0/rank

Run as a script it is the PyTorch side too (``xf.py --torch SIDE_DIR --weights W.npz --task T --level L``).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a script
    _here = Path(__file__).resolve()
    sys.path.insert(0, str(_here.parents[1]))
    sys.path.insert(0, str(_here.parents[2]))
    __package__ = "fault_injection"

from fault_injection.cases import Case  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
MS_PY = REPO / ".venv-ms" / "bin" / "python"
MS_SCRIPT = REPO / "tests" / "mindspore" / "xf_models.py"
CELLS_YAML = Path(__file__).resolve().with_name("xf_cells.yaml")
#: the compare flags of every xf case: the built-in api table, Cells renamed to Modules (Dense -> Linear, the
#: custom-bprop GELU -> GELU)
XF_ARGS = ("-am", "-cm", str(CELLS_YAML))

VOCAB, D, HEADS, T, B, HIDDEN, CLASSES = 32, 16, 2, 8, 2, 32, 3


# ------------------------------------------------------------------------------------------ the PyTorch twin
def torch_twin():
    import torch
    import torch.nn.functional as F
    from torch import nn

    class Attention(nn.Module):
        def __init__(self):
            super().__init__()
            self.q, self.k, self.v, self.o = (nn.Linear(D, D) for _ in range(4))
            self.scale = 1.0 / math.sqrt(D // HEADS)

        def heads(self, x):
            return torch.transpose(torch.reshape(x, (B, T, HEADS, D // HEADS)), 1, 2)

        def forward(self, x):
            q, k, v = self.heads(self.q(x)), self.heads(self.k(x)), self.heads(self.v(x))
            scores = torch.matmul(q, torch.transpose(k, -2, -1)) * self.scale
            probs = F.softmax(scores, dim=-1)
            return self.o(torch.reshape(torch.transpose(torch.matmul(probs, v), 1, 2), (B, T, D)))

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1 = nn.LayerNorm(D)
            self.attn = Attention()
            self.ln2 = nn.LayerNorm(D)
            self.fc1 = nn.Linear(D, HIDDEN)
            self.act = nn.GELU()
            self.fc2 = nn.Linear(HIDDEN, D)

        def forward(self, x):
            x = x + self.attn(self.ln1(x))
            return x + self.fc2(self.act(self.fc1(self.ln2(x))))

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(VOCAB, D)
            self.blocks = nn.ModuleList([Block() for _ in range(2)])
            self.conv = nn.Conv2d(1, 4, 3, padding=1, bias=False)
            self.bn = nn.BatchNorm2d(4)
            self.relu = nn.ReLU()
            self.flatten = nn.Flatten()
            self.head = nn.Linear(4 * T * D, CLASSES)

        def forward(self, ids):
            x = self.embed(ids)
            for blk in self.blocks:
                x = blk(x)
            x = torch.reshape(x, (B, 1, T, D))
            return self.head(self.flatten(self.relu(self.bn(self.conv(x)))))

    return Net(), F


def inputs_np():
    """The MindSpore side's input (xf_models.inputs), without importing MindSpore."""
    import numpy as np
    rng = np.random.RandomState(0)
    ids = rng.randint(0, VOCAB, size=(B, T)).astype(np.int32)
    y = rng.randn(B, CLASSES).astype(np.float32)
    return ids, y


def dump_torch(side_dir: str, weights: str, task: str, level: str) -> float:
    import numpy as np
    import torch

    from msprobe.pytorch import PrecisionDebugger

    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    net, F = torch_twin()
    w = np.load(weights)
    state = {k: torch.from_numpy(w[k].copy()) for k in net.state_dict() if k in w.files}
    missing = set(net.state_dict()) - set(state) - {"bn.num_batches_tracked"}
    assert not missing, f"weights missing for {sorted(missing)}"
    net.load_state_dict(state, strict=False)
    net.train()
    os.makedirs(side_dir, exist_ok=True)
    cfg = {"task": "tensor" if task == "tensor" else "statistics", "dump_path": side_dir, "rank": [], "step": [],
           "level": level, "async_dump": False}
    if task == "md5":
        cfg["statistics"] = {"summary_mode": "md5"}
    cfg_path = os.path.join(side_dir, "config.json")
    with open(cfg_path, "w") as fh:
        json.dump(cfg, fh)
    PrecisionDebugger._reset_for_tests()
    dbg = PrecisionDebugger(config_path=cfg_path)
    opt = torch.optim.SGD(net.parameters(), lr=0.01)
    ids, y = inputs_np()
    dbg.start(net)
    loss = F.mse_loss(net(torch.from_numpy(ids).long()), torch.from_numpy(y))
    loss.backward()
    opt.step()
    dbg.stop()
    PrecisionDebugger._reset_for_tests()
    return float(loss)


# ------------------------------------------------------------------------------------------ the cases
def _one(*names):
    return {"rank": list(names)}


def xf(name, fault, what, expected, task="statistics", level="mix", dtype="fp32", args=XF_ARGS):
    return Case(name, "xf", fault, task, level, what, expected, target_dtype=dtype, compare_args=args)


B0, B1 = "Cell.blocks.0", "Cell.blocks.1"
XF_CASES = [
    xf("xf_ln_eps_stat", {"ln_eps": {"blocks.0.ln2": 0.1}}, "block 0 ln2 LayerNorm epsilon 0.1 instead of 1e-5",
       _one(f"{B0}.ln2.LayerNorm.forward.0", "Primitive.layer_norm.LayerNorm.1.forward")),
    xf("xf_ln_eps_tensor", {"ln_eps": {"blocks.0.ln2": 0.1}}, "block 0 ln2 LayerNorm epsilon 0.1 instead of 1e-5",
       _one(f"{B0}.ln2.LayerNorm.forward.0", "Primitive.layer_norm.LayerNorm.1.forward"), task="tensor"),
    xf("xf_attn_scale_stat", {"attn_scale": {"1": 1.5}}, "block 1 attention scores x1.5 before softmax",
       _one("Tensor.__mul__.1.forward")),
    xf("xf_attn_scale_md5", {"attn_scale": {"1": 1.5}}, "block 1 attention scores x1.5 before softmax",
       _one("Tensor.__mul__.1.forward"), task="md5"),
    xf("xf_gelu_approx_stat", {"gelu_approx": [0]}, "block 0 GELU approximate=True (tanh) instead of erf",
       _one(f"{B0}.act.GELU.forward.0", "Functional.gelu.0.forward")),
    xf("xf_dense_scale_stat", {"dense_scale": {"blocks.1.fc1": 1.05}}, "block 1 fc1 Dense output x1.05",
       _one(f"{B1}.fc1.ScaledDense.forward.0", "Tensor.__mul__.2.forward")),
    xf("xf_grad_hook_stat", {"grad_scale": {"blocks.1.act": 1.5}},
       "block 1 GELU: a backward hook multiplies its input gradient by 1.5",
       _one(f"{B1}.act.GELU.backward.0")),
    xf("xf_bprop_scale_stat", {"bprop_scale": {"blocks.0.act": 1.5}},
       "block 0 GELU replaced by a Cell with a custom bprop whose gradient is x1.5",
       _one(f"{B0}.act.BpropGELU.backward.0")),
    xf("xf_bn_eps_stat", {"bn_eps": 0.5}, "head BatchNorm2d eps 0.5 instead of 1e-5",
       _one("Cell.bn.BatchNorm2d.forward.0", "Primitive.bn_train.BatchNorm.0.forward")),
    xf("xf_no_residual_stat", {"no_residual": {"1": "mlp"}}, "block 1: the MLP's residual add left out",
       _one(f"{B1}.Block.forward.0")),
    xf("xf_no_residual_b0_stat", {"no_residual": {"0": "attn"}},
       "block 0: the attention's residual add left out (every later Tensor.__add__ pairs one call off)",
       _one(f"{B0}.ln2.LayerNorm.forward.0", f"{B0}.Block.forward.0")),
    xf("xf_no_residual_b0_l1_stat", {"no_residual": {"0": "attn"}},
       "block 0: the attention's residual add left out (L1: no Cells, the first compared row after it is the GELU)",
       _one("Functional.gelu.0.forward"), level="L1", args=("-am",)),
    xf("xf_softmax_axis_stat", {"softmax_axis": {"0": -2}}, "block 0 attention softmax over axis -2 instead of -1",
       _one("Functional.softmax.0.forward")),
    xf("xf_transposed_stat", {"transposed": ["blocks.0.attn.v"]}, "block 0 attn.v Dense loaded its weight transposed",
       _one(f"{B0}.attn.v.Dense.forward.0", "Primitive.matmul.MatMul.2.forward")),
    # layer mapping instead of -am/-cm; L1 (no Cells: -am alone pairs the APIs); an fp16 target
    xf("xf_ln_eps_lm_stat", {"ln_eps": {"blocks.1.ln1": 0.1}}, "block 1 ln1 LayerNorm epsilon 0.1 (-lm)",
       _one(f"{B1}.ln1.LayerNorm.forward.0", "Primitive.layer_norm.LayerNorm.2.forward"), args=("-lm",)),
    xf("xf_softmax_axis_l1_stat", {"softmax_axis": {"1": -2}}, "block 1 attention softmax over axis -2 (L1)",
       _one("Functional.softmax.1.forward"), level="L1", args=("-am",)),
    xf("xf_gelu_approx_l1_stat", {"gelu_approx": [1]}, "block 1 GELU approximate=True (L1)",
       _one("Functional.gelu.1.forward"), level="L1", args=("-am",)),
    xf("xf_bn_eps_fp16_stat", {"bn_eps": 0.5}, "head BatchNorm2d eps 0.5; Dense/Conv2d in fp16 (to_float)",
       _one("Cell.bn.BatchNorm2d.forward.0", "Primitive.bn_train.BatchNorm.0.forward"), dtype="fp16"),
    # controls (MindSpore's CPU MatMul has no bf16 kernel: no bf16 control)
    xf("xf_ctl_stat", {}, "no fault", None),
    xf("xf_ctl_tensor", {}, "no fault", None, task="tensor"),
    xf("xf_ctl_md5", {}, "no fault (md5: every CRC differs across frameworks, the statistics decide)", None,
       task="md5"),
    xf("xf_ctl_l1_stat", {}, "no fault", None, level="L1", args=("-am",)),
    xf("xf_ctl_lm_stat", {}, "no fault (-lm)", None, args=("-lm",)),
    xf("xf_ctl_bprop_stat", {"bprop_scale": {"blocks.0.act": 1.0}},
       "no fault: block 0 GELU by a Cell with a right custom bprop (MindSpore runs only the pre-hook of such a "
       "Cell; msprobe closes its forward record when its construct returns)", None),
    xf("xf_ctl_fp16_stat", {}, "no fault; Dense/Conv2d in fp16 (to_float) against fp32", None, dtype="fp16"),
]


# ------------------------------------------------------------------------------------------ generation
def _env():
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")
           and not k.startswith("PYTEST_")}
    env["PYTHONPATH"] = str(REPO)
    env.setdefault("OMP_NUM_THREADS", "1")
    return env


def _run(cmd, timeout):
    res = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, env=_env(), timeout=timeout,
                         cwd=str(REPO))
    if res.returncode != 0:
        raise RuntimeError(f"{' '.join(map(str, cmd[:3]))} exited {res.returncode}:\n{res.stderr[-4000:]}")
    return res.stdout


def ms_side(side_dir: Path, case: Case, weights_in=None, weights_out=None, timeout=300):
    cmd = [MS_PY, MS_SCRIPT, side_dir, "--task", case.task, "--level", case.level, "--fault",
           json.dumps(case.fault), "--dtype", case.target_dtype]
    cmd += ["--weights-in", weights_in] if weights_in else []
    cmd += ["--weights-out", weights_out] if weights_out else []
    return _run(cmd, timeout)


def generate(out: Path, only=None, workers: int = 2, torch_python: str = sys.executable) -> dict:
    """Dump every chosen case's pair into ``out``: the MindSpore target runs in .venv-ms, the PyTorch golden in
    ``torch_python``; goldens are written once per (task, level) and copied into each case."""
    from concurrent.futures import ThreadPoolExecutor

    out.mkdir(parents=True, exist_ok=True)
    chosen = [c for c in XF_CASES if not only or c.name in only]
    weights = out / "xf_weights.npz"
    done = set()
    if not weights.is_file():
        # the initial weights come from the MindSpore model's own seeded init: written by a chosen control's
        # run (no fault, fp32) when there is one, else by a run of its own
        first = next((c for c in chosen if not c.fault and c.target_dtype == "fp32"), None)
        if first is not None:
            tdir = out / first.name / "target"
            shutil.rmtree(tdir, ignore_errors=True)
            ms_side(tdir, first, weights_out=weights)
            done.add(first.name)
        else:
            ms_side(out / "_weights_run", Case("w", "xf", {}, "statistics", "L0", "", None), weights_out=weights)
            shutil.rmtree(out / "_weights_run", ignore_errors=True)
    goldens = {}
    jobs = []
    for task, level in sorted({(c.task, c.level) for c in chosen}):
        gdir = out / "_golden" / f"{task}_{level}"
        goldens[(task, level)] = gdir
        if not (gdir / "step0").is_dir():
            shutil.rmtree(gdir, ignore_errors=True)
            jobs.append([torch_python, Path(__file__).resolve(), "--torch", gdir, "--weights", weights,
                         "--task", task, "--level", level])
    for c in chosen:
        if c.name in done:
            continue
        tdir = out / c.name / "target"
        shutil.rmtree(tdir, ignore_errors=True)
        jobs.append(("ms", c, tdir))

    def one(job):
        if job[0] == "ms":
            _, c, tdir = job
            return ms_side(tdir, c, weights_in=weights)
        return _run(job, 300)

    with ThreadPoolExecutor(max_workers=max(1, workers)) as ex:
        list(ex.map(one, jobs))
    for c in chosen:
        gdst = out / c.name / "golden"
        shutil.rmtree(gdst, ignore_errors=True)
        shutil.copytree(goldens[(c.task, c.level)], gdst)
    manifest = {}
    if (out / "cases.json").is_file():
        manifest = json.loads((out / "cases.json").read_text())
    manifest.update({c.name: c.to_json() for c in chosen})
    (out / "cases.json").write_text(json.dumps(manifest, indent=2))
    return manifest


def mindspore_missing():
    """Why the MindSpore side cannot run here (None when .venv-ms has mindspore)."""
    if not MS_PY.exists():
        return f"{MS_PY.relative_to(REPO)} not found: run `make ms-venv`"
    return None


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", help="output folder (created); with --torch: the side's dump folder")
    ap.add_argument("--only", nargs="*", help="case names")
    ap.add_argument("-j", type=int, default=2, help="dumps run at the same time")
    ap.add_argument("--torch", action="store_true", help="dump the PyTorch twin only (an internal step)")
    ap.add_argument("--weights")
    ap.add_argument("--task", default="statistics")
    ap.add_argument("--level", default="mix")
    args = ap.parse_args(argv)
    if args.torch:
        print(json.dumps({"loss": dump_torch(args.out, args.weights, args.task, args.level)}))
        return 0
    generate(Path(args.out), args.only, args.j)
    return 0


if __name__ == "__main__":
    sys.exit(main())
