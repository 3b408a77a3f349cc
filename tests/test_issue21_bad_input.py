"""Issue 21's bad inputs, each through the real CLI (python -m msprobe): one `msprobe: error:` line, exit 2, no
traceback, nothing written.  (More cases per tool: test_config_check.py, test_nan_analyze.py, test_parse.py,
tests/mindspore/test_static_graph.py.)"""
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def cli(args, cwd):
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    env.pop("MSPROBE_DEBUG", None)
    return subprocess.run([sys.executable, "-m", "msprobe", *map(str, args)], cwd=str(cwd), env=env,
                          capture_output=True, text=True, timeout=120)


def one_line(res, want):
    assert res.returncode == 2, res.stdout + res.stderr
    lines = [ln for ln in res.stderr.splitlines() if ln.startswith("msprobe: error:")]
    assert len(lines) == 1 and want in lines[0], res.stderr
    assert "Traceback" not in res.stderr
    return lines[0]


def test_config_check_zip_that_is_not_a_pack(tmp_path):
    bad = tmp_path / "notpack.zip"
    with zipfile.ZipFile(bad, "w") as zf:
        zf.writestr("readme.txt", "x")
    line = one_line(cli(["config_check", "-c", bad, bad, "-o", tmp_path / "res"], tmp_path),
                    "is a zip but not a config_check pack")
    assert str(bad) in line
    assert not (tmp_path / "res").exists()


@pytest.mark.parametrize("kind", ["missing", "folder"])
def test_config_check_dump_with_a_script_that_is_not_a_file(tmp_path, kind):
    """Was: a warning and exit 0 with a pack lacking hyperparameters (a typo then compared as "pass")."""
    script = tmp_path / "trian.sh"
    if kind == "folder":
        script.mkdir()
    line = one_line(cli(["config_check", "-d", script, "-o", tmp_path / "pack.zip"], tmp_path),
                    f"script {script} " + ("is a folder" if kind == "folder" else "does not exist"))
    assert "nothing written" in line
    assert not (tmp_path / "pack.zip").exists()


def test_nan_analyze_step_folder_without_ranks(tmp_path):
    step = tmp_path / "step0"
    (step / "logs").mkdir(parents=True)
    one_line(cli(["-f", "pytorch", "nan_analyze", "-i", step, "-o", tmp_path / "out"], tmp_path),
             "holds no rank folders")
    assert not (tmp_path / "out").exists()


def test_overflow_check_dump_without_statistics(tmp_path):
    leaf = {"type": "torch.Tensor", "dtype": "torch.float32", "shape": [4], "md5": "0badf00d"}
    rank = tmp_path / "step0" / "rank0"
    rank.mkdir(parents=True)
    (rank / "dump.json").write_text(json.dumps({
        "task": "statistics", "level": "L1", "framework": "pytorch", "dump_data_dir": None,
        "data": {"Torch.log.0.forward": {"input_args": [leaf], "input_kwargs": {}, "output": [leaf]}}}))
    one_line(cli(["overflow_check", "-i", tmp_path / "step0", "-o", tmp_path / "out"], tmp_path),
             "holds no statistics")
    assert not (tmp_path / "out").exists()
