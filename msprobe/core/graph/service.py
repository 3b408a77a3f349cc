"""``msprobe graph``: plan the units (step x rank), build/compare them in parallel, write .vis or .vis.db.

Data flow per unit (in a worker process when there are several units):
files -> Graph (build.py) -> matched + compared (compare.py) -> overflow levels -> a finished output part:
a complete ``.vis`` at a temporary name, or a part SQLite file with the unit's rows.  The main process then
runs the cross-rank communication analysis on the small per-unit summaries of ``Distributed.*`` nodes,
patches those nodes, and moves the results into place (``.vis``: renamed; ``.vis.db``: all parts merged
into one database).  Nothing is visible in the output directory until it is complete.
"""

from __future__ import annotations

import gc
import logging
import multiprocessing as mp
import os
import re
import shutil
import sqlite3
import tempfile
import time
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Tuple

import orjson

from msprobe.core.errors import MsprobeError
from msprobe.core.fileio import atomic_write, disk_full_error, ensure_output_dir, place_file, temp_tag
from msprobe.core.graph import build as gbuild
from msprobe.core.graph import compare as gcompare
from msprobe.core.graph import export
from msprobe.core.graph.layout import Unit, plan
from msprobe.core.graph.model import Graph, Node

log = logging.getLogger("msprobe")

_TEMPLATE = re.compile(r"\b([A-Z][a-zA-Z]*Template|api_template|api_instance)\(")
_MODULE = re.compile(r"^(Module\.|Cell\.)")


@dataclass(frozen=True)
class GraphConfig:
    target: str
    golden: Optional[str] = None
    output: str = "./output"
    layer_mapping: Optional[str] = None  # yaml path; "" = the flag without a file (match by name only)
    overflow_check: bool = False
    fuzzy: bool = False
    complete_stack: bool = False
    db: bool = False
    jobs: int = 0
    framework: Optional[str] = None
    # colour compare nodes by the reference's precision index instead of msprobe's verdict (docs/graph.md)
    reference_colours: bool = False
    backend: Optional[str] = None  # None/"local": forked processes; "ray[:ADDRESS]": --ray (msprobe.core.executor)


@dataclass
class UnitResult:
    unit: Unit
    part: str  # the finished output part (a .vis file or a part .db)
    nodes: int
    matched: int
    micro_steps: int
    mode: Optional[str]
    dist: Dict[str, list] = field(default_factory=dict)  # side -> [(id, inputs, outputs, index)] of Distributed nodes
    verdict: Optional[dict] = None  # compare coloured by msprobe's verdict: graph.verdict's summary


@dataclass
class GraphResult:
    outputs: List[str]
    units: List[UnitResult]
    seconds: float
    failures: List[Tuple[str, str]] = field(default_factory=list)  # --ray: (step/rank label, one-line reason)


# ---------------------------------------------------------------------------------------------- stacks


def simplify_stack(node_id: str, frames: List[str]) -> List[str]:
    """The 1.x one-line stack: the caller's frame (modules: the frame that calls the layer)."""
    if not frames:
        return frames
    if _MODULE.match(node_id):
        parts = node_id.split(".")
        if len(parts) >= 4:
            layer = parts[-4] + "("
            for f in frames:
                if layer in f:
                    return [f]
        return frames
    for i, f in enumerate(frames):
        if _TEMPLATE.search(f):
            return [frames[i + 1]] if i + 1 < len(frames) else frames
    return frames


def _simplify(g: Graph) -> None:
    # stack lists are shared by every node of a stack.json group: simplify each (list, layer) once
    cache: Dict[Tuple[int, str], List[str]] = {}
    for n in g.nodes.values():
        frames = n.stack
        if not frames:
            continue
        if _MODULE.match(n.id):
            parts = n.id.split(".")
            key = (id(frames), parts[-4] if len(parts) >= 4 else "")
        else:
            key = (id(frames), "")
        got = cache.get(key)
        if got is None:
            got = cache[key] = simplify_stack(n.id, frames)
        n.stack = got


# ---------------------------------------------------------------------------------------------- one unit


def _load_mapping(cfg: GraphConfig, g_n: Graph, g_b: Graph) -> Optional[Dict[str, str]]:
    if cfg.layer_mapping is None:
        return None
    from msprobe.core.compare.layer_mapping import compute_layer_mapping, load_layer_mapping_yaml
    from msprobe.core.fileio import load_json

    rules = load_layer_mapping_yaml(cfg.layer_mapping) if cfg.layer_mapping else {}
    cons_n = load_json(os.path.join(g_n.dump_dir, gbuild.CONSTRUCT), "construct.json")
    cons_b = load_json(os.path.join(g_b.dump_dir, gbuild.CONSTRUCT), "construct.json")
    st_n = load_json(os.path.join(g_n.dump_dir, gbuild.STACK), "stack.json")
    st_b = load_json(os.path.join(g_b.dump_dir, gbuild.STACK), "stack.json")
    try:
        return compute_layer_mapping(g_n.data, g_b.data, cons_n, cons_b, st_n, st_b, rules,
                                     npu_framework=g_n.framework, bench_framework=g_b.framework)
    except MsprobeError:
        raise
    except Exception as exc:  # noqa: BLE001 - the reference warns and goes on with an empty map
        log.warning("the layer mapping %s could not be applied (%s: %s); nodes are matched by name only",
                    cfg.layer_mapping, type(exc).__name__, exc)
        return {}


def _dist_summary(g: Graph) -> list:
    """What the cross-rank analysis needs of a graph: its Distributed.* nodes (id, items, data)."""
    out = []
    for n in g.nodes.values():
        if n.id.startswith("Distributed"):
            out.append((n.id, n.input_data, n.output_data, dict(n.data)))
    return out


def unit_label(unit: Unit) -> Optional[str]:
    """``step0 rank1`` (what a unit is called in progress lines); None for a single rank dir."""
    return " ".join(p for p in (unit.step_label, unit.rank_label) if p) or None


def run_unit(cfg: GraphConfig, unit: Unit, workdir: str, ts: str, progress=None) -> UnitResult:
    """Build (and compare) one step/rank and write its finished output part into ``workdir``.
    ``progress(stage, done, total, unit=None, detail=None)`` is told the stages read, match and write."""
    graphs: List[Graph] = []
    try:
        return _run_unit(cfg, unit, workdir, graphs, progress or (lambda *_: None))
    except BaseException:
        for g in graphs:  # stop split children and remove their files
            if g.split is not None:
                g.split.cancel()
                g.split = None
        raise


def _run_unit(cfg: GraphConfig, unit: Unit, workdir: str, graphs: List[Graph], tick) -> UnitResult:
    from msprobe.core.graph.overflow import apply_overflow, overflow_levels

    # the dump data (beyond the items, which live on in the nodes) is only needed for the overflow check
    # and the layer mapping: take what they need, then drop it before the next graph is built
    keep = cfg.layer_mapping is not None
    # Big graphs in the main process: a child formats records from the file meanwhile (golden side of a
    # compare: all of them, since they get no compare fields; a graph only built: most of them)
    can_split = cfg.jobs != 1 and mp.current_process().name == "MainProcess"
    split_n = "half" if can_split and unit.golden is None and not cfg.overflow_check else None
    pre_b = None
    if can_split and unit.golden is not None and not cfg.overflow_check and not keep:
        # the golden child starts first: it parses and splits the golden records for this process while
        # the target graph is built here, then formats them for the writer
        pre_b = gbuild.SplitFormatter.start(gbuild.dump_files(unit.golden)[1], "all", items=True)
    sides = 1 if unit.golden is None else 2
    tick("read", 0, sides, "dumps")
    try:
        g_n = gbuild.build_graph(unit.target, split=split_n)
    except BaseException:
        if pre_b is not None:
            pre_b.cancel()
        raise
    graphs.append(g_n)
    levels_n = overflow_levels(g_n.data) if cfg.overflow_check else None
    if not keep:
        g_n.data = {}
    g_b = (gbuild.build_graph(unit.golden, split="all" if can_split else None, splitter=pre_b)
           if unit.golden is not None else None)
    if g_b is not None:
        graphs.append(g_b)
    tick("read", sides, sides, "dumps", f"{len(g_n):,} nodes" + (f" + {len(g_b):,} nodes" if g_b is not None else ""))
    levels_b = overflow_levels(g_b.data) if cfg.overflow_check and g_b is not None else None
    if g_b is not None and not keep:
        g_b.data = {}
    mode = None
    matched = 0
    if g_b is not None:
        mode = gcompare.compare_mode(g_n, g_b)
        if g_n.framework != g_b.framework and cfg.layer_mapping is None:
            raise MsprobeError(
                f"the target dump is {g_n.framework} and the golden dump is {g_b.framework}; a cross-framework graph "
                f"compare needs -lm/--layer_mapping (a layer-mapping yaml, or the bare flag to match by name only)"
            )
        mapping = _load_mapping(cfg, g_n, g_b)
        g_n.data = g_b.data = {}
        tick("match", 0, len(g_n), "nodes", mode)
        matched = gcompare.compare_graphs(g_n, g_b, mode, fuzzy=cfg.fuzzy, mapping=mapping,
                                          jobs=1 if mp.current_process().name != "MainProcess" else cfg.jobs,
                                          reference_colours=cfg.reference_colours)
        tick("match", len(g_n), len(g_n), "nodes", f"{matched:,} matched pairs, {mode}")
    if g_n.split is not None and g_b is None:
        # a graph that is only built: nothing changes its items any more, so format this process's share
        # now, while the child is still busy with the other share
        export.preformat(g_n)
    for g in (g_n, g_b):
        if g is not None and g.split is not None:
            if mode == gcompare.MODE_MD5:
                g.split.cancel(g)  # md5 compares show the checksums the child left out
                g.split = None
            else:
                g.split.collect(g)
    micro = gbuild.paginate(g_n, g_b)
    if cfg.overflow_check:
        apply_overflow(g_n, levels_n)
        if g_b is not None:
            apply_overflow(g_b, levels_b)
    if not cfg.complete_stack:
        _simplify(g_n)
        if g_b is not None:
            _simplify(g_b)
    md5 = mode == gcompare.MODE_MD5
    # A single unit runs in the main process; with -j N (N > 1) its writing is spread over N processes.
    # Not by default: forked writers read the graph copy-on-write, and reference counting copies every page
    # they touch, so the memory nearly doubles for a ~30% shorter write.
    in_main = mp.current_process().name == "MainProcess"
    if in_main and cfg.jobs > 1:
        from msprobe.core.resources import cap_jobs

        writers = cap_jobs(cfg.jobs, None, "writers")   # never beyond the cores
    else:
        writers = 1
    dist = {"NPU": _dist_summary(g_n)}
    if g_b is not None:
        dist["Bench"] = _dist_summary(g_b)
    n_written = len(g_n) + (len(g_b) if g_b is not None else 0)
    tick("write", 0, n_written, "nodes", "vis.db" if cfg.db else "vis")
    if cfg.db:
        fd, part = tempfile.mkstemp(prefix="part-", suffix=".db", dir=workdir)
        os.close(fd)
        os.unlink(part)
        w = export.DbWriter(part)
        w.add_graph(g_n, "NPU", unit.step, unit.rank, md5, writers)
        if g_b is not None:
            w.add_graph(g_b, "Bench", unit.step, unit.rank, md5, writers)
        w.con.commit()
        w.con.close()
    else:
        fd, part = tempfile.mkstemp(prefix="part-", suffix=".vis", dir=workdir)
        os.close(fd)
        export.write_vis(part, g_n, g_b, mode=mode, micro_steps=micro, overflow_check=cfg.overflow_check, workers=writers,
                         verdict_colours=not cfg.reference_colours)
    for g in (g_n, g_b):
        if g is not None and g.split is not None:
            g.split.close()
            g.split = None
    nodes = len(g_n)
    tick("write", n_written, n_written, "nodes", "vis.db" if cfg.db else "vis")
    if mp.current_process().name == "MainProcess" and _KEEP[0]:
        # freeing millions of objects takes seconds and gains nothing at the end of a command: keep them
        # (the console entry point exits without tearing the heap down)
        _RETAINED.append((g_n, g_b))
    else:
        # a rank worker goes on with its next unit (and an API caller goes on with its program), with the
        # collector off: break the parent/child cycles so reference counting frees this graph now
        for g in (g_n, g_b):
            if g is not None:
                _release(g)
    return UnitResult(unit, part, nodes, matched, micro, mode, dist, g_n.verdict_summary)


def _release(g: Graph) -> None:
    for n in g.nodes.values():
        n.up = None
        n.subnodes = []
        n.partner = None
    g.nodes = {}


# ---------------------------------------------------------------------------------------------- distributed


def _distributed(results: List[UnitResult], overflow: bool) -> Dict[Tuple[int, int, str], Dict[str, dict]]:
    """(step, rank, side) -> {node id: matched_distributed} for steps with more than one rank."""
    from msprobe.core.graph.distributed import analyze_distributed

    by_step: Dict[int, List[UnitResult]] = {}
    for r in results:
        by_step.setdefault(r.unit.step, []).append(r)
    out: Dict[Tuple[int, int, str], Dict[str, dict]] = {}
    for step, rs in by_step.items():
        if len(rs) < 2:
            continue
        for side in ("NPU", "Bench"):
            graphs: Dict[int, Graph] = {}
            for r in rs:
                summary = r.dist.get(side)
                if summary is None:
                    continue
                g = Graph()
                for node_id, inputs, outputs, data in summary:
                    n = Node(node_id, 1)
                    n.input_data, n.output_data, n.data = inputs, outputs, data
                    g.add(n)
                graphs[r.unit.rank] = g
            if len(graphs) < 2:
                continue
            analyze_distributed(graphs, overflow)
            for rank, g in graphs.items():
                found = {n.id: n.distributed for n in g.nodes.values() if n.distributed}
                if found:
                    out[(step, rank, side)] = found
    return out


def _patch_vis(path: str, patches: Dict[str, Dict[str, dict]]) -> None:
    with open(path, "rb") as f:
        obj = orjson.loads(f.read())
    for side, nodes in patches.items():
        table = obj[side]["node"] if side in ("NPU", "Bench") and side in obj else obj["node"]
        for node_id, md in nodes.items():
            if node_id in table:
                table[node_id]["matched_distributed"] = md
    with open(path, "wb") as f:
        f.write(orjson.dumps(obj, option=orjson.OPT_NON_STR_KEYS))


def _patch_db(con: sqlite3.Connection, step: int, rank: int, side: str, nodes: Dict[str, dict]) -> None:
    con.executemany(
        "UPDATE tb_nodes SET matched_distributed = ? WHERE id = ?",
        [(orjson.dumps(md, option=orjson.OPT_NON_STR_KEYS).decode(), f"{side}_{step}_{rank}_{node_id}") for node_id, md in nodes.items()],
    )


# ---------------------------------------------------------------------------------------------- the command


def run_graph(cfg: GraphConfig, progress_factory: Optional[Callable[[Optional[str]], Callable]] = None,
              exiting: bool = False) -> GraphResult:
    """Run the command.  ``exiting``: the caller ends the process right after (the CLI): the graphs are
    then kept and the heap left as it is, since tearing it down would only cost time.
    ``progress_factory(label)`` gives each graph's (step/rank's) stage progress (msprobe.core.progress)."""
    # A graph is millions of small dicts that all live until the end: the cyclic GC would walk them again
    # and again while they are created (a third of the build time) and could free nothing.
    was_enabled = gc.isenabled()
    _RETAINED.clear()
    _KEEP[0] = exiting
    gc.disable()
    try:
        return _run_graph(cfg, progress_factory)
    finally:
        if exiting:
            # everything allocated meanwhile sits in the youngest generation: the first collection after
            # re-enabling would walk all of it; park it in the permanent generation instead
            gc.freeze()
        if was_enabled:
            gc.enable()


_KEEP = [False]
_RETAINED: list = []


def _run_graph(cfg: GraphConfig, progress_factory=None) -> GraphResult:
    t0 = time.perf_counter()
    _, units = plan(cfg.target, cfg.golden)
    if cfg.layer_mapping:
        from msprobe.core.compare.layer_mapping import load_layer_mapping_yaml

        load_layer_mapping_yaml(cfg.layer_mapping)  # fail before any work
    out_dir = ensure_output_dir(cfg.output)
    ts = time.strftime("%Y%m%d%H%M%S")
    kind = "compare" if cfg.golden is not None else "build"
    # the pid in the name: a later run removes what a killed one left (fileio.clean_stale_temps)
    workdir = tempfile.mkdtemp(prefix=f".msprobe-graph-{temp_tag()}-", dir=out_dir)
    try:
        failures: List[Tuple[str, str]] = []
        results = _run_units(cfg, units, workdir, ts, progress_factory, failures)
        if not results:
            raise MsprobeError(f"graph: every step/rank failed ({failures[0][0]}: {failures[0][1]})" if failures
                               else "graph: nothing was built")
        patches = _distributed(results, cfg.overflow_check)
        if cfg.db:
            outputs = [_finish_db(cfg, results, patches, out_dir, kind, ts)]
        else:
            outputs = []
            for r in results:
                side_patches = {side: p for (s, rk, side), p in patches.items() if s == r.unit.step and rk == r.unit.rank}
                if side_patches:
                    if cfg.golden is None:
                        side_patches = {"node": side_patches.get("NPU", {})}
                    _patch_vis(r.part, side_patches)
                final = os.path.join(out_dir, r.unit.file_stem(kind, ts) + ".vis")
                outputs.append(place_file(r.part, final))
    except Exception as exc:  # noqa: BLE001 - a full disk while writing the parts: one line, no traceback
        err = disk_full_error(exc, out_dir)
        if err is None:
            raise
        raise err from None
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    _warn_hidden(out_dir, outputs)
    return GraphResult(outputs, results, time.perf_counter() - t0, failures)


def _warn_hidden(out_dir: str, outputs: List[str]) -> None:
    """tb-graph-ascend lists one .vis.db per directory, and a .vis.db hides the .vis files beside it."""
    try:
        names = os.listdir(out_dir)
    except OSError:
        return
    dbs = sorted(n for n in names if n.endswith(".vis.db"))
    vis = [n for n in names if n.endswith(".vis")]
    if len(dbs) > 1 or (dbs and vis):
        log.warning("%s now holds %d .vis.db and %d .vis files; tb-graph-ascend shows only one .vis.db per "
                    "directory (and then none of the .vis files): give each run its own -o to see them all",
                    out_dir, len(dbs), len(vis))


def _workers(cfg: GraphConfig, n_units: int) -> int:
    from msprobe.core.resources import cap_jobs

    if n_units <= 1:
        return 1  # -j then spreads the writing of the one graph (capped at the cores there)
    return cap_jobs(cfg.jobs, n_units, "graphs")   # never beyond the cores nor the graphs


def unit_task(cfg: GraphConfig, ts: str, unit: Unit, _emit=None) -> Tuple[UnitResult, bytes]:
    """A Ray task (msprobe.core.executor): one step/rank built (and compared) where its dump lies, its part
    written in a temporary folder of the worker's machine and returned as bytes (the driver places them)."""
    workdir = tempfile.mkdtemp(prefix=f".msprobe-graph-{temp_tag()}-")
    try:
        res = run_unit(cfg, unit, workdir, ts)
        with open(res.part, "rb") as f:
            data = f.read()
        res.part = os.path.splitext(res.part)[1]          # the suffix: .vis or .db
        return res, data
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def _run_units_ray(cfg, units, workdir, ts, jobs, failures=None) -> List[UnitResult]:
    """One Ray task per step/rank (:func:`unit_task`); each part is written into ``workdir`` as it arrives.
    ``failures`` (a list): a step/rank whose graph fails is recorded there and left out, the others go on."""
    import functools

    from msprobe.core.executor import run_tasks

    out: List[Optional[UnitResult]] = [None] * len(units)

    def on_error(i, exc):
        if failures is None:
            raise exc
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        label = unit_label(units[i]) or "graph"
        log.error("graph %s failed: %s", label, reason)
        failures.append((label, reason))
        if jobs[i] is not None and not jobs[i].finished:
            jobs[i].abandon()

    def on_result(i, value):
        res, data = value
        fd, part = tempfile.mkstemp(prefix="part-", suffix=res.part, dir=workdir)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        res.part = part
        out[i] = res
        if jobs[i] is not None:
            jobs[i].finish()

    run_tasks(functools.partial(unit_task, cfg, ts), units, len(units), backend=cfg.backend, on_result=on_result,
              on_error=on_error if failures is not None else None, collect=False, name="msprobe-graph")
    return [r for r in out if r is not None]


def _run_units(cfg, units, workdir, ts, progress_factory, failures=None) -> List[UnitResult]:
    """Every step/rank, in msprobe.core.executor workers when there are several (Ctrl-C or a failing graph
    stops them all at once; their parts live in ``workdir``, removed by the caller); with a Ray backend
    (--ray) in Ray tasks, also for one unit."""
    from msprobe.core.executor import is_ray, run_tasks

    workers = _workers(cfg, len(units))
    jobs = [progress_factory(unit_label(u)) for u in units] if progress_factory else [None] * len(units)
    if is_ray(cfg.backend):
        try:
            return _run_units_ray(cfg, units, workdir, ts, jobs, failures if len(units) > 1 else None)
        except BaseException:
            for job in jobs:
                if job is not None and not job.finished:
                    job.abandon()
            raise

    def end(job, ok: bool) -> None:
        if job is not None:
            (job.finish if ok else job.abandon)()

    try:
        if workers <= 1:
            out = []
            for u, job in zip(units, jobs):
                out.append(run_unit(cfg, u, workdir, ts, job))
                end(job, True)
            return out

        def task(u, emit):
            return run_unit(cfg, u, workdir, ts, lambda stage, done=0, total=None, unit=None, detail=None:
                            emit(stage, done, total, unit, detail))

        def on_event(i, *args):
            if jobs[i] is not None:
                jobs[i](*args)

        return run_tasks(task, units, workers, on_event=on_event, on_result=lambda i, _r: end(jobs[i], True),
                         name="msprobe-graph")
    except BaseException:
        for job in jobs:
            if job is not None and not job.finished:
                end(job, False)
        raise


def _finish_db(cfg, results: List[UnitResult], patches, out_dir: str, kind: str, ts: str) -> str:
    final = os.path.join(out_dir, f"{kind}_{ts}.vis.db")

    def write(tmp: str) -> None:
        os.unlink(tmp)
        first = results[0].part
        os.replace(first, tmp)  # both live in the output directory: a rename, not a copy
        con = sqlite3.connect(tmp)
        try:
            for r in results[1:]:
                con.execute("ATTACH DATABASE ? AS part", (r.part,))
                con.execute("INSERT INTO tb_nodes SELECT * FROM part.tb_nodes")
                con.execute("INSERT INTO tb_stack SELECT * FROM part.tb_stack")
                con.commit()
                con.execute("DETACH DATABASE part")
            for (step, rank, side), nodes in patches.items():
                _patch_db(con, step, rank, side, nodes)
            con.commit()
        finally:
            con.close()
        w = export.DbWriter.reopen(tmp)
        mode = next((r.mode for r in results if r.mode), None)
        w.close(compare=cfg.golden is not None, mode=mode, micro_steps=max(r.micro_steps for r in results),
                overflow_check=cfg.overflow_check, ranks=[r.unit.rank for r in results], steps=[r.unit.step for r in results],
                verdict_colours=not cfg.reference_colours)

    return atomic_write(final, write)
