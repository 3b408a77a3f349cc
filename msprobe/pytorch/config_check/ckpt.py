"""Reading Megatron / MindSpeed ``model_optim_rng.pt`` files for the checkpoint similarity mode without
running code from the file.

``torch.load(..., weights_only=True)``: only tensors, containers and plain values are rebuilt.
Megatron also pickles its ``args`` (an ``argparse.Namespace``, whose values may be Megatron enums or
other classes): the Namespace is allowed, and every other class the file names
(``torch.serialization.get_unsafe_globals_in_checkpoint``) is replaced by an inert stand-in of
msprobe's that only remembers its name; nothing of the named module is imported or called.
"""

from __future__ import annotations

import argparse
import os
import re
from typing import Dict, Optional, Tuple

import numpy as np

from msprobe.core.config_check.ckpt import state_weights
from msprobe.core.errors import MsprobeError


class _Inert:
    """Stand-in for a class named in a checkpoint (never the real one)."""

    _name = "?"

    def __new__(cls, *args, **kwargs):
        return object.__new__(cls)

    def __init__(self, *args, **kwargs):
        pass

    def __setstate__(self, state):
        pass

    def __repr__(self):
        return f"<{self._name}>"


def _stand_in(qualified: str):
    return type("Inert_" + qualified.replace(".", "_"), (_Inert,), {"_name": qualified})


def _to_numpy(obj, depth: int = 0):
    import torch

    if depth > 100:
        return None
    if isinstance(obj, torch.Tensor):
        t = obj.detach().cpu()
        if t.is_complex():
            return None
        if not t.is_floating_point() or t.dtype not in (torch.float32, torch.float64):
            t = t.float()  # bfloat16 / float16 / float8 widen exactly; integers as float32
        return t.numpy()
    if isinstance(obj, dict):
        return {str(k): _to_numpy(v, depth + 1) for k, v in obj.items()}
    return None


def load_state(path: str) -> Tuple[Dict[str, np.ndarray], Optional[dict]]:
    """(weights ``{name|vpp: array}``, Megatron arguments as a dict or None) of one ``.pt`` file."""
    os.environ.setdefault("TORCH_DEVICE_BACKEND_AUTOLOAD", "0")
    import torch
    import torch.serialization as ser

    try:
        unsafe = ser.get_unsafe_globals_in_checkpoint(path)
    except Exception as exc:  # noqa: BLE001 - not a zip-format torch file, damaged ...
        raise MsprobeError(f"{path} is not a readable torch checkpoint ({type(exc).__name__}: "
                           f"{str(exc).splitlines()[0][:200] if str(exc) else ''})") from None
    allowed = [argparse.Namespace]
    allowed += [(_stand_in(name), name) for name in unsafe if name != "argparse.Namespace"]
    try:
        with ser.safe_globals(allowed):
            state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001
        blocked = re.search(r"GLOBAL (\S+) whose module \S+ is blocked", str(exc))
        if blocked:
            raise MsprobeError(f"{path} asks to call {blocked.group(1)} when loaded, which no checkpoint needs: "
                               f"refusing it (nothing was run); check where the file comes from") from None
        raise MsprobeError(f"{path} cannot be loaded safely (weights_only; {type(exc).__name__}: "
                           f"{str(exc).splitlines()[0][:300] if str(exc) else ''})") from None
    if not isinstance(state, dict):
        raise MsprobeError(f"{path} holds a {type(state).__name__}, not a Megatron state dict")
    args = state.get("args")
    args = dict(vars(args)) if isinstance(args, argparse.Namespace) else (args if isinstance(args, dict) else None)
    models = {k: _to_numpy(v) for k, v in state.items() if k == "model" or (k.startswith("model") and k[5:].isdigit())}
    return state_weights(models), args
