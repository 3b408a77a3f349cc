"""msprobe.core.dump.stream: a big dump.json read record by record gives exactly the rows (or the error) of the
whole-file parse, and every layout it cannot split safely falls back to the whole-file parse."""

from __future__ import annotations

import json
import logging

import pytest

from msprobe.core.dump import reader, stream
from msprobe.core.errors import MsprobeError

COLS = ("task", "level", "framework", "has_md5", "names", "api", "state", "dtype", "shape", "stat_max", "stat_min",
        "stat_mean", "stat_norm", "requires_grad", "data_name", "stack", "md5")


def _rows(path, monkeypatch, streamed: bool, chunk: int = 3):
    monkeypatch.setattr(stream, "STREAM_MIN_BYTES", 0 if streamed else 1 << 60)
    monkeypatch.setattr(stream, "CHUNK_RECORDS", chunk)
    return reader.read_dump(str(path), "golden")


def _same(a, b):
    for f in COLS:
        assert repr(getattr(a, f)) == repr(getattr(b, f)), f
    assert repr(a.value) == repr(b.value)


def _spy(monkeypatch):
    """Count the pieces the streaming reader yields (0: it fell back to the whole-file parse)."""
    calls = {"n": 0}
    orig = reader._walk_records

    def walk(walker, data, path, side):
        calls["n"] += 1
        return orig(walker, data, path, side)

    monkeypatch.setattr(reader, "_walk_records", walk)
    return calls


def _dump(records: dict, indent=2, task="statistics", **head) -> bytes:
    obj = {"task": task, "level": "mix", "framework": "pytorch", "dump_data_dir": None, **head, "data": records}
    return json.dumps(obj, indent=indent).encode()


def _records(n: int) -> dict:
    out = {}
    for i in range(n):
        out[f"Functional.linear.{i}.forward"] = {
            "input_args": [{"type": "torch.Tensor", "dtype": "torch.float32", "shape": [2, 3], "Max": 1.5 + i,
                            "Min": -1.0, "Mean": 0.25, "Norm": 3.0, "requires_grad": True},
                           {"type": "int", "value": i}],
            "input_kwargs": {"bias": None},
            "output": [{"type": "torch.Tensor", "dtype": "torch.bfloat16", "shape": [2], "Max": float(i),
                        "Min": 0.0, "Mean": 0.5, "Norm": 1.0, "requires_grad": False}],
        }
    out["Module.fc.Linear.parameters_grad"] = {"weight": {"type": "torch.Tensor", "dtype": "torch.float32",
                                                          "shape": [3, 3], "Max": 1.0, "Min": 0.0, "Mean": 0.1,
                                                          "Norm": 1.2, "requires_grad": False}}
    return out


def test_reference_fixtures_stream_to_identical_rows(fixtures, monkeypatch):
    paths = sorted(fixtures.glob("**/dump.json"))
    assert paths
    streamed_files = 0
    for p in paths:
        whole = _rows(p, monkeypatch, False)
        calls = _spy(monkeypatch)
        got = _rows(p, monkeypatch, True)
        monkeypatch.undo()
        streamed_files += calls["n"] > 0
        _same(whole, got)
    assert streamed_files >= len(paths) // 2  # the reference's 4-space layout is split, not parsed whole


@pytest.mark.parametrize("indent", [1, 2, 4])
def test_generated_layouts_split_into_pieces(tmp_path, monkeypatch, indent):
    p = tmp_path / "dump.json"
    p.write_bytes(_dump(_records(10), indent=indent))
    whole = _rows(p, monkeypatch, False)
    calls = _spy(monkeypatch)
    got = _rows(p, monkeypatch, True, chunk=3)
    assert calls["n"] == 4  # 11 records, 3 per piece
    _same(whole, got)
    assert len(got) == 41


def test_nan_tokens_and_md5_detected_per_piece(tmp_path, monkeypatch):
    recs = _records(6)
    text = _dump(recs).replace(b'"Max": 5.5', b'"Max": NaN').replace(b'"Min": -1.0', b'"Min": -Infinity', 1)
    p = tmp_path / "dump.json"
    p.write_bytes(text)
    whole = _rows(p, monkeypatch, False)
    calls = _spy(monkeypatch)
    got = _rows(p, monkeypatch, True, chunk=2)
    assert calls["n"] == 4
    _same(whole, got)
    assert repr(got.stat_max[[i for i, n in enumerate(got.names) if n.startswith("Functional.linear.4.")][0]]) == "nan"

    recs = _records(6)
    recs["Functional.linear.5.forward"]["output"][0]["md5"] = "0badf00d"
    p.write_bytes(_dump(recs))
    assert _rows(p, monkeypatch, True, chunk=2).has_md5 is True
    assert _rows(p, monkeypatch, False).has_md5 is True


@pytest.mark.parametrize("damage", [
    "compact", "keys_after_data", "missing_comma", "trailing_comma", "duplicate_across_pieces", "truncated",
])
def test_layouts_it_cannot_split_fall_back_to_the_whole_parse(tmp_path, monkeypatch, damage):
    recs = _records(8)
    if damage == "compact":
        text = json.dumps({"task": "statistics", "level": "mix", "data": recs}).encode()
    elif damage == "keys_after_data":
        text = json.dumps({"task": "statistics", "level": "mix", "data": recs, "extra": 1}, indent=2).encode()
    else:
        text = _dump(recs)
    if damage == "missing_comma":
        text = text.replace(b'  },\n    "Functional.linear.5', b'  }\n    "Functional.linear.5', 1)
    elif damage == "trailing_comma":
        text = text.replace(b"\n    }\n  }\n}", b"\n    },\n  }\n}")
    elif damage == "duplicate_across_pieces":
        text = text.replace(b'"Functional.linear.7.forward"', b'"Functional.linear.0.forward"')
    elif damage == "truncated":
        text = text[: len(text) * 2 // 3]
    p = tmp_path / "dump.json"
    p.write_bytes(text)

    def outcome(streamed):
        try:
            return _rows(p, monkeypatch, streamed, chunk=2), None
        except MsprobeError as exc:
            return None, str(exc)

    logging.getLogger("msprobe").setLevel(logging.ERROR)
    (w, werr), (s, serr) = outcome(False), outcome(True)
    assert werr == serr
    if damage in ("missing_comma", "trailing_comma"):
        assert werr and "not valid JSON" in werr
    else:
        assert w is not None and s is not None
        _same(w, s)
    if damage == "duplicate_across_pieces":
        assert len(s) == 7 * 4 + 1  # the repeated key is one record, as in the whole-file parse
    if damage == "truncated":
        assert 0 < len(s) < 25


def test_a_bad_record_before_a_damaged_piece_gives_the_whole_file_message(tmp_path, monkeypatch):
    recs = {"=cmd.0.forward": _records(1)["Functional.linear.0.forward"], **_records(8)}
    text = _dump(recs)
    text = text.replace(b'"Functional.linear.6.forward": {', b'"Functional.linear.6.forward": {{', 1)
    p = tmp_path / "dump.json"
    p.write_bytes(text)
    msgs = []
    for streamed in (False, True):
        with pytest.raises(MsprobeError) as ei:
            _rows(p, monkeypatch, streamed, chunk=2)
        msgs.append(str(ei.value))
    assert msgs[0] == msgs[1]


def test_bad_records_raise_the_same_error_when_streamed(tmp_path, monkeypatch):
    recs = _records(8)
    recs["Functional.linear.6.forward"]["output"] = 5
    p = tmp_path / "dump.json"
    p.write_bytes(_dump(recs))
    msgs = []
    for streamed in (False, True):
        with pytest.raises(MsprobeError) as ei:
            _rows(p, monkeypatch, streamed, chunk=2)
        msgs.append(str(ei.value))
    assert msgs[0] == msgs[1] and "bare value 5" in msgs[0]

    p.write_bytes(_dump(_records(4), task="overflow_check"))
    msgs = []
    for streamed in (False, True):
        with pytest.raises(MsprobeError) as ei:
            _rows(p, monkeypatch, streamed, chunk=2)
        msgs.append(str(ei.value))
    assert msgs[0] == msgs[1] and "overflow_check" in msgs[0]


def test_streaming_releases_the_file_pages(tmp_path, monkeypatch):
    p = tmp_path / "dump.json"
    p.write_bytes(_dump(_records(50)))
    dropped = []
    monkeypatch.setattr(stream, "_drop", lambda mm, upto: dropped.append(upto))
    rows = _rows(p, monkeypatch, True, chunk=10)
    assert len(rows) == 201
    assert len(dropped) == 6 and dropped == sorted(dropped) and dropped[-1] < p.stat().st_size


def test_csv_written_in_row_chunks_is_byte_identical(tmp_path, monkeypatch):
    from msprobe.core.io import csvfile

    header = ["Name", "Max", "Note"]
    columns = [[f"op.{i}" for i in range(25)] + ["=cmd|x", "a,b", 'q"t'],
               [float(i) / 3 for i in range(25)] + [None, True, float("nan")],
               ["ok"] * 25 + ["-1", "+bad", "line\nbreak"]]
    out = {}
    for chunk in (1000, 4, 1):
        monkeypatch.setattr(csvfile, "CSV_CHUNK_ROWS", chunk)
        p = tmp_path / f"r{chunk}.csv"
        csvfile.write_csv(str(p), header, columns)
        out[chunk] = p.read_bytes()
    assert out[1000] == out[4] == out[1]
    text = out[1].decode()
    assert text.count("\r\n") == 29 and "'=cmd|x" in text and "'+bad" in text and '"a,b"' in text
