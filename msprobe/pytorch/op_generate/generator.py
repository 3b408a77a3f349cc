"""op_generate for PyTorch: extract one API from dump.json and write a standalone script that reproduces it.

Framework-free: reading the dump and writing the script need neither torch nor torch_npu (the
script itself needs torch).  Steps: :func:`load_config` -> :func:`extract` -> :func:`build_case`
-> :func:`render_script` -> files written atomically by :func:`generate`.  What every framework shares
(config, extraction, records -> case, the data block, writing) is msprobe.core.op_generate.generator; this
module says which PyTorch APIs exist, how torch argument records become script source, and when a call
ran under autocast.
"""

from __future__ import annotations

import os
from typing import Any, Dict, Optional

from msprobe.core.errors import MsprobeError
from msprobe.core.op_generate import generator as core
from msprobe.core.op_generate.generator import (  # noqa: F401 - the generator's API, also for the MindSpore one
    CONFIG_KEYS, MAX_ITER_TIMES, Case, OpGenConfig, OpGenResult, _Literal, _Tensor, load_config, runtime_values,
    standard_of)
from msprobe.core.op_generate.generator import source as _src
from msprobe.core.op_generate.generator import tensors as _tensors

API_KINDS = {"Functional": "torch.nn.functional", "Tensor": "torch.Tensor", "Torch": "torch"}
TENSOR_TYPES = ("torch.Tensor", "torch.nn.parameter.Parameter")
RUNTIME_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "runtime.py")


def extract(cfg: OpGenConfig, kinds: Optional[Dict[str, str]] = None) -> Dict[str, dict]:
    """The API's forward (and backward) records (see msprobe.core.op_generate.generator.extract)."""
    return core.extract(cfg, kinds or API_KINDS)


# ---- from records to a case ----

def _split_name(full: str):
    return core.split_name(full, API_KINDS)


def _torch_type(typ: str, item: dict, where: str) -> Any:
    """The torch argument records besides tensors and scalars, as script source."""
    if typ == "torch.dtype":
        return _Literal(f"DType({item.get('value')!r})")
    if typ == "torch.device":
        return _Literal(f"Device({item.get('value')!r})")
    if typ == "torch.Size":
        return _Literal(f"torch.Size({list(item.get('value') or [])!r})")
    if typ == "torch.memory_format":
        fmt = item.get("format", "contiguous_format")
        if fmt not in ("contiguous_format", "channels_last", "channels_last_3d", "preserve_format"):
            raise MsprobeError(f"{where}: memory format {str(fmt)[:40]!r} is not a torch memory format; the dump is damaged")
        return _Literal(f"torch.{fmt}")
    if typ in ("torch.ProcessGroup", "torch.distributed.ReduceOp") or "class_type" in item:
        raise MsprobeError(f"{where}: a communication argument ({typ}); communication APIs cannot be reproduced alone")
    return core.UNHANDLED


# numpy arrays are recorded with a "value" too, but are not scalars
_convert = core.RecordConverter(TENSOR_TYPES, _torch_type, not_scalar=("numpy.ndarray",))


def _index_tuple(func: str, args: Any) -> Any:
    """Dumps record the index tuple of __getitem__/__setitem__ as a list: make it a tuple again."""
    if func in ("__getitem__", "__setitem__") and len(args) > 1 and isinstance(args[1], list):
        args[1] = _Literal("(" + "".join(_src(v, 4) + ", " for v in args[1]) + ")")
    return args


_CASTS = frozenset(["to", "type", "type_as", "float", "half", "double", "bfloat16", "new_tensor", "new_empty",
                    "new_zeros", "new_ones", "new_full", "view_as_real", "view_as_complex"])
_FLOAT_ORDER = {"torch.float16": 1, "torch.bfloat16": 1, "torch.float32": 2, "torch.float64": 3}


def _has_dtype_argument(obj: Any) -> bool:
    if isinstance(obj, _Literal):
        return obj.src.startswith("DType(") or obj.src == "Unrecorded()"
    if isinstance(obj, list):
        return any(_has_dtype_argument(v) for v in obj)
    if isinstance(obj, dict):
        return any(_has_dtype_argument(v) for v in obj.values())
    return False


def _autocast(func: str, args: Any, kwargs: Any, outputs: Any) -> Optional[str]:
    """The autocast dtype the API evidently ran under, or None.

    Floating inputs and outputs of more than one dtype (fp32 weights -> fp16 conv2d output, fp16 logits ->
    fp32 cross_entropy, fp16 activations with fp32 weights) mean the call ran under autocast: the script
    runs it under torch.autocast with the lowest of those dtypes.  Autocast leaves ops outside its lists
    (batch_norm with fp32 running stats, say) as they are, so this is safe for them too."""
    if _has_dtype_argument([args, kwargs]):
        return None  # an explicit dtype argument (sum(..., dtype=...), to(torch.float16)) changed the dtype
    if func.rsplit(".", 1)[-1] in _CASTS:
        return None
    found = {t["dtype"] for t in _tensors(args) + _tensors(kwargs) + _tensors(outputs) if t["dtype"] in _FLOAT_ORDER}
    if len(found) < 2:
        return None
    low = min(found, key=lambda d: _FLOAT_ORDER[d])
    return low if _FLOAT_ORDER[low] == 1 else None


def build_case(cfg: OpGenConfig, entries: Dict[str, dict]) -> Case:
    """Validate the extracted records and turn them into a Case; real_data needs every tensor's file."""
    return case_from_records(core.records_source(cfg), entries, cfg.propagation, cfg.data_mode, cfg.random_seed,
                             cfg.iter_times, cfg.api_name)


def case_from_records(src: str, entries: Dict[str, dict], propagation: str, data_mode: str, seed: int = 1234,
                      iter_times: int = 1, api_name: Optional[str] = None) -> Case:
    """One API's forward (and backward) records -> a Case (``src`` names the file in messages).
    ``propagation`` "both" (whole-dump checks) keeps the backward record when there is one."""
    return core.case_from_records(src, entries, propagation, data_mode, seed, iter_times, api_name,
                                  convert=_convert, split=_split_name, tensor_folder="dump_tensor_data",
                                  adjust_args=_index_tuple, autocast=_autocast)


# ---- rendering ----

def runtime_source(runtime_file: str = RUNTIME_FILE) -> str:
    """The code every script carries (see msprobe.core.op_generate.generator.runtime_source); the
    MindSpore runtime is pasted the same way."""
    return core.runtime_source(runtime_file)


def render_script(case: Case, source_note: str) -> str:
    return core.render_script(
        case, source_note, target=f"{API_KINDS[case.kind]}.{case.func}", runtime=runtime_source(),
        generated_by="msprobe op_generate",
        runs="(NPU if present, else CUDA, else CPU) and on the CPU in higher precision",
        needs="torch and numpy (and torch_npu for an NPU)", devices="npu|cuda|cpu", autocast=True)


def generate(cfg: OpGenConfig) -> OpGenResult:
    return core.generate(cfg, API_KINDS, case_from_records, render_script)
