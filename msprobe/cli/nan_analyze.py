"""Find the rank and the op that made the first NaN or inf of a multi-rank step (nan_analyze / overflow_check).

Reads one step folder of a PyTorch statistics dump (rank/, rank0/, rank1/ ... each with dump.json, and
construct.json and stack.json when present) and searches, in this order: before the first communication op
of every rank; during communication, linking collectives and send/recv across ranks; after the last
communication op.  The first anomalous node (finite inputs, a NaN or inf in an output) is written to
OUT/anomaly_analyze_{time_ns}.json with its statistics, module chain and call stack, and summarised on the
console with the user's source line.  Nothing is written when nothing is found.  Inputs are never modified.
"""

from __future__ import annotations

import argparse
import sys

from msprobe.cli.options import add_quiet

EPILOG = """examples:
  msprobe -f pytorch nan_analyze -i dump_path/step0 -o out      (the reference's 8.x spelling)
  msprobe overflow_check -i dump_path/step0                     (its 26.x spelling; -o defaults to ./output)

exit status: 0 when the analysis ran (whether or not something was found), 2 on a bad input.
"""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("-i", "--input_path", required=True, metavar="STEP_DIR",
                   help="one step of a PyTorch statistics dump: the folder holding rank/ or rank0/, rank1/ ... "
                        "(or a single rank folder)")
    p.add_argument("-o", "--output_path", default="./output", metavar="DIR",
                   help="where anomaly_analyze_{time_ns}.json goes (default ./output; created only when something "
                        "is found; an existing file is never replaced)")
    p.add_argument("-j", "--jobs", type=int, default=0, metavar="N",
                   help="ranks read in parallel worker processes (default 0: one per core, at most one per rank; "
                        "each holds one rank's dump.json while it reads); -j 1: no helper processes")
    add_quiet(p)


def run(args: argparse.Namespace) -> int:
    from msprobe.core.errors import MsprobeError
    from msprobe.core.nan_analyze import analyze, read_step
    from msprobe.core.progress import Progress, display_wanted
    from msprobe.core.nan_analyze.report import build_content, check_output_dir, summary_lines, write_result

    if getattr(args, "framework", None) == "mindspore":
        raise MsprobeError(f"{args.command} analyses PyTorch dumps; use '-f pytorch {args.command}' (or no -f)")
    if args.jobs < 0:
        raise MsprobeError(f"-j/--jobs must be 0 (automatic) or a positive number, not {args.jobs}")
    check_output_dir(args.output_path)
    with Progress(args.command, display=display_wanted(quiet=args.quiet)) as prog:
        job = prog.job()
        try:
            ranks = read_step(args.input_path, progress=job, jobs=args.jobs)
        except BaseException:
            job.abandon()
            raise
        job.finish()
    result = analyze(args.input_path, ranks)
    content = build_content(result) if result.anomalies else {}
    lines = summary_lines(result, content)
    if result.anomalies:
        import logging

        path = write_result(content, args.output_path)
        logging.getLogger("msprobe").info("The analyze result is saved in: %s", path)
    for line in lines:
        print(line)
    sys.stdout.flush()
    return 0
