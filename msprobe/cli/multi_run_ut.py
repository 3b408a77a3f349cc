"""run_ut over several processes (-n) and devices (-d), results merged in dump order.

The APIs of the dump are spread over the processes; one result/details pair is written.
"""

from __future__ import annotations

import argparse

from msprobe.cli import run_ut

EPILOG = """examples:
  msprobe -f pytorch multi_run_ut -api_info dump.json -n 4 -o out
  msprobe -f pytorch multi_run_ut -api_info dump.json -n 16 -d 0 1      (8 processes per device at most)
"""


def add_arguments(p: argparse.ArgumentParser) -> None:
    run_ut.add_arguments(p, multi=True)


def run(args: argparse.Namespace) -> int:
    return run_ut.run(args)
