"""``-q/--quiet`` means the same for every command that has it: no live display and no INFO lines; warnings,
errors and the results on stdout stay (msprobe.cli.options.add_quiet, honoured in msprobe.cli.main)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from msprobe.cli.main import COMMANDS, command_parser
from msprobe.cli.options import QUIET_HELP, add_quiet

REPO = Path(__file__).resolve().parents[1]


def _quiet_actions():
    seen = {}
    for name in COMMANDS:
        _, parser = command_parser(name)
        for action in parser._actions:       # noqa: SLF001 - argparse keeps no public list
            if "-q" in action.option_strings:
                seen[name] = action
    return seen


def test_every_quiet_flag_is_the_shared_one():
    seen = _quiet_actions()
    # the commands with a live progress display all have it
    assert {"compare", "graph", "merge_result", "nan_analyze", "run_ut", "run_overflow_check"} <= set(seen)
    for name, action in seen.items():
        assert action.option_strings == ["-q", "--quiet"], name
        assert action.dest == "quiet" and action.help == QUIET_HELP, name


def test_add_quiet_defines_the_flag():
    import argparse

    p = argparse.ArgumentParser()
    add_quiet(p)
    assert p.parse_args(["-q"]).quiet and p.parse_args(["--quiet"]).quiet and not p.parse_args([]).quiet


@pytest.fixture(scope="module")
def example_pair(tmp_path_factory):
    out = tmp_path_factory.mktemp("quiet_ex")
    subprocess.run([sys.executable, str(REPO / "examples" / "make_example_dumps.py"), str(out)], check=True,
                   capture_output=True)
    return out / "target" / "step0" / "rank0", out / "golden" / "step0" / "rank0"


def _run(args, capsys):
    from msprobe.cli.main import main

    rc = main([str(a) for a in args])
    return rc, capsys.readouterr()


@pytest.mark.parametrize("quiet", [False, True])
def test_compare_quiet_drops_the_stage_lines_and_keeps_the_results(example_pair, tmp_path, capsys, quiet):
    t, g = example_pair
    rc, cap = _run(["compare", "-tp", t, "-gp", g, "-o", tmp_path / "out", "--csv"] + (["-q"] if quiet else []),
                   capsys)
    assert rc == 0
    stage = [x for x in cap.err.splitlines() if x.startswith("[msprobe] INFO compare: ")]
    assert bool(stage) is not quiet, cap.err
    assert "red:" in cap.out and "report:" in cap.out          # the result stays either way
    assert len(list((tmp_path / "out").glob("compare_result_*.csv"))) == 1


def test_graph_quiet_prints_no_info(example_pair, tmp_path, capsys):
    t, g = example_pair
    rc, cap = _run(["graph", "-tp", t, "-gp", g, "-o", tmp_path / "graph", "-q"], capsys)
    assert rc == 0 and "INFO" not in cap.err, cap.err
    assert list((tmp_path / "graph").glob("*.vis*"))
    rc, cap = _run(["graph", "-tp", t, "-gp", g, "-o", tmp_path / "graph2"], capsys)
    assert rc == 0 and "INFO" in cap.err, cap.err
