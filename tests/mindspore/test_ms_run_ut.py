"""run_ut / acc_check on MindSpore PyNative dumps, for real in .venv-ms: ms_acc_net.py (mint / ops / Tensor APIs) is
dumped by our MindSpore PrecisionDebugger, each API is re-run alone on the CPU in the dumped dtype and in float64
as the benchmark, and judged by its precision standard; the CSVs are PyTorch run_ut's."""
import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ms_skip import requires_mindspore  # noqa: E402 (this folder is on sys.path)

pytestmark = requires_mindspore

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT))

RESULT_HEADER = ["API name", "Forward Test Success", "Backward Test Success", "Message"]
DETAILS_HEADER = ("API Name,Bench Dtype,DEVICE Dtype,Shape,余弦相似度,最大绝对误差,双百指标,双千指标,双万指标,二进制一致错误率,"
                  "误差均衡性,均方根误差,小值域错误占比,相对误差最大值,相对误差平均值,inf/nan错误率,相对误差错误率,绝对误差错误率,"
                  "ULP误差最大值,ULP误差平均值,ULP误差大于阈值占比,Status,Message").split(",")
APIS = ["Mint.matmul.0", "MintFunctional.relu.0", "Tensor.__mul__.0", "Functional.tanh.0", "Mint.matmul.1",
        "MintFunctional.softmax.0", "Tensor.__mul__.1", "Mint.sum.0", "Mint.exp.0", "Tensor.mean.0",
        "Functional.sigmoid.0", "Tensor.sum.0", "Tensor.__add__.0"]
STANDARD = {"Mint.matmul": "ULP error Standard", "MintFunctional.relu": "Binary Equality Standard",
            "Tensor.__mul__": "Absolute Threshold Standard", "MintFunctional.softmax": "Benchmark Standard"}
# noise on mint.nn.functional.softmax inside the checker processes (the benchmark's float64 run left alone)
NOISE = r"""
import msprobe.mindspore.acc_check.checker as C
_make = C.make_checker
def make_checker(init, k):
    check = _make(init, k)
    import numpy as np
    import mindspore as ms
    from mindspore import mint
    orig = mint.nn.functional.softmax
    def noisy(*a, **kw):
        out = orig(*a, **kw)
        if out.dtype != ms.float64:
            noise = np.random.RandomState(0).randn(*out.shape).astype(np.float32)
            out = out + ms.Tensor(noise).astype(out.dtype) * (float(out.abs().mean()) * 0.05 + 1e-3)
        return out
    mint.nn.functional.softmax = noisy
    return check
C.make_checker = make_checker
"""


@pytest.fixture(scope="module")
def dumps(tmp_path_factory):
    base = tmp_path_factory.mktemp("ms_acc_dumps")
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    out = {}
    for task in ("statistics", "tensor"):
        res = subprocess.run([sys.executable, str(HERE / "ms_acc_net.py"), str(base / task), task], env=env,
                             capture_output=True, text=True, timeout=600, cwd=str(base))
        assert res.returncode == 0, res.stderr[-3000:]
        out[task] = base / task / "step0" / "rank" / "dump.json"
    return out


def run_cli(args, prelude=""):
    env = dict(os.environ, PYTHONPATH=str(ROOT), MSPROBE_PROGRESS="0", GLOG_v="3")
    code = prelude + "\nimport sys\nfrom msprobe.cli.main import main\nsys.exit(main(sys.argv[1:]))\n"
    return subprocess.run([sys.executable, "-c", code, *map(str, args)], capture_output=True, text=True, env=env,
                          timeout=600)


def read_csv(path):
    text = Path(path).read_text(encoding="utf-8")
    assert text.startswith("\ufeff")
    rows = list(csv.reader(text[1:].splitlines(True)))
    return rows[0], rows[1:]


def outputs(out):
    res = sorted(Path(out).glob("accuracy_checking_result_*.csv"))
    det = sorted(Path(out).glob("accuracy_checking_details_*.csv"))
    assert len(res) == len(det) == 1
    return res[0], det[0]


def test_every_api_judged_nothing_patched_no_error(tmp_path, dumps):
    out = tmp_path / "out"
    proc = run_cli(["-f", "mindspore", "run_ut", "-api_info", dumps["statistics"], "-o", out])
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "(random data)" in proc.stdout
    res, det = outputs(out)
    header, rows = read_csv(res)
    assert header == RESULT_HEADER
    assert [r[0] for r in rows] == APIS
    assert all(r[1] == "pass" and r[2] == "pass" for r in rows), rows  # forward and backward judged, all pass
    dheader, drows = read_csv(det)
    assert dheader == DETAILS_HEADER
    by_name = {d[0]: dict(zip(DETAILS_HEADER, d)) for d in drows}
    assert len(drows) == 30  # 13 forward outputs, 17 input gradients
    for api in APIS:
        assert f"{api}.forward.output.0" in by_name and f"{api}.backward.output.0" in by_name
    for name, d in by_name.items():
        short = name.rsplit(".", 4)[0].rsplit(".", 1)[0]
        assert d["Bench Dtype"] == "Float64" and d["DEVICE Dtype"] == "Float32", d
        if short in STANDARD:
            assert d["Message"].startswith(STANDARD[short]), d
    mm = by_name["Mint.matmul.0.forward.output.0"]
    assert mm["Shape"] == "(4, 32)" and float(mm["ULP误差大于阈值占比"]) == 0.0 and float(mm["余弦相似度"]) > 0.999999
    assert float(by_name["MintFunctional.relu.0.forward.output.0"]["二进制一致错误率"]) == 0.0


def test_noise_in_one_op_fails_exactly_that_api(tmp_path, dumps):
    out = tmp_path / "out"
    proc = run_cli(["-f", "mindspore", "run_ut", "-api_info", dumps["statistics"], "-o", out, "-j", "2",
                    "-save_error_data"], prelude=NOISE)
    assert proc.returncode == 0, proc.stderr[-3000:]
    res, det = outputs(out)
    _, rows = read_csv(res)
    assert {r[0] for r in rows if "error" in r[1:3]} == {"MintFunctional.softmax.0"}
    assert [r[0] for r in rows] == APIS
    _, drows = read_csv(det)
    d = {r[0]: dict(zip(DETAILS_HEADER, r)) for r in drows}["MintFunctional.softmax.0.forward.output.0"]
    assert d["Status"] == "error" and d["Message"].startswith("Benchmark Standard") and "Maximum Relative Error" in d["Message"]
    assert "1 error" in proc.stdout and "worst outputs:" in proc.stdout
    saved = {p.name for p in next(out.glob("ut_error_data*")).iterdir()}
    assert {"MintFunctional.softmax.0.forward.input.0.npy", "MintFunctional.softmax.0.forward.output.device.0.npy",
            "MintFunctional.softmax.0.forward.output.bench.0.npy"} <= saved
    assert not any(n.startswith("Mint.matmul") for n in saved)
    # api_precision_compare reads MindSpore details: the noisy run as NPU against a clean run as GPU
    clean = tmp_path / "clean"
    assert run_cli(["-f", "mindspore", "run_ut", "-api_info", dumps["statistics"], "-o", clean]).returncode == 0
    apc = tmp_path / "apc"
    proc = run_cli(["-f", "pytorch", "api_precision_compare", "-npu", det, "-gpu", outputs(clean)[1], "-o", apc])
    assert proc.returncode == 0, proc.stderr[-2000:]
    _, arows = read_csv(next(apc.glob("api_precision_compare_result_*.csv")))
    assert {r[0] for r in arows if "error" in r[1:3]} == {"MintFunctional.softmax.0"}


def _torch_prelude():
    """Code that makes torch importable next to MindSpore (appended to sys.path, so MindSpore's numpy wins), or
    None when no torch is to be found (this venv or the repository's .venv)."""
    try:
        import importlib.metadata

        importlib.metadata.distribution("torch")
        return ""
    except importlib.metadata.PackageNotFoundError:
        pass
    site = ROOT / ".venv" / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}" / "site-packages"
    if (site / "torch").is_dir():
        return f"import sys\nsys.path.append({str(site)!r})\n"
    return None


def test_pytorch_benchmark_through_the_api_table(tmp_path, dumps):
    prelude = _torch_prelude()
    if prelude is None:
        pytest.skip("--bench pytorch needs torch: neither this venv nor the repository's .venv has it")
    out = tmp_path / "out"
    proc = run_cli(["-f", "mindspore", "run_ut", "-api_info", dumps["statistics"], "-o", out, "-j", "2",
                    "--bench", "pytorch"], prelude=prelude + NOISE)
    assert proc.returncode == 0, proc.stderr[-3000:]
    _, rows = read_csv(outputs(out)[0])
    assert [r[0] for r in rows] == APIS
    # every API judged forward and backward against torch (0-d outputs of Tensor.mean/sum/__add__ included) ...
    assert all(r[1] in ("pass", "error") and r[2] in ("pass", "error") for r in rows), rows
    # ... and only the noisy one fails
    assert {r[0] for r in rows if "error" in r[1:3]} == {"MintFunctional.softmax.0"}
    _, drows = read_csv(outputs(out)[1])
    d = {r[0]: dict(zip(DETAILS_HEADER, r)) for r in drows}
    assert d["MintFunctional.softmax.0.forward.output.0"]["Status"] == "error"
    assert d["Tensor.__add__.0.forward.output.0"]["Shape"] == "()"
    assert len(drows) == 30
    if prelude:  # torch is not in this venv: without the path it is one line, and nothing is left behind
        none = tmp_path / "none"
        proc = run_cli(["-f", "mindspore", "run_ut", "-api_info", dumps["statistics"], "-o", none, "--bench", "pytorch"])
        lines = [ln for ln in proc.stderr.strip().splitlines() if ln.startswith("msprobe: error:")]
        assert proc.returncode == 2 and len(lines) == 1 and "needs PyTorch" in lines[0], proc.stderr[-2000:]
        assert not none.exists()


def test_tensor_dump_real_data_through_acc_check(tmp_path, dumps):
    out = tmp_path / "out"
    proc = run_cli(["acc_check", "-api_info", dumps["tensor"], "-o", out, "-j", "2"])  # framework from dump.json
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "(real data)" in proc.stdout and "acc_check task completed: 13 APIs checked: 13 passed" in proc.stdout
    _, rows = read_csv(outputs(out)[0])
    assert [r[0] for r in rows] == APIS


def test_unrunnable_apis_are_skipped_with_the_reason(tmp_path, dumps):
    dj = json.loads(Path(dumps["statistics"]).read_text())
    data = dj["data"]
    rec = data["MintFunctional.relu.0.forward"]
    extra = {"Primitive.matmul.MatMul.0.forward": data["Mint.matmul.0.forward"],
             "MintFunctional.dropout.0.forward": dict(rec, input_kwargs={"p": {"type": "float", "value": 0.5}}),
             "Distributed.all_reduce.0.forward": rec,
             "Mint.no_such_api.0.forward": rec}
    dj["data"] = {**extra, **data}
    path = tmp_path / "dump.json"
    path.write_text(json.dumps(dj))
    out = tmp_path / "out"
    proc = run_cli(["-f", "mindspore", "run_ut", "-api_info", path, "-o", out])
    assert proc.returncode == 0, proc.stderr[-3000:]
    _, rows = read_csv(outputs(out)[0])
    by = {r[0]: r for r in rows}
    assert [r[0] for r in rows] == [k.rsplit(".", 1)[0] for k in extra] + APIS
    assert by["Primitive.matmul.MatMul.0"][1:3] == ["SKIP", "SKIP"] and "a Primitive" in by["Primitive.matmul.MatMul.0"][3]
    assert "random API dropout" in by["MintFunctional.dropout.0"][3]
    assert "communication API" in by["Distributed.all_reduce.0"][3]
    assert by["Mint.no_such_api.0"][1] == "SKIP" and "does not exist in MindSpore" in by["Mint.no_such_api.0"][3]
    assert sum(1 for r in rows if r[1] == "pass") == 13


def test_bad_input_is_one_line(tmp_path, dumps, capsys):
    from msprobe.cli.main import main

    out = tmp_path / "never"
    assert main(["-f", "pytorch", "run_ut", "-api_info", str(dumps["statistics"]), "-o", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "is a mindspore dump" in err[0] and "-f mindspore" in err[0], err
    pt = tmp_path / "pt.json"
    pt.write_text(json.dumps({"task": "statistics", "level": "L1", "framework": "pytorch", "data": {
        "Torch.add.0.forward": {"input_args": [], "input_kwargs": {}, "output": []}}}))
    assert main(["-f", "mindspore", "run_ut", "-api_info", str(pt), "-o", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "is a pytorch dump" in err[0], err
    assert main(["-f", "pytorch", "run_ut", "-api_info", str(pt), "-o", str(out), "--bench", "pytorch"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--bench pytorch is for MindSpore dumps" in err[0], err
    mt = tmp_path / "mt.json"
    mt.write_text(json.dumps({"task": "statistics", "framework": "mindtorch", "data": {}}))
    assert main(["acc_check", "-api_info", str(mt), "-o", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "MindTorch" in err[0], err
    assert not out.exists()
