"""``config_check -c bench.zip cmp.zip -o DIR``: compare two packs into ``DIR/result.xlsx``.

``DIR`` gets ``bench/`` and ``cmp/`` (the packs' entries, as the reference extracts them) and ``result.xlsx``
(sheet ``summary``, then one sheet per checker present in both packs).  Both packs are read and compared
in memory before anything is written; the folders are filled under temporary names and renamed, the
workbook is written atomically; a ``DIR`` already holding any of the three is refused (never overwritten).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from typing import List, Optional

from msprobe.core.config_check import pack as P
from msprobe.core.config_check.checkers import CheckResult, run_checkers
from msprobe.core.config_check.collect import log
from msprobe.core.errors import MsprobeError

RESULT_FILE = "result.xlsx"
SUMMARY_HEADER = ["filename", "pass_check"]


def _columns(header, rows):
    return [[row[j] for row in rows] for j in range(len(header))]


def write_result(path: str, results: List[CheckResult]) -> str:
    from msprobe.core.fileio import atomic_write
    from msprobe.core.io.xlsx import write_workbook

    summary_rows = [[r.name, r.verdict] for r in results]
    sheets = [("summary", SUMMARY_HEADER, _columns(SUMMARY_HEADER, summary_rows))]
    sheets += [(r.name, r.header, _columns(r.header, r.rows)) for r in results]
    return atomic_write(path, lambda tmp: write_workbook(tmp, sheets))


def _extract(pack: P.Pack, final_dir: str) -> None:
    parent = os.path.dirname(final_dir)
    tmp = tempfile.mkdtemp(prefix=".msprobe-cc-", dir=parent)
    try:
        for name, data in pack.entries.items():
            target = os.path.join(tmp, *name.split("/"))
            try:
                os.makedirs(os.path.dirname(target), mode=0o750, exist_ok=True)
                fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o640)
            except (FileExistsError, NotADirectoryError, IsADirectoryError):
                # two entries where one is a file and the other a folder of the same name (a/b and a/b/c):
                # no pack config_check writes holds that
                raise MsprobeError(f"pack {pack.path}: its entry {name!r} clashes with another entry of the same "
                                   f"name used as a folder; the pack is damaged: collect it again") from None
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
        os.chmod(tmp, 0o750)
        os.rename(tmp, final_dir)  # fails (never replaces) when final_dir appeared meanwhile and is not empty
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def check_output_dir(out_dir: str) -> str:
    out_dir = os.path.abspath(out_dir)
    if os.path.isdir(out_dir):
        taken = [n for n in ("bench", "cmp", RESULT_FILE) if os.path.lexists(os.path.join(out_dir, n))]
        if taken:
            raise MsprobeError(f"output directory {out_dir} already holds {', '.join(taken)} of an earlier "
                               f"config_check; choose another -o or remove them (nothing is overwritten)")
    return out_dir


def compare_packs(bench_zip: str, cmp_zip: str, out_dir: str, fmk: Optional[str] = None):
    """Compare two packs; returns (path of result.xlsx, [CheckResult ...] in summary order)."""
    from msprobe.core.fileio import ensure_output_dir, output_error

    out_dir = check_output_dir(out_dir)
    bench = P.read_pack(bench_zip, "bench pack")
    cmp = P.read_pack(cmp_zip, "cmp pack")
    results = run_checkers(bench, cmp, fmk)
    ensure_output_dir(out_dir)
    made = []
    try:
        for pack, name in ((bench, "bench"), (cmp, "cmp")):
            final = os.path.join(out_dir, name)
            _extract(pack, final)
            made.append(final)
            log(f"extract zip file {pack.path} to {final}")
        result = write_result(os.path.join(out_dir, RESULT_FILE), results)
    except MsprobeError:
        for d in made:
            shutil.rmtree(d, ignore_errors=True)
        raise
    except OSError as exc:
        for d in made:
            shutil.rmtree(d, ignore_errors=True)
        err = output_error(exc, os.path.join(out_dir, RESULT_FILE))
        raise (err or MsprobeError(f"cannot write into {out_dir}: {exc.strerror or exc}; choose another -o")) from None
    log(f"config checking result save to {out_dir}")
    return result, results
