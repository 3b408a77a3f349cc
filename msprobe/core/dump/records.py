"""Framework-free pieces of a dump record, shared by the PyTorch and MindSpore collectors."""

from __future__ import annotations

import math
from typing import Iterator

from msprobe.core.dump.writer import NonFinite, number


def slice_part(x):
    """A slice bound as the dump records it: an int or None (anything else that is not int-like: None)."""
    if x is None or isinstance(x, int):
        return x
    try:
        return int(x)
    except Exception:  # noqa: BLE001 - an odd bound is recorded as None, never an error inside training
        return None


def slice_record(v: slice) -> dict:
    return {"type": "slice", "value": [slice_part(v.start), slice_part(v.stop), slice_part(v.step)]}


def builtin_record(v):
    """The record of a bool / int / float / str (subclasses included: IntEnum, numpy-like str), a slice or
    Ellipsis; None for anything else (the framework's converter goes on with its own types)."""
    if isinstance(v, bool):
        return {"type": "bool", "value": bool(v)}
    if isinstance(v, int):
        return {"type": "int", "value": int(v)}
    if isinstance(v, float):
        return {"type": "float", "value": number(float(v))}
    if isinstance(v, str):
        return {"type": "str", "value": str(v)}
    if isinstance(v, slice):
        return slice_record(v)
    if v is Ellipsis:
        return {"type": "ellipsis", "value": "..."}
    return None


def tensor_leaves(obj) -> Iterator[dict]:
    """Every tensor record (a dict with dtype and shape) inside a nested record, iteratively."""
    stack = [obj]
    while stack:
        o = stack.pop()
        if isinstance(o, dict):
            if "dtype" in o and "shape" in o:
                yield o
            else:
                stack.extend(o.values())
        elif isinstance(o, list):
            stack.extend(o)


def overflow_in(values) -> bool:
    """True when any number in ``values`` is inf or nan (a float or a NonFinite marker)."""
    for v in values:
        if isinstance(v, NonFinite) or (isinstance(v, float) and not math.isfinite(v)):
            return True
    return False


def record_overflows(rec) -> bool:
    """Whether any tensor of a record has an inf/nan Max or Min (the overflow_check task's test)."""
    return overflow_in(v for leaf in tensor_leaves(rec) for v in (leaf.get("Max"), leaf.get("Min")))
