"""msprobe compare never needs torch: it works when `import torch` raises (as with a broken torch_npu,
whose autoload makes torch itself fail to import), in tensor mode too."""

import os
import subprocess
import sys
from pathlib import Path

from conftest import ROOT, fixtures_or_skip


def test_compare_with_broken_torch(tmp_path):
    fx = fixtures_or_skip()
    fake = tmp_path / "fake"
    (fake / "torch").mkdir(parents=True)
    (fake / "torch" / "__init__.py").write_text(
        'raise RuntimeError("Failed to load the backend extension: torch_npu. You can disable extension '
        'auto-loading with TORCH_DEVICE_BACKEND_AUTOLOAD=0.")\n')
    (fake / "torch_npu").mkdir()
    (fake / "torch_npu" / "__init__.py").write_text('raise ImportError("libascendcl.so: cannot open shared object file")\n')
    case = fx / "mlp_bf16_tensor_mix"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(fake), str(ROOT)]))
    out = tmp_path / "out"
    res = subprocess.run([sys.executable, "-m", "msprobe", "compare", "-tp", str(case / "target" / "step0"),
                          "-gp", str(case / "golden" / "step0"), "-o", str(out), "-q"],
                         env=env, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert "tensor mode" in res.stdout and "ends successfully" in res.stdout
    assert len(list(out.glob("compare_result_*.xlsx"))) == 1
    # the fake really is what `import torch` finds in that environment
    probe = subprocess.run([sys.executable, "-c", "import torch"], env=env, capture_output=True, text=True)
    assert probe.returncode != 0 and "torch_npu" in probe.stderr


def test_graph_with_broken_torch(tmp_path):
    """msprobe graph (tensor mode reads .pt files) works when `import torch` raises."""
    fx = fixtures_or_skip()
    fake = tmp_path / "fake"
    (fake / "torch").mkdir(parents=True)
    (fake / "torch" / "__init__.py").write_text('raise RuntimeError("Failed to load the backend extension: torch_npu.")\n')
    case = fx / "mlp_bf16_tensor_mix"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(fake), str(ROOT)]))
    out = tmp_path / "out"
    res = subprocess.run([sys.executable, "-m", "msprobe", "graph", "-tp", str(case / "target" / "step0" / "rank"),
                          "-gp", str(case / "golden" / "step0" / "rank"), "-o", str(out), "-q"],
                         env=env, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert "matched pairs (all)" in res.stdout
    assert len(list(out.glob("compare_*.vis"))) == 1
