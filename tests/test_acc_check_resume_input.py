"""run_ut -csv_path: a resume CSV that is corrupt in its middle rows, or that belongs to another dump, is one
clear line (exit 2) and is left as it was; a torn last line is still repaired (tests/test_acc_check.py)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

from conftest import ROOT  # noqa: E402
from msprobe.cli.main import main  # noqa: E402

DATA = Path(__file__).parent / "data" / "acc_check"


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """A statistics dump of the small transformer and the result/details pair of a finished run_ut on it."""
    base = tmp_path_factory.mktemp("acc_resume")
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    subprocess.run([sys.executable, str(DATA / "dump_transformer.py"), str(base / "dump"), "statistics"], check=True,
                   env=env, timeout=300, capture_output=True)
    dump = base / "dump" / "step0" / "rank" / "dump.json"
    assert main(["-f", "pytorch", "run_ut", "-api_info", str(dump), "-o", str(base / "run"), "-q"]) == 0
    res = next((base / "run").glob("accuracy_checking_result_*.csv"))
    det = next((base / "run").glob("accuracy_checking_details_*.csv"))
    return dump, res, det


def _copy(finished, tmp_path):
    _, res, det = finished
    shutil.copy(res, tmp_path / res.name)
    shutil.copy(det, tmp_path / det.name)
    return tmp_path / res.name, tmp_path / det.name


def _one_line(capsys):
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("msprobe: error: ") and "Traceback" not in err[0], err
    return err[0]


def test_torn_detail_row_in_the_middle_is_one_line(tmp_path, finished, capsys):
    dump = finished[0]
    res, det = _copy(finished, tmp_path)
    lines = det.read_text(encoding="utf-8").splitlines(True)
    assert lines[3].startswith("Functional.") or lines[3].startswith("Tensor.") or lines[3].startswith("Torch.")
    lines[3] = lines[3].split(",")[0] + ",torch.float64\r\n"  # a row cut short, not at the end of the file
    det.write_text("".join(lines), encoding="utf-8")
    before = (res.read_bytes(), det.read_bytes())
    assert main(["-f", "pytorch", "run_ut", "-api_info", str(dump), "-csv_path", str(res), "-q"]) == 2
    line = _one_line(capsys)
    assert "row 4 of its details file" in line and "has 2 fields, not 23" in line and "corrupt" in line, line
    assert (res.read_bytes(), det.read_bytes()) == before  # left as it was


def test_result_csv_of_another_dump_is_one_line(tmp_path, finished, capsys):
    dump = finished[0]
    res, det = _copy(finished, tmp_path)
    with open(res, "a", encoding="utf-8", newline="") as fh:
        fh.write("Torch.not_in_this_dump.0,pass,pass\r\nTorch.not_in_this_dump.1,pass,pass\r\n")
    before = (res.read_bytes(), det.read_bytes())
    assert main(["-f", "pytorch", "run_ut", "-api_info", str(dump), "-csv_path", str(res), "-q"]) == 2
    line = _one_line(capsys)
    assert "API Torch.not_in_this_dump.0 (and 1 more) is not in dump.json" in line and "another dump" in line, line
    assert (res.read_bytes(), det.read_bytes()) == before


def test_resume_with_filter_keeps_the_apis_it_leaves_out(tmp_path, finished, capsys):
    """-f leaves out repeated calls; a CSV judged without -f names them, and that is not 'another dump'."""
    dump = Path(finished[0])
    dj = json.loads(dump.read_text())
    twin = json.loads(json.dumps(dj["data"]["Tensor.reshape.0.forward"]))
    dj["data"]["Tensor.reshape.9.forward"] = twin  # an identical call, dropped by -f
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "dump.json").write_text(json.dumps(dj))
    out = tmp_path / "o"
    assert main(["-f", "pytorch", "run_ut", "-api_info", str(tmp_path / "d" / "dump.json"), "-o", str(out), "-q"]) == 0
    res = next(out.glob("accuracy_checking_result_*.csv"))
    rows_before = res.read_text(encoding="utf-8").count("\n")
    assert main(["-f", "pytorch", "run_ut", "-api_info", str(tmp_path / "d" / "dump.json"), "-csv_path", str(res),
                 "-f", "-q"]) == 0
    assert "0 APIs checked" in capsys.readouterr().out
    assert res.read_text(encoding="utf-8").count("\n") == rows_before  # nothing judged twice, nothing added


@pytest.mark.parametrize("command", ["run_ut", "run_overflow_check"])
@pytest.mark.parametrize("value", ["nan", "0", "-3"])
def test_timeout_that_is_not_a_positive_number_is_one_line(tmp_path, finished, capsys, command, value):
    """--timeout nan was taken: no API could ever time out and the pool's wait became a busy loop."""
    out = tmp_path / "never"
    assert main(["-f", "pytorch", command, "-api_info", str(finished[0]), "-o", str(out), "--timeout", value]) == 2
    assert "--timeout must be a positive number of seconds" in _one_line(capsys)
    assert not out.exists()
