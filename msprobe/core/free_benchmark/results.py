"""free_benchmark results: the CSV row model, the per-step CSV file and the closing summary (no framework imports).

One file per checked step and rank, ``{dump_path}/step{N}/rank{R}/free_benchmark.csv`` (the 8.x layout), header
``rank,pert_mode,stage,step,api_name,max_rel,dtype,shape,output_index``, written as the reference writes it
(UTF-8, ``\\r\\n`` line ends, Python's ``repr`` of the float).  The file is rewritten
whole, atomically, at every flush of the step (stop(), step(), the end of the process), so a reader never sees
half a row and nothing recorded is lost at exit.
"""

from __future__ import annotations

import csv
import io
import math
import os
from dataclasses import dataclass
from typing import Optional, Union

from msprobe.core.free_benchmark.rules import SYMBOL_FLIPPING

CSV_NAME = "free_benchmark.csv"
HEADER = ("rank", "pert_mode", "stage", "step", "api_name", "max_rel", "dtype", "shape", "output_index")
WORST_SHOWN = 5


@dataclass(frozen=True)
class Row:
    rank: int
    pert_mode: str
    stage: str                 # forward | backward
    step: int
    api_name: str              # "Functional.gelu.0.forward"
    max_rel: Union[float, str, None]   # ratio - 1, "symbol_flipping", or None (CPU comparison: no ratio)
    dtype: str                 # "torch.bfloat16"
    shape: str                 # "torch.Size([16, 64])"
    output_index: Optional[int] = None

    def cells(self) -> list:
        rel = self.max_rel
        if rel is None:
            rel = ""
        elif isinstance(rel, float):
            rel = repr(rel)
        return [self.rank, self.pert_mode, self.stage, self.step, self.api_name, rel, self.dtype, self.shape,
                "" if self.output_index is None else self.output_index]

    @property
    def severity(self) -> float:
        """For ordering: a sign flip first, then the largest max_rel; CPU rows (no ratio) last."""
        if self.max_rel == SYMBOL_FLIPPING:
            return math.inf
        if isinstance(self.max_rel, (int, float)):
            return abs(float(self.max_rel)) if not math.isnan(self.max_rel) else math.inf
        return -1.0

    @property
    def api(self) -> str:
        """The API without its call number and direction: "Functional.gelu"."""
        parts = self.api_name.rsplit(".", 2)
        return parts[0] if len(parts) == 3 and parts[1].isdigit() else self.api_name


def csv_bytes(rows) -> bytes:
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\r\n")
    writer.writerow(HEADER)
    writer.writerows(r.cells() for r in rows)
    return buf.getvalue().encode("utf-8")


def write_csv(step_dir: str, rows) -> str:
    """Write ``rows`` (all of this step's so far) as ``step_dir/free_benchmark.csv``, replacing it atomically."""
    from msprobe.core.dump.writer import write_bytes

    return write_bytes(os.path.join(step_dir, CSV_NAME), csv_bytes(rows))


class Results:
    """The rows of the step being checked, and what the closing summary needs from the whole run."""

    def __init__(self):
        self.rows = []               # this step's rows
        self.step_dir = None
        self.written = 0             # rows of this step already in its file
        self.total = 0
        self.steps = set()
        self.worst = {}              # api -> (severity, row)

    def add(self, row: Row) -> None:
        self.rows.append(row)
        self.total += 1
        self.steps.add(row.step)
        best = self.worst.get(row.api)
        if best is None or row.severity > best[0]:
            self.worst[row.api] = (row.severity, row)
        counts = self.__dict__.setdefault("_counts", {})
        counts[row.api] = counts.get(row.api, 0) + 1

    def snapshot(self):
        """(step_dir, rows) to write now, or None when nothing changed since the last write."""
        if self.step_dir is None or not self.rows or self.written == len(self.rows):
            return None
        self.written = len(self.rows)
        return self.step_dir, list(self.rows)

    def new_step(self, step_dir) -> None:
        self.rows = []
        self.written = 0
        self.step_dir = step_dir

    def summary(self, dump_path: str, pert_mode: str, handler_type: str) -> str:
        """The closing console block: how many inconsistent outputs, and the five worst APIs."""
        if handler_type == "fix":
            return (f"[msprobe] free_benchmark (fix, {pert_mode}): outputs of the selected APIs were replaced by the "
                    f"re-run's; no CSV rows are written in fix mode")
        if not self.total:
            return (f"[msprobe] free_benchmark ({pert_mode}): no inconsistent output in the checked steps; "
                    f"nothing was written to free_benchmark.csv")
        counts = self.__dict__.get("_counts", {})
        worst = sorted(self.worst.values(), key=lambda sr: (-sr[0], sr[1].api_name))[:WORST_SHOWN]
        lines = [f"[msprobe] free_benchmark ({pert_mode}): {self.total} inconsistent output(s) of {len(self.worst)} "
                 f"API(s) in {len(self.steps)} step(s); CSV files: "
                 f"{os.path.join(dump_path, 'step*', 'rank*', CSV_NAME)}",
                 f"  the {min(WORST_SHOWN, len(worst))} worst APIs (largest max_rel; symbol_flipping first):"]
        width = max(len(r.api) for _s, r in worst)
        for _sev, r in worst:
            rel = r.max_rel if isinstance(r.max_rel, str) else ("cpu mismatch" if r.max_rel is None
                                                                else f"{float(r.max_rel):.6g}")
            lines.append(f"  {r.api:<{width}}  max_rel {rel:<15}  {counts.get(r.api, 0)} row(s); worst: "
                         f"{r.api_name} step {r.step} {r.dtype}")
        return "\n".join(lines)
