"""Convert the training monitor's CSV output to TensorBoard event files (see docs/monitor.md).

The reference's ``csv2tensorboard_by_step`` (``msprobe.pytorch.monitor.csv2tb``) as a command.
"""

from __future__ import annotations

import argparse

EPILOG = """example:
  msprobe csv2tensorboard -d monitor_output -o monitor_tb && tensorboard --logdir monitor_tb

Writes OUT/rank{R}/{type}/events.out.tfevents.* with scalar tags vp{vpp}:{name}[:micro{m}]/{op}.
exit status: 0 when converted, 2 on a bad input (one line, no traceback).
"""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("-d", "--monitor_path", required=True, metavar="DIR",
                   help="the monitor's output folder (MONITOR_OUTPUT_DIR) holding {time}-rank{R}-{id} folders")
    p.add_argument("-o", "--output_dirpath", default=None, metavar="DIR",
                   help="where the event files go (default DIR/{time}-csv2tensorboard_by_step); must be empty or "
                        "absent")
    p.add_argument("--time_start", default=None, metavar="TAG",
                   help="first rank-folder time tag to convert, e.g. Nov25_14-04-12 (closed range)")
    p.add_argument("--time_end", default=None, metavar="TAG", help="last rank-folder time tag to convert")
    p.add_argument("--types", default=None, metavar="LIST",
                   help="comma-separated data types (default: actv,actv_grad,exp_avg,exp_avg_sq,grad_unreduced,"
                        "grad_reduced,param_origin,param_updated)")


def run(args: argparse.Namespace) -> int:
    from msprobe.core.monitor.csv2tb import csv2tensorboard_by_step
    types = [t.strip() for t in args.types.split(",") if t.strip()] if args.types else None
    out = csv2tensorboard_by_step(args.monitor_path, args.time_start, args.time_end, data_type_list=types,
                                  output_dirpath=args.output_dirpath)
    print(f"TensorBoard event files written to {out}")
    return 0
