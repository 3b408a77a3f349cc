"""Build a hierarchical model graph from a dump, or compare two, for the TensorBoard plugin tb-graph-ascend.

One dump (-tp) gives build_*.vis; two dumps (-tp and -gp) give compare_*.vis with every matched node
coloured by msprobe's verdict (--reference-colours: by the reference's precision index).  Inputs may be a
rank dir (construct.json, dump.json, stack.json), a step dir of rank dirs, or a dump dir of step dirs: one
graph per step and rank, built in parallel.  --db writes one SQLite .vis.db holding every graph instead (for
graphs too big for JSON; tb-graph-ascend >= 8.2).
"""

from __future__ import annotations

import argparse
import os

from msprobe.cli.options import add_quiet

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

EPILOG = """examples:
  msprobe graph -tp npu/step0/rank0 -o out                       build_{ts}.vis
  msprobe graph -tp npu/step0 -gp gpu/step0 -o out               compare_rank0_{ts}.vis, compare_rank1_{ts}.vis ...
  msprobe graph -tp npu -gp gpu -o out --db                      one compare_{ts}.vis.db for every step and rank
  msprobe -f pytorch graph -i compare.json -o out -f             legacy syntax (compare.json: npu_path[, bench_path]);
                                                                 after 'graph', -f means fuzzy matching
view:  tensorboard --logdir out   (pip install tb-graph-ascend), then open the GRAPH_ASCEND tab
"""


def add_arguments(p: argparse.ArgumentParser) -> None:
    io = p.add_argument_group("inputs and output")
    io.add_argument("-tp", "--target_path", help="target (NPU) dump: rank dir, step dir or dump dir")
    io.add_argument("-gp", "--golden_path", help="golden (bench) dump, same layout as -tp; omit to only build")
    io.add_argument("-i", "--input_path", help="legacy: compare.json with npu_path[, bench_path]")
    io.add_argument("-o", "--output_path", nargs="?", const="./output", default="./output",
                    help="output directory, created if missing (default ./output, as compare); results are never overwritten")
    io.add_argument("--db", action="store_true", help="write one SQLite .vis.db for the whole run instead of .vis JSON files")
    io.add_argument("--file_type", choices=("db", "json"), default=None,
                    help="the reference's 26.x spelling: db = --db (the default of 'graph_visualize'); json (merged "
                         "dump files of a parallel merge) is not supported")
    m = p.add_argument_group("matching")
    m.add_argument("-fm", "--fuzzy_match", "-f", dest="fuzzy_match", action="store_true",
                   help="fuzzy matching: modules by name and shape, their APIs by name and order inside the module")
    m.add_argument("-lm", "--layer_mapping", nargs="?", const="", default=None, metavar="YAML",
                   help="layer-mapping yaml ({LayerClass: {npu_name: bench_name}}); the bare flag matches by name only")
    v = p.add_argument_group("view")
    v.add_argument("-oc", "--overflow_check", action="store_true", help="mark overflow levels (medium / high / critical) on nodes")
    v.add_argument("-cs", "--complete_stack", action="store_true", help="keep complete stacks (default: the one caller line)")
    v.add_argument("--reference-colours", "--reference-colors", dest="reference_colours", action="store_true",
                   help="compare: colour nodes by the reference's precision index (statistics: largest relative "
                        "error of the outputs) instead of msprobe's verdict (red: the node introduces a difference "
                        "beyond its dtype's rounding; yellow: inherited; see docs/graph.md)")
    x = p.add_argument_group("execution")
    x.add_argument("-j", "--jobs", type=int, default=0,
                   help="parallel workers for steps/ranks (default: one per core); -j 1: no helper processes at all; "
                        "for a single graph, N > 1 also splits its writing over N processes (faster, but almost "
                        "twice the memory)")
    x.add_argument("--ray", nargs="?", const="", default=None, metavar="ADDRESS",
                   help="build/compare the steps/ranks in Ray tasks: no ADDRESS starts a local instance, 'auto' or "
                        "ray://host:port joins a cluster; needs pip install 'msprobe[ray]' (docs/scale.md)")
    add_quiet(x)
    x.add_argument("-tensor_log", "--is_print_compare_log", dest="tensor_log", action="store_true",
                   help="accepted for the reference's command line; graph logs no per-tensor lines (a warning says so)")
    ref = p.add_argument_group("reference 26.x options that msprobe refuses with a pointer (docs/compatibility.md)")
    ref.add_argument("-progress_log", "--is_print_progress_log", dest="progress_log", action="store_true",
                     help="PROGRESS: {json} lines for the MindStudio front end: not supported")
    for flag in ("--rank_size", "--tp", "--pp", "--vpp", "--order"):
        ref.add_argument(flag, nargs="+", default=None, help="parallel merge of rank graphs: not supported")


def _check_reference_flags(args) -> None:
    from msprobe.core.errors import MsprobeError

    merge = [f"--{d}" for d in ("rank_size", "tp", "pp", "vpp", "order") if getattr(args, d, None) is not None]
    if merge:
        raise MsprobeError(f"{'/'.join(merge)} (parallel merge of the rank graphs into one graph per parallel group) "
                           f"is not supported; drop {'them' if len(merge) > 1 else 'it'}: msprobe builds one graph per "
                           f"rank (-tp STEP_DIR gives all ranks), and compares rank by rank")
    if args.progress_log:
        raise MsprobeError("-progress_log (machine-readable PROGRESS lines for the MindStudio front end) is not "
                           "supported; drop it: progress is shown on the terminal (hide it with -q)")
    if args.file_type == "json":
        raise MsprobeError("--file_type json (merged construct/dump/stack.json of a parallel merge) is not supported; "
                           "use --file_type db (or --db) for one .vis.db, or leave it out for .vis files")
    if args.file_type == "db":
        args.db = True
    elif args.file_type is None and getattr(args, "command", "graph") == "graph_visualize":
        args.db = True  # the reference's graph_visualize writes .vis.db
    if args.tensor_log:
        import logging

        logging.getLogger("msprobe").warning("-tensor_log: msprobe graph logs no per-tensor compare lines (the "
                                             "graph is the same); msprobe compare -tensor_log prints them")


def _legacy(path: str):
    from msprobe.core.errors import MsprobeError
    from msprobe.core.fileio import load_json

    obj = load_json(path, "compare.json", remedy='correct the file at that position; it looks like '
                    '{"npu_path": "...", "bench_path": "..."}',
                    empty_remedy='write {"npu_path": "...", "bench_path": "..."} into it')
    if not isinstance(obj, dict):
        raise MsprobeError(f"compare.json {path}: the top level must be an object with npu_path and optionally bench_path")
    npu = obj.get("npu_path")
    bench = obj.get("bench_path") or None
    if not npu or not isinstance(npu, str):
        raise MsprobeError(f"compare.json {path} has no 'npu_path'; add the target dump directory as \"npu_path\"")
    if bench is not None and not isinstance(bench, str):
        raise MsprobeError(f"compare.json {path}: 'bench_path' must be a directory path")
    if obj.get("parallel_merge"):
        raise MsprobeError(f"compare.json {path}: 'parallel_merge' is not supported yet; remove it to graph each rank separately")
    return npu, bench


def run(args: argparse.Namespace) -> int:
    from msprobe.core.errors import MsprobeError
    from msprobe.core.fileio import check_path
    from msprobe.core.graph.service import GraphConfig, run_graph

    _check_reference_flags(args)
    target, golden = args.target_path, args.golden_path
    if args.input_path:
        if target or golden:
            raise MsprobeError("give either -i compare.json (legacy) or -tp/-gp, not both")
        target, golden = _legacy(args.input_path)
    if not target:
        raise MsprobeError("no input: pass -tp TARGET_DUMP_DIR [-gp GOLDEN_DUMP_DIR] (or the legacy -i compare.json)")
    target = check_path(target, "target path", "dir")
    if golden:
        golden = check_path(golden, "golden path", "dir")
    if args.jobs < 0:
        raise MsprobeError(f"-j/--jobs must be 0 (automatic) or a positive number, not {args.jobs}")
    if args.layer_mapping:
        check_path(args.layer_mapping, "layer-mapping yaml", "file")
    backend = None
    if getattr(args, "ray", None) is not None:
        from msprobe.core.executor import check_backend, ray_backend

        backend = ray_backend(args.ray)
        check_backend(backend)          # the Ray extra missing: one line now, before any work
    cfg = GraphConfig(
        target=target, golden=golden or None, output=args.output_path or "./output", layer_mapping=args.layer_mapping,
        overflow_check=args.overflow_check, fuzzy=args.fuzzy_match, complete_stack=args.complete_stack,
        db=args.db, jobs=args.jobs, framework=getattr(args, "framework", None),
        reference_colours=getattr(args, "reference_colours", False), backend=backend,
    )
    # stages read, match, write per graph: one INFO line each, a live display on a terminal (msprobe.core.progress)
    from msprobe.core.progress import Progress, display_wanted

    with Progress("graph", display=display_wanted(quiet=args.quiet)) as prog:
        res = run_graph(cfg, prog.job, exiting=getattr(args, "exiting", False))
    for u in res.units:
        where = " ".join(p for p in (u.unit.step_label, u.unit.rank_label) if p) or "graph"
        extra = f", {u.matched} matched pairs ({u.mode})" if u.mode else ""
        print(f"{where}: {u.nodes} nodes{extra}")
        v = getattr(u, "verdict", None)
        if v:
            if v["fail"]:
                print(f"{where}: msprobe verdict: {v['fail']} red (fail), {v['warn']} yellow (warn) nodes; the first "
                      f"error enters at {v['first_fail']}")
            else:
                print(f"{where}: msprobe verdict: no red node, {v['warn']} yellow; differences within "
                      f"{v['noise_label']} rounding")
    for path in res.outputs:
        print(f"written: {path}")
    print(f"done in {res.seconds:.1f} s; view with: tensorboard --logdir {os.path.dirname(res.outputs[0])}")
    for label, reason in res.failures:      # --ray: steps/ranks whose graph failed, left out
        print(f"graph {label}: FAILED: {reason}")
    if res.failures:
        print(f"graph: {len(res.failures)} of {len(res.failures) + len(res.units)} graphs failed; the others are "
              "written")
        return 1
    return 0
