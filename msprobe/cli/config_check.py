"""Compare the training configuration of two environments (env variables, packages, hyperparameters, weights, dataset, random ops).

See docs/config_check.md.
"""

from __future__ import annotations

import argparse
import os

EPILOG = """Collect a pack in each environment, then compare the two packs:

  -d [SCRIPT ...]    static pack: environment variables, installed packages and the hyperparameters of the
                     given launch scripts (.sh: torchrun / msrun / python -m torch.distributed.launch, else the
                     first 'python x.py' line; --key value pairs) and yaml files; -o names the zip
                     (default ./config_check_pack.zip; an existing file is never replaced).
                     Weights, dataset batches and random calls come from ConfigChecker in the training
                     script (see docs/config_check.md).
  -c BENCH CMP       compare two packs into -o DIR (default ./config_check_result): DIR/bench, DIR/cmp (the
                     packs' entries) and DIR/result.xlsx (sheet 'summary': filename, pass_check =
                     pass/warning/error; one sheet per checker both packs hold).  When BENCH and CMP are
                     folders, two Megatron / MindSpeed checkpoints are compared instead into -o FILE
                     (default ./ckpt_similarity.json: l2, cos, numel, shape per parameter), loaded with
                     torch.load(weights_only=True) and never running code from the files.

examples:
  msprobe -f pytorch config_check -d train.sh config.yaml -o bench_pack.zip
  msprobe -f pytorch config_check -c bench_pack.zip cmp_pack.zip -o config_check_result
  msprobe config_check -c ckpt_dir_a ckpt_dir_b -o ckpt_similarity.json

The reference's 26.x log modes -vc/--verl-compare, -vv/--verl-verify and -sc/--slime-compare are refused
in one line (not implemented).

exit status: 0 when the pack or the comparison was written (whatever it found), 2 on a bad input.
"""


def add_arguments(p: argparse.ArgumentParser) -> None:
    mode = p.add_mutually_exclusive_group(required=True)
    mode.add_argument("-d", "--dump", nargs="*", metavar="SCRIPT",
                      help="write a static pack; optional launch scripts (.sh) and yaml files to take "
                           "hyperparameters from")
    mode.add_argument("-c", "--compare", nargs=2, metavar=("BENCH", "CMP"),
                      help="compare two packs (bench first), or two checkpoint folders")
    # the 26.x log-based modes: refused in one line (not implemented)
    mode.add_argument("-vc", "--verl-compare", nargs=2, metavar=("NPU_LOG", "BENCH_LOG"), help=argparse.SUPPRESS)
    mode.add_argument("-vv", "--verl-verify", nargs="+", metavar="FILE", help=argparse.SUPPRESS)
    mode.add_argument("-sc", "--slime-compare", nargs=2, metavar=("NPU_LOG", "BENCH_LOG"), help=argparse.SUPPRESS)
    p.add_argument("-o", "--output", metavar="PATH",
                   help="-d: the pack zip (default ./config_check_pack.zip, must end in .zip); -c: the result "
                        "folder (default ./config_check_result) or, for checkpoints, the json file "
                        "(default ./ckpt_similarity.json)")


def run(args: argparse.Namespace) -> int:
    from msprobe.core.errors import MsprobeError

    fmk = getattr(args, "framework", None)
    for flag, dest in (("-vc/--verl-compare", "verl_compare"), ("-vv/--verl-verify", "verl_verify"),
                       ("-sc/--slime-compare", "slime_compare")):
        if getattr(args, dest, None) is not None:
            raise MsprobeError(f"config_check {flag} (the reference's 26.x verl/slime log modes) is not implemented "
                               f"in msprobe; use -d / -c")
    if args.dump is not None:
        from msprobe.core.config_check.checker import DEFAULT_ZIP, pack_static

        path = pack_static(args.dump, args.output or DEFAULT_ZIP)
        print(f"config_check pack written: {path}")
        return 0
    bench, cmp = args.compare
    if os.path.isdir(bench) or os.path.isdir(cmp):
        if not (os.path.isdir(bench) and os.path.isdir(cmp)):
            raise MsprobeError(f"-c takes two pack zips or two checkpoint folders, not a mix: {bench}, {cmp}")
        if fmk == "mindspore":
            raise MsprobeError("the checkpoint similarity mode reads PyTorch (Megatron / MindSpeed) checkpoints; "
                               "use -f pytorch or no -f")
        from msprobe.core.config_check.ckpt import compare_checkpoints
        from msprobe.pytorch.config_check.ckpt import load_state

        path = compare_checkpoints(bench, cmp, args.output or "./ckpt_similarity.json", load_state)
        print(f"checkpoint similarity written: {path}")
        return 0
    from msprobe.core.config_check.compare import compare_packs

    result, checks = compare_packs(bench, cmp, args.output or "./config_check_result", fmk)
    width = max([len(c.name) for c in checks] + [8])
    for check in checks:
        rows = f" ({len(check.rows)} row{'s' if len(check.rows) != 1 else ''})" if check.rows else ""
        print(f"  {check.name:<{width}}  {check.verdict}{rows}")
    print(f"config_check result written: {result}")
    return 0
