"""The ``Parse >>>`` shell and its commands.

Each command has the reference's options; :func:`run_command` runs one command line (the CLI's one-shot
form ``msprobe parse cn -m a.npy -g b.npy`` and every shell line go through it).  A bad input raises
:class:`MsprobeError` (one line); the shell prints it and goes on, the one-shot form exits non-zero.

Differences from the reference (deliberate): end of input (Ctrl-D, or the end of piped commands) and
``exit`` / ``quit`` leave the shell (the reference loops forever on EOF); no shell escapes; ``./parse_data``
is created only when ``dc`` writes there; ``pt``/``cn`` read ``.pt`` files as well as ``.npy``.
"""

from __future__ import annotations

import argparse
import cmd
import shlex
import sys
from typing import List, Optional, TextIO

from msprobe.core.errors import MsprobeError

COMMANDS = ("pt", "cn", "pk", "dc")
INVALID = "Command invalid, Only support command start with dc/pk/cn/pt"
PROMPT = "Parse >>> "


class _Parser(argparse.ArgumentParser):
    """argparse that reports a bad option as an MsprobeError (one line) instead of exiting."""

    def error(self, message):
        raise MsprobeError(f"{self.prog}: {message}")

    def exit(self, status=0, message=None):
        if message:
            self._print_message(message, sys.stderr)
        raise _HelpShown()


class _HelpShown(Exception):
    pass


def _parsers() -> dict:
    p = {}
    pt = p["pt"] = _Parser(prog="pt", description="print a .npy / .pt array: 16 rows x 8 values, shape, dtype, "
                                                  "max, min, mean; save it as <file>.txt", add_help=True)
    pt.add_argument("-n", "--name", required=True, help=".npy or .pt file")
    cn = p["cn"] = _Parser(prog="cn", description="compare two arrays element by element (float32; the shorter "
                                                  "is padded with zeros)")
    cn.add_argument("-m", "--my_dump_path", required=True, help="array to check (.npy or .pt)")
    cn.add_argument("-g", "--golden_dump_path", required=True, help="golden array (.npy or .pt)")
    cn.add_argument("-p", "--print", dest="count", type=int, default=20, help="rows of each table (default 20)")
    cn.add_argument("-s", "--save", action="store_true", help="also save both arrays as <file>.txt")
    cn.add_argument("-al", "--atol", type=float, default=0.001, help="absolute tolerance (default 0.001)")
    cn.add_argument("-rl", "--rtol", type=float, default=0.001, help="relative tolerance (default 0.001)")
    pk = p["pk"] = _Parser(prog="pk", description="print the statistics (and stack) of one API of a dump.json "
                                                  "or a legacy .pkl dump")
    pk.add_argument("-f", "--file", required=True, help="dump.json (stack.json next to it is read too) or .pkl")
    pk.add_argument("-n", "--name", required=True, help="API name or its prefix, e.g. Functional.conv2d.0.forward")
    dc = p["dc"] = _Parser(prog="dc", description="convert dump data to .npy: .pt files by msprobe, Ascend kernel "
                                                  "dumps by CANN's msaccucmp.py")
    dc.add_argument("-n", "--name", required=True, help="file or folder to convert")
    dc.add_argument("-f", "--format", default=None, help="target format of msaccucmp's conversion (e.g. NCHW)")
    dc.add_argument("-out", "--output_path", default=None,
                    help="output folder (default ./parse_data/dump_convert)")
    dc.add_argument("-cmp_path", "--msaccucmp_path", default=None,
                    help="CANN's msaccucmp.py (default /usr/local/Ascend/ascend-toolkit/latest/tools/"
                         "operator_cmp/compare/msaccucmp.py)")
    return p


def _txt(arr, path: str, con, warn) -> Optional[str]:
    from msprobe.core.parse.arrays import save_txt

    target = path + ".txt"
    try:
        written = save_txt(arr, target)
    except MsprobeError as exc:  # a read-only folder: the array is still shown
        warn(f"{target} not written: {exc}")
        return None
    if written is None:
        warn(f"{target} exists, not replaced")
    return target


def _do_pt(args, con, warn) -> None:
    from msprobe.core.parse.arrays import load_array
    from msprobe.core.parse.render import print_array

    arr = load_array(args.name, "array file (-n)")
    txt = _txt(arr, args.name, con, warn)
    print_array(con, arr, args.name, txt)


def _do_cn(args, con, warn) -> None:
    from msprobe.core.parse.arrays import compare, load_array
    from msprobe.core.parse.render import print_compare

    left = load_array(args.my_dump_path, "array file (-m)")
    right = load_array(args.golden_dump_path, "array file (-g)")
    res = compare(left, right, atol=args.atol, rtol=args.rtol, count=args.count)
    if res.warning:
        warn(res.warning)
    ltxt = rtxt = None
    if args.save:
        ltxt = _txt(left, args.my_dump_path, con, warn)
        rtxt = _txt(right, args.golden_dump_path, con, warn)
    print_compare(con, res, left, right, args.my_dump_path, args.golden_dump_path, args.atol, args.rtol, ltxt, rtxt)


def _do_pk(args, con, warn) -> None:
    from msprobe.core.parse.pkl import api_statistics
    from msprobe.core.parse.render import print_statistics

    stats, stack = api_statistics(args.file, args.name)
    print_statistics(con, stats, stack)


def _do_dc(args, con, warn) -> None:
    from msprobe.core.parse.convert import convert
    from msprobe.core.parse.render import print_converted

    print_converted(con, convert(args.name, args.format, args.output_path, args.msaccucmp_path))


_HANDLERS = {"pt": _do_pt, "cn": _do_cn, "pk": _do_pk, "dc": _do_dc}


def run_command(words: List[str], out: Optional[TextIO] = None, err: Optional[TextIO] = None) -> bool:
    """Run one parse command (``["cn", "-m", "a.npy", "-g", "b.npy"]``).  Returns False when the command is
    unknown (the invalid-command line is printed); raises MsprobeError on bad input."""
    from msprobe.core.parse.render import console

    out = out or sys.stdout
    err = err or sys.stderr
    if not words or words[0] not in _HANDLERS:
        print(INVALID, file=out)
        return False
    parser = _parsers()[words[0]]
    try:
        args = parser.parse_args(words[1:])
    except _HelpShown:
        return True
    con = console(out)

    def warn(text: str) -> None:
        print(f"warning: {text}", file=err)
        err.flush()

    _HANDLERS[words[0]](args, con, warn)
    return True


class ParseShell(cmd.Cmd):
    """``Parse >>>``: one command per line; Ctrl-C, Ctrl-D (end of input), ``exit`` or ``quit`` leave."""

    prompt = PROMPT
    intro = None

    def __init__(self, stdin: Optional[TextIO] = None, stdout: Optional[TextIO] = None,
                 stderr: Optional[TextIO] = None):
        super().__init__(stdin=stdin, stdout=stdout)
        if stdin is not None:
            self.use_rawinput = False
        self.err = stderr or sys.stderr
        self.failures = 0

    def _run(self, name: str, line: str) -> None:
        try:
            words = [name] + shlex.split(line)
        except ValueError as exc:
            print(f"error: {name}: {exc}", file=self.stdout)
            self.failures += 1
            return
        try:
            run_command(words, self.stdout, self.err)
        except MsprobeError as exc:
            print(f"error: {exc}", file=self.stdout)
            self.failures += 1

    def do_pt(self, line):
        """pt -n FILE: print an array (.npy/.pt): 16 rows x 8 values, shape, dtype, max, min, mean; save FILE.txt"""
        self._run("pt", line)

    def do_cn(self, line):
        """cn -m MY -g GOLDEN [-p N] [-s] [-al ATOL] [-rl RTOL]: compare two arrays element by element"""
        self._run("cn", line)

    def do_pk(self, line):
        """pk -f dump.json|file.pkl -n API: print the statistics (and stack) of one API"""
        self._run("pk", line)

    def do_dc(self, line):
        """dc -n PATH [-f FORMAT] [-out DIR] [-cmp_path msaccucmp.py]: convert .pt files or Ascend dumps to .npy"""
        self._run("dc", line)

    def do_exit(self, line):
        """exit: leave the shell"""
        return True

    do_quit = do_exit

    def do_EOF(self, line):  # noqa: N802 - cmd's name for end of input
        print(file=self.stdout)
        return True

    def emptyline(self):
        return False  # cmd's default repeats the previous command

    def default(self, line):
        print(INVALID, file=self.stdout)


def banner() -> str:
    return ("msprobe parse: inspect dumped arrays.  Commands: pt, cn, pk, dc ('help <command>', "
            "'<command> -h'); Ctrl-C, Ctrl-D or 'exit' to leave.")


def run_shell(stdin: Optional[TextIO] = None, stdout: Optional[TextIO] = None,
              stderr: Optional[TextIO] = None) -> int:
    """The interactive loop; returns 0 (a failed command is reported and the shell goes on)."""
    out = stdout or sys.stdout
    shell = ParseShell(stdin, stdout, stderr)
    print(banner(), file=out)
    print("Start Parsing........", file=out)
    try:
        shell.cmdloop()
    except KeyboardInterrupt:
        print("\nExit parsing.......", file=out)
    except (OSError, ValueError, AttributeError) as exc:  # stdin closed or not readable (no terminal, no pipe)
        from msprobe.core.errors import MsprobeError

        raise MsprobeError(f"parse: cannot read commands from standard input ({exc}); give one on the command "
                           f"line instead, e.g. 'msprobe parse cn -m a.npy -g b.npy'") from None
    return 0
