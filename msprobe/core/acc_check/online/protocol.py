"""The online pre-check's wire format (framework-free; nothing is unpickled).

One frame, the same on TCP and in the shared directory (one file per frame)::

    fixed part, 24 bytes, big-endian ("!4sBBHIQI"):
        magic b"MSPO" | version (1) | kind | flags (0) | header length | payload length | CRC-32 of header+payload
    header: UTF-8 JSON object
    payload: raw bytes (the tensors of a DATA frame one after the other, C order, native little-endian)

Kinds: HELLO (client -> checker: session, rank, pid), DATA (one API call), STOP (the client's totals and the
list of what it dropped), ACK (checker -> client: seq and status), BYE (checker -> client: answer to STOP).

A DATA header holds ``seq`` (per session, from 0), ``session``, ``rank``, ``step``, ``name``
(``Functional.linear.0``), ``record`` (the call in dump.json form; a tensor leaf's ``data_name`` is ``"@k"``, the
k-th tensor of the payload) and ``tensors`` (``[{"dtype": "torch.float32", "shape": [2, 3], "nbytes": 24}]``).
"""

from __future__ import annotations

import json
import struct
import zlib
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Sequence, Tuple

MAGIC = b"MSPO"
VERSION = 1
FIXED = struct.Struct("!4sBBHIQI")
HELLO, DATA, STOP, ACK, BYE = 1, 2, 3, 4, 5
KIND_NAMES = {HELLO: "HELLO", DATA: "DATA", STOP: "STOP", ACK: "ACK", BYE: "BYE"}
MAX_HEADER = 64 << 20
MAX_PAYLOAD = 16 << 30
#: bytes per element of the dtypes the checker accepts
ITEMSIZE = {"torch.float64": 8, "torch.float32": 4, "torch.float16": 2, "torch.bfloat16": 2, "torch.complex64": 8,
            "torch.complex128": 16, "torch.int64": 8, "torch.int32": 4, "torch.int16": 2, "torch.int8": 1,
            "torch.uint8": 1, "torch.bool": 1}


class ProtocolError(Exception):
    """A frame that is not ours or is damaged (the connection or file is dropped, the checker goes on)."""


@dataclass
class Frame:
    kind: int
    header: Dict[str, Any]
    payload: memoryview = field(default_factory=lambda: memoryview(b""))


def encode(kind: int, header: Dict[str, Any], buffers: Sequence[Any] = ()) -> List[Any]:
    """The frame as a list of byte buffers (the tensor buffers are not copied)."""
    head = json.dumps(header, separators=(",", ":"), allow_nan=True).encode("utf-8")
    crc = zlib.crc32(head)
    size = 0
    views = []
    for b in buffers:
        mv = memoryview(b).cast("B") if not isinstance(b, (bytes, bytearray)) else memoryview(b)
        crc = zlib.crc32(mv, crc)
        size += mv.nbytes
        views.append(mv)
    return [FIXED.pack(MAGIC, VERSION, kind, 0, len(head), size, crc & 0xFFFFFFFF), head] + views


def encode_bytes(kind: int, header: Dict[str, Any], buffers: Sequence[Any] = ()) -> bytes:
    return b"".join(bytes(p) if isinstance(p, memoryview) else p for p in encode(kind, header, buffers))


def read_frame(read_exact: Callable[[int], bytes]) -> Frame:
    """One frame from ``read_exact(n)`` (which returns exactly n bytes or raises EOFError)."""
    fixed = read_exact(FIXED.size)
    magic, version, kind, _flags, hlen, plen, crc = FIXED.unpack(fixed)
    if magic != MAGIC:
        raise ProtocolError(f"not an msprobe online frame (magic {magic!r})")
    if version != VERSION:
        raise ProtocolError(f"frame version {version}, this checker reads version {VERSION}")
    if kind not in KIND_NAMES:
        raise ProtocolError(f"unknown frame kind {kind}")
    if hlen > MAX_HEADER or plen > MAX_PAYLOAD:
        raise ProtocolError(f"frame too large (header {hlen} bytes, payload {plen} bytes)")
    head = read_exact(hlen)
    payload = read_exact(plen) if plen else b""
    if (zlib.crc32(payload, zlib.crc32(head)) & 0xFFFFFFFF) != crc:
        raise ProtocolError("checksum mismatch (damaged frame)")
    try:
        header = json.loads(head.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise ProtocolError(f"header is not JSON: {exc}")
    except RecursionError:  # nested deeper than the interpreter's recursion limit
        raise ProtocolError("header is not JSON the checker can read: nested too deep")
    if not isinstance(header, dict):
        raise ProtocolError("header is not a JSON object")
    return Frame(kind, header, memoryview(payload))


def parse_bytes(data: bytes) -> Frame:
    """A frame held whole in memory (a shared-directory file); trailing bytes are an error."""
    pos = [0]

    def read_exact(n: int) -> bytes:
        if pos[0] + n > len(data):
            raise ProtocolError(f"truncated frame ({len(data)} bytes)")
        out = data[pos[0]:pos[0] + n]
        pos[0] += n
        return out

    frame = read_frame(read_exact)
    if pos[0] != len(data):
        raise ProtocolError("bytes after the frame")
    return frame


def tensor_views(frame: Frame) -> List[Tuple[str, List[int], memoryview]]:
    """(dtype, shape, bytes) of every tensor of a DATA frame, checked against the payload."""
    specs = frame.header.get("tensors")
    if not isinstance(specs, list):
        raise ProtocolError("DATA header without a tensors list")
    out = []
    pos = 0
    total = frame.payload.nbytes
    for k, s in enumerate(specs):
        if not isinstance(s, dict):
            raise ProtocolError(f"tensor {k}: not an object")
        dtype, shape, nbytes = s.get("dtype"), s.get("shape"), s.get("nbytes")
        if not isinstance(dtype, str) or dtype not in ITEMSIZE:
            raise ProtocolError(f"tensor {k}: unsupported dtype {dtype!r}")
        if not isinstance(shape, list) or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0
                                                  for d in shape):
            raise ProtocolError(f"tensor {k}: bad shape {shape!r}")
        count = 1
        for d in shape:
            count *= d
        if (not isinstance(nbytes, int) or isinstance(nbytes, bool) or nbytes != count * ITEMSIZE[dtype]
                or pos + nbytes > total):
            raise ProtocolError(f"tensor {k}: {nbytes!r} bytes do not match {dtype} {shape} or the payload")
        out.append((dtype, shape, frame.payload[pos:pos + nbytes]))
        pos += nbytes
    if pos != total:
        raise ProtocolError(f"payload holds {total - pos} bytes more than its tensors")
    return out


def check_data_header(h: Dict[str, Any]) -> None:
    for key, kind in (("seq", int), ("rank", int), ("step", int), ("name", str), ("session", str), ("record", dict)):
        if not isinstance(h.get(key), kind) or isinstance(h.get(key), bool):
            raise ProtocolError(f"DATA header: {key!r} missing or not a {kind.__name__}")
