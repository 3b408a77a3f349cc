"""The 26.x name of multi_run_ut: acc_check over several processes (-n) and devices (-d).
"""

from __future__ import annotations

import argparse

from msprobe.cli import acc_check, run_ut

EPILOG = """examples:
  msprobe multi_acc_check -api_info dump.json -n 4 -o out
"""


def add_arguments(p: argparse.ArgumentParser) -> None:
    run_ut.add_arguments(p, multi=True)


def run(args: argparse.Namespace) -> int:
    return acc_check.run(args)
