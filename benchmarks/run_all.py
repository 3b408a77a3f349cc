"""`make bench`: msprobe compare against the reference tools (mindstudio-probe 8.3.3 and 26.2.0).

    .venv/bin/python benchmarks/run_all.py [--work-dir bench_work] [--cases tiny,stat,tensor]
                                           [--repeat-small 3] [--repeat-big 3] [--repeat-ref-big 2]
                                           [--no-refs] [--no-write] [--keep-outputs]

Inputs come from benchmarks/gen_inputs.py (generated on first use, then reused).  Every command runs in a
fresh subprocess with a fresh, empty output directory: once untimed (so that page cache is warm for every
tool: the inputs and the tool's own installed files), then N timed runs: the best (lowest) wall time is
kept, and the largest memory figures over the N runs.

Memory is measured two ways, for the whole process tree (the reference tools and ours may fork workers):

* ``RSS max``  -- ``ru_maxrss`` of the command (GNU ``time -f %M``, or ``os.wait4`` without GNU time): the
  largest resident set of the command or any descendant it waited for (a maximum over processes, not a sum);
* ``PSS sum``  -- sampled every 20 ms (or 30x the cost of a sample if longer): the sum over all live processes
  of the tree of their proportional set size (``/proc/PID/smaps_rollup``), i.e. the memory the command holds
  at once with shared pages (forked workers, shared libraries) counted once.  Sampling can miss short peaks.

The goals compare ``peak MB = max(RSS max, PSS sum)``: at least the biggest single process, and at least the
whole tree when workers run side by side.

The reference tools run from scratch venvs given by MSPROBE_REF8 / MSPROBE_REF26 (default venv833 and
venv2620 under $MSPROBE_REF_CACHE, cache default ~/.cache/msprobe-ref; see benchmarks/README.md).  A missing
venv skips its rows with a note.  The results table is printed and written to benchmarks/results.md (unless --no-write).  Exit status 0 when every measured goal
passes, 1 when one fails, 2 when a run fails or writes no report.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import RunError, machine_line, peak  # noqa: E402
import refvenv  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_WORK = ROOT / "bench_work"
OURS_XLSX, OURS_CSV = "ours xlsx (highlight)", "ours csv"
REF8_XLSX, REF26_CSV = "8.3.3 xlsx -s -hl", "26.2.0 csv"


# ---------------------------------------------------------------------------------------------------------------------
# one command, measured by benchmarks/harness.py
# ---------------------------------------------------------------------------------------------------------------------

def run_once(cmd: list, out_dir: Path, log: Path, env: dict) -> dict:
    """Run ``cmd`` in a fresh process with a fresh empty ``out_dir``; return wall seconds, memory and the reports
    (RSS max through GNU time, PSS sum sampled every 20 ms: benchmarks/harness.py)."""
    if out_dir.exists():
        shutil.rmtree(out_dir)
    out_dir.mkdir(parents=True)
    r = harness.run(cmd, env=env, cwd=out_dir.parent, log=log, sample=0.02)
    if not r.ok:
        raise RunError(r.failure(log))
    reports = sorted(p for p in out_dir.rglob("compare_result*") if p.suffix in (".xlsx", ".csv"))
    if not reports:
        raise RunError(f"no compare_result*.xlsx/.csv written under {out_dir} by: {shlex.join(cmd)}")
    return {"run": r, "reports": reports}


def measure(cmd: list, out_dir: Path, log: Path, env: dict, repeat: int, warmup: bool = True) -> dict:
    runs = harness.repeat(lambda: run_once(cmd, out_dir, log, env), repeat, warmup=int(warmup))
    return dict(harness.summary([x["run"] for x in runs]), reports=runs[-1]["reports"])


# ---------------------------------------------------------------------------------------------------------------------
# report checks
# ---------------------------------------------------------------------------------------------------------------------

RED, YELLOW = "FF0000", "FFFF00"  # last 6 hex digits of the fill colour (8.3.3 stores yellow as 00FFFF00)


def xlsx_scan(path: Path) -> dict:
    """Data rows of the first sheet, and how many of them are filled red / yellow (fill of the first cell)."""
    import openpyxl

    wb = openpyxl.load_workbook(path, read_only=True)
    try:
        ws = wb.worksheets[0]
        n = red = yellow = 0
        for row in ws.iter_rows(min_row=2):
            if not any(c.value not in (None, "") for c in row):
                continue
            n += 1
            f = row[0].fill
            rgb = f.fgColor.rgb if (f is not None and f.fill_type and f.fgColor is not None) else None
            rgb = rgb[-6:].upper() if isinstance(rgb, str) else None
            red += rgb == RED
            yellow += rgb == YELLOW
        return {"rows": n, "red": red, "yellow": yellow}
    finally:
        wb.close()


def csv_data_rows(path: Path) -> int:
    import csv

    with open(path, newline="", encoding="utf-8-sig") as f:
        return max(0, sum(1 for _ in csv.reader(f)) - 1)


def report_scan(path: Path) -> dict:
    return xlsx_scan(path) if path.suffix == ".xlsx" else {"rows": csv_data_rows(path)}


# ---------------------------------------------------------------------------------------------------------------------

def ref_venv(var: str, name: str):
    venv = refvenv.ref_venv_or_missing(name, var)
    exe = venv / "bin" / "msprobe"
    return (venv, exe) if exe.is_file() and os.access(exe, os.X_OK) else (venv, None)


def fmt_ratio(x):
    return "-" if x is None else (f"{x:.1f}x" if x >= 10 else f"{x:.2f}x")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--work-dir", default=str(DEFAULT_WORK))
    ap.add_argument("--cases", default="tiny,stat,tensor")
    ap.add_argument("--repeat-small", type=int, default=3, help="timed runs on the tiny pair (best kept)")
    ap.add_argument("--repeat-big", type=int, default=3, help="timed runs of ours on the stat/tensor pairs")
    ap.add_argument("--repeat-ref-big", type=int, default=2, help="timed runs of the references on stat/tensor")
    ap.add_argument("--no-refs", action="store_true", help="run ours only")
    ap.add_argument("--no-write", action="store_true", help="do not write benchmarks/results.md")
    ap.add_argument("--keep-outputs", action="store_true", help="keep the reports under WORK/runs/")
    ap.add_argument("--results", default=str(ROOT / "benchmarks" / "results.md"))
    a = ap.parse_args(argv)

    work = Path(a.work_dir).resolve()
    cases = [c.strip() for c in a.cases.split(",") if c.strip()]
    machine = machine_line()
    started = datetime.datetime.now().astimezone()
    print(f"[bench] {machine}", flush=True)
    # generate in a child process: this runner stays small (see run_once) and torch is never imported here
    subprocess.run([sys.executable, str(Path(__file__).resolve().parent / "gen_inputs.py"), "--work-dir", str(work),
                    "--cases", ",".join(cases)], check=True)
    infos = {}
    for case in cases:
        try:
            infos[case] = json.loads((work / case / ".params.json").read_text()).get("info", {})
        except (OSError, ValueError):
            infos[case] = {}

    notes: list = []
    refs = {}
    for label, var, default in ((REF8_XLSX, "MSPROBE_REF8", "venv833"), (REF26_CSV, "MSPROBE_REF26", "venv2620")):
        if a.no_refs:
            notes.append(f"{label}: skipped (--no-refs)")
            continue
        venv, exe = ref_venv(var, default)
        if exe is None:
            notes.append(f"{label}: skipped, no reference venv at {refvenv.portable(venv)} (set {var}; see benchmarks/README.md)")
        else:
            refs[label] = exe
    for n in notes:
        print(f"[bench] {n}", flush=True)

    runs_dir = work / "runs"
    if runs_dir.exists():
        shutil.rmtree(runs_dir)
    runs_dir.mkdir(parents=True)
    env_ours = dict(os.environ)
    env_ours["PYTHONPATH"] = str(ROOT)  # the checkout, whatever is installed
    env_ref = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # never shadow the reference's package

    plan = []  # (case, tool, cmd, env, repeat)
    for case in cases:
        tgt = work / case / "target" / "step0" / "rank0"
        gld = work / case / "golden" / "step0" / "rank0"
        t, g = str(tgt / "dump.json"), str(gld / "dump.json")
        big = case != "tiny"
        rep_ours = a.repeat_big if big else a.repeat_small
        rep_ref = a.repeat_ref_big if big else a.repeat_small
        ours = [sys.executable, "-m", "msprobe", "compare", "-tp", t, "-gp", g, "-o", "{out}", "-q"]
        plan.append((case, OURS_XLSX, ours, env_ours, rep_ours))
        plan.append((case, OURS_CSV, ours + ["--csv"], env_ours, rep_ours))
        if REF8_XLSX in refs:
            cj = runs_dir / f"{case}_compare.json"
            cj.write_text(json.dumps({"npu_path": t, "bench_path": g, "stack_path": str(tgt / "stack.json"),
                                      "is_print_compare_log": True}, indent=1))
            plan.append((case, REF8_XLSX, [str(refs[REF8_XLSX]), "-f", "pytorch", "compare", "-i", str(cj),
                                           "-o", "{out}", "-s", "-hl"], env_ref, rep_ref))
        if REF26_CSV in refs:
            plan.append((case, REF26_CSV, [str(refs[REF26_CSV]), "compare", "-tp", t, "-gp", g, "-o", "{out}"],
                         env_ref, rep_ref))

    results: dict = {}
    failures: list = []
    for case, tool, cmd, env, rep in plan:
        slug = f"{case}_{tool.split()[0]}_{tool.split()[1]}".replace(".", "")
        out = runs_dir / slug
        cmd = [out.as_posix() if c == "{out}" else c for c in cmd]
        print(f"[bench] {case:6s} {tool:22s} warm-up + {rep} timed ...", end=" ", flush=True)
        try:
            r = measure(cmd, out, runs_dir / f"{slug}.log", env, rep)
        except RunError as e:
            print("FAILED", flush=True)
            failures.append(f"{case} / {tool}: {e}")
            print(f"[bench] {e}", file=sys.stderr, flush=True)
            continue
        r["cmd"] = cmd
        results[(case, tool)] = r
        print(f"{r['secs']:8.2f} s (runs: {', '.join(f'{s:.2f}' for s in r['all_secs'])})  RSS max {r['rss_mb']:7.0f} MB"
              f"  PSS sum {r['pss_mb']:7.0f} MB  procs {r['procs']}  (sampler {100 * r['sampler_cpu']:.1f}% of a core)",
              flush=True)

    # --- report sanity checks ---
    checks: list = []
    for (case, tool), r in results.items():
        r.update(report_scan(r["reports"][0]))
        rows = r["rows"]
        if rows <= 0:
            failures.append(f"{case} / {tool}: report {r['reports'][0]} holds no data rows")
    if ("stat", OURS_XLSX) in results and ("stat", REF8_XLSX) in results:
        o, rf = results[("stat", OURS_XLSX)]["rows"], results[("stat", REF8_XLSX)]["rows"]
        ok = o == rf
        checks.append(f"stat pair, xlsx data rows: ours {o:,} vs 8.3.3 {rf:,} -> {'equal' if ok else 'DIFFERENT'}")
        ro, r8 = results[("stat", OURS_XLSX)], results[("stat", REF8_XLSX)]
        checks.append(f"stat pair, highlighted rows (fill of the name cell): ours red {ro['red']:,} / yellow "
                      f"{ro['yellow']:,}, 8.3.3 red {r8['red']:,} / yellow {r8['yellow']:,} (informative: ours also "
                      f"colours NaN max/min red, docs/compatibility.md)")
        if not ok:
            failures.append(f"stat pair: ours xlsx has {o} rows, 8.3.3 xlsx has {rf}")
    if results:
        worst = max(results.items(), key=lambda kv: kv[1]["sampler_cpu"])
        checks.append(f"memory sampler overhead: at most {100 * worst[1]['sampler_cpu']:.1f}% of one core "
                      f"({worst[0][0]} / {worst[0][1]})")
    for case in cases:
        got = {tool: r["rows"] for (c, tool), r in results.items() if c == case}
        if got:
            checks.append(f"{case} pair, report data rows: " + ", ".join(f"{t} {n:,}" for t, n in got.items()))

    # --- table ---
    def ref_for(case, tool):
        if tool == OURS_XLSX:
            return REF8_XLSX
        if tool == OURS_CSV:
            return REF26_CSV
        return None

    head = ("| case | tool | seconds (best) | runs | RSS max MB | PSS sum MB | procs | speed-up vs ref | peak MB ratio |\n"
            "|---|---|---:|---:|---:|---:|---:|---:|---:|")
    lines = [head]
    for case in cases:
        for tool in (OURS_XLSX, OURS_CSV, REF8_XLSX, REF26_CSV):
            r = results.get((case, tool))
            if r is None:
                continue
            sp = rr = None
            ref = results.get((case, ref_for(case, tool))) if ref_for(case, tool) else None
            if ref is not None:
                sp = ref["secs"] / r["secs"]
                rr = peak(r) / peak(ref)
            ref_name = f" ({ref_for(case, tool)})" if ref is not None else ""
            lines.append(f"| {case} | {tool} | {r['secs']:.2f} | {r['n']} | {r['rss_mb']:.0f} | {r['pss_mb']:.0f} | "
                         f"{r['procs']} | {fmt_ratio(sp)}{ref_name} | "
                         f"{'-' if rr is None else f'{rr:.2f}'} |")
    table = "\n".join(lines)

    # --- goals ---
    goals = []

    def goal(name, ok, detail):
        goals.append((name, "PASS" if ok else "FAIL", detail))

    def pair_goal(name, ours_tool, ref_tool, factor):
        o, rf = results.get(("stat", ours_tool)), results.get(("stat", ref_tool))
        if o is None or rf is None:
            goals.append((name, "n/a", "not measured (missing run or reference venv)"))
            return
        sp, rr = rf["secs"] / o["secs"], peak(o) / peak(rf)
        goal(name, sp >= factor and rr <= 0.5,
             f"{sp:.1f}x faster ({o['secs']:.2f} s vs {rf['secs']:.2f} s), peak {peak(o):.0f} vs {peak(rf):.0f} MB "
             f"= {rr:.2f}")

    if "stat" in cases:
        pair_goal("stat: highlighted xlsx >= 10x faster than 8.3.3 -s -hl, <= 1/2 peak memory", OURS_XLSX, REF8_XLSX, 10)
        pair_goal("stat: csv >= 10x faster than 26.2.0 csv, <= 1/2 peak memory", OURS_CSV, REF26_CSV, 10)
    if "tensor" in cases:
        refs_t = [(results[("tensor", t)]["secs"], t) for t in (REF8_XLSX, REF26_CSV) if ("tensor", t) in results]
        ours_t = [(results[("tensor", t)]["secs"], t) for t in (OURS_XLSX, OURS_CSV) if ("tensor", t) in results]
        name = "tensor: both our reports >= 3x faster than the faster reference"
        if refs_t and ours_t:
            fast_ref, slow_ours = min(refs_t), max(ours_t)
            goal(name, fast_ref[0] / slow_ours[0] >= 3,
                 f"slower of ours ({slow_ours[1]}, {slow_ours[0]:.2f} s) vs faster reference ({fast_ref[1]}, "
                 f"{fast_ref[0]:.2f} s): {fast_ref[0] / slow_ours[0]:.1f}x")
        else:
            goals.append((name, "n/a", "not measured"))
    if "tiny" in cases:
        ours_t = [(results[("tiny", t)]["secs"], t) for t in (OURS_XLSX, OURS_CSV) if ("tiny", t) in results]
        name = "tiny: ours < 0.5 s end to end (xlsx and csv)"
        if ours_t:
            worst = max(ours_t)
            goal(name, worst[0] < 0.5, f"slower of ours: {worst[1]} {worst[0]:.3f} s")
        else:
            goals.append((name, "n/a", "not measured"))

    # --- inputs ---
    inp = []
    for case in cases:
        info = infos.get(case, {})
        d = work / case / "target" / "step0" / "rank0"
        size = (d / "dump.json").stat().st_size if (d / "dump.json").is_file() else 0
        size = f"{size / 1e6:.1f} MB" if size >= 1e6 else f"{size / 1e3:.0f} kB"
        extra = ", ".join(f"{k} {v:,}" if isinstance(v, int) else f"{k} {v}" for k, v in info.items()
                          if k != "gen_seconds")
        inp.append(f"- `{case}`: `{d.relative_to(work.parent) if work.parent in d.parents else d}` "
                   f"(+ golden); target dump.json {size}; {extra}")

    show = harness.show_cmd
    cmd_lines = []
    for (case, tool), r in results.items():
        cmd_lines.append(f"- {case} / {tool}: `{show(r['cmd'])}`")
    ref8_json = runs_dir / "stat_compare.json"
    text = "\n".join([
        "# msprobe compare benchmark",
        "",
        f"Date: {started.strftime('%Y-%m-%d %H:%M %Z')}  ",
        f"Machine: {machine}  ",
        f"Runner: `{shlex.join([os.path.relpath(sys.executable, ROOT) if str(sys.executable).startswith(str(ROOT)) else sys.executable, 'benchmarks/run_all.py', *(argv if argv is not None else sys.argv[1:])])}`",
        "",
        "Method: each command runs in a fresh subprocess with a fresh empty output dir; one untimed warm-up run "
        "(warm page cache for every tool), then N timed runs, best wall time kept. `RSS max` = `ru_maxrss` of the "
        "process tree (GNU time %M: the largest single process, waited-for workers included); `PSS sum` = sampled (every 20 ms, or 30x a sample's cost if longer) sum of "
        "`Pss` over all live processes of the tree (forked workers included, shared pages counted once); "
        "`procs` = most processes alive at once. Speed-up = reference seconds / ours; peak MB ratio = ours / "
        "reference, with peak MB = max(RSS max, PSS sum). Ours xlsx is compared with 8.3.3 `-s -hl` (xlsx, "
        "highlighted), ours csv with 26.2.0 (csv by default).",
        "",
        "Inputs (`benchmarks/gen_inputs.py`):",
        "",
        *inp,
        "",
        *harness.report_block(table, goals, checks, [f.splitlines()[0] for f in failures], notes),
        "",
        "Commands, from the repository root (the `-o` dir is fresh and empty for every run"
        + (f"; the 8.3.3 compare.json holds npu_path, bench_path, stack_path and is_print_compare_log, e.g. "
           f"`{show([str(ref8_json)])}`" if (REF8_XLSX in refs) else "") + "):",
        "",
        *cmd_lines,
        "",
    ])
    print()
    print(text)
    if not a.no_write:
        Path(a.results).write_text(text)
        print(f"[bench] wrote {a.results}")
    if not a.keep_outputs:
        harness.remove_subdirs(runs_dir)
    return harness.exit_status(failures, [v for _, v, _ in goals], "[bench] FAILED runs/checks:")


if __name__ == "__main__":
    sys.exit(main())
