"""torch_npu code-path tests, run on CPU through the CANN stub (see ../shared/spec/frameworks.md §5-6).

These tests run only in the interpreter of `.venv-npu` (torch 2.13.0+cpu + torch-npu 2.13.0, built by
`make npu-venv`); `make test-npu` runs them, and tests/test_npu_path.py runs them from the main suite.
Anywhere else (torch_npu not installed) every test here is skipped with a visible reason.

With torch_npu installed, this conftest preloads the stub CANN libraries (ctypes.CDLL(..., RTLD_GLOBAL), one per
soname) BEFORE anything imports torch: torch auto-loads torch_npu on `import torch`, and torch_npu is linked
BIND_NOW against libhccl.so/libascendcl.so/..., so without the preload even `import torch` fails.
The stub directory is $MSPROBE_CANN_STUB, else <venv>/cann_stub (where `make npu-venv` builds it).
A machine with a real CANN (ASCEND_HOME_PATH or ASCEND_TOOLKIT_HOME set) gets no stub.

Test modules here import torch / torch_npu / msprobe.pytorch only inside tests and fixtures, so that collecting
them in the main venv (where they are skipped) imports nothing that could fail.
"""
import ctypes
import importlib.util
import os
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
CANN_SONAMES = ["libhccl.so", "libascendcl.so", "libacl_op_compiler.so", "libge_runner.so",
                "libgraph.so", "libacl_tdt_channel.so"]
HINT = "run `make npu-venv` to build the torch_npu + CANN-stub venv, then `make test-npu`"


def _stub_dir():
    env = os.environ.get("MSPROBE_CANN_STUB")
    return Path(env) if env else Path(sys.prefix) / "cann_stub"


def _real_cann():
    return bool(os.environ.get("ASCEND_HOME_PATH") or os.environ.get("ASCEND_TOOLKIT_HOME"))


def _setup():
    """Returns (skip_reason or None, stub_dir or None). Never imports torch."""
    try:
        installed = importlib.util.find_spec("torch_npu") is not None
    except (ImportError, ValueError):
        installed = False
    if not installed:
        return (f"torch_npu is not installed in this interpreter ({sys.executable}); these tests run in "
                f".venv-npu: {HINT}"), None
    if _real_cann():
        return None, None
    stub = _stub_dir()
    missing = [n for n in CANN_SONAMES if not (stub / n).is_file()]
    if missing:
        return f"CANN stub not found in {stub} (missing {', '.join(missing)}): {HINT}", None
    if "torch" in sys.modules:
        return "torch was imported before the CANN stub could be preloaded (run these tests in their own pytest)", None
    try:
        for name in CANN_SONAMES:
            ctypes.CDLL(str(stub / name), mode=ctypes.RTLD_GLOBAL)
    except OSError as exc:
        return f"could not preload the CANN stub from {stub}: {exc}", None
    return None, stub


SKIP_REASON, STUB_DIR = _setup()
# torch_npu usable without the stub: a real CANN is configured (tests of the no-CANN behaviour skip themselves)
REAL_CANN = SKIP_REASON is None and STUB_DIR is None


def pytest_report_header(config):
    if SKIP_REASON:
        return f"tests/npu: skipped: {SKIP_REASON}"
    return f"tests/npu: CANN stub {STUB_DIR}" if STUB_DIR else "tests/npu: real CANN (no stub)"


def pytest_collection_modifyitems(config, items):
    if not SKIP_REASON:
        return
    marker = pytest.mark.skip(reason=SKIP_REASON)
    for item in items:
        if HERE in Path(str(item.fspath)).resolve().parents:
            item.add_marker(marker)


@pytest.fixture(scope="session")
def stub_dir():
    return STUB_DIR


@pytest.fixture(scope="session")
def clean_env():
    """Environment for a subprocess that must NOT see the stub (no LD_LIBRARY_PATH entry for it, autoload on)."""
    env = dict(os.environ)
    env.pop("TORCH_DEVICE_BACKEND_AUTOLOAD", None)
    env.pop("MSPROBE_CANN_STUB", None)
    if STUB_DIR is not None and env.get("LD_LIBRARY_PATH"):
        keep = [p for p in env["LD_LIBRARY_PATH"].split(os.pathsep)
                if p and Path(p).resolve() != STUB_DIR.resolve()]
        env["LD_LIBRARY_PATH"] = os.pathsep.join(keep)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    return env


@pytest.fixture(scope="session")
def torch_npu():
    """torch_npu, imported through the stub (after the conftest's preload)."""
    import torch  # noqa: F401  auto-loads torch_npu
    import torch_npu as mod
    return mod


def _rms_norm_cpu(x, gamma, epsilon=1e-6):
    import torch
    rstd = torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + epsilon)
    return x * rstd * gamma, rstd


def _fast_gelu_cpu(x):
    import torch
    return x * torch.sigmoid(1.702 * x)


_CPU_LIBS = []  # keep the torch.library.Library alive: its kernels are deregistered when it is collected


@pytest.fixture(scope="session")
def npu_cpu_kernels(torch_npu):
    """CPU kernels for npu::npu_rms_norm and npu::npu_fast_gelu (torch_npu ships none), registered once per
    process as the reference's tiny_pt.py does. Returns the registered Python kernels by op name."""
    import torch
    kernels = {"npu_rms_norm": _rms_norm_cpu, "npu_fast_gelu": _fast_gelu_cpu}
    if not _CPU_LIBS:
        lib = torch.library.Library("npu", "IMPL")
        for name, fn in kernels.items():
            lib.impl(name, fn, "CPU")
        _CPU_LIBS.append(lib)
    return kernels
