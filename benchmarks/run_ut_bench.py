"""Benchmark of ``msprobe run_ut``: APIs judged per second on a 2,000-API statistics dump, ours with
``-j 1`` and ``-j 2`` against the reference's run_ut (mindstudio-probe 8.3.3) on the same dump, in the same run.

    .venv/bin/python benchmarks/run_ut_bench.py [--apis 2000] [--ref-apis 200] [--repeat 1]
                                                [--work-dir DIR] [--no-ref] [--no-write]

The dump: the small transformer of tests/data/acc_check/dump_transformer.py dumped by our PrecisionDebugger
(task statistics, level L1, 32 APIs, forward and backward), its records repeated with new call indices
(``Functional.linear.5`` ... ) up to ``--apis`` APIs.  Inputs are random data following the statistics.

Every command runs in a fresh process with a fresh output folder and one intra-op thread
(``OMP_NUM_THREADS=1``; the APIs are tiny, threads only spin); wall clock from start to exit (imports and
start-up included), the best of ``--repeat``.  ``APIs/s`` = APIs judged (result rows that are not SKIP) /
seconds.  Ours: ``msprobe -f pytorch run_ut -api_info DUMP -o OUT -q -j J``.

The reference (venv $MSPROBE_REF8, else $MSPROBE_REF_CACHE/venv833, see benchmarks/refvenv.py) has no CPU
device: it runs through tests/test_acc_check.py's REF_RUN_UT harness (imported from there), which redirects
its device to the CPU, from a folder outside the repository without PYTHONPATH.  It takes ~0.75 s per API
here, so by default it is timed on the first ``--ref-apis`` APIs of the same dump (ours is timed on that
subset too, so the per-API figures compare like with like; ``--ref-apis 0``: the whole dump).  A missing
venv gives an n/a row.  The table is printed and written to benchmarks/run_ut_results.md (unless --no-write).
Exit status 0 when the goal (ours -j 1 at least 5x the reference's APIs/s) is met or not measurable, 1 when
it is missed, 2 when a run fails.
"""

from __future__ import annotations

import argparse
import csv
import datetime
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
import harness  # noqa: E402
from harness import machine_line  # noqa: E402
from refvenv import portable, ref_venv_or_missing  # noqa: E402

RESULTS = ROOT / "benchmarks" / "run_ut_results.md"
GOAL = 5.0


def ref_harness() -> str:
    """The reference run_ut redirected to the CPU: tests/test_acc_check.py's REF_RUN_UT (one copy)."""
    sys.path[:0] = [str(ROOT / "tests"), str(ROOT)]
    try:
        from test_acc_check import REF_RUN_UT
    finally:
        del sys.path[:2]
    return REF_RUN_UT


def base_dump(work: Path) -> Path:
    dump = work / "base" / "step0" / "rank" / "dump.json"
    if not dump.is_file():
        env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
        subprocess.run([sys.executable, str(ROOT / "tests" / "data" / "acc_check" / "dump_transformer.py"),
                        str(work / "base"), "statistics"], check=True, env=env, timeout=600)
    return dump


def big_dump(base: Path, apis: int, out: Path) -> int:
    """``base``'s records repeated with new call indices until ``apis`` APIs; returns the number written."""
    doc = json.loads(base.read_text())
    data = doc["data"]
    split = [(k,) + re.match(r"^(.*)\.(\d+)\.(forward|backward)$", k).groups() for k in data]
    per_api = {}
    for _, prefix, idx, _ in split:
        per_api[prefix] = max(per_api.get(prefix, 0), int(idx) + 1)
    n_base = len({(p, i) for _, p, i, _ in split})
    new, names, seen = {}, [], set()
    for rep in range(-(-apis // n_base)):
        for key, prefix, idx, direction in split:
            name = f"{prefix}.{int(idx) + rep * per_api[prefix]}"
            if name not in seen:
                if len(names) == apis:
                    continue
                names.append(name)
                seen.add(name)
            new[f"{name}.{direction}"] = data[key]
    doc["data"] = new
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc))
    return len(names)


def judged(out: Path) -> tuple:
    res = sorted(out.glob("accuracy_checking_result_*.csv"))
    if len(res) != 1:
        raise RuntimeError(f"expected one result CSV in {out}, found {len(res)}")
    with open(res[0], newline="", encoding="utf-8-sig") as fh:
        rows = list(csv.reader(fh))[1:]
    return sum(1 for r in rows if len(r) > 1 and r[1] != "SKIP"), len(rows)


def timed(cmd: list, out: Path, env: dict, cwd: Path, repeat: int, timeout: float) -> dict:
    def once():
        if out.exists():
            shutil.rmtree(out)
        log = out.with_suffix(".log")
        r = harness.run(cmd, env=env, cwd=cwd, timeout=timeout, log=log)
        if not r.ok:
            raise RuntimeError(r.failure(log, 2000))
        n_judged, n_rows = judged(out)
        return {"secs": r.secs, "judged": n_judged, "rows": n_rows}

    return min(harness.repeat(once, repeat), key=lambda x: x["secs"])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--apis", type=int, default=2000, help="APIs in the dump (default 2000)")
    ap.add_argument("--ref-apis", type=int, default=200,
                    help="APIs the reference is timed on (the first ones of the dump; 0 = all; default 200)")
    ap.add_argument("--repeat", type=int, default=1, help="timed runs per row, the best is kept (default 1)")
    ap.add_argument("--ref-timeout", type=float, default=3600, help="seconds the reference may take")
    ap.add_argument("--work-dir", default=None, help="folder for the dumps and outputs (default: a temporary one)")
    ap.add_argument("--no-ref", action="store_true", help="do not run the reference")
    ap.add_argument("--no-write", action="store_true", help=f"do not write {portable(RESULTS)}")
    args = ap.parse_args(argv)
    machine = machine_line()
    work = Path(args.work_dir) if args.work_dir else Path(tempfile.mkdtemp(prefix="msprobe_run_ut_bench_"))
    work.mkdir(parents=True, exist_ok=True)
    base = base_dump(work)
    dump = work / "big" / "dump.json"
    n_apis = big_dump(base, args.apis, dump)
    ref_n = n_apis if args.ref_apis <= 0 else min(args.ref_apis, n_apis)
    sub = dump
    if ref_n < n_apis:
        sub = work / "sub" / "dump.json"
        big_dump(base, ref_n, sub)
    ours_env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1", MSPROBE_PROGRESS="0")
    ours = [sys.executable, "-m", "msprobe", "-f", "pytorch", "run_ut", "-q"]
    rows = []  # (label, dump label, APIs in dump, result dict or None, note)
    try:
        for jobs in (1, 2):
            r = timed(ours + ["-api_info", str(dump), "-o", str(work / f"ours_j{jobs}"), "-j", str(jobs)],
                      work / f"ours_j{jobs}", ours_env, work, args.repeat, 3600)
            rows.append((f"ours -j {jobs}", "whole", n_apis, r, ""))
        ref_py = ref_venv_or_missing("venv833", "MSPROBE_REF8") / "bin" / "python"
        ref_row = None
        if args.no_ref:
            note = "not run (--no-ref)"
        elif not ref_py.exists():
            note = f"n/a: reference venv missing ({portable(ref_py.parent.parent)}; see benchmarks/README.md)"
        else:
            note = ""
        if sub != dump:
            r = timed(ours + ["-api_info", str(sub), "-o", str(work / "ours_sub"), "-j", "1"], work / "ours_sub",
                      ours_env, work, args.repeat, 3600)
            rows.append(("ours -j 1", "subset", ref_n, r, ""))
        if not note:
            harness = work / "ref_run_ut.py"
            harness.write_text(ref_harness())
            ref_env = dict(os.environ, OMP_NUM_THREADS="1")
            ref_env.pop("PYTHONPATH", None)
            ref_row = timed([str(ref_py), str(harness), "-api_info", str(sub), "-o", str(work / "ref")],
                            work / "ref", ref_env, work, args.repeat, args.ref_timeout)
        rows.append(("reference 8.3.3 run_ut (CPU)", "subset" if sub != dump else "whole", ref_n, ref_row, note))
    except (RuntimeError, subprocess.SubprocessError) as exc:
        print(f"run_ut_bench: a run failed: {exc}", file=sys.stderr)
        return 2

    def rate(r):
        return r["judged"] / r["secs"] if r else None

    ref_rate = rate(ref_row)
    same = next(r for label, d, _, r, _ in rows if label == "ours -j 1" and d == ("subset" if sub != dump else "whole"))
    lines = ["| run | dump | APIs | judged | seconds | APIs/s | x reference |", "|---|---|---:|---:|---:|---:|---:|"]
    for label, which, n, r, note in rows:
        if r is None:
            lines.append(f"| {label} | {which} | {n} | - | - | - | {note} |")
            continue
        x = f"{rate(r) / ref_rate:.1f}x" if ref_rate else "-"
        lines.append(f"| {label} | {which} | {n} | {r['judged']} | {r['secs']:.1f} | {rate(r):.1f} | {x} |")
    goal = None
    if ref_rate:
        goal = rate(same) / ref_rate
        verdict = f"goal ours >= {GOAL:g}x the reference per API (ours -j 1, same dump): {goal:.1f}x, " + (
            "met" if goal >= GOAL else "MISSED")
    else:
        verdict = "goal not measured (no reference run)"
    cmd = "  .venv/bin/python benchmarks/run_ut_bench.py " + " ".join(
        a for a in (f"--apis {args.apis}", f"--ref-apis {args.ref_apis}", f"--repeat {args.repeat}"))
    text = "\n".join(lines)
    print(machine)
    print(text)
    print(verdict)
    if not args.no_write:
        RESULTS.write_text(
            "# run_ut benchmark: APIs judged per second\n\n"
            f"Generated by `benchmarks/run_ut_bench.py` on {datetime.date.today().isoformat()}:\n\n"
            f"```\n{cmd}\n```\n\n"
            f"Machine: {machine}\n\n"
            f"Dump: tests/data/acc_check/dump_transformer.py (statistics, L1) repeated with new call indices to "
            f"{n_apis} APIs (random data from the statistics). `whole` = that dump; `subset` = its first {ref_n} "
            f"APIs, on which the reference is timed "
            + (f"({ref_row['secs'] / max(ref_n, 1):.2f} s per API here: the whole dump would take "
               f"~{round(n_apis * ref_row['secs'] / max(ref_n, 1) / 60)} min)" if ref_row else "(not run)")
            + ", and ours too, so that start-up weighs alike. "
            "Wall clock of the whole command (start-up included), "
            "one intra-op thread (`OMP_NUM_THREADS=1`), best of "
            f"{args.repeat}; `judged` = result rows not SKIP. The reference is 8.3.3's run_ut with its device "
            "redirected to the CPU (tests/test_acc_check.py `REF_RUN_UT`).\n\n"
            f"{text}\n\n{verdict}\n\n"
            "`judged` differs because ours skips `dropout` with p > 0 (a random API, one per 32) while the "
            "reference judges it by its zero-count rule. `-j 2` only helps when a second core is free: read it "
            "with the load average of the machine line (this machine's two cores are shared with other work).\n")
        print(f"written to {portable(RESULTS)}")
    return 0 if goal is None or goal >= GOAL else 1


if __name__ == "__main__":
    sys.exit(main())
