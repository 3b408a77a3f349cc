"""Benchmark of `msprobe graph` (build one dump, compare two) against mindstudio-probe 8.3.3.

    .venv/bin/python benchmarks/graph_bench.py [--nodes 100000] [--repeat 1] [--skip-reference]
                                              [--only build|compare] [--no-write] [--keep-outputs]
    .venv/bin/python benchmarks/graph_bench.py --scale [200000]     # ours only: build a 200,000-node graph

Inputs come from benchmarks/gen_graph_inputs.py (``bench_work/graph/<nodes>/``, generated on first use in a
child process, then reused).  Timed commands, each in a fresh subprocess with a fresh empty output dir:

* 8.3.3:      ``$MSPROBE_REF8/bin/msprobe -f pytorch graph -i in.json -o OUT``
              (default venv $MSPROBE_REF_CACHE/venv833, cache default ~/.cache/msprobe-ref; in.json:
              ``npu_path``, for compare ``bench_path``, ``is_print_compare_log: false``) -> .vis.db
* ours json:  ``.venv/bin/msprobe graph -tp TARGET [-gp GOLDEN] -o OUT``        -> .vis (JSON)
* ours db:    ``.venv/bin/msprobe graph -tp TARGET [-gp GOLDEN] -o OUT --db``   -> .vis.db (SQLite)

TARGET / GOLDEN are the rank dirs (``.../step0/rank0``).  Before the runs the inputs are read once (page
cache warm for every tool); each command then runs ``--repeat`` times, best wall time and largest memory
kept.  Memory covers the whole process tree: ``RSS max`` = GNU time's %M (ru_maxrss: the largest single
process, waited-for workers included, not a sum), ``PSS sum`` = the sum of ``Pss`` over all live processes of
the tree sampled every 50 ms (shared pages counted once), ``RSS sum`` the same with ``VmRSS``; peak MB =
max(RSS max, PSS sum).  A run must exit 0 and write its output file, else it is listed as a failure (exit
status 2).  Node counts are read from the output (``tb_nodes`` rows per data_source in a .vis.db, ``node``
entries in a .vis) and checked against what the inputs give the reference (``expected_ref_db_nodes``).

Goals (per case, ours json and ours db against 8.3.3): >= 5x faster, <= 0.5x peak memory.  Results are
printed and written to benchmarks/graph_results.md (the ``--scale`` run fills its own section of that file
and leaves the other one as it was).  Exit status 0 when every measured goal passes, 1 when one fails,
2 when a run fails.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shlex
import shutil
import sqlite3
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import RunError, machine_line, peak, shown as rel, show_cmd as show  # noqa: E402
from refvenv import portable, ref_venv_or_missing as cached_ref_venv  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "graph_results.md"
REF8, OURS_JSON, OURS_DB = "8.3.3 (.vis.db)", "ours json (.vis)", "ours --db (.vis.db)"
REF8_SETUP = ('python3 -m venv "$MSPROBE_REF_CACHE/venv833" && "$MSPROBE_REF_CACHE/venv833/bin/pip" install '
              'torch==2.13.0 "numpy<2" "pandas<2.1" mindstudio-probe==8.3.3')
GOAL_SPEED, GOAL_MEM = 5.0, 0.5


# ---------------------------------------------------------------------------------------------------------------------
# measurement (benchmarks/harness.py)
# ---------------------------------------------------------------------------------------------------------------------

def run_once(cmd: list, out_dir: Path, pattern: str, log: Path, env: dict) -> dict:
    """Run ``cmd`` (``{out}`` replaced by a fresh empty ``out_dir``); wall seconds, memory and the output file."""
    out_dir.mkdir(parents=True)
    cmd = [str(out_dir) if c == "{out}" else c for c in cmd]
    r = harness.run(cmd, env=env, cwd=out_dir.parent, log=log, echo=True, sample=0.05)
    if not r.ok:
        raise RunError(r.failure(log, 2500))
    outputs = sorted(p for p in out_dir.rglob(pattern) if p.is_file() and p.stat().st_size > 0)
    if not outputs:
        found = ", ".join(sorted(p.name for p in out_dir.rglob("*"))) or "nothing"
        raise RunError(f"exit status 0 but no {pattern} file under {out_dir} (found: {found}): {shlex.join(cmd)}")
    return {"run": r, "output": outputs[0], "out_mb": outputs[0].stat().st_size / 1e6}


def count_nodes(path: Path) -> dict:
    """{data source: nodes} of a .vis.db (tb_nodes rows) or a .vis JSON (node entries)."""
    if path.name.endswith(".db"):
        con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        try:
            got = dict(con.execute("select data_source, count(*) from tb_nodes group by 1").fetchall())
            return {str(k): got[k] for k in sorted(got, key=lambda k: (k != "NPU", str(k)))}
        finally:
            con.close()
    with open(path, "rb") as f:
        d = json.load(f)
    if isinstance(d.get("node"), dict):
        return {"NPU": len(d["node"])}
    return {side: len(d[side]["node"]) for side in ("NPU", "Bench") if isinstance(d.get(side), dict)
            and isinstance(d[side].get("node"), dict)}


def warm_cache(dirs) -> None:
    for d in dirs:
        for f in sorted(Path(d).glob("*.json")):
            with open(f, "rb") as fh:
                while fh.read(1 << 24):
                    pass


# ---------------------------------------------------------------------------------------------------------------------

def ensure_inputs(nodes: int, seed: int) -> dict:
    """Generate (or reuse) the pair in a child process: this runner stays small."""
    r = subprocess.run([sys.executable, str(Path(__file__).resolve().parent / "gen_graph_inputs.py"), "--nodes",
                        str(nodes), "--seed", str(seed), "--json"], check=True, stdout=subprocess.PIPE, text=True)
    return json.loads(r.stdout.strip().splitlines()[-1])


def _shown_param(path: Path) -> dict:
    """The reference's -i json as the report shows it: paths relative to the repository (or portable)."""
    return {k: rel(v) if isinstance(v, str) else v for k, v in json.loads(path.read_text()).items()}


def fmt_x(x) -> str:
    return "-" if x is None else f"{x:.2f}x"


def update_results(path: Path, section: str, text: str) -> None:
    """Write ``text`` as the ``section`` (main / scale) of the results file, keeping the other section."""
    harness.write_section(path, text.rstrip() + "\n", f"<!-- graph_bench:{section} -->",
                          f"<!-- /graph_bench:{section} -->", title="# msprobe graph benchmark")


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, default=100000, help="graph nodes per side of the generated pair")
    ap.add_argument("--repeat", type=int, default=1, help="timed runs per command (best time, largest memory)")
    ap.add_argument("--skip-reference", action="store_true", help="run ours only")
    ap.add_argument("--only", choices=("build", "compare"), help="run one case only")
    ap.add_argument("--scale", type=int, nargs="?", const=200000, default=None, metavar="N",
                    help="ours only: build an N-node graph (default 200000), json and --db")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-write", action="store_true", help=f"do not write {rel(RESULTS)}")
    ap.add_argument("--keep-outputs", action="store_true", help="keep the output dirs (bench_work/graph/runs/)")
    ap.add_argument("--results", default=str(RESULTS))
    a = ap.parse_args(argv)

    scale = a.scale is not None
    nodes = a.scale if scale else a.nodes
    started = datetime.datetime.now().astimezone()
    machine = machine_line()
    print(f"[graph-bench] {machine}", flush=True)
    gen = ensure_inputs(nodes, a.seed)
    info = gen["info"]
    base = Path(gen["dir"])
    tgt, gld = base / "target" / "step0" / "rank0", base / "golden" / "step0" / "rank0"
    expected = info.get("expected_ref_db_nodes")
    print(f"[graph-bench] inputs {rel(base)}: {info.get('graph_nodes'):,} graph nodes per side (construct keys "
          f"{info.get('construct_keys'):,} + parameters_grad {info.get('parameters_grad'):,}), reference graph "
          f"{expected:,} nodes, dump.json {info.get('dump_json_mb')} MB", flush=True)

    notes: list = []
    use_ref = not (a.skip_reference or scale)
    # built on demand (benchmarks/refvenv.py) only when the reference runs
    ref_venv = cached_ref_venv("venv833", "MSPROBE_REF8") if use_ref else None
    ref_exe = ref_venv / "bin" / "msprobe" if use_ref else None
    if scale:
        notes.append("scale mode: ours only, build only")
    elif a.skip_reference:
        notes.append("8.3.3: skipped (--skip-reference)")
    elif not (ref_exe.is_file() and os.access(ref_exe, os.X_OK)):
        use_ref = False
        notes.append(f"8.3.3: skipped, no reference venv at {portable(ref_venv)} (set MSPROBE_REF8, or recreate it: "
                     f"`{REF8_SETUP}`, see benchmarks/README.md)")
    for n in notes:
        print(f"[graph-bench] {n}", flush=True)

    runs_root = ROOT / "bench_work" / "graph" / "runs"
    runs_root.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f"{started.strftime('%Y%m%d-%H%M%S')}-", dir=runs_root))
    env_ours = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env_ours["PYTHONPATH"] = str(ROOT)  # the checkout, whatever is installed
    env_ref = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # never shadow the reference's package
    ours_exe = str(ROOT / ".venv" / "bin" / "msprobe")
    if not os.access(ours_exe, os.X_OK):
        ours_exe = shutil.which("msprobe") or ours_exe

    cases = ["build"] if scale else [c for c in ("build", "compare") if a.only in (None, c)]
    plan = []  # (case, tool, cmd, pattern, env)
    shown = {"{out}": "OUT"}  # placeholders of the commands as the report shows them
    for case in cases:
        if use_ref:
            inp = work / f"ref8_{case}.json"
            param = {"npu_path": str(tgt)}
            if case == "compare":
                param["bench_path"] = str(gld)
            param["is_print_compare_log"] = False
            inp.write_text(json.dumps(param, indent=1))
            plan.append((case, REF8, [str(ref_exe), "-f", "pytorch", "graph", "-i", str(inp), "-o", "{out}"],
                         "*.vis.db", env_ref))
            shown[str(inp)] = f"{case}.json"
        ours = [ours_exe, "graph", "-tp", str(tgt)] + (["-gp", str(gld)] if case == "compare" else []) + ["-o", "{out}"]
        plan.append((case, OURS_JSON, ours, "*.vis", env_ours))
        plan.append((case, OURS_DB, ours + ["--db"], "*.vis.db", env_ours))

    warm_cache([tgt] + ([gld] if "compare" in cases else []))
    results: dict = {}
    failures: list = []
    checks: list = []
    for case, tool, cmd, pattern, env in plan:
        slug = f"{case}_{tool.split()[0]}{'_db' if '--db' in tool else ''}".replace(".", "")
        print(f"[graph-bench] {case:7s} {tool:20s} x{a.repeat} ...", end=" ", flush=True)
        runs = []
        try:
            for i in range(max(1, a.repeat)):
                runs.append(run_once(cmd, work / f"{slug}_{i}", pattern, work / f"{slug}_{i}.log", env))
        except RunError as e:
            print("FAILED", flush=True)
            failures.append(f"{case} / {tool}: {e}")
            print(f"[graph-bench] {e}", file=sys.stderr, flush=True)
            continue
        r = harness.summary([x["run"] for x in runs])
        r.update(next(x for x in runs if x["run"] is r["best"]))
        try:
            r["nodes"] = count_nodes(r["output"])
        except Exception as e:  # noqa: BLE001 - an unreadable output is reported, not fatal
            r["nodes"] = {}
            failures.append(f"{case} / {tool}: could not count the nodes of {r['output']}: {type(e).__name__}: {e}")
        results[(case, tool)] = r
        print(f"{r['secs']:8.2f} s (runs: {', '.join(f'{s:.2f}' for s in r['all_secs'])})  RSS max "
              f"{r['rss_mb']:6.0f} MB  PSS sum {r['pss_mb']:6.0f} MB  procs {r['procs']}  nodes "
              f"{', '.join(f'{k} {v:,}' for k, v in r['nodes'].items()) or '?'}  output {r['out_mb']:.0f} MB",
              flush=True)
        want = {"NPU": expected} if case == "build" else {"NPU": expected, "Bench": expected}
        got = {k: r["nodes"].get(k) for k in want}
        checks.append(f"{case} / {tool}: nodes {', '.join(f'{k} {v:,}' if v is not None else f'{k} ?' for k, v in got.items())}"
                      f" -> {'as expected' if got == want else f'DIFFERENT from the expected {expected:,} per side'}")

    # --- table ---
    def ref_of(case):
        return results.get((case, REF8))

    lines = ["| case | tool | wall s (best) | runs | peak MB | RSS max MB | PSS sum MB | RSS sum MB | procs | nodes "
             "| output MB | speed-up vs 8.3.3 | peak vs 8.3.3 |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|"]
    for case in cases:
        for tool in (REF8, OURS_JSON, OURS_DB):
            r = results.get((case, tool))
            if r is None:
                if any(f.startswith(f"{case} / {tool}:") for f in failures):
                    lines.append(f"| {case} | {tool} | FAILED | - | - | - | - | - | - | - | - | - | - |")
                continue
            ref = ref_of(case)
            sp = rr = None
            if ref is not None and tool != REF8:
                sp, rr = ref["secs"] / r["secs"], peak(r) / peak(ref)
            nodes_s = " / ".join(f"{v:,}" for v in r["nodes"].values()) or "?"
            lines.append(f"| {case} | {tool} | {r['secs']:.2f} | {r['n']} | {peak(r):.0f} | {r['rss_mb']:.0f} | "
                         f"{r['pss_mb']:.0f} | {r['rss_sum_mb']:.0f} | {r['procs']} | {nodes_s} | {r['out_mb']:.0f} | "
                         f"{fmt_x(sp)} | {'-' if rr is None else f'{rr:.2f}'} |")
    table = "\n".join(lines)

    # --- goals ---
    goals = []
    if not scale:
        for case in cases:
            for tool in (OURS_JSON, OURS_DB):
                name = f"{case}, {tool}: >= {GOAL_SPEED:g}x faster than 8.3.3, <= {GOAL_MEM:g}x its peak memory"
                o, ref = results.get((case, tool)), ref_of(case)
                if o is None or ref is None:
                    why = "our run failed" if o is None and use_ref else (
                        "the reference run failed" if use_ref else "reference not run")
                    goals.append((name, "n/a", why))
                    continue
                sp, rr = ref["secs"] / o["secs"], peak(o) / peak(ref)
                goals.append((name, "PASS" if (sp >= GOAL_SPEED and rr <= GOAL_MEM) else "FAIL",
                              f"speed {sp:.2f}x ({'PASS' if sp >= GOAL_SPEED else 'FAIL'}; {o['secs']:.2f} s vs "
                              f"{ref['secs']:.2f} s), peak {peak(o):.0f} vs {peak(ref):.0f} MB = {rr:.2f} "
                              f"({'PASS' if rr <= GOAL_MEM else 'FAIL'})"))
    else:
        for tool in (OURS_JSON, OURS_DB):
            o = results.get(("build", tool))
            name = f"scale: {tool} builds a {info.get('graph_nodes'):,}-node graph"
            goals.append((name, "PASS" if o is not None else "FAIL",
                          f"{o['secs']:.2f} s, peak {peak(o):.0f} MB" if o is not None else "run failed"))

    if results:
        worst = max(results.values(), key=lambda r: r["sampler_cpu"])
        checks.append(f"memory sampler overhead: at most {100 * worst['sampler_cpu']:.1f}% of one core")

    cmd_lines = [f"- {case} / {tool}{'' if (case, tool) in results else ' (failed)'}: "
                 f"`{show([shown.get(c, c) for c in cmd])}`" for case, tool, cmd, _, _ in plan]
    ref_inputs = [f"- `{case}.json` (8.3.3 `-i`): `{json.dumps(_shown_param(work / f'ref8_{case}.json'))}`"
                  for case in cases if use_ref]
    me = [rel(sys.executable), "benchmarks/graph_bench.py", *argv]
    title = (f"## Scale: ours builds {info.get('graph_nodes'):,} nodes" if scale
             else f"## Build and compare, {info.get('graph_nodes'):,} nodes per side")
    text = "\n".join([
        title,
        "",
        f"Date: {started.strftime('%Y-%m-%d %H:%M %Z')}  ",
        f"Machine: {machine}  ",
        f"Runner: `{shlex.join(me)}`",
        "",
        f"Inputs (`benchmarks/gen_graph_inputs.py`): `{rel(tgt)}` (+ golden), 8.3.3 PyTorch statistics dump, level "
        f"mix: {info.get('layers')} decoder layers, {info.get('construct_keys'):,} construct.json keys + "
        f"{info.get('parameters_grad'):,} parameters_grad = {info.get('graph_nodes'):,} graph nodes per side "
        f"({expected:,} in the reference's graph with the root and {info.get('apis_between_modules')} "
        f"Apis_Between_Modules node), {info.get('tensor_rows'):,} tensor statistics, dump.json "
        f"{info.get('dump_json_mb')} MB; target = golden with noise, {info.get('bad_apis')} APIs with large "
        f"errors, a few inf/NaN.",
        "",
        "Method: every run in a fresh subprocess with a fresh empty output dir, inputs read once before (warm page "
        "cache); best wall time of the runs, largest memory. Memory is taken over the whole process tree: "
        "`RSS max` = GNU time %M (ru_maxrss: the largest single process, waited-for workers included, not a sum), "
        "`PSS sum` / `RSS sum` = sum of Pss / VmRSS over all live processes of the tree, sampled every 50 ms; "
        "`peak MB` = max(RSS max, PSS sum); `procs` = most processes alive at once. Speed-up = 8.3.3 s / ours s; "
        "peak ratio = ours / 8.3.3. Nodes: tb_nodes rows per data_source (NPU / Bench) of a .vis.db, `node` "
        "entries of a .vis.",
        "",
        *harness.report_block(table, goals, checks, [
            f.splitlines()[0] + (f" (last log line: `{f.strip().splitlines()[-1].strip()}`)"
                                 if len(f.strip().splitlines()) > 2 else "") for f in failures], notes),
        "",
        "Commands, from the repository root (`OUT` = a fresh empty dir for every run):",
        "",
        *cmd_lines,
        *ref_inputs,
        "",
    ])
    print()
    print(text)
    if not a.no_write:
        update_results(Path(a.results), "scale" if scale else "main", text)
        print(f"[graph-bench] wrote {rel(a.results)}")
    if a.keep_outputs:
        print(f"[graph-bench] outputs and logs kept in {rel(work)}")
    else:  # the outputs are big (the reference's .vis.db: 135 MB at 100k nodes); the logs stay
        harness.remove_subdirs(work)
        print(f"[graph-bench] logs in {rel(work)}")
    return harness.exit_status(failures, [v for _, v, _ in goals], "[graph-bench] FAILED runs:")


if __name__ == "__main__":
    sys.exit(main())
