"""Writers of the training monitor (spec 4.9), framework-free.

A collected step arrives as one block per output prefix: the tags, a float64 matrix of the numeric ops
(rows = tags, columns = ops in config order), and per row the shape (a list) and dtype (a string).

* :class:`CsvWriter`: ``{prefix}_{a}-{b}.csv`` with ``a = floor(step/N)*N``, ``b = a+N-1``
  (``N = step_count_per_record``); header ``vpp_stage,name,step[,micro_step],{ops},shape,dtype``; numbers
  rounded to ``ndigits``, NaN written ``nan``.  A file is created with its header atomically (never over an
  existing file); each step's rows are appended with one write.
* :class:`TensorBoardWriter`: one event file per rank folder; scalar tag ``{tag}_{op}`` (e.g.
  ``0:blocks.0.fc1.input:0/rank0/actv_max``), global step = training step; ``shape``/``dtype`` are not scalars
  and are skipped (the reference crashes on them, spec 4.13).  Uses the ``tensorboard`` package only.
* :func:`write_anomalies`: ``anomaly_detected/rank{R}/anomaly.json``, replaced atomically after each step.
"""

from __future__ import annotations

import csv
import io
import json
import os
import tempfile
import time

import numpy as np

from msprobe.core.errors import MsprobeError
from msprobe.core.fileio import atomic_write
from msprobe.core.monitor.names import MICRO_PREFIXES, csv_name

INT_OPS = ("nans",)


class CsvWriter:
    def __init__(self, directory: str, ops: list, ndigits: int = 6, step_count_per_record: int = 1,
                 micro_prefixes=MICRO_PREFIXES):
        self.directory = directory
        self.ops = list(ops)                         # numeric ops + shape, dtype (the header's order)
        self.numeric = [o for o in self.ops if o not in ("shape", "dtype")]
        self.ndigits = ndigits
        self.n = step_count_per_record
        self.micro_prefixes = tuple(micro_prefixes)
        self._created = set()

    def path(self, prefix: str, step: int) -> str:
        a = step // self.n * self.n
        return os.path.join(self.directory, f"{prefix}_{a}-{a + self.n - 1}.csv")

    def header(self, prefix: str) -> list:
        micro = ["micro_step"] if prefix in self.micro_prefixes else []
        return ["vpp_stage", "name", "step"] + micro + self.ops

    def _cells(self, values: np.ndarray) -> list:
        """Column lists of strings: rounded numbers as Python prints them, counts as integers, NaN as 'nan'."""
        vals = np.round(np.asarray(values, dtype=np.float64), self.ndigits)
        cols = []
        for j, op in enumerate(self.numeric):
            col = vals[:, j]
            if op in INT_OPS and np.isfinite(col).all():
                cols.append([str(v) for v in col.astype(np.int64).tolist()])
            else:
                cols.append([repr(v) for v in col.tolist()])
        return cols

    def write(self, prefix: str, step: int, tags: list, values: np.ndarray, shapes: list, dtypes: list,
              vpp: list = None, micro: list = None) -> str:
        path = self.path(prefix, step)
        if path not in self._created and not os.path.exists(path):
            head = ",".join(self.header(prefix)) + "\n"

            def put(tmp):
                with open(tmp, "w", encoding="utf-8", newline="") as f:
                    f.write(head)
            path = atomic_write(path, put)
        self._created.add(path)
        n = len(tags)
        cols = self._cells(values) if n else []
        names = [csv_name(t) for t in tags]
        vpp = vpp if vpp is not None else [0] * n
        lead = [vpp, names, [step] * n]
        if prefix in self.micro_prefixes:
            lead.append(micro if micro is not None else [0] * n)
        shapes_s = ["nan" if s is None else str(list(s)) for s in shapes]
        dtypes_s = ["nan" if d is None else d for d in dtypes]
        trail = [shapes_s if op == "shape" else dtypes_s for op in self.ops if op in ("shape", "dtype")]
        buf = io.StringIO()
        csv.writer(buf, lineterminator="\n").writerows(zip(*lead, *cols, *trail))
        data = buf.getvalue().encode("utf-8")
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | getattr(os, "O_NOFOLLOW", 0))
        try:
            os.write(fd, data)
        finally:
            os.close(fd)
        return path

    def close(self):
        pass


def _tb_modules():
    try:
        from tensorboard.compat.proto.event_pb2 import Event
        from tensorboard.compat.proto.summary_pb2 import Summary
        from tensorboard.summary.writer.event_file_writer import EventFileWriter
    except ImportError:
        raise MsprobeError("monitor format 'tensorboard' needs the tensorboard package (pip install tensorboard); "
                           "or set \"format\": \"csv\"") from None
    return Event, Summary, EventFileWriter


def tensorboard_available() -> bool:
    try:
        _tb_modules()
        return True
    except MsprobeError:
        return False


class TensorBoardWriter:
    """Scalars into one event file of ``directory`` (tensorboard's own record writer; no TensorFlow, no torch)."""

    def __init__(self, directory: str, ops: list):
        self._Event, self._Summary, efw = _tb_modules()
        self.numeric = [o for o in ops if o not in ("shape", "dtype")]
        self.directory = directory
        self._writer = efw(directory)

    def write(self, prefix: str, step: int, tags: list, values: np.ndarray, shapes=None, dtypes=None,
              vpp=None, micro=None, wall_time=None) -> None:
        if not len(tags):
            return
        S = self._Summary
        vals = np.asarray(values, dtype=np.float64).tolist()
        items = [S.Value(tag=f"{t}_{op}", simple_value=v) for t, row in zip(tags, vals)
                 for op, v in zip(self.numeric, row)]
        self.add(items, step, wall_time)

    def add(self, items, step, wall_time=None):
        ev = self._Event(wall_time=wall_time or time.time(), step=int(step), summary=self._Summary(value=items))
        self._writer.add_event(ev)

    def scalars(self, pairs, step):
        """``pairs``: (tag, value) of one step."""
        S = self._Summary
        self.add([S.Value(tag=t, simple_value=float(v)) for t, v in pairs], step)

    def image(self, tag, png: bytes, height: int, width: int, step):
        """One PNG image summary (e.g. the ur_distribution heatmaps)."""
        S = self._Summary
        img = S.Image(height=int(height), width=int(width), colorspace=3, encoded_image_string=png)
        self.add([S.Value(tag=tag, image=img)], step)

    def flush(self):
        self._writer.flush()

    def close(self):
        self._writer.close()


def write_anomalies(path: str, entries: dict) -> None:
    """Replace ``path`` (anomaly.json) with ``entries``, atomically (temporary file + rename)."""
    directory = os.path.dirname(path)
    os.makedirs(directory, mode=0o750, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".anomaly-", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(entries, f, indent=1)
        os.chmod(tmp, 0o640)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
