"""Micro-benchmark: msprobe.core.io.xlsx.write_xlsx vs xlsxwriter / openpyxl.

Builds a table shaped like a compare report (default 40,000 rows x 28 columns:
8 name/dtype/shape string columns, 16 float64 columns with a few NaN/inf,
4 short status/message string columns, ~5 % of the rows styled red/yellow)
and prints best-of-N wall times.

    .venv/bin/python benchmarks/bench_xlsx.py [--rows 40000] [--repeat 3] [--no-openpyxl]

The xlsxwriter / openpyxl timings exclude turning the columns into row lists
(done once up front), so the comparison favours them slightly.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from msprobe.core.io import xlsx as xlsx_mod  # noqa: E402
from msprobe.core.io.xlsx import write_xlsx  # noqa: E402
from harness import best_of  # noqa: E402

API_NAMES = ["Functional.linear", "Functional.conv2d", "Tensor.add", "Torch.matmul", "Functional.softmax",
             "Functional.layer_norm", "Tensor.__mul__", "Aten.mm"]
DTYPES = ["torch.float16", "torch.float32", "torch.bfloat16", "torch.int64"]


def build_table(n: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    api = rng.integers(0, len(API_NAMES), n)
    idx = rng.integers(0, 500, n)
    dirs = np.where(rng.random(n) < 0.5, "forward", "backward")
    io = np.where(rng.random(n) < 0.6, "input", "output")
    arg = rng.integers(0, 4, n)
    names = [f"{API_NAMES[a]}.{i}.{d}.{o}.{g}" for a, i, d, o, g in
             zip(api.tolist(), idx.tolist(), dirs.tolist(), io.tolist(), arg.tolist())]
    dt = rng.integers(0, len(DTYPES), n)
    npu_dtype = [DTYPES[d] for d in dt.tolist()]
    bench_dtype = [DTYPES[d] if r > 0.1 else "torch.float32" for d, r in zip(dt.tolist(), rng.random(n).tolist())]
    dims = rng.integers(1, 512, (n, 2))
    shapes = [f"[{a}, {b}]" for a, b in dims.tolist()]
    data_names = [f"{nm}.pt" for nm in names]
    header = ["NPU Name", "Bench Name", "NPU Dtype", "Bench Dtype", "NPU Tensor Shape", "Bench Tensor Shape",
              "NPU Data Name", "Bench Data Name"]
    columns: list = [names, list(names), npu_dtype, bench_dtype, shapes, list(shapes), data_names, list(data_names)]
    float_names = ["Cosine", "EucDist", "MaxAbsErr", "MaxRelativeErr", "One Thousandth Err Ratio",
                   "Five Thousandths Err Ratio", "NPU max", "NPU min", "NPU mean", "NPU l2norm",
                   "Bench max", "Bench min", "Bench mean", "Bench l2norm", "Max diff", "Min diff"]
    for j, name in enumerate(float_names):
        if name == "Cosine":
            col = 1.0 - rng.random(n) * 1e-4
        elif "Ratio" in name:
            col = np.round(rng.random(n), 4)
        else:
            col = rng.standard_normal(n) * 10.0 ** rng.integers(-6, 4, n)
        col[rng.random(n) < 0.02] = np.nan
        if j % 5 == 0:
            col[rng.random(n) < 0.001] = np.inf
        header.append(name)
        columns.append(col)
    status = rng.random(n)
    header += ["Requires_grad Consistent", "Result", "Accuracy Reached or Not", "Err_message"]
    columns.append(["True" if s > 0.01 else "False" for s in status.tolist()])
    columns.append(["pass" if s > 0.05 else ("warning" if s > 0.02 else "error") for s in status.tolist()])
    columns.append(["Yes" if s > 0.05 else ("N/A" if s > 0.02 else "No") for s in status.tolist()])
    columns.append(["" if s > 0.05 else "Need double check api accuracy. " for s in status.tolist()])
    styles = np.zeros(n, np.int8)
    styles[status < 0.02] = 1
    styles[(status >= 0.02) & (status < 0.05)] = 2
    return header, columns, styles


def as_mixed(columns: list) -> list:
    """Float columns as Python lists with 'N/A' strings (object-column path)."""
    out = []
    for col in columns:
        if isinstance(col, np.ndarray):
            vals = col.tolist()
            vals[::37] = ["N/A"] * len(vals[::37])
            out.append(vals)
        else:
            out.append(col)
    return out


def rows_for_libs(columns: list) -> list[list]:
    def conv(col):
        if isinstance(col, np.ndarray):
            vals = col.tolist()
            return [None if v != v else ("inf" if v == float("inf") else ("-inf" if v == float("-inf") else v))
                    for v in vals]
        return col
    return [list(r) for r in zip(*[conv(c) for c in columns])]


def bench_xlsxwriter(path: str, header, rows, styles) -> None:
    import xlsxwriter
    wb = xlsxwriter.Workbook(path, {"constant_memory": True})
    ws = wb.add_worksheet("Sheet")
    fmts = [None, wb.add_format({"bg_color": "#FF0000"}), wb.add_format({"bg_color": "#FFFF00"})]
    ws.write_row(0, 0, header)
    st = styles.tolist()
    for r, row in enumerate(rows):
        ws.write_row(r + 1, 0, row, fmts[st[r]])
    wb.close()


def bench_openpyxl(path: str, header, rows, styles) -> None:
    from openpyxl import Workbook
    from openpyxl.cell import WriteOnlyCell
    from openpyxl.styles import PatternFill
    wb = Workbook(write_only=True)
    ws = wb.create_sheet("Sheet")
    fills = [None, PatternFill("solid", fgColor="FF0000"), PatternFill("solid", fgColor="FFFF00")]
    ws.append(header)
    for row, s in zip(rows, styles.tolist()):
        if s:
            cells = []
            for v in row:
                c = WriteOnlyCell(ws, value=v)
                c.fill = fills[s]
                cells.append(c)
            ws.append(cells)
        else:
            ws.append(row)
    wb.save(path)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=40_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--no-openpyxl", action="store_true", help="skip the (slow) openpyxl write_only run")
    args = ap.parse_args()

    header, columns, styles = build_table(args.rows)
    print(f"table: {args.rows} rows x {len(header)} columns, {int((styles > 0).sum())} styled rows; "
          f"best of {args.repeat}; cpu count {os.cpu_count()}")
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "out.xlsx")
        level = xlsx_mod.COMPRESS_LEVEL
        for lvl in (1, 6):
            xlsx_mod.COMPRESS_LEVEL = lvl
            t = best_of(lambda: write_xlsx(out, header, columns, row_styles=styles), args.repeat)[0]
            results.append((f"write_xlsx (deflate level {lvl})", t, os.path.getsize(out)))
        xlsx_mod.COMPRESS_LEVEL = level
        mixed = as_mixed(columns)
        t = best_of(lambda: write_xlsx(out, header, mixed, row_styles=styles), args.repeat)[0]
        results.append(("write_xlsx, floats as lists + 'N/A'", t, os.path.getsize(out)))
        rows = rows_for_libs(columns)
        try:
            t = best_of(lambda: bench_xlsxwriter(out, header, rows, styles), args.repeat)[0]
            results.append(("xlsxwriter constant_memory", t, os.path.getsize(out)))
        except ImportError:
            pass
        if not args.no_openpyxl:
            t = best_of(lambda: bench_openpyxl(out, header, rows, styles), 1)[0]
            results.append(("openpyxl write_only (1 run)", t, os.path.getsize(out)))
    base = results[0][1]
    print(f"{'writer':40s} {'seconds':>8s} {'x':>7s} {'MB':>7s}")
    for name, t, size in results:
        print(f"{name:40s} {t:8.3f} {t / base:7.1f} {size / 1e6:7.2f}")


if __name__ == "__main__":
    main()
