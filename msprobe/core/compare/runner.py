"""What to compare (files, rank dirs, step dirs), in parallel, and where the reports go."""

from __future__ import annotations

import logging
import os
import re
import time
from dataclasses import dataclass
from typing import Callable, List, Optional, Tuple

from msprobe.core.compare.config import CompareConfig
from msprobe.core.compare.engine import Report, compare_dumps
from msprobe.core.errors import MsprobeError
from msprobe.core.fileio import atomic_write, check_path, ensure_output_dir, unique_path

log = logging.getLogger("msprobe")

RANK_RE = re.compile(r"^rank(0|[1-9][0-9]*)?$")
PROC_RE = re.compile(r"^proc(\d+)$")
STEP_RE = re.compile(r"^step\d+$")
DUMP_NAMES = ("dump.json",)


@dataclass
class RankJob:
    label: Optional[str]  # rank dir name of the target ('rank0', 'rank', ...) or None for a file pair
    target_json: str
    golden_json: str
    out_sub: str = ""  # MindSpore graph/pynative layout: the report goes to OUT/<graph|pynative>/<step>


@dataclass
class RankResult:
    label: Optional[str]
    path: str
    report: Report
    seconds: float
    target_json: str = ""  # the dump.json pair compared (the advisor / -da read P2POp peers from it)
    golden_json: str = ""
    out_sub: str = ""  # graph/pynative layout: <folder>/<step>
    advice: object = None  # the advisor's Advice when run_compare(advisor=True) wrote it with the report
    advisor_path: str = ""


def _rank_dirs(d: str, side: str) -> List[Tuple[str, int]]:
    """(name, number) of the rank / proc dirs in a step dir; rank without a number is -1."""
    out = []
    skipped = []
    for name in sorted(os.listdir(d)):
        full = os.path.join(d, name)
        m = RANK_RE.match(name)
        if m and os.path.isdir(full):
            out.append((name, int(m.group(1)) if m.group(1) else -1))
            continue
        m = PROC_RE.match(name)
        if m and os.path.isdir(full):
            out.append((name, int(m.group(1))))
            continue
        skipped.append(name)
    if skipped and out:
        log.warning("%s dir %s: ignoring %s (not a rank directory)", side, d, ", ".join(skipped[:5]) + (" ..." if len(skipped) > 5 else ""))
    return out


def _dump_json(rank_dir: str, side: str) -> str:
    """The rank dir's dump.json, or its debug.json for a level-debug dump."""
    from msprobe.core.dump.lifecycle import warn_if_incomplete

    p = os.path.join(rank_dir, "dump.json")
    if not os.path.isfile(p):
        debug = os.path.join(rank_dir, "debug.json")
        if os.path.isfile(debug):
            warn_if_incomplete(rank_dir)
            return debug
        warn_if_incomplete(rank_dir, "dump.json")      # killed mid-step: says so
        raise MsprobeError(f"{side} rank dir {rank_dir} has no dump.json; was the dump finished (debugger.stop()/step())?")
    warn_if_incomplete(rank_dir)
    return p


def _is_debug(path: str) -> bool:
    return os.path.basename(path) == "debug.json"


MIX_FOLDERS = ("graph", "pynative")


def plan(cfg: CompareConfig) -> List[RankJob]:
    """Decide what to compare from the two input paths."""
    t = check_path(cfg.target, "target path")
    g = check_path(cfg.golden, "golden path")
    if os.path.isdir(t) and os.path.isdir(g):
        mix = [f for f in MIX_FOLDERS if os.path.isdir(os.path.join(t, f)) and os.path.isdir(os.path.join(g, f))]
        if mix:
            return _plan_mix(t, g, mix)
    return _plan_pair(t, g)


def _plan_mix(t: str, g: str, folders: List[str]) -> List[RankJob]:
    """MindSpore PyNative runs with @jit cells split their dump into graph/ and pynative/ (compare.md §1.4.2):
    each sub-layout and step common to both runs is compared on its own, reports in OUT/<folder>/<step>."""
    jobs: List[RankJob] = []
    for folder in folders:
        td, gd = os.path.join(t, folder), os.path.join(g, folder)
        common = sorted(set(os.listdir(td)) & set(os.listdir(gd)), key=_step_order)
        steps = [n for n in common if os.path.isdir(os.path.join(td, n)) and os.path.isdir(os.path.join(gd, n))]
        only = sorted((set(os.listdir(td)) ^ set(os.listdir(gd))))
        if only:
            log.warning("%s: %s only in one of the runs; skipped", folder, ", ".join(only[:5]))
        for step in steps:
            for job in _plan_pair(os.path.join(td, step), os.path.join(gd, step)):
                job.out_sub = os.path.join(folder, step)
                jobs.append(job)
    if not jobs:
        raise MsprobeError(f"the graph/pynative dirs of {t} and {g} have no step dir in common; compare the runs' "
                           f"matching graph/stepN or pynative/stepN dirs")
    return jobs


def _step_order(name: str):
    m = re.match(r"^step(\d+)$", name)
    return (0, int(m.group(1))) if m else (1, name)


def _plan_pair(t: str, g: str) -> List[RankJob]:
    tf, gf = os.path.isfile(t), os.path.isfile(g)
    if tf != gf:
        kinds = ("a file" if tf else "a directory", "a file" if gf else "a directory")
        raise MsprobeError(
            f"target path {t} is {kinds[0]} but golden path {g} is {kinds[1]}; give two dump.json files or two step/rank directories"
        )
    if tf:
        for p, side in ((t, "target"), (g, "golden")):
            if not p.endswith(".json"):
                raise MsprobeError(f"{side} path {p} is not a .json file; give the dump.json written by the dumper")
        if _is_debug(t) != _is_debug(g):
            raise MsprobeError(f"one side is a debug.json and the other is not ({t} vs {g}); compare two dump.json "
                               f"files or two debug.json files")
        from msprobe.core.dump.lifecycle import warn_if_incomplete

        warn_if_incomplete(os.path.dirname(t))
        warn_if_incomplete(os.path.dirname(g))
        return [RankJob(None, t, g)]
    # two directories: rank dirs themselves, or step dirs holding rank dirs
    t_direct = any(os.path.isfile(os.path.join(t, n)) for n in ("dump.json", "debug.json"))
    g_direct = any(os.path.isfile(os.path.join(g, n)) for n in ("dump.json", "debug.json"))
    if t_direct and g_direct:
        return [_pair_job(None, _dump_json(t, "target"), _dump_json(g, "golden"))]
    tr = _rank_dirs(t, "target")
    gr = _rank_dirs(g, "golden")
    for side, d, ranks, direct in (("target", t, tr, t_direct), ("golden", g, gr, g_direct)):
        if ranks or direct:
            continue
        steps = sorted(n for n in os.listdir(d) if STEP_RE.match(n) and os.path.isdir(os.path.join(d, n)))
        if steps:
            raise MsprobeError(
                f"{side} path {d} is a dump root with {', '.join(steps[:4])}{' ...' if len(steps) > 4 else ''}; pass one step dir, e.g. {os.path.join(d, steps[0])}"
            )
        from msprobe.core.dump.lifecycle import warn_if_incomplete

        warn_if_incomplete(d, "dump.json")      # a rank dir of a run killed mid-step: says so
        if not os.listdir(d):
            raise MsprobeError(f"{side} path {d} is an empty directory; give a step dir (with rank dirs) or a dump.json")
        raise MsprobeError(
            f"{side} path {d} has no dump.json and no rank directories (rank, rankN, procN); give a step dir or a dump.json"
        )
    if t_direct or g_direct:
        raise MsprobeError(
            f"one side is a rank dir with dump.json and the other a step dir ({t} vs {g}); give the same kind of directory on both sides"
        )
    if len(tr) == 1 and len(gr) == 1:
        pairs = [(tr[0], gr[0])]
    else:
        procs = [n for n, _ in tr + gr if n.startswith("proc")]
        if procs:
            raise MsprobeError(
                f"several proc directories found ({', '.join(procs[:4])}); process ids cannot be paired across runs: compare the proc dirs one pair at a time"
            )
        tmap = {num: name for name, num in tr}
        gmap = {num: name for name, num in gr}
        only_t = sorted(set(tmap) - set(gmap))
        only_g = sorted(set(gmap) - set(tmap))
        if only_t or only_g:
            parts = []
            if only_t:
                parts.append(f"{', '.join(tmap[k] for k in only_t)} only in the target ({t})")
            if only_g:
                parts.append(f"{', '.join(gmap[k] for k in only_g)} only in the golden ({g})")
            raise MsprobeError(
                f"ranks differ between the runs: {'; '.join(parts)}; compare runs with the same ranks, or pass one rank dir per side"
            )
        pairs = [((tmap[k], k), (gmap[k], k)) for k in sorted(tmap)]
    jobs = []
    for (tn, _), (gn, _) in pairs:
        # a single-process dump's 'rank' dir (no number) is named like a file pair: compare_result_<ts>,
        # 'compare:' and 'advisor:' (compare.md §1.5), not compare_result_rank_<ts> as if a number were missing
        label = None if tn == "rank" and len(pairs) == 1 else tn
        jobs.append(_pair_job(label, _dump_json(os.path.join(t, tn), "target"), _dump_json(os.path.join(g, gn), "golden")))
    return jobs


def _pair_job(label, tj: str, gj: str) -> RankJob:
    if _is_debug(tj) != _is_debug(gj):
        raise MsprobeError(f"the target holds {os.path.basename(tj)} ({tj}) but the golden holds {os.path.basename(gj)} "
                           f"({gj}); compare dumps of the same level (debug on both sides or on neither)")
    return RankJob(label, tj, gj)


def report_name(label: Optional[str], fmt: str, ts: str, debug: bool = False) -> str:
    """compare_result[_<rank dir>]_<ts>.<fmt> (debug_ first for debug.json); no rank part for a file pair
    or a single-process dump."""
    middle = f"_{label}" if label else ""
    return f"{'debug_' if debug else ''}compare_result{middle}_{ts}.{fmt}"


def render_report(rep: Report, path: str, fmt: str) -> None:
    """Write the report's file at ``path`` (not atomic: :func:`write_report` gives it a temporary name)."""
    if fmt == "csv":
        from msprobe.core.io.csvfile import write_csv

        write_csv(path, rep.header, rep.columns)
        return
    from msprobe.core.io.xlsx import RELATIVE_ERROR_COLUMNS, write_xlsx

    styles = rep.styles if (rep.styles is not None and rep.styles.any()) else None
    # relative errors ("12.5%" text in the report) become percent-formatted numbers: sortable in Excel
    write_xlsx(path, rep.header, rep.columns, row_styles=styles, percent_columns=RELATIVE_ERROR_COLUMNS)


def write_report(rep: Report, path: str, fmt: str, defer: bool = False):
    """Write the report atomically; returns the path actually written (never overwrites), or with ``defer``
    the finished file still under its temporary name (fileio.PendingWrite)."""
    return atomic_write(path, lambda tmp: render_report(rep, tmp, fmt), defer=defer)


def write_rendered(data: bytes, path: str, defer: bool = False):
    """:func:`write_report` for a report rendered elsewhere (a Ray task): its bytes, written atomically."""
    def put(tmp: str) -> None:
        with open(tmp, "wb") as f:
            f.write(data)

    return atomic_write(path, put, defer=defer)


@dataclass
class RankOutput:
    """What a Ray rank task (:func:`compare_rank`) sends back: the report rendered to its file's bytes, the
    report itself (slim when the driver needs no more), the advice, the layer-mapping rows."""
    report: Report
    seconds: float
    data: bytes
    advice: object = None
    layer_rows: object = None


def run_job(cfg: CompareConfig, job: RankJob, out_dir: str, ts: str,
            progress: Optional[Callable[..., None]] = None, advisor: bool = False,
            keep_tables: bool = True, prepared: Optional[RankOutput] = None) -> RankResult:
    """Compare one pair and write its report. ``progress(stage, done, total, unit=None, detail=None)`` is told
    the stages read, match, metrics (in compare_dumps) and write (msprobe.core.progress). ``advisor``: also
    write the advisor file; both files are written completely, then named one right after the other
    (advisor first), so a kill leaves both or neither (docs/reliability.md "Outputs"). ``keep_tables=False``:
    the result holds :meth:`Report.slim` (enough for the console summary; the advice is computed here) instead
    of the whole report, unless the advisor failed here (the CLI then runs it again on the whole report).
    ``prepared``: the pair was compared, its report rendered and advised elsewhere (a Ray task,
    :func:`compare_rank`): only the files are written here."""
    start = time.perf_counter() - (prepared.seconds if prepared is not None else 0.0)
    if job.out_sub:
        out_dir = ensure_output_dir(os.path.join(out_dir, job.out_sub))
    if prepared is not None:
        rep = prepared.report
    else:
        rep = compare_dumps(cfg, job.target_json, job.golden_json, progress=progress)
    path = unique_path(os.path.join(out_dir, report_name(job.label, cfg.fmt, ts, _is_debug(job.target_json))))
    if progress:
        progress("write", 0, rep.rows, "rows", cfg.fmt)
    from msprobe.core.progress import counting_rows

    paired = advisor and not job.out_sub    # (graph/pynative layout: the CLI writes the advisor files)
    with counting_rows((lambda done: progress("write", done, rep.rows, "rows", cfg.fmt)) if progress else None):
        if prepared is not None:
            written = write_rendered(prepared.data, path, defer=paired)
        else:
            written = write_report(rep, path, cfg.fmt, defer=paired)
    advice, advisor_path = None, ""
    if paired:
        from msprobe.core.advisor.advisor import advise, write_advice
        from msprobe.core.fileio import commit_together

        try:
            try:
                advice = prepared.advice if prepared is not None and prepared.advice is not None else \
                    advise(rep, label=job.label)
            except Exception:  # noqa: BLE001 - an advisor bug must not cost the report: the CLI runs the
                advice = None  # advisor again after the reports and reports the error there
            pending = write_advice(advice, out_dir, job.label, defer=True) if advice is not None else None
        except BaseException:
            written.discard()
            raise
        if pending is None:
            written = written.commit()
        else:
            advisor_path, written = commit_together([pending, written])
    elif advisor and not keep_tables:
        # graph/pynative layout: the CLI writes the advisor files, from the advice computed here on the whole report
        from msprobe.core.advisor.advisor import advise

        try:
            advice = prepared.advice if prepared is not None and prepared.advice is not None else \
                advise(rep, label=job.label)
        except Exception:  # noqa: BLE001 - reported by the CLI, which runs the advisor again
            advice = None
    layer_rows = prepared.layer_rows if prepared is not None else rep.layer_rows
    if layer_rows is not None:
        from msprobe.core.compare.mapping import write_data_mapping

        middle = f"_{job.label}" if job.label else ""
        side = write_data_mapping(layer_rows, os.path.join(out_dir, f"data_mapping{middle}_{ts}.yaml"))
        log.info("layer mapping: %d rows paired; saved as %s (reusable with -dm)", len(layer_rows), side)
    if progress:
        progress("write", rep.rows, rep.rows, "rows", os.path.basename(written))
    if not keep_tables and (not advisor or advice is not None):
        rep = rep.slim()
    return RankResult(job.label, written, rep, time.perf_counter() - start, job.target_json, job.golden_json,
                      job.out_sub, advice, advisor_path)


def job_label(job: RankJob) -> Optional[str]:
    """How a job is named in progress lines: its rank dir, under its graph/pynative step for that layout."""
    return os.path.join(job.out_sub, job.label or "") if job.out_sub else job.label


def _end(bar, ok: bool) -> None:
    """Finish (ok) or abandon a progress job; older progress objects only have close()."""
    if bar is None:
        return
    end = getattr(bar, "finish" if ok else "abandon", None) or getattr(bar, "close", None)
    if end is not None:
        end()


def compare_rank(cfg: CompareConfig, job: RankJob, _emit=None, fallback=None, advisor: bool = False,
                 keep_tables: bool = True, out_dir: str = "", ts: str = "", probe: str = ""):
    """A Ray task (msprobe.core.executor): compare one pair where its dump lies.

    When this task sees the driver's ``probe`` file (the output folder is on storage shared with the driver,
    or the task runs on the driver's machine) it writes the report and advisor files itself, as a local
    worker does (:func:`run_job`), and returns the :class:`RankResult`. Otherwise it renders the report file
    and computes the advice here and returns a :class:`RankOutput`; the driver writes the bytes
    (:func:`run_job` with ``prepared``). ``fallback``: the tensor loader the driver registered for formats
    the fast reader does not know."""
    import tempfile

    start = time.perf_counter()
    if fallback is not None:
        from msprobe.core.io import tensors

        tensors.register_fallback(fallback)
    if probe and out_dir and os.path.exists(probe):
        return run_job(cfg, job, out_dir, ts, advisor=advisor, keep_tables=keep_tables)
    rep = compare_dumps(cfg, job.target_json, job.golden_json)
    with tempfile.TemporaryDirectory(prefix="msprobe-report-") as d:
        tmp = os.path.join(d, f"report.{cfg.fmt}")
        render_report(rep, tmp, cfg.fmt)
        with open(tmp, "rb") as f:
            data = f.read()
    advice = None
    if advisor:
        from msprobe.core.advisor.advisor import advise

        try:
            advice = advise(rep, label=job.label)
        except Exception:  # noqa: BLE001 - the driver runs the advisor again on the whole report and says why
            advice = None
    layer_rows = rep.layer_rows
    if not keep_tables and (not advisor or advice is not None):
        rep = rep.slim()
    return RankOutput(rep, time.perf_counter() - start, data, advice, layer_rows)


@dataclass
class RankFailure:
    """A rank whose compare failed (--ray goes on with the other ranks): its name and the one-line reason."""
    label: Optional[str]
    reason: str


def run_compare(cfg: CompareConfig, progress_factory=None, advisor: bool = False,
                keep_tables: bool = True, failures: Optional[List[RankFailure]] = None) -> List[RankResult]:
    """Plan, run every rank (in parallel processes when there are several), write the reports.

    ``keep_tables=False``: each result holds the slim report (:meth:`Report.slim`, see :func:`run_job`), so
    memory does not grow with the number of ranks; ``msprobe compare`` keeps the whole tables only for -da.

    ``progress_factory(label)`` gives each rank's progress callable (msprobe.core.progress.Progress.job).
    ``advisor``: each report is named together with its advisor file (see :func:`run_job`).
    Anything going wrong, Ctrl-C included, stops the rank workers at once and leaves no report behind.

    ``cfg.backend`` a Ray one (--ray): one Ray task per rank, reports written here as the ranks come back;
    a rank that fails is added to ``failures`` (when given) and the other ranks go on."""
    from msprobe.core.executor import is_ray

    jobs = plan(cfg)
    out_dir = ensure_output_dir(cfg.output_dir)
    ts = time.strftime("%Y%m%d%H%M%S")
    from msprobe.core.resources import cap_jobs

    # -j never beyond the cores nor the ranks (a single rank keeps -j for its tensor pairs)
    workers = cap_jobs(cfg.jobs, len(jobs), "ranks") if len(jobs) > 1 else 1
    results: List[RankResult] = []
    bars = {i: progress_factory(job_label(job)) for i, job in enumerate(jobs)} if progress_factory else {}
    try:
        if is_ray(cfg.backend):
            return _run_ray(cfg, jobs, out_dir, ts, bars, results, advisor, keep_tables, failures,
                            progress_factory)
        if len(jobs) == 1 or workers <= 1:
            for i, job in enumerate(jobs):
                results.append(run_job(cfg, job, out_dir, ts, progress=bars.get(i), advisor=advisor,
                                       keep_tables=keep_tables))
                _end(bars.get(i), True)
            return results
        return _run_parallel(cfg, jobs, out_dir, ts, workers, bars, results, advisor, keep_tables)
    except BaseException:
        for bar in bars.values():
            if not getattr(bar, "finished", False):
                _end(bar, False)
        # a failed run leaves no reports behind: remove what the ranks that succeeded wrote
        for res in results:
            for p in (res.path, res.advisor_path):
                try:
                    if p:
                        os.unlink(p)
                except OSError:
                    pass
        raise


def _run_parallel(cfg, jobs, out_dir, ts, workers, bars, results, advisor=False, keep_tables=True):
    """Ranks in worker processes (msprobe.core.executor, local backend): their progress comes back as events;
    Ctrl-C or a failing rank terminates the others at once, and their temporary and finished files are removed."""
    from msprobe.core.executor import run_tasks

    def task(job, emit):
        return run_job(cfg, job, out_dir, ts, progress=lambda stage, done=0, total=None, unit=None, detail=None:
                       emit(stage, done, total, unit, detail), advisor=advisor, keep_tables=keep_tables)

    def on_event(i, *args):
        bar = bars.get(i)
        if bar is not None:
            bar(*args)

    def on_result(i, res):
        results.append(res)              # known at once: removed again if a later rank fails
        _end(bars.get(i), True)

    dirs = sorted({out_dir} | {os.path.join(out_dir, job.out_sub) for job in jobs if job.out_sub})
    results[:] = run_tasks(task, jobs, workers, on_event=on_event, on_result=on_result, remove_written=True,
                           name="msprobe-compare", temp_dirs=dirs)          # in job order
    return results


DRIVER_WRITES_ENV = "MSPROBE_RAY_DRIVER_WRITES"   # "1": the driver writes every report (no in-place writing)


def _make_probe(out_dir: str) -> str:
    """An empty file in the output folder: a Ray task that sees it writes its report there itself."""
    from msprobe.core.fileio import TEMP_PREFIX, temp_tag
    import tempfile

    try:
        fd, path = tempfile.mkstemp(prefix=f"{TEMP_PREFIX}{temp_tag()}-probe-", suffix=".tmp", dir=out_dir)
    except OSError:
        return ""
    os.close(fd)
    return path


def _output_dirs(out_dir: str, jobs) -> List[str]:
    return sorted({os.path.join(out_dir, j.out_sub) if j.out_sub else out_dir for j in jobs})


def _listing(out_dir: str, jobs) -> dict:
    """The names already in each folder the ranks write into (what a stopped run must not remove)."""
    seen = {}
    for d in _output_dirs(out_dir, jobs):
        try:
            seen[d] = set(os.listdir(d))
        except OSError:
            seen[d] = set()
    return seen


def _remove_new_outputs(out_dir: str, jobs, before: dict) -> None:
    """Remove the files that appeared since ``before`` under the names the ``jobs``' ranks write (report,
    advisor, layer mapping): what tasks stopped by a Ctrl-C may have placed in the shared output folder."""
    for d in _output_dirs(out_dir, jobs):
        labels = {j.label for j in jobs if (os.path.join(out_dir, j.out_sub) if j.out_sub else out_dir) == d}
        heads = tuple(f"{kind}{'_' + lab if lab else ''}_" for lab in labels
                      for kind in ("compare_result", "debug_compare_result", "advisor", "data_mapping"))
        try:
            names = os.listdir(d)
        except OSError:
            continue
        for name in names:
            if name not in before.get(d, ()) and name.startswith(heads):
                try:
                    os.unlink(os.path.join(d, name))
                except OSError:
                    pass


def _run_ray(cfg, jobs, out_dir, ts, bars, results, advisor, keep_tables, failures, progress_factory):
    """One Ray task per rank (:func:`compare_rank`, reading the dumps where they lie); each report comes back
    as columns and is written here by :func:`run_job` as soon as it arrives (the writers of the local path:
    the same bytes). A failing rank is logged and recorded in ``failures`` (raised when that is None)."""
    import functools

    from msprobe.core.executor import run_tasks

    done = {"n": 0, "failed": 0, "rows": 0, "t0": time.perf_counter()}
    overall = progress_factory("ranks") if progress_factory and len(jobs) > 1 else None
    order = {}

    def tick() -> None:
        if overall is not None:
            rate = done["rows"] / max(1e-9, time.perf_counter() - done["t0"])
            overall("ray", done["n"] + done["failed"], len(jobs), "ranks",
                    f"{done['failed']} failed, {rate:,.0f} rows/s")

    def on_result(i, value):
        if isinstance(value, RankResult):       # written by the task into the shared output folder
            res = value
        else:
            res = run_job(cfg, jobs[i], out_dir, ts, progress=bars.get(i), advisor=advisor,
                          keep_tables=keep_tables, prepared=value)
        rep = res.report
        order[id(res)] = i
        results.append(res)          # known at once: removed again if the run stops
        done["n"] += 1
        done["rows"] += rep.rows
        _end(bars.get(i), True)
        tick()

    def on_error(i, exc):
        if failures is None:
            raise exc
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        label = job_label(jobs[i]) or os.path.basename(jobs[i].target_json)
        log.error("compare %s failed: %s", label, reason)
        failures.append(RankFailure(label, reason))
        done["failed"] += 1
        _end(bars.get(i), False)
        tick()

    def on_late(_i, value):
        if isinstance(value, RankResult):       # written in place just before the run stopped: removed
            for p in (value.path, value.advisor_path):
                try:
                    if p:
                        os.unlink(p)
                except OSError:
                    pass

    from msprobe.core.io import tensors

    probe = "" if os.environ.get(DRIVER_WRITES_ENV, "").strip() in ("1", "true", "yes") else _make_probe(out_dir)
    before = _listing(out_dir, jobs) if probe else {}
    task = functools.partial(compare_rank, cfg, fallback=getattr(tensors, "_fallback", None), advisor=advisor,
                             keep_tables=keep_tables, out_dir=out_dir, ts=ts, probe=probe)
    tick()
    try:
        run_tasks(task, jobs, len(jobs), backend=cfg.backend, on_result=on_result, on_error=on_error,
                  collect=False, name="msprobe-compare", on_late=on_late)
    except BaseException:
        _end(overall, False)
        from msprobe.core.fileio import clean_stale_temps

        clean_stale_temps(out_dir)          # what a cancelled task was writing there
        if probe:
            # a task killed by its cancel after naming its files, before returning them: never handed over,
            # so neither on_result nor on_late knows them; what is new here under a stopped rank's names goes
            handed = {order[id(r)] for r in results if id(r) in order}
            _remove_new_outputs(out_dir, [j for i, j in enumerate(jobs) if i not in handed], before)
        raise
    finally:
        if probe:
            try:
                os.unlink(probe)
            except OSError:
                pass
    _end(overall, True)
    results.sort(key=lambda r: order[id(r)])           # job order, as the local backend gives
    return results
