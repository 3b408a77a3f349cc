"""Monitor CSV output -> TensorBoard event files (the reference's ``csv2tensorboard_by_step``, spec 4.10).

    from msprobe.pytorch.monitor.csv2tb import csv2tensorboard_by_step      # the reference's import path
    csv2tensorboard_by_step(monitor_path, time_start=None, time_end=None, process_num=1,
                            data_type_list=None, output_dirpath=None)
    msprobe csv2tensorboard -d MONITOR_OUTPUT_DIR [-o OUT] [--time_start Nov25_14-00-00] [--types actv,...]

Reads the rank folders ``{time}-rank{R}-{id}`` of ``monitor_path`` whose time tag lies in the closed range,
and for each rank and data type every ``{type}_{a}-{b}.csv``; writes ``{out}/rank{R}/{type}/events...`` with
scalar tags ``vp{vpp}:{name}[:micro{m}]/{op}`` (numeric ops only), global step = the ``step`` column.
Default output ``{monitor_path}/{time}-csv2tensorboard_by_step``.  Needs the ``tensorboard`` package only.
"""

from __future__ import annotations

import csv
import datetime
import logging
import math
import os
import re

from msprobe.core.errors import MsprobeError
from msprobe.core.monitor.config import NUMERIC_OPS
from msprobe.core.monitor.names import RANK_DIR, TIME_FORMAT, time_tag
from msprobe.core.monitor.writers import TensorBoardWriter, _tb_modules

log = logging.getLogger("msprobe")

ALL_DATA_TYPES = ("actv", "actv_grad", "exp_avg", "exp_avg_sq", "grad_unreduced", "grad_reduced", "param_origin",
                  "param_updated")
_CSV = re.compile(r"^(.*)_(\d+)-(\d+)\.csv$")


def _time(tag, what):
    try:
        return datetime.datetime.strptime(tag, TIME_FORMAT)
    except (TypeError, ValueError):
        raise MsprobeError(f"illegal timestamp: {what} {tag!r} (expected like 'Nov25_14-04-12')") from None


def rank_dirs(monitor_path, time_start=None, time_end=None) -> dict:
    """{rank: folder} of the rank folders whose time tag is in [time_start, time_end]."""
    if not os.path.isdir(monitor_path):
        raise MsprobeError(f"monitor output {monitor_path}: not a folder; give the MONITOR_OUTPUT_DIR of the run")
    lo = _time(time_start, "time_start") if time_start is not None else None
    hi = _time(time_end, "time_end") if time_end is not None else None
    if lo and hi and lo > hi:
        raise MsprobeError(f"time_start ({time_start}) is later than time_end ({time_end})")
    out = {}
    for d in sorted(os.listdir(monitor_path)):
        m = RANK_DIR.match(d)
        if not m or not os.path.isdir(os.path.join(monitor_path, d)):
            continue
        try:
            t = datetime.datetime.strptime(m.group(1), TIME_FORMAT)
        except ValueError:
            continue
        if (lo is None or t >= lo) and (hi is None or t <= hi):
            out[int(m.group(2))] = os.path.join(monitor_path, d)
    return out


def _num(s):
    try:
        return float(s)
    except ValueError:
        return math.nan


def read_type(folder, data_type) -> dict:
    """{step: [(tag, value), ...]} from every ``{data_type}_{a}-{b}.csv`` of ``folder``."""
    steps, seen = {}, set()
    files = sorted((f for f in os.listdir(folder) if (_CSV.match(f) and _CSV.match(f).group(1) == data_type)),
                   key=lambda f: int(_CSV.match(f).group(2)))
    for f in files:
        path = os.path.join(folder, f)
        try:
            with open(path, newline="", encoding="utf-8") as fh:
                _read_file(path, fh, steps, seen)
        except (OSError, UnicodeDecodeError, csv.Error) as exc:
            why = exc.strerror if isinstance(exc, OSError) and exc.strerror else f"{type(exc).__name__}: {exc}"
            raise MsprobeError(f"{path}: cannot be read as a monitor CSV ({why}); give the monitor's own output "
                               f"folder") from None
    return steps


def _step_cell(path, value) -> int:
    """A step cell: an integer within TensorBoard's int64."""
    try:
        v = int(value)
    except ValueError:
        v = None
    if v is None or not -(1 << 63) <= v < 1 << 63:
        raise MsprobeError(f"{path}: step {value[:50]!r} is not an integer; the file is damaged: give the "
                           f"monitor's own output")
    return v


def _read_file(path, fh, steps: dict, seen: set) -> None:
    rows = csv.reader(fh)
    header = next(rows, None)
    if not header or header[:2] != ["vpp_stage", "name"]:
        raise MsprobeError(f"{path}: not a monitor CSV (its header does not start with vpp_stage,name)")
    if "step" not in header:
        raise MsprobeError(f"{path}: not a monitor CSV (its header has no step column)")
    i_step = header.index("step")
    i_micro = header.index("micro_step") if "micro_step" in header else None
    ops = [(j, h) for j, h in enumerate(header) if h in NUMERIC_OPS]
    for r in rows:
        if len(r) != len(header):
            raise MsprobeError(f"{path}: a row has {len(r)} cells, the header {len(header)}")
        name = f"vp{r[0]}:{r[1]}"
        if i_micro is not None:
            name += f":micro{r[i_micro]}"
        step = _step_cell(path, r[i_step])
        if (name, step) in seen:
            raise MsprobeError(f"{path}: duplicated step({step}) of {name}")
        seen.add((name, step))
        steps.setdefault(step, []).extend((f"{name}/{op}", _num(r[j])) for j, op in ops)


def csv2tensorboard_by_step(monitor_path, time_start=None, time_end=None, process_num=1, data_type_list=None,
                            output_dirpath=None) -> str:
    """Convert; returns the output folder.  ``process_num`` is accepted for the reference's signature (the
    conversion runs in this process)."""
    _tb_modules()
    types = list(data_type_list) if data_type_list else list(ALL_DATA_TYPES)
    bad = [t for t in types if t not in ALL_DATA_TYPES + ("other",)]
    if bad:
        raise MsprobeError(f"data type {bad[0]!r} is not a monitor output; one of {', '.join(ALL_DATA_TYPES)}")
    dirs = rank_dirs(monitor_path, time_start, time_end)
    if not dirs:
        raise MsprobeError(f"monitor output {monitor_path}: no rank folder ({{time}}-rank{{R}}-{{id}}) in the "
                           f"time range")
    if output_dirpath is None:
        output_dirpath = os.path.join(monitor_path, f"{time_tag()}-csv2tensorboard_by_step")
    if os.path.exists(output_dirpath) and os.listdir(output_dirpath):
        raise MsprobeError(f"output folder {output_dirpath} exists and is not empty; give another -o")
    for rank, folder in sorted(dirs.items()):
        for dt in types:
            steps = read_type(folder, dt)
            if not steps:
                continue
            out = os.path.join(output_dirpath, f"rank{rank}", dt)
            os.makedirs(out, mode=0o750, exist_ok=True)
            w = TensorBoardWriter(out, [])
            for step in sorted(steps):
                w.scalars(steps[step], step)
            w.close()
    log.info("output has been saved to: %s", output_dirpath)
    return output_dirpath
