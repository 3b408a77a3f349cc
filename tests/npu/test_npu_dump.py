"""Our PrecisionDebugger on the torch_npu code path (CPU, CANN stub): an L1 statistics dump through npu ops, and
L2 (kernel dump) refused without a device. Each scenario runs in its own process (tests/npu/npu_scenarios.py)
with the stub on LD_LIBRARY_PATH, as a user's script would.

While msprobe.pytorch.PrecisionDebugger cannot be imported these tests are xfail (non-strict); they turn on by
themselves once it exists.
"""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import REAL_CANN, STUB_DIR

SCENARIOS = Path(__file__).resolve().parent / "npu_scenarios.py"


def _require_debugger(request):
    """In the test body (a fixture failure would be an error, not an xfail)."""
    try:
        from msprobe.pytorch import PrecisionDebugger  # noqa: F401
    except Exception as exc:  # ImportError, or AttributeError from a lazy package __getattr__
        request.applymarker(pytest.mark.xfail(strict=False, reason="debugger not available yet"))
        pytest.fail(f"msprobe.pytorch.PrecisionDebugger cannot be imported: {type(exc).__name__}: {exc}")


def _run_scenario(which, config, tmp_path, clean_env):
    cfg_path = tmp_path / f"config_{which}.json"
    cfg_path.write_text(json.dumps(config, indent=2))
    out = tmp_path / f"result_{which}.json"
    env = dict(clean_env)
    if STUB_DIR is not None:
        env["LD_LIBRARY_PATH"] = os.pathsep.join([str(STUB_DIR)] + ([env["LD_LIBRARY_PATH"]]
                                                                     if env.get("LD_LIBRARY_PATH") else []))
    res = subprocess.run([sys.executable, str(SCENARIOS), which, str(cfg_path), str(out)], env=env,
                         capture_output=True, text=True, timeout=300, cwd=str(tmp_path))
    result = json.loads(out.read_text()) if out.is_file() else {}
    detail = f"rc={res.returncode}\nresult={json.dumps(result, indent=1)}\nstdout:\n{res.stdout[-4000:]}\n" \
             f"stderr:\n{res.stderr[-4000:]}"
    return res, result, detail


def test_l1_dump_through_npu_op(tmp_path, clean_env, torch_npu, request):
    _require_debugger(request)
    dump_path = tmp_path / "dump"
    config = {"task": "statistics", "dump_path": str(dump_path), "rank": [], "step": [], "level": "L1",
              "async_dump": False,
              "statistics": {"scope": [], "list": [], "data_mode": ["all"], "summary_mode": "statistics"}}
    res, result, detail = _run_scenario("dump", config, tmp_path, clean_env)
    assert res.returncode == 0 and result.get("done"), detail
    assert result["npu_state"] == "no-device" or (REAL_CANN and result["npu_state"] == "available"), detail

    dumps = sorted((dump_path / "step0").glob("*/dump.json"))
    assert len(dumps) == 1, f"expected one dump_path/step0/<rank>/dump.json, found {dumps}\n{detail}"
    doc = json.loads(dumps[0].read_text())
    assert doc.get("task") == "statistics" and doc.get("level") == "L1", {k: doc.get(k) for k in ("task", "level")}
    data = doc["data"]
    assert "NPU.npu_rms_norm.0.forward" in data, sorted(data)
    assert "NPU.npu_fast_gelu.0.forward" in data, sorted(data)
    fwd = data["NPU.npu_rms_norm.0.forward"]
    assert len(fwd["input_args"]) == 2, fwd
    assert [o["shape"] for o in fwd["output"]] == [[2, 8], [2, 1]], fwd
    assert "Functional.linear.0.forward" in data, sorted(data)
    assert not any(k.startswith("Module.") for k in data), "L1 must not record modules"
    # torch_npu's own ops come out under NPU., never under Torch./Tensor.
    assert not any("npu_rms_norm" in k and not k.startswith("NPU.") for k in data), sorted(data)
    backward = [k for k in data if k.startswith("NPU.npu_rms_norm.") and k.endswith(".backward")]
    if backward:  # recorded when the debugger hooks the (fallthrough) autograd of the CPU kernel
        assert backward == ["NPU.npu_rms_norm.0.backward"], backward


def test_l2_without_npu_is_a_clear_error(tmp_path, clean_env, torch_npu, request):
    _require_debugger(request)
    if REAL_CANN:
        pytest.skip("a real NPU is configured: L2 is allowed there")
    config = {"task": "tensor", "dump_path": str(tmp_path / "dump"), "rank": [], "step": [], "level": "L2",
              "async_dump": False,
              "tensor": {"scope": [], "list": ["Functional.linear.0.forward"], "data_mode": ["all"]}}
    res, result, detail = _run_scenario("l2", config, tmp_path, clean_env)
    assert res.returncode == 0 and result.get("done"), detail
    assert result.get("error") == "MsprobeError", detail
    msg = result.get("message", "")
    assert ("L2" in msg or "kernel" in msg.lower()) and ("npu" in msg.lower() or "ascend" in msg.lower()), msg
    assert not (tmp_path / "dump").exists() or not any((tmp_path / "dump").rglob("dump.json"))
