"""Our run_ut details CSVs through the 26.2.0 reference's api_precision_compare (venv2620, see
benchmarks/refvenv.py; skipped without it): it reads them, and judges as docs/acc_check.md says (the standard of a
float output from the row, not the API, so the noisy ULP-standard linear calls pass there while ours find them).
The 8.3.3 reference is compared cell for cell in tests/test_acc_check.py."""

from __future__ import annotations

import csv
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

from conftest import ROOT  # noqa: E402
from msprobe.cli.main import main  # noqa: E402
from test_acc_check import NOISE, NOISY_STANDARD, apis_of, outputs, run_cli  # noqa: E402

DATA = Path(__file__).parent / "data" / "acc_check"


def _ref26():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        from refvenv import ref_venv
    finally:
        sys.path.pop(0)
    exe = ref_venv("venv2620") / "bin" / "msprobe"
    if not exe.exists():
        pytest.skip(f"reference venv missing ({exe}); build it with benchmarks/refvenv.py venv2620")
    return exe


def _verdicts(out):
    """{API: forward verdict}, {detail row: (verdict, algorithm)} of an api_precision_compare output folder."""
    res = next(Path(out).glob("api_precision_compare_result_*.csv"))
    det = next(Path(out).glob("api_precision_compare_details_*.csv"))
    rows = list(csv.reader(res.read_text(encoding="utf-8-sig").splitlines()))
    drows = list(csv.reader(det.read_text(encoding="utf-8-sig").splitlines(True)))
    h = drows[0]
    return ({r[0]: r[1] for r in rows[1:]},
            {d[0]: (d[h.index("比对结果")], d[h.index("比对算法")]) for d in drows[1:]})


def test_reference_26_reads_our_details(tmp_path):
    exe = _ref26()
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    subprocess.run([sys.executable, str(DATA / "dump_transformer.py"), str(tmp_path / "dump"), "statistics"],
                   check=True, env=env, timeout=300, capture_output=True)
    dump = tmp_path / "dump" / "step0" / "rank" / "dump.json"
    clean, noisy = tmp_path / "clean", tmp_path / "noisy"
    assert main(["-f", "pytorch", "run_ut", "-api_info", str(dump), "-o", str(clean), "-q"]) == 0
    proc = run_cli(["-f", "pytorch", "run_ut", "-api_info", dump, "-o", noisy, "-q"], prelude=NOISE)
    assert proc.returncode == 0, proc.stderr[-2000:]
    npu, gpu = outputs(noisy)[1], outputs(clean)[1]
    ours, ref = tmp_path / "ours", tmp_path / "ref26"
    assert main(["api_precision_compare", "-npu", str(npu), "-gpu", str(gpu), "-o", str(ours)]) == 0
    renv = dict(os.environ)
    renv.pop("PYTHONPATH", None)
    proc = subprocess.run([str(exe), "api_precision_compare", "-npu", str(npu), "-gpu", str(gpu), "-o", str(ref)],
                          capture_output=True, text=True, timeout=600, cwd=str(tmp_path), env=renv)
    assert proc.returncode == 0, proc.stderr[-2000:]
    (our_res, our_det), (ref_res, ref_det) = _verdicts(ours), _verdicts(ref)
    noisy_apis = {n for n in apis_of(dump) if n.rsplit(".", 1)[0] in NOISY_STANDARD}
    assert set(our_res) == set(ref_res) and set(our_det) == set(ref_det)  # every row read
    assert {n for n, v in our_res.items() if v == "error"} == noisy_apis
    linear = {n for n in noisy_apis if n.startswith("Functional.linear.")}
    assert len(linear) == 5
    assert {n for n, v in ref_res.items() if v == "error"} == noisy_apis - linear
    assert ref_det["Functional.linear.0.forward.output.0"] == ("pass", "标杆比对法")
    assert our_det["Functional.linear.0.forward.output.0"] == ("error", "ULP误差比对法")
    assert ref_det["Torch.add.0.forward.output.0"] == our_det["Torch.add.0.forward.output.0"] == ("error", "绝对阈值法")
