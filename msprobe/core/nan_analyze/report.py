"""``anomaly_analyze_{time_ns}.json`` in the reference's layout, and the console summary.

The file: ``{"rank_R": [{"op_name", "data_info", "construct_info", "stack_info"}, ...]}`` with ``data_info``
the record's statistics as dumped (forward: ``input_args``, ``input_kwargs``, ``output``; backward: ``input``,
``output``), ``construct_info`` the chain of parents from construct.json (root first, the op last) and
``stack_info`` the op's frames from stack.json (``{}`` when it has none, as the reference writes).
Non-finite values are written as the bare tokens ``NaN`` / ``Infinity`` / ``-Infinity``, as Python's json
module (and the reference) writes them; msprobe's readers read them back.
"""

from __future__ import annotations

import json
import logging
import os
import time
from typing import Dict, List, Optional

from msprobe.core.errors import MsprobeError
from msprobe.core.nan_analyze.analyzer import PHASE_WORDS, Anomaly, Result

log = logging.getLogger("msprobe")


# ------------------------------------------------------------------------------------------ inputs
def _raw_records(path: str, names: List[str]) -> Dict[str, dict]:
    """The bodies of a few records of a dump.json: only their entries are parsed when the file has the
    dumpers' layout (one entry per line), else the whole file."""
    from msprobe.core.fileio import dump_index, entry_name, load_dump_json, parse_entries

    want = set(names)
    try:
        with open(path, "rb") as fh:
            raw = fh.read()
    except OSError as exc:
        raise MsprobeError(f"dump.json {path} cannot be read: {exc.strerror}")
    idx = dump_index(raw)
    if idx is not None:
        _, offsets = idx
        out: Dict[str, dict] = {}
        for k in range(len(offsets) - 1):
            if entry_name(raw, offsets[k]) in want:
                part = parse_entries(raw, offsets, k, k + 1)
                if part:
                    out.update((n, b) for n, b in part.items() if n in want)
        if want <= set(out):
            return out
    data = load_dump_json(path).get("data") or {}
    return {n: data[n] for n in names if n in data}


def _construct(path: Optional[str]) -> dict:
    from msprobe.core.fileio import load_json

    if not path:
        return {}
    try:
        obj = load_json(path, "construct.json")
    except MsprobeError as exc:   # the result is still right without the module chain: say so and go on
        log.warning("%s; the result lists no parent modules for this rank", exc)
        return {}
    return obj if isinstance(obj, dict) else {}


def _stacks(path: Optional[str]) -> Dict[str, List[str]]:
    from msprobe.core.dump.reader import load_stack_frames

    if not path:
        return {}
    try:
        return load_stack_frames(path)
    except MsprobeError as exc:
        log.warning("%s; the result has no call stacks for this rank", exc)
        return {}


def construct_chain(construct: dict, op_name: str) -> List[str]:
    """The op and its parents, root first (a parent written as [name, micro-step] counts by its name)."""
    chain = [op_name]
    seen = {op_name}
    node = op_name
    while True:
        node = construct.get(node)
        if isinstance(node, list):
            node = node[0] if node else None
        if not isinstance(node, str) or not node or node in seen:
            return chain
        chain.insert(0, node)
        seen.add(node)


def data_info(op_name: str, body: dict) -> dict:
    if "forward" in op_name:
        return {"input_args": body.get("input_args", []), "input_kwargs": body.get("input_kwargs", {}),
                "output": body.get("output", {})}
    return {"input": body.get("input", []), "output": body.get("output", {})}


# ------------------------------------------------------------------------------------------ the file
def build_content(result: Result) -> Dict[str, list]:
    """``{"rank_R": [node info, ...]}`` for the anomalies found (ranks in the order they were found)."""
    by_rank: Dict[int, List[Anomaly]] = {}
    for a in result.anomalies:
        by_rank.setdefault(a.rank, []).append(a)
    content: Dict[str, list] = {}
    for rank, items in by_rank.items():
        rec = result.ranks[rank]
        bodies = _raw_records(rec.paths.dump, [a.op_name for a in items])
        construct = _construct(rec.paths.construct)
        stacks = _stacks(rec.paths.stack)
        content[f"rank_{rank}"] = [
            {"op_name": a.op_name,
             "data_info": data_info(a.op_name, bodies.get(a.op_name, {})),
             "construct_info": construct_chain(construct, a.op_name),
             "stack_info": stacks.get(a.op_name) or {}}
            for a in items]
    return content


def write_result(content: dict, output_dir: str) -> str:
    """Write ``anomaly_analyze_{time_ns}.json`` atomically under ``output_dir`` (created if missing);
    an existing file is never replaced."""
    from msprobe.core.fileio import atomic_write, ensure_output_dir

    folder = ensure_output_dir(output_dir)
    text = json.dumps(content, indent=2)

    def write(tmp: str) -> None:
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write(text)

    return atomic_write(os.path.join(folder, f"anomaly_analyze_{time.time_ns()}.json"), write)


def check_output_dir(output_dir: str) -> None:
    """Refuse an unusable -o before any work (nothing is created here)."""
    path = os.path.abspath(output_dir or "./output")
    if os.path.lexists(path) and not os.path.isdir(path):
        raise MsprobeError(f"output path {path} exists and is not a directory; choose another -o")
    if os.path.isdir(path) and not os.access(path, os.W_OK | os.X_OK):
        raise MsprobeError(f"output directory {path} is not writable by this user; choose another -o or fix its permissions")


# ------------------------------------------------------------------------------------------ console
_FRAMEWORK_DIRS = ("torch", "torch_npu", "msprobe", "mindspore", "megatron_patch")


def _library_frame(path: str, strict: bool) -> bool:
    """A frame of torch or msprobe (``strict``: of any installed package or the standard library too)."""
    import msprobe

    p = path.replace("\\", "/")
    if p.startswith("<") or os.path.abspath(path).startswith(os.path.dirname(os.path.abspath(msprobe.__file__)) + os.sep):
        return True
    if strict:
        return "site-packages/" in p or "dist-packages/" in p or "/lib/python3" in p
    return any(f"/{d}/" in p for d in _FRAMEWORK_DIRS)


def source_line(frames) -> Optional[str]:
    """``file:line in func: code`` of the innermost frame of the user's code in a stack.json entry: the first
    frame outside installed packages and the standard library, else (code installed as a package, e.g.
    Megatron) the first outside torch and msprobe."""
    if not isinstance(frames, list):
        return None
    parsed = []
    for frame in frames:
        if not isinstance(frame, str) or not frame.startswith("File "):
            continue
        head, _, code = frame.partition("\n")
        parts = [x.strip() for x in head[len("File "):].rstrip().rstrip(",").split(",")]
        if len(parts) < 3:
            continue
        path, line, func = ", ".join(parts[:-2]), parts[-2], parts[-1]
        line = line[len("line "):] if line.startswith("line ") else line
        func = func[len("in "):] if func.startswith("in ") else func
        parsed.append((path, f"{path}:{line} in {func}: {code.strip()}"))
    for strict in (True, False):
        for path, text in parsed:
            if not _library_frame(path, strict):
                return text
    return None


def _leaf_stats(body: dict, leaf: str):
    """Max/Min of one leaf of a record body (``output.0``, ``input.1.2``, ``input.x``)."""
    section, _, rest = leaf.partition(".")
    parts = rest.split(".") if rest else []
    sections = {"input": ("input_args", "input_kwargs", "input"), "output": ("output",),
                "parameters": ("parameters",)}.get(section, ())
    for sec in sections:
        node = body.get(sec)
        ok = True
        for p in parts:
            if isinstance(node, list) and p.isdigit() and int(p) < len(node):
                node = node[int(p)]
            elif isinstance(node, dict) and p in node:
                node = node[p]
            else:
                ok = False
                break
        if ok and isinstance(node, dict) and ("Max" in node or "Min" in node):
            return node.get("Max"), node.get("Min")
    return None


def _fmt(v) -> str:
    return json.dumps(v) if isinstance(v, float) else str(v)


def summary_lines(result: Result, content: Dict[str, list]) -> List[str]:
    """What the console says beyond the reference's log lines: per anomaly its phase, the user's source
    line, which outputs went non-finite (its inputs are finite), and where it went; per rank, which input
    of which op was the first to be non-finite."""
    lines: List[str] = []
    n_ranks = len(result.ranks)
    if not result.anomalies:
        if not result.nonfinite_records:
            lines.append(f"No NaN or inf found: every statistic of the {n_ranks} rank(s) under {result.step_dir} "
                         f"is finite; nothing to report.")
        else:
            lines.append(f"No op made a NaN or inf in this step ({result.nonfinite_records} record(s) hold one, "
                         f"but each got it through an input: it came in from outside the dumped ops, e.g. the "
                         f"data, the weights or an earlier step).")
        lines.extend(_first_input_lines(result))
        return lines
    lines.append(f"First NaN/inf {PHASE_WORDS[result.phase]}:")
    for a in result.anomalies:
        rec = result.ranks[a.rank]
        node = next((x for x in content.get(f"rank_{a.rank}", []) if x["op_name"] == a.op_name), None)
        lines.append(f"  rank {a.rank}: {a.op_name}")
        src = source_line(node["stack_info"]) if node else None
        lines.append(f"    source: {src}" if src else "    source: (no user frame in stack.json)")
        bad = [leaf for leaf, state in rec.leaves(a.index) if state == "output"]
        written = [leaf for leaf, state in rec.leaves(a.index) if state == "input"]
        shown = []
        for leaf in bad[:4]:
            st = _leaf_stats(_body_of(node), leaf)
            shown.append(f"{leaf} (Max {_fmt(st[0])}, Min {_fmt(st[1])})" if st else leaf)
        more = f" and {len(bad) - 4} more" if len(bad) > 4 else ""
        if not bad and written:     # an in-place write of a non-finite scalar (x[i] = nan): no output record
            lines.append(f"    non-finite: the scalar {', '.join(written[:4])} it writes in place into its first "
                         f"argument; its tensor inputs are finite")
        else:
            lines.append(f"    non-finite: {', '.join(shown)}{more}; all its inputs are finite")
        if a.via:
            to = f" to rank(s) {', '.join(map(str, a.peers))}" if a.peers else ""
            lines.append(f"    passed on by {a.via}{to}")
    lines.extend(_first_input_lines(result))
    return lines


def _body_of(node: Optional[dict]) -> dict:
    if not node:
        return {}
    info = node.get("data_info", {})
    return info if isinstance(info, dict) else {}


def _first_input_lines(result: Result) -> List[str]:
    if not result.first_inputs:
        return []
    out = ["First non-finite input per rank:"]
    for rank in sorted(result.first_inputs):
        op, leaves = result.first_inputs[rank]
        what = ", ".join(leaves[:4]) + (f" and {len(leaves) - 4} more" if len(leaves) > 4 else "")
        out.append(f"  rank {rank}: {what} of {op}")
    return out
