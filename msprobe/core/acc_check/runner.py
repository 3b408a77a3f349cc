"""Drive one offline pre-check: plan -> worker processes -> result/details CSVs in dump order -> summary.

Framework-free: the framework part is the checker the workers build from ``target`` ("module:function",
see :mod:`msprobe.core.acc_check.pool`). A checker takes a task dict (``name``, ``forward``,
``backward``, ``backward_skip``) and returns ``{"forward", "backward", "message", "details"}`` with the
reference's status strings and detail rows keyed by the details CSV's column names (plus private keys
starting with ``_`` for the summary: ``_std``, ``_metric``, ``_ratio``, ``_severity``).
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass, field
from typing import Dict, List, Optional

from msprobe.core.acc_check.plan import Plan, build_plan, load_run_ut_config
from msprobe.core.acc_check.pool import PoolInitError, run_pool
from msprobe.core.acc_check.results import ResultFiles, free_timestamp, open_resume, worst_status
from msprobe.core.errors import MsprobeError
from msprobe.core.fileio import ensure_output_dir, make_dirs
from msprobe.core.progress import Progress, display_wanted

log = logging.getLogger("msprobe")

TITLES = {"binary": "Binary Equality Standard", "absolute": "Absolute Threshold Standard",
          "ulp": "ULP error Standard", "thousandth": "Thousandth Standard", "benchmark": "Benchmark Standard"}


@dataclass
class Options:
    api_info: str
    out_path: str = "./"
    save_error_data: bool = False
    jobs: int = 1
    devices: List[int] = field(default_factory=lambda: [0])
    csv_path: Optional[str] = None
    filter_api: bool = False
    config: Optional[str] = None
    timeout: float = 300.0
    data_mode: str = "auto"
    jit_compile: bool = False
    command: str = "run_ut"
    quiet: bool = False
    seed: int = 1234
    framework: Optional[str] = None   # -f: pytorch / mindspore; None: the dump's "framework" field decides
    benchmark: str = "same"           # MindSpore dumps: "same" (the MindSpore API in higher precision) or "pytorch"


@dataclass
class Summary:
    total: int = 0
    resumed: int = 0
    passed: int = 0
    warning: int = 0
    error: int = 0
    skipped: int = 0
    failed: int = 0          # could not be run (an exception, a timeout, a dead worker): written as SKIP
    judged: int = 0          # results received from the workers in this run
    worst: List[Dict] = field(default_factory=list)
    result_path: str = ""
    details_path: str = ""
    error_data_dir: Optional[str] = None


def check_devices(devices: List[int]) -> List[int]:
    if len(set(devices)) != len(devices):
        raise MsprobeError("-d: device id must be unique")
    if any(d < 0 for d in devices):
        raise MsprobeError("-d: device id must be greater than or equal to 0")
    return devices


#: the checker of each framework (the pool's target), chosen by the dump's "framework" field
CHECKERS = {"pytorch": "msprobe.pytorch.acc_check.checker:make_checker",
            "mindspore": "msprobe.mindspore.acc_check.checker:make_checker"}


def run(opts: Options, target: Optional[str] = None) -> Summary:
    """Check every API of ``opts.api_info``; see the module docstring.  ``target``: the checker
    ("module:function"); None: the one of the dump's framework (:data:`CHECKERS`).

    ``opts.quiet`` (-q): no live display and no info lines (the file names, the stage log, the worst
    outputs): only warnings, errors and the one-line summary."""
    if not opts.quiet:
        return _run(opts, target)
    level = log.level
    log.setLevel(max(logging.WARNING, level))
    try:
        return _run(opts, target)
    finally:
        log.setLevel(level)


def _run(opts: Options, target: Optional[str]) -> Summary:
    check_devices(opts.devices)
    if opts.jobs < 1 or opts.jobs > 64:
        raise MsprobeError(f"the number of processes must be between 1 and 64, not {opts.jobs}")
    if not opts.timeout > 0:  # nan too (it would never time out, and the pool would spin)
        raise MsprobeError(f"--timeout must be a positive number of seconds, not {opts.timeout:g}")
    cfg = load_run_ut_config(opts.config)
    started = time.perf_counter()
    plan = build_plan(opts.api_info, cfg, filter_api=opts.filter_api, data_mode=opts.data_mode)
    read_seconds = time.perf_counter() - started
    if opts.framework and opts.framework != plan.framework:
        raise MsprobeError(f"dump.json {plan.dump_json} is a {plan.framework} dump (its \"framework\" field), but "
                           f"-f {opts.framework} was given; use -f {plan.framework} (or acc_check, which reads it)")
    if opts.benchmark == "pytorch" and plan.framework != "mindspore":
        raise MsprobeError(f"--bench pytorch is for MindSpore dumps; dump.json {plan.dump_json} is a {plan.framework} "
                           f"dump, whose benchmark is PyTorch already")
    target = target or CHECKERS[plan.framework]
    created = None  # the output folder, when this run made it (removed again if the run does not start)
    if opts.csv_path:
        files = open_resume(opts.csv_path, dump_apis=plan.names, dump_json=plan.dump_json)
    else:
        created = None if os.path.isdir(opts.out_path or "./") else os.path.abspath(opts.out_path)
        out = ensure_output_dir(opts.out_path or "./")
        files = ResultFiles.create(out, free_timestamp(out))
    log.info("%s: read 1 dump (%d APIs, %d to run) in %.2f s", opts.command, len(plan.items), len(plan.runnable),
             read_seconds)  # after every input check: a bad input is one line
    summary = Summary(total=len(plan.items), result_path=files.result_path, details_path=files.details_path)
    error_dir = None
    try:
        if opts.save_error_data:
            base = cfg.error_data_path if opts.config and cfg.error_data_path != "./" else os.path.dirname(files.result_path)
            error_dir = os.path.join(os.path.abspath(base), f"ut_error_data{files.timestamp}")
            make_dirs(error_dir)
            summary.error_data_dir = error_dir
        _execute(plan, files, opts, error_dir, summary, target)
    except MsprobeError:
        files.close()
        if not opts.csv_path and not summary.judged:  # the run did not start: leave nothing behind
            for path in (files.result_path, files.details_path):
                try:
                    os.unlink(path)
                except OSError:
                    pass
            for folder in (error_dir, created):
                if folder:
                    try:
                        os.rmdir(folder)
                    except OSError:
                        pass
        raise
    finally:
        files.close()
    return summary


def _execute(plan: Plan, files: ResultFiles, opts: Options, error_dir: Optional[str], summary: Summary,
             target: str) -> None:
    items = plan.items
    todo = [it for it in items if it.name not in files.done]
    summary.resumed = len(items) - len(todo)
    tasks = [{"name": it.name, "forward": it.forward, "backward": it.backward, "backward_skip": it.backward_skip}
             for it in todo if it.skip is None]
    word = "acc_check" if opts.command in ("acc_check", "multi_acc_check") else "UT"
    if not opts.quiet:
        print(f"{opts.command}: {len(items)} APIs in {plan.dump_json} ({'real' if plan.real_data else 'random'} "
              f"data): {len(tasks)} to run, {sum(1 for it in todo if it.skip)} skipped"
              + (f", {summary.resumed} already in {files.result_path}" if summary.resumed else ""))
        print(f"{word} task result will be saved in {files.result_path}")
        print(f"{word} task details will be saved in {files.details_path}")
        if error_dir:
            print(f"{word} task error_data will be saved in {error_dir}")
    order = [it.name for it in todo]
    ready: Dict[str, Dict] = {it.name: {"forward": "SKIP", "backward": "SKIP", "message": it.skip, "details": []}
                              for it in todo if it.skip}
    position = [0]
    judged = [0]

    def flush() -> None:
        while position[0] < len(order) and order[position[0]] in ready:
            name = order[position[0]]
            res = ready.pop(name)
            files.write_api(name, res["forward"], res["backward"], res.get("message") or "", res["details"])
            _count(summary, res)
            position[0] += 1

    flush()
    names = [t["name"] for t in tasks]
    init = {"devices": opts.devices, "real_data": plan.real_data, "error_dir": error_dir, "seed": opts.seed,
            "workers": opts.jobs, "dump_json": plan.dump_json, "jit_compile": opts.jit_compile,
            "benchmark": opts.benchmark}
    with Progress(opts.command, display=display_wanted(quiet=opts.quiet)) as prog:
        job = prog.job()
        job("check", 0, len(tasks), unit="APIs")

        def on_result(index: int, outcome) -> None:
            kind, value = outcome
            name = names[index]
            if kind == "ok":
                res = value
            else:
                text = str(value).strip().splitlines()[0] if str(value).strip() else kind
                log.warning("Run %s %s Error: %s", name, word, text)
                res = {"forward": "SKIP", "backward": "SKIP", "message": f"Run {name} {word} Error: {text}",
                       "details": [], "failed": True}
            ready[name] = res
            judged[0] += 1
            summary.judged += 1
            job("check", judged[0], len(tasks), unit="APIs", detail=name)
            flush()

        try:
            run_pool(target, init, tasks, opts.jobs, opts.timeout, on_result)
        except PoolInitError as exc:
            raise MsprobeError(f"{opts.command}: the checker processes could not start: {exc}")
        flush()
        job.finish()
    _print_summary(summary, word, opts.quiet)


def _count(summary: Summary, res: Dict) -> None:
    fwd, bwd = res["forward"], res["backward"]
    if res.get("failed"):
        summary.failed += 1
        summary.skipped += 1
        return
    overall = worst_status([fwd, bwd]) if fwd != "SKIP" else "SKIP"
    if overall == "SKIP":
        summary.skipped += 1
    elif overall == "error":
        summary.error += 1
    elif overall == "Warning":
        summary.warning += 1
    else:
        summary.passed += 1
    for d in res["details"]:
        if d.get("Status") in ("error", "Warning"):
            summary.worst.append(d)
    summary.worst.sort(key=lambda d: (d.get("Status") == "error", d.get("_severity") or 0.0), reverse=True)
    del summary.worst[5:]


def _print_summary(s: Summary, word: str, quiet: bool = False) -> None:
    done = s.passed + s.warning + s.error + s.skipped
    print(f"{word} task completed: {done} APIs checked"
          + (f" ({s.resumed} more from the resumed run)" if s.resumed else "")
          + f": {s.passed} passed, {s.warning} warning, {s.error} error, {s.skipped} skipped"
          + (f" ({s.failed} failed to run)" if s.failed else "")
          + (f"; result {s.result_path}" if quiet else ""))
    if quiet:
        return
    if s.worst:
        print("worst outputs:")
        for d in s.worst:
            ratio = d.get("_ratio")
            if d.get("_metric") is None:  # decided before any metric (types, shapes, counts)
                print(f"  {d['API Name']}  {d['Status']}  {d.get('Message') or ''}")
                continue
            what = f"{d.get('_metric')} " + (f"ratio {ratio:.4g}" if isinstance(ratio, float) else
                                              f"{d.get('_value'):.4g}" if isinstance(d.get("_value"), float) else "")
            print(f"  {d['API Name']}  {d['Status']}  {TITLES.get(d.get('_std'), d.get('_std'))}: {what}")
    print(f"{word} task result csv is saved in {s.result_path}")
    print(f"{word} task details csv is saved in {s.details_path}")
