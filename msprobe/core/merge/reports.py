"""Finding the rank reports in a directory, telling their mode, and pulling the wanted rows out of one.

Reports are ``compare_result_rank{N}_{YYYYmmddHHMMSS}.xlsx`` (also ``rank{N}-rank{N}``, the reference's
form) or ``.csv`` (what ``msprobe compare --csv`` writes; the reference cannot read those).  The mode
comes from the header: ``NPU MD5`` -> md5, ``Cosine`` -> tensor, ``Max diff`` -> statistics.
"""

from __future__ import annotations

import csv
import logging
import os
import re
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple

from msprobe.core.errors import MsprobeError
from msprobe.core.fileio import check_path, human_size

log = logging.getLogger("msprobe")

NPU_NAME = "NPU Name"
NPU_MAX = "NPU max"
BENCH_MAX = "Bench max"
RG_CONSISTENT = "Requires_grad Consistent"
STAT_INDEXES = ("Max diff", "Min diff", "Mean diff", "L2norm diff", "MaxRelativeErr", "MinRelativeErr",
                "MeanRelativeErr", "NormRelativeErr")
TENSOR_INDEXES = ("Cosine", "EucDist", "MaxAbsErr", "MaxRelativeErr", "One Thousandth Err Ratio",
                  "Five Thousandths Err Ratio")
#: compare indexes each mode can merge (the reference's lists)
VALID_INDEXES = {
    "statistics": STAT_INDEXES + (RG_CONSISTENT,),
    "tensor": TENSOR_INDEXES + (RG_CONSISTENT,),
}
#: cells that hold no number; shown as "NPU:<NPU max>  Bench:<Bench max>" instead (reference behaviour)
NO_VALUE = frozenset(("N/A", "unsupported", "Nan"))
#: size limit of one report file (the reference's limit for .xlsx and .csv)
MAX_REPORT_BYTES = 1024 ** 3

RANK_RE = re.compile(r"^compare_result_rank(\d+)(?:-rank\1)?_(\d{14})(?:_(\d+))?\.(xlsx|csv)$")
#: other files compare writes next to its reports (advisor, first-divergence analysis): skipped quietly
COMPANION_RE = re.compile(r"^(?:advisor|diff_analyze|compare_result)[\w.-]*\.(?:txt|json)$")
#: the report of a single-process compare (a dump.json pair or one unnumbered 'rank' dir): no rank number
SINGLE_RE = re.compile(r"^compare_result_(?:rank_|rank-rank_)?(\d{14})(?:_(\d+))?\.(xlsx|csv)$")
SINGLE_RANK = 0  # the rank a single-process report is merged as (the -da analysis numbers it 0 too)


@dataclass(frozen=True)
class RankFile:
    rank: int
    path: str
    fmt: str  # "xlsx" or "csv"
    stamp: Tuple[str, int, int]  # (timestamp, numbered copy, xlsx first) for picking the newest
    single: bool = False  # a single-process report (no rank number in its name), merged as rank 0


@dataclass
class RankData:
    """What one rank contributes: its selected names (in order) and, per index, their values."""

    rank: int
    path: str
    names: List[str]
    values: Dict[str, list]
    missing_apis: List[str] = field(default_factory=list)
    rows: int = 0


def _short_list(items: Sequence[str], n: int = 5) -> str:
    items = list(items)
    return ", ".join(items[:n]) + (f" and {len(items) - n} more" if len(items) > n else "")


def find_rank_reports(input_dir: str) -> List[RankFile]:
    """The newest report of every rank in ``input_dir``, ordered by rank number; warns about the rest."""
    try:
        entries = sorted(os.listdir(input_dir))
    except OSError as exc:
        raise MsprobeError(f"input directory {input_dir} cannot be listed: {exc.strerror}")
    by_rank: Dict[int, List[RankFile]] = {}
    single, unrelated = [], []
    for name in entries:
        full = os.path.join(input_dir, name)
        m = RANK_RE.match(name)
        if m and os.path.isfile(full):
            rank = int(m.group(1))
            fmt = m.group(4)
            stamp = (m.group(2), int(m.group(3) or 0), 1 if fmt == "xlsx" else 0)
            by_rank.setdefault(rank, []).append(RankFile(rank, full, fmt, stamp))
        elif SINGLE_RE.match(name) and os.path.isfile(full):
            m = SINGLE_RE.match(name)
            single.append(RankFile(SINGLE_RANK, full, m.group(3), (m.group(1), int(m.group(2) or 0),
                                                                    1 if m.group(3) == "xlsx" else 0), True))
        elif name.endswith((".xlsx", ".csv")) or not (name.startswith(".") or COMPANION_RE.match(name)):
            unrelated.append(name)
    if single and by_rank:
        log.warning("skipping single-process report(s) %s: the directory also holds rank reports "
                    "(compare_result_rank{N}_*), which are merged", _short_list([os.path.basename(f.path) for f in single]))
    elif single:
        # the report of a single-process compare (no rank number in its name) is merged as rank 0
        by_rank[SINGLE_RANK] = single
    if unrelated:
        log.warning("ignoring %d file(s) in %s that are not rank compare reports: %s",
                    len(unrelated), input_dir, _short_list(unrelated))
    chosen = []
    for rank in sorted(by_rank):
        files = sorted(by_rank[rank], key=lambda f: f.stamp)
        if len(files) > 1:
            log.warning("%s has %d reports in %s; merging the newest, %s, and ignoring %s",
                        "the single-process compare" if files[-1].single else f"rank{rank}", len(files),
                        input_dir, os.path.basename(files[-1].path),
                        _short_list([os.path.basename(f.path) for f in files[:-1]]))
        chosen.append(files[-1])
    return chosen


def check_report_file(f: RankFile) -> None:
    check_path(f.path, f"rank{f.rank} report", "file")
    size = os.path.getsize(f.path)
    if size > MAX_REPORT_BYTES:
        raise MsprobeError(f"rank{f.rank} report {f.path} is {human_size(size)}, over the limit of "
                           f"{human_size(MAX_REPORT_BYTES)} for a report; compare fewer APIs per run")


def detect_mode(header: Sequence[str]) -> Optional[str]:
    cols = set(header)
    if "NPU MD5" in cols or "BENCH MD5" in cols:
        return "md5"
    if "Cosine" in cols:
        return "tensor"
    if "Max diff" in cols:
        return "statistics"
    return None


def _csv_reader(fh):
    # stack columns can be long; the default field limit of 128 KiB would reject them
    csv.field_size_limit(1 << 30)
    return csv.reader(fh)


def read_report_header(f: RankFile) -> List[str]:
    check_report_file(f)
    if f.fmt == "csv":
        try:
            with open(f.path, "r", encoding="utf-8-sig", newline="") as fh:
                header = next(_csv_reader(fh), None)
        except UnicodeDecodeError:
            raise MsprobeError(f"{f.path} is not UTF-8 text; it is not a compare report: regenerate it with "
                               "msprobe compare --csv or move it out of the input directory")
        except csv.Error as exc:
            raise MsprobeError(f"{f.path} is not a valid CSV file ({exc}); regenerate it with msprobe compare --csv")
        except OSError as exc:
            raise MsprobeError(f"{f.path} cannot be read: {exc.strerror}")
        if not header:
            raise MsprobeError(f"{f.path} is empty (no header row); regenerate it with msprobe compare --csv "
                               "or move it out of the input directory")
        return header
    from msprobe.core.merge.xlsxread import read_header

    return read_header(f.path)


# ------------------------------------------------------------------------------------ value handling


def _as_text(v) -> str:
    """A value as the reference's pandas-read table shows it inside 'NPU:<v>  Bench:<v>'."""
    if v is None:
        return ""
    if v.__class__ is float and v.is_integer():
        return str(int(v))
    return str(v)


def _csv_value(s: str):
    """A CSV field as the value the xlsx report holds: number, text or None (empty / NaN)."""
    if not s:
        return None
    c = s[0]
    if c in "0123456789-+.ni":  # numbers, nan, inf
        try:
            v = float(s)
        except ValueError:
            pass
        else:
            return None if v != v else v
    elif c == "'" and len(s) > 1:
        from msprobe.core.dump.reader import INJECTION_RE

        if INJECTION_RE.search(s[1:]):  # undo the CSV writer's formula guard
            return s[1:]
    return s


# ------------------------------------------------------------------------------------ extraction


def _columns(f: RankFile, header: List[str], indexes: Sequence[str]) -> Tuple[int, List[int], int, int]:
    pos = {}
    for i, h in enumerate(header):
        pos.setdefault(h, i)
    missing = [c for c in (NPU_NAME, NPU_MAX, BENCH_MAX, *indexes) if c not in pos]
    if missing:
        raise MsprobeError(f"rank{f.rank} report {f.path} has no column(s) {_short_list(missing)}; "
                           "it is not a complete compare report: regenerate it with msprobe compare")
    return pos[NPU_NAME], [pos[c] for c in indexes], pos[NPU_MAX], pos[BENCH_MAX]


def extract(f: RankFile, apis: Sequence[str], indexes: Sequence[str]) -> RankData:
    """The rows of ``f`` whose NPU Name contains ``<api>.`` for some api, per api in config order, with the
    values of ``indexes`` (first row of a repeated name wins; no-value cells become NPU/Bench max text)."""
    patterns = [a + "." for a in apis]
    buckets: List[List[list]] = [[] for _ in patterns]
    name_col = 0

    def consider(row: list) -> None:
        name = row[name_col] if len(row) > name_col else None
        if name.__class__ is not str:
            return
        for k, p in enumerate(patterns):
            if p in name:
                buckets[k].append(row)

    rows = 0
    if f.fmt == "csv":
        try:
            with open(f.path, "r", encoding="utf-8-sig", newline="") as fh:
                reader = _csv_reader(fh)
                header = next(reader, None) or []
                name_col, idx_cols, max_col, bmax_col = _columns(f, header, indexes)
                for row in reader:
                    rows += 1
                    name = row[name_col] if len(row) > name_col else ""
                    if any(p in name for p in patterns):
                        consider(row)
        except UnicodeDecodeError:
            raise MsprobeError(f"{f.path} is not UTF-8 text; regenerate it with msprobe compare --csv")
        except csv.Error as exc:
            raise MsprobeError(f"{f.path} is not a valid CSV file ({exc}); regenerate it with msprobe compare --csv")
        convert = _csv_value
    else:
        from msprobe.core.merge.xlsxread import SheetReader

        with SheetReader(f.path) as reader:
            header = reader.header()
            name_col, idx_cols, max_col, bmax_col = _columns(f, header, indexes)
            esc = [p.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").encode("utf-8")
                   for p in patterns]
            # rows come back holding only these columns, in this order
            wanted = [name_col, max_col, bmax_col, *idx_cols]
            name_col, max_col, bmax_col, idx_cols = 0, 1, 2, list(range(3, 3 + len(idx_cols)))
            for row in reader.rows(wanted, prefilter=esc, name_test=lambda n: any(p in n for p in patterns)):
                consider(row)
            rows = -1  # not counted: prefiltered rows are never parsed
        convert = None

    names: List[str] = []
    seen = set()
    picked: List[list] = []
    missing = []
    for api, bucket in zip(apis, buckets):
        if not bucket:
            missing.append(api)
        for row in bucket:
            name = row[name_col]
            if name not in seen:
                seen.add(name)
                names.append(name)
                picked.append(row)

    values: Dict[str, list] = {}
    for index, col in zip(indexes, idx_cols):
        out = []
        for row in picked:
            v = row[col] if col < len(row) else None
            if v.__class__ is str and v in NO_VALUE:
                npu = row[max_col] if max_col < len(row) else None
                bench = row[bmax_col] if bmax_col < len(row) else None
                if convert is not None:
                    npu, bench = convert(npu), convert(bench)
                v = f"NPU:{_as_text(npu)}  Bench:{_as_text(bench)}"
            elif convert is not None:
                v = convert(v)
            out.append(v)
        values[index] = out
    return RankData(f.rank, f.path, names, values, missing, rows)
