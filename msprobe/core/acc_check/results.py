"""The pre-check's output files: accuracy_checking_result/details_{ts}.csv, written as APIs finish, and
their resumption (``-csv_path``), with the reference's names and headers (framework-free).

Each API is written as its detail rows, then its result row, each flushed at once: a run killed at any
moment leaves whole rows; resuming drops a torn last line and the detail rows of an API whose result row
is missing, so that API is judged again, once.
"""

from __future__ import annotations

import csv
import io
import math
import os
import re
import time
from typing import Collection, Dict, Iterable, List, Optional, Sequence, Tuple

from msprobe.core.errors import MsprobeError

BOM = "\ufeff"
SPACE = " "
RESULT_HEADER = ["API name", "Forward Test Success", "Backward Test Success", "Message"]
DETAILS_HEADER = ["API Name", "Bench Dtype", "DEVICE Dtype", "Shape", "余弦相似度", "最大绝对误差", "双百指标", "双千指标",
                  "双万指标", "二进制一致错误率", "误差均衡性", "均方根误差", "小值域错误占比", "相对误差最大值", "相对误差平均值",
                  "inf/nan错误率", "相对误差错误率", "绝对误差错误率", "ULP误差最大值", "ULP误差平均值", "ULP误差大于阈值占比",
                  "Status", "Message"]
RESULT_RE = re.compile(r"^accuracy_checking_result_(\d{14})\.csv$")
#: our verdicts -> the reference's status strings
STATUS = {"pass": "pass", "warning": "Warning", "error": "error", "skip": "SKIP"}
_RANK = {"SKIP": 0, SPACE: 0, "": 0, "pass": 1, "Warning": 2, "error": 3}


def cell(value, precision: int = 14) -> str:
    """One CSV cell as the reference writes it: floats with 14 decimals, None as a single space."""
    if value is None or value == "":
        return SPACE
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value) or math.isinf(value):
            return str(value)
        return f"{value:.{precision}f}"
    return str(value)


def worst_status(statuses: Iterable[str]) -> str:
    """error > Warning > pass; all SKIP (or nothing) -> SKIP."""
    best = SPACE
    for s in statuses:
        if _RANK.get(s, 0) > _RANK.get(best, 0) or (best == SPACE and s == "SKIP"):
            best = s
    return best


def _line(cells: Sequence[str]) -> str:
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\r\n").writerow(cells)
    return buf.getvalue()


def free_timestamp(out_dir: str) -> str:
    """A time stamp (%Y%m%d%H%M%S, now or the next free second) naming no existing result/details file."""
    t = time.time()
    while True:
        ts = time.strftime("%Y%m%d%H%M%S", time.localtime(t))
        if not any(os.path.lexists(os.path.join(out_dir, f"accuracy_checking_{k}_{ts}.csv")) for k in ("result", "details")):
            return ts
        t += 1


class ResultFiles:
    """The result/details pair of one run: new files (header first) or resumed ones (appended to)."""

    def __init__(self, result_path: str, details_path: str, done: Optional[set] = None, precision: int = 14):
        self.result_path, self.details_path = result_path, details_path
        self.done = set(done or ())
        self.precision = precision
        self._res = self._det = None

    @classmethod
    def create(cls, out_dir: str, ts: str, precision: int = 14) -> "ResultFiles":
        res = os.path.join(out_dir, f"accuracy_checking_result_{ts}.csv")
        det = os.path.join(out_dir, f"accuracy_checking_details_{ts}.csv")
        files = cls(res, det, precision=precision)
        files._res = _open_new(res)
        files._det = _open_new(det)
        files._res.write(BOM + _line(RESULT_HEADER))
        files._det.write(BOM + _line(DETAILS_HEADER))
        files._res.flush()
        files._det.flush()
        return files

    @property
    def timestamp(self) -> str:
        return RESULT_RE.match(os.path.basename(self.result_path)).group(1)

    def open_append(self) -> None:
        self._res = open(self.result_path, "a", encoding="utf-8", newline="")
        self._det = open(self.details_path, "a", encoding="utf-8", newline="")

    def write_api(self, name: str, forward: str, backward: str, message: str, details: List[Dict]) -> None:
        """One API: its detail rows (column name -> value), then its result row; both flushed."""
        if details:
            self._det.write("".join(_line([cell(d.get(col), self.precision) for col in DETAILS_HEADER])
                                    for d in details))
            self._det.flush()
        row = [name, forward, backward or SPACE]
        if "SKIP" in (forward, backward) and message:
            row.append(message)
        self._res.write(_line(row))
        self._res.flush()
        self.done.add(name)

    def close(self) -> None:
        for fh in (self._res, self._det):
            if fh is not None:
                fh.close()
        self._res = self._det = None


def _open_new(path: str):
    try:
        return open(path, "x", encoding="utf-8", newline="")
    except FileExistsError:
        raise MsprobeError(f"{path} exists; msprobe never overwrites a file (choose another -o)")
    except OSError as exc:
        raise MsprobeError(f"cannot create {path}: {exc.strerror}; choose another -o")


# ---------------------------------------------------------------------------------------- resume
def _read_rows(path: str, what: str) -> Tuple[List[List[str]], bool]:
    """(rows after the header, whether the last line was torn) of one of our CSVs."""
    try:
        with open(path, "r", encoding="utf-8-sig", newline="") as fh:
            text = fh.read()
    except UnicodeDecodeError:
        raise MsprobeError(f"{what} {path} is not a UTF-8 CSV (corrupt?); pass the accuracy_checking_result_*.csv "
                           f"of the interrupted run")
    except OSError as exc:
        raise MsprobeError(f"cannot read {what} {path}: {exc.strerror}")
    torn = bool(text) and not text.endswith("\n")
    try:
        rows = list(csv.reader(io.StringIO(text)))
    except csv.Error as exc:
        raise MsprobeError(f"{what} {path} is not a readable CSV ({exc}); it is corrupt, start a new run without -csv_path")
    if torn and rows:
        rows.pop()
    return rows, torn


def open_resume(csv_path: str, precision: int = 14, dump_apis: Optional[Collection[str]] = None,
                dump_json: str = "") -> ResultFiles:
    """Check the result CSV of an interrupted run and its details twin, repair a torn end, and open both for
    appending; ``done`` holds the APIs already judged.  ``dump_apis``: every API name of the dump being resumed
    (a result row naming another API means the CSV is of another dump).  Problems are one MsprobeError line each."""
    path = os.path.abspath(csv_path)
    if not RESULT_RE.match(os.path.basename(path)):
        raise MsprobeError(f"-csv_path {path}: When continue run ut, please do not modify the result csv name "
                           f"(accuracy_checking_result_YYYYmmddHHMMSS.csv)")
    if not os.path.isfile(path):
        raise MsprobeError(f"-csv_path {path} does not exist; pass the result CSV of the interrupted run")
    details = os.path.join(os.path.dirname(path), os.path.basename(path).replace("result", "details", 1))
    if not os.path.isfile(details):
        raise MsprobeError(f"-csv_path {path}: its details file {details} is missing; both files of the run are needed")
    for p in (path, details):
        if not os.access(p, os.R_OK | os.W_OK):
            raise MsprobeError(f"-csv_path: {p} is not readable and writable by this user")
    rows, torn = _read_rows(path, "result CSV")
    if not rows or rows[0][: len(RESULT_HEADER) - 1] != RESULT_HEADER[:-1]:
        raise MsprobeError(f"-csv_path {path} does not start with the header {','.join(RESULT_HEADER)}: it is corrupt "
                           f"or not a run_ut result CSV")
    done = []
    for i, r in enumerate(rows[1:], start=2):
        if len(r) < 3 or r[1] not in ("pass", "Warning", "error", "SKIP") or not r[0]:
            raise MsprobeError(f"-csv_path {path}: line {i} is not a result row (API name, status, status): the file "
                               f"is corrupt; start a new run without -csv_path")
        done.append(r[0])
    if len(set(done)) != len(done):
        dup = next(n for n in done if done.count(n) > 1)
        raise MsprobeError(f"-csv_path {path}: API {dup} appears twice; the file is corrupt")
    if dump_apis is not None:
        foreign = [n for n in done if n not in dump_apis]
        if foreign:
            more = f" (and {len(foreign) - 1} more)" if len(foreign) > 1 else ""
            raise MsprobeError(f"-csv_path {path}: API {foreign[0]}{more} is not in dump.json {dump_json}: the CSV "
                               f"is of another dump; resume with the -api_info of the interrupted run")
    drows, dtorn = _read_rows(details, "details CSV")
    if not drows or drows[0][:4] != DETAILS_HEADER[:4]:
        raise MsprobeError(f"details CSV {details} does not start with the header {','.join(DETAILS_HEADER[:4])},...: "
                           f"it is corrupt or not a run_ut details CSV")
    known = set(done)
    keep = []
    for i, r in enumerate(drows[1:], start=2):
        if _api_of_detail(r[0] if r else "") not in known:
            continue  # a row of an API without its result row (killed between the two writes): dropped
        keep.append(r)
        if len(r) != len(DETAILS_HEADER):
            raise MsprobeError(f"-csv_path {path}: row {i} of its details file {details} has {len(r)} fields, not "
                               f"{len(DETAILS_HEADER)}: the file is corrupt; start a new run without -csv_path")
    if torn:
        _rewrite(path, [RESULT_HEADER] + rows[1:])
    if dtorn or len(keep) != len(drows) - 1:
        _rewrite(details, [DETAILS_HEADER] + keep)
    files = ResultFiles(path, details, done=known, precision=precision)
    files.open_append()
    return files


def _api_of_detail(name: str) -> str:
    """Functional.linear.0.forward.output.1 -> Functional.linear.0"""
    parts = name.split(".")
    return ".".join(parts[:-3]) if len(parts) > 3 else name


def _rewrite(path: str, rows: List[List[str]]) -> None:
    """Replace a resumed CSV by its whole rows (only the run's own output is rewritten, never an input)."""
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w", encoding="utf-8", newline="") as fh:
        fh.write(BOM + _line(rows[0]))
        fh.writelines(_line(r) for r in rows[1:])
    os.replace(tmp, path)
