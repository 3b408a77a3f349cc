"""Offline accuracy pre-check (run_ut / multi_run_ut / acc_check / api_precision_compare) on a small
transformer dumped by our PrecisionDebugger on the CPU."""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from conftest import ROOT  # noqa: E402
from msprobe.cli.main import main  # noqa: E402

DATA = Path(__file__).parent / "data" / "acc_check"
RESULT_HEADER = ["API name", "Forward Test Success", "Backward Test Success", "Message"]
DETAILS_HEADER = ("API Name,Bench Dtype,DEVICE Dtype,Shape,余弦相似度,最大绝对误差,双百指标,双千指标,双万指标,二进制一致错误率,"
                  "误差均衡性,均方根误差,小值域错误占比,相对误差最大值,相对误差平均值,inf/nan错误率,相对误差错误率,绝对误差错误率,"
                  "ULP误差最大值,ULP误差平均值,ULP误差大于阈值占比,Status,Message").split(",")

# noise on three ops of three standards (float64 benchmark runs are left alone, as in test_op_generate)
NOISE = r"""
import torch, torch.nn.functional as F
def _noisy(orig):
    def wrapper(*args, **kwargs):
        out = orig(*args, **kwargs)
        if isinstance(out, torch.Tensor) and out.is_floating_point() and out.dtype != torch.float64:
            g = torch.Generator().manual_seed(0)
            noise = torch.randn(out.shape, generator=g).to(out.dtype)
            out = out + noise * (out.detach().abs().mean() * 0.05 + 1e-3)
        return out
    return wrapper
F.softmax = _noisy(F.softmax)
F.linear = _noisy(F.linear)
torch.add = _noisy(torch.add)
"""
HANG = r"""
import time, torch, torch.nn.functional as F
_gelu = F.gelu
def _slow(*a, **k):
    time.sleep(float(__import__("os").environ.get("HANG_SECONDS", "60")))
    return _gelu(*a, **k)
F.gelu = _slow
"""
CRASH = r"""
import os, torch
torch.triu = lambda *a, **k: os._exit(3)
"""
NOISY_STANDARD = {"Functional.softmax": "Benchmark Standard", "Functional.linear": "ULP error Standard",
                  "Torch.add": "Absolute Threshold Standard"}


@pytest.fixture(scope="module")
def dumps(tmp_path_factory):
    base = tmp_path_factory.mktemp("acc_dumps")
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    for task in ("statistics", "tensor"):
        subprocess.run([sys.executable, str(DATA / "dump_transformer.py"), str(base / task), task], check=True,
                       env=env, timeout=300)
    return {task: base / task / "step0" / "rank" / "dump.json" for task in ("statistics", "tensor")}


def apis_of(dump_json):
    """The API names of a dump in dump order (each once)."""
    data = json.loads(Path(dump_json).read_text())["data"]
    out = []
    for key in data:
        name = key.rsplit(".", 1)[0]
        if name not in out:
            out.append(name)
    return out


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


def run_cli(args, prelude="", env_extra=None, timeout=600):
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1", MSPROBE_PROGRESS="0", **(env_extra or {}))
    code = prelude + "\nimport sys\nfrom msprobe.cli.main import main\nsys.exit(main(sys.argv[1:]))\n"
    return subprocess.run([sys.executable, "-c", code, *map(str, args)], capture_output=True, text=True, env=env,
                          timeout=timeout)


# ------------------------------------------------------------------------------------------ every API accounted for
def test_statistics_dump_every_api_judged_or_skipped(tmp_path, dumps, capsys):
    out = tmp_path / "out"
    assert main(["-f", "pytorch", "run_ut", "-api_info", str(dumps["statistics"]), "-o", str(out), "-q"]) == 0
    stdout = capsys.readouterr().out
    res, det = outputs(out)
    header, rows = read_csv(res)
    assert header == RESULT_HEADER
    names = [r[0] for r in rows]
    assert names == apis_of(dumps["statistics"])  # every API, once, in dump order
    for r in rows:
        assert r[1] in ("pass", "Warning", "SKIP"), r  # nothing patched: no error
        if r[1] == "SKIP":
            assert len(r) == 4 and r[3].strip(), r  # a skip states its reason
        else:
            assert len(r) == 3 and r[2] in ("pass", " "), r
    skipped = {r[0]: r[3] for r in rows if r[1] == "SKIP"}
    assert set(skipped) == {"Functional.dropout.0"} and "random API" in skipped["Functional.dropout.0"]
    dheader, drows = read_csv(det)
    assert dheader == DETAILS_HEADER
    judged = {r[0] for r in rows if r[1] != "SKIP"}
    assert {".".join(d[0].split(".")[:-3]) for d in drows} == judged
    by_name = {d[0]: dict(zip(DETAILS_HEADER, d)) for d in drows}
    # each standard fills its columns (the op_generate metrics under the reference's column names)
    lin = by_name["Functional.linear.0.forward.output.0"]
    assert lin["ULP误差大于阈值占比"] != " " and lin["相对误差最大值"] == " " and lin["DEVICE Dtype"] == "torch.float32"
    assert lin["Bench Dtype"] == "torch.float64" and lin["Shape"] == "(2, 6, 48)"
    add = by_name["Torch.add.0.forward.output.0"]
    assert float(add["相对误差错误率"]) == 0.0 and float(add["inf/nan错误率"]) == 0.0
    sm = by_name["Functional.softmax.0.forward.output.0"]
    assert sm["相对误差最大值"] != " " and sm["Message"].startswith("Benchmark Standard")
    assert float(by_name["Tensor.transpose.0.forward.output.0"]["二进制一致错误率"]) == 0.0
    assert "Torch.triu.0.backward.output.0" not in by_name  # bool output, no backward
    assert "32 APIs checked: 31 passed, 0 warning, 0 error, 1 skipped" in stdout


def test_quiet_leaves_only_the_summary_line(tmp_path, dumps):
    """-q: no file-name lines, no INFO stage log, no worst-outputs list; warnings still show."""
    proc = run_cli(["-f", "pytorch", "run_ut", "-api_info", dumps["statistics"], "-o", tmp_path / "q", "-q"],
                   prelude=NOISE)
    assert proc.returncode == 0, proc.stderr[-2000:]
    res = outputs(tmp_path / "q")[0]
    assert proc.stdout.splitlines() == [f"UT task completed: 32 APIs checked: 23 passed, 0 warning, 8 error, "
                                        f"1 skipped; result {res}"]
    assert "INFO" not in proc.stderr and "will be saved" not in proc.stderr, proc.stderr
    loud = run_cli(["-f", "pytorch", "run_ut", "-api_info", dumps["statistics"], "-o", tmp_path / "l"], prelude=NOISE)
    assert "will be saved in" in loud.stdout and "worst outputs:" in loud.stdout and "[msprobe] INFO" in loud.stderr
    # a warning (an API whose worker dies) is still shown under -q
    crash = run_cli(["-f", "pytorch", "run_ut", "-api_info", dumps["statistics"], "-o", tmp_path / "c", "-q"],
                    prelude=CRASH)
    assert "WARNING Run Torch.triu.0 UT Error" in crash.stderr and len(crash.stdout.splitlines()) == 1, crash


def test_tensor_dump_real_data_parallel(tmp_path, dumps, capsys):
    out = tmp_path / "out"
    assert main(["-f", "pytorch", "run_ut", "-api_info", str(dumps["tensor"]), "-o", str(out), "-j", "2"]) == 0
    assert "(real data)" in capsys.readouterr().out
    res, det = outputs(out)
    _, rows = read_csv(res)
    assert [r[0] for r in rows] == apis_of(dumps["tensor"])
    assert all(r[1] in ("pass", "SKIP") for r in rows), rows  # every forward passes with the recorded inputs
    assert all(r[2] in ("pass", " ", "SKIP") for r in rows), rows  # and every backward
    _, drows = read_csv(det)
    by_name = {d[0]: dict(zip(DETAILS_HEADER, d)) for d in drows}
    assert all(d["Status"] in ("pass", "Warning") for d in by_name.values()), drows
    # the key-bias gradient of attention is exactly 0 (softmax is shift invariant): the fp32 result is
    # rounding noise of a sum that cancels; in ULPs of the summed terms' magnitude it is a few ULPs
    # (in ULPs of the ~1e-17 float64 result it is ~1e8 and judged an error)
    bias = by_name["Functional.linear.0.backward.output.2"]
    assert bias["Shape"] == "(48,)" and 0 < float(bias["最大绝对误差"]) < 1e-7
    assert float(bias["ULP误差最大值"]) < 32 and float(bias["ULP误差大于阈值占比"]) == 0.0


# ------------------------------------------------------------------------------------------ three noisy ops
def test_noise_in_three_ops_fails_exactly_those_apis(tmp_path, dumps):
    out = tmp_path / "out"
    proc = run_cli(["-f", "pytorch", "run_ut", "-api_info", dumps["statistics"], "-o", out, "-j", "2",
                    "-save_error_data"], prelude=NOISE)
    assert proc.returncode == 0, proc.stderr[-3000:]
    res, det = outputs(out)
    _, rows = read_csv(res)
    failing = {r[0] for r in rows if "error" in r[1:3]}
    expected = {n for n in apis_of(dumps["statistics"]) if n.rsplit(".", 1)[0] in NOISY_STANDARD}
    assert failing == expected and len(expected) == 8  # 5 linear, 1 softmax, 2 torch.add
    _, drows = read_csv(det)
    for d in drows:
        d = dict(zip(DETAILS_HEADER, d))
        api = d["API Name"].split(".forward.")[0]
        if ".forward." in d["API Name"] and api in expected:
            assert d["Status"] == "error", d
            assert d["Message"].startswith(NOISY_STANDARD[api.rsplit(".", 1)[0]]), d
    # the standard that catches each one
    by_name = {d[0]: dict(zip(DETAILS_HEADER, d)) for d in drows}
    assert float(by_name["Torch.add.0.forward.output.0"]["相对误差错误率"]) > 0.5
    assert float(by_name["Functional.linear.0.forward.output.0"]["ULP误差大于阈值占比"]) > 0.5
    assert "Maximum Relative Error" in by_name["Functional.softmax.0.forward.output.0"]["Message"]
    assert "worst outputs:" in proc.stdout and "8 error" in proc.stdout
    err_dir = next(out.glob("ut_error_data*"))
    saved = {p.name for p in err_dir.iterdir()}
    assert "Functional.softmax.0.forward.output.device.0.pt" in saved
    assert "Functional.softmax.0.forward.input.0.pt" in saved and "Torch.add.1.forward.output.bench.0.pt" in saved
    assert not any(n.startswith("Functional.gelu") for n in saved)  # passing APIs keep nothing
    bench = torch.load(err_dir / "Functional.softmax.0.forward.output.bench.0.pt", weights_only=True)
    assert bench.dtype == torch.float64 and torch.allclose(bench.sum(-1), torch.ones((), dtype=torch.float64))


# ------------------------------------------------------------------------------------------ hang, crash
def test_hanging_and_crashing_apis_are_recorded_and_the_rest_go_on(tmp_path, dumps):
    out = tmp_path / "out"
    proc = run_cli(["-f", "pytorch", "run_ut", "-api_info", dumps["statistics"], "-o", out, "--timeout", "4",
                    "-j", "2"], prelude=HANG + CRASH)
    assert proc.returncode == 0, proc.stderr[-3000:]
    _, rows = read_csv(outputs(out)[0])
    assert [r[0] for r in rows] == apis_of(dumps["statistics"])
    by = {r[0]: r for r in rows}
    assert by["Functional.gelu.0"][1] == "SKIP" and "timed out after 4 s" in by["Functional.gelu.0"][3]
    assert by["Torch.triu.0"][1] == "SKIP" and "died" in by["Torch.triu.0"][3]
    others = [r for r in rows if r[0] not in ("Functional.gelu.0", "Torch.triu.0", "Functional.dropout.0")]
    assert others and all(r[1] == "pass" for r in others)
    assert "2 failed to run" in proc.stdout


# ------------------------------------------------------------------------------------------ resume
def test_resume_after_kill_judges_each_api_once(tmp_path, dumps):
    out = tmp_path / "out"
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1", MSPROBE_PROGRESS="0", HANG_SECONDS="120")
    code = HANG + "\nimport sys\nfrom msprobe.cli.main import main\nsys.exit(main(sys.argv[1:]))\n"
    proc = subprocess.Popen([sys.executable, "-c", code, "-f", "pytorch", "run_ut", "-api_info",
                             str(dumps["statistics"]), "-o", str(out), "-j", "2"], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    names = apis_of(dumps["statistics"])
    before_gelu = names[names.index("Functional.gelu.0") - 1]
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            files = list(out.glob("accuracy_checking_result_*.csv"))
            if files and f"\n{before_gelu}," in files[0].read_text(encoding="utf-8"):
                break
            time.sleep(0.2)
        else:
            pytest.fail("the run never reached the hanging API")
        time.sleep(0.5)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # the run and its workers (its own session)
        proc.wait(30)
    res, det = outputs(out)
    _, rows = read_csv(res)
    done = [r[0] for r in rows]
    assert done == names[: names.index("Functional.gelu.0")]  # a prefix in dump order, gelu not judged
    # a torn last line and a detail row of an API without its result row, as a kill mid-write leaves them
    with open(res, "a", encoding="utf-8") as fh:
        fh.write("Functional.gelu.0,pa")
    with open(det, "a", encoding="utf-8") as fh:
        fh.write("Functional.gelu.0.forward.output.0,torch.float64,torch.float32,\"(2, 6, 32)\"" + ",x" * 18 + ",pass,\n")
    assert main(["-f", "pytorch", "run_ut", "-api_info", str(dumps["statistics"]), "-csv_path", str(res), "-q"]) == 0
    assert outputs(out) == (res, det)  # appended to the same pair
    _, rows = read_csv(res)
    assert [r[0] for r in rows] == names  # each API once, none lost
    _, drows = read_csv(det)
    dnames = [d[0] for d in drows]
    assert len(dnames) == len(set(dnames))
    assert {".".join(n.split(".")[:-3]) for n in dnames} == {r[0] for r in rows if r[1] != "SKIP"}
    assert "x" not in {c for d in drows for c in d}
    # resuming a finished run runs nothing
    assert main(["-f", "pytorch", "run_ut", "-api_info", str(dumps["statistics"]), "-csv_path", str(res), "-q"]) == 0
    assert [r[0] for r in read_csv(res)[1]] == names


# ------------------------------------------------------------------------------------------ other spellings, filters
def test_multi_run_ut_acc_check_and_lists(tmp_path, dumps, capsys):
    one = tmp_path / "one"
    assert main(["-f", "pytorch", "multi_run_ut", "-api_info", str(dumps["statistics"]), "-o", str(one), "-n", "2",
                 "-q"]) == 0
    two = tmp_path / "two"
    assert main(["acc_check", "-api_info", str(dumps["statistics"]), "-o", str(two), "-q"]) == 0
    a, b = read_csv(outputs(one)[0])[1], read_csv(outputs(two)[0])[1]
    assert a == b
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps({"task": "run_ut", "run_ut": {"white_list": ["linear", "gelu", "matmul"],
                                                            "black_list": ["gelu"]}}))
    three = tmp_path / "three"
    assert main(["-f", "pytorch", "run_ut", "-api_info", str(dumps["statistics"]), "-o", str(three), "-q",
                 "-config", str(cfg), "-f"]) == 0
    rows = read_csv(outputs(three)[0])[1]
    run = [r[0] for r in rows if r[1] != "SKIP"]
    assert run and all(n.split(".")[1] in ("linear", "matmul") for n in run)
    assert {r[3] for r in rows if r[1] == "SKIP"} >= {"API gelu in black list or not in white list. SKIP."}
    # -f drops a call whose arguments equal an earlier call's of the same API once Max/Min are set aside
    dj = json.loads(Path(dumps["statistics"]).read_text())
    twin = json.loads(json.dumps(dj["data"]["Tensor.reshape.0.forward"]))
    twin["input_args"][0].update(Max=123.0, Min=-123.0)
    dj["data"]["Tensor.reshape.1.forward"] = twin
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "dump.json").write_text(json.dumps(dj))
    four = tmp_path / "four"
    assert main(["-f", "pytorch", "run_ut", "-api_info", str(tmp_path / "d" / "dump.json"), "-o", str(four), "-q",
                 "-f"]) == 0
    names = [r[0] for r in read_csv(outputs(four)[0])[1]]
    assert "Tensor.reshape.0" in names and "Tensor.reshape.1" not in names and "Tensor.reshape.2" in names
    assert len(names) == len(apis_of(dumps["statistics"])) - 1


# ------------------------------------------------------------------------------------------ bad input, one line each
def _one_line(capsys):
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("msprobe: error: ") and "Traceback" not in err[0], err
    return err[0]


def test_bad_input(tmp_path, dumps, capsys):
    out = tmp_path / "never"
    stat = str(dumps["statistics"])
    assert main(["-f", "pytorch", "run_ut", "-api_info", stat, "-o", str(out), "--data_mode", "real_data"]) == 2
    assert "statistics only" in _one_line(capsys)
    cfg = tmp_path / "cfg.json"
    cfg.write_text(json.dumps({"run_ut": {"white_list": ["lineer"]}}))
    assert main(["-f", "pytorch", "run_ut", "-api_info", stat, "-o", str(out), "-config", str(cfg)]) == 2
    line = _one_line(capsys)
    assert "'lineer' is not in dump.json" in line and "linear" in line
    bad = tmp_path / "accuracy_checking_result_20250101000000.csv"
    bad.write_text("\ufeffnot,a,header\n")
    (tmp_path / "accuracy_checking_details_20250101000000.csv").write_text("\ufeff" + ",".join(DETAILS_HEADER) + "\n")
    assert main(["-f", "pytorch", "run_ut", "-api_info", stat, "-csv_path", str(bad)]) == 2
    assert "does not start with the header" in _one_line(capsys)
    renamed = tmp_path / "my_result.csv"
    renamed.write_text("x")
    assert main(["-f", "pytorch", "run_ut", "-api_info", stat, "-csv_path", str(renamed)]) == 2
    assert "please do not modify the result csv name" in _one_line(capsys)
    assert main(["-f", "pytorch", "run_ut", "-o", str(out)]) == 2
    assert "Please provide api_info_file" in _one_line(capsys)
    no_tensors = tmp_path / "td"
    no_tensors.mkdir()
    dj = json.loads(Path(dumps["tensor"]).read_text())
    dj["dump_data_dir"] = str(tmp_path / "elsewhere" / "dump_tensor_data")  # recorded on another machine
    (no_tensors / "dump.json").write_text(json.dumps(dj))  # a tensor dump copied without dump_tensor_data
    assert main(["-f", "pytorch", "run_ut", "-api_info", str(no_tensors / "dump.json"), "-o", str(out)]) == 2
    assert "tensors are missing" in _one_line(capsys)
    assert main(["-f", "pytorch", "run_ut", "-api_info", stat, "-d", "0", "0", "-o", str(out)]) == 2
    assert "device id must be unique" in _one_line(capsys)
    ms = tmp_path / "ms_dump.json"
    ms.write_text(json.dumps({"task": "statistics", "level": "L1", "framework": "mindspore", "data": {}}))
    assert main(["acc_check", "-api_info", str(ms), "-o", str(out)]) == 2
    assert "records no API" in _one_line(capsys)  # a MindSpore dump is read by the MindSpore checker's rules
    nofw = tmp_path / "no_framework.json"
    nofw.write_text(json.dumps({"task": "statistics", "data": {}}))
    assert main(["acc_check", "-api_info", str(nofw), "-o", str(out)]) == 2
    assert 'Key "framework" not found' in _one_line(capsys)
    assert not out.exists()  # nothing written on error


# ------------------------------------------------------------------------------------------ api_precision_compare
COLS = ["API Name", "Bench Dtype", "DEVICE Dtype", "Shape", "余弦相似度", "最大绝对误差", "双百指标", "双千指标", "双万指标",
        "二进制一致错误率", "误差均衡性", "均方根误差", "小值域错误占比", "相对误差最大值", "相对误差平均值", "inf/nan错误率",
        "相对误差错误率", "绝对误差错误率", "ULP误差最大值", "ULP误差平均值", "ULP误差大于阈值占比", "Status", "Message"]


def _detail(name, dtype, shape="(4, 8)", **metrics):
    row = {c: " " for c in COLS}
    row.update({"API Name": name, "Bench Dtype": "torch.float32", "DEVICE Dtype": dtype, "Shape": shape,
                "Status": "pass", "Message": "\nmetrics"})
    row.update({k: str(v) for k, v in metrics.items()})
    return row


BENCH_OK = dict(小值域错误占比=0.0, 均方根误差=0.001, 相对误差最大值=0.003, 相对误差平均值=0.001, 误差均衡性=0.1)
# (npu row, gpu row) pairs and the verdict the spec (checks_and_monitors.md 1.11.2) gives
CASES = [
    (_detail("Functional.gelu.0.forward.output.0", "torch.bfloat16", **dict(BENCH_OK, 相对误差最大值=0.2)),
     _detail("Functional.gelu.0.forward.output.0", "torch.bfloat16", **dict(BENCH_OK, 相对误差最大值=0.01)), "error"),
    (_detail("Functional.gelu.0.backward.output.0", "torch.bfloat16", **dict(BENCH_OK, 相对误差最大值=0.0036)),
     _detail("Functional.gelu.0.backward.output.0", "torch.bfloat16", **dict(BENCH_OK, 相对误差最大值=0.00018)), "pass"),
    (_detail("Functional.softmax.0.forward.output.0", "torch.float32", **dict(BENCH_OK, 误差均衡性=0.9)),
     _detail("Functional.softmax.0.forward.output.0", "torch.float32", **dict(BENCH_OK, 误差均衡性=0.01)), "pass"),
    (_detail("Functional.softmax.1.forward.output.0", "torch.float32", **dict(BENCH_OK, 均方根误差="nan")),
     _detail("Functional.softmax.1.forward.output.0", "torch.float32", **dict(BENCH_OK, 均方根误差="nan")), "pass"),
    (_detail("Functional.softmax.2.forward.output.0", "torch.float32", **dict(BENCH_OK, 均方根误差="inf")),
     _detail("Functional.softmax.2.forward.output.0", "torch.float32", **dict(BENCH_OK, 均方根误差=0.001)), "error"),
    (_detail("Tensor.__add__.0.forward.output.0", "torch.bfloat16", **{"inf/nan错误率": 0, "相对误差错误率": 0.01,
                                                                       "绝对误差错误率": 0}),
     _detail("Tensor.__add__.0.forward.output.0", "torch.bfloat16", **{"inf/nan错误率": 0, "相对误差错误率": 0,
                                                                       "绝对误差错误率": 0}), "error"),
    (_detail("Tensor.transpose.0.forward.output.0", "torch.float32", 二进制一致错误率=0.0),
     _detail("Tensor.transpose.0.forward.output.0", "torch.float32", 二进制一致错误率=0.0), "pass"),
    (_detail("Torch.argmax.0.forward.output.0", "torch.int64", 二进制一致错误率=0.25),
     _detail("Torch.argmax.0.forward.output.0", "torch.int64", 二进制一致错误率=0.0), "error"),
    (_detail("Functional.linear.0.forward.output.0", "torch.float32", ULP误差平均值=70, ULP误差大于阈值占比=0.2),
     _detail("Functional.linear.0.forward.output.0", "torch.float32", ULP误差平均值=70, ULP误差大于阈值占比=0.3), "pass"),
    (_detail("Functional.linear.1.forward.output.0", "torch.bfloat16", ULP误差平均值=1, ULP误差大于阈值占比=0.01),
     _detail("Functional.linear.1.forward.output.0", "torch.bfloat16", ULP误差平均值=1, ULP误差大于阈值占比=0.005), "error"),
    (_detail("Functional.conv2d.0.forward.output.0", "torch.float16", 双千指标=0.9985),
     _detail("Functional.conv2d.0.forward.output.0", "torch.float16", 双千指标=1.0), "error"),
    (_detail("Torch.sum.0.forward.output.0", "torch.float64", Message="float64 output", **BENCH_OK),
     _detail("Torch.sum.0.forward.output.0", "torch.float64", **BENCH_OK), "SKIP"),
]


def _write(path, rows):
    with open(path, "w", encoding="utf-8-sig", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(COLS)
        for r in rows:
            w.writerow([r[c] for c in COLS])


@pytest.fixture
def details_pair(tmp_path):
    npu, gpu = tmp_path / "npu_details.csv", tmp_path / "gpu_details.csv"
    _write(npu, [c[0] for c in CASES] + [_detail("Torch.mean.0.forward.output.0", "torch.float32", **BENCH_OK)])
    _write(gpu, [c[1] for c in CASES])
    return npu, gpu


def _apc_outputs(out):
    res = list(Path(out).glob("api_precision_compare_result_*.csv"))
    det = list(Path(out).glob("api_precision_compare_details_*.csv"))
    assert len(res) == len(det) == 1
    return read_csv(res[0]), read_csv(det[0])


def test_api_precision_compare_verdicts(tmp_path, details_pair, capsys):
    npu, gpu = details_pair
    out = tmp_path / "apc"
    assert main(["-f", "pytorch", "api_precision_compare", "-npu", str(npu), "-gpu", str(gpu), "-o", str(out)]) == 0
    (rh, rrows), (dh, drows) = _apc_outputs(out)
    assert rh == ["API Name", "Forward Test Success", "Backward Test Success", "Message"]
    assert len(dh) == 28 and dh[-3:] == ["比对结果", "比对算法", "Message"]
    got = {d[0]: d[dh.index("比对结果")] for d in drows}
    assert got == {c[0]["API Name"]: c[2] for c in CASES}  # Torch.mean.0 (not in the GPU data) is left out
    det = {d[0]: dict(zip(dh, d)) for d in drows}
    gelu = det["Functional.gelu.0.forward.output.0"]
    assert float(gelu["相对误差最大值比值"]) == pytest.approx(20.0) and gelu["相对误差最大值判定结果"] == "error"
    assert gelu["比对算法"] == "标杆比对法" and gelu["Message"] == "ERROR: 相对误差最大值比值超过阈值\n"
    # the bf16 floor 2**-8: 0.0036 / 0.0039 -> 0.92, pass
    assert float(det["Functional.gelu.0.backward.output.0"]["相对误差最大值比值"]) == pytest.approx(0.0036 * 2 ** 8)
    assert det["Functional.softmax.0.forward.output.0"]["误差均衡性判定结果"] == "error"  # EB out of the verdict
    assert "同为同号inf或nan" in det["Functional.softmax.1.forward.output.0"]["Message"]
    assert "inf或nan不一致" in det["Functional.softmax.2.forward.output.0"]["Message"]
    assert det["Torch.argmax.0.forward.output.0"]["比对算法"] == "二进制一致法"
    assert det["Functional.linear.0.forward.output.0"]["比对算法"] == "ULP误差比对法"
    res = {r[0]: r[1:3] for r in rrows}
    assert res["Functional.gelu.0"] == ["error", "pass"] and res["Torch.sum.0"] == ["SKIP", "SKIP"]
    assert res["Tensor.transpose.0"] == ["pass", " "] and res["Functional.conv2d.0"] == ["error", " "]
    assert "does not exist in the GPU data" in capsys.readouterr().err
    # a CSV without the needed columns: one line, nothing written
    bad = tmp_path / "bad.csv"
    bad.write_text("API Name,DEVICE Dtype\nx,y\n")
    assert main(["-f", "pytorch", "api_precision_compare", "-npu", str(bad), "-gpu", str(gpu), "-o",
                 str(tmp_path / "none")]) == 2
    assert "are missing innpu_csv" in _one_line(capsys)
    assert not (tmp_path / "none").exists()


def _ref_msprobe():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        from refvenv import ref_venv
    finally:
        sys.path.pop(0)
    exe = ref_venv("venv833") / "bin" / "msprobe"
    if not exe.exists():
        pytest.skip(f"reference venv missing ({exe}); see benchmarks/README.md to build it")
    return exe


def _ref_compare(exe, npu, gpu, out):
    proc = subprocess.run([str(exe), "-f", "pytorch", "api_precision_compare", "-npu", str(npu), "-gpu", str(gpu),
                           "-o", str(out)], capture_output=True, text=True, timeout=600, cwd=str(out.parent))
    assert proc.returncode == 0, proc.stderr[-2000:]
    return _apc_outputs(out)


def _same_outputs(ours, ref):
    (rh, rrows), (dh, drows) = ours
    (xh, xrows), (yh, yrows) = ref
    assert rh == xh and dh == yh
    assert [r[:3] for r in rrows] == [r[:3] for r in xrows]
    assert len(drows) == len(yrows)
    for a, b in zip(drows, yrows):
        for col, x, y in zip(dh, a, b):
            try:
                assert float(x) == pytest.approx(float(y), rel=1e-9, nan_ok=True), (a[0], col)
            except ValueError:
                assert x == y, (a[0], col, x, y)


def test_reference_api_precision_compare_agrees(tmp_path, details_pair, dumps):
    """Same verdicts as the reference on the hand-made pair, and the reference reads our run_ut details."""
    exe = _ref_msprobe()
    npu, gpu = details_pair
    ours = tmp_path / "ours"
    assert main(["-f", "pytorch", "api_precision_compare", "-npu", str(npu), "-gpu", str(gpu), "-o", str(ours)]) == 0
    _same_outputs(_apc_outputs(ours), _ref_compare(exe, npu, gpu, tmp_path / "ref"))
    # our run_ut details: the noisy run as the device, the clean run as the GPU
    clean, noisy = tmp_path / "clean", tmp_path / "noisy"
    assert main(["-f", "pytorch", "run_ut", "-api_info", str(dumps["statistics"]), "-o", str(clean), "-q"]) == 0
    proc = run_cli(["-f", "pytorch", "run_ut", "-api_info", dumps["statistics"], "-o", noisy, "-q"], prelude=NOISE)
    assert proc.returncode == 0, proc.stderr[-2000:]
    npu2, gpu2 = outputs(noisy)[1], outputs(clean)[1]
    ours2 = tmp_path / "ours2"
    assert main(["-f", "pytorch", "api_precision_compare", "-npu", str(npu2), "-gpu", str(gpu2), "-o", str(ours2)]) == 0
    mine = _apc_outputs(ours2)
    _same_outputs(mine, _ref_compare(exe, npu2, gpu2, tmp_path / "ref2"))
    errors = {r[0] for r in mine[0][1] if r[1] == "error"}
    assert errors == {n for n in apis_of(dumps["statistics"]) if n.rsplit(".", 1)[0] in NOISY_STANDARD}


# ------------------------------------------------------------------------------------------ flags, no torch, pool
def test_reference_long_flags_are_accepted():
    from msprobe.cli.main import command_parser

    _, p = command_parser("multi_run_ut")
    a = p.parse_args(["--api_info_file", "d.json", "--out_path", "o", "-save_error_data", "--device", "0", "1",
                      "--result_csv_path", "r.csv", "--filter_api", "--config_path", "c.json", "--num_splits", "4",
                      "--jit_compile"])
    assert (a.api_info_file, a.output_path, a.save_error_data, a.device_id, a.result_csv_path, a.filter_api,
            a.config_path, a.num_splits, a.jit_compile) == ("d.json", "o", True, [0, 1], "r.csv", True, "c.json",
                                                            4, True)
    _, p = command_parser("run_ut")
    assert p.parse_args(["-api_info", "d.json", "-j"]).jobs == 0  # bare -j: the reference's jit_compile flag
    assert p.parse_args(["-api_info", "d.json", "-j", "3"]).jobs == 3
    _, p = command_parser("api_precision_compare")
    a = p.parse_args(["--npu_csv_path", "a.csv", "--gpu_csv_path", "b.csv", "--out_path", "o"])
    assert (a.npu_csv_path, a.gpu_csv_path, a.output_path) == ("a.csv", "b.csv", "o")


def test_api_precision_compare_needs_no_torch(tmp_path, details_pair):
    npu, gpu = details_pair
    fake = tmp_path / "fake"
    (fake / "torch").mkdir(parents=True)
    (fake / "torch" / "__init__.py").write_text('raise RuntimeError("broken torch")\n')
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(fake), str(ROOT)]))
    proc = subprocess.run([sys.executable, "-m", "msprobe", "api_precision_compare", "-npu", str(npu), "-gpu",
                           str(gpu), "-o", str(tmp_path / "o")], capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "11 APIs: 4 pass, 0 warning, 6 error, 1 skip" in proc.stdout


def test_checker_that_cannot_start_leaves_nothing(tmp_path, dumps, capsys):
    from msprobe.core.acc_check.runner import Options, run
    from msprobe.core.errors import MsprobeError

    out = tmp_path / "out"
    with pytest.raises(MsprobeError, match="could not start"):
        run(Options(api_info=str(dumps["statistics"]), out_path=str(out), quiet=True),
            target="msprobe.no_such_module:make_checker")
    assert not out.exists()  # the folder this run made is removed too


def test_reference_made_dumps(tmp_path, capsys):
    """Dumps written by the reference's own dumper (8.3.3 bf16 autocast MLP with tensors, 26.x statistics,
    torch_npu APIs): every API judged or skipped with its reason, nothing fails to run; multi_acc_check."""
    from conftest import fixtures_or_skip

    fx = fixtures_or_skip()
    cases = {"mlp_bf16_tensor_mix": "target/step0/rank/dump.json",
             "mlp_bf16_stat_mix_v26dump": None, "torch_npu_stubcann_cpu_mix": None}
    for case, rel in cases.items():
        dump = fx / case / rel if rel else next((fx / case / "target").rglob("dump.json"))
        out = tmp_path / case
        assert main(["multi_acc_check", "-api_info", str(dump), "-o", str(out), "-n", "2"]) == 0
        rows = read_csv(outputs(out)[0])[1]
        forward = [n for n in apis_of(dump) if not n.startswith("Module.")]
        assert [r[0] for r in rows] == forward
        for r in rows:
            assert r[1] == "pass" or (r[1] == "SKIP" and "NPU-only API" in r[3]), (case, r)
    assert "real data" in capsys.readouterr().out


# the reference's run_ut has no CPU device; its device is redirected to the CPU (checks_and_monitors.md Appendix)
REF_RUN_UT = r"""
import sys, torch
torch.cuda.set_device = lambda *a, **k: None
import msprobe.pytorch.api_accuracy_checker.run_ut.run_ut as ru
import msprobe.pytorch.api_accuracy_checker.run_ut.run_ut_utils as ruu
ru.current_device = "cpu"
ruu.current_device = "cpu"
sys.argv = ["run_ut"] + sys.argv[1:]
ru._run_ut()
"""


def test_reference_made_details_through_both_compares(tmp_path, dumps):
    """Details CSVs written by the reference's own run_ut (clean as GPU, noisy as NPU): our
    api_precision_compare writes the same two files as the reference's, byte for byte."""
    exe = _ref_msprobe()
    python = exe.parent / "python"
    cfg = tmp_path / "cfg.json"
    cfg.write_text(json.dumps({"task": "run_ut", "run_ut": {"white_list": ["linear", "softmax", "add", "transpose"]}}))
    env = dict(os.environ, OMP_NUM_THREADS="1")
    env.pop("PYTHONPATH", None)
    made = {}
    for label, prelude in (("gpu", ""), ("npu", NOISE)):
        out = tmp_path / label
        proc = subprocess.run([str(python), "-c", prelude + REF_RUN_UT, "-api_info", str(dumps["statistics"]), "-o",
                               str(out), "-config", str(cfg)], capture_output=True, text=True, env=env,
                              timeout=600, cwd=str(tmp_path))
        assert proc.returncode == 0, proc.stderr[-2000:]
        made[label] = outputs(out)[1]
    ref_out, our_out = tmp_path / "ref_apc", tmp_path / "our_apc"
    _ref_compare(exe, made["npu"], made["gpu"], ref_out)
    assert main(["api_precision_compare", "-npu", str(made["npu"]), "-gpu", str(made["gpu"]), "-o", str(our_out)]) == 0
    for kind in ("result", "details"):
        ref = next(ref_out.glob(f"api_precision_compare_{kind}_*.csv")).read_bytes()
        ours = next(our_out.glob(f"api_precision_compare_{kind}_*.csv")).read_bytes()
        assert ours == ref, kind
    (_, rows), _ = _apc_outputs(our_out)
    errors = {r[0] for r in rows if r[1] == "error"}
    assert errors == {n for n in apis_of(dumps["statistics"]) if n.rsplit(".", 1)[0] in NOISY_STANDARD}


def test_absolute_threshold_measures_a_cancelling_add_against_its_terms():
    """An SGD update p.add_(g, alpha=-lr) whose result is far smaller than its terms: fp32 rounds the terms
    (|p| + lr|g| ~ 0.02), so the result is 2.2e-10 off, 5.5e-5 of itself. The reference's formula (relative
    to the result) called that an error; taken at max(|b|, API on |inputs|) it passes, and a real error
    (the update 1e-4 off) is still an error. Found in the online run_ut on an SGD update (Tensor.add_)."""
    from msprobe.pytorch.op_generate import runtime as rt

    p = torch.tensor([0.0100021362], dtype=torch.float32)
    g = torch.tensor([0.99980926], dtype=torch.float32)
    d = p.clone().add_(g, alpha=-0.01)
    b = p.double().add(g.double(), alpha=-0.01)
    assert 1e-10 < float((d.double() - b).abs()) < 1e-9
    assert rt.assess_output("absolute", d, b, None)["verdict"] == "error"          # without a scale
    spec = {"ARGS": [rt.T("torch.float32", [1]), rt.T("torch.float32", [1])], "KWARGS": {"alpha": -0.01}}
    scale = rt.magnitude_run(spec, torch.add, [p.double(), g.double()], {"alpha": -0.01}, [], torch.float64, {},
                             "forward")
    scale = scale[0] if isinstance(scale, (list, tuple)) else scale
    assert float(scale) == pytest.approx(0.0100021362 + 0.0099980926, rel=1e-6)  # |p| + |alpha| |g|
    res = rt.assess_output("absolute", d, b, None, scale=scale)
    assert res["verdict"] == "pass", res
    assert ("Relative error taken at", "max(|out_bench|, API on |inputs|)", "", "") in res["head"]
    assert rt.assess_output("absolute", d + 1e-4, b, None, scale=scale)["verdict"] == "error"


def test_ulp_is_taken_at_the_magnitude_of_the_summed_terms():
    """ULP standard: rounding noise of a sum that cancels to ~0 is a few ULPs of its terms' magnitude
    (the API on |inputs|), while a real error stays far off; without a scale, the reference's formula."""
    from msprobe.pytorch.op_generate import runtime as rt

    b = torch.tensor([1e-17, 2.0], dtype=torch.float64)
    d = torch.tensor([3.6e-9, 2.0], dtype=torch.float32)
    assert float(rt.ulp_errors(d, b, torch.float32)[0]) > 1e9  # the reference's formula: astronomic
    scale = torch.tensor([1.5, 2.0], dtype=torch.float64)
    ulp = rt.ulp_errors(d, b, torch.float32, scale)
    assert float(ulp[0]) == pytest.approx(3.6e-9 * 2 ** 23, rel=1e-6) and float(ulp[1]) == 0.0
    bad = torch.tensor([1e-4, 2.0 * (1 + 1e-4)], dtype=torch.float32)  # real noise: still thousands of ULPs
    m = rt.ulp_metrics(bad, b, torch.float32, scale)
    assert m["ULP Error Proportion"] == 1.0 and rt.judge("ulp", torch.float32, m)[1] == "error"
    # the magnitude run of a linear: the bias gradient of grads that cancel has scale sum(|g|)
    x = torch.randn(3, 4, dtype=torch.float64)
    w = torch.randn(2, 4, dtype=torch.float64)
    g = torch.tensor([[1.0, -2.0], [-1.0, 2.0], [0.0, 0.0]], dtype=torch.float64)
    spec = {"ARGS": [rt.T("torch.float32", [3, 4], requires_grad=True), rt.T("torch.float32", [2, 4], requires_grad=True),
                     rt.T("torch.float32", [2], requires_grad=True)], "KWARGS": {}}
    fwd, grads = rt.magnitude_run(spec, torch.nn.functional.linear, [x, w, torch.zeros(2, dtype=torch.float64)], {},
                                  [g], torch.float64, {}, "both")
    assert torch.equal(grads[2], torch.tensor([2.0, 4.0], dtype=torch.float64))
    assert torch.allclose(fwd[0], x.abs() @ w.abs().T)
