"""The MindSpore dumper from the main suite (torch venv, no MindSpore).

- `from msprobe.mindspore import PrecisionDebugger` without MindSpore: one clear line (an ImportError that is
  also an MsprobeError, so the CLI prints it as one line); `import msprobe.mindspore` itself still works
  (code_mapping needs no MindSpore).
- tests/mindspore (real MindSpore 2.10 PyNative dumps on CPU) runs in `.venv-ms` as a subprocess, so
  `make test` covers it whenever `make ms-venv` could build that venv (`make test` tries to).
"""
import importlib.metadata
import os
import re
import subprocess
import sys

import pytest

from background import Suite, result, runs_early
from conftest import ROOT

MS_PY = ROOT / ".venv-ms" / "bin" / "python"
HINT = "run `make ms-venv` to build the MindSpore 2.10 venv"


def _mindspore_installed():
    # by distribution: under pytest tests/ is on sys.path, where find_spec would take tests/mindspore for it
    try:
        importlib.metadata.distribution("mindspore")
        return True
    except importlib.metadata.PackageNotFoundError:
        return False


def test_import_without_mindspore_is_one_clear_line():
    if _mindspore_installed():
        pytest.skip("mindspore is installed in this interpreter")
    code = ("import sys\n"
            "import msprobe.mindspore as m\n"
            "assert 'mindspore' not in sys.modules\n"
            "try:\n"
            "    from msprobe.mindspore import PrecisionDebugger\n"
            "except ImportError as e:\n"
            "    from msprobe.core.errors import MsprobeError\n"
            "    assert isinstance(e, MsprobeError)\n"
            "    print('ERR ' + str(e))\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    res = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120,
                         cwd=str(ROOT))
    assert res.returncode == 0, res.stderr
    lines = res.stdout.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("ERR "), res.stdout
    msg = lines[0][4:]
    assert "\n" not in msg
    assert "MindSpore" in msg and "not installed" in msg and 'pip install mindspore==2.10.0 "numpy<2"' in msg


def test_uncaught_import_error_names_the_fix():
    if _mindspore_installed():
        pytest.skip("mindspore is installed in this interpreter")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    res = subprocess.run([sys.executable, "-c", "from msprobe.mindspore import seed_all"], env=env,
                         capture_output=True, text=True, timeout=120, cwd=str(ROOT))
    assert res.returncode != 0
    last = res.stderr.strip().splitlines()[-1]
    assert last.startswith("msprobe.mindspore.MindSporeMissingError: msprobe.mindspore.seed_all needs MindSpore")


def test_unknown_attribute_is_attribute_error():
    import msprobe.mindspore as m
    with pytest.raises(AttributeError):
        m.no_such_thing  # noqa: B018


def _ms_suite():
    if not MS_PY.exists():
        return None
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_") and k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    return Suite(str(MS_PY), "tests/mindspore", str(ROOT), env, timeout=1800)


@runs_early(_ms_suite)
def test_tests_mindspore_in_ms_venv(request):
    """Runs tests/mindspore with .venv-ms (mindspore 2.10.0 CPU, numpy<2), started after collection so that it
    runs beside the rest of the suite (tests/background.py)."""
    if not MS_PY.exists():
        pytest.skip(f"{MS_PY.relative_to(ROOT)} not found: {HINT}")
    rc, out = result(request.node.nodeid, _ms_suite)
    tail = out[-6000:]
    m = re.search(r"SKIPPED \[\d+\] \S+: (mindspore is not installed[^\n]*)", out)
    if rc == 0 and m and not re.search(r"\b\d+ passed\b", out):
        pytest.skip(f".venv-ms is incomplete: {m.group(1)}")
    assert rc == 0, f"tests/mindspore failed in .venv-ms (rc={rc}; None: over its time limit):\n{tail}"
    summary = out.strip().splitlines()[-1] if out.strip() else ""
    assert re.search(r"\b\d+ passed\b", summary), f"no test passed in tests/mindspore:\n{tail}"
    assert not re.search(r"\b\d+ (failed|errors?)\b", summary), tail
