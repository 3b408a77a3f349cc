"""code_mapping: MindSpore static-graph IR <-> dump files <-> source lines.

* Reference parity on ../shared/fixtures/reference/mindspore_ir (inference and training IR + tensor dumps,
  with the CSVs that the real mindstudio-probe 8.3.3 wrote): every reference row is in our CSV with the
  same code stack and scope, minus the rows its substring matching gets wrong (none in this fixture: the
  test computes them and says so).
* Hand-made IR files (tests/data/code_mapping): op1 vs op10, subgraphs with repeated %n numbers and a
  scope shared by two graphs, backward nodes linked to their forward node, a scope longer than the
  reference's 200-character limit reached through mapping.csv, a statistic.csv.
* Bad input: one clear line, exit status 2.
"""

from __future__ import annotations

import csv
import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT, fixtures_or_skip
from msprobe.cli.main import main
from msprobe.core.code_mapping import parse_ir
from msprobe.core.code_mapping.ir import FORWARD_HEADER

DATA = ROOT / "tests" / "data" / "code_mapping"
_spec = importlib.util.spec_from_file_location("_msprobe_refvenv", ROOT / "benchmarks" / "refvenv.py")
refvenv = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(refvenv)
REF_PYTHON = refvenv.ref_venv("venv833") / "bin" / "python"
HEADER = ["File Path", "Code Stack", "Scope Name"]
LONG_SCOPE = "Default/" + "/".join(f"layer{i}-TransformerLayer" for i in range(10)) + "/attention-Attention/MatMul-op3"


def _run(capsys, *args):
    rc = main(list(args))
    out, err = capsys.readouterr()
    return rc, out, err


def _read_csv(path):
    with open(path, newline="", encoding="utf-8") as fh:
        rows = list(csv.reader(fh))
    return rows[0], rows[1:]


def _only_csv(directory: Path) -> Path:
    found = sorted(directory.glob("code_mapping_*.csv"))
    assert len(found) == 1, found
    return found[0]


def _touch(directory: Path, *names: str) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    for name in names:
        (directory / name).write_bytes(b"")


def _npy(op_type: str, op_name: str, n: int, io: str = "output") -> str:
    return f"{op_type}.{op_name}.0.0.{1700000000000000 + n}.{io}.0.DefaultFormat.Float32.npy"


# ---------------------------------------------------------------- reference parity on the fixture

FIXTURE_COUNTS = {  # rows, rows with a scope (the others: Parameter dumps, and AddN-op0 that the IR does not hold)
    "infer": (39, 32),
    "train": (161, 135),
}


def _substring_scopes(op_name: str, keys) -> list:
    """The reference's rule: every scope key that occurs anywhere inside the op name."""
    return sorted(k for k in keys if k and k in op_name)


@pytest.mark.parametrize("case", ["infer", "train"])
def test_fixture_matches_reference(case, tmp_path, capsys):
    base = fixtures_or_skip() / "mindspore_ir" / case
    ir = base / "dump" / "rank_0" / "graphs" / "ms_output_trace_code_graph_0.ir"
    ref_csv = next((base / "code_mapping_msprobe833").glob("code_mapping_*.csv"))
    rc, out, err = _run(capsys, "-f", "mindspore", "code_mapping", "--ir", str(ir), "--dump_data", str(base / "dump"),
                        "--output", str(tmp_path))
    assert rc == 0, err
    header, ours = _read_csv(_only_csv(tmp_path))
    ref_header, ref = _read_csv(ref_csv)
    assert header == ref_header == HEADER

    def rel(p):  # the reference ran from another checkout of the fixture: compare below mindspore_ir/
        return p.split("/mindspore_ir/", 1)[1]

    ours_by = {rel(r[0]): r for r in ours}
    ref_by = {rel(r[0]): r for r in ref}
    assert len(ours_by) == len(ours) and len(ref_by) == len(ref)
    rows, scoped = FIXTURE_COUNTS[case]
    assert len(ref) == len(ours) == rows
    assert sum(1 for r in ours if r[2]) == scoped
    assert all(os.path.isabs(r[0]) and os.path.isfile(r[0]) for r in ours)

    # rows the reference got wrong through substring matching: its scopes differ from the exact key's
    keys = {n.key for n in parse_ir(str(ir)).nodes}
    bug_rows = []
    for path, row in ref_by.items():
        op = os.path.basename(path).split(".")[1]
        exact = [op] if op in keys else []
        if sorted(s.replace("/", "_") for s in row[2].split("\n") if s) != exact:
            bug_rows.append(path)
        # and the substring rule finds nothing more than the exact key for this network
        assert _substring_scopes(op, keys) == exact
    assert bug_rows == [], "this fixture has no op-name pair like op1/op10, so no reference row is wrong"

    for path, row in ref_by.items():
        if path in bug_rows:
            continue
        assert path in ours_by, path
        assert ours_by[path][1] == row[1], path  # same code stack, line for line
        assert ours_by[path][2] == row[2], path  # same scope

    # spot checks of real values
    relu = [r for p, r in ours_by.items() if "ReLU_ReLU-op0" in p and ".output.0." in p]
    assert len(relu) == 1
    if case == "infer":
        assert relu[0][2] == "Default/block-Block/act-ReLU/ReLU-op0"
        assert relu[0][1].splitlines()[-1] == (
            "In file /usr/local/lib/python3.11/site-packages/mindspore/nn/layer/activation.py:525, 15~31/"
            "        return self.relu(input)")
        assert len(relu[0][1].splitlines()) == 6
    else:
        grad = [r for p, r in ours_by.items() if "Grad_ReLU_ReluGrad-op0" in p]
        assert grad and all(r[1].startswith(FORWARD_HEADER + "\nIn file ") for r in grad)
        assert all(r[2] == "Gradients/Default/network-WithLossCell/_backbone-Net/block-Block/act-ReLU/Grad_ReLU/ReluGrad-op0"
                   for r in grad)
    params = [r for p, r in ours_by.items() if os.path.basename(p).startswith("Parameter.")]
    assert params and all(r[1] == "" and r[2] == "" for r in params)
    assert f"tensor files: {rows}, linked to IR nodes: {scoped}" in out


def test_fixture_ir_structure():
    base = fixtures_or_skip() / "mindspore_ir" / "train"
    index = parse_ir(str(base / "dump" / "rank_0" / "graphs" / "ms_output_trace_code_graph_0.ir"))
    assert index.entries == ["kernel_graph0"] and index.graphs == ["kernel_graph0"]
    assert index.node_lines == len(index.nodes) == 57
    mm = index.lookup("Default_network-WithLossCell__backbone-Net_head-Dense_MatMul-op0")
    assert len(mm) == 1 and mm[0].number == "11" and mm[0].op == "PrimFunc_MatMul" and mm[0].unique_id == "8844"
    grad = index.lookup("Gradients_Default_network-WithLossCell__backbone-Net_head-Dense_Grad_MatMul_MatMul-op0")
    assert len(grad) == 1 and grad[0].forward_unique_id == "8844"
    # MindSpore 2.10 prints the forward stack on backward nodes itself: they keep it, nothing is inherited
    assert grad[0].code[0] == FORWARD_HEADER and index.backward_linked == 0
    # the RealDiv node has a tensor constant printed over three lines: its scope is still its own
    rd = index.lookup("Gradients_Default_network-WithLossCell__loss_fn-MSELoss_Grad_ReduceMean_RealDiv-op0")
    assert len(rd) == 1 and rd[0].number == "17" and rd[0].forward_unique_id == "8653"


# ---------------------------------------------------------------- op1 vs op10

def _suffix_dump(tmp_path: Path) -> Path:
    dump = tmp_path / "dump"
    _touch(dump, _npy("ReLU", "Default_ReLU-op1", 1), _npy("ReLU", "Default_ReLU-op10", 2),
           _npy("Add", "Default_Add-op2", 3, "input"))
    return dump


def test_op1_is_not_op10(tmp_path, capsys):
    dump = _suffix_dump(tmp_path)
    rc, out, err = _run(capsys, "code_mapping", "--ir", str(DATA / "op_suffix.ir"), "--dump_data", str(dump),
                        "--output", str(tmp_path / "out"))
    assert rc == 0, err
    _, rows = _read_csv(_only_csv(tmp_path / "out"))
    by = {os.path.basename(r[0]).split(".")[1]: r for r in rows}
    assert by["Default_ReLU-op10"][1:] == ["In file /home/user/net.py:20, 8~20/        y = self.relu(x)", "Default/ReLU-op10"]
    assert by["Default_ReLU-op1"][1:] == ["In file /home/user/net.py:10, 8~20/        x = self.relu(x)", "Default/ReLU-op1"]
    assert by["Default_Add-op2"][1:] == ["In file /home/user/net.py:21, 15~20/        return x + y", "Default/Add-op2"]
    assert [r[0] for r in rows] == sorted(str(p) for p in dump.iterdir())


def _reference(tmp_path: Path, ir: Path, dump: Path):
    if not REF_PYTHON.exists():
        pytest.skip(f"the reference (mindstudio-probe 8.3.3) is not installed at {REF_PYTHON} "
                    "($MSPROBE_REF_CACHE/venv833, cache default ~/.cache/msprobe-ref); build it with the "
                    "venv833 line of benchmarks/README.md")
    out = tmp_path / "ref_out"
    proc = subprocess.run([str(REF_PYTHON), str(DATA / "run_reference.py"), "--ir", str(ir), "--dump_data", str(dump),
                           "--output", str(out)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    _, rows = _read_csv(_only_csv(out))
    return {os.path.basename(r[0]): r for r in rows}


def test_reference_pairs_op1_with_op10(tmp_path, capsys):
    """The reference itself on the same input: its op10 row also lists op1; every other row is ours."""
    dump = _suffix_dump(tmp_path)
    ref = _reference(tmp_path, DATA / "op_suffix.ir", dump)
    assert main(["code_mapping", "--ir", str(DATA / "op_suffix.ir"), "--dump_data", str(dump), "--output", str(tmp_path / "o")]) == 0
    capsys.readouterr()
    _, rows = _read_csv(_only_csv(tmp_path / "o"))
    ours = {os.path.basename(r[0]): r for r in rows}
    op10 = _npy("ReLU", "Default_ReLU-op10", 2)
    assert ref[op10][2] == "Default/ReLU-op1\nDefault/ReLU-op10"  # the substring bug
    assert ours[op10][2] == "Default/ReLU-op10"
    assert {k: v[1:] for k, v in ref.items() if k != op10} == {k: v[1:] for k, v in ours.items() if k != op10}


# ---------------------------------------------------------------- subgraphs

def _subgraph_dump(tmp_path: Path) -> Path:
    dump = tmp_path / "dump"
    _touch(dump / "rank_0" / "Net" / "1" / "0", _npy("Exp", "Default_body-Body_Exp-op0", 1),
           _npy("Neg", "Default_shared-Shared_Neg-op0", 2))
    _touch(dump / "rank_0" / "Net" / "0" / "0", _npy("Neg", "Default_shared-Shared_Neg-op0", 3),
           _npy("Sin", "Default_head-Head_Sin-op0", 4))
    return dump


def test_subgraphs(tmp_path, capsys):
    index = parse_ir(str(DATA / "subgraphs.ir"))
    assert index.graphs == ["kernel_graph1", "kernel_graph0"]
    assert [(n.graph, n.number, n.name) for n in index.nodes] == [
        ("kernel_graph1", "0", "x"), ("kernel_graph1", "1", "CNode_7"),
        ("kernel_graph0", "0", "x"), ("kernel_graph0", "1", "CNode_8"), ("kernel_graph0", "2", "CNode_9")]
    assert index.nodes[-1].op == "@kernel_graph1"  # a call of a subgraph is a node too
    assert [n.graph for n in index.lookup("Default_shared-Shared_Neg-op0")] == ["kernel_graph1", "kernel_graph0"]

    dump = _subgraph_dump(tmp_path)
    rc, out, err = _run(capsys, "code_mapping", "--ir", str(DATA / "subgraphs.ir"), "--dump_data", str(dump),
                        "--output", str(tmp_path / "out"))
    assert rc == 0, err
    _, rows = _read_csv(_only_csv(tmp_path / "out"))
    got = {(Path(r[0]).parent.parent.name, os.path.basename(r[0]).split(".")[1]): (r[1], r[2]) for r in rows}
    assert got == {
        # %0(x) of kernel_graph0 repeats the %0(x) of kernel_graph1: still its own node
        ("0", "Default_head-Head_Sin-op0"): ("In file /home/user/net.py:20, 15~25/        return ops.sin(x)", "Default/head-Head/Sin-op0"),
        ("1", "Default_body-Body_Exp-op0"): ("In file /home/user/net.py:30, 15~25/        return ops.exp(y)", "Default/body-Body/Exp-op0"),
        # one scope in two graphs: the dump's graph_id directory picks kernel_graph{id}
        ("0", "Default_shared-Shared_Neg-op0"): ("In file /home/user/net.py:40, 15~25/        return -z  # first call", "Default/shared-Shared/Neg-op0"),
        ("1", "Default_shared-Shared_Neg-op0"): ("In file /home/user/net.py:41, 15~25/        return -z  # second call", "Default/shared-Shared/Neg-op0"),
    }
    assert "5 nodes, 5 with a scope, 2 graph(s)" in out


def test_shared_scope_without_graph_id_lists_both(tmp_path, capsys):
    dump = tmp_path / "flat"
    _touch(dump, _npy("Neg", "Default_shared-Shared_Neg-op0", 1))
    assert main(["code_mapping", "--ir", str(DATA / "subgraphs.ir"), "--dump_data", str(dump), "--output", str(tmp_path / "o")]) == 0
    capsys.readouterr()
    _, rows = _read_csv(_only_csv(tmp_path / "o"))
    assert rows[0][1] == ("In file /home/user/net.py:41, 15~25/        return -z  # second call\n"
                          "In file /home/user/net.py:40, 15~25/        return -z  # first call")
    assert rows[0][2] == "Default/shared-Shared/Neg-op0\nDefault/shared-Shared/Neg-op0"


# ---------------------------------------------------------------- backward -> forward, long scopes

def test_backward_nodes_take_forward_code(tmp_path, capsys):
    index = parse_ir(str(DATA / "backward.ir"))
    assert index.node_lines == 7 and len(index.nodes) == 6  # the Load without a scope line is not indexed
    assert index.lookup("Gradients_Default_fc-Dense_Grad_MatMul_MatMul-op1")[0].name == "CNode_7"  # not the Load's
    assert index.backward_linked == 2

    dump = tmp_path / "dump"
    long_name = _npy("Softmax", LONG_SCOPE.replace("/", "_"), 5)
    assert len(long_name) > 255  # too long for a file name: the dumper shortens it and writes mapping.csv
    _touch(dump, _npy("MatMul", "Default_fc-Dense_MatMul-op0", 1),
           _npy("MatMul", "Gradients_Default_fc-Dense_Grad_MatMul_MatMul-op1", 2),
           _npy("MatMul", "Gradients_Default_fc-Dense_Grad_MatMul_MatMul-op2", 3),
           _npy("Mul", "Gradients_Default_Grad_Mul_Mul-op1", 4), "12345.npy")
    (dump / "mapping.csv").write_text(f"12345.npy,{long_name}\n")
    rc, out, err = _run(capsys, "code_mapping", "--ir", str(DATA / "backward.ir"), "--dump_data", str(dump),
                        "--output", str(tmp_path / "out"))
    assert rc == 0, err
    _, rows = _read_csv(_only_csv(tmp_path / "out"))
    by = {os.path.basename(r[0]): r[1:] for r in rows}
    fwd = ("In file /home/user/net.py:14, 4~48/    def construct(self, x):\n"
           "In file /usr/lib/mindspore/nn/layer/basic.py:807, 12~39/        x = self.matmul(x, self.weight)")
    assert by[_npy("MatMul", "Default_fc-Dense_MatMul-op0", 1)] == [fwd, "Default/fc-Dense/MatMul-op0"]
    # no code lines of its own: the forward node's (forward_unique_id 101)
    assert by[_npy("MatMul", "Gradients_Default_fc-Dense_Grad_MatMul_MatMul-op1", 2)] == [
        FORWARD_HEADER + "\n" + fwd, "Gradients/Default/fc-Dense/Grad_MatMul/MatMul-op1"]
    # its own source lines: kept as written
    assert by[_npy("MatMul", "Gradients_Default_fc-Dense_Grad_MatMul_MatMul-op2", 3)] == [
        FORWARD_HEADER + "\nIn file /home/user/net.py:14, 4~48/    def construct(self, x):",
        "Gradients/Default/fc-Dense/Grad_MatMul/MatMul-op2"]
    # only a "Corresponding code candidate:" header: the forward node's (forward_unique_id 102)
    assert by[_npy("Mul", "Gradients_Default_Grad_Mul_Mul-op1", 4)] == [
        FORWARD_HEADER + "\nIn file /home/user/net.py:16, 8~20/        x = x * self.ones", "Gradients/Default/Grad_Mul/Mul-op1"]
    # a 290-character scope, reached through mapping.csv
    assert by["12345.npy"] == ["In file /home/user/net.py:50, 8~30/        return self.softmax(x)", LONG_SCOPE]
    assert "2 backward node(s) given their forward node's code" in out


def test_shortened_name_without_mapping_csv(tmp_path, capsys):
    dump = tmp_path / "dump"
    _touch(dump, "12345.npy", _npy("Mul", "Default_Mul-op0", 1))
    rc, out, err = _run(capsys, "code_mapping", "--ir", str(DATA / "backward.ir"), "--dump_data", str(dump),
                        "--output", str(tmp_path / "out"))
    assert rc == 0
    _, rows = _read_csv(_only_csv(tmp_path / "out"))
    assert [r[1:] for r in rows if r[0].endswith("12345.npy")] == [["", ""]]
    assert [r[2] for r in rows if "Mul-op0" in r[0]] == ["Default/Mul-op0"]
    assert "without a mapping.csv" in err


def test_single_npy_file(tmp_path, capsys):
    dump = _suffix_dump(tmp_path)
    one = dump / _npy("ReLU", "Default_ReLU-op10", 2)
    assert main(["code_mapping", "--ir", str(DATA / "op_suffix.ir"), "--dump_data", str(one), "--output", str(tmp_path / "o")]) == 0
    capsys.readouterr()
    _, rows = _read_csv(_only_csv(tmp_path / "o"))
    assert rows == [[str(one), "In file /home/user/net.py:20, 8~20/        y = self.relu(x)", "Default/ReLU-op10"]]


# ---------------------------------------------------------------- statistic.csv

def test_statistic_csv_copy_with_code(tmp_path, capsys):
    dump = tmp_path / "stat_dump"
    shutil.copytree(DATA / "stat_dump", dump)
    src = dump / "rank_0" / "Net" / "1" / "0" / "statistic.csv"
    before = src.read_bytes()
    out_dir = tmp_path / "out"
    rc, out, err = _run(capsys, "-f", "mindspore", "code_mapping", "--ir", str(DATA / "subgraphs.ir"),
                        "--dump_data", str(dump), "--output", str(out_dir))
    assert rc == 0, err
    assert src.read_bytes() == before  # the input is never modified
    assert not list(out_dir.glob("code_mapping_*.csv"))  # no tensor file, no tensor CSV
    result = out_dir / "rank_0" / "Net" / "1" / "0" / "statistic.csv"
    header, rows = _read_csv(result)
    src_header, src_rows = _read_csv(src)
    assert header == src_header + ["Code Stack", "Scope Name"]  # no empty 'Unnamed' column
    assert len(rows) == 4
    for got, orig in zip(rows, src_rows):
        assert got[:len(src_header)] == orig[:len(src_header)]  # original cells verbatim
    assert rows[0][-2:] == ["In file /home/user/net.py:30, 15~25/        return ops.exp(y)", "Default/body-Body/Exp-op0"]
    assert rows[1][-2:] == rows[0][-2:]
    # graph 1 (from Net/1/0) -> kernel_graph1's Neg
    assert rows[2][-2:] == ["In file /home/user/net.py:41, 15~25/        return -z  # second call", "Default/shared-Shared/Neg-op0"]
    assert rows[3][-2:] == ["", ""]  # Neg-op01 is not Neg-op0
    assert "statistic rows: 4, linked to IR nodes: 3" in out

    # a second run never replaces the first result
    assert main(["code_mapping", "--ir", str(DATA / "subgraphs.ir"), "--dump_data", str(src), "--output",
                 str(out_dir / "rank_0" / "Net" / "1" / "0")]) == 0
    capsys.readouterr()
    assert (out_dir / "rank_0" / "Net" / "1" / "0" / "statistic_1.csv").read_bytes() == result.read_bytes()


def test_statistic_output_inside_the_dump(tmp_path, capsys):
    """--output inside --dump_data: a later run does not map its own earlier results again."""
    dump = tmp_path / "stat_dump"
    shutil.copytree(DATA / "stat_dump", dump)
    for _ in range(2):
        rc, out, err = _run(capsys, "code_mapping", "--ir", str(DATA / "subgraphs.ir"), "--dump_data", str(dump),
                            "--output", str(dump / "mapped"))
        assert rc == 0, err
    found = sorted(str(p.relative_to(dump)) for p in dump.rglob("statistic*.csv"))
    assert found == ["mapped/rank_0/Net/1/0/statistic.csv", "mapped/rank_0/Net/1/0/statistic_1.csv",
                     "rank_0/Net/1/0/statistic.csv"]
    assert "skipped 1 statistic.csv that already hold Code Stack and Scope Name" in err


def test_statistic_csv_without_op_name(tmp_path, capsys):
    (tmp_path / "statistic.csv").write_text("Op Type,Name\nAdd,x\n")
    rc, out, err = _run(capsys, "code_mapping", "--ir", str(DATA / "op_suffix.ir"), "--dump_data",
                        str(tmp_path / "statistic.csv"), "--output", str(tmp_path / "o"))
    assert rc == 2 and "has no 'Op Name' column" in err and "Traceback" not in err


# ---------------------------------------------------------------- outputs are never replaced

def test_second_run_gets_a_new_file(tmp_path, capsys, monkeypatch):
    from msprobe.core.code_mapping import bind

    monkeypatch.setattr(bind.time, "strftime", lambda fmt, *a: "20260101000000")
    dump = _suffix_dump(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    taken = out / "code_mapping_20260101000000.csv"
    taken.write_text("keep me\n")
    assert main(["code_mapping", "--ir", str(DATA / "op_suffix.ir"), "--dump_data", str(dump), "--output", str(out)]) == 0
    capsys.readouterr()
    assert taken.read_text() == "keep me\n"
    header, rows = _read_csv(out / "code_mapping_20260101000000_1.csv")
    assert header == HEADER and len(rows) == 3


# ---------------------------------------------------------------- bad input

def _error(capsys, *args):
    rc, out, err = _run(capsys, *args)
    assert rc == 2, (out, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("msprobe: error: ") and "Traceback" not in err, err
    return lines[0]


def test_ir_that_is_not_ir(tmp_path, capsys):
    dump = _suffix_dump(tmp_path)
    msg = _error(capsys, "code_mapping", "--ir", str(DATA / "not_ir.txt"), "--dump_data", str(dump), "--output", str(tmp_path / "o"))
    assert "holds no IR node" in msg
    assert not (tmp_path / "o").exists()  # nothing created on error


def test_binary_ir(tmp_path, capsys):
    dump = _suffix_dump(tmp_path)
    pb = tmp_path / "graph.pb"
    pb.write_bytes(b"\x08\x01\x12\x00\x1a\x05graph\x00\x00")
    msg = _error(capsys, "code_mapping", "--ir", str(pb), "--dump_data", str(dump), "--output", str(tmp_path / "o"))
    assert "is a binary file" in msg


def test_dump_dir_without_dump_files(tmp_path, capsys):
    empty = tmp_path / "dump"
    empty.mkdir()
    (empty / "notes.txt").write_text("x")
    msg = _error(capsys, "code_mapping", "--ir", str(DATA / "op_suffix.ir"), "--dump_data", str(empty))
    assert "holds no dump file" in msg


def test_dump_file_of_wrong_kind(tmp_path, capsys):
    msg = _error(capsys, "code_mapping", "--ir", str(DATA / "op_suffix.ir"), "--dump_data", str(DATA / "not_ir.txt"))
    assert "neither a .npy tensor file nor a statistic.csv" in msg


def test_missing_paths(tmp_path, capsys):
    dump = _suffix_dump(tmp_path)
    msg = _error(capsys, "code_mapping", "--ir", str(tmp_path / "nope.ir"), "--dump_data", str(dump))
    assert "--ir" in msg and "does not exist" in msg
    msg = _error(capsys, "code_mapping", "--ir", str(DATA / "op_suffix.ir"), "--dump_data", str(tmp_path / "nope"))
    assert "--dump_data" in msg and "does not exist" in msg


def test_pytorch_framework_refused(tmp_path, capsys):
    msg = _error(capsys, "-f", "pytorch", "code_mapping", "--ir", str(DATA / "op_suffix.ir"), "--dump_data", str(tmp_path))
    assert "-f mindspore" in msg


def test_no_mindspore_or_pandas_import():
    code = ("import sys; import msprobe.core.code_mapping.run, msprobe.cli.code_mapping; "
            "bad = [m for m in ('mindspore', 'pandas', 'torch', 'numpy') if m in sys.modules]; print(bad)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=str(ROOT), timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"
