"""xlsx libraries against msprobe's own reader and writer (issue 22 item 8), in the same run.

Reading: merge_result's input, 64 rank reports of 20,000 rows x 28 columns (made by merge_bench.py, reused from
its folder), read in this process, one file after the other:

* ``msprobe``: msprobe.core.merge.xlsxread.SheetReader, as merge_result calls it (the rows whose name holds one of
  the config's APIs, the name / NPU max / Bench max / 8 index columns), and every cell of every row;
* ``python-calamine`` (Rust) ``load_workbook(path).get_sheet_by_index(0).to_python()``;
* ``openpyxl`` read-only ``iter_rows(values_only=True)``.

A library reads every cell of a sheet, merge_result's task then filters its rows in Python (that part is timed too).

Writing: the highlighted compare report of benchmarks/bench_xlsx.py's ``build_table`` (23,000 rows x 28 columns,
16 float columns with NaN/inf, ~5 % of the rows red or yellow), written by

* ``msprobe``: msprobe.core.io.xlsx.write_xlsx;
* ``xlsxwriter`` (constant_memory) and ``rustpy-xlsxwriter`` (Rust; rows as dicts, fills as row formats).

Turning columns into the row lists / dicts a library wants is done once, outside the timing (it favours them).
Each written file is read back with openpyxl: values (NaN = empty, inf = text "inf") and the fill colour of every
row must match the table; with LibreOffice (``soffice``) on PATH each file is also opened headless and saved
again as xlsx by LibreOffice, and that file is checked the same way. Libraries that are not installed are skipped with a message:

    pip install python-calamine openpyxl xlsxwriter rustpy-xlsxwriter     # a scratch venv is fine
    python benchmarks/xlsx_libs_bench.py [--ranks 64] [--rows 20000] [--write-rows 23000] [--repeat 2]
"""

from __future__ import annotations

import argparse
import csv
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import numpy as np  # noqa: E402

import bench_xlsx  # noqa: E402
import harness  # noqa: E402
import merge_bench  # noqa: E402
from msprobe.core.io.xlsx import write_xlsx  # noqa: E402
from msprobe.core.merge.xlsxread import SheetReader  # noqa: E402

TASKS = {
    "typical": ("Distributed.all_reduce", "Distributed.all_gather_into_tensor", "Functional.linear"),
    "all": ("Functional", "Torch", "Tensor", "Distributed"),
}
INDEXES = ["Max diff", "Min diff", "Mean diff", "L2norm diff", "MaxRelativeErr", "MinRelativeErr",
           "MeanRelativeErr", "NormRelativeErr"]


def have(module: str) -> bool:
    try:
        __import__(module)
        return True
    except ImportError:
        print(f"  ({module} is not installed: skipped; pip install {module.replace('_', '-')})")
        return False


# ---------------------------------------------------------------------------------------------------- reading
def wanted_columns(header):
    return [header.index(h) for h in ["NPU Name", "NPU max", "Bench max", *INDEXES]]


def ours_task(path, patterns):
    with SheetReader(path) as reader:
        header = reader.header()
        esc = [p.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").encode() for p in patterns]
        return list(reader.rows(wanted_columns(header), prefilter=esc,
                                name_test=lambda n: any(p in n for p in patterns)))


def ours_full(path):
    with SheetReader(path) as reader:
        header = reader.header()
        return [list(header)] + [list(r) for r in reader.rows(range(len(header)))]


def calamine_full(path):
    from python_calamine import load_workbook
    wb = load_workbook(path)
    try:
        return wb.get_sheet_by_index(0).to_python()
    finally:
        getattr(wb, "close", lambda: None)()


def openpyxl_full(path):
    import openpyxl
    wb = openpyxl.load_workbook(path, read_only=True)
    try:
        return [list(r) for r in wb.worksheets[0].iter_rows(values_only=True)]
    finally:
        wb.close()


def lib_task(rows, patterns):
    """merge_result's selection over rows a library returned (row 0 = header)."""
    cols = wanted_columns([str(h) for h in rows[0]])
    out = []
    for row in rows[1:]:
        name = row[cols[0]]
        if name.__class__ is str and any(p in name for p in patterns):
            out.append(tuple(row[c] for c in cols))
    return out


def norm(v):
    """One spelling of a cell value across readers: empty = None, integral floats as float."""
    if v is None or v == "":
        return None
    if isinstance(v, bool):
        return v
    if isinstance(v, (int, float)):
        return float(v)
    return v


def bench_read(files, repeat):
    """Every reader on one file, then the next file: on a shared machine a change of load then hits every reader
    alike. Per file the best of REPEAT runs counts; the sums over the files are printed."""
    print(f"\n== reading {len(files)} reports ({sum(f.stat().st_size for f in files) / 1e6:.0f} MB), "
          f"readers interleaved file by file, best of {repeat} per file ==")
    readers = [(f"msprobe SheetReader, merge task {task}", (lambda p, pats=pats: ours_task(p, pats)))
               for task, pats in TASKS.items()]
    readers.append(("msprobe SheetReader, every cell", ours_full))
    libs = []
    for label, fn, module in (("python-calamine", calamine_full, "python_calamine"),
                              ("openpyxl read-only", openpyxl_full, "openpyxl")):
        if have(module):
            libs.append(label)
            readers.append((f"{label}, every cell", fn))
    totals = {label: 0.0 for label, _ in readers}
    for task in TASKS:
        for lib in libs:
            totals[f"{lib}, merge task {task}"] = 0.0
    checks = {}
    for k, f in enumerate(files):
        outputs = {}
        for label, fn in readers:
            best, out = harness.best_of(lambda: fn(str(f)), repeat)
            totals[label] += best
            outputs[label] = out
        for lib in libs:
            rows_all = outputs[f"{lib}, every cell"]
            for task, patterns in TASKS.items():
                t0 = time.perf_counter()
                picked = lib_task(rows_all, patterns)
                totals[f"{lib}, merge task {task}"] += time.perf_counter() - t0
                if k == 0:
                    mine = outputs[f"msprobe SheetReader, merge task {task}"]
                    checks[f"{lib}, merge task {task}"] = (
                        [tuple(map(norm, r)) for r in mine] == [tuple(map(norm, r)) for r in picked], len(mine))
            if k == 0:
                got = [[norm(v) for v in r] for r in rows_all]
                want = [[norm(v) for v in r] for r in outputs["msprobe SheetReader, every cell"]]
                width = max(len(r) for r in want)
                got = [r + [None] * (width - len(r)) for r in got]
                want = [r + [None] * (width - len(r)) for r in want]
                bad = sum(1 for x, y in zip(got, want) if x != y) + abs(len(got) - len(want))
                checks[f"{lib}, every cell"] = (bad == 0, len(want))
        del outputs
        if (k + 1) % 8 == 0:
            print(f"  ... {k + 1}/{len(files)} files", flush=True)
    for lib in libs:     # a library's merge task = its read of every cell + the selection in Python
        for task in TASKS:
            totals[f"{lib}, merge task {task}"] += totals[f"{lib}, every cell"]
    for label in sorted(totals, key=lambda x: (x.split(",")[1], totals[x])):
        check = checks.get(label)
        note = "" if check is None else f"  same values as msprobe's on {files[0].name}: {check[0]} ({check[1]} rows)"
        print(f"  {label:45s} {totals[label]:8.2f} s{note}")
    return totals


PERCENT_TEXTS = ["12.5%", "0.000414401757284722%", "1929861.1276898438%", "1.5e-05%", "-3.25%", "N/A"]


def percent_fidelity(workdir):
    """What each reader returns for the relative-error cells of a current compare report (percent-formatted
    numbers, msprobe >= issue 16): merge_result must give the report's text back ("12.5%")."""
    from msprobe.core.io.xlsx import RELATIVE_ERROR_COLUMNS
    path = os.path.join(workdir, "percent.xlsx")
    write_xlsx(path, ["NPU Name", "MaxRelativeErr"], [[f"r{i}" for i in range(len(PERCENT_TEXTS))], PERCENT_TEXTS],
               percent_columns=RELATIVE_ERROR_COLUMNS)
    print(f"\n== percent cells (a compare report's relative errors), written as {PERCENT_TEXTS} ==")
    with SheetReader(path) as r:
        r.header()
        print(f"  msprobe SheetReader: {[row[1] for row in r.rows([0, 1])]}")
    for label, fn, module in (("python-calamine", calamine_full, "python_calamine"),
                              ("openpyxl read-only", openpyxl_full, "openpyxl")):
        if have(module):
            print(f"  {label}: {[row[1] for row in fn(path)[1:]]}")


# ---------------------------------------------------------------------------------------------------- writing
FILL = {1: "FF0000", 2: "FFFF00"}


def rows_with_header(header, columns):
    return [list(header)] + bench_xlsx.rows_for_libs(columns)


def write_ours(path, header, columns, styles, _rows, _records):
    write_xlsx(path, header, columns, row_styles=styles)


def write_xlsxwriter(path, header, _columns, styles, rows, _records):
    bench_xlsx.bench_xlsxwriter(path, header, rows, styles)


def write_rustpy(path, header, _columns, styles, _rows, records):
    from rustpy_xlsxwriter import Format, write_worksheet
    fmts = {1: Format().set_pattern("solid").set_background_color("#FF0000"),
            2: Format().set_pattern("solid").set_background_color("#FFFF00")}
    row_formats = {i + 1: fmts[s] for i, s in enumerate(styles.tolist()) if s}
    write_worksheet(records, path, sheet_name="Sheet1", row_formats=row_formats, inf_value="inf")


def expected_rows(header, columns):
    rows = bench_xlsx.rows_for_libs(columns)
    return [[norm(v) for v in r] for r in rows]


def same_row(got, want, rel_tol):
    if rel_tol == 0:
        return got == want
    return len(got) == len(want) and all(
        a == b or (isinstance(a, float) and isinstance(b, float) and math.isclose(a, b, rel_tol=rel_tol))
        for a, b in zip(got, want))


def check_openpyxl(path, want_rows, styles, rel_tol=0.0):
    """Rows of a written file, read back with openpyxl, whose values differ from the table; rows whose written
    cells have another fill than the row's style; rows whose empty cells carry no fill of their own (a library
    that fills the row through a row style leaves them out: Excel and LibreOffice still colour them, and the rest
    of the row to the sheet's edge)."""
    import openpyxl
    wb = openpyxl.load_workbook(path, read_only=True)
    ws = wb.worksheets[0]
    bad_values = bad_fills = unfilled_empty = 0
    it = ws.iter_rows()
    next(it)
    n = 0
    for (cells, want, style) in zip(it, want_rows, styles.tolist()):
        n += 1
        got = [norm(c.value) for c in cells]
        got += [None] * (len(want) - len(got))
        if not same_row(got, want, rel_tol):
            bad_values += 1
        full, empty = set(), set()
        for c in cells:
            fill = getattr(c, "fill", None)
            colour = str(fill.fgColor.rgb)[-6:].upper() if fill is not None and fill.fill_type == "solid" else None
            (full if norm(c.value) is not None else empty).add(colour)
        if full != {FILL.get(style)}:
            bad_fills += 1
        if style and (empty - {FILL.get(style)} or len([c for c in cells if hasattr(c, "fill")]) < len(want)):
            unfilled_empty += 1
    wb.close()
    missing = max(len(want_rows) - n, 0)
    return bad_values + missing, bad_fills + missing, unfilled_empty


def float_digits_lost(path, want_rows):
    """Largest relative difference between a float written and the float read back (0.0: exact round trip)."""
    import openpyxl
    wb = openpyxl.load_workbook(path, read_only=True)
    worst = 0.0
    for row, want in zip(wb.worksheets[0].iter_rows(min_row=2, values_only=True), want_rows):
        for g, w in zip(row, want):
            if isinstance(w, float) and isinstance(g, (int, float)) and w != 0 and g != w:
                worst = max(worst, abs(g - w) / abs(w))
    wb.close()
    return worst


def check_soffice(path, want_rows, styles, workdir):
    """Open the file in LibreOffice (headless), let it save its own xlsx, and check that one with openpyxl:
    what LibreOffice understood of the values and fills."""
    exe = shutil.which("soffice") or shutil.which("libreoffice")
    if exe is None:
        return "LibreOffice: soffice not installed, not checked"
    out = Path(workdir) / ("lo_" + Path(path).stem)
    out.mkdir(exist_ok=True)
    profile = Path(workdir) / "lo_profile"
    p = subprocess.run([exe, f"-env:UserInstallation={profile.as_uri()}", "--headless", "--convert-to",
                        "xlsx:Calc MS Excel 2007 XML", "--outdir", str(out), path],
                       capture_output=True, text=True, timeout=900)
    saved = out / Path(path).name
    if p.returncode != 0 or not saved.exists():
        return f"LibreOffice failed: {(p.stderr or p.stdout).strip()[-200:]}"
    # LibreOffice 7.4 saves numbers with 15 significant digits: floats are compared to 1e-14 there
    bv, bf, _ = check_openpyxl(str(saved), want_rows, styles, rel_tol=1e-14)
    return f"LibreOffice re-saved: {bv} rows with other values (15 digits), {bf} rows with other fills"


def bench_write(nrows, repeat):
    header, columns, styles = bench_xlsx.build_table(nrows)
    print(f"\n== writing the highlighted report: {nrows} rows x {len(header)} columns, "
          f"{int((styles > 0).sum())} rows red/yellow ==")
    t0 = time.perf_counter()
    rows = bench_xlsx.rows_for_libs(columns)
    t_rows = time.perf_counter() - t0
    records = [dict(zip(header, r)) for r in rows]
    t_records = time.perf_counter() - t0
    print(f"  (not timed below: columns -> row lists {t_rows:.3f} s, -> dicts {t_records:.3f} s)")
    want = expected_rows(header, columns)
    writers = [("msprobe write_xlsx", write_ours, None), ("xlsxwriter constant_memory", write_xlsxwriter, "xlsxwriter"),
               ("rustpy-xlsxwriter", write_rustpy, "rustpy_xlsxwriter")]
    writers = [w for w in writers if not w[2] or have(w[2])]
    times = {label: [] for label, _, _ in writers}
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        paths = {label: os.path.join(tmp, label.split()[0] + ".xlsx") for label, _, _ in writers}
        for _ in range(repeat):          # round robin: a change of load on a shared machine hits every writer
            for label, fn, _ in writers:
                if os.path.exists(paths[label]):
                    os.remove(paths[label])
                t0 = time.perf_counter()
                fn(paths[label], header, columns, styles, rows, records)
                times[label].append(time.perf_counter() - t0)
        for label, _, _ in writers:
            path = paths[label]
            best = results[label] = min(times[label])
            try:
                import openpyxl  # noqa: F401
                bv, bf, ue = check_openpyxl(path, want, styles)
                note = f"openpyxl: {bv} rows with other values, {bf} rows with other fills on written cells"
                if ue:
                    note += f", {ue} filled rows whose empty cells have no fill of their own (row style)"
                if bv:
                    note += f" (largest relative float error {float_digits_lost(path, want):.1e})"
            except ImportError:
                note = "openpyxl not installed: not checked"
            note += "; " + check_soffice(path, want, styles, tmp)
            print(f"  {label:30s} best {best:6.3f} s (first {times[label][0]:6.3f} s)  "
                  f"{os.path.getsize(path) / 1e6:5.2f} MB  {note}")
    return results


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", type=int, default=64)
    ap.add_argument("--rows", type=int, default=20000)
    ap.add_argument("--write-rows", type=int, default=23000)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--dir", default=os.path.join(tempfile.gettempdir(), "msprobe_merge_bench"),
                    help="merge_bench.py's input folder (reports generated there once and reused)")
    ap.add_argument("--skip", default="", help="comma list: percent,read,write")
    args = ap.parse_args()
    skip = set(filter(None, args.skip.split(",")))
    print(f"python {sys.version.split()[0]}, cpus {os.cpu_count()}, numpy {np.__version__}")
    for mod in ("python_calamine", "openpyxl", "xlsxwriter", "rustpy_xlsxwriter"):
        try:
            __import__(mod)
            from importlib.metadata import version
            print(f"  {mod} {version(mod.replace('_', '-'))}")
        except ImportError:
            print(f"  {mod}: not installed")
    if "percent" not in skip:
        with tempfile.TemporaryDirectory() as tmp:
            percent_fidelity(tmp)
    if "read" not in skip:
        inputs = merge_bench.generate(Path(args.dir), args.ranks, args.rows, False)
        bench_read(sorted(inputs.glob("*.xlsx")), args.repeat)
    if "write" not in skip:
        bench_write(args.write_rows, args.repeat)
    return 0


if __name__ == "__main__":
    sys.exit(main())
