"""Input layouts (graph_and_tools.md A.3): a rank dir, a step dir of rank dirs, a dir of step dirs.

Produces a list of :class:`Unit` (one graph or graph pair per step and rank) and the output file names.
Ranks and steps are ordered numerically (the 1.x reference sorted them as text: rank10 before rank2).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import List, Optional, Tuple

from msprobe.core.errors import MsprobeError

LAYOUT_FILES = "files"
LAYOUT_RANKS = "ranks"
LAYOUT_STEPS = "steps"

_RANK = re.compile(r"^rank(0|[1-9][0-9]*)?$")
_STEP = re.compile(r"^step(0|[1-9][0-9]*)?$")
_PROC = re.compile(r"^proc\d*$")


@dataclass(frozen=True)
class Unit:
    step_label: Optional[str]  # "step0" or None (no step level in the input)
    rank_label: Optional[str]  # "rank0", "rank" or None (a single dump dir)
    step: int
    rank: int
    target: str
    golden: Optional[str]

    def file_stem(self, kind: str, ts: str) -> str:
        parts = [kind] + [p for p in (self.step_label, self.rank_label) if p] + [ts]
        return "_".join(parts)


def _number(label: str, prefix: str) -> int:
    rest = label[len(prefix):]
    return int(rest) if rest.isdigit() else 0


def detect(path: str, side: str) -> str:
    try:
        entries = sorted(os.listdir(path))
    except OSError as exc:
        raise MsprobeError(f"{side} path {path} cannot be listed: {exc.strerror}")
    if not entries:
        raise MsprobeError(f"{side} path {path} is empty; pass a dump dir holding construct.json, dump.json and stack.json")
    if "dump_tensor_data" in entries or "dump.json" in entries or "construct.json" in entries:
        return LAYOUT_FILES
    dirs = [e for e in entries if os.path.isdir(os.path.join(path, e))]
    if not dirs:
        return LAYOUT_FILES
    if all(_RANK.match(d) or _PROC.match(d) for d in dirs):
        return LAYOUT_RANKS
    if all(_STEP.match(d) for d in dirs):
        return LAYOUT_STEPS
    bad = next(d for d in dirs if not (_RANK.match(d) or _STEP.match(d) or _PROC.match(d)))
    raise MsprobeError(
        f"{side} path {path}: cannot tell its layout (folder {bad!r}); pass a rank dir (construct.json, dump.json, "
        f"stack.json), a step dir holding rank/rankN dirs, or a dump dir holding stepN dirs"
    )


def _sub(path: str, pattern: re.Pattern, prefix: str, side: str) -> List[Tuple[int, str]]:
    out = []
    for e in os.listdir(path):
        full = os.path.join(path, e)
        if not os.path.isdir(full):
            continue
        if pattern.match(e) or (prefix == "rank" and _PROC.match(e)):
            out.append((_number(e, "proc" if e.startswith("proc") else prefix), e))
        else:
            raise MsprobeError(f"{side} path {path}: unexpected folder {e!r}; expected only {prefix}N folders here")
    if not out:
        raise MsprobeError(f"{side} path {path} holds no {prefix} folders")
    out.sort()
    return out


def plan(target: str, golden: Optional[str]) -> Tuple[str, List[Unit]]:
    """(layout, units) for a build (golden None) or a compare."""
    lt = detect(target, "target")
    if golden is not None:
        lg = detect(golden, "golden")
        if lt != lg:
            raise MsprobeError(
                f"the target path {target} is a {_layout_words(lt)} but the golden path {golden} is a "
                f"{_layout_words(lg)}; pass the same level on both sides"
            )
    if lt == LAYOUT_FILES:
        return lt, [Unit(None, None, 0, 0, target, golden)]
    if lt == LAYOUT_RANKS:
        return lt, _rank_units(target, golden, None, 0)
    steps_t = _sub(target, _STEP, "step", "target")
    units: List[Unit] = []
    if golden is not None:
        steps_g = _sub(golden, _STEP, "step", "golden")
        if [s for s, _ in steps_t] != [s for s, _ in steps_g]:
            raise MsprobeError(
                f"the two runs hold different steps (target {target}: {_names(steps_t)}; golden {golden}: "
                f"{_names(steps_g)}); the steps must be the same to be matched"
            )
        gmap = dict(steps_g)
    for num, name in steps_t:
        g = os.path.join(golden, gmap[num]) if golden is not None else None
        units.extend(_rank_units(os.path.join(target, name), g, name, num))
    return lt, units


def _renumber_procs(ranks: List[Tuple[int, str]]) -> List[Tuple[int, str]]:
    """procN folders (26.x dumps, N = process id) get ranks 0, 1, ... in order; rank folders keep theirs."""
    if any(name.startswith("proc") for _, name in ranks):
        return [(i, name) for i, (_, name) in enumerate(ranks)]
    return ranks


def _rank_units(target: str, golden: Optional[str], step_label: Optional[str], step: int) -> List[Unit]:
    ranks_t = _renumber_procs(_sub(target, _RANK, "rank", "target"))
    if golden is not None:
        ranks_g = _renumber_procs(_sub(golden, _RANK, "rank", "golden"))
        if len(ranks_t) == 1 and len(ranks_g) == 1:
            # one rank on each side (e.g. step0/proc<pid> of two runs): they pair whatever their names
            (num, name_t), (_, name_g) = ranks_t[0], ranks_g[0]
            return [Unit(step_label, name_t, step, num, os.path.join(target, name_t), os.path.join(golden, name_g))]
        procs = [name for _, name in ranks_t + ranks_g if name.startswith("proc")]
        if procs:
            raise MsprobeError(
                f"several proc folders found ({', '.join(procs[:4])}); process ids cannot be paired across runs: "
                f"graph the proc folders one pair at a time (-tp .../procA -gp .../procB)"
            )
        if [r for r, _ in ranks_t] != [r for r, _ in ranks_g]:
            raise MsprobeError(
                f"the two runs hold different ranks (target {target}: {_names(ranks_t)}; golden {golden}: "
                f"{_names(ranks_g)}); the ranks must be the same to be matched: compare runs with the same world size"
            )
        gmap = dict(ranks_g)
    return [
        Unit(step_label, name, step, num, os.path.join(target, name),
             os.path.join(golden, gmap[num]) if golden is not None else None)
        for num, name in ranks_t
    ]


def _names(items) -> str:
    return ", ".join(n for _, n in items)


def _layout_words(layout: str) -> str:
    return {LAYOUT_FILES: "single dump dir", LAYOUT_RANKS: "dir of rank folders", LAYOUT_STEPS: "dir of step folders"}[layout]
