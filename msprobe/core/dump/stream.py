"""Read a big dump.json record by record, without the whole file's object tree in memory.

Dump writers (ours: 2-space indent; the reference: 4; any consistent ``indent=N``) put every record of
``data`` on its own line at depth 2, and JSON strings cannot hold a raw newline, so a line made of exactly
``2N`` spaces and a quote starts a record key, and the first line of exactly ``N`` spaces and ``}`` after
``"data": {`` closes ``data``.  :func:`iter_records` finds those boundaries with ``bytes.find`` on a memory
map, parses a few thousand records at a time with the same parser as :func:`msprobe.core.fileio.load_json`
(wrapped so that nesting depth and NaN handling are those of the whole file), hands them to the caller and
drops the pages it has read from this process's memory.

Anything that is not exactly that layout (a compact file, keys after ``data``, a comma missing or extra
between records, a record key seen twice, a piece that does not parse) makes it give up: the caller then
parses the whole file as before, which gives the same rows or the same error message.
"""

from __future__ import annotations

import mmap
import os
from typing import Iterator, Optional, Tuple

from msprobe.core.fileio import JsonTooDeep, _loads, data_key

#: files smaller than this are parsed whole (the saving is small, the whole-file path is simpler)
STREAM_MIN_BYTES = 4 << 20
#: records per parsed piece
CHUNK_RECORDS = 500
_WS = b" \t\r\n"


class NotStreamable(Exception):
    """The layout is not one this module can split safely: parse the whole file instead."""


def _drop(mm: mmap.mmap, upto: int) -> None:
    """Release the mapped pages below ``upto`` from this process (they stay in the page cache)."""
    upto -= upto % mmap.PAGESIZE
    if upto > 0 and hasattr(mm, "madvise") and hasattr(mmap, "MADV_DONTNEED"):
        try:
            mm.madvise(mmap.MADV_DONTNEED, 0, upto)
        except (OSError, ValueError):
            pass


def open_dump(path: str, size: int) -> Optional[Tuple[dict, "Iterator[dict]"]]:
    """``(header fields, iterator of {record: body} pieces in file order)`` or None (parse whole).

    The iterator raises :class:`NotStreamable` at the first surprise; the caller drops what it built and
    parses the whole file."""
    if size < STREAM_MIN_BYTES:
        return None
    try:
        fh = open(path, "rb")
    except OSError:
        return None
    try:
        mm = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
    except (OSError, ValueError):
        fh.close()
        return None
    try:
        layout = _layout(mm)
    except Exception:  # noqa: BLE001 - any surprise: the whole-file parser decides
        layout = None
    if layout is None:
        mm.close()
        fh.close()
        return None
    head, start, close, marker = layout
    return head, _pieces(fh, mm, start, close, marker)


#: bytes scanned at a time by :func:`_find_dropping`
SCAN_BYTES = 16 << 20


def _find_dropping(mm: mmap.mmap, sub: bytes, start: int) -> int:
    """``mm.find(sub, start)``, a window at a time, releasing the pages scanned so far: a plain find over a
    200 MB file would keep every page of it in this process's memory until the records are parsed."""
    pos, size = start, len(mm)
    while pos < size:
        end = min(pos + SCAN_BYTES + len(sub), size)
        hit = mm.find(sub, pos, end)
        if hit >= 0:
            return hit
        _drop(mm, pos + SCAN_BYTES)
        pos += SCAN_BYTES
    return -1


def _layout(mm: mmap.mmap):
    nl = mm.find(b"\n", 0, 64)
    if nl < 0 or mm[:nl].strip(_WS) != b"{":
        return None
    sec = data_key(mm, nl)
    if sec is None:
        return None
    u, i, start = sec
    pad = b" " * u
    close = _find_dropping(mm, b"\n" + pad + b"}", start)
    if close < 0:
        return None
    # nothing but the closing brace after data (keys after it: let the whole-file parser handle them)
    if mm[close + 1 + u + 1:].strip(_WS) != b"}":
        return None
    head = _loads(bytes(mm[:i]).rstrip(_WS).rstrip(b",") + b"}")
    if not isinstance(head, dict) or "data" in head:
        return None
    return head, start, close, b"\n" + pad + pad + b'"'


def _pieces(fh, mm: mmap.mmap, start: int, close: int, marker: bytes) -> Iterator[dict]:
    try:
        seen = set()
        first = mm.find(marker, start, close)
        if first < 0:
            if mm[start:close].strip(_WS):
                raise NotStreamable("no record boundary")
            return
        if mm[start:first].strip(_WS):
            raise NotStreamable("text before the first record")
        a = first
        while a < close:
            b = a
            n = 0
            while n < CHUNK_RECORDS:
                nxt = mm.find(marker, b + 1, close)
                n += 1
                if nxt < 0:
                    b = close
                    break
                b = nxt
            piece = mm[a:b].rstrip(_WS)
            last = b == close
            if last:
                if piece.endswith(b","):
                    raise NotStreamable("a comma after the last record")
            else:
                if not piece.endswith(b","):
                    raise NotStreamable("no comma between records")
                piece = piece[:-1]
            try:
                part = _loads(b'{"data":{' + piece + b"}}")
            except JsonTooDeep:
                raise NotStreamable("too deep") from None
            except ValueError:
                raise NotStreamable("a piece does not parse") from None
            del piece
            data = part.get("data") if isinstance(part, dict) else None
            if not isinstance(data, dict) or len(data) != n:
                raise NotStreamable("record count differs (a key repeated or a split inside a record)")
            for k in data:
                if k in seen:
                    raise NotStreamable("a record key repeated across pieces")
                seen.add(k)
            yield data
            del part, data
            _drop(mm, b)
            a = b
    finally:
        mm.close()
        fh.close()


def file_size(path: str) -> int:
    try:
        return os.path.getsize(path)
    except OSError:
        return 0
