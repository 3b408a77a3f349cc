"""``pk``: the statistics of one API in a dump.

Two inputs are accepted:

* a ``dump.json`` (msprobe and the reference, PyTorch or MindSpore): every entry whose name starts with the
  given name (``Functional.conv2d.0`` matches its forward and backward); one line per tensor;
* a legacy ``.pkl`` dump (JSON lines ``[name, ..., dtype, shape, [max, min, mean, ...]]``, stack lines
  ``[name.stack_info, frames]``), as the reference's ``pk`` reads it.

The stack of an API comes from the ``stack.json`` next to ``dump.json`` (or the pkl's stack lines).
"""

from __future__ import annotations

import json
import os
from typing import Iterator, List, Tuple

from msprobe.core.errors import MsprobeError
from msprobe.core.fileio import check_path, load_dump_json

_SECTIONS = ("input_args", "input_kwargs", "input", "output", "grad_input", "grad_output", "parameters",
             "parameters_grad")


def _line(name: str, dtype, shape, mx, mn, mean) -> str:
    return f"  [{name}][dtype: {dtype}][shape: {shape}][max: {mx}][min: {mn}][mean: {mean}]"


def _tensors(prefix: str, value) -> Iterator[Tuple[str, dict]]:
    if isinstance(value, dict):
        if "dtype" in value or "Max" in value or "shape" in value:
            yield prefix, value
        elif "type" not in value:
            for k, v in value.items():
                yield from _tensors(f"{prefix}.{k}", v)
    elif isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            yield from _tensors(f"{prefix}.{i}", v)


def _short_section(section: str) -> str:
    return {"input_args": "input", "input_kwargs": "input"}.get(section, section)


def _from_dump_json(path: str, api: str) -> Tuple[List[str], List[str]]:
    obj = load_dump_json(path, "dump.json")
    data = obj.get("data") if isinstance(obj, dict) else None
    if not isinstance(data, dict):
        raise MsprobeError(f"{path} has no 'data' object; give a dump.json written by a dump")
    names = [k for k in data if k.startswith(api)]
    stats: List[str] = []
    for key in names:
        entry = data[key]
        if not isinstance(entry, dict):
            continue
        for section in _SECTIONS:
            if section not in entry:
                continue
            value = entry[section]
            if section == "input_kwargs" and isinstance(value, dict):
                items = [(f"{key}.input.{k}", v) for k, v in value.items()]
            else:
                items = [(f"{key}.{_short_section(section)}", value)]
            for base, v in items:
                for name, t in _tensors(base, v):
                    stats.append(_line(name, t.get("dtype"), t.get("shape"), t.get("Max"), t.get("Min"), t.get("Mean")))
    stack: List[str] = []
    stack_path = os.path.join(os.path.dirname(path), "stack.json")
    if names and os.path.isfile(stack_path):
        from msprobe.core.dump.reader import load_stack_frames

        frames = load_stack_frames(stack_path)
        for key in names:
            if key in frames:
                stack.append(f"Trace back({key}):")
                stack.extend("  " + " ".join(line.split()) for line in frames[key])
                break
    return stats, stack


def _from_pkl(path: str, api: str) -> Tuple[List[str], List[str]]:
    stats: List[str] = []
    stack: List[str] = []
    with open(path, "r", encoding="utf-8", errors="replace") as fh:
        for n, raw in enumerate(fh, 1):
            if not raw.strip():
                continue
            try:
                msg = json.loads(raw)
            except ValueError as exc:
                raise MsprobeError(f"{path} line {n} is not JSON ({exc}); give a dump.json or a .pkl dump") from None
            if not isinstance(msg, list) or not msg or not isinstance(msg[0], str):
                break
            if not msg[0].startswith(api):
                continue
            if "stack_info" in msg[0] and len(msg) == 2 and isinstance(msg[1], list):
                stack.append(f"Trace back({msg[0]}):")
                for item in reversed(msg[1]):
                    if isinstance(item, list) and len(item) >= 4:
                        stack.append(f'  File "{item[0]}", line {item[1]}, in {item[2]}')
                        stack.append(f"    {item[3]}")
                continue
            if len(msg) > 5 and isinstance(msg[5], list) and len(msg[5]) >= 3:
                stats.append(_line(msg[0], msg[3], msg[4], msg[5][0], msg[5][1], msg[5][2]))
    return stats, stack


def api_statistics(path: str, api: str) -> Tuple[List[str], List[str]]:
    """(statistics lines, stack lines) of the API(s) whose names start with ``api``."""
    if not isinstance(api, str) or not api.strip():
        raise MsprobeError("no API name given (-n), e.g. -n Functional.conv2d.0.forward")
    api = api.strip()
    path = check_path(path, "dump file", "file")
    if path.endswith(".pkl"):
        stats, stack = _from_pkl(path, api)
    else:
        stats, stack = _from_dump_json(path, api)
    if not stats and not stack:
        raise MsprobeError(f"no API whose name starts with {api!r} in {path}")
    return stats, stack
