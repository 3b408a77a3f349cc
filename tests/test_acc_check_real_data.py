"""run_ut in real-data mode on a tensor dump with some tensor files gone or damaged: those APIs are SKIP with the
reason in one CSV cell line (which file, what is wrong), every other API is judged, the run does not stop."""

from __future__ import annotations

import csv
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


def test_missing_and_damaged_tensor_files_skip_only_their_apis(tmp_path, capsys):
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    subprocess.run([sys.executable, str(DATA / "dump_transformer.py"), str(tmp_path / "orig"), "tensor"], check=True,
                   env=env, timeout=300, capture_output=True)
    rank = tmp_path / "copy" / "rank"
    shutil.copytree(tmp_path / "orig" / "step0" / "rank", rank)
    shutil.rmtree(tmp_path / "orig")  # the recorded dump_data_dir is gone: the copy's dump_tensor_data is read
    data = rank / "dump_tensor_data"
    (data / "Functional.linear.0.forward.input.0.pt").unlink()
    (data / "Torch.add.0.forward.input.0.pt").write_bytes(b"not a tensor file")
    before = (rank / "dump.json").read_bytes()
    out = tmp_path / "out"
    assert main(["-f", "pytorch", "run_ut", "-api_info", str(rank / "dump.json"), "-o", str(out), "-q", "-j", "2"]) == 0
    assert "32 APIs checked: 29 passed, 0 warning, 0 error, 3 skipped" in capsys.readouterr().out
    res = next(out.glob("accuracy_checking_result_*.csv"))
    rows = {r[0]: r for r in csv.reader(res.read_text(encoding="utf-8-sig").splitlines())}
    assert rows["Functional.linear.0"][1:] == [
        "SKIP", "SKIP", "no data: tensor file Functional.linear.0.forward.input.0.pt of Functional.linear.0 is missing. SKIP."]
    add = rows["Torch.add.0"]
    assert add[1:3] == ["SKIP", "SKIP"]
    assert add[3].startswith("Run Torch.add.0 UT Error: cannot load ") and "Torch.add.0.forward.input.0.pt" in add[3]
    assert "\n" not in add[3]  # one line, not torch's page-long weights_only explanation
    assert rows["Functional.linear.1"][1:3] == ["pass", "pass"] and rows["Torch.add.1"][1:3] == ["pass", "pass"]
    assert (rank / "dump.json").read_bytes() == before  # input untouched
    assert json.loads(before)["task"] == "tensor"
