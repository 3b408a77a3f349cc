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
    "merge_result": ("msprobe.cli.merge_result", "gather chosen APIs and compare indexes of every rank's compare report into one .xlsx"),
    "op_generate": ("msprobe.cli.op_generate", "write a standalone script that reproduces one API and judges its precision"),
    "code_mapping": ("msprobe.cli.code_mapping", "link MindSpore static-graph dump files to IR nodes, scopes and source lines (.csv)"),
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
    module = importlib.import_module(COMMANDS[name][0])
    parser = argparse.ArgumentParser(
        prog=f"msprobe {name}", description=module.__doc__.strip().splitlines()[0] if module.__doc__ else None,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=getattr(module, "EPILOG", None),
    )
    module.add_arguments(parser)
    args = parser.parse_args(argv[1:])
    args.framework = framework
    args.exiting = exiting
    _setup_logging()
    from msprobe.core.errors import MsprobeError

    try:
        return int(module.run(args) or 0)
    except MsprobeError as exc:
        print(f"msprobe: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("msprobe: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # stdout was closed early (e.g. piped into `head`): the work is done, stop printing quietly
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0
    except Exception as exc:  # noqa: BLE001 - last line of defence: no traceback for users
        if os.environ.get("MSPROBE_DEBUG"):
            raise
        print(
            f"msprobe: internal error: {type(exc).__name__}: {exc} (set MSPROBE_DEBUG=1 for a traceback and report it)",
            file=sys.stderr,
        )
        return 1


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
