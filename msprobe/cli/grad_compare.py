"""Compare two grad_probe dumps' gradient directions per step and parameter, and say where the runs part.

The reference has no command for this (its users call ``GradComparator.compare_distributed`` from Python);
this runs the same comparison and prints, per rank, the first step where the directions part.
"""
from __future__ import annotations

import argparse
import os

EPILOG = """examples:
  msprobe grad_compare -d1 run_a/dump_path -d2 run_b/dump_path -o grad_cmp
  msprobe grad_compare -d1 run_a/dump_path/rank0 -d2 run_b/dump_path/rank0 -o grad_cmp/rank0

writes per rank: similarities.csv, similarities_picture/{param}_similarities.png, summary_similarities.png and
similarities_heatmap.png (the pictures need matplotlib: pip install msprobe[plots]).
A step is flagged when a parameter's similarity is below 0.97 at the first compared step or drops by more
than 0.03 from one compared step to the next (the reference documentation's rule).

exit status: 0 when the comparison ran (whether or not the runs part), 2 on a bad input.
"""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("-d1", "--dump_path1", required=True, metavar="DIR",
                   help="the dump_path of the first run (holding rank0/, rank1/ ...), or one rank folder")
    p.add_argument("-d2", "--dump_path2", required=True, metavar="DIR",
                   help="the dump_path of the second run, or the matching rank folder")
    p.add_argument("-o", "--output_path", default="./grad_compare_output", metavar="DIR",
                   help="where the results go (default ./grad_compare_output; created if missing; "
                        "an existing similarities.csv is replaced with a warning)")
    p.add_argument("--no_plots", action="store_true", help="write similarities.csv only, no pictures")


def _is_rank_dir(path: str) -> bool:
    try:
        names = os.listdir(path)
    except OSError:
        return False
    return any(n.startswith("step") and n[4:].isdigit() for n in names) and \
        not any(n.startswith("rank") and n[4:].isdigit() for n in names)


def run(args: argparse.Namespace) -> int:
    from msprobe.core.grad_probe.grad_compare import GradComparator

    plots = not args.no_plots
    if _is_rank_dir(args.dump_path1) and _is_rank_dir(args.dump_path2):
        results = [GradComparator.compare(args.dump_path1, args.dump_path2, args.output_path, plots=plots)]
    else:
        results = GradComparator.compare_distributed(args.dump_path1, args.dump_path2, args.output_path, plots=plots)
    for res in results:
        where = os.path.basename(os.path.normpath(res.output_dir))
        steps = f"{len(res.steps)} steps ({res.steps[0]}..{res.steps[-1]})"
        if res.divergence is None:
            print(f"{where}: {steps}: gradient directions agree at every step; "
                  f"{os.path.join(res.output_dir, 'similarities.csv')}")
        else:
            print(f"{where}: {steps}: {res.divergence.line()}; {os.path.join(res.output_dir, 'similarities.csv')}")
    return 0
