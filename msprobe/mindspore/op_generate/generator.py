"""op_generate for MindSpore: extract one API from a MindSpore dump.json and write a standalone script.

Framework-free (writing the script needs no MindSpore; running it does).  The config, the extraction and
the script's data block are shared with the PyTorch generator (msprobe.core.op_generate.generator); what
differs is which APIs exist and how records become arguments:

* ``Mint.<name>``           -> ``mindspore.mint.<name>``
* ``MintFunctional.<name>`` -> ``mindspore.mint.nn.functional.<name>``
* ``Functional.<name>``     -> ``mindspore.ops.<name>``
* ``Tensor.<name>``         -> ``mindspore.Tensor.<name>`` (the tensor is the first argument)

The precision standard comes from the same lists and the script judges with the same metrics and verdicts
(msprobe/core/acc_check/standards.py and op_standards.py, pasted into the script).
"""

from __future__ import annotations

import os
from typing import Any, Dict

from msprobe.core.errors import MsprobeError
from msprobe.core.op_generate import generator as core
from msprobe.core.op_generate.generator import Case, OpGenConfig, OpGenResult, _Literal  # noqa: F401

API_KINDS = {"Mint": "mindspore.mint", "MintFunctional": "mindspore.mint.nn.functional",
             "Functional": "mindspore.ops", "Tensor": "mindspore.Tensor"}
TENSOR_TYPES = ("mindspore.Tensor", "mindspore.Parameter", "mindspore.common.tensor.Tensor",
                "mindspore.common.parameter.Parameter")
RUNTIME_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "runtime.py")


def _split_name(full: str):
    if full.split(".", 1)[0] == "Primitive" and len(full.split(".")) >= 4:
        raise MsprobeError(f"API {full}: Primitive records (a Primitive held by a Cell) cannot be reproduced alone; "
                           f"reproduce the ops/mint API it implements")
    return core.split_name(full, API_KINDS, "MindSpore ")


def _mindspore_type(typ: str, item: dict, where: str) -> Any:
    """The MindSpore argument records besides tensors and scalars (dtypes), as script source."""
    if typ in ("mindspore.dtype", "mindspore.common.dtype"):
        return _Literal(f"DType({str(item.get('value'))!r})")
    return core.UNHANDLED


_convert = core.RecordConverter(TENSOR_TYPES, _mindspore_type)


def case_from_records(src: str, entries: Dict[str, dict], propagation: str, data_mode: str, seed: int = 1234,
                      iter_times: int = 1, api_name=None) -> Case:
    """One API's forward (and backward) records -> a Case.  MindSpore backward records: "input" = the
    gradients of the outputs, "output" = the gradients of the inputs."""
    return core.case_from_records(src, entries, propagation, data_mode, seed, iter_times, api_name,
                                  convert=_convert, split=_split_name, tensor_folder="tensor folder")


def render_script(case: Case, source_note: str) -> str:
    return core.render_script(
        case, source_note, target=f"{API_KINDS[case.kind]}.{case.func}", runtime=core.runtime_source(RUNTIME_FILE),
        generated_by="msprobe op_generate (-f mindspore)",
        runs="(Ascend if present, else GPU, else CPU) and again in higher precision",
        needs="MindSpore and numpy", devices="ascend|gpu|cpu", autocast=False)


def standard_of(func: str) -> str:
    return core.standard_of(func)


def generate(cfg: OpGenConfig) -> OpGenResult:
    fw = dump_framework(cfg.dump_json_path)
    if fw in ("pytorch", "pt"):
        raise MsprobeError(f"dump.json {cfg.dump_json_path} is a PyTorch dump (framework {fw!r}); "
                           f"use '-f pytorch op_generate' (or no -f)")
    return core.generate(cfg, API_KINDS, case_from_records, render_script)


def dump_framework(dump_json_path) -> str:
    """The 'framework' field of a dump.json ('' when absent or unreadable): lets op_generate pick the
    MindSpore generator without -f."""
    if not dump_json_path:
        return ""
    import re

    try:
        with open(dump_json_path, "rb") as fh:
            head = fh.read(4096).decode("utf-8", "replace")
    except OSError:
        return ""
    m = re.search(r'"framework"\s*:\s*"([^"]*)"', head)
    return m.group(1).lower() if m else ""
