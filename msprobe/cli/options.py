"""Options several subcommands share, each defined once (same flag, same meaning, same help)."""

from __future__ import annotations

QUIET_HELP = ("quiet: no live progress display and no INFO lines (the stage log, file names); warnings, errors "
              "and the results on stdout stay")


def add_quiet(group) -> None:
    """``-q/--quiet``: honoured by ``msprobe.cli.main`` (the ``msprobe`` logger at WARNING) and by each
    command's progress display."""
    group.add_argument("-q", "--quiet", dest="quiet", action="store_true", help=QUIET_HELP)
