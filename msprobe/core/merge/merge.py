"""``merge_result``: gather chosen APIs and compare indexes of every rank into one workbook.

1. find the rank reports in the input directory (newest per rank; others ignored with a warning);
2. read every header, check that all reports have one mode and that the compare indexes suit it;
3. read the reports in worker processes, each keeping only the rows of the configured APIs;
4. outer-join the ranks on NPU Name (first appearance order: config order, then table order) and write
   one sheet per compare index, columns ``NPU Name, rank0, rank1, ...``, atomically and never over an
   existing file.
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Tuple

import numpy as np

from msprobe.core.errors import MsprobeError
from msprobe.core.fileio import atomic_write, check_path, ensure_output_dir, unique_path
from msprobe.core.merge.config import MergeConfig
from msprobe.core.merge.reports import (
    NPU_NAME, VALID_INDEXES, RankData, RankFile, detect_mode, extract, find_rank_reports, read_report_header,
    _short_list,
)

log = logging.getLogger("msprobe")

OUTPUT_PREFIX = "multi_ranks_compare_merge"
MAX_SHEET_ROWS = 1_048_575


@dataclass
class MergeResult:
    path: str
    mode: str
    ranks: List[int]
    indexes: List[str]
    rows: int
    seconds: float
    single: bool = False  # the input was the report of a single-process compare, merged as rank 0
    failures: List[Tuple[str, str]] = field(default_factory=list)  # --ray: (rank label, one-line reason) left out


def _timestamp() -> str:
    """Local time as the reference stamps its outputs (``%Y%m%d%H%M%S``)."""
    return time.strftime("%Y%m%d%H%M%S")


def _plan(cfg: MergeConfig):
    input_dir = check_path(cfg.input_dir, "input directory", "dir")
    files = find_rank_reports(input_dir)
    if not files:
        raise MsprobeError(
            f"no compare reports (compare_result_rank{{N}}_{{timestamp}}.xlsx or .csv, or the "
            f"compare_result_{{timestamp}} report of a single-process compare) in {input_dir}; pass the output "
            "directory of msprobe compare as -i")
    if files[0].single:
        log.info("merging the single-process report %s as rank%d (its name has no rank number)",
                 os.path.basename(files[0].path), files[0].rank)
    elif len(files) == 1:
        log.info("one rank report in %s (%s): the merged workbook has one rank column", input_dir,
                 os.path.basename(files[0].path))
    by_mode: Dict[str, List[RankFile]] = {}
    headers = {}
    for f in files:
        header = read_report_header(f)
        mode = detect_mode(header)
        if mode is None:
            raise MsprobeError(
                f"rank{f.rank} report {f.path} has neither a 'Max diff' (statistics) nor a 'Cosine' (tensor) column: "
                "it is not a compare report; regenerate it with msprobe compare or move it out of the input directory")
        headers[f.rank] = header
        by_mode.setdefault(mode, []).append(f)
    if len(by_mode) > 1:
        parts = [f"{mode} reports ({_short_list(['rank%d' % f.rank for f in fs], 4)})" for mode, fs in by_mode.items()]
        raise MsprobeError(
            f"{input_dir} mixes {' and '.join(parts)}; merge one kind at a time: move the reports of the other "
            "mode to another directory")
    mode = next(iter(by_mode))
    if mode == "md5":
        raise MsprobeError(
            f"the reports in {input_dir} are md5 compares, which hold no error metrics to merge; "
            "merge statistics or tensor compare reports")
    valid = VALID_INDEXES[mode]
    if cfg.compare_index:
        bad = [i for i in cfg.compare_index if i not in valid]
        if bad:
            where = f"config.yaml {cfg.config_path}" if cfg.config_path else "compare_index"
            raise MsprobeError(
                f"{where}: compare_index {_short_list([repr(b) for b in bad])} not valid for the {mode} reports in "
                f"{input_dir}; valid: {', '.join(valid)}")
        indexes = list(cfg.compare_index)
    else:
        # every index of the mode that all reports have (older reports lack Requires_grad Consistent)
        indexes = [i for i in valid if all(i in h for h in headers.values())]
    return input_dir, files, mode, indexes


def _extract_job(args, _emit=None):
    """One report file (a task of msprobe.core.executor: module-level, picklable arguments)."""
    f, apis, indexes = args
    return extract(f, apis, indexes)


def _read_all(cfg: MergeConfig, files: List[RankFile], indexes: List[str],
              progress: Optional[Callable[..., None]], failures: Optional[List[Tuple[str, str]]] = None
              ) -> List[RankData]:
    """Every report's wanted rows, read in worker processes or Ray tasks (msprobe.core.executor, ``cfg.backend``:
    Ctrl-C stops them at once).
    ``progress(stage, done, total, unit, detail)``: the stage "read", counted in reports.
    ``failures`` (a list; --ray): a report that cannot be read is recorded there and left out, the others are
    merged; without it the first failure is raised."""
    jobs = [(f, cfg.apis, indexes) for f in files]
    from msprobe.core.executor import run_tasks
    from msprobe.core.resources import cap_jobs

    workers = cap_jobs(cfg.jobs, len(jobs), "report files")   # never beyond the cores nor the files
    total = len(jobs)
    done = [0, 0]                                               # reports, rows kept

    def on_result(_i, rd: RankData) -> None:
        done[0] += 1
        done[1] += len(rd.names)
        if progress:
            progress("read", done[0], total, "reports", f"{done[1]:,} rows kept")

    on_error = None
    if failures is not None:
        def on_error(i, exc) -> None:     # --ray: the report is left out, named in the summary; the others go on
            reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            label = f"rank{files[i].rank}"
            log.error("merge_result %s (%s) failed: %s", label, files[i].path, reason)
            failures.append((label, reason))
            done[0] += 1
            if progress:
                progress("read", done[0], total, "reports", f"{done[1]:,} rows kept, {len(failures)} failed")

    if progress:
        progress("read", 0, total, "reports")
    out = run_tasks(_extract_job, jobs, workers, backend=getattr(cfg, "backend", None), on_result=on_result,
                    on_error=on_error, name="msprobe-merge")
    return [rd for rd in out if rd is not None]


def assemble(ranks: List[RankData], indexes: List[str]):
    """(names, {index: [column per rank]}): the outer join of the ranks on NPU Name."""
    order: Dict[str, int] = {}
    for rd in ranks:
        for name in rd.names:
            if name not in order:
                order[name] = len(order)
    n = len(order)
    names = list(order)
    sheets: Dict[str, list] = {index: [] for index in indexes}
    for rd in ranks:
        pos = np.fromiter(map(order.__getitem__, rd.names), np.intp, len(rd.names))
        for index in indexes:
            col = np.full(n, None, dtype=object)
            vals = np.empty(len(rd.names), dtype=object)
            vals[:] = rd.values[index]
            col[pos] = vals
            sheets[index].append(col)
    return names, sheets


def run_merge(cfg: MergeConfig, progress: Optional[Callable[..., None]] = None) -> MergeResult:
    """``progress(stage, done, total, unit=None, detail=None)`` is told the stages read (reports), merge (rows)
    and write (msprobe.core.progress)."""
    start = time.perf_counter()
    if not cfg.apis:
        raise MsprobeError("no APIs to merge: config.yaml needs an 'api' list, e.g. 'api: [Distributed.all_reduce]'")
    input_dir, files, mode, indexes = _plan(cfg)
    out_dir = ensure_output_dir(cfg.output_dir)
    from msprobe.core.executor import is_ray

    failures: Optional[List[Tuple[str, str]]] = [] if is_ray(getattr(cfg, "backend", None)) else None
    ranks = _read_all(cfg, files, indexes, progress, failures)
    if not ranks:
        raise MsprobeError(f"merge_result: no rank report of {input_dir} could be read ({len(files)} failed: "
                           f"{failures[0][0] if failures else '?'}: {failures[0][1] if failures else ''})")

    missing: Dict[str, List[str]] = {}
    for rd in ranks:
        for api in rd.missing_apis:
            missing.setdefault(api, []).append(f"rank{rd.rank}")
    for api, where in missing.items():
        if len(where) < len(ranks):
            log.warning("%s not found in the report of %s", api, _short_list(where, 8))
    if progress:
        progress("merge", 0, None, "rows")
    names, sheets = assemble(ranks, indexes)
    if progress:
        progress("merge", len(names), len(names), "rows", f"{len(ranks)} rank column{'s' if len(ranks) != 1 else ''}")
    if not names:
        raise MsprobeError(
            f"none of the APIs in config.yaml ({_short_list(cfg.apis)}) occurs in the NPU Name column of the rank "
            f"reports in {input_dir}; names look like Distributed.all_reduce.0.forward.input.0: use 1 to 4 of "
            "their leading fields")
    for api, where in missing.items():
        if len(where) == len(ranks):
            log.warning("%s not found in any rank report", api)
    if len(names) > MAX_SHEET_ROWS:
        raise MsprobeError(f"{len(names)} rows to merge do not fit an Excel sheet ({MAX_SHEET_ROWS}); "
                           "name fewer or narrower APIs in config.yaml")

    header = [NPU_NAME] + [f"rank{rd.rank}" for rd in ranks]
    book = [(index, header, [names] + sheets[index]) for index in indexes]
    ts = _timestamp()
    target = unique_path(os.path.join(out_dir, f"{OUTPUT_PREFIX}_{ts}.xlsx"))
    from msprobe.core.merge.xlsxout import write_sheets

    if progress:
        progress("write", 0, len(names), "rows", f"{len(book)} sheet{'s' if len(book) != 1 else ''}")
    written = atomic_write(target, lambda tmp: write_sheets(tmp, book))
    if progress:
        progress("write", len(names), len(names), "rows",
                 f"{len(book)} sheet{'s' if len(book) != 1 else ''}, {os.path.basename(written)}")
    return MergeResult(written, mode, [rd.rank for rd in ranks], indexes, len(names), time.perf_counter() - start,
                       single=files[0].single, failures=list(failures or ()))
