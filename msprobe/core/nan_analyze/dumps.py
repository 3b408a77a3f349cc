"""A step folder of rank dumps -> per rank, its records in execution order with non-finite flags.

A record (one dump.json key) is *anomalous* when none of its input tensors has a non-finite Max or Min
but one of its output tensors has (checks_and_monitors.md 5.3); ``Torch.empty*`` / ``Torch.fill*`` never are.
Statistics may be floats (``NaN``, ``Infinity`` as the dumpers write them) or strings (``"nan"``, ``"inf"``,
``"-Infinity"``); a tensor without Max and Min (another summary mode) is judged by Mean / Norm.

The rows come from :func:`msprobe.core.dump.reader.read_dump` (the one dump.json reader, streamed for big
files); the flags are computed on whole columns and reduced per record with numpy.
"""

from __future__ import annotations

import os
import math
import re
from dataclasses import dataclass, field
from functools import cached_property
from typing import Dict, List, Optional, Tuple

import numpy as np

from msprobe.core.errors import MsprobeError

DUMP = "dump.json"
CONSTRUCT = "construct.json"
STACK = "stack.json"

_RANK_DIR = re.compile(r"^rank(\d*)$")
_PROC_DIR = re.compile(r"^proc\d*$")
_STEP_DIR = re.compile(r"^step\d+$")

#: a record whose name holds one of these (and starts with ``Distributed.``) is a communication op
COMM_KEYWORDS = ("send", "recv", "broadcast", "all_reduce", "reduce", "all_gather", "gather", "isend", "irecv",
                 "scatter", "reduce_scatter", "_reduce_scatter_base", "_all_gather_base", "all_to_all_single",
                 "all_to_all", "all_gather_into_tensor", "reduce_scatter_tensor", "send_object_list",
                 "recv_object_list")
IGNORED = ("Torch.empty", "Torch.fill")


def is_comm(name: str) -> bool:
    return name.startswith("Distributed.") and name.count(".") >= 3 and any(k in name for k in COMM_KEYWORDS)


def is_ignored(name: str) -> bool:
    return any(k in name for k in IGNORED)


@dataclass
class RankPaths:
    rank: int
    folder: str
    dump: str
    construct: Optional[str]
    stack: Optional[str]


@dataclass
class RankRecords:
    """One rank's records in execution (dump) order, with per-record flags (numpy bool arrays).

    The row details (leaf names, peer arguments) are kept only for the records that may be asked about:
    communication ops, anomalous records and the first record with a non-finite input."""

    rank: int
    paths: RankPaths
    names: List[str]
    in_bad: np.ndarray          # an input tensor (or parameter) has a non-finite Max/Min
    out_bad: np.ndarray         # an output tensor has one
    comm: np.ndarray            # a collective or point-to-point op (is_comm)
    ignored: np.ndarray         # Torch.empty* / Torch.fill*
    framework: str = "pytorch"
    # a module whose non-finite output came from inside it (_fed_inside): not where the value was made
    fed_inside: Optional[np.ndarray] = None
    # record index -> [(leaf name without the record name, state, dtype, value, non-finite)]
    rows: Dict[int, list] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.names)

    @cached_property
    def anomalous_mask(self) -> np.ndarray:
        """Per record: finite inputs, a non-finite output, not an ignored op."""
        mask = self.out_bad & ~self.in_bad & ~self.ignored
        if self.fed_inside is not None:
            mask &= ~self.fed_inside
        return mask

    def anomalous(self, i: int) -> bool:
        return bool(self.anomalous_mask[i])

    def leaves(self, i: int) -> List[Tuple[str, str]]:
        """(leaf name without the record name, state) of record i's non-finite tensors."""
        return [(leaf, state) for leaf, state, _, _, bad in self.rows.get(i, ()) if bad]

    def comm_args(self, i: int) -> Dict[str, object]:
        """The arguments that tell a communication op's peers: src, dst, group_src, group_dst (kwargs),
        the int positional arguments in order (``"args"``) and the group's ranks (``"group"``)."""
        out: Dict[str, object] = {"args": []}
        for leaf, state, dtype, value, _ in self.rows.get(i, ()):
            if state != "input":
                continue
            key = leaf[len("input."):]
            if dtype == "torch.ProcessGroup":
                if isinstance(value, list):
                    out["group"] = [int(v) for v in value if isinstance(v, int) and not isinstance(v, bool)]
            elif key in ("src", "dst", "group_src", "group_dst"):
                if isinstance(value, int) and not isinstance(value, bool):
                    out[key] = value
            elif key.isdigit() and isinstance(value, int) and not isinstance(value, bool):
                out["args"].append(value)
        return out


# ------------------------------------------------------------------------------------------ the folder
def rank_folders(step_dir: str) -> List[RankPaths]:
    """The rank folders of a step folder (``rank``, ``rankN``; ``procN`` of 26.x dumps numbered 0, 1 ...
    in order), or the folder itself when it is one rank's dump.  One clear error for anything else."""
    from msprobe.core.fileio import check_path

    step_dir = check_path(step_dir, "nan_analyze input (-i)", "dir")
    try:
        entries = sorted(os.listdir(step_dir))
    except OSError as exc:
        raise MsprobeError(f"nan_analyze input {step_dir} cannot be listed: {exc.strerror}")
    if DUMP in entries:   # one rank's folder given directly
        m = _RANK_DIR.match(os.path.basename(step_dir))
        return [_paths(int(m.group(1)) if m and m.group(1) else 0, step_dir)]
    found: List[Tuple[int, str]] = []
    procs: List[str] = []
    for e in entries:
        full = os.path.join(step_dir, e)
        if not os.path.isdir(full):
            continue
        m = _RANK_DIR.match(e)
        if m:
            found.append((int(m.group(1)) if m.group(1) else 0, e))
        elif _PROC_DIR.match(e):
            procs.append(e)
    if procs and not found:
        found = list(enumerate(procs))   # process ids say nothing about ranks: number them in order
    if not found:
        steps = [e for e in entries if _STEP_DIR.match(e) and os.path.isdir(os.path.join(step_dir, e))]
        if steps:
            raise MsprobeError(f"nan_analyze input {step_dir} holds step folders ({', '.join(steps[:4])}), not rank "
                               f"folders; pass one step: -i {os.path.join(step_dir, steps[0])}")
        raise MsprobeError(f"nan_analyze input {step_dir} holds no rank folders (rank, rank0, rank1 ...) and no "
                           f"dump.json; pass the step folder of a dump, e.g. -i dump_path/step0")
    found.sort()
    seen = {}
    for num, name in found:
        if num in seen:
            raise MsprobeError(f"nan_analyze input {step_dir}: folders {seen[num]!r} and {name!r} are both rank "
                               f"{num}; keep one of them")
        seen[num] = name
    return [_paths(num, os.path.join(step_dir, name)) for num, name in found]


def _paths(rank: int, folder: str) -> RankPaths:
    dump = os.path.join(folder, DUMP)
    if not os.path.isfile(dump):
        raise MsprobeError(f"rank folder {folder} has no {DUMP}; the dump of rank {rank} is missing or was "
                           f"interrupted before its first write: re-run the dump or remove the folder")
    construct = os.path.join(folder, CONSTRUCT)
    stack = os.path.join(folder, STACK)
    return RankPaths(rank, folder, dump, construct if os.path.isfile(construct) else None,
                     stack if os.path.isfile(stack) else None)


# ------------------------------------------------------------------------------------------ reading
def _nonfinite(col) -> Tuple[np.ndarray, np.ndarray]:
    """(non-finite, usable number) masks of a statistic column (floats, ints, numeric strings)."""
    from msprobe.core.compare.stats import numeric

    v, ok = numeric(col)
    return ok & ~np.isfinite(v), ok


#: in-place APIs that return nothing: the value they write is in no output record
_WRITE_RETURNS_NONE = (".__setitem__.",)


def _in_place_writes(names, starts, ends, rows, tensor, bad, in_bad, out_bad) -> None:
    """An in-place op that returns nothing (``x[i] = float("nan")``, recorded as ``Tensor.__setitem__`` with
    ``output: [null]``) writes its value into its first argument: with finite tensor inputs and a non-finite
    scalar value it is the op that made the NaN/inf, though none of its outputs holds it. Marks it anomalous
    (``out_bad``) and that scalar as its non-finite leaf (``bad``). Without this the first record after it
    holding the written tensor as an output (the enclosing module) was named instead."""
    for i, name in enumerate(names):
        if in_bad[i] or out_bad[i] or not any(k in name for k in _WRITE_RETURNS_NONE):
            continue
        a, b = int(starts[i]), int(ends[i])
        hits = [j for j in range(a, b) if not tensor[j] and rows.state[j] == "input"
                and isinstance(rows.value[j], float) and not math.isfinite(rows.value[j])]
        if hits:
            out_bad[i] = True
            bad[hits] = True


def _fed_inside(names, in_bad, anomalous, construct_path) -> Optional[np.ndarray]:
    """Module forward records that look anomalous (finite inputs, a non-finite output) but hold a record that
    got a non-finite input: a parameter of a child module (a weight made NaN by the previous step's update,
    recorded among that child's inputs) or any value an op inside it read. The module only passed the value
    on; without this the outermost module without that parameter of its own (``LlamaMLP`` around a NaN
    ``down_proj.weight``) was named as the op that made the NaN. Records inside a module run before its own
    record; they are found by name (child modules: ``Module.{path}.``) and through construct.json's parents."""
    cands = [i for i in np.flatnonzero(anomalous).tolist()
             if names[i].startswith("Module.") and ".forward." in names[i]]
    if not cands:
        return None
    bad_at = np.flatnonzero(in_bad)
    parents = None
    out = np.zeros(len(names), dtype=bool)
    for i in cands:
        head = names[i].rsplit(".forward.", 1)[0]          # Module.{path}.{Class}
        prefix = head.rsplit(".", 1)[0] + "."                # Module.{path}.
        before = bad_at[bad_at < i].tolist()
        if any(names[j].startswith(prefix) for j in before):
            out[i] = True
            continue
        if not before or construct_path is None:
            continue
        if parents is None:
            try:
                from msprobe.core.fileio import load_json
                parents = load_json(construct_path, "construct.json")
                if not isinstance(parents, dict):
                    parents = {}
            except Exception:   # noqa: BLE001 - construct.json is optional
                parents = {}
        for j in before:
            node, seen = parents.get(names[j]), 0
            while isinstance(node, str) and seen < 256:
                if node == names[i]:
                    out[i] = True
                    break
                node, seen = parents.get(node), seen + 1
            if out[i]:
                break
    return out


def read_rank(paths: RankPaths) -> RankRecords:
    """Read one rank's dump.json into records with their non-finite flags."""
    from msprobe.core.dump.reader import NO_VALUE, read_dump

    side = f"rank{paths.rank}"
    try:
        rows = read_dump(paths.dump, side, stack_path="")   # "": the stack is read later, only where needed
    except MsprobeError as exc:
        text = str(exc)
        if "compare works on dumps made with task" in text:
            text = text.replace("compare works on", "nan_analyze works on")
        raise MsprobeError(text) from None
    n = len(rows.names)
    if rows.framework not in ("pytorch", ""):
        raise MsprobeError(f"{side} dump.json {paths.dump} is a {rows.framework} dump; nan_analyze analyses "
                           f"PyTorch dumps (framework 'pytorch')")
    if n == 0:
        empty = np.zeros(0, bool)
        return RankRecords(paths.rank, paths, [], empty, empty, empty, empty, rows.framework)
    tensor = np.fromiter((v is NO_VALUE for v in rows.value), dtype=bool, count=n)
    nf_max, ok_max = _nonfinite(rows.stat_max)
    nf_min, ok_min = _nonfinite(rows.stat_min)
    has_mm = ok_max | ok_min
    bad = nf_max | nf_min
    no_mm = tensor & ~has_mm
    if no_mm.any():   # a tensor without Max and Min: its Mean / Norm decide
        nf_mean, ok_mean = _nonfinite(rows.stat_mean)
        nf_norm, ok_norm = _nonfinite(rows.stat_norm)
        bad = bad | (no_mm & (nf_mean | nf_norm))
        has_stats = has_mm | ok_mean | ok_norm
    else:
        has_stats = has_mm
    bad &= tensor
    if tensor.any() and not (tensor & has_stats).any():
        raise MsprobeError(
            f"{side} dump.json {paths.dump} holds no statistics (no Max/Min/Mean/Norm on any tensor; a dump made "
            f"with summary_mode 'md5' only, or a tensor dump without statistics); nan_analyze needs a statistics "
            f"dump: re-run the dump with task 'statistics' and summary_mode 'statistics'")
    state = np.array(list(rows.state), dtype=object)   # (list(): a coded column gives its values at once)
    is_in = (state == "input") | (state == "parameters")
    is_out = state == "output"
    api = np.array(list(rows.api), dtype=object)
    starts = np.flatnonzero(np.r_[True, api[1:] != api[:-1]])
    ends = np.r_[starts[1:], n]
    names = api[starts].tolist()
    if len(set(names)) != len(names):   # a key's rows are always together: a repeat means a broken file
        raise MsprobeError(f"{side} dump.json {paths.dump}: a record appears twice; the file is damaged: re-run the dump")
    in_bad = np.logical_or.reduceat(bad & is_in, starts)
    out_bad = np.logical_or.reduceat(bad & is_out, starts)
    _in_place_writes(names, starts, ends, rows, tensor, bad, in_bad, out_bad)
    comm = np.fromiter((is_comm(x) for x in names), dtype=bool, count=len(names))
    ignored = np.fromiter((is_ignored(x) for x in names), dtype=bool, count=len(names))
    rec = RankRecords(paths.rank, paths, names, in_bad, out_bad, comm, ignored, rows.framework)
    rec.fed_inside = _fed_inside(names, in_bad, out_bad & ~in_bad & ~ignored, paths.construct)
    keep = comm | rec.anomalous_mask
    if in_bad.any():
        keep[int(in_bad.argmax())] = True
    for i in np.flatnonzero(keep).tolist():
        a, b = int(starts[i]), int(ends[i])
        cut = len(names[i]) + 1
        rec.rows[i] = [(rows.names[j][cut:], rows.state[j], rows.dtype[j], rows.value[j], bool(bad[j]))
                       for j in range(a, b)]
    return rec
