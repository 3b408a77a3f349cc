"""The packaged default config.json (the file PrecisionDebugger falls back to).

It must be the reference's default (G8/G1 ``msprobe/config.json``, spec dump.md section 2.4), and the
copy under ``msprobe/config/`` that ships in the wheel must be identical to the one in ``config/``.
"""
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
REPO_CONFIG = ROOT / "config" / "config.json"
PACKAGED_CONFIG = ROOT / "msprobe" / "config" / "config.json"

EXPECTED = {
    "task": "statistics",
    "dump_path": "./dump_path",
    "rank": [],
    "step": [],
    "level": "L1",
    "enable_dataloader": False,
    "async_dump": False,
    "tensor": {"scope": [], "list": [], "data_mode": ["all"], "file_format": "npy"},
    "statistics": {"scope": [], "list": [], "data_mode": ["all"], "summary_mode": "statistics"},
    "overflow_check": {"overflow_nums": 1, "check_mode": "all"},
    "run_ut": {"white_list": [], "black_list": [], "error_data_path": "./"},
    "grad_probe": {"grad_level": "L1", "param_list": [], "bounds": [-1, 0, 1]},
    "free_benchmark": {
        "scope": [],
        "list": [],
        "fuzz_device": "npu",
        "pert_mode": "improve_precision",
        "handler_type": "check",
        "fuzz_level": "L1",
        "fuzz_stage": "forward",
        "if_preheat": False,
        "preheat_step": 15,
        "max_sample": 20,
    },
}


def _load(path):
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def test_both_copies_exist_and_are_identical():
    assert REPO_CONFIG.is_file()
    assert PACKAGED_CONFIG.is_file()
    assert REPO_CONFIG.read_bytes() == PACKAGED_CONFIG.read_bytes()


@pytest.mark.parametrize("path", [REPO_CONFIG, PACKAGED_CONFIG], ids=["config", "msprobe-config"])
def test_default_values(path):
    cfg = _load(path)
    assert cfg == EXPECTED
    # Key order as in the reference file (top level and per-task sections).
    assert list(cfg) == list(EXPECTED)
    for section, body in EXPECTED.items():
        if isinstance(body, dict):
            assert list(cfg[section]) == list(body), section


def test_types_of_common_fields():
    cfg = _load(REPO_CONFIG)
    assert isinstance(cfg["rank"], list) and isinstance(cfg["step"], list)
    assert isinstance(cfg["enable_dataloader"], bool) and isinstance(cfg["async_dump"], bool)
    assert cfg["level"] in ("L0", "L1", "L2", "mix", "debug")
    assert cfg["task"] in cfg  # the default task has its own section
    # seed / is_deterministic are not config.json keys in any reference version (seed_all() takes them).
    assert "seed" not in cfg and "is_deterministic" not in cfg
    for section in ("tensor", "statistics", "free_benchmark"):
        assert isinstance(cfg[section]["scope"], list) and isinstance(cfg[section]["list"], list)
