"""The golden record list of a dump: names in order, structure of every record, construct.json.

Standard library only. ``skeleton`` keeps, per record, its keys and for each tensor leaf its type, dtype,
shape and requires_grad (no statistics), and plain values (ints, strings, ...) as recorded.
"""
import json
import os

_TENSOR_KEYS = ("type", "dtype", "shape", "requires_grad")
_STAT_KEYS = {"Max", "Min", "Mean", "Norm", "md5", "data_name"}


def skeleton(v):
    if isinstance(v, dict):
        if "dtype" in v and "shape" in v and "Max" in v:
            return {k: v[k] for k in _TENSOR_KEYS if k in v}
        return {k: skeleton(x) for k, x in v.items() if k not in _STAT_KEYS}
    if isinstance(v, list):
        return [skeleton(x) for x in v]
    if isinstance(v, float):
        return round(v, 6)
    return v


def golden_of(rank_dir):
    """The golden dict of the dump in ``rank_dir`` (dump.json + construct.json)."""
    with open(os.path.join(rank_dir, "dump.json"), encoding="utf-8") as f:
        data = json.load(f)["data"]
    construct = {}
    cpath = os.path.join(rank_dir, "construct.json")
    if os.path.exists(cpath):
        with open(cpath, encoding="utf-8") as f:
            construct = json.load(f)
    return {"names": list(data), "records": {n: skeleton(r) for n, r in data.items()},
            "construct": construct, "raw": data}


def load_side(path):
    """A rank directory (its dump) or a golden .json file."""
    if os.path.isdir(path):
        return golden_of(path)
    with open(path, encoding="utf-8") as f:
        g = json.load(f)
    g.setdefault("raw", None)
    return g
