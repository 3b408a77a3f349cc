"""``msprobe`` entry point: one table of subcommands, each imported only when used.

Both syntaxes are accepted:

    msprobe compare -tp TARGET -gp GOLDEN -o OUT          (new)
    msprobe -f pytorch compare -i compare.json -o OUT     (legacy; -f names the framework)
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys
from typing import List, Optional

from msprobe import __version__

# name -> (module, one-line help).  A module provides add_arguments(parser) and run(args) -> int.
# Register a subcommand only once it works end to end.
COMMANDS = {
    "compare": ("msprobe.cli.compare", "compare a target dump with a golden dump and write an .xlsx/.csv report"),
    "graph": ("msprobe.cli.graph", "build or compare hierarchical model graphs (.vis / .vis.db) for tb-graph-ascend"),
    "graph_visualize": ("msprobe.cli.graph", "the reference's 26.x name of 'graph' (its -tp/-gp/-o flags; writes .vis.db "
                                             "unless --file_type is given)"),
    "merge_result": ("msprobe.cli.merge_result", "gather chosen APIs and compare indexes of every rank's compare report into one .xlsx"),
    "op_generate": ("msprobe.cli.op_generate", "write a standalone script that reproduces one API and judges its precision"),
    "run_ut": ("msprobe.cli.run_ut", "pre-check every API of a dump: re-run each alone, judge it against a CPU benchmark"),
    "multi_run_ut": ("msprobe.cli.multi_run_ut", "run_ut spread over several processes / devices (-n)"),
    "acc_check": ("msprobe.cli.acc_check", "the reference's 26.x name of run_ut (framework read from the dump)"),
    "multi_acc_check": ("msprobe.cli.multi_acc_check", "the reference's 26.x name of multi_run_ut"),
    "run_overflow_check": ("msprobe.cli.run_overflow_check", "re-run the APIs whose dumped output overflowed: normal "
                                                             "(the CPU benchmark overflows too) or abnormal"),
    "api_precision_compare": ("msprobe.cli.api_precision_compare", "judge a device's run_ut details against a GPU's "
                                                                   "(api_precision_compare_result/details csv)"),
    "code_mapping": ("msprobe.cli.code_mapping", "link MindSpore static-graph dump files to IR nodes, scopes and source lines (.csv)"),
    "nan_analyze": ("msprobe.cli.nan_analyze", "find the rank and op that made the first NaN/inf of a multi-rank step"),
    "overflow_check": ("msprobe.cli.nan_analyze", "the reference's 26.x name of 'nan_analyze'"),
    "config_check": ("msprobe.cli.config_check", "pack an environment's configuration (-d) or compare two packs (-c)"),
    "csv2tensorboard": ("msprobe.cli.csv2tensorboard", "convert the training monitor's CSV output to TensorBoard event files"),
    "grad_compare": ("msprobe.cli.grad_compare", "compare two grad_probe dumps' gradient directions per step and parameter"),
    "parse": ("msprobe.cli.parse", "inspect dumped arrays: the 'Parse >>>' shell (pt, cn, pk, dc) or one command"),
}

FRAMEWORKS = ("pytorch", "mindspore")


def _top_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="msprobe",
        description="msprobe: precision debugging for deep-learning training (compatible with MindStudio Probe).",
        epilog="Run 'msprobe <command> -h' for the options of a command.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("-V", "--version", action="version", version=f"msprobe {__version__}")
    p.add_argument("-f", "--framework", choices=FRAMEWORKS, help="framework of the dumps (legacy syntax; optional)")
    sub = p.add_subparsers(dest="command", metavar="<command>")
    for name, (_, help_text) in COMMANDS.items():
        sub.add_parser(name, help=help_text, add_help=False)
    return p


def _setup_logging() -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("[msprobe] %(levelname)s %(message)s"))
    log = logging.getLogger("msprobe")
    log.handlers[:] = [handler]
    log.setLevel(logging.INFO)
    log.propagate = False


def main(argv: Optional[List[str]] = None, exiting: bool = False) -> int:
    """Run one command; ``exiting``: the process ends right after (commands may skip cleanup work)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    framework = None
    # legacy global option before the command: msprobe -f pytorch compare ...
    if len(argv) >= 2 and argv[0] in ("-f", "--framework"):
        framework = argv[1]
        if framework not in FRAMEWORKS:
            print(f"msprobe: error: -f/--framework must be one of {', '.join(FRAMEWORKS)}, not {framework!r}", file=sys.stderr)
            return 2
        argv = argv[2:]
    if not argv or argv[0] not in COMMANDS:
        parser = _top_parser()
        if argv and not argv[0].startswith("-"):
            parser.print_usage(sys.stderr)
            print(f"msprobe: error: unknown command {argv[0]!r}; commands: {', '.join(COMMANDS)}", file=sys.stderr)
            return 2
        parser.parse_args(argv)  # handles -h / -V / errors
        parser.print_help()
        return 0
    name = argv[0]
    bad = next((a for a in argv if "\0" in a), None)
    if bad is not None:  # only possible in-process (a shell cannot pass one): os calls would raise ValueError
        print(f"msprobe: error: argument {bad[:100]!r} holds a NUL character; correct it", file=sys.stderr)
        return 2
    module, parser = command_parser(name)
    args = parser.parse_args(argv[1:])
    args.framework = framework
    args.exiting = exiting
    args.command = name
    _setup_logging()
    if getattr(args, "quiet", False):       # -q (msprobe.cli.options.add_quiet): warnings and errors only
        logging.getLogger("msprobe").setLevel(logging.WARNING)
    from msprobe.core.errors import MsprobeError

    created = _created_output_dirs(args)
    from msprobe.core.resources import process_guards

    try:
        with process_guards():  # forked workers die with this process; SIGTERM stops it like Ctrl-C
            return int(module.run(args) or 0)
    except MsprobeError as exc:
        _remove_if_empty(created)
        print(f"msprobe: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        _remove_if_empty(created)
        print("msprobe: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # stdout was closed early (e.g. piped into `head`): the work is done, stop printing quietly
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0
    except Exception as exc:  # noqa: BLE001 - last line of defence: no traceback for users
        _remove_if_empty(created)
        return report_internal_error(exc, ["msprobe", name] + argv[1:])


#: where internal-error logs go (MSPROBE_LOG_DIR overrides): a per-user folder in the temp dir
def internal_error_dir() -> str:
    import tempfile

    base = os.environ.get("MSPROBE_LOG_DIR")
    if base:
        return base
    uid = os.getuid() if hasattr(os, "getuid") else "user"
    return os.path.join(tempfile.gettempdir(), f"msprobe-{uid}", "logs")


def report_internal_error(exc: BaseException, argv: List[str]) -> int:
    """A bug in msprobe (not a bad input): one line naming the error and a log file holding the traceback
    (created 0600), asking for a report.  ``MSPROBE_DEBUG=1`` also prints the traceback."""
    import time
    import traceback

    text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    worker = getattr(exc, "worker_traceback", None)
    if isinstance(worker, str):  # raised in a worker process (msprobe.core.procpool): where it really happened
        text += "\nIn the worker process:\n" + worker
    if os.environ.get("MSPROBE_DEBUG"):
        sys.stderr.write(text)
    message = str(exc).splitlines()[0][:300] if str(exc) else ""
    log_path = None
    try:
        folder = internal_error_dir()
        os.makedirs(folder, mode=0o700, exist_ok=True)
        stamp = time.strftime("%Y%m%d-%H%M%S")
        log_path = os.path.join(folder, f"internal_error_{stamp}_{os.getpid()}.log")
        fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
        with os.fdopen(fd, "w", encoding="utf-8", errors="replace") as fh:
            fh.write(f"msprobe {__version__}, python {sys.version.split()[0]}\n")
            fh.write("command: " + " ".join(repr(a) if " " in a else a for a in argv)[:4000] + "\n\n")
            fh.write(text)
    except OSError:
        log_path = None
    where = f"traceback in {log_path}" if log_path else "set MSPROBE_DEBUG=1 for the traceback"
    print(
        f"msprobe: internal error: {type(exc).__name__}: {message} ({where}); this is a bug in msprobe, "
        f"please report it with that traceback and the command",
        file=sys.stderr,
    )
    return 1


def command_parser(name: str):
    """(module, argparse parser) of one subcommand.  Abbreviated long options are refused
    (allow_abbrev=False): a prefix such as the reference's ``--config`` must never silently pick one of
    several options (or one with another meaning); the reference's spellings are declared explicitly."""
    module = importlib.import_module(COMMANDS[name][0])
    parser = argparse.ArgumentParser(
        prog=f"msprobe {name}", description=module.__doc__.strip().splitlines()[0] if module.__doc__ else None,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=getattr(module, "EPILOG", None),
        allow_abbrev=False,
    )
    module.add_arguments(parser)
    return module, parser


#: the output-directory option of each command (argparse dest)
OUTPUT_DESTS = ("output_path", "output_dir", "api_output_path", "output")


def _created_output_dirs(args) -> List[str]:
    """The output directory a command may create and the missing levels above it (outermost first):
    what a failed run may remove again when it left them empty."""
    out = []
    for dest in OUTPUT_DESTS:
        value = getattr(args, dest, None)
        if not isinstance(value, str) or not value:
            continue
        path = os.path.abspath(value)
        missing = []
        while path and not os.path.lexists(path):
            missing.append(path)
            parent = os.path.dirname(path)
            if parent == path:
                break
            path = parent
        out.extend(reversed(missing))
        break
    return out


def _remove_if_empty(created: List[str]) -> None:
    """A failed run leaves no empty output directory it created (nor empty sub-directories in it)."""
    if not created:
        return
    top = created[0]
    if not os.path.isdir(top) or os.path.islink(top):
        return
    for root, dirs, files in os.walk(top, topdown=False):
        if not files:
            try:
                os.rmdir(root)  # only succeeds when empty
            except OSError:
                pass


def console_main() -> None:  # pragma: no cover - the installed `msprobe` script
    """Run :func:`main` and leave without tearing down the heap.

    A graph or compare holds millions of small objects until the end; freeing them one by one at
    interpreter exit costs seconds and achieves nothing.  Output streams are flushed first.
    """
    rc = main(exiting=True)
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        logging.shutdown()
        os._exit(rc)


if __name__ == "__main__":  # pragma: no cover
    console_main()
