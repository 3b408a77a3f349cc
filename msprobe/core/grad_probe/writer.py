"""Writes grad_probe steps: ``rank{R}/grad_summary_{step}.csv`` and ``rank{R}/step{step}/{param}.npy``.

The training thread hands over one finished step (names, shapes, the ``(P, columns)`` numbers, CRC strings,
direction arrays that are snapshots, never views of live gradients); a background thread formats and writes
it, so file writing overlaps training.  The csv is written through a temporary file and a rename, a step's
direction files into a hidden temporary folder renamed to ``step{S}`` when complete (a kill leaves complete
files or none under the final names).  A failure is logged once in ``rank{R}/dump_error_info.log`` (and once on
the console) and never reaches training.  Framework-free.
"""
from __future__ import annotations

import atexit
import logging
import os
import queue
import shutil
import threading
from dataclasses import dataclass
from typing import List, Optional, Sequence

import numpy as np

from msprobe.core.dump.errorlog import ErrorLog
from msprobe.core.dump.writer import write_bytes
from msprobe.core.grad_probe import stats

log = logging.getLogger("msprobe")

#: steps queued for the writer thread before the training thread waits for it (back-pressure) ...
MAX_QUEUED_STEPS = 8
#: ... and direction bytes held for it (one step is always accepted, however big)
MAX_PENDING_BYTES = 1 << 30


@dataclass
class StepRecord:
    step: int
    names: List[str]
    shapes: List[tuple]
    numbers: np.ndarray                 # (P, stats.number_columns(level, bounds)) float64
    md5s: Optional[List[str]] = None    # L0
    directions: Optional[List[np.ndarray]] = None   # L1/L2: bool arrays, one per name


class GradProbeWriter:
    def __init__(self, dump_path: str, rank: int, level: str, bounds: Sequence, threaded: bool = True):
        self.rank_dir = os.path.join(dump_path, f"{stats.RANK_PREFIX}{rank}")
        self.level = level
        self.bounds = tuple(bounds)
        self.threaded = threaded
        self.errors = ErrorLog(self.rank_dir)
        self._q: Optional[queue.Queue] = None
        self._checked_old = False
        self._lock = threading.Lock()
        self._cv = threading.Condition()
        self._pending_bytes = 0
        atexit.register(self.wait)

    # ------------------------------------------------------------------ training thread
    def submit(self, record: StepRecord) -> None:
        if not self.threaded:
            self._write_guarded(record)
            return
        with self._lock:
            if self._q is None:
                self._q = queue.Queue(maxsize=MAX_QUEUED_STEPS)
                threading.Thread(target=self._run, name="msprobe-grad-probe", daemon=True).start()
        nbytes = _record_bytes(record)
        with self._cv:
            while self._pending_bytes and self._pending_bytes + nbytes > MAX_PENDING_BYTES:
                self._cv.wait()
            self._pending_bytes += nbytes
        self._q.put(record)

    def wait(self) -> None:
        """Block until every submitted step is on disk."""
        if self._q is not None:
            self._q.join()

    def close(self) -> None:
        self.wait()
        try:
            atexit.unregister(self.wait)
        except Exception:  # noqa: BLE001
            pass

    # ------------------------------------------------------------------ writer thread
    def _run(self) -> None:
        while True:
            record = self._q.get()
            try:
                self._write_guarded(record)
            finally:
                with self._cv:
                    self._pending_bytes -= _record_bytes(record)
                    self._cv.notify_all()
                self._q.task_done()

    def _write_guarded(self, record: StepRecord) -> None:
        try:
            self.write_step(record)
        except Exception as exc:  # noqa: BLE001 - never reaches training: logged once
            self.errors.record(f"grad_probe step {record.step}", exc)

    def _warn_old_files(self) -> None:
        self._checked_old = True
        try:
            old = [n for n in os.listdir(self.rank_dir) if stats.summary_step(n) is not None]
        except OSError:
            return
        if old:
            log.warning("grad_probe: %s already holds %d grad_summary file(s) of an earlier run; the files of the "
                        "steps recorded now are replaced, the others stay", self.rank_dir, len(old))

    def write_step(self, record: StepRecord) -> str:
        os.makedirs(self.rank_dir, mode=0o750, exist_ok=True)
        if not self._checked_old:
            self._warn_old_files()
        if record.directions is not None and stats.has_direction(self.level):
            self._write_directions(record)
        rows = stats.summary_rows(self.level, self.bounds, record.names, record.shapes, record.numbers, record.md5s)
        path = os.path.join(self.rank_dir, f"{stats.SUMMARY_PREFIX}{record.step}.csv")
        if os.path.exists(path):
            log.warning("%s will be deleted", path)
        write_bytes(path, stats.csv_bytes(rows))
        log.info("write grad data to %s", path)
        return path

    def _write_directions(self, record: StepRecord) -> None:
        """``step{S}/{param}.npy``: written into a hidden temporary folder that is renamed to ``step{S}`` once
        complete (one rename per step instead of one per file; a kill leaves the hidden folder, never a partial
        .npy under its final name).  An existing ``step{S}`` of an earlier run is replaced, with a warning."""
        step_dir = os.path.join(self.rank_dir, f"{stats.STEP_PREFIX}{record.step}")
        tmp_dir = os.path.join(self.rank_dir, f".{stats.STEP_PREFIX}{record.step}.{os.getpid()}.tmp")
        if os.path.lexists(tmp_dir):
            shutil.rmtree(tmp_dir, ignore_errors=True)
        os.mkdir(tmp_dir, 0o750)
        try:
            for name, arr in zip(record.names, record.directions):
                fd = os.open(os.path.join(tmp_dir, f"{name}.npy"),
                             os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o640)
                with os.fdopen(fd, "wb") as fh:
                    np.save(fh, np.ascontiguousarray(arr), allow_pickle=False)
            if os.path.lexists(step_dir):
                log.warning("%s will be deleted", step_dir)
                if os.path.isdir(step_dir) and not os.path.islink(step_dir):
                    shutil.rmtree(step_dir)
                else:
                    os.unlink(step_dir)
            os.rename(tmp_dir, step_dir)
        except BaseException:
            shutil.rmtree(tmp_dir, ignore_errors=True)
            raise


def _record_bytes(record: StepRecord) -> int:
    return sum(int(a.nbytes) for a in record.directions) if record.directions else 0
