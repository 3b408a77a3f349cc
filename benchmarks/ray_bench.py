"""Benchmark of ``--ray`` against ``-j``: a multi-rank statistics compare, and a scaling model (docs/scale.md).

    .venv/bin/python benchmarks/ray_bench.py [--ranks 64] [--rows 20000] [--repeat 3] [--runs j1,j2,ray2,raylocal]
                                             [--case stat|tensor] [--dir DIR] [--model-only]

One generated statistics pair (benchmarks/gen_inputs.py, ``--rows`` tensor rows per side) is hard-linked into
``--ranks`` rank dirs per side (every rank parses its own dump.json; the page cache holds the one file, so the
storage read is not part of these times: it is modelled separately). Timed in the same run, each as one
``msprobe compare ... --csv -q`` process:

* ``-j 1`` and ``-j 2`` (local forked workers);
* ``--ray ADDRESS`` on a 2-node local cluster (``ray.cluster_utils.Cluster``: a head and a second node,
  1 CPU each; the cluster is started before the timing: a real cluster is already running);
  these three interleaved, ``--repeat`` rounds (medians reported: the load of a shared machine varies);
* ``--ray`` alone, once (the command starts a local Ray instance with one CPU per core: start-up included).

Then Ray's per-task overhead (no-op tasks through msprobe.core.executor_ray, one at a time and 2 at a time),
the driver's share per rank (writing one report), and the projection for 4,096 ranks on 16 nodes x 64
cores (see docs/scale.md for the model and its assumptions). The reports of every run are checked to be
byte-identical to those of ``-j 1``.
"""

from __future__ import annotations

import argparse
import filecmp
import os
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import harness  # noqa: E402
from harness import machine_line  # noqa: E402


def make_inputs(work: Path, ranks: int, rows: int, case: str = "stat", tensor_files: int = 300,
                tensor_mb: int = 30) -> Path:
    """work/<case> (the generated pair) and work/<case>_r{ranks}...: target/golden step dirs of hard-linked rank
    dirs (a tensor rank's dump_tensor_data included)."""
    import gen_inputs

    a = gen_inputs.parse_args([str(work), "--cases", case, "--stat-rows", str(rows), "--tensor-files",
                               str(tensor_files), "--tensor-mb", str(tensor_mb)])
    gen_inputs.ensure(work, [case], a)
    steps = work / (f"r{ranks}_rows{rows}" if case == "stat" else f"tensor_r{ranks}_f{tensor_files}_mb{tensor_mb}")
    if (steps / "golden" / "step0" / f"rank{ranks - 1}" / "dump.json").is_file():
        return steps
    shutil.rmtree(steps, ignore_errors=True)
    for side in ("target", "golden"):
        src = work / case / side / "step0" / "rank0"
        for r in range(ranks):
            shutil.copytree(src, steps / side / "step0" / f"rank{r}", copy_function=os.link)
    return steps


def run_compare(steps: Path, out: Path, extra) -> float:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    env.pop("MSPROBE_FAULT_KILL_ONCE", None)
    cmd = [sys.executable, "-m", "msprobe", "compare", "-tp", str(steps / "target" / "step0"), "-gp",
           str(steps / "golden" / "step0"), "-o", str(out), "--csv", "-q", "-c", *extra]
    load = os.getloadavg()[0]
    r = harness.run(cmd, env=env)
    print(f"  (load average {load:.1f} before, {os.getloadavg()[0]:.1f} after)", flush=True)
    if not r.ok:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{r.stderr[-3000:]}")
    return r.secs


def same_reports(a: Path, b: Path) -> bool:
    def names(d):
        return {re.sub(r"_\d{14}", "", n): d / n for n in os.listdir(d)}
    na, nb = names(a), names(b)
    return sorted(na) == sorted(nb) and all(filecmp.cmp(na[k], nb[k], shallow=False) for k in na)


def _noop(task, _emit=None):
    return task


def task_overhead(address: str, n: int = 200) -> tuple:
    """(seconds per task one at a time, seconds per task with 2 in flight) for no-op tasks via executor_ray."""
    import functools

    import ray

    from msprobe.core.executor import ray_backend, run_tasks

    ray.init(address=address, include_dashboard=False, log_to_driver=False, logging_level="ERROR")
    try:
        ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
        fn = functools.partial(_noop)
        run_tasks(fn, list(range(20)), 2, backend=ray_backend(address))          # warm the workers
        t0 = time.perf_counter()
        for i in range(n // 4):
            run_tasks(fn, [i], 1, backend=ray_backend(address))
        one = (time.perf_counter() - t0) / (n // 4)
        t0 = time.perf_counter()
        run_tasks(fn, list(range(n)), 2, backend=ray_backend(address))
        many = (time.perf_counter() - t0) / n
    finally:
        ray.shutdown()
    return one, many


def driver_write_seconds(steps: Path) -> tuple:
    """(seconds of one rank's Ray task body: compare + render the csv, seconds the driver takes to write its
    bytes, rows, dump.json bytes), measured in this process."""
    from msprobe.core.compare.config import CompareConfig
    from msprobe.core.compare.runner import RankJob, compare_rank, write_rendered

    rank = steps / "target" / "step0" / "rank0"
    job = RankJob("rank0", str(rank / "dump.json"), str(steps / "golden" / "step0" / "rank0" / "dump.json"))
    cfg = CompareConfig(target=str(steps), golden=str(steps), fmt="csv", jobs=1)   # one core, as a Ray task
    out = compare_rank(cfg, job, keep_tables=False)
    with tempfile.TemporaryDirectory() as d:
        t0 = time.perf_counter()
        write_rendered(out.data, os.path.join(d, "r.csv"))
        w = time.perf_counter() - t0
    data_dir = rank / "dump_tensor_data"
    nbytes = os.path.getsize(rank / "dump.json") + (sum(f.stat().st_size for f in data_dir.iterdir())
                                                     if data_dir.is_dir() else 0)
    return out.seconds, w, out.report.rows, nbytes, len(out.data)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ranks", type=int, default=64)
    ap.add_argument("--rows", type=int, default=20000, help="tensor rows per rank and side (statistics case)")
    ap.add_argument("--case", choices=("stat", "tensor"), default="stat",
                    help="statistics dumps, or tensor dumps (--tensor-files .pt files, --tensor-mb MB per rank)")
    ap.add_argument("--tensor-files", type=int, default=300)
    ap.add_argument("--tensor-mb", type=int, default=30)
    ap.add_argument("--dir", default=os.path.join(tempfile.gettempdir(), "msprobe_ray_bench"))
    ap.add_argument("--repeat", type=int, default=3, help="rounds of the -j 1 / -j 2 / --ray cluster runs")
    ap.add_argument("--runs", default="j1,j2,ray2,raylocal",
                    help="which timed runs, comma-separated: j1 (-j 1), j2 (-j 2), ray2 (--ray on the 2-node "
                         "cluster), raylocal (--ray, local instance started by the command)")
    ap.add_argument("--model-only", action="store_true",
                    help="skip the timed commands: per-task overhead, per-rank costs and the projection only")
    a = ap.parse_args(argv)
    try:
        import ray  # noqa: F401
        from ray.cluster_utils import Cluster
    except ImportError:
        print("ray is not installed: pip install 'msprobe[ray]'", file=sys.stderr)
        return 2
    work = Path(a.dir)
    work.mkdir(parents=True, exist_ok=True)
    print(machine_line())
    steps = make_inputs(work, a.ranks, a.rows, a.case, a.tensor_files, a.tensor_mb)
    outs = work / "out"
    shutil.rmtree(outs, ignore_errors=True)
    times: dict = {}
    t0 = time.perf_counter()
    runs = [r.strip() for r in a.runs.split(",") if r.strip()]
    unknown = sorted(set(runs) - {"j1", "j2", "ray2", "raylocal"})
    if unknown or not runs or "j1" not in runs and "j2" not in runs:
        ap.error(f"--runs {a.runs}: name j1, j2, ray2, raylocal (j1 or j2 among them: the baseline)")
    # the cluster's workers at the niceness of -j's processes (Ray's default, 15, puts them behind any other
    # process on a shared machine; a local instance msprobe starts does the same, msprobe.core.executor_ray)
    os.environ["RAY_worker_niceness"] = "0"
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    cluster.add_node(num_cpus=1)
    cluster.wait_for_nodes()
    cluster_start = time.perf_counter() - t0
    print(f"2-node local cluster started in {cluster_start:.1f} s (not counted: a real cluster is already running)")
    ray2 = "--ray (2-node cluster, 1 CPU each)"
    try:
        # the runs interleaved, round after round: a load change on a shared machine hits all of them alike
        for rnd in range(0 if a.model_only else a.repeat):
            for label, out, extra in (("-j 1", "j1", ["-j", "1"]), ("-j 2", "j2", ["-j", "2"]),
                                      (ray2, "ray2", ["--ray", cluster.address])):
                if out not in runs:
                    continue
                shutil.rmtree(outs / out, ignore_errors=True)
                times.setdefault(label, []).append(run_compare(steps, outs / out, extra))
                print(f"round {rnd + 1}: {label}: {times[label][-1]:.2f} s", flush=True)
        one, many = task_overhead(cluster.address)
    finally:
        cluster.shutdown()
    if not a.model_only and "raylocal" in runs:
        label = "--ray (local instance, start-up included)"
        times[label] = [run_compare(steps, outs / "raylocal", ["--ray"])]
        print(f"{label}: {times[label][0]:.2f} s", flush=True)
    base_dir = outs / ("j1" if "j1" in runs else "j2")
    same = a.model_only or all(same_reports(base_dir, outs / d) for d in runs if outs / d != base_dir)
    rank_s, write_s, rows, nbytes, report_bytes = driver_write_seconds(steps)
    if a.model_only:
        model(rank_s, write_s, nbytes, report_bytes, many)
        return 0

    print()
    print(f"{a.ranks} ranks x {rows:,} rows ({a.case} dump {nbytes / 1e6:.1f} MB per rank and side), csv reports, "
          f"advisor off (-c); reports identical to {'-j 1' if 'j1' in runs else '-j 2'}'s: {'yes' if same else 'NO'}")
    print()
    print(f"| run | wall s, median of {a.repeat} (each run) | ranks/s | vs -j 2 |")
    print("|---|---|---|---|")
    import statistics

    base = statistics.median(times["-j 2" if "-j 2" in times else "-j 1"])
    for label, ts in times.items():
        t = statistics.median(ts)
        each = ", ".join(f"{x:.1f}" for x in ts)
        print(f"| {label} | {t:.2f} ({each}) | {a.ranks / t:.2f} | {t / base:.2f}x |")
    print(f"(the last column is against {'-j 2' if '-j 2' in times else '-j 1'})")
    print()
    print(f"Ray per-task overhead (no-op task): {one * 1000:.1f} ms one at a time, {many * 1000:.2f} ms per task "
          f"with 2 in flight")
    print(f"one rank's Ray task (compare + render the csv): {rank_s:.3f} s; the driver's share (writing its "
          f"bytes): {write_s * 1000:.1f} ms")
    # the per-rank cost of the model: -j 1's wall time per rank where it was measured (a whole command's
    # cost per rank, process start included), else the task body timed in this process
    import statistics

    per_rank = statistics.median(times["-j 1"]) / a.ranks if "-j 1" in times else rank_s
    model(per_rank, write_s, nbytes, report_bytes, many)
    return 0 if same else 1


READ_GBS = 10.0     # aggregate read rate of the shared file system, GB/s (assumption, docs/scale.md)
DRIVER_GBS = 1.25   # the driver's network: 10 Gbit/s (assumption)
START_S = 10.0      # connect to the running cluster, start a worker per core, import msprobe (assumption)


def model(rank_s: float, write_s: float, nbytes: int, report_bytes: int, task_s: float) -> None:
    """The projection of docs/scale.md for 4,096 ranks on 1, 4 and 16 nodes of 64 cores, for the two ways
    the reports are written: by the tasks into a shared output folder, or by the driver."""
    print(f"model inputs: {rank_s:.3f} s per rank (compare + render, one core), Ray {task_s * 1000:.2f} ms per task, "
          f"driver {write_s * 1000:.2f} ms + {report_bytes / 1e6:.2f} MB per report, dump {nbytes / 1e6:.1f} MB "
          f"per rank and side; storage {READ_GBS:.0f} GB/s, driver network {DRIVER_GBS} GB/s, start {START_S:.0f} s")
    print()
    print("| ranks | nodes x cores | compute s | storage s (reads + report writes) | driver s (driver writes) | "
          "projected s, shared output | projected s, driver writes |")
    print("|---|---|---|---|---|---|---|")
    ranks, cores = 4096, 64
    for nodes in (1, 4, 16):
        workers = nodes * cores
        compute = -(-ranks // workers) * (rank_s + task_s)
        storage = ranks * (2 * nbytes + report_bytes) / (READ_GBS * 1e9)
        driver = ranks * (write_s + report_bytes / (DRIVER_GBS * 1e9))
        shared = START_S + max(compute, storage)
        via_driver = START_S + max(compute, storage, driver)
        print(f"| {ranks} | {nodes} x {cores} | {compute:.1f} | {storage:.1f} | {driver:.1f} | {shared:.0f} | "
              f"{via_driver:.0f} |")

if __name__ == "__main__":
    sys.exit(main())
