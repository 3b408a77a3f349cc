"""op_generate for MindSpore: extract one API from a MindSpore dump.json and write a standalone script.

Framework-free (writing the script needs no MindSpore; running it does).  The config, the extraction and
the script's data block are those of the PyTorch generator (msprobe.pytorch.op_generate.generator, also
torch-free); what differs is which APIs exist and how records become arguments:

* ``Mint.<name>``           -> ``mindspore.mint.<name>``
* ``MintFunctional.<name>`` -> ``mindspore.mint.nn.functional.<name>``
* ``Functional.<name>``     -> ``mindspore.ops.<name>``
* ``Tensor.<name>``         -> ``mindspore.Tensor.<name>`` (the tensor is the first argument)

The precision standard comes from the same lists and the script judges with the same metrics and verdicts
(msprobe/core/acc_check/standards.py and op_standards.py, pasted into the script).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Dict

from msprobe.core.errors import MsprobeError
from msprobe.core.fileio import atomic_write, ensure_output_dir, safe_name
from msprobe.pytorch.op_generate.generator import (OpGenConfig, OpGenResult, _Literal, _src, _Tensor, _tensors,
                                                   extract, runtime_source, standard_of)

API_KINDS = {"Mint": "mindspore.mint", "MintFunctional": "mindspore.mint.nn.functional",
             "Functional": "mindspore.ops", "Tensor": "mindspore.Tensor"}
TENSOR_TYPES = ("mindspore.Tensor", "mindspore.Parameter", "mindspore.common.tensor.Tensor",
                "mindspore.common.parameter.Parameter")
_SCALAR_TYPES = ("int", "float", "bool", "str")
RUNTIME_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "runtime.py")


@dataclass(frozen=True)
class Case:
    full_name: str
    api_name: str
    kind: str
    func: str
    propagation: str
    data_mode: str
    seed: int
    iter_times: int
    args: Any
    kwargs: Any
    grads: Any
    outputs: Any
    autocast: Any = None  # PyTorch only; kept so the CLI prints both kinds of case alike


def _split_name(full: str):
    parts = full.split(".")
    if len(parts) < 4:
        raise MsprobeError(f"API name {full!r} is not Type.name.N.direction; cannot tell which function to call")
    kind, func = parts[0], ".".join(parts[1:-2])
    if kind == "Primitive":
        raise MsprobeError(f"API {full}: Primitive records (a Primitive held by a Cell) cannot be reproduced alone; "
                           f"reproduce the ops/mint API it implements")
    if kind not in API_KINDS:
        raise MsprobeError(f"API {full}: type {kind!r} is not supported; MindSpore op_generate reproduces "
                           f"{', '.join(API_KINDS)} APIs")
    return kind, func


def _convert(item: Any, where: str) -> Any:
    """One recorded MindSpore argument -> a value in the case."""
    if item is None:
        return None
    if isinstance(item, list):
        return [_convert(v, f"{where}[{i}]") for i, v in enumerate(item)]
    if not isinstance(item, dict):
        return item
    if not item:
        return _Literal("Unrecorded()")
    typ = item.get("type")
    if typ in TENSOR_TYPES:
        if not isinstance(item.get("shape"), list) or not isinstance(item.get("dtype"), str):
            raise MsprobeError(f"{where}: tensor record without shape/dtype; the dump is damaged")
        bad = [s for s in item["shape"] if s.__class__ is not int or s < 0]
        if bad:
            raise MsprobeError(f"{where}: tensor shape {str(item['shape'])[:80]} holds {str(bad[0])[:40]!r}; a shape is "
                               f"a list of non-negative integers: the dump is damaged or was edited, re-run the dump")
        return _Tensor(item)
    if typ in _SCALAR_TYPES or (isinstance(typ, str) and "value" in item
                                and typ.startswith(("numpy.", "float", "int", "uint", "bool", "complex"))):
        return item.get("value")
    if typ == "slice":
        v = item.get("value") or [None, None, None]
        return _Literal(f"slice({', '.join(repr(x) for x in v)})")
    if typ == "ellipsis":
        return _Literal("Ellipsis")
    if typ in ("mindspore.dtype", "mindspore.common.dtype"):
        return _Literal(f"DType({str(item.get('value'))!r})")
    if typ is None:
        return {k: _convert(v, f"{where}.{k}") for k, v in item.items()}
    raise MsprobeError(f"{where}: argument type {typ!r} cannot be rebuilt by op_generate; reproduce this API by hand")


def case_from_records(src: str, entries: Dict[str, dict], propagation: str, data_mode: str, seed: int = 1234,
                      iter_times: int = 1, api_name=None) -> Case:
    forward = [k for k in entries if k.endswith(".forward")]
    backward = [k for k in entries if k.endswith(".backward")]
    if len(forward) > 1 or len(backward) > 1 or len(entries) > 2:
        raise MsprobeError(f"{src}: more than one API matched ({', '.join(sorted(entries))}); give the full api_name with its number")
    if not forward:
        raise MsprobeError(f"{src}: no forward record for {api_name or 'the API'}; op_generate needs the forward inputs")
    fkey = forward[0]
    fwd = entries[fkey]
    if not isinstance(fwd, dict) or not fwd:
        raise MsprobeError(f"{src}: the forward record {fkey} is empty")
    kind, func = _split_name(fkey)
    full = fkey
    bwd = None
    if propagation == "backward":
        if not backward or not isinstance(entries[backward[0]], dict) or not entries[backward[0]]:
            raise MsprobeError(f"{src} has no backward record for {fkey[:-8]} ({fkey[:-8]}.backward), which propagation "
                               f"'backward' needs; dump with a backward pass, or use propagation 'forward'")
        full = backward[0]
        bwd = entries[full]
    args = _convert(fwd.get("input_args", []), f"{fkey} input_args")
    kwargs_raw = fwd.get("input_kwargs") or {}
    if not isinstance(kwargs_raw, dict):
        raise MsprobeError(f"{src}: {fkey} input_kwargs must be an object")
    kwargs = {k: _convert(v, f"{fkey} input_kwargs.{k}") for k, v in kwargs_raw.items()}
    outputs = _convert(fwd.get("output", []), f"{fkey} output")
    grads: Any = []
    if bwd is not None:
        # MindSpore backward records: "input" = gradients of the outputs, "output" = gradients of the inputs
        grads = _convert(bwd.get("input", bwd.get("grad_input", [])) or [], f"{full} input")
    needed = _tensors(args) + _tensors(kwargs) + _tensors(grads)
    if data_mode == "real_data":
        wrong = next((t["data_name"] for t in needed if t.get("data_name") and not isinstance(t["data_name"], str)), None)
        if wrong is not None:
            raise MsprobeError(f"{src}: {full}: a data_name must be a file name (a string), got "
                               f"{type(wrong).__name__} {str(wrong)[:80]}; use a dump.json written by the dump tool")
        missing = [t for t in needed if not t.get("data_name")]
        if missing:
            raise MsprobeError(f"{src}: real_data mode needs the recorded tensors, but {len(missing)} of the {len(needed)} "
                               f"input tensors of {full} have no data_name; dump with task 'tensor' or use data_mode 'random_data'")
        absent = [t["data_name"] for t in needed if not os.path.isfile(t["data_name"])]
        if absent:
            raise MsprobeError(f"real_data mode: tensor file {absent[0]} not found ({len(absent)} missing); "
                               f"copy the dump's tensor folder next to dump.json or use data_mode 'random_data'")
    return Case(full_name=full, api_name=fkey[: -len(".forward")], kind=kind, func=func, propagation=propagation,
                data_mode=data_mode, seed=seed, iter_times=1 if data_mode == "real_data" else iter_times,
                args=args, kwargs=kwargs, grads=grads, outputs=outputs)


def render_script(case: Case, source_note: str) -> str:
    std = standard_of(case.func)
    target = f"{API_KINDS[case.kind]}.{case.func}"
    header = (
        f'#!/usr/bin/env python3\n'
        f'"""Reproduce {case.full_name} ({target}) alone.\n\n'
        f'Generated by msprobe op_generate (-f mindspore) from {source_note}.\n'
        f'Runs the API on the device (Ascend if present, else GPU, else CPU) and again in higher precision,\n'
        f'then judges the outputs by the {std} standard and prints pass / warning / error per output.\n'
        f'Needs only MindSpore and numpy.  Edit the data block at the end to try other inputs.\n\n'
        f'    python {case.full_name}.py [--device auto|ascend|gpu|cpu] [--data-mode random_data|real_data]\n'
        f'                               [--iter-times N] [--seed S]\n\n'
        f'Exit status: 0 when every output passes or warns, 1 when any output is judged "error".\n'
        f'"""\n'
    )
    data = [
        "",
        "# ---- the recorded call ----",
        f"FULL_NAME = {case.full_name!r}",
        f"API = ({case.kind!r}, {case.func!r})  # {target}",
        f"PROPAGATION = {case.propagation!r}",
        f"STANDARD = {std!r}",
        f"DATA_MODE = {case.data_mode!r}",
        f"SEED = {case.seed!r}",
        f"ITER_TIMES = {case.iter_times!r}",
        f"ARGS = {_src(case.args, 0)}",
        f"KWARGS = {_src(case.kwargs, 0)}",
        f"GRADS = {_src(case.grads, 0)}  # gradients of the outputs (backward only)",
        f"RECORDED_OUTPUTS = {_src(case.outputs, 0)}",
        "",
        "",
        'if __name__ == "__main__":',
        "    sys.exit(reproduce(dict(FULL_NAME=FULL_NAME, API=API, PROPAGATION=PROPAGATION, STANDARD=STANDARD,",
        "                            DATA_MODE=DATA_MODE, SEED=SEED, ITER_TIMES=ITER_TIMES, ARGS=ARGS,",
        "                            KWARGS=KWARGS, GRADS=GRADS, RECORDED_OUTPUTS=RECORDED_OUTPUTS)))",
        "",
    ]
    return header + runtime_source(RUNTIME_FILE) + "\n".join(data)


def generate(cfg: OpGenConfig) -> OpGenResult:
    fw = dump_framework(cfg.dump_json_path)
    if fw in ("pytorch", "pt"):
        raise MsprobeError(f"dump.json {cfg.dump_json_path} is a PyTorch dump (framework {fw!r}); "
                           f"use '-f pytorch op_generate' (or no -f)")
    out_dir = ensure_output_dir(cfg.output_dir)
    entries = extract(cfg, API_KINDS)
    src = cfg.extract_api_path if not cfg.dump_json_path else cfg.dump_json_path
    case = case_from_records(src, entries, cfg.propagation, cfg.data_mode, cfg.random_seed, cfg.iter_times,
                             cfg.api_name)
    text = render_script(case, cfg.dump_json_path or cfg.extract_api_path)
    compile(text, case.full_name, "exec")  # a generator bug must not leave a broken script behind

    def write(tmp: str) -> None:
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write(text)

    script = safe_name(f"{case.full_name}.py", "the script name of API")
    path = atomic_write(os.path.join(out_dir, script), write, mode=0o750)
    return OpGenResult(script=path, extract_path=cfg.extract_api_path, case=case, standard=standard_of(case.func))


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
