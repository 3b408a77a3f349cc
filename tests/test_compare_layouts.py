"""compare layouts beyond dump.json pairs: MindSpore kernel dumps (--rank/--step), graph/ + pynative/,
single-point debug.json."""

from __future__ import annotations

import csv
import glob
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from conftest import FIXTURES, ROOT
from msprobe.cli.main import main

DATA = Path(__file__).parent / "data" / "compare_layouts"

STAT_HEADER = ("Op Type,Op Name,Task ID,Stream ID,Timestamp,IO,Slot,Data Size,Data Type,Shape,Max Value,Min Value,"
               "Avg Value,Count,Negative Zero Count,Positive Zero Count,NaN Count,Negative Inf Count,"
               "Positive Inf Count,Zero Count,L2Norm Value")


def read_csv(path):
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


def _npy(d: Path, op_type, op_name, task, ts, io, slot, arr):
    d.mkdir(parents=True, exist_ok=True)
    np.save(d / f"{op_type}.{op_name}.{task}.0.{ts}.{io}.{slot}.DefaultFormat.npy", arr)


def make_npy_dump(root: Path, shift: float, extra: bool):
    rng = np.random.RandomState(0)
    a = rng.randn(4, 8).astype(np.float32)
    w = rng.randn(8, 3).astype(np.float32)
    for step in (0, 1):
        d = root / "rank_0" / "net" / "0" / str(step)
        _npy(d, "MatMul", "Default_network-MatMul-op1", 1, 1000 + step, "input", 0, a)
        _npy(d, "MatMul", "Default_network-MatMul-op1", 1, 1000 + step, "input", 1, w)
        _npy(d, "MatMul", "Default_network-MatMul-op1", 1, 1001 + step, "output", 0, a @ w + shift)
        # the same kernel launched twice: paired by launch order (timestamp)
        _npy(d, "ReLU", "Default_network-ReLU-op2", 2, 2000, "output", 0, np.maximum(a, 0))
        _npy(d, "ReLU", "Default_network-ReLU-op2", 2, 3000, "output", 0, np.maximum(a, 0) * 2 + shift)
        if extra:
            _npy(d, "Add", "Default_network-Add-op3", 3, 4000, "output", 0, a + 1)


def make_stat_dump(root: Path, shift: float):
    d = root / "0" / "net" / "0" / "0"
    d.mkdir(parents=True)
    lines = [STAT_HEADER,
             f"MatMul,Default_network-MatMul-op1,1,0,1000,output,0,48,float32,\"(4, 3)\",{2.5 + shift},-1.5,0.25,12,0,0,0,0,0,0,{4.0 + shift}",
             "ReLU,Default_network-ReLU-op2,2,0,1100,output,0,128,float32,\"(4, 8)\",1.9,0,0.4,32,0,0,0,0,0,0,3.1",
             "Cast,Default_network-Cast-op3,3,0,1200,output,0,4,int32,\"()\",1,1,1,1,0,0,0,0,0,0,1"]
    (d / "statistic.csv").write_text("\n".join(lines) + "\n")


# ------------------------------------------------------------------------------------------ kernel dumps
def test_kernel_npy_compare_per_rank_and_step(tmp_path, capsys):
    make_npy_dump(tmp_path / "npu", 0.05, extra=True)
    make_npy_dump(tmp_path / "bench", 0.0, extra=False)
    out = tmp_path / "out"
    assert main(["compare", "-tp", str(tmp_path / "npu"), "-gp", str(tmp_path / "bench"), "-o", str(out),
                 "--rank", "", "--csv"]) == 0
    reports = sorted(os.listdir(out))
    assert [r.rsplit("_", 1)[0] for r in reports] == ["compare_result_0_0", "compare_result_0_1"]
    rows = read_csv(out / reports[0])
    assert len(rows) == 6  # 5 kernel tensors paired + the NPU-only Add
    by = {(Path(r["NPU Name"]).name if r["NPU Name"] != "N/A" else r["Bench Name"]): r for r in rows}
    mm_in = next(r for n, r in by.items() if "MatMul" in n and ".input.0." in n)
    assert float(mm_in["Cosine"]) == 1.0 and float(mm_in["MaxAbsErr"]) == 0.0 and mm_in["Accuracy Reached or Not"] == "Yes"
    mm_out = next(r for n, r in by.items() if "MatMul" in n and ".output." in n)
    assert float(mm_out["MaxAbsErr"]) == pytest.approx(0.05, rel=1e-4)
    relus = [r for n, r in by.items() if "ReLU" in n]
    assert len(relus) == 2
    first, second = sorted(relus, key=lambda r: r["NPU Name"])
    assert float(first["MaxAbsErr"]) == 0.0  # first launch pairs with the first launch
    assert float(second["MaxAbsErr"]) == pytest.approx(0.05, rel=1e-4)
    add = next(r for n, r in by.items() if "Add" in n)
    assert add["Bench Name"] == "N/A" and add["Err_message"] == "Dump file not found." and add["Accuracy Reached or Not"] == "No"
    assert float(mm_in["NPU max"]) == pytest.approx(float(mm_in["Bench max"]))
    # --step picks one iteration
    out2 = tmp_path / "out2"
    assert main(["compare", "-tp", str(tmp_path / "npu"), "-gp", str(tmp_path / "bench"), "-o", str(out2),
                 "--rank", "0", "--step", "1", "--csv"]) == 0
    assert [r.rsplit("_", 1)[0] for r in os.listdir(out2)] == ["compare_result_0_1"]


def test_kernel_statistic_csv_and_legacy_compare_json(tmp_path):
    make_stat_dump(tmp_path / "npu", 0.5)
    make_stat_dump(tmp_path / "bench", 0.0)
    cfg = tmp_path / "compare.json"
    cfg.write_text(json.dumps({"npu_path": str(tmp_path / "npu"), "bench_path": str(tmp_path / "bench"),
                               "rank_id": [0], "step_id": []}))
    out = tmp_path / "out"
    assert main(["-f", "mindspore", "compare", "-i", str(cfg), "-o", str(out)]) == 0
    (report,) = os.listdir(out)
    assert report.startswith("compare_result_0_0_") and report.endswith(".xlsx")
    import openpyxl

    ws = openpyxl.load_workbook(out / report, read_only=True).worksheets[0]
    rows = [list(r) for r in ws.iter_rows(values_only=True)]
    header, body = rows[0], rows[1:]
    assert header[-10:] == ["Max diff", "Min diff", "Mean diff", "L2norm diff", "MaxRelativeErr", "MinRelativeErr",
                            "MeanRelativeErr", "NormRelativeErr", "NPU CSV File", "Bench CSV File"]
    cell = {r[0]: dict(zip(header, r)) for r in body}
    mm = cell["Default_network-MatMul-op1.1.output.0"]
    assert mm["Max diff"] == pytest.approx(0.5) and mm["MaxRelativeErr"] == pytest.approx(0.2)  # "20.0%", written as a percent number
    assert mm["Accuracy Reached or Not"] == "Yes"  # 0.5 / 3.0 <= 0.5
    assert cell["Default_network-ReLU-op2.2.output.0"]["Max diff"] == 0.0
    cast = cell["Default_network-Cast-op3.3.output.0"]
    assert cast["Err_message"] == "This is type of scalar data, can not compare."


def test_kernel_compare_bad_input(tmp_path, capsys):
    (tmp_path / "empty_a").mkdir()
    (tmp_path / "empty_b").mkdir()
    assert main(["compare", "-tp", str(tmp_path / "empty_a"), "-gp", str(tmp_path / "empty_b"), "-o",
                 str(tmp_path / "o"), "--rank", "0"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "has no MindSpore kernel dump dirs" in err[0]
    assert main(["compare", "-tp", str(tmp_path / "empty_a"), "-gp", str(tmp_path / "empty_b"), "-o",
                 str(tmp_path / "o"), "--rank", "x"]) == 2
    assert "--rank must be a list of non-negative integers" in capsys.readouterr().err


# ------------------------------------------------------------------------------------------ graph + pynative
def test_graph_and_pynative_layout_one_report_per_sub_layout_and_step(tmp_path, capsys):
    case = FIXTURES / "mindspore_cpu_mix"
    if not case.is_dir():
        pytest.skip(f"reference fixtures not found at {FIXTURES} (../shared/fixtures is absent)")
    for side, src in (("t", "target"), ("g", "golden")):
        for folder in ("graph", "pynative"):
            for step in ("step0", "step1"):
                if side == "g" and folder == "graph" and step == "step1":
                    continue  # only in the target: skipped with a warning
                d = tmp_path / side / folder / step / "rank0"
                d.mkdir(parents=True)
                for f in next((case / src / step).glob("proc*")).iterdir():
                    shutil.copy(f, d / f.name)
    out = tmp_path / "out"
    assert main(["compare", "-tp", str(tmp_path / "t"), "-gp", str(tmp_path / "g"), "-o", str(out), "-c", "--csv"]) == 0
    got = sorted(str(Path(p).relative_to(out).parent) + "/" + Path(p).name.rsplit("_", 1)[0]
                 for p in glob.glob(str(out / "**" / "*.csv"), recursive=True))
    assert got == ["graph/step0/compare_result_rank0", "pynative/step0/compare_result_rank0",
                   "pynative/step1/compare_result_rank0"]
    printed = capsys.readouterr()
    assert "compare graph/step0 rank0: statistics mode, 174 rows, 174 matched" in printed.out
    assert "step1 only in one of the runs" in printed.err


# ------------------------------------------------------------------------------------------ debug.json
@pytest.fixture(scope="module")
def debug_dumps(tmp_path_factory):
    pytest.importorskip("torch")
    base = tmp_path_factory.mktemp("debug")
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    for side, shift in (("t", "0.01"), ("g", "0.0")):
        subprocess.run([sys.executable, str(DATA / "debug_save.py"), str(base / side), shift], check=True, env=env,
                       timeout=300)
    return base


def test_debug_json_pair(tmp_path, debug_dumps):
    t = debug_dumps / "t" / "step0" / "rank" / "debug.json"
    g = debug_dumps / "g" / "step0" / "rank" / "debug.json"
    out = tmp_path / "out"
    assert main(["compare", "-tp", str(t), "-gp", str(g), "-o", str(out), "--csv", "-c"]) == 0
    (report,) = os.listdir(out)
    assert report.startswith("debug_compare_result_") and report.endswith(".csv")
    rows = read_csv(out / report)
    assert [r["NPU Name"] for r in rows] == ["x.0.debug", "out.0.debug.y", "out.0.debug.scale", "out.0.debug.parts.0",
                                             "out.0.debug.parts.1"]
    assert all(r["Match"] == "exact" for r in rows)
    x = rows[0]
    assert float(x["Mean diff"]) == pytest.approx(0.01, rel=1e-3)
    # rank dirs holding debug.json work too
    out2 = tmp_path / "out2"
    assert main(["compare", "-tp", str(t.parent.parent), "-gp", str(g.parent.parent), "-o", str(out2), "--csv", "-c"]) == 0
    # a single-process 'rank' dir is named like a file pair (no dangling 'rank_')
    assert re.match(r"^debug_compare_result_\d{14}\.csv$", os.listdir(out2)[0])


def test_debug_json_against_dump_json_is_refused(tmp_path, debug_dumps, capsys):
    t = debug_dumps / "t" / "step0" / "rank" / "debug.json"
    other = tmp_path / "dump.json"
    other.write_text(t.read_text())
    assert main(["compare", "-tp", str(t), "-gp", str(other), "-o", str(tmp_path / "o")]) == 2
    assert "one side is a debug.json and the other is not" in capsys.readouterr().err
