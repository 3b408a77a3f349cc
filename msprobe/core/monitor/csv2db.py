"""Monitor CSV output -> one SQLite database (the reference's ``csv2db``, spec 4.10), framework-free.

    from msprobe.core.monitor.csv2db import csv2db, CSV2DBConfig
    csv2db(CSV2DBConfig(monitor_path, time_start=None, time_end=None, process_num=1, data_type_list=None,
                        output_dirpath=None, step_partition=500))

Writes ``{output_dirpath or monitor_path/{time}-csv2db}/monitor_metrics.db`` with the reference's schema:
``monitoring_targets(target_id, target_name, vpp_stage, micro_step)``, ``monitoring_metrics(metric_id,
metric_name)`` (one per data type), ``metric_stats(metric_id, stat_name)``, ``global_stats(stat_name,
stat_value)`` (``max_rank``, ``max_step``, ``min_step``, ``step_partition_size``) and, per data type and step
partition, ``metric_{id}_step_{start}_{end}(rank, step, target_id, <one REAL column per statistic>)`` with
primary key (rank, step, target_id).  The reference's own reader opens it (its schema, column for column).
``process_num`` is accepted for the reference's signature (1..128; the import runs in this process).
"""

from __future__ import annotations

import csv
import logging
import os
import re
import sqlite3
from dataclasses import dataclass
from typing import Optional

from msprobe.core.errors import MsprobeError
from msprobe.core.monitor.config import NUMERIC_OPS
from msprobe.core.monitor.csv2tb import ALL_DATA_TYPES, rank_dirs
from msprobe.core.monitor.names import time_tag

log = logging.getLogger("msprobe")

DB_TYPES = ALL_DATA_TYPES + ("other",)
# statistics columns in the reference's order
STAT_ORDER = ("norm", "min", "max", "zeros", "nans", "id", "mean")
_CSV = re.compile(r"^(.*)_(\d+)-(\d+)\.csv$")


@dataclass
class CSV2DBConfig:
    monitor_path: str
    time_start: Optional[str] = None
    time_end: Optional[str] = None
    process_num: int = 1
    data_type_list: Optional[list] = None
    output_dirpath: Optional[str] = None
    step_partition: int = 500


def _num(s):
    try:
        return float(s)
    except ValueError:
        return None


def _int(path, value, what) -> int:
    """An integer cell that SQLite stores (int64)."""
    try:
        v = int(value)
    except ValueError:
        v = None
    if v is None or not -(1 << 63) <= v < 1 << 63:
        raise MsprobeError(f"{path}: {what} {value[:50]!r} is not an integer; the file is damaged: give the "
                           f"monitor's own output")
    return v


def _read(folder, data_type, ranges=None):
    """(stats, rows): rows = (step, name, vpp, micro, values...) of every {data_type}_{a}-{b}.csv of folder;
    the files' step ranges (a, b) are added to ``ranges``."""
    stats, rows = None, []
    for f in sorted(os.listdir(folder)):
        m = _CSV.match(f)
        if not m or m.group(1) != data_type:
            continue
        path = os.path.join(folder, f)
        if ranges is not None:
            ranges.append((int(m.group(2)), int(m.group(3))))
        try:
            with open(path, newline="", encoding="utf-8") as fh:
                reader = csv.reader(fh)
                header = next(reader, None)
                if not header or header[:2] != ["vpp_stage", "name"]:
                    raise MsprobeError(f"{path}: not a monitor CSV (its header does not start with vpp_stage,name)")
                if "step" not in header:
                    raise MsprobeError(f"{path}: not a monitor CSV (its header has no step column)")
                cols = [h for h in STAT_ORDER if h in header and h in NUMERIC_OPS]
                if stats is None:
                    stats = cols
                missing = [c for c in stats if c not in header]
                if missing:
                    raise MsprobeError(f"{path}: its header lacks {', '.join(missing)}, which the other "
                                       f"{data_type} files hold")
                idx = [header.index(c) for c in stats]
                i_step = header.index("step")
                i_micro = header.index("micro_step") if "micro_step" in header else None
                for r in reader:
                    if len(r) != len(header):
                        raise MsprobeError(f"{path}: a row has {len(r)} cells, the header {len(header)}")
                    rows.append((_int(path, r[i_step], "step"), r[1], _int(path, r[0], "vpp_stage"),
                                 _int(path, r[i_micro], "micro_step") if i_micro is not None else 0,
                                 *[_num(r[j]) for j in idx]))
        except (OSError, UnicodeDecodeError, csv.Error) as exc:
            why = exc.strerror if isinstance(exc, OSError) and exc.strerror else f"{type(exc).__name__}: {exc}"
            raise MsprobeError(f"{path}: cannot be read as a monitor CSV ({why}); give the monitor's own output "
                               f"folder") from None
    return stats or [], rows


def _create(db):
    db.executescript("""
        CREATE TABLE monitoring_targets (
            target_id INTEGER PRIMARY KEY AUTOINCREMENT, target_name TEXT NOT NULL, vpp_stage INTEGER NOT NULL,
            micro_step INTEGER NOT NULL DEFAULT 0, UNIQUE(target_name, vpp_stage, micro_step));
        CREATE TABLE monitoring_metrics (metric_id INTEGER PRIMARY KEY AUTOINCREMENT, metric_name TEXT UNIQUE NOT NULL);
        CREATE TABLE metric_stats (
            metric_id INTEGER NOT NULL, stat_name TEXT NOT NULL, PRIMARY KEY (metric_id, stat_name),
            FOREIGN KEY (metric_id) REFERENCES monitoring_metrics(metric_id)) WITHOUT ROWID;
        CREATE TABLE global_stats (stat_name TEXT PRIMARY KEY, stat_value INTEGER NOT NULL) WITHOUT ROWID;
    """)


def csv2db(config: CSV2DBConfig) -> str:
    """Import; returns the output folder."""
    if not isinstance(config.process_num, int) or not 1 <= config.process_num <= 128:
        raise MsprobeError(f"process_num must be 1..128, not {config.process_num!r}")
    if not isinstance(config.step_partition, int) or config.step_partition < 1:
        raise MsprobeError(f"step_partition must be a positive integer, not {config.step_partition!r}")
    types = list(config.data_type_list) if config.data_type_list else list(DB_TYPES)
    bad = [t for t in types if t not in DB_TYPES]
    if bad:
        raise MsprobeError(f"data type {bad[0]!r} is not a monitor output; one of {', '.join(DB_TYPES)}")
    dirs = rank_dirs(config.monitor_path, config.time_start, config.time_end)
    if not dirs:
        raise MsprobeError(f"monitor output {config.monitor_path}: no rank folder ({{time}}-rank{{R}}-{{id}}) in the "
                           f"time range")
    out = config.output_dirpath or os.path.join(config.monitor_path, f"{time_tag()}-csv2db")
    os.makedirs(out, mode=0o750, exist_ok=True)
    path = os.path.join(out, "monitor_metrics.db")
    if os.path.exists(path):
        raise MsprobeError(f"{path} exists; give another output folder")
    tmp = path + f".{os.getpid()}.tmp"
    db = sqlite3.connect(tmp)
    try:
        _create(db)
        targets, metrics, tables = {}, {}, set()
        ranges = []                 # the CSV files' step ranges: global min_step / max_step, as the reference
        for rank, folder in sorted(dirs.items()):
            inserted = 0
            for dt in types:
                stats, rows = _read(folder, dt, ranges)
                if not rows:
                    continue
                if dt not in metrics:
                    cur = db.execute("INSERT INTO monitoring_metrics (metric_name) VALUES (?)", (dt,))
                    metrics[dt] = (cur.lastrowid, stats)
                    db.executemany("INSERT INTO metric_stats VALUES (?, ?)", [(cur.lastrowid, s) for s in stats])
                mid, mstats = metrics[dt]
                keep = [stats.index(s) if s in stats else None for s in mstats]
                by_table = {}
                for step, name, vpp, micro, *vals in rows:
                    key = (name, vpp, micro)
                    tid = targets.get(key)
                    if tid is None:
                        tid = targets[key] = db.execute(
                            "INSERT INTO monitoring_targets (target_name, vpp_stage, micro_step) VALUES (?, ?, ?)",
                            key).lastrowid
                    a = step // config.step_partition * config.step_partition
                    by_table.setdefault((a, a + config.step_partition - 1), []).append(
                        (rank, step, tid, *[vals[i] if i is not None else None for i in keep]))
                for (a, b), recs in by_table.items():
                    table = f"metric_{mid}_step_{a}_{b}"
                    if table not in tables:
                        cols = ", ".join(f"{s} REAL DEFAULT NULL" for s in mstats)
                        db.execute(f"CREATE TABLE {table} (rank INTEGER NOT NULL, step INTEGER NOT NULL CHECK(step "
                                   f"BETWEEN {a} AND {b}), target_id INTEGER NOT NULL, {cols}, PRIMARY KEY (rank, "
                                   f"step, target_id), FOREIGN KEY (target_id) REFERENCES "
                                   f"monitoring_targets(target_id)) WITHOUT ROWID")
                        tables.add(table)
                    marks = ", ".join("?" * (3 + len(mstats)))
                    try:
                        db.executemany(f"INSERT INTO {table} VALUES ({marks})", recs)
                    except sqlite3.IntegrityError:
                        raise MsprobeError(f"{folder}: {dt} has a (step, name) twice; the CSV files overlap") from None
                    inserted += len(recs)
            log.info("Rank %d inserted %d rows", rank, inserted)
        if ranges:
            db.executemany("INSERT INTO global_stats VALUES (?, ?)",
                           [("max_rank", max(dirs)), ("max_step", max(b for _, b in ranges)),
                            ("min_step", min(a for a, _ in ranges)),
                            ("step_partition_size", config.step_partition)])
        db.commit()
        db.close()
        os.link(tmp, path)                      # never over an existing database
    finally:
        try:
            db.close()
        except Exception:   # noqa: BLE001
            pass
        if os.path.exists(tmp):
            os.unlink(tmp)
    log.info("Data import completed. Output saved to: %s", out)
    return out
