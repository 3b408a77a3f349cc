"""msprobe merge_result: reference parity on the multi-rank fixture, csv input, and every bad input.

Most tests build small rank reports here (with msprobe's own xlsx / csv writers, or openpyxl for a
shared-strings workbook such as the reference writes) so they run without the shared fixtures; the
parity tests use ../shared/fixtures and skip with a reason when it is absent.
"""

from __future__ import annotations

import glob
import logging
import math
import os
import zipfile
from pathlib import Path

import pytest

from conftest import fixtures_or_skip
from msprobe.cli.main import main
from msprobe.core.errors import MsprobeError
from msprobe.core.io.csvfile import write_csv
from msprobe.core.io.xlsx import write_xlsx
from msprobe.core.merge import MergeConfig, run_merge
from msprobe.core.merge import merge as merge_mod
from msprobe.core.merge import xlsxread

openpyxl = pytest.importorskip("openpyxl")

MULTI = "multirank_mlp_bf16_stat_mix"
TS = "20260101120000"

STAT_HEADER = ["NPU Name", "Bench Name", "NPU Dtype", "Bench Dtype", "NPU Tensor Shape", "Bench Tensor Shape",
               "NPU Requires_grad", "Bench Requires_grad", "Max diff", "Min diff", "Mean diff", "L2norm diff",
               "MaxRelativeErr", "MinRelativeErr", "MeanRelativeErr", "NormRelativeErr", "NPU max", "NPU min",
               "NPU mean", "NPU l2norm", "Bench max", "Bench min", "Bench mean", "Bench l2norm",
               "Requires_grad Consistent", "Result", "Err_message", "NPU_Stack_Info", "Match"]
TENSOR_HEADER = ["NPU Name", "Bench Name", "NPU Dtype", "Bench Dtype", "NPU Tensor Shape", "Bench Tensor Shape",
                 "NPU Requires_grad", "Bench Requires_grad", "Cosine", "EucDist", "MaxAbsErr", "MaxRelativeErr",
                 "One Thousandth Err Ratio", "Five Thousandths Err Ratio", "NPU max", "NPU min", "NPU mean",
                 "NPU l2norm", "Bench max", "Bench min", "Bench mean", "Bench l2norm", "Requires_grad Consistent",
                 "Accuracy Reached or No", "Err_message", "NPU_Stack_Info", "Data_name"]


# --------------------------------------------------------------------------------------------- helpers


def stat_rows(rank: int, names=None):
    """Rows of a small statistics report; Max diff = rank + i / 10, comm 'op' args have N/A metrics."""
    names = names or [
        "Functional.linear.0.forward.input.0",
        "Functional.linear.0.forward.output.0",
        "Distributed.all_reduce.0.forward.input.0",
        "Distributed.all_reduce.0.forward.input.group",
        "Distributed.all_reduce.0.forward.output.0",
        "Tensor.add.0.forward.output.0",
        "Functional.linear.1.forward.output.0",
        "Module.Functional.linear.0.forward.output.0",  # contains 'Functional.linear.' (reference: substring)
    ]
    rows = []
    for i, n in enumerate(names):
        arg = n.endswith(".group")
        diff = "N/A" if arg else rank + i / 10
        npu_max = f"tp-0-{rank}" if arg else 2.0 + i
        row = [n, n, "torch.float32", "torch.float32", "[2, 2]", "[2, 2]", "False", "False",
               diff, diff, diff, diff, "N/A" if arg else f"{i}.5%", "1%", "2%", "3%",
               npu_max, 0.0, 0.0, 1.0, "tp-0-1" if arg else 2.5 + i, 0.0, 0.0, 1.0,
               "True", "", "", "N/A", "exact"]
        rows.append(row)
    return rows


def write_report(path, header, rows, fmt="xlsx"):
    cols = [list(c) for c in zip(*rows)] if rows else [[] for _ in header]
    if fmt == "csv":
        write_csv(str(path), header, cols)
    else:
        write_xlsx(str(path), header, cols)
    return path


def make_stat_dir(d: Path, ranks=(0, 1), fmt="xlsx", rows_fn=stat_rows):
    d.mkdir(parents=True, exist_ok=True)
    for r in ranks:
        write_report(d / f"compare_result_rank{r}_{TS}.{fmt}", STAT_HEADER, rows_fn(r), fmt)
    return d


def write_config(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


CONFIG = "api:\n- Distributed.all_reduce\n- Functional.linear\ncompare_index:\n- Max diff\n- MaxRelativeErr\n"


def load_book(path):
    wb = openpyxl.load_workbook(path, read_only=True)
    try:
        return {ws.title: [list(r) for r in ws.iter_rows(values_only=True)] for ws in wb.worksheets}
    finally:
        wb.close()


def merge(tmp_path, indir, config_text=CONFIG, **kw):
    tmp_path.mkdir(parents=True, exist_ok=True)
    cfg = MergeConfig.from_yaml(str(indir), str(tmp_path / "out"), str(write_config(tmp_path / "config.yaml", config_text)),
                                progress=False, **kw)
    return run_merge(cfg)


def cli(args, capsys):
    rc = main([str(a) for a in args])
    cap = capsys.readouterr()
    return rc, cap.out, cap.err


def assert_one_line_error(rc, err, *needles):
    assert rc == 2, err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    errors = [ln for ln in lines if ln.startswith("msprobe: error: ")]
    assert len(errors) == 1, err
    assert "Traceback" not in err
    for n in needles:
        assert n in errors[0], (n, errors[0])


def assert_books_equal(expected, actual, rel=1e-9):
    assert list(expected) == list(actual)
    for sheet in expected:
        e, a = expected[sheet], actual[sheet]
        assert e[0] == a[0], sheet
        assert [r[0] for r in e] == [r[0] for r in a], sheet
        for re_, ra in zip(e, a):
            assert len(re_) == len(ra)
            for x, y in zip(re_, ra):
                if isinstance(x, (int, float)) and not isinstance(x, bool):
                    assert isinstance(y, (int, float)), (sheet, re_[0], x, y)
                    assert math.isclose(x, y, rel_tol=rel, abs_tol=1e-15), (sheet, re_[0], x, y)
                else:
                    assert x == y, (sheet, re_[0], x, y)


# --------------------------------------------------------------------------------------------- parity with the reference


def _reference_book(fx):
    ref = glob.glob(str(fx / MULTI / "reference_out" / "v833_merge_result" / "*.xlsx"))
    assert len(ref) == 1
    return load_book(ref[0])


def _fixture_config(fx):
    return fx / MULTI / "reference_out" / "_inputs" / "merge_config.yaml"


@pytest.mark.parametrize("fmt", ["xlsx", "csv"])
def test_fixture_our_compare_then_merge_matches_reference(tmp_path, capsys, fmt):
    fx = fixtures_or_skip()
    case = fx / MULTI
    cmp_out = tmp_path / "cmp"
    args = ["compare", "-tp", case / "target" / "step0", "-gp", case / "golden" / "step0", "-o", cmp_out, "-q"]
    if fmt == "csv":
        args.append("--csv")
    rc, out, err = cli(args, capsys)
    assert rc == 0, err
    assert len(glob.glob(str(cmp_out / f"compare_result_rank*_*.{fmt}"))) == 2
    rc, out, err = cli(["-f", "pytorch", "merge_result", "-i", cmp_out, "-o", tmp_path / "merged", "-config",
                        _fixture_config(fx)], capsys)
    assert rc == 0, err
    written = glob.glob(str(tmp_path / "merged" / "multi_ranks_compare_merge_*.xlsx"))
    assert len(written) == 1
    ours = load_book(written[0])
    ref = _reference_book(fx)
    assert list(ours) == ["Max diff", "L2norm diff", "MeanRelativeErr"]
    assert ours["Max diff"][0] == ["NPU Name", "rank0", "rank1"]
    assert len(ours["Max diff"]) == 51
    assert_books_equal(ref, ours)
    # a few cells spelled out
    rows = {r[0]: r[1:] for r in ours["Max diff"][1:]}
    assert rows["Distributed.all_reduce.0.forward.input.op"] == ["NPU:RedOpType.SUM  Bench:RedOpType.SUM"] * 2
    assert rows["Functional.linear.0.backward.output.1"] == ["NPU:None  Bench:None"] * 2
    assert rows["Distributed.all_reduce.0.forward.input.0"][0] == pytest.approx(-0.0010391920804977, rel=1e-12)
    mre = {r[0]: r[1:] for r in ours["MeanRelativeErr"][1:]}
    assert mre["Distributed.all_reduce.0.forward.input.0"][1].endswith("%")


def test_fixture_reference_reports_merge_like_reference(tmp_path, capsys):
    """The reference's own 8.3.3 reports (shared strings, openpyxl layout) read back to the same book."""
    fx = fixtures_or_skip()
    src = fx / MULTI / "reference_out" / "v833_compare_stepdir"
    rc, out, err = cli(["merge_result", "-i", src, "-o", tmp_path / "m", "-config", _fixture_config(fx), "-q"], capsys)
    assert rc == 0, err
    assert "advisor" not in err  # advisor_*.txt next to the reports are skipped quietly
    ours = load_book(glob.glob(str(tmp_path / "m" / "*.xlsx"))[0])
    assert_books_equal(_reference_book(fx), ours)


# --------------------------------------------------------------------------------------------- behaviour on built reports


def test_values_order_and_no_value_cells(tmp_path):
    d = make_stat_dir(tmp_path / "in", ranks=(0, 1, 10))
    res = merge(tmp_path, d)
    assert res.ranks == [0, 1, 10] and res.mode == "statistics"
    book = load_book(res.path)
    assert list(book) == ["Max diff", "MaxRelativeErr"]
    sheet = book["Max diff"]
    assert sheet[0] == ["NPU Name", "rank0", "rank1", "rank10"]
    # api order of config.yaml first, table order inside; substring match picks the Module row too
    assert [r[0] for r in sheet[1:]] == [
        "Distributed.all_reduce.0.forward.input.0",
        "Distributed.all_reduce.0.forward.input.group",
        "Distributed.all_reduce.0.forward.output.0",
        "Functional.linear.0.forward.input.0",
        "Functional.linear.0.forward.output.0",
        "Functional.linear.1.forward.output.0",
        "Module.Functional.linear.0.forward.output.0",
    ]
    assert sheet[1][1:] == [pytest.approx(0.2), pytest.approx(1.2), pytest.approx(10.2)]
    assert sheet[2][1:] == ["NPU:tp-0-0  Bench:tp-0-1", "NPU:tp-0-1  Bench:tp-0-1", "NPU:tp-0-10  Bench:tp-0-1"]
    assert book["MaxRelativeErr"][4][1:] == ["0.5%"] * 3
    assert book["MaxRelativeErr"][2][1:] == ["NPU:tp-0-0  Bench:tp-0-1", "NPU:tp-0-1  Bench:tp-0-1",
                                             "NPU:tp-0-10  Bench:tp-0-1"]


def test_outer_join_rank_without_a_name_gets_empty_cell(tmp_path):
    d = tmp_path / "in"
    d.mkdir()
    write_report(d / f"compare_result_rank0_{TS}.xlsx", STAT_HEADER,
                 stat_rows(0, ["Distributed.all_reduce.0.forward.input.0", "Distributed.all_reduce.1.forward.input.0"]))
    write_report(d / f"compare_result_rank1_{TS}.xlsx", STAT_HEADER,
                 stat_rows(1, ["Distributed.all_reduce.1.forward.input.0", "Distributed.all_reduce.2.forward.input.0",
                               "Distributed.all_reduce.1.forward.input.0"]))  # repeated name: first row wins
    res = merge(tmp_path, d, "api: [Distributed.all_reduce]\ncompare_index: [Max diff]\n")
    sheet = load_book(res.path)["Max diff"]
    assert sheet[1:] == [
        ["Distributed.all_reduce.0.forward.input.0", pytest.approx(0.0), None],
        ["Distributed.all_reduce.1.forward.input.0", pytest.approx(0.1), pytest.approx(1.0)],
        ["Distributed.all_reduce.2.forward.input.0", None, pytest.approx(1.1)],
    ]


def test_empty_compare_index_means_every_index_of_the_mode(tmp_path):
    d = make_stat_dir(tmp_path / "in")
    res = merge(tmp_path, d, "api:\n- Tensor.add\ncompare_index:\n")
    assert res.indexes == ["Max diff", "Min diff", "Mean diff", "L2norm diff", "MaxRelativeErr", "MinRelativeErr",
                           "MeanRelativeErr", "NormRelativeErr", "Requires_grad Consistent"]
    book = load_book(res.path)
    assert list(book) == res.indexes
    assert book["Requires_grad Consistent"][1] == ["Tensor.add.0.forward.output.0", "True", "True"]
    assert book["NormRelativeErr"][1] == ["Tensor.add.0.forward.output.0", "3%", "3%"]


def test_csv_reports_merge_like_xlsx(tmp_path):
    dx = make_stat_dir(tmp_path / "x", fmt="xlsx")
    dc = make_stat_dir(tmp_path / "c", fmt="csv")
    a = load_book(merge(tmp_path / "a", dx).path)
    b = load_book(merge(tmp_path / "b", dc).path)
    assert_books_equal(a, b, rel=0)
    assert b["Max diff"][2] == ["Distributed.all_reduce.0.forward.input.group", "NPU:tp-0-0  Bench:tp-0-1",
                                "NPU:tp-0-1  Bench:tp-0-1"]


def _col(j):
    s = ""
    j += 1
    while j:
        j, r = divmod(j - 1, 26)
        s = chr(65 + r) + s
    return s


def write_sst_xlsx(path, header, rows):
    """A workbook as Excel / xlsxwriter write it: shared strings (one as rich text runs), r= on every cell,
    empty cells left out, booleans as t="b", an entity in a string."""
    strings, index = [], {}

    def sid(v):
        if v not in index:
            index[v] = len(strings)
            strings.append(v)
        return index[v]

    xml_rows = []
    for r, row in enumerate([header] + rows, 1):
        cells = []
        for j, v in enumerate(row):
            ref = f"{_col(j)}{r}"
            if v is None or v == "":
                continue
            if isinstance(v, bool):
                cells.append(f'<c r="{ref}" t="b"><v>{int(v)}</v></c>')
            elif isinstance(v, (int, float)):
                cells.append(f'<c r="{ref}" s="0"><v>{v!r}</v></c>')
            else:
                cells.append(f'<c r="{ref}" t="s"><v>{sid(v)}</v></c>')
        xml_rows.append(f'<row r="{r}" spans="1:{len(header)}">' + "".join(cells) + "</row>")

    def si(v):
        esc = v.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
        if v.startswith("Distributed.") and len(v) > 12:  # rich text: two runs
            return f"<si><r><t>{esc[:12]}</t></r><r><rPr><b/></rPr><t>{esc[12:]}</t></r></si>"
        return f"<si><t>{esc}</t></si>"

    ns = 'xmlns="http://schemas.openxmlformats.org/spreadsheetml/2006/main"'
    rel = "http://schemas.openxmlformats.org/officeDocument/2006/relationships"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("xl/workbook.xml", f'<workbook {ns} xmlns:r="{rel}"><sheets><sheet name="Sheet1" sheetId="1" '
                                       f'r:id="rId7"/></sheets></workbook>')
        zf.writestr("xl/_rels/workbook.xml.rels",
                    '<Relationships xmlns="http://schemas.openxmlformats.org/package/2006/relationships">'
                    f'<Relationship Id="rId7" Type="{rel}/worksheet" Target="worksheets/data.xml"/></Relationships>')
        zf.writestr("xl/sharedStrings.xml", f'<sst {ns} count="{len(strings)}">' + "".join(map(si, strings)) + "</sst>")
        zf.writestr("xl/worksheets/data.xml", f"<worksheet {ns}>\n  <sheetData>\n" + "\n".join(xml_rows)
                    + "\n</sheetData></worksheet>")


def test_shared_strings_workbook_as_excel_writes(tmp_path):
    d = tmp_path / "in"
    d.mkdir()
    names = ["Functional.linear.0.forward.input.0", "Distributed.all_reduce.0.forward.input.group",
             "Distributed.all_reduce.0.forward.output.0"]
    for r in (0, 1):
        rows = [row[:-1] for row in stat_rows(r, names)]
        rows[0][9] = None  # an empty cell in the middle: later cells keep their column through r=
        rows[2][24] = True  # a boolean cell
        rows[2][16] = "A&B"
        rows[2][8] = "N/A"
        write_sst_xlsx(d / f"compare_result_rank{r}-rank{r}_{TS}.xlsx", STAT_HEADER[:-1], rows)
    res = merge(tmp_path, d, "api: [Distributed.all_reduce, Functional.linear]\n"
                             "compare_index: [Max diff, Min diff, MaxRelativeErr, Requires_grad Consistent]\n")
    book = load_book(res.path)
    assert book["Max diff"][1:] == [
        ["Distributed.all_reduce.0.forward.input.group", "NPU:tp-0-0  Bench:tp-0-1", "NPU:tp-0-1  Bench:tp-0-1"],
        ["Distributed.all_reduce.0.forward.output.0", "NPU:A&B  Bench:4.5", "NPU:A&B  Bench:4.5"],
        ["Functional.linear.0.forward.input.0", pytest.approx(0.0), pytest.approx(1.0)],
    ]
    assert book["Min diff"][3][1:] == [None, None]
    assert book["MaxRelativeErr"][3][1:] == ["0.5%", "0.5%"]
    assert book["Requires_grad Consistent"][2][1:] == [True, True]


def test_parallel_and_sequential_agree(tmp_path):
    d = make_stat_dir(tmp_path / "in", ranks=range(5))
    a = load_book(merge(tmp_path / "a", d, jobs=1).path)
    b = load_book(merge(tmp_path / "b", d, jobs=2).path)
    assert a == b
    assert a["Max diff"][0] == ["NPU Name"] + [f"rank{r}" for r in range(5)]


def test_tensor_reports(tmp_path):
    d = tmp_path / "in"
    d.mkdir()
    for r in (0, 1):
        rows = [["Distributed.all_reduce.0.forward.input.0", "x", "t", "t", "[1]", "[1]", "False", "False",
                 0.99 - r / 100, 0.1, 0.2, 0.3, 0.4, 0.5, 1.0, 0.0, 0.0, 1.0, 1.0, 0.0, 0.0, 1.0, "True", "Yes", "",
                 "N/A", "a.pt"]]
        write_report(d / f"compare_result_rank{r}_{TS}.xlsx", TENSOR_HEADER, rows)
    res = merge(tmp_path, d, "api: [Distributed]\ncompare_index: [Cosine, One Thousandth Err Ratio]\n")
    assert res.mode == "tensor"
    book = load_book(res.path)
    assert book["Cosine"][1] == ["Distributed.all_reduce.0.forward.input.0", pytest.approx(0.99), pytest.approx(0.98)]
    assert book["One Thousandth Err Ratio"][1][1:] == [pytest.approx(0.4)] * 2


def test_unrelated_files_are_ignored_with_a_warning(tmp_path, capsys):
    d = make_stat_dir(tmp_path / "in")
    (d / "notes.xlsx").write_bytes(b"not even a zip")
    (d / "readme.txt").write_text("hello")
    (d / f"compare_result_{TS}.xlsx").write_bytes(b"single-rank report")
    (d / f"advisor_rank0_{TS}.txt").write_text("advice")
    cfg = write_config(tmp_path / "c.yaml", CONFIG)
    rc, out, err = cli(["merge_result", "-i", d, "-o", tmp_path / "o", "-config", cfg, "-q"], capsys)
    assert rc == 0, err
    assert "notes.xlsx" in err and "readme.txt" in err and "WARNING" in err
    assert f"compare_result_{TS}.xlsx" in err  # single-rank report: skipped, said so
    assert "advisor_rank0" not in err
    assert "written:" in out


def test_newest_report_of_a_rank_wins(tmp_path, caplog):
    d = make_stat_dir(tmp_path / "in")
    write_report(d / "compare_result_rank1_20250101000000.xlsx", STAT_HEADER, stat_rows(7))  # older
    with caplog.at_level(logging.WARNING, logger="msprobe"):
        res = merge(tmp_path, d)
    assert "rank1 has 2 reports" in caplog.text
    sheet = load_book(res.path)["Max diff"]
    assert sheet[1] == ["Distributed.all_reduce.0.forward.input.0", pytest.approx(0.2), pytest.approx(1.2)]


def test_never_overwrites_and_names_carry_a_timestamp(tmp_path, monkeypatch):
    d = make_stat_dir(tmp_path / "in")
    monkeypatch.setattr(merge_mod, "_timestamp", lambda: TS)
    out = tmp_path / "out"
    out.mkdir()
    existing = out / f"multi_ranks_compare_merge_{TS}.xlsx"
    existing.write_bytes(b"keep me")
    first = merge(tmp_path, d)
    second = merge(tmp_path, d)
    assert existing.read_bytes() == b"keep me"
    assert os.path.basename(first.path) == f"multi_ranks_compare_merge_{TS}_1.xlsx"
    assert os.path.basename(second.path) == f"multi_ranks_compare_merge_{TS}_2.xlsx"
    assert load_book(first.path) == load_book(second.path)
    assert not [p for p in os.listdir(out) if p.startswith(".")]  # no temporary files left


def test_real_timestamp_in_name(tmp_path):
    res = merge(tmp_path, make_stat_dir(tmp_path / "in"))
    name = os.path.basename(res.path)
    assert name.startswith("multi_ranks_compare_merge_") and name.endswith(".xlsx")
    assert len(name.split("_")[-1].split(".")[0]) == 14


def test_missing_api_warns_and_keeps_going(tmp_path, caplog):
    d = make_stat_dir(tmp_path / "in")
    with caplog.at_level(logging.WARNING, logger="msprobe"):
        res = merge(tmp_path, d, "api: [Distributed.all_gather, Tensor.add]\ncompare_index: [Max diff]\n")
    assert "Distributed.all_gather not found in any rank report" in caplog.text
    assert res.rows == 1


# --------------------------------------------------------------------------------------------- bad input: one line, exit 2


def _ok_config(tmp_path):
    return write_config(tmp_path / "config.yaml", CONFIG)


def test_bad_no_rank_reports(tmp_path, capsys):
    d = tmp_path / "in"
    d.mkdir()
    (d / "readme.txt").write_text("x")
    rc, out, err = cli(["merge_result", "-i", d, "-o", tmp_path / "o", "-config", _ok_config(tmp_path)], capsys)
    assert_one_line_error(rc, err, "no compare reports", str(d))
    assert not (tmp_path / "o").exists()


def test_one_rank_report_is_merged(tmp_path, capsys):
    # used to be refused ("only one rank report"): one rank column is still a useful table of chosen APIs
    d = make_stat_dir(tmp_path / "in", ranks=(3,))
    rc, out, err = cli(["merge_result", "-i", d, "-o", tmp_path / "o", "-config", _ok_config(tmp_path), "-q"], capsys)
    assert rc == 0, err
    assert "reports of 1 rank (rank3)" in out
    [path] = glob.glob(str(tmp_path / "o" / "multi_ranks_compare_merge_*.xlsx"))
    assert load_book(path)["Max diff"][0] == ["NPU Name", "rank3"]


@pytest.mark.parametrize("name", [f"compare_result_{TS}.xlsx", f"compare_result_rank_{TS}.csv"])
def test_single_process_report_is_merged_as_rank0(tmp_path, capsys, name):
    """A single-process compare (a dump.json pair, or one unnumbered 'rank' dir) names its report without a
    rank number; merge_result takes it as rank 0 and says so (it used to find 'no rank compare reports')."""
    d = tmp_path / "in"
    d.mkdir()
    write_report(d / name, STAT_HEADER, stat_rows(0), "csv" if name.endswith(".csv") else "xlsx")
    (d / f"advisor_{TS}.txt").write_text("advice")
    rc, out, err = cli(["merge_result", "-i", d, "-o", tmp_path / "o", "-config", _ok_config(tmp_path)], capsys)
    assert rc == 0, err
    assert "single-process compare (merged as rank0)" in out
    assert name in err and "rank0" in err            # the INFO line names the file and the rank it stands for
    rc, out2, err = cli(["merge_result", "-i", d, "-o", tmp_path / "o2", "-config", _ok_config(tmp_path), "-q"],
                        capsys)
    assert rc == 0 and name not in err and "INFO" not in err              # -q: no INFO lines, same result
    assert "single-process compare (merged as rank0)" in out2
    [path] = glob.glob(str(tmp_path / "o" / "multi_ranks_compare_merge_*.xlsx"))
    sheet = load_book(path)["Max diff"]
    assert sheet[0] == ["NPU Name", "rank0"]
    assert sheet[1] == ["Distributed.all_reduce.0.forward.input.0", pytest.approx(0.2)]


def test_single_process_compare_then_merge(tmp_path, capsys, fixtures):
    """End to end: `msprobe compare` of one dump.json pair, then merge_result on its output directory."""
    case = fixtures / "mlp_bf16_stat_mix"
    rc = main(["compare", "-tp", str(case / "target" / "step0" / "rank" / "dump.json"),
               "-gp", str(case / "golden" / "step0" / "rank" / "dump.json"), "-o", str(tmp_path / "cmp"), "-c"])
    assert rc == 0
    capsys.readouterr()
    cfg = write_config(tmp_path / "c.yaml", "api:\n- Functional.linear\ncompare_index:\n- Max diff\n")
    rc, out, err = cli(["merge_result", "-i", tmp_path / "cmp", "-o", tmp_path / "o", "-config", cfg, "-q"], capsys)
    assert rc == 0, err
    assert "merged as rank0" in out
    [path] = glob.glob(str(tmp_path / "o" / "multi_ranks_compare_merge_*.xlsx"))
    sheet = load_book(path)["Max diff"]
    assert sheet[0] == ["NPU Name", "rank0"] and len(sheet) > 1
    assert all(r[0].startswith("Functional.linear.") for r in sheet[1:])


def test_single_process_report_beside_rank_reports_is_skipped(tmp_path, caplog):
    d = make_stat_dir(tmp_path / "in")
    write_report(d / f"compare_result_{TS}.xlsx", STAT_HEADER, stat_rows(7))
    with caplog.at_level(logging.WARNING, logger="msprobe"):
        res = merge(tmp_path, d)
    assert "skipping single-process report(s) compare_result_" in caplog.text
    assert res.ranks == [0, 1] and not res.single


def test_bad_input_dir_missing(tmp_path, capsys):
    rc, out, err = cli(["merge_result", "-i", tmp_path / "nope", "-o", tmp_path / "o", "-config",
                        _ok_config(tmp_path)], capsys)
    assert_one_line_error(rc, err, "does not exist")


@pytest.mark.parametrize("text, needle", [
    ("compare_index: [Max diff]\n", "no 'api' list"),
    ("api:\ncompare_index: [Max diff]\n", "no 'api' list"),
    ("- Distributed.all_reduce\n", "must be a mapping"),
    ("just a string\n", "must be a mapping"),
    ("", "is empty"),
    ("api: [Distributed.all_reduce\n", "not valid YAML"),
    ("api: Distributed.all_reduce\n", "must be a list"),
    ("api: [Distributed.all_reduce]\ncompare_index: Max diff\n", "must be a list"),
    ("api: [1, 2]\n", "non-empty name"),
])
def test_bad_config_yaml(tmp_path, capsys, text, needle):
    d = make_stat_dir(tmp_path / "in")
    cfg = write_config(tmp_path / "bad.yaml", text)
    rc, out, err = cli(["merge_result", "-i", d, "-o", tmp_path / "o", "-config", cfg], capsys)
    assert_one_line_error(rc, err, needle, "bad.yaml")
    assert not (tmp_path / "o").exists()


def test_yaml_is_loaded_safely(tmp_path, capsys):
    d = make_stat_dir(tmp_path / "in")
    cfg = write_config(tmp_path / "evil.yaml", "api: !!python/object/apply:os.system ['echo pwned']\n")
    rc, out, err = cli(["merge_result", "-i", d, "-o", tmp_path / "o", "-config", cfg], capsys)
    assert_one_line_error(rc, err, "not valid YAML")
    assert "pwned" not in out


def test_bad_compare_index_for_mode(tmp_path, capsys):
    d = make_stat_dir(tmp_path / "in")
    cfg = write_config(tmp_path / "c.yaml", "api: [Functional.linear]\ncompare_index: [Max diff, Cosine]\n")
    rc, out, err = cli(["merge_result", "-i", d, "-o", tmp_path / "o", "-config", cfg], capsys)
    assert_one_line_error(rc, err, "'Cosine'", "not valid for the statistics reports", "valid: Max diff")
    assert not (tmp_path / "o").exists()


def test_bad_mixed_statistics_and_tensor(tmp_path, capsys):
    d = make_stat_dir(tmp_path / "in", ranks=(0, 1))
    write_report(d / f"compare_result_rank2_{TS}.xlsx", TENSOR_HEADER,
                 [["A.b.0.forward.input.0"] + [None] * (len(TENSOR_HEADER) - 1)])
    rc, out, err = cli(["merge_result", "-i", d, "-o", tmp_path / "o", "-config", _ok_config(tmp_path)], capsys)
    assert_one_line_error(rc, err, "mixes statistics reports (rank0, rank1) and tensor reports (rank2)")


def test_bad_mixed_statistics_and_md5(tmp_path, capsys):
    d = make_stat_dir(tmp_path / "in", ranks=(0,))
    hdr = STAT_HEADER[:8] + ["NPU MD5", "BENCH MD5", "Requires_grad Consistent", "Result", "NPU_Stack_Info"]
    write_report(d / f"compare_result_rank1_{TS}.csv", hdr, [["A.b.0.forward.input.0"] + [""] * (len(hdr) - 1)], "csv")
    rc, out, err = cli(["merge_result", "-i", d, "-o", tmp_path / "o", "-config", _ok_config(tmp_path)], capsys)
    assert_one_line_error(rc, err, "mixes", "md5 reports (rank1)")


def test_bad_md5_only(tmp_path, capsys):
    d = tmp_path / "in"
    d.mkdir()
    hdr = STAT_HEADER[:8] + ["NPU MD5", "BENCH MD5", "Requires_grad Consistent", "Result", "NPU_Stack_Info"]
    for r in (0, 1):
        write_report(d / f"compare_result_rank{r}_{TS}.xlsx", hdr, [["A.b.0.forward.input.0"] + [""] * (len(hdr) - 1)])
    rc, out, err = cli(["merge_result", "-i", d, "-o", tmp_path / "o", "-config", _ok_config(tmp_path)], capsys)
    assert_one_line_error(rc, err, "md5 compares")


def test_bad_corrupted_xlsx(tmp_path, capsys):
    d = make_stat_dir(tmp_path / "in")
    bad = d / f"compare_result_rank2_{TS}.xlsx"
    bad.write_bytes(b"PK\x03\x04 this is not really a zip archive" * 10)
    rc, out, err = cli(["merge_result", "-i", d, "-o", tmp_path / "o", "-config", _ok_config(tmp_path)], capsys)
    assert_one_line_error(rc, err, str(bad), "not a valid .xlsx")
    assert not (tmp_path / "o").exists()


def test_bad_truncated_sheet(tmp_path, capsys):
    """A zip whose central directory is fine but whose sheet data is damaged: found while reading rows."""
    d = make_stat_dir(tmp_path / "in")
    src = d / f"compare_result_rank1_{TS}.xlsx"
    raw = bytearray(src.read_bytes())
    with zipfile.ZipFile(src) as zf:
        info = zf.getinfo("xl/worksheets/sheet1.xml")
    start = info.header_offset + 30 + len(info.filename) + len(info.extra)
    for i in range(start + 200, start + info.compress_size - 8):  # wreck the deflate stream after the header row
        raw[i] = 0xFF
    src.write_bytes(bytes(raw))
    rc, out, err = cli(["merge_result", "-i", d, "-o", tmp_path / "o", "-config", _ok_config(tmp_path), "-j", "1"],
                       capsys)
    assert_one_line_error(rc, err, str(src))
    assert not glob.glob(str(tmp_path / "o" / "*"))


def test_bad_zip_bomb_ratio(tmp_path, capsys):
    d = make_stat_dir(tmp_path / "in")
    bomb = d / f"compare_result_rank2_{TS}.xlsx"
    with zipfile.ZipFile(bomb, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=9) as zf:
        zf.writestr("[Content_Types].xml", "<Types/>")
        with zf.open("xl/worksheets/sheet1.xml", "w") as fh:
            block = b"\0" * (1 << 20)
            for _ in range(40):  # 40 MiB of zeros deflate to ~40 KiB
                fh.write(block)
    rc, out, err = cli(["merge_result", "-i", d, "-o", tmp_path / "o", "-config", _ok_config(tmp_path)], capsys)
    assert_one_line_error(rc, err, str(bomb), "zip bomb", "xl/worksheets/sheet1.xml")


def test_bad_zip_bomb_total_size_and_member_count(tmp_path, monkeypatch):
    d = make_stat_dir(tmp_path / "in")
    path = str(d / f"compare_result_rank0_{TS}.xlsx")
    monkeypatch.setattr(xlsxread, "MAX_TOTAL_UNCOMPRESSED", 1000)
    with pytest.raises(MsprobeError, match="would inflate to .* bytes .*zip bomb"):
        xlsxread.read_header(path)
    monkeypatch.setattr(xlsxread, "MAX_TOTAL_UNCOMPRESSED", 8 * 1024 ** 3)
    monkeypatch.setattr(xlsxread, "MAX_MEMBERS", 3)
    with pytest.raises(MsprobeError, match="archive members"):
        xlsxread.read_header(path)


def test_bad_report_without_needed_columns(tmp_path, capsys):
    d = make_stat_dir(tmp_path / "in")
    hdr = ["NPU Name", "Max diff"]
    write_report(d / f"compare_result_rank2_{TS}.xlsx", hdr, [["Functional.linear.0.forward.input.0", 1.0]])
    rc, out, err = cli(["merge_result", "-i", d, "-o", tmp_path / "o", "-config", _ok_config(tmp_path)], capsys)
    assert_one_line_error(rc, err, "has no column(s)", "NPU max")


def test_bad_api_found_nowhere(tmp_path, capsys):
    d = make_stat_dir(tmp_path / "in")
    cfg = write_config(tmp_path / "c.yaml", "api: [Distributed.broadcast]\n")
    rc, out, err = cli(["merge_result", "-i", d, "-o", tmp_path / "o", "-config", cfg], capsys)
    assert_one_line_error(rc, err, "Distributed.broadcast", "occurs in the NPU Name column")
    assert not glob.glob(str(tmp_path / "o" / "*"))


def test_missing_required_arguments(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["merge_result", "-i", "x"])
    assert exc.value.code == 2


def test_report_cut_short_inside_its_rows_is_one_line_not_fewer_rows(tmp_path, capsys):
    """A report whose zip entry is whole but whose sheet XML stops inside the rows (a writer that died) was read
    as a report without those rows, and merged in silence; it is now one error line naming the file."""
    import shutil

    case = fixtures_or_skip() / MULTI
    reports = tmp_path / "reports"
    shutil.copytree(case / "reference_out" / "v833_compare_stepdir", reports)
    from reliability_helpers import cut_xlsx_rows

    bad = next(p for p in reports.iterdir() if "rank1" in p.name and p.suffix == ".xlsx")
    cut_xlsx_rows(bad)
    config = case / "reference_out" / "_inputs" / "merge_config.yaml"
    rc, out, err = cli(["merge_result", "-i", str(reports), "-config", str(config), "-o", str(tmp_path / "out"), "-q"],
                       capsys)
    assert rc == 2
    lines = [ln for ln in err.splitlines() if ln.startswith("msprobe: error:")]
    assert len(lines) == 1 and bad.name in lines[0] and "ends before </sheetData>" in lines[0], err
    assert not (tmp_path / "out").exists() or not list((tmp_path / "out").glob("*.xlsx"))
