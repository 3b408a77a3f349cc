"""Tests for the hand-written streaming xlsx writer (msprobe.core.io.xlsx)."""

from __future__ import annotations

import math
import shutil
import subprocess
import zipfile
from xml.etree import ElementTree

import numpy as np
import openpyxl
import pandas as pd
import pytest

from msprobe.core.io import xlsx as xlsx_mod
from msprobe.core.io.xlsx import write_xlsx

RED = "FFFF0000"
YELLOW = "00FFFF00"

TRICKY_STRINGS = [
    "plain",
    "unicode: 精度 ✓ émoji 🚀",
    "a < b && c > d",
    "line one\nline two\n",
    "inf\t",
    "  leading and trailing  ",
    "=SUM(A1:A3)",
    "tab\tinside",
    "Functional.linear.12.forward.input.0",
]


def _rows(path, read_only=False, sheet=None):
    wb = openpyxl.load_workbook(path, read_only=read_only)
    ws = wb[sheet] if sheet else wb.worksheets[0]
    rows = [list(r) for r in ws.iter_rows(values_only=True)]
    wb.close()
    return rows


def _pad(row, n):
    return list(row) + [None] * (n - len(row))


def _same(a, b):
    if isinstance(a, float) and isinstance(b, float):
        return a.hex() == b.hex() or (math.isnan(a) and math.isnan(b))
    return type(a) is type(b) and a == b


@pytest.fixture
def mixed_table():
    n = len(TRICKY_STRINGS)
    header = ["text", "float", "int", "flag", "obj", "after_gap", "big_int"]
    floats = np.array([1.5, np.nan, np.inf, -np.inf, -0.0, 1e-300, 5e-324, 1.7976931348623157e308,
                       123456789012345678.0])
    ints = np.array([0, -1, 2**53, -(2**53), 7, 123456789, -42, 10**15, 3], dtype=np.int64)
    flags = np.array([True, False, True, True, False, False, True, False, True])
    obj = [None, 2.25, "x", True, 7, None, float("nan"), 2**70, np.float32(0.5)]
    after_gap = ["g%d" % i for i in range(n)]
    big = np.array([2**60, -(2**60), 1, 2**53 + 1, 0, 5, 6, 7, 8], dtype=np.int64)
    columns = [list(TRICKY_STRINGS), floats, ints, flags, obj, after_gap, big]
    expected = []
    for i in range(n):
        f = floats[i]
        fv = None if math.isnan(f) else ("inf" if f == np.inf else "-inf" if f == -np.inf else float(f))
        o = obj[i]
        if isinstance(o, float) and math.isnan(o):
            o = None
        elif isinstance(o, int) and not isinstance(o, bool) and abs(o) > 2**53:
            o = str(o)
        elif isinstance(o, np.floating):
            o = float(o)
        b = int(big[i])
        expected.append([TRICKY_STRINGS[i], fv, int(ints[i]), bool(flags[i]), o, after_gap[i],
                         str(b) if abs(b) > 2**53 else b])
    return header, columns, expected


@pytest.mark.parametrize("read_only", [False, True])
def test_round_trip_mixed_columns(tmp_path, mixed_table, read_only):
    header, columns, expected = mixed_table
    path = tmp_path / "mixed.xlsx"
    assert write_xlsx(path, header, columns) == ["Sheet1"]
    rows = _rows(path, read_only=read_only)
    assert rows[0] == header
    assert len(rows) == len(expected) + 1
    for want, got in zip(expected, rows[1:]):
        got = _pad(got, len(header))
        for w, g in zip(want, got):
            assert _same(w, g), (want, got)
    # -0.0 keeps its sign, the '=' string is not a formula
    assert math.copysign(1.0, rows[5][1]) == -1.0
    wb = openpyxl.load_workbook(path)
    cell = wb.active.cell(row=8, column=1)
    assert cell.value == "=SUM(A1:A3)" and cell.data_type == "s"


def test_gaps_do_not_shift_cells(tmp_path):
    n = 5
    cols = [
        [None, "a", None, "b", None],
        [1.0, None, None, 2.0, None],
        np.array([np.nan, 3.0, np.nan, np.nan, 4.0]),
        [None, None, None, None, None],
        ["e%d" % i for i in range(n)],
    ]
    path = tmp_path / "gaps.xlsx"
    write_xlsx(path, list("ABCDE"), cols)
    for ro in (False, True):
        rows = _rows(path, read_only=ro)[1:]
        for i in range(n):
            row = _pad(rows[i], 5)
            assert row[0] == cols[0][i]
            assert row[1] == cols[1][i]
            assert row[2] == (None if math.isnan(cols[2][i]) else cols[2][i])
            assert row[3] is None
            assert row[4] == "e%d" % i
    sheet = zipfile.ZipFile(path).read("xl/worksheets/sheet1.xml").decode()
    assert '<c r="E2" t="inlineStr">' in sheet  # first cell after a gap carries its reference


def test_random_floats_round_trip_exactly(tmp_path):
    rng = np.random.default_rng(123)
    vals = np.concatenate([
        np.frombuffer(rng.bytes(8 * 3000), np.float64),
        rng.standard_normal(2000) * 10.0 ** rng.integers(-300, 300, 2000),
        np.round(rng.random(500), 3),
        [1e-300, 5e-324, 1.7976931348623157e308, -0.0, 0.0, 123456789012345678.0, 0.1, 1e23, 2.0**-1022,
         9007199254740993.0, 1e16, 1e15, 0.0001, 1e-5],
    ])
    vals = vals[np.isfinite(vals)]
    path = tmp_path / "floats.xlsx"
    write_xlsx(path, ["x"], [vals])
    got = [r[0] for r in _rows(path, read_only=True)[1:]]
    assert len(got) == len(vals)
    for v, g in zip(vals.tolist(), got):
        assert type(g) is float and g.hex() == v.hex(), (v, g)


def test_float_text_is_short(tmp_path):
    path = tmp_path / "short.xlsx"
    write_xlsx(path, ["x"], [np.array([0.1, 3.0, 1e-7, 1234.5, -2.5e20, 0.3])])
    sheet = zipfile.ZipFile(path).read("xl/worksheets/sheet1.xml").decode()
    for text in ("<v>0.1</v>", "<v>3.0</v>", "<v>1.0E-7</v>", "<v>1234.5</v>", "<v>-2.5E20</v>", "<v>0.3</v>"):
        assert text in sheet


def test_row_fills(tmp_path):
    cols = [["a", None, "c", "d"], np.array([1.0, np.nan, 3.0, np.nan]), [None, None, None, 1]]
    styles = np.array([1, 2, 0, 2], dtype=np.int8)
    path = tmp_path / "fills.xlsx"
    write_xlsx(path, ["s", "f", "o"], cols, row_styles=styles)
    ws = openpyxl.load_workbook(path).active
    for i, style in enumerate(styles.tolist()):
        for j in range(3):
            fill = ws.cell(row=i + 2, column=j + 1).fill
            if style == 0:
                assert fill.fill_type is None
            else:
                assert fill.fill_type == "solid"
                assert fill.fgColor.rgb == (RED if style == 1 else YELLOW)
    for j in range(3):  # header row is not filled
        assert ws.cell(row=1, column=j + 1).fill.fill_type is None
    # empty cells of styled rows exist as styled cells
    sheet = zipfile.ZipFile(path).read("xl/worksheets/sheet1.xml").decode()
    assert '<c s="2"/>' in sheet


def test_sheet_splitting(tmp_path):
    n = 7
    cols = [["r%d" % i for i in range(n)], np.arange(n, dtype=np.float64)]
    styles = np.array([0, 1, 0, 0, 2, 0, 1], dtype=np.int8)
    path = tmp_path / "split.xlsx"
    names = write_xlsx(path, ["name", "value"], cols, row_styles=styles, max_rows_per_sheet=3)
    assert names == ["part_0", "part_1", "part_2"]
    wb = openpyxl.load_workbook(path)
    assert wb.sheetnames == names
    seen = []
    for name in names:
        rows = [list(r) for r in wb[name].iter_rows(values_only=True)]
        assert rows[0] == ["name", "value"]
        assert 1 <= len(rows) - 1 <= 3
        seen.extend(rows[1:])
    assert seen == [["r%d" % i, float(i)] for i in range(n)]
    assert wb["part_1"].cell(row=3, column=1).fill.fgColor.rgb == YELLOW  # global row 4
    assert wb["part_2"].cell(row=2, column=2).fill.fgColor.rgb == RED  # global row 6
    assert write_xlsx(path, ["name", "value"], cols, max_rows_per_sheet=7, sheet_name="Data") == ["Data"]


def test_pandas_reads_it(tmp_path):
    cols = [["a", "b", "c"], np.array([1.5, np.nan, -2.0]), np.array([1, 2, 3]), np.array([True, False, True])]
    path = tmp_path / "pd.xlsx"
    write_xlsx(path, ["s", "f", "i", "b"], cols)
    df = pd.read_excel(path)
    assert list(df.columns) == ["s", "f", "i", "b"]
    assert df["s"].tolist() == ["a", "b", "c"]
    assert df["f"].iloc[0] == 1.5 and math.isnan(df["f"].iloc[1]) and df["f"].iloc[2] == -2.0
    assert df["i"].tolist() == [1, 2, 3]
    assert df["b"].tolist() == [True, False, True]


@pytest.mark.parametrize("styles", [None, np.zeros(0, np.int8)])
def test_empty_table(tmp_path, styles):
    path = tmp_path / "empty.xlsx"
    header = ["NPU Name", "Bench Name", "Cosine"]
    assert write_xlsx(path, header, [[], np.array([], dtype=object), np.array([])], row_styles=styles) == ["Sheet1"]
    rows = _rows(path)
    assert rows == [header]
    assert pd.read_excel(path).shape == (0, 3)


def test_all_parts_are_well_formed_xml(tmp_path, mixed_table):
    header, columns, _ = mixed_table
    path = tmp_path / "wf.xlsx"
    write_xlsx(path, header, columns, row_styles=np.array([0, 1, 2] * 3, np.int8))
    with zipfile.ZipFile(path) as zf:
        assert zf.testzip() is None
        names = set(zf.namelist())
        for part in ("[Content_Types].xml", "_rels/.rels", "docProps/app.xml", "docProps/core.xml",
                     "xl/workbook.xml", "xl/_rels/workbook.xml.rels", "xl/styles.xml",
                     "xl/worksheets/sheet1.xml"):
            assert part in names
        for name in names:
            ElementTree.fromstring(zf.read(name))
        ns = {"m": "http://schemas.openxmlformats.org/spreadsheetml/2006/main"}
        styles = ElementTree.fromstring(zf.read("xl/styles.xml"))
        patterns = [p.get("patternType") for p in styles.findall("m:fills/m:fill/m:patternFill", ns)]
        assert patterns[:2] == ["none", "gray125"]
        assert len(styles.findall("m:cellXfs/m:xf", ns)) >= 3


def test_sheet_niceties(tmp_path):
    path = tmp_path / "nice.xlsx"
    write_xlsx(path, ["a", "b", "c"], [["x"] * 3, np.ones(3), np.ones(3)], col_widths=[30.0, 12.5, 8.0])
    ws = openpyxl.load_workbook(path).active
    assert ws.freeze_panes == "A2"
    assert ws.auto_filter.ref == "A1:C4"
    assert ws.column_dimensions["A"].width == 30.0
    assert ws.column_dimensions["B"].width == 12.5
    write_xlsx(path, ["a" * 100, "b"], [["x"] * 3, np.ones(3)])  # default widths are capped
    ws = openpyxl.load_workbook(path).active
    assert 8 <= ws.column_dimensions["A"].width <= 60


def test_illegal_characters_are_escaped(tmp_path):
    values = ["bell\x07", "nul\x00byte", "\x1f", "lone \ud800 surrogate", "ok\r\nwindows", "\ufffe"]
    path = tmp_path / "ctrl.xlsx"
    write_xlsx(path, ["v"], [values])
    got = [r[0] for r in _rows(path)[1:]]
    assert got == ["bell_x0007_", "nul_x0000_byte", "_x001F_", "lone _xD800_ surrogate", "ok\r\nwindows",
                   "_xFFFE_"]


def test_long_strings_and_many_chunks(tmp_path, monkeypatch):
    monkeypatch.setattr(xlsx_mod, "CHUNK_ROWS", 4)
    long_msg = "Need double check api accuracy. " * 40  # > LONG_CELL_BYTES, trailing space
    huge = "x" * 40000  # beyond Excel's cell limit
    n = 11
    text = ["short %d" % i for i in range(n)]
    text[2] = long_msg
    text[5] = "<&>" * 200 + "\n"
    text[9] = huge
    other = ["é" * 300 if i % 3 == 0 else None for i in range(n)]
    nums = np.arange(n, dtype=np.float64)
    path = tmp_path / "long.xlsx"
    write_xlsx(path, ["text", "other", "num"], [text, other, nums], row_styles=np.array([1, 0] * 5 + [2], np.int8))
    rows = _rows(path, read_only=True)[1:]
    assert len(rows) == n
    for i, row in enumerate(rows):
        row = _pad(row, 3)
        want = text[i] if i != 9 else "x" * xlsx_mod.EXCEL_MAX_CHARS
        assert row[0] == want
        assert row[1] == other[i]
        assert row[2] == float(i)


def test_numpy_string_and_object_arrays(tmp_path):
    cols = [np.array(["a", "bb", "ccc"]), np.array([1, "two", None], dtype=object), np.array([1.5, 2.5, 3.5],
                                                                                            dtype=np.float32)]
    path = tmp_path / "np.xlsx"
    write_xlsx(path, ["u", "o", "f32"], cols)
    assert _rows(path)[1:] == [["a", 1, 1.5], ["bb", "two", 2.5], ["ccc", None, 3.5]]


def test_invalid_arguments(tmp_path):
    path = tmp_path / "bad.xlsx"
    with pytest.raises(ValueError):
        write_xlsx(path, ["a", "b"], [[1]])
    with pytest.raises(ValueError):
        write_xlsx(path, ["a", "b"], [[1], [1, 2]])
    with pytest.raises(ValueError):
        write_xlsx(path, ["a"], [[1, 2]], row_styles=np.array([0, 3], np.int8))
    with pytest.raises(ValueError):
        write_xlsx(path, ["a"], [[1, 2]], row_styles=np.array([0], np.int8))
    with pytest.raises(ValueError):
        write_xlsx(path, ["a"], [[1]], sheet_name="bad/name")
    with pytest.raises(ValueError):
        write_xlsx(path, ["a"], [[1]], max_rows_per_sheet=0)


@pytest.mark.skipif(not (shutil.which("libreoffice") or shutil.which("soffice")), reason="LibreOffice not installed")
def test_libreoffice_reads_cells_in_place(tmp_path):
    exe = shutil.which("libreoffice") or shutil.which("soffice")
    path = tmp_path / "lo.xlsx"
    write_xlsx(path, ["a", "b", "c"], [["x", None, "z"], [None, 2.5, None], ["p", "q", "r"]])
    subprocess.run([exe, "--headless", "--convert-to", "csv", "--outdir", str(tmp_path), str(path)],
                   check=True, capture_output=True, timeout=120)
    lines = (tmp_path / "lo.csv").read_text().splitlines()
    assert lines == ["a,b,c", "x,,p", ",2.5,q", "z,,r"]


def test_retries_with_zip64_when_a_sheet_is_too_big(tmp_path, monkeypatch):
    # pretend the 2 GiB member limit is 2 KB: the first attempt fails when the
    # sheet member is closed, the writer redoes the workbook with ZIP64 members
    monkeypatch.setattr(zipfile, "ZIP64_LIMIT", 2000)
    n = 300
    path = tmp_path / "zip64.xlsx"
    write_xlsx(path, ["name", "value"], [["row %d" % i for i in range(n)], np.arange(n, dtype=np.float64)])
    monkeypatch.undo()
    rows = _rows(path)
    assert rows[0] == ["name", "value"]
    assert rows[1:] == [["row %d" % i, float(i)] for i in range(n)]


# ------------------------------------------------------------------ relative errors as percent numbers (issue 16, item 9)


def test_relative_error_text_is_written_as_a_percent_number(tmp_path):
    """'12.5%' cells of the relative-error columns become numbers (0.125) with a percent format, so Excel
    sorts and filters them; N/A / Nan / inf and other columns stay as they are; fills are kept."""
    from msprobe.core.io.xlsx import RELATIVE_ERROR_COLUMNS

    header = ["NPU Name", "MaxRelativeErr", "MinRelativeErr", "Result"]
    columns = [["a", "b", "c", "d"],
               ["12.5%", "N/A", "Nan", "1.5e-05%"],
               ["inf", "0.0%", None, "5%%"],
               ["12.5%", "", "Warning", ""]]
    path = tmp_path / "p.xlsx"
    assert write_xlsx(path, header, columns, row_styles=[0, 1, 2, 0],
                      percent_columns=RELATIVE_ERROR_COLUMNS) == ["Sheet1"]
    ws = openpyxl.load_workbook(path).worksheets[0]
    cells = {(c.row, c.column): c for row in ws.iter_rows() for c in row}
    a2 = cells[(2, 2)]
    assert a2.value == pytest.approx(0.125) and a2.data_type == "n" and a2.number_format == "0.00%"
    assert cells[(5, 2)].value == pytest.approx(1.5e-07) and cells[(5, 2)].number_format == "0.00%"
    assert cells[(3, 3)].value == 0.0 and cells[(3, 3)].number_format == "0.00%"
    assert cells[(3, 3)].fill.fgColor.rgb == RED and cells[(3, 2)].fill.fgColor.rgb == RED
    for rc, text in (((3, 2), "N/A"), ((4, 2), "Nan"), ((2, 3), "inf"), ((5, 3), "5%%"), ((2, 4), "12.5%")):
        assert cells[rc].value == text and cells[rc].number_format == "General", rc
    assert cells[(4, 4)].fill.fgColor.rgb == YELLOW


def test_percent_cells_read_back_as_the_report_text(tmp_path):
    """merge_result's reader gives the exact report text back for the new percent cells, and still reads
    the old text form (and openpyxl-written percent numbers) the same way."""
    from msprobe.core.io.xlsx import RELATIVE_ERROR_COLUMNS
    from msprobe.core.merge.xlsxread import SheetReader

    texts = ["12.5%", "0.000414401757284722%", "1929861.1276898438%", "1.5e-05%", "0.0%", "N/A", "-3.25%"]
    header = ["NPU Name", "MeanRelativeErr"]
    names = [f"r{i}" for i in range(len(texts))]
    new = tmp_path / "new.xlsx"
    write_xlsx(new, header, [names, texts], percent_columns=RELATIVE_ERROR_COLUMNS)
    old = tmp_path / "old.xlsx"
    write_xlsx(old, header, [names, texts])
    for path in (new, old):
        with SheetReader(str(path)) as r:
            assert r.header() == header
            assert [row[1] for row in r.rows([0, 1])] == texts, path
    wb = openpyxl.Workbook()
    ws = wb.active
    ws.append(header)
    ws.append(["x", 0.125])
    ws["B2"].number_format = "0.00%"
    other = tmp_path / "openpyxl.xlsx"
    wb.save(other)
    with SheetReader(str(other)) as r:
        r.header()
        assert [row[1] for row in r.rows([0, 1])] == ["12.5%"]


def test_single_sheet_is_named_like_the_reference(tmp_path):
    """The reference's plain xlsx writer (pandas; 26.x --xlsx) names the sheet Sheet1 (compare.md §5.2)."""
    path = tmp_path / "s.xlsx"
    write_xlsx(path, ["a"], [[1]])
    assert openpyxl.load_workbook(path).sheetnames == ["Sheet1"]
