"""Inspect dumped arrays: the reference's interactive 'Parse >>>' shell (pt, cn, pk, dc) or one command.

With no command, the shell starts (one command per line; Ctrl-C, Ctrl-D or 'exit' leave).  With a command,
it runs once and exits: 0 on success, 2 on bad input (one line).
"""

from __future__ import annotations

import argparse

EPILOG = """commands (the same in the shell and here; '<command> -h' for its options):
  pt -n FILE                          print an array (.npy/.pt): 16 rows x 8 values, shape, dtype, max,
                                      min, mean; saves FILE.txt (never replaced)
  cn -m MY -g GOLDEN [-p N] [-s] [-al ATOL] [-rl RTOL]
                                      compare two arrays: Error Item Table, Top Item Table, NumCnt,
                                      AllClose, CosSim, ErrorPer (defaults: -p 20, -al 0.001, -rl 0.001)
  pk -f dump.json|FILE.pkl -n API     statistics (and stack) of the APIs whose names start with API
  dc -n PATH [-f FORMAT] [-out DIR] [-cmp_path msaccucmp.py]
                                      .pt files -> .npy (no CANN needed); Ascend kernel dumps -> .npy
                                      through CANN's msaccucmp.py (default out ./parse_data/dump_convert)

examples:
  msprobe parse                                        the shell ('Parse >>> ')
  msprobe parse cn -m my.npy -g golden.npy -p 5        one compare, then exit
  printf 'pt -n a.npy\\ncn -m a.npy -g b.npy\\n' | msprobe parse     commands from a pipe
"""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("parse_command", nargs=argparse.REMAINDER, metavar="COMMAND ...",
                   help="one of pt, cn, pk, dc and its options; none: start the shell")


def run(args: argparse.Namespace) -> int:
    from msprobe.core.errors import MsprobeError
    from msprobe.core.parse.shell import COMMANDS, run_command, run_shell

    words = list(args.parse_command or [])
    if not words:
        return run_shell()
    if words[0] not in COMMANDS:
        raise MsprobeError(f"unknown parse command {words[0]!r}; use one of {', '.join(COMMANDS)} "
                           f"(or no command for the shell)")
    run_command(words)
    return 0
