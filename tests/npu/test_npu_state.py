"""npu_state() and torch_npu through the CANN stub (frameworks.md §5 "How a tool should detect NPU safely", §6).

The first tests run subprocesses WITHOUT the stub: there torch_npu is installed but cannot load, which is what a
user gets with torch_npu and no CANN. The rest run in this process, where the conftest preloaded the stub.
"""
import subprocess
import sys

import pytest

from .conftest import REAL_CANN

needs_stub = pytest.mark.skipif(REAL_CANN, reason="a real CANN is configured: the no-CANN behaviour "
                                                         "cannot be reproduced here")


def _run(code, env, timeout=180):
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=timeout)


@needs_stub
def test_import_torch_fails_without_cann(clean_env):
    """torch auto-loads torch_npu, so with torch_npu installed and no CANN even `import torch` fails."""
    res = _run("import torch", clean_env)
    assert res.returncode != 0, res.stdout + res.stderr
    assert "RuntimeError: Failed to load the backend extension: torch_npu" in res.stderr, res.stderr
    assert "libhccl.so" in res.stderr or "cannot open shared object file" in res.stderr, res.stderr


@needs_stub
def test_npu_state_broken_without_cann(clean_env):
    """npu_state() reports 'broken:...' (never raises) where `import torch` itself fails, and caches the answer."""
    code = (
        "import sys\n"
        "from msprobe.pytorch import npu\n"
        "assert 'torch' not in sys.modules, 'msprobe.pytorch.npu imported torch at import time'\n"
        "s1 = npu.npu_state(); s2 = npu.npu_state()\n"
        "assert s1 == s2, (s1, s2)\n"
        "assert npu.npu_module() is None\n"
        "assert npu.has_npu_api('npu_rms_norm') is False\n"
        "assert npu.is_npu_available() is False\n"
        "print('STATE=' + s1)\n"
    )
    res = _run(code, clean_env)
    assert res.returncode == 0, res.stdout + res.stderr
    state = res.stdout.split("STATE=", 1)[1].strip()
    assert state.startswith("broken:"), state
    assert "Failed to load the backend extension: torch_npu" in state, state
    assert "libhccl.so" in state, state  # the chained ImportError names the missing CANN library


@needs_stub
def test_npu_state_broken_with_autoload_off(clean_env):
    """With TORCH_DEVICE_BACKEND_AUTOLOAD=0 torch imports, and `import torch_npu` is what fails: still 'broken'."""
    env = dict(clean_env, TORCH_DEVICE_BACKEND_AUTOLOAD="0")
    res = _run("from msprobe.pytorch.npu import npu_state\nprint('STATE=' + npu_state())", env)
    assert res.returncode == 0, res.stdout + res.stderr
    state = res.stdout.split("STATE=", 1)[1].strip()
    assert state.startswith("broken:ImportError"), state
    assert "libhccl.so" in state, state


@needs_stub
def test_device_calls_raise_cleanly(stub_dir, clean_env):
    """Through the stub, device-touching calls raise a RuntimeError (no crash). Own process: a failed lazy device
    init must not leak into the other tests."""
    env = dict(clean_env, LD_LIBRARY_PATH=str(stub_dir))
    code = (
        "import torch, torch_npu\n"
        "assert torch.npu.is_available() is False and torch.npu.device_count() == 0\n"
        "for f in (lambda: torch.zeros(1, device='npu'), lambda: torch.ones(2).npu(), torch.npu.current_device):\n"
        "    try:\n"
        "        f()\n"
        "    except RuntimeError as e:\n"
        "        assert 'aclrt' in str(e), e\n"
        "    else:\n"
        "        raise AssertionError('device call did not raise')\n"
        "print('OK')\n"
    )
    res = _run(code, env)
    assert res.returncode == 0 and "OK" in res.stdout, res.stdout + res.stderr


def test_npu_state_with_stub(torch_npu):
    from msprobe.pytorch import npu
    npu._reset_cache()
    try:
        state = npu.npu_state()
        assert state == "no-device" or (REAL_CANN and state == "available"), state
        assert npu.npu_state() is state  # cached
        assert npu.npu_module() is torch_npu
        assert npu.is_npu_available() is (state == "available")
    finally:
        npu._reset_cache()


def test_reset_cache_recomputes(torch_npu, monkeypatch):
    from msprobe.pytorch import npu
    npu._reset_cache()
    try:
        first = npu.npu_state()
        monkeypatch.setattr(npu, "_compute_state", lambda: "absent")
        assert npu.npu_state() == first  # cached: not recomputed
        npu._reset_cache()
        assert npu.npu_state() == "absent"
        assert npu.npu_module() is None
    finally:
        monkeypatch.undo()
        npu._reset_cache()


def test_npu_state_never_raises(monkeypatch):
    from msprobe.pytorch import npu

    def boom():
        raise RuntimeError("unexpected\nsecond line")

    npu._reset_cache()
    monkeypatch.setattr(npu, "_compute_state", boom)
    try:
        assert npu.npu_state() == "broken:RuntimeError: unexpected"
    finally:
        monkeypatch.undo()
        npu._reset_cache()


def test_npu_ops_exist(torch_npu):
    import torch
    from msprobe.pytorch.npu import has_npu_api
    for name in ("npu_rms_norm", "npu_fast_gelu", "npu_fusion_attention", "npu_rotary_mul"):
        assert hasattr(torch_npu, name), name
        assert hasattr(torch.ops.npu, name), name
        assert has_npu_api(name)
    assert not has_npu_api("npu_no_such_op")


def test_npu_op_without_cpu_kernel_raises(torch_npu):
    """npu ops have no CPU kernel of their own (npu_rotary_mul is left unregistered by these tests)."""
    import torch
    x = torch.randn(1, 2, 1, 4)
    with pytest.raises(NotImplementedError, match="CPU"):
        torch_npu.npu_rotary_mul(x, torch.ones_like(x), torch.zeros_like(x))


def test_cpu_kernel_registration(torch_npu, npu_cpu_kernels):
    import torch
    torch.manual_seed(0)
    x = torch.randn(3, 8)
    gamma = torch.rand(8) + 0.5
    y, rstd = torch_npu.npu_rms_norm(x, gamma)
    exp_y, exp_rstd = npu_cpu_kernels["npu_rms_norm"](x, gamma)
    assert y.shape == (3, 8) and rstd.shape == (3, 1)
    torch.testing.assert_close(y, exp_y)
    torch.testing.assert_close(rstd, exp_rstd)
    torch.testing.assert_close(torch.ops.npu.npu_rms_norm(x, gamma)[0], exp_y)
    torch.testing.assert_close(torch_npu.npu_fast_gelu(x), x * torch.sigmoid(1.702 * x))
