"""run_overflow_check: the overflowed forward APIs of a float16 dump (tests/data/acc_check/dump_overflow.py) re-run
on the CPU in higher precision: normal overflows (the true result does not fit float16) against one abnormal
overflow (a faulty aten::tanh kernel at dump time returns inf where |tanh| <= 1)."""

from __future__ import annotations

import csv
import os
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from conftest import ROOT  # noqa: E402
from msprobe.cli.main import main  # noqa: E402

DATA = Path(__file__).parent / "data" / "acc_check"
NORMAL = {"Torch.mul.0", "Torch.exp.0", "Torch.relu.0"}


@pytest.fixture(scope="module")
def dumps(tmp_path_factory):
    base = tmp_path_factory.mktemp("ovf_dumps")
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    out = {}
    for kind in ("clean", "broken"):
        for task in ("statistics", "tensor"):
            d = base / f"{kind}_{task}"
            subprocess.run([sys.executable, str(DATA / "dump_overflow.py"), str(d), task]
                           + (["--break-tanh"] if kind == "broken" else []), check=True, env=env, timeout=300,
                           capture_output=True)
            out[kind, task] = d / "step0" / "rank" / "dump.json"
    return out


def result(out):
    files = sorted(Path(out).glob("overflow_check_result_*.csv"))
    assert len(files) == 1
    text = files[0].read_text(encoding="utf-8")
    assert text.startswith("\ufeff")
    rows = list(csv.reader(text[1:].splitlines()))
    assert rows[0] == ["API Name", "Overflowed Outputs", "Input Overflow", "Device Rerun Overflow", "Bench Overflow",
                       "Result", "Message"]
    return {r[0]: r for r in rows[1:]}


@pytest.mark.parametrize("task", ["statistics", "tensor"])
def test_only_the_faulty_kernel_is_abnormal(tmp_path, dumps, capsys, task):
    out = tmp_path / "out"
    assert main(["-f", "pytorch", "run_overflow_check", "-api_info", str(dumps["broken", task]), "-o", str(out),
                 "-j", "2"]) == 0
    captured = capsys.readouterr()
    rows = result(out)
    verdicts = {n: r[5] for n, r in rows.items()}
    assert {n for n, v in verdicts.items() if v == "abnormal"} == {"Torch.tanh.0"}
    # tanh's inf flows into add: an inf input, a normal overflow
    assert {n for n, v in verdicts.items() if v == "normal"} == NORMAL | {"Torch.add.0"}
    assert set(verdicts.values()) == {"normal", "abnormal", "no overflow"}
    tanh = rows["Torch.tanh.0"]
    assert tanh[1] == "output.0" and tanh[4] == "none" and "is finite in torch.float16" in tanh[6]
    assert rows["Torch.mul.0"][4] == "output.0" and "max |x| 90000" in rows["Torch.mul.0"][6]
    assert rows["Torch.add.0"][2] == "yes" and "an input already holds inf/nan" in rows["Torch.add.0"][6]
    # the reference's log lines, one per overflowed API
    assert "The Torch.tanh.0 overflow is an abnormal overflow." in captured.err
    assert captured.err.count("overflow is a normal overflow.") == 4
    assert "5 with an inf/nan output: 4 normal, 1 abnormal, 0 skipped" in captured.out


def test_nothing_broken_no_abnormal_and_no_file_without_o(tmp_path, dumps, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["-f", "pytorch", "run_overflow_check", "-api_info", str(dumps["clean", "statistics"])]) == 0
    captured = capsys.readouterr()
    assert "abnormal overflow" not in captured.err
    for name in NORMAL:
        assert f"The {name} overflow is a normal overflow." in captured.err
    assert "3 with an inf/nan output: 3 normal, 0 abnormal" in captured.out
    assert list(tmp_path.iterdir()) == []  # no -o: log lines only, as the reference


def test_skipped_overflow_is_named_with_its_reason(tmp_path, dumps, capsys):
    import json

    dj = json.loads(Path(dumps["clean", "statistics"]).read_text())
    rec = dj["data"]["Torch.exp.0.forward"]
    dj["data"] = {"Distributed.all_reduce.0.forward": rec, **dj["data"]}
    path = tmp_path / "dump.json"
    path.write_text(json.dumps(dj))
    out = tmp_path / "out"
    assert main(["-f", "pytorch", "run_overflow_check", "-api_info", str(path), "-o", str(out)]) == 0
    rows = result(out)
    assert rows["Distributed.all_reduce.0"][5] == "SKIP" and "communication API" in rows["Distributed.all_reduce.0"][6]
    assert "1 skipped" in capsys.readouterr().out


def _one_line(capsys):
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("msprobe: error:"), err
    return err[0]


def test_bad_input(tmp_path, dumps, capsys):
    assert main(["-f", "pytorch", "run_overflow_check"]) == 2
    assert "Please provide api_info_file" in _one_line(capsys)
    assert main(["-f", "pytorch", "run_overflow_check", "-api_info", str(tmp_path / "none.json")]) == 2
    assert "none.json" in _one_line(capsys)
    bad = tmp_path / "bad.json"
    bad.write_text('{"task": "statistics"}')
    assert main(["-f", "pytorch", "run_overflow_check", "-api_info", str(bad), "-o", str(tmp_path / "o")]) == 2
    assert "no data found" in _one_line(capsys)
    assert main(["-f", "mindspore", "run_overflow_check", "-api_info", str(dumps["clean", "statistics"])]) == 2
    assert "PyTorch dumps only" in _one_line(capsys)
    assert main(["-f", "pytorch", "run_overflow_check", "-api_info", str(dumps["clean", "statistics"]),
                 "-d", "0", "0"]) == 2
    assert "device id must be unique" in _one_line(capsys)
    ms = tmp_path / "ms.json"
    ms.write_text('{"task": "statistics", "framework": "mindspore", "data": {"Mint.exp.0.forward": {}}}')
    assert main(["run_overflow_check", "-api_info", str(ms), "-o", str(tmp_path / "o")]) == 2
    assert "is a mindspore dump" in _one_line(capsys)
    assert not (tmp_path / "o").exists()


def test_tensor_dump_without_statistics_reads_the_recorded_outputs(tmp_path, dumps, capsys):
    import json

    src = Path(dumps["broken", "tensor"])
    dj = json.loads(src.read_text())
    for rec in dj["data"].values():
        for o in rec.get("output") or []:
            if isinstance(o, dict):
                for key in ("Max", "Min", "Mean", "Norm"):
                    o.pop(key, None)
    path = src.parent / "dump_no_output_stats.json"  # beside dump.json, where its dump_tensor_data is
    path.write_text(json.dumps(dj))
    out = tmp_path / "out"
    assert main(["-f", "pytorch", "run_overflow_check", "-api_info", str(path), "-o", str(out)]) == 0
    rows = result(out)
    verdicts = {n: r[5] for n, r in rows.items()}
    assert {n for n, v in verdicts.items() if v == "abnormal"} == {"Torch.tanh.0"}
    assert {n for n, v in verdicts.items() if v == "normal"} == NORMAL | {"Torch.add.0"}
    assert rows["Torch.matmul.0"][5] == "no overflow" and "hold no inf/nan" in rows["Torch.matmul.0"][6]
    assert "8 to re-run (0 with an inf/nan output by the statistics, 8 whose recorded output file" in capsys.readouterr().err
