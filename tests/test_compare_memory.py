"""Bounded memory of compare (issue 17 item 5): the slim rank results and the chunked report cells give the
same reports, summaries and advice as the whole path."""

from __future__ import annotations

import os
import pickle

import pytest

from conftest import fixtures_or_skip
from msprobe.cli.compare import summary_lines
from msprobe.core.advisor.advisor import advise
from msprobe.core.compare.config import CompareConfig
from msprobe.core.compare.runner import run_compare


def _pair(name: str):
    root = fixtures_or_skip() / name
    if not root.is_dir():
        pytest.skip(f"fixture {name} not found under {root.parent}")
    return str(root / "target" / "step0"), str(root / "golden" / "step0")


def _run(t, g, out, keep_tables, advisor=True, fmt="csv", jobs=1):
    cfg = CompareConfig(target=t, golden=g, output_dir=str(out), fmt=fmt, jobs=jobs, progress=False)
    return run_compare(cfg, advisor=advisor, keep_tables=keep_tables)


def _bytes(path):
    with open(path, "rb") as fh:
        return fh.read()


@pytest.mark.parametrize("case", ["multirank_mlp_bf16_stat_mix", "mlp_bf16_md5", "mlp_bf16_tensor_mix",
                                  "cnn_fp16_stat_mix"])
def test_slim_results_give_the_same_summary_and_advice(tmp_path, case):
    t, g = _pair(case)
    whole = _run(t, g, tmp_path / "whole", keep_tables=True)
    slim = _run(t, g, tmp_path / "slim", keep_tables=False)
    assert len(whole) == len(slim) > 0
    for w, s in zip(whole, slim):
        assert not w.report.is_slim and s.report.is_slim
        assert _bytes(w.path) == _bytes(s.path)
        assert summary_lines(s.report, s.out_sub, s.label, 1.0) == summary_lines(w.report, w.out_sub, w.label, 1.0)
        assert s.advice == advise(w.report, label=w.label)
        # what goes back from a rank worker: no names and no cell columns, only a few bytes a row
        assert s.report.names == [] and s.report.apis == []
        kept = [h for h, c in zip(s.report.header, s.report.columns) if c is not None]
        assert kept in ([], ["Result"], ["Accuracy Reached or Not"])
        assert len(pickle.dumps(s.report)) < len(pickle.dumps(w.report)) / 3


def test_parallel_rank_workers_return_slim_reports(tmp_path):
    t, g = _pair("multirank_mlp_bf16_stat_mix")
    if (os.cpu_count() or 1) < 2:
        pytest.skip("one core: the ranks run in this process")
    whole = _run(t, g, tmp_path / "whole", keep_tables=True, jobs=2)
    slim = _run(t, g, tmp_path / "slim", keep_tables=False, jobs=2)
    assert [r.label for r in slim] == [r.label for r in whole] == ["rank0", "rank1"]
    for w, s in zip(whole, slim):
        assert s.report.is_slim and s.report.rows == w.report.rows
        assert s.report.first_red == w.report.first_red and s.report.worst == w.report.worst
        assert _bytes(w.path) == _bytes(s.path)


def test_da_keeps_the_whole_tables(tmp_path):
    """-da reads every column of every rank: run_compare(keep_tables=True) is what the CLI asks for then."""
    t, g = _pair("multirank_mlp_bf16_stat_mix")
    res = _run(t, g, tmp_path, keep_tables=True)
    assert all(not r.report.is_slim and all(c is not None for c in r.report.columns) for r in res)


def _sheets(path):
    import zipfile

    with zipfile.ZipFile(path) as z:
        return {n: z.read(n) for n in z.namelist() if n.startswith("xl/")}


@pytest.mark.parametrize("case", ["mlp_bf16_stat_mix", "cnn_fp16_tensor_mix"])
def test_chunk_sizes_do_not_change_the_report(tmp_path, monkeypatch, case):
    """The cells are made a few rows at a time (ChunkedColumn) while the writers take the report in chunks:
    tiny chunks everywhere give the same csv bytes and the same workbook as the defaults."""
    from msprobe.core.io import columns, csvfile, xlsx

    t, g = _pair(case)
    whole_csv = _run(t, g, tmp_path / "a", keep_tables=True, advisor=False)[0].path
    whole_xlsx = _run(t, g, tmp_path / "b", keep_tables=True, advisor=False, fmt="xlsx")[0].path
    monkeypatch.setattr(csvfile, "CSV_CHUNK_ROWS", 3)
    monkeypatch.setattr(xlsx, "CHUNK_ROWS", 5)
    monkeypatch.setattr(columns, "ITER_ROWS", 2)
    small_csv = _run(t, g, tmp_path / "c", keep_tables=True, advisor=False)[0].path
    small_xlsx = _run(t, g, tmp_path / "d", keep_tables=True, advisor=False, fmt="xlsx")[0].path
    assert _bytes(small_csv) == _bytes(whole_csv)
    assert _sheets(small_xlsx) == _sheets(whole_xlsx)


def test_statistics_report_keeps_numbers_not_cells():
    """Max/Min/Mean/L2norm diff, the relative errors and the NPU/Bench statistics are ChunkedColumns; any
    row range of one gives the cells the whole column gives (those of stats.stat_diffs_parsed)."""
    from msprobe.core.compare import stats as st
    from msprobe.core.compare.engine import STAT_DIFF, SUMMARY, compare_dumps
    from msprobe.core.io.columns import ChunkedColumn

    root = fixtures_or_skip() / "mlp_bf16_stat_mix"
    t, g = (str(root / s / "step0" / "rank" / "dump.json") for s in ("target", "golden"))
    rep = compare_dumps(CompareConfig(target=t, golden=g), t, g)
    lazy = [h for h, c in zip(rep.header, rep.columns) if isinstance(c, ChunkedColumn)]
    # (the dtype, shape and requires_grad columns are read from the dumps' coded columns: TakenColumn)
    coded = ["NPU Dtype", "Bench Dtype", "NPU Tensor Shape", "Bench Tensor Shape", "NPU Requires_grad",
             "Bench Requires_grad"]
    assert lazy == [h for h in rep.header if h in coded] + STAT_DIFF + SUMMARY
    assert len([h for h in lazy if h in coded]) == 6
    for h in lazy:
        col = rep.columns[rep.header.index(h)]
        whole = col.tolist()
        assert len(whole) == rep.rows == len(col)
        assert [col[i] for i in range(rep.rows)] == whole == list(col)
        assert sum((col[a:a + 7] for a in range(0, rep.rows, 7)), []) == whole
        assert pickle.loads(pickle.dumps(col)) == whole
    # the cells are the whole path's: recompute Max diff / MaxRelativeErr from the statistics cells
    npu, bench = (rep.columns[rep.header.index(h)].tolist() for h in ("NPU max", "Bench max"))
    matched = rep.columns[rep.header.index("Bench Name")]
    import numpy as np

    ok = np.array([b != "N/A" for b in matched])
    dc, rc, _, _, _ = st.stat_diffs(npu, [None if not m else b for b, m in zip(bench, ok.tolist())], ok)
    assert rep.columns[rep.header.index("Max diff")] == dc
    assert rep.columns[rep.header.index("MaxRelativeErr")] == rc
    assert any(isinstance(v, float) for v in dc) and any(v.endswith("%") for v in rc)


def test_highlight_masks_from_columns_equal_the_cells():
    """The highlight's "NPU/Bench max is a number" and "NPU max/min is NaN/inf" masks are read from the dump's
    columns (CompactValues arrays) instead of the report's cells: the same masks as from the cells."""
    import numpy as np

    from msprobe.core.compare import engine as eng
    from msprobe.core.compare import stats as st
    from msprobe.core.dump.reader import CompactValues

    raw = [1.5, float("nan"), None, "True", "nan", "inf", 3, 2 ** 70, True, "N/A", float("inf"), -0.0, "1e3", -7]
    idx = np.array([13, 0, -1, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 0, -1], dtype=np.int64)
    for col in (CompactValues(raw), list(raw)):
        taken = eng._take(col, idx)  # the target cells: display(values), "N/A" where idx is -1
        _, want = eng._number_mask(st.display(taken))
        assert eng._number_at(col, idx).tolist() == want.tolist()
        rev = CompactValues(list(reversed(raw)))
        assert eng._nonfinite_at(idx, col, rev).tolist() == eng._nonfinite(taken, eng._take(rev, idx)).tolist()
        assert eng._nonfinite_at(idx, col).tolist() == eng._nonfinite(taken).tolist()
        assert eng._nonfinite_at(idx, col).any() and not eng._nonfinite_at(idx, col).all()


def test_worker_parsed_side_is_restored_exactly():
    """The golden side parsed in the worker is sent without its prepared statistics (the parent makes them once
    the worker has ended), through the spool file as through pickle, and through the sequential path's
    compaction: the same rows and arrays as a parse in the parent itself."""
    import tempfile

    import numpy as np

    from msprobe.core.compare import engine as eng

    t, _ = _pair("mlp_bf16_stat_mix")
    path = next(os.path.join(r, "dump.json") for r in (os.path.join(t, "rank"), os.path.join(t, "rank0"), t)
                if os.path.isfile(os.path.join(r, "dump.json")))
    whole = eng._load_side(path, "golden", "")
    sent = pickle.loads(pickle.dumps(eng._load_side_sent(path, "golden", "")))
    assert sent.parsed is None
    with tempfile.TemporaryFile() as fh:
        assert eng._load_side_sent(path, "golden", "", fh.fileno()) is True
        fh.seek(0)
        spooled = eng._unspool(fh)
    compacted = eng._compacted([eng._load_side(path, "golden", "", numbers=False)])
    for other in (spooled, compacted):
        assert other.names == whole.names and other.api == whole.api and other.shape == whole.shape
        assert other.dtype == whole.dtype and other.value == whole.value and other.stat_max == whole.stat_max
        eng._restore_numbers(other)
        for (v1, ok1, r1), (v2, ok2, r2) in zip(whole.parsed, other.parsed):
            assert v1.tobytes() == v2.tobytes() and ok1.tolist() == ok2.tolist() and r1.tobytes() == r2.tobytes()
    eng._restore_numbers(sent)
    assert len(sent.parsed) == len(whole.parsed) == 4
    for (v1, ok1, r1), (v2, ok2, r2) in zip(whole.parsed, sent.parsed):
        assert v1.tobytes() == v2.tobytes() and ok1.tolist() == ok2.tolist() and r1.tobytes() == r2.tobytes()
    # the values are the column's own array again (no copy beside it) where every value is a number
    vals, _, other = sent.stat_max.numbers()
    if not other:
        assert np.shares_memory(sent.parsed[0][0], vals)


def test_hash_join_equals_the_tuple_join():
    """match_exact's hash join (unique names) pairs exactly the rows the (name, shape) tuple join pairs: equal
    names with a different shape stay unmatched, missing names on either side, and a repeated name falls back
    to the join that counts occurrences."""
    import numpy as np

    from msprobe.core.compare.match import _hash_join, _join, match_exact
    from msprobe.core.dump.reader import DumpRows, compact_columns

    def rows(names, shapes):
        r = DumpRows(path="x", task="statistics", level="L1", framework="pytorch")
        r.names, r.api, r.state = list(names), ["a"] * len(names), ["input"] * len(names)
        r.dtype, r.shape, r.requires_grad = ["torch.float32"] * len(names), list(shapes), ["True"] * len(names)
        compact_columns(r)
        return r

    t = rows(["a.0", "b.0", "c.0", "d.0", "e.0"], ["[1]", "[2]", "[3]", "[4]", "[5]"])
    g = rows(["e.0", "c.0", "x.0", "b.0", "a.0"], ["[5]", "[9]", "[1]", "[2]", "[1]"])
    got = _hash_join(t, g)
    assert got is not None and got.tolist() == [4, 3, -1, -1, 0]
    _, want = _join(list(zip(t.names, t.shape)), list(zip(g.names, g.shape)))
    assert got.tolist() == want.tolist()
    assert match_exact(t, g).golden.tolist() == [4, 3, -1, -1, 0]
    # a repeated name: the general join (k-th occurrence pairs with the k-th)
    t2 = rows(["a.0", "a.0", "b.0"], ["[1]", "[1]", "[2]"])
    g2 = rows(["a.0", "b.0", "a.0"], ["[1]", "[2]", "[1]"])
    assert _hash_join(t2, g2) is None
    assert match_exact(t2, g2).golden.tolist() == [0, 2, 1]
    assert np.array_equal(match_exact(g, g).golden, np.arange(5))


def test_compact_columns_read_like_the_lists_they_replace():
    """CodedColumn / SparseColumn (built whole or a piece at a time) give the list's values for len, indexing,
    slices, iteration, take with -1 -> fill, ==, and survive pickling; NO_VALUE stays the one marker through
    pickle (it used to come back as a new object, so ``is NO_VALUE`` failed in the parent)."""
    import numpy as np

    from msprobe.core.dump.reader import NO_VALUE
    from msprobe.core.io.columns import CodedColumn, SparseColumn, TakenColumn

    vals = ["[2, 3]", "[]", "[2, 3]", "None", "[]"] * 30000 + ["[7]"]
    whole = CodedColumn(vals)
    built = CodedColumn()
    for a in range(0, len(vals), 777):
        built.extend(vals[a:a + 777])
    for col in (whole, built, pickle.loads(pickle.dumps(built))):
        assert len(col) == len(vals) and col == vals and list(col) == vals and col[-1] == "[7]"
        assert col[3:9] == vals[3:9] and col.codes.dtype == np.uint8 and len(col.table) == 4
        assert col.take(np.array([0, -1, 150000]), fill="N/A") == ["[2, 3]", "N/A", "[7]"]
        tc = TakenColumn(col, np.array([150000, -1, 1]), "N/A")
        assert [tc[0], tc[1], tc[2]] == ["[7]", "N/A", "[]"] == tc.tolist()
    values = [NO_VALUE, 3, NO_VALUE, [1, 2], None] * 1000
    sparse = SparseColumn()
    for a in range(0, len(values), 333):
        sparse.extend(values[a:a + 333])
    back = pickle.loads(pickle.dumps(sparse))
    for col in (sparse, back, SparseColumn(values, NO_VALUE)):
        assert len(col) == len(values) and col.tolist() == values
        assert col.take(np.array([1, -1, 4998]), fill=NO_VALUE) == [3, NO_VALUE, [1, 2]]
    assert back[0] is NO_VALUE and pickle.loads(pickle.dumps(NO_VALUE)) is NO_VALUE
