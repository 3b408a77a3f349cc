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
