"""free_benchmark with real MindSpore 2.10 PyNative on CPU (runs in .venv-ms; see tests/test_mindspore_dump.py).

ms_fb_net.py trains a tiny float16 network whose ops.tanh and ops.sigmoid are made fragile: improve_precision and
bit_noise list them (improve_precision: only them), no_change lists nothing, training is unchanged by every check
mode, and fix on a lossy float16 op brings the loss back to the float16 run without it.
"""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]


from ms_skip import requires_mindspore  # noqa: E402 (this folder is on sys.path)

pytestmark = requires_mindspore


def _runs(tmp_path, runs):
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    res = subprocess.run([sys.executable, str(HERE / "ms_fb_net.py"), str(tmp_path), json.dumps(runs)], env=env,
                         capture_output=True, text=True, timeout=600, cwd=str(tmp_path))
    assert res.returncode == 0, res.stderr[-3000:]
    out = [json.loads(line) for line in res.stdout.splitlines() if line.startswith('{"losses"')]
    assert len(out) == len(runs), res.stdout[-2000:]
    return out


def _cfg(**fb):
    return {"task": "free_benchmark", "level": "L1", "rank": [], "step": [], "free_benchmark": fb}


def test_ms_check_modes(tmp_path):
    modes = ["improve_precision", "bit_noise", "no_change", "add_noise", "change_value"]
    out = _runs(tmp_path, [{"kind": "fragile"}] + [{"kind": "fragile", "config": _cfg(pert_mode=m)} for m in modes])
    base = out[0]
    for mode, res in zip(modes, out[1:]):
        assert res["losses"] == base["losses"] and res["grads"] == base["grads"], mode     # training unchanged
        apis = {r[4].rsplit(".", 2)[0] for r in res["rows"]}
        if mode == "improve_precision":
            assert apis == {"Functional.tanh", "Functional.sigmoid"}, apis
        elif mode == "bit_noise":
            assert {"Functional.tanh", "Functional.sigmoid"} <= apis, apis
        elif mode == "no_change":
            assert res["rows"] == []
        for r in res["rows"]:
            assert r[:4] == ["0", mode, "forward", r[3]] and r[3] in ("0", "1") and r[4].endswith(".forward")
    rows = out[1]["rows"]
    assert rows[0][6] == "Float16" and rows[0][7] == "(8, 32)" and float(rows[0][5]) > 0.01


def test_ms_fix_rescues_a_lossy_float16_op(tmp_path):
    fix = _cfg(handler_type="fix", list=["mindspore.ops.tanh"])      # the reference's spelling of the API
    fp32, lossy, clean, fixed = _runs(tmp_path, [{"kind": "lossy", "fp32": True, "steps": 3},
                                                 {"kind": "lossy", "steps": 3}, {"kind": "clean", "steps": 3},
                                                 {"kind": "lossy", "steps": 3, "config": fix}])
    drift = max(abs(a - b) for a, b in zip(lossy["losses"], fp32["losses"]))
    err = max(abs(a - b) for a, b in zip(fixed["losses"], fp32["losses"]))
    f16_err = max(abs(a - b) for a, b in zip(clean["losses"], fp32["losses"]))
    assert drift > 10 * err and err <= 2 * f16_err + 1e-6, (drift, err, f16_err)
    assert fixed["rows"] == []


def test_ms_config_rules(tmp_path):
    sys.path.insert(0, str(ROOT))
    from msprobe.core.errors import MsprobeError
    from msprobe.mindspore import PrecisionDebugger
    for fb, word in (({"pert_mode": "to_cpu", "fuzz_device": "cpu"}, "PyTorch-only"),
                     ({"fuzz_stage": "backward", "list": ["add"]}, "backward is not supported for MindSpore"),
                     ({"handler_type": "fix", "pert_mode": "bit_noise"}, "pert_mode improve_precision")):
        path = tmp_path / "c.json"
        path.write_text(json.dumps(dict(_cfg(**fb), dump_path=str(tmp_path / "d"))))
        with pytest.raises(MsprobeError, match=word):
            PrecisionDebugger(config_path=str(path))


def test_ms_batch_norm_running_stats_unchanged(tmp_path):
    """ops.batch_norm(training=True) writes its running statistics: the re-run updates copies."""
    sys.path.insert(0, str(ROOT))
    import numpy as np
    import mindspore as ms
    from mindspore import Parameter, Tensor, ops
    from msprobe.mindspore import PrecisionDebugger
    ms.set_context(mode=ms.PYNATIVE_MODE)

    def run(config):
        stats = [Parameter(Tensor(np.full(8, v, np.float32)), name=n) for n, v in (("rm", 0), ("rv", 1))]
        wb = [Tensor(np.full(8, v, np.float32)) for v in (1, 0)]
        x = Tensor(np.random.default_rng(0).standard_normal((4, 8)).astype(np.float32))
        dbg = PrecisionDebugger(config_path=config) if config else None
        seen = set()
        for _ in range(2):
            if dbg:
                dbg.start()
            ops.batch_norm(x, stats[0], stats[1], wb[0], wb[1], training=True)
            if dbg:
                dbg.stop()
                seen.update(dbg.service.fuzz.counts)
                dbg.step()
        if dbg:
            assert "Functional.batch_norm" in seen and dbg.service.fuzz.results.total == 0
            PrecisionDebugger._reset_for_tests()
        return [s.asnumpy().tolist() for s in stats]

    path = tmp_path / "c.json"
    path.write_text(json.dumps(dict(_cfg(pert_mode="no_change"), dump_path=str(tmp_path / "d"))))
    assert run(str(path)) == run(None)
