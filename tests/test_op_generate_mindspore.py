"""op_generate for MindSpore (-f mindspore): scripts generated from the reference's MindSpore dump
(../shared/fixtures/reference/mindspore_cpu_mix) for mint.*, ops.* and Tensor.* APIs.

Generating needs no MindSpore (this venv); the scripts run in .venv-ms (MindSpore 2.10, numpy<2) as one
subprocess that runs them all (skipped with a reason when .venv-ms is absent).  The scripts print the
PyTorch scripts' verdict format and judge with the same standards code (core/acc_check/op_standards.py).
"""
import json
import os
import re
import subprocess

import pytest

from conftest import ROOT, fixtures_or_skip
from msprobe.cli.main import main

MS_PY = ROOT / ".venv-ms" / "bin" / "python"
DUMP = ("mindspore_cpu_mix", "target", "step0", "proc17945", "dump.json")
APIS = [("Mint.matmul.0", "forward", "ULP error Standard"),
        ("Functional.relu.0", "forward", "Binary Equality Standard"),
        ("Tensor.__mul__.0", "forward", "Absolute Threshold Standard"),
        ("Tensor.to.0", "forward", "Benchmark Standard"),
        ("Mint.matmul.0", "backward", "ULP error Standard"),
        ("Tensor.__sub__.0", "backward", "Absolute Threshold Standard")]

# runs each script given on the command line in this one process (MindSpore is imported once)
DRIVER = r"""
import runpy, sys, io, contextlib
for path in sys.argv[1:]:
    sys.argv = [path]
    buf = io.StringIO()
    rc = 0
    with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(buf):
        try:
            runpy.run_path(path, run_name="__main__")
        except SystemExit as exc:
            rc = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 3)
    print("=== " + path + " rc=" + str(rc))
    print(buf.getvalue())
"""


def _dump():
    return fixtures_or_skip().joinpath(*DUMP)


def _generate(tmp_path, dump, api, propagation="forward", framework="mindspore", **extra):
    cfg = {"dump_json_path": str(dump), "api_name": api, "propagation": propagation,
           "extract_api_path": str(tmp_path / "extract" / f"{api}.{propagation}.json")}
    cfg.update(extra)
    tmp_path.mkdir(parents=True, exist_ok=True)
    path = tmp_path / f"config_{api}_{propagation}.json"
    path.write_text(json.dumps(cfg))
    argv = (["-f", framework] if framework else []) + ["op_generate", "-i", str(path), "-o", str(tmp_path / "out")]
    return main(argv)


def _run_in_ms_venv(scripts, cwd):
    if not MS_PY.exists():
        pytest.skip(f"{MS_PY.relative_to(ROOT)} not found: run `make ms-venv` to build the MindSpore 2.10 venv")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV") and not k.startswith("PYTEST_")}
    env["GLOG_v"] = "3"
    res = subprocess.run([str(MS_PY), "-c", DRIVER] + [str(s) for s in scripts], cwd=str(cwd), env=env,
                         capture_output=True, text=True, timeout=900)
    if res.returncode != 0 and "No module named 'mindspore'" in res.stderr:
        pytest.skip(".venv-ms has no MindSpore: run `make ms-venv`")
    assert res.returncode == 0, res.stderr[-3000:]
    out = {}
    for block in res.stdout.split("=== ")[1:]:
        head, _, body = block.partition("\n")
        path, rc = head.rsplit(" rc=", 1)
        out[os.path.basename(path)] = (int(rc), body)
    return out


def test_generated_scripts(tmp_path, capsys):
    dump = _dump()
    for api, prop, _ in APIS:
        assert _generate(tmp_path, dump, api, prop) == 0, capsys.readouterr().err
    out = capsys.readouterr().out
    assert "Mint.matmul.0.forward: Mint.matmul, ulp standard, random_data" in out
    assert "Tensor.__mul__.0.forward: Tensor.__mul__, absolute standard" in out
    text = (tmp_path / "out" / "Mint.matmul.0.forward.py").read_text()
    assert "API = ('Mint', 'matmul')  # mindspore.mint.matmul" in text and "STANDARD = 'ulp'" in text
    assert "T('Float32', [2, 16], min=0.0, max=2.225224256515503" in text
    assert "import torch" not in text and "from msprobe" not in text and "import msprobe" not in text
    to = (tmp_path / "out" / "Tensor.to.0.forward.py").read_text()
    assert "DType('Float32')" in to
    relu = (tmp_path / "out" / "Functional.relu.0.forward.py").read_text()
    assert "API = ('Functional', 'relu')  # mindspore.ops.relu" in relu
    # a MindSpore dump.json is recognised without -f
    assert _generate(tmp_path / "auto", dump, "Functional.square.0", framework=None) == 0
    assert "mindspore.ops.square" in (tmp_path / "auto" / "out" / "Functional.square.0.forward.py").read_text()


def test_one_implementation_of_the_standards(tmp_path, capsys):
    """The MindSpore and the PyTorch scripts carry the same pasted standards code (core/acc_check) and the
    same framework-free runtime (core/op_generate/script_runtime.py)."""
    from msprobe.core.acc_check import op_standards, standards
    from msprobe.core.op_generate import script_runtime
    from msprobe.mindspore.op_generate.generator import RUNTIME_FILE
    from msprobe.pytorch.op_generate.generator import runtime_source

    ms_src, pt_src = runtime_source(RUNTIME_FILE), runtime_source()
    for module in (standards, op_standards, script_runtime):
        body = open(module.__file__, encoding="utf-8").read().split('"""', 2)[2]
        body = "".join(l for l in body.strip("\n").splitlines(True) if "# msprobe-only" not in l)
        assert body in ms_src and body in pt_src
    for src in (ms_src, pt_src):
        assert src.count("def judge_metrics(") == 1 and src.count("def metrics_benchmark(") == 1
        assert src.count("class T:") == 1 and src.count("def reproduce(") == 1
        assert "msprobe-only" not in src


def test_bad_input_one_line(tmp_path, capsys):
    dump = _dump()
    assert _generate(tmp_path, dump, "Primitive.relu.ReLU.0") == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "Primitive records" in err[0]
    assert _generate(tmp_path, dump, "Cell.block.Block.forward.0") == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "is a module record" in err[0] and "Mint.*" in err[0], err
    assert "APIs it called: " in err[0] and "Mint.matmul.0" in err[0], err
    assert _generate(tmp_path, dump, "Mint.nothing.0") == 2
    assert "is not in dump.json" in capsys.readouterr().err
    assert _generate(tmp_path, dump, "Functional.relu.0", data_mode="real_data") == 2
    assert "real_data mode needs the recorded tensors" in capsys.readouterr().err


def _t(dtype, shape, mx=2.0, mn=-2.0, mean=0.1, **extra):
    return dict({"type": "mindspore.Tensor", "dtype": dtype, "shape": shape, "Max": mx, "Min": mn, "Mean": mean}, **extra)


def _extract_script(tmp_path, name, args, outputs, kwargs=None):
    """A script generated from a hand-written extract (no dump_json_path)."""
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps({f"{name}.forward": {"input_args": args, "input_kwargs": kwargs or {},
                                                    "output": outputs}}))
    cfg = tmp_path / f"cfg_{name}.json"
    cfg.write_text(json.dumps({"extract_api_path": str(path)}))
    assert main(["-f", "mindspore", "op_generate", "-i", str(cfg), "-o", str(tmp_path / "out")]) == 0
    return f"{name}.forward.py"


HAND_MADE = {
    # ops.square on float16 values up to 1000 overflows (1e6 > 65504): a real precision problem, error
    "Functional.square.7": ([_t("Float16", [4, 8], mx=1000.0, mn=-3.0, mean=100.0, Norm=1500.0)],
                            [_t("Float16", [4, 8], mx=1e6, mn=0.0)], None),
    # bfloat16 in and out, absolute threshold with the bf16 thresholds
    "Mint.mul.4": ([_t("BFloat16", [4, 8]), _t("BFloat16", [4, 8])], [_t("BFloat16", [4, 8])], None),
    # mindspore.mint.nn.functional, keyword arguments
    "MintFunctional.relu.1": ([_t("Float32", [4, 8])], [_t("Float32", [4, 8])], None),
    "Mint.sum.2": ([_t("Float16", [4, 8])], [_t("Float16", [4, 1])],
                   {"dim": {"type": "int", "value": 1}, "keepdim": {"type": "bool", "value": True}}),
    # a kernel the CPU backend lacks: one line, exit 2 (PyNative raises it late, when the output is used)
    "Mint.argmax.0": ([_t("Float32", [4, 6])], [_t("Int64", [4], mx=5, mn=0)], {"dim": {"type": "int", "value": 1}}),
}


def _real_data_matmul(tmp_path):
    """A tensor-mode MindSpore dump (.npy files) of mint.matmul: real_data loads the recorded arrays."""
    import numpy as np

    d = tmp_path / "tensor_dump"
    d.mkdir()
    a = np.random.RandomState(1).randn(3, 4).astype(np.float32)
    b = np.random.RandomState(2).randn(4, 5).astype(np.float32)
    recs = []
    for name, x in (("a.npy", a), ("b.npy", b), ("o.npy", a @ b)):
        np.save(d / name, x)
        recs.append({"type": "mindspore.Tensor", "dtype": "Float32", "shape": list(x.shape), "Max": float(x.max()),
                     "Min": float(x.min()), "Mean": float(x.mean()), "data_name": name})
    (d / "dump.json").write_text(json.dumps({
        "task": "tensor", "level": "L1", "framework": "mindspore", "dump_data_dir": str(d),
        "data": {"Mint.matmul.3.forward": {"input_args": recs[:2], "input_kwargs": {}, "output": recs[2:]}}}))
    assert _generate(tmp_path, d / "dump.json", "Mint.matmul.3", framework=None, data_mode="real_data") == 0
    assert f"file={str(d / 'a.npy')!r}" in (tmp_path / "out" / "Mint.matmul.3.forward.py").read_text()
    return "Mint.matmul.3.forward.py"


def test_scripts_run_in_ms_venv(tmp_path, capsys):
    dump = _dump()
    for api, prop, _ in APIS:
        assert _generate(tmp_path, dump, api, prop) == 0
    hand = {name: _extract_script(tmp_path, name, *rec) for name, rec in HAND_MADE.items()}
    real = _real_data_matmul(tmp_path)
    scripts = sorted((tmp_path / "out").glob("*.py"))
    results = _run_in_ms_venv(scripts, tmp_path)
    for api, prop, standard in APIS:
        name = f"{api}.{prop}.py"
        rc, text = results[name]
        assert rc == 0, text[-3000:]
        assert f"{api}.{prop}: mindspore." in text and "on CPU, benchmark on CPU in float64" in text
        assert "iter: 0:" in text and "Compare result:" in text and "index 0:" in text
        assert f"| Compare Standard " in text and standard in text
        assert re.search(r"^verdict: pass$", text, re.M), text
        assert text.rstrip().endswith(f"RESULT: PASS ({api}.{prop}, {standard})"), text[-500:]
        assert "Compare finished." in text
    # backward: the gradients of both matmul inputs, recorded shapes [2, 16] and [16, 16]
    _, mm = results["Mint.matmul.0.backward.py"]
    assert "index 1:" in mm and "| Shape                | [16, 16]" in mm
    rc, text = results[real]
    assert rc == 0 and "random data" not in text and "on CPU, benchmark on CPU in float64, real data" in text
    assert "output 0 is identical to the recorded output" in text or "output 0 differs from the recorded" in text
    assert "RESULT: PASS (Mint.matmul.3.forward, ULP error Standard)" in text
    # a real precision problem is judged error and the script exits 1
    rc, text = results[hand["Functional.square.7"]]
    assert rc == 1, text[-2000:]
    assert "RESULT: ERROR (Functional.square.7.forward, Absolute Threshold Standard)" in text
    assert re.search(r"\| Inf/NaN Mismatch Proportion \| [0-9.e-]+ +\| error", text), text
    rc, text = results[hand["Mint.mul.4"]]
    assert rc == 0 and "benchmark on CPU in float32" in text and "| Dtype of out_device         | BFloat16" in text
    assert "RESULT: PASS (Mint.mul.4.forward, Absolute Threshold Standard)" in text
    rc, text = results[hand["MintFunctional.relu.1"]]
    assert rc == 0 and "mindspore.mint.nn.functional.relu on CPU" in text and "RESULT: PASS" in text
    rc, text = results[hand["Mint.sum.2"]]
    assert rc == 0 and "| Shape                        | [4, 1]" in text and "RESULT: PASS" in text
    rc, text = results[hand["Mint.argmax.0"]]
    assert rc == 2 and "RESULT" not in text and "Traceback" not in text, text[-2000:]
    assert "error: the device run of mindspore.mint.argmax on CPU failed: RuntimeError: The kernel" in text
