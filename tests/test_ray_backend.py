"""--ray (msprobe.core.executor's Ray backend): the same files as the local -j backend, faults, the missing extra.

One local Ray instance for the whole test session (``ray_cluster``: ray.init(num_cpus=2)); the commands run
in this process and find it initialised. The local-backend baselines run as subprocesses (``-j 2``), so
this process, which holds Ray's threads, never forks. Tests that need Ray skip when it is not installed.
"""

from __future__ import annotations

import functools
import glob
import os
import shutil
import sqlite3
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from conftest import fixtures_or_skip

REPO = Path(__file__).resolve().parents[1]
MULTI = "multirank_mlp_bf16_stat_mix"

try:
    import ray  # noqa: F401
    HAVE_RAY = True
except ImportError:  # pragma: no cover - the ray extra not installed
    HAVE_RAY = False

needs_ray = pytest.mark.skipif(not HAVE_RAY, reason="ray is not installed (pip install 'msprobe[ray]')")


@pytest.fixture(scope="session")
def ray_cluster():
    if not HAVE_RAY:
        pytest.skip("ray is not installed (pip install 'msprobe[ray]')")
    import ray

    started = not ray.is_initialized()
    if started:
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield ray
    if started:
        ray.shutdown()


def cli_here(args, capsys):
    """msprobe in this process (it joins the session's Ray instance)."""
    from msprobe.cli.main import main

    rc = main([str(a) for a in args])
    out, err = capsys.readouterr()
    return rc, out, err


def cli_sub(args, cwd):
    """msprobe in a fresh process (the local -j backend)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.pop("MSPROBE_FAULT_KILL_ONCE", None)
    res = subprocess.run([sys.executable, "-m", "msprobe", *[str(a) for a in args]], cwd=str(cwd), env=env,
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    return res


def strip_ts(name: str) -> str:
    import re

    return re.sub(r"_\d{14}", "_TS", name)


def files_of(d: Path) -> dict:
    return {strip_ts(p.name): p for p in sorted(d.rglob("*")) if p.is_file()}


def xlsx_parts(path: Path) -> dict:
    """The members of an .xlsx without docProps/core.xml (the creation time) and without zip dates."""
    with zipfile.ZipFile(path) as z:
        return {n: z.read(n) for n in z.namelist() if n != "docProps/core.xml"}


def db_rows(path: Path) -> list:
    con = sqlite3.connect(str(path))
    try:
        return list(con.iterdump())
    finally:
        con.close()


def assert_same_outputs(local: Path, ray_out: Path) -> int:
    a, b = files_of(local), files_of(ray_out)
    assert sorted(a) == sorted(b)
    for name, pa in a.items():
        pb = b[name]
        if name.endswith(".xlsx"):
            assert xlsx_parts(pa) == xlsx_parts(pb), name
        elif name.endswith(".db"):
            assert db_rows(pa) == db_rows(pb), name
        else:
            assert pa.read_bytes() == pb.read_bytes(), name
    return len(a)


def multirank_from_single(src_step: Path, dst: Path, ranks: int = 2) -> Path:
    """A step dir of ``ranks`` rank dirs, each a copy of the single-process dump ``src_step/rank``."""
    for r in range(ranks):
        shutil.copytree(src_step / "rank", dst / f"rank{r}")
    return dst


# ----------------------------------------------------------------------------------------- the same files


@needs_ray
@pytest.mark.parametrize("fmt,writer", [("csv", "task"), ("xlsx", "task"), ("csv", "driver"), ("xlsx", "driver")])
def test_statistics_multirank_compare_identical(tmp_path, capsys, ray_cluster, monkeypatch, fmt, writer):
    """writer "task": the tasks see the output folder and write their reports there; "driver": they send
    the rendered bytes and the driver writes them (an output folder the workers do not share)."""
    if writer == "driver":
        monkeypatch.setenv("MSPROBE_RAY_DRIVER_WRITES", "1")
    case = fixtures_or_skip() / MULTI
    args = ["compare", "-tp", case / "target" / "step0", "-gp", case / "golden" / "step0", "-q"]
    if fmt == "csv":
        args.append("--csv")
    cli_sub(args + ["-o", tmp_path / "local", "-j", "2"], tmp_path)
    rc, out, err = cli_here(args + ["-o", tmp_path / "ray", "--ray"], capsys)
    assert rc == 0, err
    assert "compare_result_rank0" in out and "compare_result_rank1" in out
    assert assert_same_outputs(tmp_path / "local", tmp_path / "ray") == 4      # 2 reports + 2 advisor files


@needs_ray
@pytest.mark.parametrize("case_name,writer", [("mlp_bf16_md5", "task"), ("mlp_bf16_tensor_mix", "task"),
                                              ("mlp_bf16_tensor_mix", "driver")])
def test_md5_and_tensor_multirank_compare_identical(tmp_path, capsys, ray_cluster, monkeypatch, case_name, writer):
    if writer == "driver":
        monkeypatch.setenv("MSPROBE_RAY_DRIVER_WRITES", "1")
    case = fixtures_or_skip() / case_name
    t = multirank_from_single(case / "target" / "step0", tmp_path / "t")
    g = multirank_from_single(case / "golden" / "step0", tmp_path / "g")
    args = ["compare", "-tp", t, "-gp", g, "-q", "--csv"]
    cli_sub(args + ["-o", tmp_path / "local", "-j", "2"], tmp_path)
    rc, out, err = cli_here(args + ["-o", tmp_path / "ray", "--ray"], capsys)
    assert rc == 0, err
    assert assert_same_outputs(tmp_path / "local", tmp_path / "ray") == 4
    report = next((tmp_path / "ray").glob("compare_result_rank1_*.csv")).read_text()
    assert report.count("\n") > 50


@needs_ray
def test_legacy_cli_compare_with_ray(tmp_path, capsys, ray_cluster):
    """msprobe -f pytorch compare (the legacy command line) takes --ray too."""
    import json

    case = fixtures_or_skip() / MULTI
    cfg = tmp_path / "compare.json"
    cfg.write_text(json.dumps({"npu_path": str(case / "target" / "step0"), "bench_path": str(case / "golden" / "step0")}))
    cli_sub(["compare", "-tp", case / "target" / "step0", "-gp", case / "golden" / "step0", "-q", "--csv",
             "-o", tmp_path / "local", "-j", "2"], tmp_path)
    rc, out, err = cli_here(["-f", "pytorch", "compare", "-i", cfg, "-o", tmp_path / "ray", "--csv", "-q", "--ray"],
                            capsys)
    assert rc == 0, err
    assert assert_same_outputs(tmp_path / "local", tmp_path / "ray") == 4


@needs_ray
def test_tensor_chunks_as_ray_tasks_match_local(tmp_path, ray_cluster, monkeypatch):
    """A big tensor-mode rank is split into Ray tasks of RAY_CHUNK pairs: same metrics as in this process."""
    from msprobe.core.compare import tensor as tm
    from msprobe.core.executor import ray_backend
    from msprobe.core.io.tensors import load_tensor

    case = fixtures_or_skip() / "mlp_bf16_tensor_mix"
    td = case / "target" / "step0" / "rank" / "dump_tensor_data"
    gd = case / "golden" / "step0" / "rank" / "dump_tensor_data"
    names = sorted(n for n in os.listdir(td) if (gd / n).is_file())
    pairs = [(str(td / n), str(gd / n)) for n in names]
    assert len(pairs) > 20
    monkeypatch.setattr(tm, "RAY_CHUNK", 7)
    counted = []
    remote = tm.compare_files(pairs, load_tensor, backend=ray_backend(), progress=counted.append)
    here = tm.compare_files(pairs, load_tensor, jobs=1)
    assert remote == here
    assert sum(counted) == len(pairs) and max(counted) == 7


@needs_ray
def test_merge_result_identical(tmp_path, capsys, ray_cluster):
    case = fixtures_or_skip() / MULTI
    reports = case / "reference_out" / "v833_compare_stepdir"
    config = case / "reference_out" / "_inputs" / "merge_config.yaml"
    args = ["merge_result", "-i", reports, "-config", config, "-q"]
    cli_sub(args + ["-o", tmp_path / "local", "-j", "2"], tmp_path)
    rc, out, err = cli_here(args + ["-o", tmp_path / "ray", "--ray"], capsys)
    assert rc == 0, err
    assert "2 ranks (rank0, rank1)" in out
    assert assert_same_outputs(tmp_path / "local", tmp_path / "ray") == 1


@needs_ray
@pytest.mark.parametrize("db", [False, True])
def test_multirank_graph_identical(tmp_path, capsys, ray_cluster, db):
    case = fixtures_or_skip() / MULTI
    args = ["graph", "-tp", case / "target" / "step0", "-gp", case / "golden" / "step0", "-q"] + (["--db"] if db else [])
    cli_sub(args + ["-o", tmp_path / "local", "-j", "2"], tmp_path)
    rc, out, err = cli_here(args + ["-o", tmp_path / "ray", "--ray"], capsys)
    assert rc == 0, err
    assert assert_same_outputs(tmp_path / "local", tmp_path / "ray") == (1 if db else 2)
    assert not [p for p in os.listdir(tmp_path / "ray") if p.startswith(".")]       # no work folder left


# ------------------------------------------------------------------------------------------------- faults


@needs_ray
def test_killed_worker_is_retried_and_the_reports_are_complete(tmp_path, capsys, ray_cluster, monkeypatch):
    """The first rank task kills its own worker process (SIGKILL); Ray runs it again: same reports."""
    case = fixtures_or_skip() / MULTI
    args = ["compare", "-tp", case / "target" / "step0", "-gp", case / "golden" / "step0", "-q", "--csv"]
    cli_sub(args + ["-o", tmp_path / "local", "-j", "2"], tmp_path)
    marker = tmp_path / "killed-once"
    monkeypatch.setenv("MSPROBE_FAULT_KILL_ONCE", str(marker))
    rc, out, err = cli_here(args + ["-o", tmp_path / "ray", "--ray"], capsys)
    assert rc == 0, err
    assert marker.exists()                 # a worker did die
    assert assert_same_outputs(tmp_path / "local", tmp_path / "ray") == 4


@needs_ray
def test_killed_worker_generic_task(tmp_path, ray_cluster, monkeypatch):
    from msprobe.core.executor import ray_backend, run_tasks

    ray_cluster.cloudpickle.register_pickle_by_value(sys.modules[__name__])   # the workers cannot import tests/
    marker = tmp_path / "m"
    monkeypatch.setenv("MSPROBE_FAULT_KILL_ONCE", str(marker))
    got = []
    out = run_tasks(functools.partial(_times, 3), list(range(6)), 2, backend=ray_backend(),
                    on_result=lambda i, v: got.append(i))
    assert out == [0, 3, 6, 9, 12, 15]
    assert sorted(got) == list(range(6)) and marker.exists()


def _times(k, x, _emit=None):
    return k * x


@needs_ray
def test_bad_rank_is_recorded_and_the_others_compared(tmp_path, capsys, ray_cluster):
    case = fixtures_or_skip() / MULTI
    t = tmp_path / "t"
    shutil.copytree(case / "target" / "step0", t)
    (t / "rank1" / "dump.json").write_text('{"task": "statistics", "level": "mix", "data": {"Functional.x')
    args = ["compare", "-tp", t, "-gp", case / "golden" / "step0", "-q", "--csv"]
    cli_sub(["compare", "-tp", case / "target" / "step0", "-gp", case / "golden" / "step0", "-q", "--csv",
             "-o", tmp_path / "local", "-j", "2"], tmp_path)
    rc, out, err = cli_here(args + ["-o", tmp_path / "ray", "--ray"], capsys)
    assert rc == 1
    assert "compare rank1: FAILED: " in out and "dump.json" in out.split("FAILED: ")[1].splitlines()[0]
    assert "1 of 2 ranks failed" in err and "Traceback" not in err
    ray_files = files_of(tmp_path / "ray")
    assert sorted(ray_files) == ["advisor_rank0_TS.txt", "compare_result_rank0_TS.csv"]
    local = files_of(tmp_path / "local")
    assert ray_files["compare_result_rank0_TS.csv"].read_bytes() == local["compare_result_rank0_TS.csv"].read_bytes()


@needs_ray
def test_interrupt_leaves_no_report(tmp_path, ray_cluster, monkeypatch):
    """Ctrl-C while the driver writes the reports: the Ray tasks are cancelled and no report is left."""
    monkeypatch.setenv("MSPROBE_RAY_DRIVER_WRITES", "1")
    from msprobe.core.compare import runner
    from msprobe.core.compare.config import CompareConfig
    from msprobe.core.executor import ray_backend

    case = fixtures_or_skip() / MULTI
    real = runner.write_rendered
    calls = []

    def interrupted(data, path, defer=False):
        calls.append(path)
        if len(calls) == 2:
            from msprobe.core.fileio import atomic_write

            def half(tmp):
                with open(tmp, "w") as f:
                    f.write("half a report")
                raise KeyboardInterrupt
            return atomic_write(path, half, defer=defer)
        return real(data, path, defer=defer)

    monkeypatch.setattr(runner, "write_rendered", interrupted)
    out = tmp_path / "out"
    cfg = CompareConfig(target=str(case / "target" / "step0"), golden=str(case / "golden" / "step0"),
                        output_dir=str(out), fmt="csv", backend=ray_backend())
    with pytest.raises(KeyboardInterrupt):
        runner.run_compare(cfg, advisor=True, failures=[])
    assert len(calls) == 2
    assert os.listdir(out) == []


# --------------------------------------------------------------------------------- the extra and the cap


@pytest.mark.parametrize("command", ["compare", "merge_result", "graph"])
def test_missing_ray_extra_one_line(tmp_path, capsys, monkeypatch, command):
    case = fixtures_or_skip() / MULTI
    monkeypatch.setitem(sys.modules, "ray", None)         # import ray -> ImportError
    if command == "merge_result":
        args = ["merge_result", "-i", case / "reference_out" / "v833_compare_stepdir", "-config",
                case / "reference_out" / "_inputs" / "merge_config.yaml"]
    else:
        args = [command, "-tp", case / "target" / "step0", "-gp", case / "golden" / "step0"]
    rc, out, err = cli_here(args + ["-o", tmp_path / "o", "--ray"], capsys)
    assert rc != 0
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1, err
    assert lines[0].startswith("msprobe: error: --ray needs the optional Ray extra") and "pip install 'msprobe[ray]'" in lines[0]
    assert not (tmp_path / "o").exists()


def test_ray_is_not_imported_without_the_flag(tmp_path, capsys, monkeypatch):
    case = fixtures_or_skip() / MULTI
    monkeypatch.setitem(sys.modules, "ray", None)
    rc, out, err = cli_here(["compare", "-tp", case / "target" / "step0" / "rank0", "-gp",
                             case / "golden" / "step0" / "rank0", "-o", tmp_path / "o", "-q", "--csv"], capsys)
    assert rc == 0, err


def test_backend_strings():
    from msprobe.core.executor import is_ray, ray_address, ray_backend

    assert ray_backend(None) == ray_backend("") == "ray" and ray_address("ray") is None
    assert ray_address(ray_backend("auto")) == "auto"
    assert ray_address(ray_backend("ray://head:10001")) == "ray://head:10001"
    assert is_ray("ray") and is_ray("ray:auto") and not is_ray(None) and not is_ray("local")


def test_jobs_capped_at_work_and_cores(monkeypatch):
    """-j 1000 on 2 tasks starts at most 2 processes (and never more than the cores)."""
    from msprobe.core import executor, procpool
    from msprobe.core.resources import cpu_count

    assert executor.worker_count(1000, 2) == min(2, cpu_count())
    assert executor.worker_count(0, 1000) == cpu_count()
    assert executor.worker_count(3, 1000) == min(3, cpu_count())
    seen = []
    real = procpool.run_tasks

    def spy(fn, tasks, workers, **kw):
        seen.append(workers)
        return real(fn, tasks, workers, **kw)

    monkeypatch.setattr(procpool, "run_tasks", spy)
    assert executor.run_tasks(_pid, [0, 1], 1000) and seen == [min(2, cpu_count())]


def _pid(_task, _emit=None):
    return os.getpid()


def test_jobs_1000_on_two_ranks_forks_two(tmp_path, capsys):
    """msprobe compare -j 1000 on a 2-rank step dir: 2 worker processes, not 1000."""
    case = fixtures_or_skip() / MULTI
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    code = ("import multiprocessing.process as p, sys\n"
            "starts = []\n"
            "real = p.BaseProcess.start\n"
            "def start(self):\n"
            "    starts.append(self.name)\n"
            "    return real(self)\n"
            "p.BaseProcess.start = start\n"
            "from msprobe.cli.main import main\n"
            "rc = main(sys.argv[1:])\n"
            "print('STARTED', len([s for s in starts if s.startswith('msprobe-compare')]))\n"
            "sys.exit(rc)\n")
    res = subprocess.run([sys.executable, "-c", code, "compare", "-tp", str(case / "target" / "step0"), "-gp",
                          str(case / "golden" / "step0"), "-o", str(tmp_path / "o"), "-q", "--csv", "-j", "1000"],
                         env=env, capture_output=True, text=True, timeout=300, cwd=str(tmp_path))
    assert res.returncode == 0, res.stderr
    started = int(res.stdout.split("STARTED ")[1].split()[0])
    assert started <= 2
    assert len(glob.glob(str(tmp_path / "o" / "compare_result_rank*_*.csv"))) == 2


def test_every_command_spreads_work_through_the_executor():
    """procpool is reached only through msprobe.core.executor; the forks left outside it are the ones named in
    the executor's doc (a one-worker golden spool, graph's copy-on-write writers and split formatter, the
    acc_check device pool)."""
    import re

    pkg = REPO / "msprobe"
    allowed_pools = {"msprobe/core/compare/engine.py", "msprobe/core/graph/export.py"}
    allowed_process = {"msprobe/core/graph/build.py", "msprobe/core/acc_check/pool.py"}
    for path in pkg.rglob("*.py"):
        rel = path.relative_to(REPO).as_posix()
        text = path.read_text(encoding="utf-8")
        if rel not in ("msprobe/core/executor.py", "msprobe/core/procpool.py"):
            assert not re.search(r"from msprobe\.core\.procpool import run_tasks|procpool\.run_tasks", text), rel
        if "ProcessPoolExecutor(" in text:
            assert rel in allowed_pools, rel
        if re.search(r"\.Process\(target=", text):
            assert rel in allowed_process | {"msprobe/core/procpool.py"}, rel


class _Bar:
    """A progress job whose first finish() is a Ctrl-C (the driver is interrupted as a rank comes back)."""
    hits = []

    def __init__(self):
        self.finished = False

    def __call__(self, *args):
        pass

    def finish(self):
        _Bar.hits.append(1)
        if len(_Bar.hits) == 1:
            raise KeyboardInterrupt
        self.finished = True

    def abandon(self):
        self.finished = True


@needs_ray
def test_interrupt_with_tasks_writing_in_place_leaves_no_report(tmp_path, ray_cluster):
    """Tasks that write their reports into the shared output folder: Ctrl-C on the driver removes the reports
    already there, and those of tasks that finished while being cancelled; no temporary file stays."""
    from msprobe.core.compare import runner
    from msprobe.core.compare.config import CompareConfig
    from msprobe.core.executor import ray_backend

    case = fixtures_or_skip() / MULTI
    out = tmp_path / "out"
    cfg = CompareConfig(target=str(case / "target" / "step0"), golden=str(case / "golden" / "step0"),
                        output_dir=str(out), fmt="csv", backend=ray_backend())
    _Bar.hits.clear()
    with pytest.raises(KeyboardInterrupt):
        runner.run_compare(cfg, progress_factory=lambda label: _Bar(), advisor=True, failures=[])
    assert _Bar.hits
    assert os.listdir(out) == []


def _rank0_lingers(cfg, job, _emit=None, **kw):
    """compare_rank, then rank0 holds on to its result: it has written its files in place and is killed by
    its cancel before returning them (shipped to the workers by value)."""
    import time

    from msprobe.core.compare.runner import compare_rank

    res = compare_rank(cfg, job, _emit, **kw)
    if job.label == "rank0":
        time.sleep(120)
    return res


@needs_ray
def test_interrupt_kills_a_task_that_wrote_in_place_before_returning(tmp_path, ray_cluster, monkeypatch):
    """The race of CI on 1fe03f9: rank0's task had named its report and advisor file, then was killed by the
    Ctrl-C's cancel before handing them over (so on_late never saw them): they are removed all the same, and a
    file of the user's under a rank's report name, there before the run, is kept."""
    from ray import cloudpickle

    from msprobe.core.compare import runner
    from msprobe.core.compare.config import CompareConfig
    from msprobe.core.executor import ray_backend

    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    monkeypatch.setattr(runner, "compare_rank", _rank0_lingers)
    case = fixtures_or_skip() / MULTI
    out = tmp_path / "out"
    out.mkdir()
    mine = out / "compare_result_rank0_mine.csv"
    mine.write_text("the user's own file")
    cfg = CompareConfig(target=str(case / "target" / "step0"), golden=str(case / "golden" / "step0"),
                        output_dir=str(out), fmt="csv", backend=ray_backend())
    _Bar.hits.clear()
    failures = []
    try:
        with pytest.raises(KeyboardInterrupt):
            runner.run_compare(cfg, progress_factory=lambda label: _Bar(), advisor=True, failures=failures)
    finally:
        cloudpickle.unregister_pickle_by_value(sys.modules[__name__])
    assert _Bar.hits and failures == []          # rank1 came back (its bar's finish is the Ctrl-C)
    assert os.listdir(out) == [mine.name]
    assert mine.read_text() == "the user's own file"


@needs_ray
def test_merge_result_bad_rank_is_recorded_and_the_others_merged(tmp_path, capsys, ray_cluster):
    """--ray: a rank report that cannot be read is named with its reason; the others are merged (exit 1)."""
    case = fixtures_or_skip() / MULTI
    reports = tmp_path / "reports"
    shutil.copytree(case / "reference_out" / "v833_compare_stepdir", reports)
    bad = sorted(p for p in reports.iterdir() if "rank1" in p.name and p.suffix == ".xlsx")
    assert bad
    from reliability_helpers import cut_xlsx_rows

    for p in bad:
        # the header row intact (the driver reads it to plan), the rows after it cut off mid-element: the
        # damage is met by the rank's task
        cut_xlsx_rows(p)
    config = case / "reference_out" / "_inputs" / "merge_config.yaml"
    rc, out, err = cli_here(["merge_result", "-i", reports, "-config", config, "-q", "-o", tmp_path / "ray", "--ray"],
                            capsys)
    assert rc == 1, err
    assert "merge_result rank1: FAILED: " in out and "1 of 2 rank reports failed" in out
    assert "1 rank (rank0)" in out and "Traceback" not in err
    assert len([p for p in os.listdir(tmp_path / "ray") if p.endswith(".xlsx")]) == 1


@needs_ray
def test_graph_bad_rank_is_recorded_and_the_others_built(tmp_path, capsys, ray_cluster):
    """--ray: a rank whose dump is damaged is named with its reason; the other rank's graph is written (exit 1)."""
    case = fixtures_or_skip() / MULTI
    t = tmp_path / "t"
    shutil.copytree(case / "target" / "step0", t)
    (t / "rank1" / "dump.json").write_text('{"task": "statistics", "level": "mix", "data": {"Functional.x')
    rc, out, err = cli_here(["graph", "-tp", t, "-gp", case / "golden" / "step0", "-q", "-o", tmp_path / "ray",
                             "--ray"], capsys)
    assert rc == 1, err
    assert "graph rank1: FAILED: " in out and "1 of 2 graphs failed" in out and "Traceback" not in err
    vis = [p for p in os.listdir(tmp_path / "ray") if p.endswith(".vis")]
    assert len(vis) == 1 and "rank0" in vis[0]
    assert not [p for p in os.listdir(tmp_path / "ray") if p.startswith(".")]


def test_local_instance_workers_run_at_our_priority(monkeypatch):
    """A local instance (--ray without ADDRESS) starts its workers at the driver's niceness, as -j's processes
    (Ray's default is 15, behind every other process of a shared machine: 1.25x -j 2's time on a busy 2-core
    machine); the variable is set for the start only. An address (an existing cluster) keeps its settings."""
    from msprobe.core import executor_ray

    seen = []

    class FakeRay:
        def is_initialized(self):
            return False

        def init(self, **kw):
            seen.append((kw.get("address"), os.environ.get("RAY_worker_niceness")))

    monkeypatch.setattr(executor_ray, "import_ray", lambda: FakeRay())
    monkeypatch.setitem(executor_ray._state, "started", True)       # no atexit shutdown for the fake
    monkeypatch.delenv("RAY_worker_niceness", raising=False)
    executor_ray.connect(None)
    executor_ray.connect("auto")
    assert seen == [(None, "0"), ("auto", None)]
    assert "RAY_worker_niceness" not in os.environ
    monkeypatch.setenv("RAY_worker_niceness", "5")                  # the user's own choice is kept
    executor_ray.connect(None)
    assert seen[-1] == (None, "5") and os.environ["RAY_worker_niceness"] == "5"
