"""The torch_npu code path, from the main suite (torch 2.13.0+cpu, no torch_npu).

- npu_state() is 'absent' here, without importing torch or torch_npu; the other states are checked with fakes.
- tests/npu (torch_npu through the CANN stub) is run in `.venv-npu` as a subprocess, so `make test` covers the
  NPU path whenever `make npu-venv` could build that venv (`make test` tries to).
"""
import importlib.util
import os
import re
import subprocess
import sys
import types

import pytest

from background import Suite, result, runs_early
from conftest import ROOT

NPU_PY = ROOT / ".venv-npu" / "bin" / "python"
HINT = "run `make npu-venv` to build the torch_npu + CANN-stub venv"


def _torch_npu_installed():
    try:
        return importlib.util.find_spec("torch_npu") is not None
    except (ImportError, ValueError):
        return True


@pytest.fixture
def npu(monkeypatch):
    from msprobe.pytorch import npu as mod
    before = sys.modules.get("torch_npu")
    mod._reset_cache()
    yield mod
    monkeypatch.undo()
    if before is None:  # drop a fake torch_npu imported by the test
        sys.modules.pop("torch_npu", None)
    else:
        sys.modules["torch_npu"] = before
    mod._reset_cache()


def test_import_is_torch_free():
    code = ("import sys\n"
            "import msprobe.pytorch.npu as n\n"
            "assert 'torch' not in sys.modules and 'torch_npu' not in sys.modules\n"
            "s = n.npu_state()\n"
            "print('STATE=' + s, 'torch' in sys.modules, 'torch_npu' in sys.modules)\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    res = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120,
                         cwd=str(ROOT))
    assert res.returncode == 0, res.stderr
    if not _torch_npu_installed():
        # 'absent' is decided by find_spec alone: neither torch nor torch_npu gets imported
        assert res.stdout.split() == ["STATE=absent", "False", "False"], res.stdout


def test_npu_state_absent(npu):
    if _torch_npu_installed():
        pytest.skip("torch_npu is installed in this interpreter")
    assert npu.npu_state() == "absent"
    assert npu.npu_state() == "absent"
    assert npu.npu_module() is None
    assert npu.is_npu_available() is False
    assert npu.has_npu_api("npu_rms_norm") is False
    assert "torch_npu" not in sys.modules


def _fake_torch_npu(tmp_path, monkeypatch, body):
    pkg = tmp_path / "fakes" / "torch_npu"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text(body)
    monkeypatch.syspath_prepend(str(tmp_path / "fakes"))
    monkeypatch.delitem(sys.modules, "torch_npu", raising=False)


def test_npu_state_broken_import(npu, tmp_path, monkeypatch):
    pytest.importorskip("torch")
    if _torch_npu_installed():
        pytest.skip("torch_npu is installed in this interpreter")
    _fake_torch_npu(tmp_path, monkeypatch,
                    'raise ImportError("libhccl.so: cannot open shared object file: No such file or directory")\n')
    state = npu.npu_state()
    assert state == "broken:ImportError: libhccl.so: cannot open shared object file: No such file or directory"
    assert npu.npu_module() is None and npu.has_npu_api("npu_rms_norm") is False


def test_npu_state_broken_chained_cause(npu, tmp_path, monkeypatch):
    pytest.importorskip("torch")
    if _torch_npu_installed():
        pytest.skip("torch_npu is installed in this interpreter")
    _fake_torch_npu(tmp_path, monkeypatch,
                    "try:\n    raise ImportError('libhccl.so: cannot open shared object file')\n"
                    "except ImportError as e:\n"
                    "    raise RuntimeError('Failed to load the backend extension: torch_npu.\\nsecond line') from e\n")
    assert npu.npu_state() == ("broken:RuntimeError: Failed to load the backend extension: torch_npu. "
                               "<- ImportError: libhccl.so: cannot open shared object file")


@pytest.mark.parametrize("available,count,expected", [(False, 0, "no-device"), (True, 0, "no-device"),
                                                      (True, 2, "available")])
def test_npu_state_from_torch_npu(npu, tmp_path, monkeypatch, available, count, expected):
    torch = pytest.importorskip("torch")
    if _torch_npu_installed():
        pytest.skip("torch_npu is installed in this interpreter")
    _fake_torch_npu(tmp_path, monkeypatch, "def npu_rms_norm(*a):\n    pass\n")
    monkeypatch.setattr(torch, "npu", types.SimpleNamespace(is_available=lambda: available,
                                                            device_count=lambda: count), raising=False)
    assert npu.npu_state() == expected
    assert npu.npu_module() is sys.modules["torch_npu"]
    assert npu.is_npu_available() is (expected == "available")
    assert npu.has_npu_api("npu_rms_norm") and not npu.has_npu_api("npu_nothing")


def test_npu_state_device_query_raises(npu, tmp_path, monkeypatch):
    torch = pytest.importorskip("torch")
    if _torch_npu_installed():
        pytest.skip("torch_npu is installed in this interpreter")
    _fake_torch_npu(tmp_path, monkeypatch, "")

    def boom():
        raise RuntimeError("Failed to find function aclrtGetDeviceCount")

    monkeypatch.setattr(torch, "npu", types.SimpleNamespace(is_available=boom, device_count=boom), raising=False)
    assert npu.npu_state() == "broken:RuntimeError: Failed to find function aclrtGetDeviceCount"
    assert npu.npu_module() is None


def test_npu_state_torch_npu_without_torch_npu_attr(npu, tmp_path, monkeypatch):
    torch = pytest.importorskip("torch")
    if _torch_npu_installed():
        pytest.skip("torch_npu is installed in this interpreter")
    _fake_torch_npu(tmp_path, monkeypatch, "")
    monkeypatch.delattr(torch, "npu", raising=False)
    assert npu.npu_state().startswith("broken:")


def _npu_suite():
    if not NPU_PY.exists():
        return None
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("PYTEST_") and k not in ("PYTHONPATH", "VIRTUAL_ENV", "TORCH_DEVICE_BACKEND_AUTOLOAD")}
    return Suite(str(NPU_PY), "tests/npu", str(ROOT), env, timeout=900)


@runs_early(_npu_suite)
def test_tests_npu_in_npu_venv(request):
    """Runs tests/npu with .venv-npu (torch 2.13.0+cpu + torch-npu 2.13.0 + the CANN stub), started after
    collection so that it runs beside the rest of the suite (tests/background.py)."""
    if not NPU_PY.exists():
        pytest.skip(f"{NPU_PY.relative_to(ROOT)} not found: {HINT}")
    rc, out = result(request.node.nodeid, _npu_suite)
    tail = out[-6000:]
    # an incomplete venv (failed install or stub build): the conftest skips everything with its reason
    m = re.search(r"SKIPPED \[\d+\] \S+: (torch_npu is not installed[^\n]*|CANN stub not found[^\n]*)", out)
    if rc == 0 and m and not re.search(r"\b\d+ passed\b", out):
        pytest.skip(f".venv-npu is incomplete: {m.group(1)}")
    assert rc == 0, f"tests/npu failed in .venv-npu (rc={rc}; None: over its time limit):\n{tail}"
    summary = out.strip().splitlines()[-1] if out.strip() else ""
    assert re.search(r"\b\d+ passed\b", summary), f"no test passed in tests/npu:\n{tail}"
    assert not re.search(r"\b\d+ (failed|errors?)\b", summary), tail
