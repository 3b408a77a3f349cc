"""Every flag of the reference's compare / graph / merge_result command lines (MindStudio Probe 1.2, 8.x and
26.x; docs/compatibility.md, "Command lines") is either accepted with the same meaning or refused with one
line naming the equivalent.  Parsing-level checks for all of them, end-to-end runs for the accepted ones
that change the output."""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from msprobe.cli.main import command_parser, main

ROOT = Path(__file__).resolve().parents[1]


def parse(command, argv):
    _, parser = command_parser(command)
    return parser.parse_args(argv)


def refused(capsys, argv, *needles):
    rc = main(argv)
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.startswith("msprobe: error: ")]
    assert rc == 2 and len(lines) == 1, err
    assert "Traceback" not in err
    for n in needles:
        assert n in lines[0], (n, lines[0])
    return lines[0]


# ------------------------------------------------------------------------------------------------ compare

COMPARE_ACCEPTED = [
    # (argv after 'compare', attribute, expected value)
    (["-i", "c.json"], "input_path", "c.json"),
    (["--input_path", "c.json"], "input_path", "c.json"),
    (["-o", "out"], "output_path", "out"),
    (["--output_path", "out"], "output_path", "out"),
    (["-o"], "output_path", "./output"),
    (["-s"], "stack_mode", True),
    (["--stack_mode"], "stack_mode", True),
    (["-c"], "compare_only", True),
    (["--compare_only"], "compare_only", True),
    (["-f"], "fuzzy_match", True),
    (["-fm"], "fuzzy_match", True),
    (["--fuzzy_match"], "fuzzy_match", True),
    (["-hl"], "highlight", True),
    (["--highlight"], "highlight", True),
    (["-cm"], "cell_mapping", ""),
    (["-cm", "cells.yaml"], "cell_mapping", "cells.yaml"),
    (["--cell_mapping", "cells.yaml"], "cell_mapping", "cells.yaml"),
    (["-am"], "api_mapping", ""),
    (["--api_mapping", "apis.yaml"], "api_mapping", "apis.yaml"),
    (["-dm", "data.yaml"], "data_mapping", "data.yaml"),
    (["--data_mapping", "data.yaml"], "data_mapping", "data.yaml"),
    (["-lm"], "layer_mapping", ""),
    (["--layer_mapping", "layers.yaml"], "layer_mapping", "layers.yaml"),
    (["-da"], "diff_analyze", True),
    (["--diff_analyze"], "diff_analyze", True),
    (["-tp", "t"], "target_path", "t"),
    (["--target_path", "t"], "target_path", "t"),
    (["-gp", "g"], "golden_path", "g"),
    (["--golden_path", "g"], "golden_path", "g"),
    (["--xlsx"], "xlsx", True),
    (["-tensor_log"], "tensor_log", True),
    (["--is_print_compare_log"], "tensor_log", True),
    (["--rank", "0,1"], "rank", "0,1"),
    (["--step", "1"], "step", "1"),
    (["-m", "auto"], "mode", "auto"),
    (["--mode", "auto"], "mode", "auto"),
]


@pytest.mark.parametrize("argv,attr,value", COMPARE_ACCEPTED, ids=[" ".join(a[0]) for a in COMPARE_ACCEPTED])
def test_compare_accepts_reference_flag(argv, attr, value):
    assert getattr(parse("compare", argv), attr) == value


COMPARE_REFUSED = [
    (["-m", "torchair"], ["-m/--mode torchair", "not supported", "drop -m"]),
    (["--mode", "offline_model"], ["offline_model", "not supported", "drop -m"]),
    (["-m", "atb"], ["atb", "drop -m"]),
    (["-m", "offline_data"], ["offline_data", "drop -m"]),
    (["-m", "bogus"], ["not a compare mode", "drop -m"]),
    (["--consistent_check", "--backend", "fsdp"], ["--consistent_check", "not supported", "-tp/-gp"]),
    (["--backend", "megatron"], ["--backend", "not supported"]),
    (["--config", "post.yaml"], ["--config", "not supported", "drop --config"]),
    (["--xlsx", "--csv"], ["--xlsx and --csv"]),
]


@pytest.mark.parametrize("extra,needles", COMPARE_REFUSED, ids=[" ".join(a[0]) for a in COMPARE_REFUSED])
def test_compare_refuses_reference_flag_with_a_pointer(tmp_path, capsys, extra, needles):
    out = tmp_path / "out"
    refused(capsys, ["compare", "-tp", str(tmp_path / "t"), "-gp", str(tmp_path / "g"), "-o", str(out), *extra],
            *needles)
    assert not out.exists()


def test_abbreviated_options_are_not_guessed(capsys):
    """argparse's prefix matching is off: '--target' must not silently mean --target_path (nor a reference
    flag msprobe lacks mean one of ours)."""
    with pytest.raises(SystemExit):
        parse("compare", ["--target", "t"])
    with pytest.raises(SystemExit):
        parse("merge_result", ["-i", "a", "-o", "b", "--conf", "c.yaml"])
    capsys.readouterr()


def test_legacy_global_framework_flag():
    """msprobe -f pytorch|mindspore <command> ... (1.x/8.x): -f before the command is the framework."""
    with pytest.raises(SystemExit) as exc:
        main(["-f", "pytorch", "compare", "-h"])
    assert exc.value.code == 0


# ------------------------------------------------------------------------------------------------ graph

GRAPH_ACCEPTED = [
    (["-i", "c.json"], "input_path", "c.json"),
    (["--input_path", "c.json"], "input_path", "c.json"),
    (["-o", "out"], "output_path", "out"),
    (["--output_path", "out"], "output_path", "out"),
    (["-lm"], "layer_mapping", ""),
    (["-lm", "l.yaml"], "layer_mapping", "l.yaml"),
    (["--layer_mapping", "l.yaml"], "layer_mapping", "l.yaml"),
    (["-oc"], "overflow_check", True),
    (["--overflow_check"], "overflow_check", True),
    (["-f"], "fuzzy_match", True),
    (["-fm"], "fuzzy_match", True),
    (["--fuzzy_match"], "fuzzy_match", True),
    (["-cs"], "complete_stack", True),
    (["--complete_stack"], "complete_stack", True),
    (["-tp", "t"], "target_path", "t"),
    (["--target_path", "t"], "target_path", "t"),
    (["-gp", "g"], "golden_path", "g"),
    (["--golden_path", "g"], "golden_path", "g"),
    (["-tensor_log"], "tensor_log", True),
    (["--is_print_compare_log"], "tensor_log", True),
    (["--file_type", "db"], "file_type", "db"),
]


@pytest.mark.parametrize("command", ["graph", "graph_visualize"])
@pytest.mark.parametrize("argv,attr,value", GRAPH_ACCEPTED, ids=[" ".join(a[0]) for a in GRAPH_ACCEPTED])
def test_graph_accepts_reference_flag(command, argv, attr, value):
    assert getattr(parse(command, argv + (["-o", "x"] if "-o" not in argv and "--output_path" not in argv else [])),
                   attr) == value


GRAPH_REFUSED = [
    (["-progress_log"], ["-progress_log", "not supported", "-q"]),
    (["--is_print_progress_log"], ["-progress_log", "not supported"]),
    (["--rank_size", "8", "--tp", "8"], ["--rank_size/--tp", "parallel merge", "one graph per rank"]),
    (["--pp", "2"], ["--pp", "parallel merge"]),
    (["--vpp", "1"], ["--vpp", "parallel merge"]),
    (["--order", "tp-cp-ep-dp-pp"], ["--order", "parallel merge"]),
    (["--file_type", "json"], ["--file_type json", "--db"]),
]


@pytest.mark.parametrize("command", ["graph", "graph_visualize"])
@pytest.mark.parametrize("extra,needles", GRAPH_REFUSED, ids=[" ".join(a[0]) for a in GRAPH_REFUSED])
def test_graph_refuses_reference_flag_with_a_pointer(tmp_path, capsys, command, extra, needles):
    out = tmp_path / "out"
    refused(capsys, [command, "-tp", str(tmp_path), "-o", str(out), *extra], *needles)
    assert not out.exists()


# ------------------------------------------------------------------------------------------------ merge_result

MERGE_ACCEPTED = [
    (["-config", "c.yaml"], "c.yaml"),
    (["--config-path", "c.yaml"], "c.yaml"),
    (["--config_path", "c.yaml"], "c.yaml"),
    (["--config", "c.yaml"], "c.yaml"),  # the reference's argparse takes this prefix of --config-path
]


@pytest.mark.parametrize("flag,value", MERGE_ACCEPTED, ids=[a[0][0] for a in MERGE_ACCEPTED])
def test_merge_result_accepts_reference_flag(flag, value):
    for i, o in ((["-i", "in"], ["-o", "out"]), (["--input_dir", "in"], ["--output_dir", "out"])):
        args = parse("merge_result", i + o + flag)
        assert (args.input_dir, args.output_dir, args.config_path) == ("in", "out", value)


# ------------------------------------------------------------------------------------------------ end to end


@pytest.fixture(scope="module")
def example_dumps(tmp_path_factory):
    """The bundled example pair, with a copy of rank0 as rank1 on each side (for merge_result)."""
    out = tmp_path_factory.mktemp("ref_flags")
    subprocess.run([sys.executable, str(ROOT / "examples" / "make_example_dumps.py"), str(out)], check=True,
                   capture_output=True, timeout=120)
    for side in ("target", "golden"):
        shutil.copytree(out / side / "step0" / "rank0", out / side / "step0" / "rank1")
    return out


def test_xlsx_flag_writes_the_xlsx_report(example_dumps, tmp_path):
    t = example_dumps / "target" / "step0" / "rank0" / "dump.json"
    g = example_dumps / "golden" / "step0" / "rank0" / "dump.json"
    out = tmp_path / "out"
    assert main(["compare", "-tp", str(t), "-gp", str(g), "-o", str(out), "--xlsx", "-c", "-q"]) == 0
    reports = [n for n in os.listdir(out) if n.startswith("compare_result_")]
    assert len(reports) == 1 and reports[0].endswith(".xlsx")


def test_mode_auto_compares(example_dumps, tmp_path):
    t = example_dumps / "target" / "step0" / "rank0" / "dump.json"
    g = example_dumps / "golden" / "step0" / "rank0" / "dump.json"
    assert main(["compare", "-m", "auto", "-tp", str(t), "-gp", str(g), "-o", str(tmp_path / "o"), "-c", "-q"]) == 0


def test_merge_result_config_flag_end_to_end(example_dumps, tmp_path):
    cmp_out = tmp_path / "cmp"
    assert main(["compare", "-tp", str(example_dumps / "target" / "step0"), "-gp",
                 str(example_dumps / "golden" / "step0"), "-o", str(cmp_out), "-c", "-q"]) == 0
    cfg = tmp_path / "config.yaml"
    cfg.write_text("api:\n- Functional.relu\ncompare_index:\n- Max diff\n")
    out = tmp_path / "merged"
    assert main(["merge_result", "-i", str(cmp_out), "-o", str(out), "--config", str(cfg), "-q"]) == 0
    assert len(glob.glob(str(out / "multi_ranks_compare_merge_*.xlsx"))) == 1


@pytest.mark.parametrize("argv,suffix", [
    (["graph_visualize"], ".vis.db"),                 # the reference's 26.x command writes .vis.db
    (["graph", "--file_type", "db"], ".vis.db"),
    (["graph_visualize", "-tensor_log"], ".vis.db"),  # accepted; a warning says graph logs no tensor lines
    (["graph"], ".vis"),
])
def test_graph_reference_command_lines_end_to_end(example_dumps, tmp_path, argv, suffix):
    rank = example_dumps / "target" / "step0" / "rank0"
    golden = example_dumps / "golden" / "step0" / "rank0"
    out = tmp_path / "g"
    assert main([*argv, "-tp", str(rank), "-gp", str(golden), "-o", str(out), "-q"]) == 0
    (written,) = os.listdir(out)
    assert written.startswith("compare_") and written.endswith(suffix) and not written.endswith(".vis.db" if suffix == ".vis" else "~")
