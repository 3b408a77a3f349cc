"""run_overflow_check: for every forward API whose dumped output overflowed (inf/nan), tell a normal
overflow from an abnormal one (framework-free driver).

An API "overflowed" when a tensor of its forward output has an inf/nan Max or Min in dump.json (or, in a
tensor dump whose output records have no statistics, when the recorded output file holds one: the checker
looks).  Each such API is rebuilt from the dump (the recorded tensors, else random data following the
statistics, as run_ut does: :func:`msprobe.core.acc_check.plan.build_plan`) and run again on the device and
on the CPU in higher precision (the run_ut checker's runtime, in the worker processes of
:mod:`msprobe.core.acc_check.pool`).  The benchmark is rounded to the dtype of the recorded output:

* **normal overflow**: the rounded benchmark overflows too at every output that overflowed in the dump:
  the true result does not fit the dtype (or an input already held inf/nan);
* **abnormal overflow**: some output that overflowed in the dump is finite in the rounded benchmark: the
  device produced inf/nan where the true result fits.

The checker target ("module:function") takes a task ``{"name", "forward", "overflowed", "probe"}`` and
returns ``{"status": "normal"|"abnormal"|"no overflow"|"SKIP", "message", "outputs": [...]}``.
"""

from __future__ import annotations

import csv
import io
import logging
import os
import time
from dataclasses import dataclass, field
from typing import Dict, List, Optional

from msprobe.core.acc_check.plan import _tensor_records, build_plan
from msprobe.core.acc_check.pool import PoolInitError, run_pool
from msprobe.core.acc_check.runner import check_devices
from msprobe.core.dump.records import overflow_in
from msprobe.core.errors import MsprobeError
from msprobe.core.fileio import atomic_write, ensure_output_dir
from msprobe.core.progress import Progress, display_wanted

log = logging.getLogger("msprobe")

HEADER = ["API Name", "Overflowed Outputs", "Input Overflow", "Device Rerun Overflow", "Bench Overflow", "Result",
          "Message"]
NORMAL, ABNORMAL, NO_OVERFLOW, SKIP = "normal", "abnormal", "no overflow", "SKIP"


@dataclass
class OverflowOptions:
    api_info: str
    out_path: Optional[str] = None       # None: no file (the reference writes none), only the log lines
    jobs: int = 1
    devices: List[int] = field(default_factory=lambda: [0])
    timeout: float = 300.0
    data_mode: str = "auto"
    jit_compile: bool = False
    quiet: bool = False
    seed: int = 1234
    command: str = "run_overflow_check"


@dataclass
class OverflowSummary:
    total: int = 0
    overflowed: int = 0
    normal: int = 0
    abnormal: int = 0
    skipped: int = 0
    rows: List[List[str]] = field(default_factory=list)
    result_path: Optional[str] = None


def _is_over(rec: dict) -> Optional[bool]:
    """True/False from the tensor's Max/Min; None when it has no statistics (a tensor dump may not)."""
    values = [rec.get("Max"), rec.get("Min")]
    if all(v is None for v in values):
        return None
    return overflow_in(values)


def output_overflow(fwd: dict):
    """(indexes of the forward outputs that overflowed by the statistics, indexes without statistics that
    have a recorded file) over the flattened tensor outputs (the order the runtime flattens them)."""
    over, probe = [], []
    for k, rec in enumerate(_tensor_records(fwd.get("output"))):
        state = _is_over(rec)
        if state:
            over.append(k)
        elif state is None and isinstance(rec.get("data_name"), str):
            probe.append(k)
    return over, probe


def input_overflow(fwd: dict) -> bool:
    return any(_is_over(r) for r in _tensor_records([fwd.get("input_args"), fwd.get("input_kwargs")]))


def run(opts: OverflowOptions, target: str = "msprobe.pytorch.acc_check.overflow:make_checker") -> OverflowSummary:
    level = log.level
    if opts.quiet:
        log.setLevel(max(logging.WARNING, level))
    try:
        return _run(opts, target)
    finally:
        log.setLevel(level)


def _run(opts: OverflowOptions, target: str) -> OverflowSummary:
    check_devices(opts.devices)
    if opts.jobs < 1 or opts.jobs > 64:
        raise MsprobeError(f"the number of processes must be between 1 and 64, not {opts.jobs}")
    if not opts.timeout > 0:  # nan too (it would never time out, and the pool would spin)
        raise MsprobeError(f"--timeout must be a positive number of seconds, not {opts.timeout:g}")
    plan = build_plan(opts.api_info, data_mode=opts.data_mode)
    if plan.framework != "pytorch":
        raise MsprobeError(f"dump.json {plan.dump_json} is a {plan.framework} dump: {opts.command} checks PyTorch dumps "
                           f"only (as the reference); for a MindSpore dump use run_ut / acc_check")
    summary = OverflowSummary(total=len(plan.items))
    rows: Dict[str, List[str]] = {}
    tasks = []
    for it in plan.items:
        if it.forward is None:
            rows[it.name] = [it.name, "", "", "", "", SKIP, it.skip or "no forward record: nothing to re-run"]
            continue
        over, probe = output_overflow(it.forward)
        inp = "yes" if input_overflow(it.forward) else "no"
        if not over and not (probe and plan.real_data):
            rows[it.name] = [it.name, "", inp, "", "", NO_OVERFLOW, ""]
            continue
        if it.skip:
            rows[it.name] = [it.name, _idx(over), inp, "", "", SKIP, it.skip]
            continue
        tasks.append({"name": it.name, "forward": it.forward, "overflowed": over, "probe": probe,
                      "input_overflow": inp == "yes"})
    probed = sum(1 for t in tasks if not t["overflowed"])
    log.info("%s: %d APIs in %s, %d to re-run (%d with an inf/nan output by the statistics, %d whose recorded output "
             "file is looked at)", opts.command, len(plan.items), plan.dump_json, len(tasks), len(tasks) - probed, probed)
    init = {"devices": opts.devices, "real_data": plan.real_data, "seed": opts.seed, "dump_json": plan.dump_json,
            "jit_compile": opts.jit_compile}
    names = [t["name"] for t in tasks]
    by_name = {t["name"]: t for t in tasks}
    finished = [0]

    def on_result(index: int, outcome) -> None:
        kind, value = outcome
        name = names[index]
        task = by_name[name]
        if kind != "ok":
            text = str(value).strip().splitlines()[0] if str(value).strip() else kind
            log.warning("Run %s UT Error: %s", name, text)
            value = {"status": SKIP, "message": f"Run {name} UT Error: {text}"}
        status = value["status"]
        over = value.get("overflowed", task["overflowed"])
        rows[name] = [name, _idx(over), "yes" if task["input_overflow"] else "no", _idx(value.get("device_overflow")),
                      _idx(value.get("bench_overflow")), status, value.get("message") or ""]
        if status == NORMAL:
            log.warning("The %s overflow is a normal overflow.", name)
        elif status == ABNORMAL:
            log.warning("The %s overflow is an abnormal overflow.", name)
        elif status == SKIP:
            log.warning("%s: %s", name, value.get("message"))
        finished[0] += 1
        job("check", finished[0], len(tasks), unit="APIs", detail=name)

    with Progress(opts.command, display=display_wanted(quiet=opts.quiet)) as prog:
        job = prog.job()
        job("check", 0, len(tasks), unit="APIs")
        if tasks:
            try:
                run_pool(target, init, tasks, opts.jobs, opts.timeout, on_result)
            except PoolInitError as exc:
                raise MsprobeError(f"{opts.command}: the checker processes could not start: {exc}")
        job.finish()
    summary.rows = [rows[it.name] for it in plan.items]
    summary.overflowed = sum(1 for r in summary.rows if r[5] in (NORMAL, ABNORMAL)
                             or (r[5] == SKIP and (r[1] or r[0] in by_name)))
    summary.normal = sum(1 for r in summary.rows if r[5] == NORMAL)
    summary.abnormal = sum(1 for r in summary.rows if r[5] == ABNORMAL)
    summary.skipped = sum(1 for r in summary.rows if r[5] == SKIP)
    if opts.out_path:
        summary.result_path = _write(ensure_output_dir(opts.out_path), summary.rows)
    print(f"{opts.command}: {summary.total} APIs, {summary.overflowed} with an inf/nan output: {summary.normal} normal, "
          f"{summary.abnormal} abnormal, {summary.skipped} skipped"
          + (f"; result {summary.result_path}" if summary.result_path else ""))
    return summary


def _idx(values) -> str:
    if values is None:
        return ""
    return " ".join(f"output.{k}" for k in values) if values else "none"


def _write(out_dir: str, rows: List[List[str]]) -> str:
    ts = time.strftime("%Y%m%d%H%M%S", time.localtime())
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\r\n")
    writer.writerow(HEADER)
    writer.writerows([[c if c != "" else " " for c in r] for r in rows])
    data = ("\ufeff" + buf.getvalue()).encode("utf-8")

    def write(tmp: str) -> None:
        with open(tmp, "wb") as fh:
            fh.write(data)

    return atomic_write(os.path.join(out_dir, f"overflow_check_result_{ts}.csv"), write)
