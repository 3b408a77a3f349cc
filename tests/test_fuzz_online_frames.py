"""Property-based fuzzing (hypothesis) of the online run_ut frame decoder
(``msprobe.core.acc_check.online.protocol``).

Random bytes, mutated valid frames (byte flips, truncation, appended bytes) and frames whose CRC is
recomputed after the header or the tensor specs were changed (so that the checks behind the checksum are
reached) go through ``parse_bytes`` / ``read_frame`` and, for a DATA frame, ``check_data_header`` and
``tensor_views``, as the checker does.  The only exceptions allowed out are the documented ones:
:class:`ProtocolError` (and ``EOFError`` from the stream reader at the end of a stream).  Every example runs
under a SIGALRM bound (a hang fails it; no timing assert).  Derandomised, a small budget.
"""

from __future__ import annotations

import contextlib
import json
import signal
import struct
import zlib

import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from msprobe.core.acc_check.online import protocol as P  # noqa: E402

SECONDS = 20


def _settings(n: int):
    return settings(max_examples=n, deadline=None, derandomize=True, database=None, print_blob=True,
                    suppress_health_check=list(HealthCheck))


class Hang(Exception):
    pass


@contextlib.contextmanager
def time_bound(seconds: int = SECONDS):
    def on_alarm(signum, frame):
        raise Hang(f"example still running after {seconds} s")

    old = signal.signal(signal.SIGALRM, on_alarm)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def _valid_data_frame() -> bytes:
    t0 = struct.pack("<6f", 1, 2, 3, 4, 5, 6)
    t1 = struct.pack("<2q", 7, 8)
    header = {"seq": 0, "session": "abc123", "rank": 0, "step": 0, "name": "Functional.linear.0",
              "record": {"input_args": [{"type": "torch.Tensor", "data_name": "@0"}]},
              "tensors": [{"dtype": "torch.float32", "shape": [2, 3], "nbytes": 24},
                          {"dtype": "torch.int64", "shape": [2], "nbytes": 16}]}
    return P.encode_bytes(P.DATA, header, [t0, t1])


VALID = _valid_data_frame()


def _with_crc(kind: int, head: bytes, payload: bytes, version: int = P.VERSION, magic: bytes = P.MAGIC) -> bytes:
    crc = zlib.crc32(payload, zlib.crc32(head)) & 0xFFFFFFFF
    return P.FIXED.pack(magic, version, kind, 0, len(head), len(payload), crc) + head + payload


def decode(data: bytes) -> None:
    """Decode as the checker does; only ProtocolError may come out."""
    with time_bound():
        try:
            frame = P.parse_bytes(data)
            if frame.kind == P.DATA:
                P.check_data_header(frame.header)
                P.tensor_views(frame)
        except P.ProtocolError as exc:
            assert str(exc).strip(), "a ProtocolError with an empty message"


def decode_stream(data: bytes) -> None:
    """``read_frame`` on a stream of frames (the TCP path): ProtocolError or EOFError at the end, nothing else."""
    pos = [0]

    def read_exact(n: int) -> bytes:
        if pos[0] + n > len(data):
            raise EOFError
        out = data[pos[0]:pos[0] + n]
        pos[0] += n
        return out

    with time_bound():
        try:
            for _ in range(len(data) + 1):
                frame = P.read_frame(read_exact)
                if frame.kind == P.DATA:
                    try:
                        P.check_data_header(frame.header)
                        P.tensor_views(frame)
                    except P.ProtocolError:
                        pass
        except (P.ProtocolError, EOFError):
            pass


def test_deeply_nested_header_is_a_protocol_error():
    """Regression: a header nested 100,000 deep (right CRC) was a RecursionError out of read_frame."""
    with pytest.raises(P.ProtocolError, match="nested too deep"):
        P.parse_bytes(_with_crc(P.DATA, b"[" * 100_000 + b"]" * 100_000, b""))


def test_valid_frame_round_trip():
    frame = P.parse_bytes(VALID)
    assert frame.kind == P.DATA and frame.header["name"] == "Functional.linear.0"
    P.check_data_header(frame.header)
    views = P.tensor_views(frame)
    assert [(d, s, v.nbytes) for d, s, v in views] == [("torch.float32", [2, 3], 24), ("torch.int64", [2], 16)]
    assert struct.unpack("<2q", bytes(views[1][2])) == (7, 8)


@_settings(150)
@given(st.binary(max_size=300))
def test_random_bytes(data):
    decode(data)
    decode_stream(data)
    decode(P.MAGIC + data)


@_settings(150)
@given(st.lists(st.tuples(st.integers(0, len(VALID) - 1), st.integers(0, 255)), min_size=1, max_size=6),
       st.integers(0, len(VALID)), st.binary(max_size=40))
def test_mutated_valid_frame(flips, cut, tail):
    data = bytearray(VALID)
    for pos, val in flips:
        data[pos] = val
    decode(bytes(data))
    decode(bytes(data[:cut]))
    decode(bytes(data) + tail)
    decode_stream(bytes(data) + VALID + tail)


_json_leaf = st.one_of(st.none(), st.booleans(), st.integers(-(1 << 70), 1 << 70), st.floats(allow_nan=True),
                       st.text(max_size=20))
_json = st.recursive(_json_leaf, lambda c: st.one_of(st.lists(c, max_size=4),
                                                      st.dictionaries(st.text(max_size=8), c, max_size=4)),
                     max_leaves=20)
_spec = st.fixed_dictionaries({}, optional={"dtype": st.one_of(st.sampled_from(sorted(P.ITEMSIZE)), _json),
                                            "shape": st.one_of(st.lists(st.integers(-2, 1 << 40), max_size=4), _json),
                                            "nbytes": st.one_of(st.integers(-8, 1 << 40), st.floats(), _json)})


@_settings(200)
@given(st.dictionaries(st.sampled_from(["seq", "session", "rank", "step", "name", "record", "tensors", "x"]),
                       _json, max_size=8),
       st.one_of(st.none(), st.lists(st.one_of(_spec, _json), max_size=4)),
       st.binary(max_size=64), st.integers(0, 7))
def test_checksummed_frames_with_odd_headers(extra, tensors, payload, kind):
    """The CRC is right: the checks behind it (JSON, header keys, tensor specs) must hold on their own."""
    header = {"seq": 0, "session": "s", "rank": 0, "step": 0, "name": "Torch.add.0", "record": {}}
    header.update(extra)
    if tensors is not None:
        header["tensors"] = tensors
    head = json.dumps(header, allow_nan=True).encode("utf-8")
    decode(_with_crc(kind, head, payload))
    decode_stream(_with_crc(kind, head, payload))


_ODD_HEADS = [b"[" * 100_000 + b"]" * 100_000, b"{\"a\":" * 50_000 + b"1" + b"}" * 50_000,
              b"[" * 100_000, b"\xff\xfe{}", b"{}\x00", b"", b"null", b"[1,2]", b"\"x\"", b"{\"a\": NaN}",
              b"1" * 5000, b"{\"a\": 1e99999}", "{\"\u4e2d\": 1}".encode("utf-16")]


@_settings(60)
@given(st.integers(0, len(_ODD_HEADS) - 1), st.integers(0, 7))
def test_checksummed_odd_json(which, kind):
    """Deeply nested, non-UTF-8, non-object and empty headers with a correct CRC."""
    head = _ODD_HEADS[which]
    decode(_with_crc(kind, head, b""))
    decode_stream(_with_crc(kind, head, b""))


@pytest.mark.parametrize("spec", [
    {"dtype": "torch.float32", "shape": [2, 3], "nbytes": 24.0},          # float nbytes equal to the size
    {"dtype": "torch.float32", "shape": [2, 3], "nbytes": True},
    {"dtype": "torch.bool", "shape": [True], "nbytes": 1},
    {"dtype": "torch.float32", "shape": [1 << 62, 1 << 62], "nbytes": 24},
    {"dtype": ["torch.float32"], "shape": [2, 3], "nbytes": 24},
    {"dtype": {"a": 1}, "shape": [2, 3], "nbytes": 24},
])
def test_odd_tensor_specs_are_protocol_errors(spec):
    """Regressions: a list/dict dtype was a TypeError (unhashable), nbytes 24.0 a TypeError when slicing."""
    header = {"seq": 0, "session": "s", "rank": 0, "step": 0, "name": "Torch.add.0", "record": {}, "tensors": [spec]}
    frame = P.parse_bytes(_with_crc(P.DATA, json.dumps(header).encode(), b"\0" * 24))
    P.check_data_header(frame.header)
    with pytest.raises(P.ProtocolError):
        P.tensor_views(frame)
