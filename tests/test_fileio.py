"""Output safety: atomic writes that never replace a file, the CSV formula guard, the JSON loader."""

import csv
import os

import pytest

from msprobe.core.errors import MsprobeError
from msprobe.core.fileio import atomic_write, load_json, unique_path
from msprobe.core.io.csvfile import write_csv


def test_atomic_write_never_replaces(tmp_path):
    target = tmp_path / "compare_result_1.csv"
    target.write_text("old")
    written = atomic_write(str(target), lambda p: open(p, "w").write("new"))
    assert written == str(tmp_path / "compare_result_1_1.csv")
    assert target.read_text() == "old"
    assert open(written).read() == "new"
    assert sorted(os.listdir(tmp_path)) == ["compare_result_1.csv", "compare_result_1_1.csv"]
    assert oct(os.stat(written).st_mode & 0o777) == "0o640"


def test_atomic_write_leaves_nothing_on_failure(tmp_path):
    def boom(path):
        open(path, "w").write("partial")
        raise RuntimeError("disk full")

    with pytest.raises(RuntimeError):
        atomic_write(str(tmp_path / "r.xlsx"), boom)
    assert os.listdir(tmp_path) == []


def test_unique_path_keeps_double_extension(tmp_path):
    (tmp_path / "a.vis.db").write_text("")
    assert unique_path(str(tmp_path / "a.vis.db")) == str(tmp_path / "a_1.vis.db")


def test_csv_formula_guard(tmp_path):
    p = tmp_path / "x.csv"
    write_csv(str(p), ["a", "b"], [["=1+2", "-3.5", "ok", "x;@y"], [1.5, None, "+cmd", "-inf"]])
    rows = list(csv.reader(open(p)))
    assert rows == [["a", "b"], ["'=1+2", "1.5"], ["-3.5", ""], ["ok", "'+cmd"], ["'x;@y", "-inf"]]


def test_load_json_accepts_reference_nan_tokens(tmp_path):
    p = tmp_path / "d.json"
    p.write_text('{"a": NaN, "b": -Infinity, "c": 1}')
    obj = load_json(str(p), "dump.json")
    assert obj["a"] != obj["a"] and obj["b"] == float("-inf") and obj["c"] == 1


def test_load_json_errors(tmp_path):
    p = tmp_path / "d.json"
    p.write_text('{"a": [1, 2')
    with pytest.raises(MsprobeError, match="not valid JSON"):
        load_json(str(p), "dump.json")
    p.write_text("")
    with pytest.raises(MsprobeError, match="is empty"):
        load_json(str(p), "dump.json")
    p.write_text("{}")
    with pytest.raises(MsprobeError, match="over the limit"):
        load_json(str(p), "dump.json", limit=1)


def test_chunked_dump_parsing_equals_whole_parse():
    import json as _json

    from msprobe.core.fileio import _chunked, _loads

    data = {f"Torch.op.{i}.forward": {"input_args": [{"type": "torch.Tensor", "Max": float("nan") if i == 3 else i,
                                                    "shape": [i, 2]}], "output": [None]} for i in range(50)}
    doc = {"task": "statistics", "level": "mix", "framework": "pytorch", "dump_data_dir": None, "data": data}
    for indent in (1, 2, 4):
        raw = _json.dumps(doc, indent=indent).encode()
        got = _chunked(raw, False, 7)
        assert got is not None and list(got["data"]) == list(data)
        assert _json.dumps(got, sort_keys=True) == _json.dumps(_loads(raw), sort_keys=True)
        assert got["data"]["Torch.op.3.forward"]["input_args"][0]["Max"] != got["data"]["Torch.op.3.forward"]["input_args"][0]["Max"]
    # data not the last key, and an empty data object
    raw = _json.dumps({"task": "tensor", "data": data, "extra": {"a": 1}}, indent=1).encode()
    assert _chunked(raw, False, 5)["extra"] == {"a": 1}
    assert _chunked(_json.dumps({"task": "x", "data": {}}, indent=1).encode(), False, 5) is None  # whole-file parse
    # compact JSON has no layout to cut on: the caller falls back to the whole-file parser
    assert _chunked(_json.dumps(doc).encode(), False, 5) is None
