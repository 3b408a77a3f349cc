"""The 26.x name of run_ut: pre-check every API of a dump (framework read from dump.json).
"""

from __future__ import annotations

import argparse

from msprobe.cli import run_ut

EPILOG = run_ut.EPILOG


def add_arguments(p: argparse.ArgumentParser) -> None:
    run_ut.add_arguments(p)


def run(args: argparse.Namespace) -> int:
    from msprobe.core.acc_check.plan import framework_of
    from msprobe.core.errors import MsprobeError

    if not args.api_info_file:
        raise MsprobeError("Please provide api_info_file for acc_check. (-api_info dump.json)")
    if args.framework is None:
        args.framework = framework_of(args.api_info_file)
    return run_ut.run(args)
