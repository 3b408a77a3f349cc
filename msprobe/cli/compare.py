"""Compare a target (NPU) dump with a golden (bench) dump and write an .xlsx or .csv report.

Inputs: two dump.json (or debug.json) files, two rank dirs, two step dirs holding rank dirs (rank, rankN,
procN; ranks are paired by number and compared in parallel), two MindSpore dump roots with graph/ and
pynative/, or, with --rank/--step, two MindSpore kernel (static-graph) dump dirs.  The mode (statistics,
md5 or tensor) comes from the dumps; stack.json next to the target dump.json is picked up automatically.
-am/-cm/-dm/-lm pair rows across frameworks and models; the Match column says which rule paired each row.
"""

from __future__ import annotations

import argparse
import os
import sys

from msprobe.cli.options import add_quiet

# compare runs its own worker processes; BLAS thread pools inside each of them only oversubscribe the
# cores (tensor mode got several times slower).  Set before numpy is first imported.
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

EPILOG = """examples:
  msprobe compare -tp npu/step0 -gp gpu/step0 -o out            multi-rank, highlighted xlsx
  msprobe compare -tp npu/dump.json -gp gpu/dump.json --csv     one pair, csv report
  msprobe -f pytorch compare -i compare.json -o out -s          legacy syntax (compare.json holds
                                                                npu_path, bench_path, stack_path)
  msprobe compare -tp npu/step0 -gp gpu/step0 -o out -da        also find the first divergence across ranks
  msprobe compare -tp ms/dump.json -gp pt/dump.json -am -cm cells.yaml    MindSpore target vs PyTorch golden
  msprobe compare -tp ms_kernel -gp ms_kernel_gpu --rank 0 --step 1      MindSpore kernel dumps
"""


def add_arguments(p: argparse.ArgumentParser) -> None:
    io = p.add_argument_group("inputs and output")
    io.add_argument("-tp", "--target_path", help="target (NPU) dump.json, rank dir or step dir")
    io.add_argument("-gp", "--golden_path", help="golden (bench) dump.json, rank dir or step dir")
    io.add_argument("-i", "--input_path", help="legacy: compare.json with npu_path, bench_path[, stack_path, is_print_compare_log]")
    io.add_argument("-o", "--output_path", nargs="?", const="./output", default="./output",
                    help="output directory, created if missing (default ./output); reports are never overwritten")
    m = p.add_argument_group("matching")
    m.add_argument("-fm", "--fuzzy_match", "-f", dest="fuzzy_match", action="store_true",
                   help="fuzzy matching: ignore call numbers, pair the k-th occurrence of each API on both sides")
    m.add_argument("-am", "--api_mapping", nargs="?", const="", default=None, metavar="YAML",
                   help="MindSpore target vs PyTorch golden: map API names with the built-in table (Mint.* -> Torch.*, "
                        "ops.dense -> F.linear, ...); a yaml list of {ms_api, pt_api, ms_args, pt_args, ms_outputs, "
                        "pt_outputs} adds or overrides pairs and remaps argument / output indexes")
    m.add_argument("-cm", "--cell_mapping", nargs="?", const="", default=None, metavar="YAML",
                   help="match MindSpore Cells with PyTorch Modules (Cell.x.Dense -> Module.x.Dense); a yaml "
                        "{cell_path.Class: module_path.Class} renames paths and classes")
    m.add_argument("-dm", "--data_mapping", metavar="YAML",
                   help="explicit pairs: a yaml {target row name: golden row name}, e.g. parameters_grad rows; "
                        "wins over every other rule")
    m.add_argument("-lm", "--layer_mapping", nargs="?", const="", default=None, metavar="YAML",
                   help="translate layer names ({LayerClass: {target_child: golden_child}}) for modules and the APIs "
                        "under them (needs construct.json and stack.json); the pairs are saved as data_mapping_<ts>.yaml")
    k = p.add_argument_group("MindSpore kernel (static-graph) dumps")
    k.add_argument("--rank", default=None, metavar="R[,R...]",
                   help="compare MindSpore kernel dumps ({rank}/{net}/{graph}/{iter} dirs of .npy files or statistic.csv) "
                        "of these ranks; an empty value means all (legacy compare.json: rank_id)")
    k.add_argument("--step", default=None, metavar="S[,S...]",
                   help="kernel dumps: only these iterations (default all; legacy compare.json: step_id)")
    r = p.add_argument_group("report")
    r.add_argument("--csv", action="store_true", help="write .csv instead of .xlsx (same numbers)")
    r.add_argument("--xlsx", action="store_true",
                   help="write .xlsx (the default; accepted for the reference's 26.x command line, whose default is csv)")
    r.add_argument("--no-highlight", dest="no_highlight", action="store_true", help="do not colour suspicious rows")
    r.add_argument("-hl", "--highlight", action="store_true", help="colour suspicious rows (default; accepted for compatibility)")
    r.add_argument("-s", "--stack_mode", action="store_true",
                   help="show NPU_Stack_Info (default whenever stack.json is found; accepted for compatibility)")
    r.add_argument("-c", "--compare_only", action="store_true",
                   help="compare only: no advisor (by default the first failing row is named and explained, and "
                        "advisor_<ts>.txt is written next to the report)")
    r.add_argument("--no-match-column", dest="no_match_column", action="store_true",
                   help="leave out the final 'Match' column (how each row was matched) for tools that expect the reference's exact columns")
    a = p.add_argument_group("first-divergence analysis")
    a.add_argument("-da", "--diff_analyze", action="store_true",
                   help="find where the runs first part (before / during / after communication, across ranks) and rank "
                        "suspects by local error growth; writes compare_result_rank<N>_<ts>.json and diff_analyze_<ns>.json")
    a.add_argument("--noise-op", dest="noise_ops", action="append", default=[], metavar="NAME_PART",
                   help="-da: also skip APIs whose name contains NAME_PART (repeatable; added to the default noise list)")
    a.add_argument("--da-config", dest="da_config", metavar="YAML",
                   help="-da settings: noise_ops (list), default_noise (true/false), threshold or thresholds, top")
    a.add_argument("--top", type=int, default=None, help="-da: how many growth suspects to show per rank (default 5)")
    x = p.add_argument_group("execution")
    x.add_argument("-tensor_log", "--is_print_compare_log", dest="tensor_log", action="store_true",
                   help="tensor mode: log one line per compared tensor pair")
    x.add_argument("-j", "--jobs", type=int, default=0, help="parallel workers for ranks / tensor files (default: automatic)")
    x.add_argument("--ray", nargs="?", const="", default=None, metavar="ADDRESS",
                   help="spread the ranks (and chunks of big tensor ranks) over Ray: no ADDRESS starts a local instance, "
                        "'auto' or ray://host:port joins a cluster; needs pip install 'msprobe[ray]' (docs/scale.md)")
    add_quiet(x)
    ref = p.add_argument_group("reference 26.x options that msprobe refuses with a pointer (docs/compatibility.md)")
    ref.add_argument("-m", "--mode", default=None, metavar="MODE",
                     help="only 'auto' (the dump.json compare) is supported; the other modes are other tools")
    ref.add_argument("--consistent_check", action="store_true", help="veRL train-vs-infer check: not supported")
    ref.add_argument("--backend", default=None, help="with --consistent_check: not supported")
    ref.add_argument("--config", dest="tensor_config", default=None, metavar="YAML",
                     help="tensor post-processing yaml (matmul calibration): not supported")


#: the reference's compare modes (-m) other than auto, and what they are
OTHER_MODES = {
    "offline_data": "offline model data compare (ATB/CANN dump files)",
    "torchair": "torchair graph dump compare",
    "offline_model": "offline .om/.onnx model compare",
    "atb": "ATB model compare",
}


def check_reference_flags(args) -> None:
    """The reference's flags msprobe does not implement: one line each, naming what to use instead."""
    from msprobe.core.errors import MsprobeError

    if args.mode is not None and args.mode != "auto":
        what = OTHER_MODES.get(args.mode)
        if what is None:
            raise MsprobeError(f"-m/--mode {args.mode!r} is not a compare mode; the reference's modes are auto, "
                               f"{', '.join(OTHER_MODES)}, and msprobe implements auto (the default): drop -m")
        raise MsprobeError(f"-m/--mode {args.mode} ({what}) is not supported by msprobe; msprobe compares "
                           f"PrecisionDebugger dumps (-m auto, the default): drop -m")
    if args.consistent_check or args.backend is not None:
        raise MsprobeError("--consistent_check/--backend (veRL training-vs-inference consistency check) is not "
                           "supported by msprobe; compare the two dumps directly with -tp/-gp")
    if args.tensor_config is not None:
        raise MsprobeError("--config (tensor post-processing yaml, e.g. matmul calibration) is not supported by "
                           "msprobe compare; compare the recorded tensors as they are (drop --config), or map "
                           "rows with -dm/-am/-cm/-lm")
    if args.xlsx and args.csv:
        raise MsprobeError("--xlsx and --csv contradict each other; give one (xlsx is the default)")


def _legacy_config(path: str):
    """compare.json -> (npu_path, bench_path, stack_path, print_log)."""
    from msprobe.core.errors import MsprobeError
    from msprobe.core.fileio import load_json

    obj = load_json(path, "compare.json", remedy="correct the file at that position; it looks like "
                    '{"npu_path": "...", "bench_path": "...", "stack_path": "...", "is_print_compare_log": true}',
                    empty_remedy='write {"npu_path": "...", "bench_path": "..."} into it')
    if not isinstance(obj, dict):
        raise MsprobeError(f"compare.json {path} must be a JSON object with npu_path and bench_path")
    for key in ("npu_path", "bench_path"):
        if not obj.get(key):
            raise MsprobeError(f"compare.json {path} has no {key!r}; add the path of the {'target' if key == 'npu_path' else 'golden'} dump")
        if not isinstance(obj[key], str):
            raise MsprobeError(f"compare.json {path}: {key!r} is {type(obj[key]).__name__} {str(obj[key])[:80]}, "
                               f"expected a path (a string); correct the file")
    for key in ("common", "map_dict"):
        if key in obj:
            raise MsprobeError(f"compare.json {path}: {key!r} (MindSpore mirror-directory npy compare) is not supported; remove it")
    log_flag = obj.get("is_print_compare_log", True)
    if not isinstance(log_flag, bool):
        raise MsprobeError(f"compare.json {path}: is_print_compare_log must be true or false, not {log_flag!r}")
    stack = obj.get("stack_path")
    if stack is not None and not isinstance(stack, str):
        raise MsprobeError(f"compare.json {path}: stack_path must be a path string")
    kernel = None
    if "rank_id" in obj or "step_id" in obj:
        from msprobe.core.compare.kernel import parse_id_list

        kernel = (parse_id_list(obj.get("rank_id") or [], f"compare.json {path}: rank_id"),
                  parse_id_list(obj.get("step_id") or [], f"compare.json {path}: step_id"))
    return obj["npu_path"], obj["bench_path"], stack, log_flag, kernel


def run(args) -> int:
    from msprobe.core.compare.config import CompareConfig
    from msprobe.core.compare.runner import run_compare
    from msprobe.core.errors import MsprobeError

    check_reference_flags(args)
    stack_path = None
    kernel = None
    tensor_log = args.tensor_log
    if args.input_path:
        if args.target_path or args.golden_path:
            raise MsprobeError("give either -i compare.json or -tp/-gp, not both")
        target, golden, stack_path, tensor_log, kernel = _legacy_config(args.input_path)
        tensor_log = tensor_log or args.tensor_log
    else:
        if not (args.target_path and args.golden_path):
            raise MsprobeError("give both -tp TARGET and -gp GOLDEN (or the legacy -i compare.json)")
        target, golden = args.target_path, args.golden_path
    if args.jobs < 0:
        raise MsprobeError(f"-j/--jobs must be 0 (automatic) or a positive number, not {args.jobs}")
    if args.rank is not None or args.step is not None:
        from msprobe.core.compare.kernel import parse_id_list

        kernel = (parse_id_list(args.rank or "", "--rank"), parse_id_list(args.step or "", "--step"))
    backend = None
    if getattr(args, "ray", None) is not None:
        from msprobe.core.executor import check_backend, ray_backend

        if kernel is not None:
            raise MsprobeError("--ray spreads dump.json compares (statistics, md5, tensor); the kernel dump compare "
                               "(--rank/--step, rank_id/step_id) runs without it")
        backend = ray_backend(args.ray)
        check_backend(backend)          # the Ray extra missing: one line now, before any work
    if kernel is not None:
        return _kernel(args, target, golden, kernel)
    if args.highlight and args.no_highlight:
        raise MsprobeError("-hl and --no-highlight contradict each other; give one")
    if (args.noise_ops or args.da_config or args.top is not None) and not args.diff_analyze:
        raise MsprobeError("--noise-op, --da-config and --top belong to the first-divergence analysis; add -da")
    from msprobe.core.advisor.config import build_config

    acfg = build_config(advisor=not args.compare_only, diff_analyze=args.diff_analyze, noise_ops=args.noise_ops,
                        yaml_path=args.da_config, top=args.top, output_dir=args.output_path or "./output")
    from msprobe.core.compare.mapping import MappingOptions, load_mappings

    mappings = MappingOptions(api_mapping=args.api_mapping, cell_mapping=args.cell_mapping,
                              data_mapping=args.data_mapping, layer_mapping=args.layer_mapping)
    if mappings.any:
        load_mappings(mappings)  # bad yaml: one line now, before any work
    cfg = CompareConfig(
        mappings=mappings,
        target=target, golden=golden, output_dir=args.output_path or "./output", fuzzy=args.fuzzy_match,
        highlight=not args.no_highlight, fmt="csv" if args.csv else "xlsx", stack_path=stack_path,
        tensor_log=tensor_log, jobs=args.jobs, framework=args.framework, match_column=not args.no_match_column,
        progress=not args.quiet, backend=backend,
    )
    if acfg.diff_analyze:  # refuse before any work (no report is written for a run -da cannot analyse)
        from msprobe.core.advisor.diff_analyze import check_rank_labels
        from msprobe.core.compare.runner import plan

        check_rank_labels([job.label for job in plan(cfg)])
    # .pt files the fast reader cannot decode (legacy format) are retried with torch, imported lazily
    from msprobe.pytorch.tensor_io import install_fallback

    install_fallback()
    # stages (read, match, metrics, write) with counts and times: one INFO line each, and a live display on a
    # terminal (msprobe.core.progress; MSPROBE_PROGRESS=1/0 forces it on/off, -q turns it off)
    from msprobe.core.progress import Progress, display_wanted

    with Progress("compare", display=display_wanted(quiet=not cfg.progress)) as prog:
        # the advisor file of each report is written with it (both appear together, docs/reliability.md)
        failures = [] if backend else None     # --ray: a failing rank is recorded, the others go on
        results = run_compare(cfg, progress_factory=prog.job, advisor=acfg.advisor,
                              keep_tables=acfg.diff_analyze, failures=failures)  # -da reads the whole tables
    _summary(results)
    for fail in failures or ():
        print(f"compare {fail.label}: FAILED: {fail.reason}")
    if failures and acfg.diff_analyze:
        raise MsprobeError(f"-da needs every rank; {len(failures)} rank(s) failed (see above): fix them and run again")
    _analysis(results, acfg)
    _banner()
    if failures:
        print(f"compare: {len(failures)} of {len(failures) + len(results)} ranks failed; the reports of the others "
              f"are written", file=sys.stderr)
        return 1
    return 0


def _kernel(args, target: str, golden: str, kernel) -> int:
    """MindSpore static-graph kernel dumps: one report per (rank, step)."""
    from msprobe.core.compare.kernel import run_kernel_compare
    from msprobe.core.errors import MsprobeError

    for path, side in ((target, "target"), (golden, "golden")):
        if os.path.isfile(path):
            raise MsprobeError(f"--rank/--step (rank_id/step_id) compare MindSpore kernel dump directories, but the "
                               f"{side} path {path} is a file; pass the dump directories")
    if args.fuzzy_match or args.api_mapping is not None or args.cell_mapping is not None \
            or args.data_mapping is not None or args.layer_mapping is not None or args.diff_analyze:
        raise MsprobeError("kernel dump compare (--rank/--step) pairs kernels by name; -fm, -am, -cm, -dm, -lm and -da "
                           "do not apply to it")
    ranks, steps = kernel
    written = run_kernel_compare(target, golden, args.output_path or "./output", ranks, steps,
                                 fmt="csv" if args.csv else "xlsx")
    for job, path, n in written:
        print(f"kernel compare rank {job.rank} step {job.step}: {job.mode} mode, {n} rows -> {path}")
    _banner()
    return 0


def _analysis(results, acfg) -> None:
    """Advisor (unless -c) and -da on the report tables in memory, after the reports are written."""
    if not (acfg.advisor or acfg.diff_analyze) or not results:
        return
    out = sys.stdout
    out_dir = os.path.dirname(os.path.abspath(results[0].path))
    if acfg.advisor:
        from msprobe.core.advisor.advisor import advise, summary_lines, write_advice

        for res in results:
            advice = res.advice if getattr(res, "advice", None) is not None else advise(res.report, label=res.label)
            path = getattr(res, "advisor_path", "") or write_advice(advice, out_dir, res.label)
            for line in summary_lines(advice, res.label):
                print(line, file=out)
            print(f"  advisor: {path}", file=out)
    if acfg.diff_analyze:
        from msprobe.core.advisor.diff_analyze import RankInput, analyze

        ranks = [RankInput(r.report, r.label, r.target_json, r.golden_json) for r in results]
        found = analyze(ranks, acfg, out_dir)
        for line in found.summary_lines(acfg.top):
            print(line, file=out)
        print(f"  per-rank diff checks: {', '.join(found.per_rank_files)}", file=out)


MOSTLY_UNMATCHED = 0.5  # warn when more than this share of the target rows found no golden row


def _summary(results) -> None:
    """Per report: counts by verdict (red = FAIL, yellow = WARN, see docs/compare.md "Rule set"), the first
    red row and why, the worst ops, and a warning when most rows found no counterpart."""
    out = sys.stdout
    for res in results:
        for line in summary_lines(res.report, getattr(res, "out_sub", ""), res.label, res.seconds):
            print(line, file=out)
        print(f"  report: {res.path}", file=out)


def summary_lines(rep, out_sub: str = "", label: str = "", seconds: float = 0.0) -> list:
    """The console summary of one report (without the report path)."""
    from msprobe.core.compare import verdict as vd

    lines = []
    tag = " ".join(x for x in (out_sub or "", label or "") if x)
    tag = f" {tag}" if tag else ""
    unmatched = rep.rows - rep.matched
    lines.append(f"compare{tag}: {rep.mode} mode, {rep.rows} rows, {rep.matched} matched, {unmatched} unmatched")
    if rep.rows and unmatched > MOSTLY_UNMATCHED * rep.rows:
        lines.append(f"  WARNING: {unmatched} of {rep.rows} target rows ({unmatched / rep.rows:.0%}) have no golden "
                     f"counterpart: the dumps look like different models, steps or frameworks. Check -tp/-gp; for "
                     f"renamed APIs or modules try -fm (fuzzy match), -am/-cm (MindSpore vs PyTorch) or -lm (layer mapping)")
    c = vd.counts(rep.verdict)
    compared = rep.rows - c[vd.NOT_COMPARED]
    lines.append(f"  red: {c[vd.FAIL]}  yellow: {c[vd.WARN]}  within noise: {c[vd.NOISE]}  equal: {c[vd.PASS]}  "
                 f"not compared: {c[vd.NOT_COMPARED]}  ({seconds:.2f} s)")
    if rep.mode == "tensor" and "Accuracy Reached or Not" in rep.header:
        n_ref = sum(1 for x in rep.columns[rep.header.index("Accuracy Reached or Not")] if x == "No")
        if n_ref:
            lines.append(f"  {n_ref} rows below the reference's accuracy bar (Accuracy No); the verdict judges them "
                         f"against dtype rounding (see Err_message)")
    elif rep.mode == "md5" and "Result" in rep.header:
        col = rep.columns[rep.header.index("Result")]
        n_diff = sum(1 for x in col if x.startswith("Different"))
        n_noise = sum(1 for x in col if x != "Different" and x.startswith("Different"))
        if n_diff:
            lines.append(f"  {n_diff} rows differ in CRC32, {n_noise} of them within rounding by their statistics "
                         f"(Result 'Different (within noise)')")
    lab = vd.noise_label(rep.unit, rep.verdict) if rep.unit is not None and rep.verdict is not None else "dtype"
    if compared == 0:
        lines.append("  no row could be compared")
    elif c[vd.FAIL] == 0 and c[vd.WARN] == 0:
        lines.append(f"  no culprit: all {compared} compared rows agree within {lab} rounding"
                     if c[vd.NOISE] else f"  no culprit: all {compared} compared rows are equal")
    elif c[vd.FAIL] == 0:
        lines.append(f"  no culprit: no compared row introduces an error beyond {lab} rounding; "
                     f"{c[vd.WARN]} rows differ beyond it (inherited or not attributable)")
    if rep.first_red:
        row, name = rep.first_red
        why = rep.why[row] if rep.why else ""
        lines.append(f"  first red row: {name} (report row {row + 2}): {why}")
    if rep.worst:
        lines.append("  worst ops (red first, then yellow; error = |target - golden| of the named statistic over the "
                     "tensor's magnitude max(|max|, |min|), L2 norm relative):")
        for i, (name, why) in enumerate(rep.worst, 1):
            lines.append(f"    {i}. {name}: {why}")
    return lines


def _banner() -> None:
    out = sys.stdout
    text = "msprobe compare ends successfully."
    width = len(text) + 50
    print("*" * width, file=out)
    print("*" + text.center(width - 2) + "*", file=out)
    print("*" * width, file=out)
