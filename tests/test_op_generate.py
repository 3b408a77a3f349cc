"""op_generate: extraction, generated scripts (run in subprocesses), the precision standards, bad input."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from conftest import FIXTURES, ROOT  # noqa: E402
from msprobe.cli.main import main  # noqa: E402

DATA = Path(__file__).parent / "data" / "op_generate"

# the twelve APIs of the issue, as our dumper names them in dump_net.py
APIS = {
    "Functional.linear.0": "ulp",
    "Functional.conv2d.0": "thousandth",
    "Functional.softmax.0": "benchmark",
    "Functional.layer_norm.0": "benchmark",
    "Functional.gelu.0": "benchmark",
    "Torch.matmul.0": "ulp",
    "Tensor.__add__.0": "absolute",
    "Functional.cross_entropy.0": "benchmark",
    "Functional.embedding.0": "benchmark",
    "Functional.dropout.0": "benchmark",
    "Torch.sum.0": "benchmark",
    "Torch.mean.0": "benchmark",
}
TITLES = {"binary": "Binary Equality Standard", "absolute": "Absolute Threshold Standard",
          "ulp": "ULP error Standard", "thousandth": "Thousandth Standard", "benchmark": "Benchmark Standard"}

# Runs several generated scripts in ONE subprocess (torch is imported once); msprobe imports are blocked,
# so a script that needed msprobe would fail here.
DRIVER = r"""
import runpy, sys
sys.modules["msprobe"] = None
for script in sys.argv[1:]:
    print("=== " + script, flush=True)
    sys.argv = [script]
    try:
        runpy.run_path(script, run_name="__main__")
        code = 0
    except SystemExit as exc:
        code = exc.code
    print("=== exit %s" % code, flush=True)
"""


def run_scripts(scripts, prelude=""):
    env = dict(os.environ, PYTHONPATH="", OMP_NUM_THREADS="1")
    proc = subprocess.run([sys.executable, "-c", prelude + DRIVER, *map(str, scripts)], capture_output=True,
                          text=True, env=env, cwd=str(scripts[0].parent), timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = {}
    for block in re.findall(r"=== (\S+)\n(.*?)=== exit (\S+)", proc.stdout, re.S):
        out[Path(block[0]).name] = (block[1], block[2])
    return out


@pytest.fixture(scope="module")
def dumps(tmp_path_factory):
    base = tmp_path_factory.mktemp("opgen_dumps")
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    for task in ("statistics", "tensor"):
        subprocess.run([sys.executable, str(DATA / "dump_net.py"), str(base / task), task], check=True, env=env,
                       timeout=300)
    return {task: base / task / "step0" / "rank" / "dump.json" for task in ("statistics", "tensor")}


def generate(tmp_path, dump_json, api, propagation="forward", data_mode="random_data", out="out", **extra):
    cfg = {"dump_json_path": str(dump_json), "api_name": api,
           "extract_api_path": str(tmp_path / "extract" / f"{api}.{propagation}.{data_mode}.json"),
           "propagation": propagation, "data_mode": data_mode, "random_seed": 1234, "iter_times": 1}
    cfg.update(extra)
    cfg_path = tmp_path / f"config_{api}_{propagation}_{data_mode}.json"
    cfg_path.write_text(json.dumps({k: v for k, v in cfg.items() if v is not ...}))
    rc = main(["-f", "pytorch", "op_generate", "-i", str(cfg_path), "-o", str(tmp_path / out)])
    return rc, cfg_path


def result_of(text):
    m = re.search(r"RESULT: (PASS|WARNING|ERROR) \(", text)
    assert m, text[-2000:]
    return m.group(1)


# ------------------------------------------------------------------------------------------ the twelve APIs
@pytest.mark.parametrize("data_mode", ["random_data", "real_data"])
def test_twelve_apis_forward_and_backward_run_on_cpu(tmp_path, dumps, data_mode):
    dump = dumps["tensor" if data_mode == "real_data" else "statistics"]
    scripts = []
    for api in APIS:
        for prop in ("forward", "backward"):
            rc, _ = generate(tmp_path, dump, api, prop, data_mode)
            assert rc == 0, (api, prop)
            scripts.append(tmp_path / "out" / f"{api}.{prop}.py")
    results = run_scripts(scripts)
    assert len(results) == len(scripts) == 24
    for script in scripts:
        text, code = results[script.name]
        api = script.name.rsplit(".", 2)[0]
        std = APIS[api]
        assert "Compare finished." in text, text
        verdict = result_of(text)
        assert code == ("1" if verdict == "ERROR" else "0")
        # every compared output names its standard (integer/bool outputs fall back to binary)
        standards = re.findall(r"\| Compare Standard +\| ([A-Za-z ]+?) +\|", text)
        assert standards and set(standards) <= {TITLES[std], TITLES["binary"]}, (script.name, standards)
        assert re.search(r"^verdict: (pass|warning|error)$", text, re.M)
        if data_mode == "real_data":
            assert "real data" in text.splitlines()[0]
    # exact APIs reproduce exactly: the absolute-threshold add and the ULP matmul/linear pass, embedding is a copy
    for name in ("Tensor.__add__.0.forward.py", "Torch.matmul.0.forward.py", "Functional.linear.0.forward.py",
                 "Functional.embedding.0.forward.py", "Torch.sum.0.forward.py", "Functional.softmax.0.forward.py"):
        assert result_of(results[name][0]) == "PASS", results[name][0]
    add = results["Tensor.__add__.0.forward.py"][0]
    assert re.search(r"\| Relative Error Ratio +\| 0 +\| pass", add)
    emb = results["Functional.embedding.0.forward.py"][0]
    assert re.search(r"\| Maximum Relative Error +\| 0 +\| 0 +\| pass", emb)
    # backward of linear compares the gradients of input, weight and bias
    lin = results["Functional.linear.0.backward.py"][0]
    assert re.findall(r"^index (\d+):", lin, re.M) == ["0", "1", "2"]


def test_real_data_reproduces_the_recorded_forward(tmp_path, dumps):
    """With the recorded tensors, the CPU result equals the dump's recorded output (fp32 CPU, same ops)."""
    rc, _ = generate(tmp_path, dumps["tensor"], "Torch.matmul.0", "forward", "real_data")
    assert rc == 0
    script = (tmp_path / "out" / "Torch.matmul.0.forward.py").read_text()
    assert "import msprobe" not in script and "from msprobe" not in script
    extract = json.loads((tmp_path / "extract" / "Torch.matmul.0.forward.real_data.json").read_text())
    rec = extract["Torch.matmul.0.forward"]
    for item in rec["input_args"]:
        assert os.path.isabs(item["data_name"]) and os.path.isfile(item["data_name"])
    assert "Torch.matmul.0.backward" in extract
    text, code = run_scripts([tmp_path / "out" / "Torch.matmul.0.forward.py"])["Torch.matmul.0.forward.py"]
    assert code == "0" and "warning: output" not in text
    assert "output 0 is identical to the recorded output" in text
    m = re.search(r"\| Mean ULP Error +\| ([0-9.e+-]+) ", text)
    assert m and float(m.group(1)) < 4.0


def test_random_data_follows_the_recorded_statistics():
    from msprobe.pytorch.op_generate.runtime import T, random_tensor

    gen = torch.Generator().manual_seed(0)
    spec = T("torch.float32", [64, 64], min=-3.0, max=5.0, mean=0.5, norm=64 * 1.2)
    t = random_tensor(spec, gen)
    assert t.dtype == torch.float32 and list(t.shape) == [64, 64]
    assert t.min().item() == -3.0 and t.max().item() == 5.0
    assert t.flatten()[0].item() == -3.0 and t.flatten()[-1].item() == 5.0
    assert abs(t.mean().item() - 0.5) < 0.05
    assert abs(t.norm().item() - 64 * 1.2) / (64 * 1.2) < 0.05
    ints = random_tensor(T("torch.int64", [100], min=2, max=7), gen)
    assert ints.dtype == torch.int64 and ints.min().item() == 2 and ints.max().item() == 7
    flags = random_tensor(T("torch.bool", [10], min=False, max=True), gen)
    assert flags.dtype == torch.bool and not flags[0] and flags[-1]
    bf = random_tensor(T("torch.bfloat16", [3], min=float("-inf"), max=1.0), gen)
    assert bf.dtype == torch.bfloat16 and bf[0].item() == float("-inf")
    assert random_tensor(T("torch.float16", [0, 3]), gen).shape == (0, 3)


# ------------------------------------------------------------------------------------------ reference dumps
def _fixture_dump(case):
    if not FIXTURES.is_dir():
        pytest.skip(f"reference fixtures not found at {FIXTURES} (../shared/fixtures is absent)")
    return FIXTURES / case / "target" / "step0" / "rank" / "dump.json"


def test_reference_dump_autocast_and_relocated_tensors(tmp_path):
    """The reference's fp16-autocast CNN dump: its dump_data_dir points at another machine, so the tensors
    are found beside dump.json; conv2d/linear/cross_entropy run under autocast like the original call."""
    dump = _fixture_dump("cnn_fp16_tensor_mix")
    scripts = []
    for api, prop in (("Functional.conv2d.0", "forward"), ("Functional.linear.0", "backward"),
                      ("Functional.cross_entropy.0", "forward"), ("Functional.batch_norm.0", "forward"),
                      ("Tensor.add_.0", "forward")):
        rc, _ = generate(tmp_path, dump, api, prop, "real_data")
        assert rc == 0
        scripts.append(tmp_path / "out" / f"{api}.{prop}.py")
    conv = scripts[0].read_text()
    assert "AUTOCAST = 'torch.float16'" in conv
    assert "AUTOCAST = None" in scripts[4].read_text()  # int64 add_: no floating dtypes at all
    assert str(dump.parent / "dump_tensor_data" / "Functional.conv2d.0.forward.input.0.pt") in conv
    results = run_scripts(scripts)
    for s in scripts:
        text, _ = results[s.name]
        result_of(text)
        assert "warning: output" not in text, text  # output dtypes equal the recorded ones
    assert re.search(r"\| Dtype of out_device +\| torch.float16", results["Functional.conv2d.0.forward.py"][0])
    assert re.search(r"\| Dtype of out_device +\| torch.float32", results["Functional.cross_entropy.0.forward.py"][0])
    # int64 in-place add is judged by binary consistency and is exact
    add = results["Tensor.add_.0.forward.py"][0]
    assert "Binary Equality Standard" in add and result_of(add) == "PASS"
    # fp32 weight gradients computed under fp16 autocast are judged with fp16 thresholds
    assert "torch.float16 (computed under autocast)" in results["Functional.linear.0.backward.py"][0]


def test_reference_bf16_statistics_dump_random_data(tmp_path):
    dump = _fixture_dump("mlp_bf16_stat_mix")
    rc, _ = generate(tmp_path, dump, "Functional.gelu.0", "backward", "random_data", iter_times=3)
    assert rc == 0
    script = tmp_path / "out" / "Functional.gelu.0.backward.py"
    text, _ = run_scripts([script])[script.name]
    assert [int(i) for i in re.findall(r"^iter: (\d+):", text, re.M)] == [0, 1, 2]
    assert "torch.bfloat16" in text and "Benchmark Standard" in text
    result_of(text)


# ------------------------------------------------------------------------------------------ a wrong API is caught
NOISE = r"""
import torch
def _noisy(orig):
    def wrapper(*args, **kwargs):
        out = orig(*args, **kwargs)
        if isinstance(out, torch.Tensor) and out.is_floating_point() and out.dtype != torch.float64:
            g = torch.Generator().manual_seed(0)
            scale = torch.add(torch.mul(out.detach().abs().mean(), 0.05), 1e-3)
            out = torch.add(out, torch.mul(torch.randn(out.shape, generator=g).to(out.dtype), scale))
        return out
    return wrapper
torch.nn.functional.softmax = _noisy(torch.nn.functional.softmax)
torch.nn.functional.linear = _noisy(torch.nn.functional.linear)
torch.nn.functional.conv2d = _noisy(torch.nn.functional.conv2d)
torch.Tensor.__add__ = _noisy(torch.Tensor.__add__)
"""


def test_a_noisy_api_is_judged_error_by_its_standard(tmp_path, dumps):
    cases = {"Functional.softmax.0": ("Maximum Relative Error", "benchmark"),
             "Functional.linear.0": ("ULP Error Proportion", "ulp"),
             "Functional.conv2d.0": ("Thousandth ratio", "thousandth"),
             "Tensor.__add__.0": ("Relative Error Ratio", "absolute")}
    scripts = []
    for api in cases:
        rc, _ = generate(tmp_path, dumps["statistics"], api, "forward", "random_data")
        assert rc == 0
        scripts.append(tmp_path / "out" / f"{api}.forward.py")
    clean = run_scripts(scripts)
    noisy = run_scripts(scripts, prelude=NOISE)
    for s in scripts:
        api = s.name[: -len(".forward.py")]
        metric, std = cases[api]
        assert result_of(clean[s.name][0]) == "PASS", clean[s.name][0]
        text, code = noisy[s.name]
        assert TITLES[std] in text
        assert result_of(text) == "ERROR" and code == "1", text
        assert re.search(rf"\| {re.escape(metric)} +\|[^\n]*\| error +\|", text), text


# ------------------------------------------------------------------------------------------ metrics
def test_standard_formulas_on_known_values():
    from msprobe.pytorch.op_generate import runtime as rt

    b = torch.tensor([1.0, 2.0, 1e-8, 4.0], dtype=torch.float64)
    d = torch.tensor([1.0, 2.0 + 8e-6, 1e-8 + 1e-8, 4.0], dtype=torch.float32)
    m = rt.absolute_metrics(d, b, torch.float32)
    assert m["Relative Error Ratio"] == pytest.approx(1 / 3)  # 8e-6 / 2 = 4e-6 > rtol 1e-6 on 1 of 3 normal values
    assert m["Absolute Error Ratio"] == 1.0  # the one small value is off by 1e-8 > atol 1e-9
    ulp = rt.ulp_errors(torch.tensor([1.0 + 2 ** -23], dtype=torch.float32), torch.tensor([1.0], dtype=torch.float64),
                        torch.float32)
    assert ulp.item() == pytest.approx(1.0)
    ulp16 = rt.ulp_errors(torch.tensor([1.0 + 2 * 2 ** -10], dtype=torch.float16), torch.tensor([1.0]),
                          torch.float16)
    assert ulp16.item() == pytest.approx(2.0)
    um = rt.ulp_metrics(torch.tensor([1.0, 2.0 + 40 * 2 ** -22]), torch.tensor([1.0, 2.0], dtype=torch.float64),
                        torch.float32)
    assert um["Maximum ULP Error"] == pytest.approx(40) and um["ULP Error Proportion"] == 0.5
    assert rt.binary_metrics(torch.tensor([1, 2, 3]), torch.tensor([1, 0, 3]))["Error Rate"] == pytest.approx(1 / 3)
    th = rt.thousandth_metrics(torch.tensor([1.0, 1.01]), torch.tensor([1.0, 1.0], dtype=torch.float64))
    assert th["Thousandth ratio"] == 0.5
    bm = rt.benchmark_metrics(torch.tensor([1.1, 2.0, 3.0, 0.0]), torch.tensor([1.0, 2.0, 3.3, 0.0], dtype=torch.float64),
                              torch.float32)
    assert bm["Maximum Relative Error"] == pytest.approx(0.1, rel=1e-5)
    assert bm["Mean Relative Error"] == pytest.approx((0.1 + 0 + 0.3 / 3.3) / 3, rel=1e-5)
    assert bm["Root Mean Squared Error"] == pytest.approx(((0.01 + 0.09) / 3) ** 0.5, rel=1e-5)
    assert bm["Error Balance"] == 0.0  # one above, one below
    assert bm["Small Value Error Proportion"] == 0.0
    # nan/inf must match exactly
    assert rt.absolute_metrics(torch.tensor([float("nan"), 1.0]), torch.tensor([1.0, 1.0], dtype=torch.float64),
                               torch.float32)["Inf/NaN Mismatch Proportion"] == 0.5


def test_verdict_bands():
    from msprobe.pytorch.op_generate import runtime as rt

    base = {"Small Value Error Proportion": 0.0, "Maximum Relative Error": 1e-3, "Mean Relative Error": 1e-3,
            "Root Mean Squared Error": 1e-3, "Error Balance": 0.0, "Inf/NaN Mismatch Proportion": 0.0}
    rows, v = rt.judge("benchmark", torch.float16, dict(base, **{"Mean Relative Error": 1.5e-3}), base)
    assert v == "warning"
    rows, v = rt.judge("benchmark", torch.float16, dict(base, **{"Maximum Relative Error": 5e-3}), base)
    assert v == "warning"  # max relative error band is 1..10
    rows, v = rt.judge("benchmark", torch.float16, dict(base, **{"Maximum Relative Error": 2e-2}), base)
    assert v == "error"
    rows, v = rt.judge("benchmark", torch.float16, dict(base, **{"Error Balance": 0.9}), base)
    assert v == "pass" and ("Error Balance", 0.9, 0.9 / 2 ** -11, "error (info)") in rows
    # below the dtype floor (fp16: 2**-11) nothing is an error
    tiny = dict(base, **{k: 1e-5 for k in ("Maximum Relative Error", "Mean Relative Error", "Root Mean Squared Error")})
    assert rt.judge("benchmark", torch.float16, dict(tiny, **{"Maximum Relative Error": 4e-4}), tiny)[1] == "pass"
    ulp = {"Maximum ULP Error": 100.0, "Mean ULP Error": 70.0, "ULP Error Proportion": 0.2}
    assert rt.judge("ulp", torch.float32, ulp)[1] == "error"
    assert rt.judge("ulp", torch.float32, dict(ulp, **{"Mean ULP Error": 63.0}))[1] == "pass"
    assert rt.judge("ulp", torch.float16, dict(ulp, **{"ULP Error Proportion": 0.0005}))[1] == "pass"
    assert rt.judge("ulp", torch.float16, ulp, dict(ulp, **{"ULP Error Proportion": 0.3}))[1] == "pass"  # beats reference
    assert rt.judge("thousandth", torch.float16, {"Thousandth ratio": 0.999})[1] == "error"
    assert rt.judge("thousandth", torch.float16, {"Thousandth ratio": 0.9995})[1] == "pass"
    assert rt.standard_for("conv2d") == "thousandth" and rt.standard_for("__radd__") == "absolute"
    assert rt.standard_for("topk") == "binary" and rt.standard_for("bmm") == "ulp"
    assert rt.standard_for("softmax") == "benchmark"


# ------------------------------------------------------------------------------------------ bad input, one line each
def _err(capsys):
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("msprobe: error: "), err
    return err[0]


def test_api_not_in_dump(tmp_path, dumps, capsys):
    rc, _ = generate(tmp_path, dumps["statistics"], "Functional.softmx.0")
    assert rc == 2
    msg = _err(capsys)
    assert "api 'Functional.softmx.0' is not in dump.json" in msg and "Functional.softmax.0" in msg
    assert not (tmp_path / "out").exists() or not list((tmp_path / "out").iterdir())


def test_backward_entry_missing(tmp_path, dumps, capsys):
    # the implicit gradient of loss.backward() (a tensor that needs no grad) has no backward record; since
    # issue 15 dropout(p=0), which returns its input, has one (the identity on the gradient)
    rc, _ = generate(tmp_path, dumps["statistics"], "Torch.ones_like.0", "backward")
    assert rc == 2
    assert "has no backward record for Torch.ones_like.0" in _err(capsys)


def test_real_data_without_tensors(tmp_path, dumps, capsys):
    rc, _ = generate(tmp_path, dumps["statistics"], "Functional.linear.0", "forward", "real_data")
    assert rc == 2
    msg = _err(capsys)
    assert "real_data mode needs the recorded tensors" in msg and "task 'tensor'" in msg


def test_real_data_with_missing_tensor_file(tmp_path, dumps, capsys):
    src = dumps["tensor"]
    copy = tmp_path / "copy" / "dump.json"
    copy.parent.mkdir()
    doc = json.loads(src.read_text())
    doc["dump_data_dir"] = str(tmp_path / "nowhere")
    copy.write_text(json.dumps(doc))
    rc, _ = generate(tmp_path, copy, "Functional.linear.0", "forward", "real_data")
    assert rc == 2
    assert "tensor file" in _err(capsys)


@pytest.mark.parametrize("change, expected", [
    ({"propagation": "sideways"}, "propagation is invalid, it should be one of ['forward', 'backward']"),
    ({"data_mode": "fake"}, "data_mode is invalid"),
    ({"iter_times": 0}, "'iter_times' must be between 1 and 1000"),
    ({"random_seed": "x"}, "'random_seed' must be an integer"),
    ({"api_nme": "x"}, "unknown key 'api_nme' (did you mean 'api_name'?)"),
    ({"extract_api_path": ...}, "'extract_api_path' is required"),
    ({"api_name": "Functional.lin ear.0"}, "is not a dump name"),
])
def test_bad_config(tmp_path, dumps, capsys, change, expected):
    extra = dict(change)
    api = extra.pop("api_name", "Functional.linear.0")
    rc, _ = generate(tmp_path, dumps["statistics"], api, **extra)
    assert rc == 2
    assert expected in _err(capsys)


def test_config_not_an_object_and_unsupported_type(tmp_path, dumps, capsys):
    cfg = tmp_path / "c.json"
    cfg.write_text("[1, 2]")
    assert main(["op_generate", "-i", str(cfg), "-o", str(tmp_path / "o")]) == 2
    assert "top level must be an object" in _err(capsys)
    rc, _ = generate(tmp_path, dumps["statistics"], "Tensor.reshape.0")
    assert rc == 0  # Tensor methods are fine
    doc = json.loads(dumps["statistics"].read_text())
    doc["data"] = {"Distributed.all_reduce.0.forward": {"input_args": [], "input_kwargs": {}, "output": []}}
    other = tmp_path / "dist" / "dump.json"
    other.parent.mkdir()
    other.write_text(json.dumps(doc))
    rc, _ = generate(tmp_path, other, "Distributed.all_reduce.0")
    assert rc == 2
    assert "type 'Distributed' is not supported" in _err(capsys)
    _, torch_cfg = generate(tmp_path, dumps["statistics"], "Tensor.reshape.0", out="o2")
    rc = main(["-f", "mindspore", "op_generate", "-i", str(torch_cfg), "-o", str(tmp_path / "o")])
    assert rc == 2 and "is a PyTorch dump" in _err(capsys)  # MindSpore op_generate: tests/test_op_generate_mindspore.py


def test_results_are_never_overwritten(tmp_path, dumps, capsys):
    rc, cfg = generate(tmp_path, dumps["statistics"], "Torch.sum.0")
    assert rc == 0
    first = (tmp_path / "out" / "Torch.sum.0.forward.py").read_text()
    assert main(["op_generate", "-i", str(cfg), "-o", str(tmp_path / "out")]) == 0  # same extract: reused
    assert sorted(os.listdir(tmp_path / "out")) == ["Torch.sum.0.forward.py", "Torch.sum.0.forward_1.py"]
    assert (tmp_path / "out" / "Torch.sum.0.forward_1.py").read_text() == first
    # a different API into the same extract_api_path is refused, the old file kept
    doc = json.loads(cfg.read_text())
    extract = Path(doc["extract_api_path"])
    before = extract.read_bytes()
    doc["api_name"] = "Torch.mean.0"
    cfg.write_text(json.dumps(doc))
    capsys.readouterr()
    assert main(["op_generate", "-i", str(cfg), "-o", str(tmp_path / "out")]) == 2
    assert "exists and holds something else" in _err(capsys)
    assert extract.read_bytes() == before


def test_regenerate_from_an_edited_extract(tmp_path, dumps):
    """Without dump_json_path the (hand-edited) extract is used: here the input is made 3x bigger."""
    rc, cfg = generate(tmp_path, dumps["statistics"], "Functional.gelu.0")
    assert rc == 0
    doc = json.loads(cfg.read_text())
    extract = json.loads(Path(doc["extract_api_path"]).read_text())
    extract["Functional.gelu.0.forward"]["input_args"][0]["shape"] = [12, 2, 8]
    edited = tmp_path / "edited.json"
    edited.write_text(json.dumps(extract))
    cfg2 = tmp_path / "c2.json"
    cfg2.write_text(json.dumps({"extract_api_path": str(edited)}))
    assert main(["op_generate", "-i", str(cfg2), "-o", str(tmp_path / "out2")]) == 0
    text = (tmp_path / "out2" / "Functional.gelu.0.forward.py").read_text()
    assert "[12, 2, 8]" in text


def test_autocast_inputs_rounds_only_what_autocast_casts():
    from msprobe.pytorch.op_generate import runtime as rt

    g = torch.Generator().manual_seed(0)
    x, w = torch.randn(4, 8, generator=g), torch.randn(3, 8, generator=g)
    (rx, rw), _ = rt.autocast_inputs(torch.nn.functional.linear, [x, w], {}, torch.bfloat16, "cpu")
    assert rx.dtype == torch.float32 and torch.equal(rx, x.bfloat16().float()) and not torch.equal(rx, x)
    assert torch.equal(rw, w.bfloat16().float())
    h = torch.randn(4, 8, generator=g).half()
    mean, var = torch.randn(8, generator=g) * 0.1, torch.rand(8, generator=g) + 0.5
    (rh, rmean, rvar), _ = rt.autocast_inputs(torch.nn.functional.batch_norm, [h, mean, var], {}, torch.float16, "cpu")
    assert torch.equal(rmean, mean) and torch.equal(rvar, var)  # batch_norm keeps its fp32 statistics


def test_reference_bf16_autocast_linear_backward_passes(tmp_path):
    """The reference's generated script runs this fp32-weight/bf16-autocast call without autocast and reports
    fp32 ULP errors up to 348; reproduced under autocast from the same inputs, the API itself passes."""
    src = _fixture_dump("mlp_bf16_tensor_mix")
    rc, _ = generate(tmp_path, src, "Functional.linear.0", "backward", "real_data")
    assert rc == 0
    script = tmp_path / "out" / "Functional.linear.0.backward.py"
    assert "AUTOCAST = 'torch.bfloat16'" in script.read_text()
    text, code = run_scripts([script])[script.name]
    assert result_of(text) == "PASS" and code == "0", text
    assert text.count("torch.bfloat16 (computed under autocast)") == 2  # weight and bias gradients (fp32)


def test_script_failures_are_one_line(tmp_path, dumps):
    rc, cfg = generate(tmp_path, dumps["statistics"], "Torch.matmul.0")
    assert rc == 0
    doc = json.loads(cfg.read_text())
    extract = json.loads(Path(doc["extract_api_path"]).read_text())
    extract["Torch.matmul.0.forward"]["input_args"][1]["shape"] = [3, 8]  # no longer fits [4, 2, 8]
    edited = tmp_path / "broken.json"
    edited.write_text(json.dumps(extract))
    cfg2 = tmp_path / "c2.json"
    cfg2.write_text(json.dumps({"extract_api_path": str(edited)}))
    assert main(["op_generate", "-i", str(cfg2), "-o", str(tmp_path / "out2")]) == 0
    script = tmp_path / "out2" / "Torch.matmul.0.forward.py"
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2
    err = proc.stderr.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: the device run of Torch.matmul on cpu failed: RuntimeError")
    # without torch: one line too
    proc = subprocess.run([sys.executable, "-c", "import sys, runpy; sys.modules['torch'] = None; "
                           f"sys.argv = [{str(script)!r}]; runpy.run_path({str(script)!r}, run_name='__main__')"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1 and proc.stderr.strip() == "error: this script needs PyTorch: pip install torch (on Ascend also torch_npu)"


def _t(dtype, shape, lo, hi, grad=False):
    return {"type": "torch.Tensor", "dtype": dtype, "shape": shape, "Max": hi, "Min": lo, "Mean": (lo + hi) / 2,
            "Norm": 1.0, "requires_grad": grad}


def test_argument_kinds_are_rebuilt(tmp_path):
    """Slices and Ellipsis in an index tuple, dtype / device keywords, torch.Size, numpy scalars, None."""
    data = {
        "Tensor.__getitem__.0.forward": {
            "input_args": [_t("torch.float32", [4, 6], -1.0, 1.0),
                           [{"type": "slice", "value": [1, 3, None]}, {"type": "ellipsis", "value": "..."}]],
            "input_kwargs": {}, "output": [_t("torch.float32", [2, 6], -1.0, 1.0)]},
        "Torch.sum.0.forward": {
            "input_args": [_t("torch.float16", [8, 3], -2.0, 2.0), {"type": "int", "value": 0}],
            "input_kwargs": {"dtype": {"type": "torch.dtype", "value": "torch.float32"},
                             "keepdim": {"type": "bool", "value": True}},
            "output": [_t("torch.float32", [1, 3], -2.0, 2.0)]},
        "Torch.ones_like.0.forward": {
            "input_args": [_t("torch.bfloat16", [2, 2], 0.0, 1.0)],
            "input_kwargs": {"device": {"type": "torch.device", "value": "cpu:None"}},
            "output": [_t("torch.bfloat16", [2, 2], 1.0, 1.0)]},
        "Torch.zeros.0.forward": {
            "input_args": [{"type": "torch.Size", "value": [2, 3]}], "input_kwargs": {},
            "output": [_t("torch.float32", [2, 3], 0.0, 0.0)]},
        "Torch.clamp.0.forward": {
            "input_args": [_t("torch.float32", [5], -3.0, 3.0), {"type": "float32", "value": -1.5}, None],
            "input_kwargs": {}, "output": [_t("torch.float32", [5], -1.5, 3.0)]},
    }
    dump = tmp_path / "dump.json"
    dump.write_text(json.dumps({"task": "statistics", "level": "L1", "framework": "pytorch", "dump_data_dir": None,
                                "data": data}))
    scripts = []
    for key in data:
        api = key[: -len(".forward")]
        rc, _ = generate(tmp_path, dump, api)
        assert rc == 0
        scripts.append(tmp_path / "out" / f"{api}.forward.py")
    text = scripts[0].read_text()
    assert "(slice(1, 3, None), Ellipsis, )" in text
    assert "AUTOCAST = None" in scripts[1].read_text()  # sum(fp16, dtype=float32): an explicit dtype, not autocast
    assert "'dtype': DType('torch.float32')" in scripts[1].read_text()
    assert "'device': Device('cpu:None')" in scripts[2].read_text()
    results = run_scripts(scripts)
    for s in scripts:
        out, _ = results[s.name]
        assert result_of(out) == "PASS", out
        assert "warning: output" not in out, out
    assert re.search(r"\| Shape +\| \[2, 6\]", results["Tensor.__getitem__.0.forward.py"][0])
    assert re.search(r"\| Dtype of out_device +\| torch.float32", results["Torch.sum.0.forward.py"][0])
    assert re.search(r"\| Dtype of out_bench +\| torch.float64", results["Torch.sum.0.forward.py"][0])
