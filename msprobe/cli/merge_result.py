"""Gather chosen APIs / modules and compare indexes of every rank's compare report into one .xlsx.

Reads the compare_result_rank{N}_{timestamp}.xlsx (or .csv, from 'msprobe compare --csv') reports in -i
and writes multi_ranks_compare_merge_{timestamp}.xlsx in -o: one sheet per compare index, one row per
tensor of the configured APIs, one column per rank.  Cells without a value (N/A, unsupported, Nan) show
'NPU:<NPU max>  Bench:<Bench max>' instead, e.g. the group or reduce-op arguments of communication ops.
"""

from __future__ import annotations

import argparse
import os

from msprobe.cli.options import add_quiet

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

EPILOG = """config.yaml:
  api:                          required: names to gather, 1 to 4 leading fields of
  - Distributed.all_reduce        {api_type}.{api_name}.{call number}.{forward|backward}
  - Functional.linear.0
  compare_index:                optional, default: every index of the reports' mode
  - Max diff
  - MeanRelativeErr
examples:
  msprobe merge_result -i compare_out -o merged -config config.yaml
  msprobe -f pytorch merge_result -i compare_out -o merged -config config.yaml      (legacy syntax)
"""


def add_arguments(p: argparse.ArgumentParser) -> None:
    io = p.add_argument_group("inputs and output")
    io.add_argument("-i", "--input_dir", required=True,
                    help="directory holding compare_result_rank{N}_*.xlsx/.csv reports (the -o of a multi-rank compare), "
                         "or the compare_result_<ts> report of a single-process compare (merged as rank0)")
    io.add_argument("-o", "--output_dir", required=True,
                    help="output directory, created if missing; results are never overwritten")
    io.add_argument("-config", "--config-path", "--config_path", "--config", dest="config_path", required=True,
                    help="config.yaml naming the APIs ('api') and compare indexes ('compare_index') to gather")
    x = p.add_argument_group("execution")
    x.add_argument("-j", "--jobs", type=int, default=0, help="processes reading reports (default: one per core)")
    x.add_argument("--ray", nargs="?", const="", default=None, metavar="ADDRESS",
                   help="read the reports in Ray tasks: no ADDRESS starts a local instance, 'auto' or ray://host:port "
                        "joins a cluster; needs pip install 'msprobe[ray]' (docs/scale.md)")
    add_quiet(x)


def run(args) -> int:
    from msprobe.core.errors import MsprobeError
    from msprobe.core.merge import MergeConfig, run_merge

    if args.jobs < 0:
        raise MsprobeError(f"-j/--jobs must be 0 (automatic) or a positive number, not {args.jobs}")
    backend = None
    if getattr(args, "ray", None) is not None:
        from msprobe.core.executor import check_backend, ray_backend

        backend = ray_backend(args.ray)
        check_backend(backend)          # the Ray extra missing: one line now, before any work
    cfg = MergeConfig.from_yaml(args.input_dir, args.output_dir, args.config_path, jobs=args.jobs,
                                progress=not args.quiet, backend=backend)
    # stages read, merge, write: one INFO line each, a live display on a terminal (msprobe.core.progress)
    from msprobe.core.progress import Progress, display_wanted

    with Progress("merge_result", display=display_wanted(quiet=not cfg.progress)) as prog:
        job = prog.job()
        try:
            res = run_merge(cfg, progress=job)
        except BaseException:
            job.abandon()
            raise
        job.finish()
    ranks = ", ".join(f"rank{r}" for r in res.ranks[:8]) + (f" ... rank{res.ranks[-1]}" if len(res.ranks) > 8 else "")
    what = (f"the {res.mode} report of a single-process compare (merged as rank{res.ranks[0]})" if res.single
            else f"{res.mode} reports of {len(res.ranks)} rank{'s' if len(res.ranks) != 1 else ''} ({ranks})")
    print(f"merge_result: {what}, {res.rows} rows, "
          f"{len(res.indexes)} sheets ({', '.join(res.indexes)}) in {res.seconds:.2f} s")
    print(f"written: {res.path}")
    for label, reason in res.failures:       # --ray: reports that could not be read, left out of the merge
        print(f"merge_result {label}: FAILED: {reason}")
    if res.failures:
        print(f"merge_result: {len(res.failures)} of {len(res.failures) + len(res.ranks)} rank reports failed; "
              "the merged workbook holds the others")
        return 1
    return 0
