"""Write the dump pair of every fault-injection case (and control pair).

    python tests/fault_injection/generate.py OUT [--only NAME ...] [--family base|hf|tv|all]

For each case: ``OUT/<case>/target/step0/rank/`` (faulty run) and ``OUT/<case>/golden/step0/rank/`` (clean
run); 2-rank cases write ``rank0`` and ``rank1``.  ``OUT/cases.json`` lists the cases with their expected
culprits.  Same seed, weights and inputs on both sides; one training step (forward, backward and, for the
2-rank MLP, the gradient all_reduce); one torch thread and deterministic algorithms, so a rerun writes the
same numbers.  ``--family``: ``base`` (default) the models written here (``CASES``), ``hf`` the tiny
``transformers`` models (``HF_CASES``, see :mod:`.hf`), ``tv`` the small torchvision models (``TV_CASES``, see
:mod:`.tv`), ``all`` every one.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make ``fault_injection`` and ``msprobe`` importable
    _here = Path(__file__).resolve()
    sys.path.insert(0, str(_here.parents[1]))
    sys.path.insert(0, str(_here.parents[2]))
    __package__ = "fault_injection"

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from fault_injection import faultops  # noqa: E402
from fault_injection.cases import CASES, HF_CASES, Case  # noqa: E402
from fault_injection.models import SmallCNN, TinyTransformer, add_param_grad_faults  # noqa: E402

SEED = 1234
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


def write_config(path: Path, dump_path: Path, task: str, level: str) -> Path:
    cfg = {"task": "tensor" if task == "tensor" else "statistics", "dump_path": str(dump_path), "rank": [],
           "step": [], "level": level, "async_dump": False}
    if task == "md5":
        cfg["statistics"] = {"summary_mode": "md5"}
    path.write_text(json.dumps(cfg, indent=2))
    return path


def precision_ctx(dtype: str):
    if dtype == "fp32":
        return contextlib.nullcontext()
    return torch.autocast("cpu", dtype=DTYPES[dtype])


def build(model: str, fault: dict):
    torch.manual_seed(SEED)
    if model == "tf":
        net = TinyTransformer(fault)
        x = torch.randn(2, 8, 32, generator=torch.Generator().manual_seed(7))
        y = torch.randn(2, 8, 8, generator=torch.Generator().manual_seed(8))
    elif model == "cnn":
        net = SmallCNN(fault)
        x = torch.randn(4, 3, 8, 8, generator=torch.Generator().manual_seed(7))
        y = torch.randn(4, 10, generator=torch.Generator().manual_seed(8))
    else:
        raise ValueError(model)
    add_param_grad_faults(net, fault)
    return net, x, y


def dump_single(case: Case, side: str, root: Path) -> Path:
    """One training step of ``case``'s model (``side``: target = with the fault, golden = clean)."""
    from msprobe.pytorch import PrecisionDebugger

    fault = case.fault if side == "target" else case.golden_fault
    dtype = case.target_dtype if side == "target" else case.golden_dtype
    side_dir = root / case.name / side
    side_dir.mkdir(parents=True, exist_ok=True)
    cfg = write_config(root / case.name / f"config_{side}.json", side_dir, case.task, case.level)
    PrecisionDebugger._reset_for_tests()
    if case.family in ("hf", "tv"):
        if case.family == "hf":
            from fault_injection import hf as family
        else:
            from fault_injection import tv as family

        net, inputs, hf_loss = family.build(case.model, fault)
    else:
        net, x, y = build(case.model, fault)
    dbg = PrecisionDebugger(config_path=str(cfg))
    for api in faultops.CUSTOM_APIS:
        dbg.register_custom_api(faultops, api, faultops.PREFIX)
    try:
        dbg.start(net)
        with precision_ctx(dtype):
            if case.family in ("hf", "tv"):
                loss = hf_loss(net(**inputs()))
            else:
                out = net(x)
        if case.family not in ("hf", "tv"):
            loss = F.mse_loss(out.float(), y)
        loss.backward()
        dbg.stop()
    finally:
        for api in faultops.CUSTOM_APIS:
            dbg.restore_custom_api(faultops, api)
        PrecisionDebugger._reset_for_tests()
    return side_dir / "step0"


def _tv_cases():
    from fault_injection.tv import TV_CASES
    return TV_CASES


FAMILIES = {"base": CASES, "hf": HF_CASES, "tv": _tv_cases(), "all": CASES + HF_CASES + _tv_cases()}


def generate(out: Path, only=None, family: str = "base") -> dict:
    out.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    chosen = [c for c in FAMILIES[family] if not only or c.name in only]
    dist_cases = [c for c in chosen if c.model == "dist"]
    errors = []
    runner = None
    if dist_cases:   # the two gloo processes run while this one dumps the single-process cases
        import threading

        from fault_injection.dist_worker import run_dist

        def _dist():
            try:
                run_dist(dist_cases, out)
            except BaseException as exc:  # noqa: BLE001 - re-raised below
                errors.append(exc)

        runner = threading.Thread(target=_dist)
        runner.start()
    try:
        for case in chosen:
            if case.model == "dist":
                continue
            for side in ("target", "golden"):
                dump_single(case, side, out)
    finally:
        if runner is not None:
            runner.join()
    if errors:
        raise errors[0]
    manifest = {}
    if only and (out / "cases.json").is_file():
        manifest = json.loads((out / "cases.json").read_text())
    manifest.update({c.name: c.to_json() for c in chosen})
    (out / "cases.json").write_text(json.dumps(manifest, indent=2))
    return manifest


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", help="output folder (created)")
    ap.add_argument("--only", nargs="*", help="case names")
    ap.add_argument("--family", choices=sorted(FAMILIES), default="base",
                    help="base: the models written here; hf: tiny transformers models; tv: torchvision models; all: every one")
    args = ap.parse_args(argv)
    generate(Path(args.out), args.only, args.family)
    return 0


if __name__ == "__main__":
    sys.exit(main())
