"""The judge of the online pre-check's checker side (PyTorch): one received API call -> its result/details rows.

The received tensors (raw bytes, see msprobe.core.acc_check.online.protocol) become tensors again without any
unpickling, are written as .pt files in a private temporary folder (the offline checker reads recorded tensors
from files), and the offline :class:`~msprobe.pytorch.acc_check.checker.Checker` re-runs the call on this
machine's device and as the CPU benchmark and judges it, exactly as ``run_ut`` does for a tensor dump.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from typing import Any, Dict, List

import torch

from msprobe.pytorch.acc_check.checker import Checker, pick_device

_DTYPES = {"torch.float64": torch.float64, "torch.float32": torch.float32, "torch.float16": torch.float16,
           "torch.bfloat16": torch.bfloat16, "torch.complex64": torch.complex64,
           "torch.complex128": torch.complex128, "torch.int64": torch.int64, "torch.int32": torch.int32,
           "torch.int16": torch.int16, "torch.int8": torch.int8, "torch.uint8": torch.uint8, "torch.bool": torch.bool}
_RUNNABLE = ("Functional", "Tensor", "Torch")
try:
    from msprobe.core.acc_check.plan import EMPTY_APIS, RANDOM_APIS
except ImportError:  # pragma: no cover - the plan's tables moved
    EMPTY_APIS, RANDOM_APIS = frozenset(), frozenset()


def to_tensor(dtype: str, shape: List[int], data: memoryview) -> torch.Tensor:
    dt = _DTYPES[dtype]
    if data.nbytes == 0:
        return torch.empty(shape, dtype=dt)
    return torch.frombuffer(bytearray(data), dtype=torch.uint8).view(dt).reshape(shape)


def _skip(message: str) -> Dict:
    return {"forward": "SKIP", "backward": "SKIP", "message": message, "details": []}


def _relink(obj: Any, paths: List[str]) -> Any:
    """The record with every ``"@k"`` data_name replaced by the k-th file."""
    if isinstance(obj, dict):
        out = {}
        for k, v in obj.items():
            if k == "data_name" and isinstance(v, str) and v.startswith("@"):
                try:
                    out[k] = paths[int(v[1:])]
                except (ValueError, IndexError):
                    out[k] = ""
            else:
                out[k] = _relink(v, paths)
        return out
    if isinstance(obj, list):
        return [_relink(v, paths) for v in obj]
    return obj


def skip_reason(name: str) -> str:
    parts = name.split(".")
    prefix, api = parts[0], ".".join(parts[1:-1])
    if len(parts) < 3 or prefix not in _RUNNABLE:
        return f"API {name} not support for run ut: only Functional, Tensor and Torch APIs are re-run. SKIP."
    if api in RANDOM_APIS:
        return f"random API {api}: two runs never give the same values, nothing to compare element-wise. SKIP."
    if api in EMPTY_APIS:
        return f"API {api} returns uninitialised memory: nothing to compare. SKIP."
    return ""


def make_judge(init: Dict[str, Any]):
    torch.set_num_threads(1)
    device = pick_device(init.get("devices") or [0], 0)
    if device.startswith("cuda"):
        torch.cuda.set_device(device)
    error_dir = init.get("error_dir")
    seed = int(init.get("seed", 1234))

    def judge(header: Dict[str, Any], tensors) -> Dict:
        name = header["name"]
        reason = skip_reason(name)
        if reason:
            return _skip(reason)
        folder = tempfile.mkdtemp(prefix="msprobe-online-")
        try:
            paths = []
            for k, (dtype, shape, data) in enumerate(tensors):
                p = os.path.join(folder, f"{k}.pt")
                torch.save(to_tensor(dtype, shape, data), p)
                paths.append(p)
            record = _relink(header["record"], paths)
            checker = Checker(device, True, error_dir, seed, f"online call {name} (rank {header['rank']}, "
                                                             f"step {header['step']})")
            return checker.check({"name": name, "forward": record, "backward": None, "backward_skip": None})
        finally:
            shutil.rmtree(folder, ignore_errors=True)

    return judge
