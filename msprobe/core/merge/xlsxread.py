"""Safe, streaming reader for the first sheet of an ``.xlsx`` compare report.

An ``.xlsx`` file is a zip archive of XML parts.  Before anything is decompressed the zip's central
directory is checked (:func:`check_zip`): member count, declared uncompressed sizes (each and in total)
and the compression ratio of big members, so a zip bomb is refused without inflating it.  Python's
``zipfile`` never returns more than a member's declared size and checks its CRC at the end, so the
declared sizes also bound the work actually done.

The worksheet XML is then inflated in chunks and cut into rows with a regular expression (no DOM, no
per-element Python objects); only the rows the caller wants are split into cells.  Cell values follow
what spreadsheet readers return: numbers as ``float``, booleans as ``bool``, shared and inline strings as
``str`` (rich-text runs joined), absent or empty cells as ``None``.  Cells may carry ``r="B7"``
references or not (positions then count from the left, as ECMA-376 allows).
"""

from __future__ import annotations

import html
import re
import zipfile
import zlib
from typing import Callable, Dict, Iterator, List, Optional, Sequence, Tuple

import numpy as np

from msprobe.core.errors import MsprobeError

#: At most this many members in the archive (a report has about ten).
MAX_MEMBERS = 1000
#: Declared uncompressed size of all members together.
MAX_TOTAL_UNCOMPRESSED = 8 * 1024 ** 3
#: Members larger than this (uncompressed) must not compress better than MAX_RATIO:1.
RATIO_CHECK_FROM = 16 * 1024 ** 2
#: Report XML deflates about 5-30x; a deflate bomb reaches about 1000x.
MAX_RATIO = 200
#: Bytes of XML inflated per step.
READ_CHUNK = 4 * 1024 * 1024

#: Rows decoded together, a column at a time.
BATCH_ROWS = 4096

_STR_OPEN = b'<c t="inlineStr"><is><t>'
_STR_CLOSE = b"</t></is>"
_CELL_RE = re.compile(rb"<c\b([^>]*?)(?:/>|>(.*?)</c>)", re.S)
_CELL_REF_RE = re.compile(rb'<c\b[^>]*\sr="')
_REF_RE = re.compile(rb'\br="([A-Z]{1,3})')
_TYPE_RE = re.compile(rb'\bt="([a-zA-Z]+)"')
_V_RE = re.compile(rb"<v(?:\s[^>]*)?>(.*?)</v>", re.S)
_T_RE = re.compile(rb"<t(?:\s[^>]*)?>(.*?)</t>|<t(?:\s[^>]*)?/>", re.S)
_RPH_RE = re.compile(rb"<rPh\b.*?</rPh>", re.S)
_SI_RE = re.compile(rb"<si\b[^>]*?(?:/>|>(.*?)</si>)", re.S)
_SHEET_RE = re.compile(rb"<sheet\b[^>]*?\br:id=\"([^\"]+)\"|<sheet\b[^>]*?\bid=\"([^\"]+)\"")
_REL_RE = re.compile(rb"<Relationship\b([^>]*)/?>")
_ATTR_RE = re.compile(rb'(\w+)="([^"]*)"')
_STYLE_RE = re.compile(rb'\bs="(\d+)"')
_CELLXFS_RE = re.compile(rb"<cellXfs\b[^>]*>(.*?)</cellXfs>", re.S)
_XF_RE = re.compile(rb"<xf\b([^>]*)")
_NUMFMT_RE = re.compile(rb"<numFmt\b([^>]*)")
#: Excel's built-in percent formats (0%, 0.00%)
_BUILTIN_PERCENT = (9, 10)


def percent_styles(styles_xml: bytes) -> frozenset:
    """Indexes (as bytes, e.g. b"4") of the cell formats that show numbers as percentages."""
    custom = set()
    for m in _NUMFMT_RE.finditer(styles_xml):
        attrs = dict(_ATTR_RE.findall(m.group(1)))
        code = html.unescape(attrs.get(b"formatCode", b"").decode("utf-8", "replace"))
        code = re.sub(r'"[^"]*"|\\.', "", code)  # quoted text and escaped characters are literal
        if "%" in code and attrs.get(b"numFmtId", b"").isdigit():
            custom.add(int(attrs[b"numFmtId"]))
    block = _CELLXFS_RE.search(styles_xml)
    if block is None:
        return frozenset()
    out = set()
    for i, m in enumerate(_XF_RE.finditer(block.group(1))):
        fid = dict(_ATTR_RE.findall(m.group(1))).get(b"numFmtId", b"0")
        if fid.isdigit() and (int(fid) in _BUILTIN_PERCENT or int(fid) in custom):
            out.add(str(i).encode())
    return frozenset(out)


_SCALED_RE = re.compile(rb"^([-+]?(?:\d+\.?\d*|\.\d+))E(-?\d+)$")


def percent_text(fraction: float, raw: bytes = b"") -> str:
    """A percent-formatted number as the text form compare reports hold (0.125 -> "12.5%").

    msprobe writes such a cell as the report's digits scaled by ``E-2`` (``12.5E-2``, ``1.5E-7`` for
    ``1.5e-05%``): ``raw`` (the cell's ``<v>`` text) then gives the exact text back.  Other writers'
    numbers give the shortest number whose hundredth is ``fraction``."""
    m = _SCALED_RE.match(raw) if raw else None
    if m:
        mant, exp = m.group(1).decode(), int(m.group(2)) + 2
        return (mant if exp == 0 else f"{mant}e{exp:+03d}") + "%"
    x = fraction * 100
    for digits in (15, 16, 17):
        text = f"{x:.{digits}g}"
        if float(text) / 100 == fraction:
            return repr(float(text)) + "%"
    return repr(x) + "%"


def _col_index(letters: bytes) -> int:
    n = 0
    for ch in letters:
        n = n * 26 + (ch - 64)
    return n - 1


def _text(raw: bytes) -> str:
    s = raw.decode("utf-8")
    return html.unescape(s) if "&" in s else s


def _rich_text(body: bytes) -> str:
    if b"<rPh" in body:
        body = _RPH_RE.sub(b"", body)
    parts = _T_RE.findall(body)
    if len(parts) == 1:
        return _text(parts[0])
    return "".join(_text(p) for p in parts)


def check_zip(zf: zipfile.ZipFile, path: str) -> None:
    """Refuse archives whose central directory promises too much work (zip bombs)."""
    infos = zf.infolist()
    if len(infos) > MAX_MEMBERS:
        raise MsprobeError(
            f"{path} holds {len(infos)} archive members (limit {MAX_MEMBERS}); an .xlsx report has about ten: "
            "this is not a compare report (possibly a zip bomb); regenerate it with msprobe compare")
    total = 0
    for info in infos:
        total += info.file_size
        if info.file_size > RATIO_CHECK_FROM and info.file_size > MAX_RATIO * max(info.compress_size, 1):
            raise MsprobeError(
                f"{path}: member {info.filename} would inflate {info.compress_size} bytes to {info.file_size} "
                f"(ratio over {MAX_RATIO}:1), which no compare report does; refusing it as a possible zip bomb: "
                "regenerate the report with msprobe compare")
    if total > MAX_TOTAL_UNCOMPRESSED:
        raise MsprobeError(
            f"{path} would inflate to {total} bytes (limit {MAX_TOTAL_UNCOMPRESSED}); refusing it as a possible "
            "zip bomb: regenerate the report with msprobe compare, or split the run by rank or step")


def _find_first_sheet(zf: zipfile.ZipFile, names: set) -> str:
    try:
        wb = zf.read("xl/workbook.xml") if "xl/workbook.xml" in names else b""
        rels = zf.read("xl/_rels/workbook.xml.rels") if "xl/_rels/workbook.xml.rels" in names else b""
    except (zipfile.BadZipFile, zlib.error, OSError):
        wb, rels = b"", b""
    m = _SHEET_RE.search(wb)
    if m and rels:
        rid = m.group(1) or m.group(2)
        for rm in _REL_RE.finditer(rels):
            attrs = dict(_ATTR_RE.findall(rm.group(1)))
            if attrs.get(b"Id") == rid and b"Target" in attrs:
                target = attrs[b"Target"].decode("utf-8")
                target = target.lstrip("/") if target.startswith("/") else "xl/" + target
                parts: List[str] = []
                for p in target.split("/"):
                    if p == "..":
                        if parts:
                            parts.pop()
                    elif p and p != ".":
                        parts.append(p)
                target = "/".join(parts)
                if target in names:
                    return target
    if "xl/worksheets/sheet1.xml" in names:
        return "xl/worksheets/sheet1.xml"
    sheets = sorted(n for n in names if n.startswith("xl/worksheets/") and n.endswith(".xml"))
    if sheets:
        return sheets[0]
    raise MsprobeError(f"{path_hint(zf)} has no worksheet; it is not an .xlsx report: regenerate it with msprobe compare")


def path_hint(zf: zipfile.ZipFile) -> str:
    return str(getattr(zf, "filename", "") or "the .xlsx file")


class SheetReader:
    """Rows of the first worksheet of one .xlsx file.

    Use as a context manager.  :meth:`header` returns row 1 as strings; :meth:`rows` yields the cell values
    (a list, positions = columns) of later rows, optionally only of rows that pass ``keep``.
    """

    def __init__(self, path: str):
        self.path = path
        try:
            self.zf = zipfile.ZipFile(path)
        except (zipfile.BadZipFile, NotImplementedError, ValueError, EOFError):
            # (NotImplementedError: a damaged header asking for a zip version or method zipfile lacks)
            raise MsprobeError(f"{path} is not a valid .xlsx file (not a zip archive: damaged or truncated); "
                               "regenerate it with msprobe compare or move it out of the input directory") from None
        except OSError as exc:
            raise MsprobeError(f"{path} cannot be read: {exc.strerror}")
        try:
            check_zip(self.zf, path)
            names = set(self.zf.namelist())
            self.sheet = _find_first_sheet(self.zf, names)
            self.shared: Optional[List[str]] = None
            # relative errors are percent-formatted numbers since msprobe writes them so (0.125 shown as
            # 12.50%); older reports and the reference's hold the text "12.5%": both read as that text
            self.percent = percent_styles(self._read_all("xl/styles.xml")) if "xl/styles.xml" in names \
                else frozenset()
            if "xl/sharedStrings.xml" in names:
                self.shared = [_rich_text(m.group(1) or b"") for m in _SI_RE.finditer(self._read_all("xl/sharedStrings.xml"))]
        except (zipfile.BadZipFile, zlib.error, EOFError, OSError, NotImplementedError, RuntimeError, ValueError) as exc:
            self.zf.close()
            raise self._damaged(exc) from None
        except BaseException:
            self.zf.close()
            raise
        self._block_iter: Optional[Iterator[bytes]] = None
        self._pending: List[bytes] = []
        self.ncols = 0
        self._header: Optional[List[str]] = None

    # -- plumbing ------------------------------------------------------------------------------------

    def _damaged(self, exc: BaseException) -> MsprobeError:
        return MsprobeError(f"{self.path} is damaged ({type(exc).__name__}: {exc}); "
                            "regenerate it with msprobe compare or move it out of the input directory")

    def _read_all(self, member: str) -> bytes:
        try:
            return self.zf.read(member)
        except (zipfile.BadZipFile, zlib.error, EOFError, OSError, NotImplementedError, RuntimeError, ValueError) as exc:
            raise self._damaged(exc)

    def _blocks(self) -> Iterator[bytes]:
        """The sheet XML inflated chunk by chunk, cut after the last ``</row>`` of each chunk, so that every
        block holds whole rows (the first block also holds the sheet head before row 1)."""
        try:
            with self.zf.open(self.sheet) as fh:
                tail = b""
                size = 64 * 1024  # small first read: often only the header row is wanted
                while True:
                    chunk = fh.read(size)
                    size = READ_CHUNK
                    if not chunk:
                        if b"</sheetData>" not in tail and b"<sheetData/>" not in tail:
                            # the zip entry is whole (its CRC checked) but its XML stops inside the rows: a
                            # report written by something that died, never fewer rows read in silence
                            raise MsprobeError(f"{self.path}: the worksheet XML ends before </sheetData> (the "
                                               "report was cut short when it was written): regenerate it with "
                                               "msprobe compare or move it out of the input directory")
                        break
                    buf = tail + chunk
                    cut = buf.rfind(b"</row>")
                    if cut < 0:
                        tail = buf
                        continue
                    cut += 6
                    tail = buf[cut:]
                    yield buf[:cut]
        except (zipfile.BadZipFile, zlib.error, EOFError, OSError, NotImplementedError, RuntimeError, ValueError) as exc:
            raise self._damaged(exc)

    def _bodies(self, block: bytes) -> List[bytes]:
        """The body (cells XML) of every row in a block.  Rows are cut at ``</row>``; in each piece the last
        ``<row`` opens the row (an earlier one can only be an empty ``<row .../>``)."""
        out = []
        for piece in block.split(b"</row>")[:-1]:
            i = piece.rfind(b"<row")
            if i < 0:
                raise MsprobeError(f"{self.path}: worksheet XML has a '</row>' without a row; the report "
                                   "is damaged: regenerate it with msprobe compare")
            out.append(piece[piece.find(b">", i) + 1:])
        return out

    def _value(self, attrs: bytes, inner: bytes):
        """The value of one cell from its attributes and inner XML."""
        if not inner:
            return None
        t = _TYPE_RE.search(attrs) if b't="' in attrs else None
        kind = t.group(1) if t else b"n"
        if kind == b"inlineStr":
            return _rich_text(inner)
        v = _V_RE.search(inner)
        if v is None:
            return None
        value = self._typed(kind, v.group(1))
        if kind == b"n" and self.percent and value is not None and b's="' in attrs:
            m = _STYLE_RE.search(attrs)
            if m and m.group(1) in self.percent:
                return percent_text(value, v.group(1))
        return value

    def _typed(self, kind: bytes, raw: bytes):
        if kind == b"n":
            try:
                return float(raw) if raw else None
            except ValueError:
                raise MsprobeError(f"{self.path}: cell with the number {raw[:40]!r} cannot be read; "
                                   "the report is damaged: regenerate it with msprobe compare")
        if kind == b"s":
            if self.shared is None:
                raise MsprobeError(f"{self.path} refers to shared strings but has none; "
                                   "the report is damaged: regenerate it with msprobe compare")
            try:
                return self.shared[int(raw)]
            except (ValueError, IndexError):
                raise MsprobeError(f"{self.path}: shared string {raw[:20]!r} does not exist; "
                                   "the report is damaged: regenerate it with msprobe compare")
        if kind == b"b":
            return raw.strip() in (b"1", b"true")
        return _text(raw)  # str (formula result), e (error), d (date as text)

    def cells(self, body: bytes, wanted: Optional[frozenset] = None) -> list:
        """Values of one row's cells by column position (None where a cell is absent); with ``wanted``,
        only the cells at those positions are decoded (the others are left None)."""
        out: list = []
        for attrs, inner in _CELL_RE.findall(body):
            if b'r="' in attrs:
                m = _REF_RE.search(attrs)
                if m:
                    col = _col_index(m.group(1))
                    if col > len(out):
                        out.extend([None] * (col - len(out)))
            if wanted is None or len(out) in wanted:
                out.append(self._value(attrs, inner))
            else:
                out.append(None)
        return out

    def _piece_value(self, piece: bytes):
        """Value of one cell given as the text before its ``</c>`` (whatever precedes ``<c`` is ignored)."""
        start = piece.rfind(b"<c")
        gt = piece.find(b">", start)
        if start < 0 or gt < 0:
            raise MsprobeError(f"{self.path}: malformed cell XML {piece[-60:]!r}; the report is damaged: "
                               "regenerate it with msprobe compare")
        attrs = piece[start + 2:gt]
        inner = piece[gt + 1:]
        if not attrs and inner[:3] == b"<v>" and inner[-4:] == b"</v>":  # a number, as msprobe writes it
            return self._typed(b"n", inner[3:-4])
        if attrs == b' t="inlineStr"' and inner[:7] == b"<is><t>" and inner[-9:] == b"</t></is>":
            text = inner[7:-9]
            if b"<" not in text:
                return _text(text)
        return self._value(attrs, inner)

    def _decode_column(self, pieces: List[bytes]) -> list:
        """Values of one column's cells (each the text before its ``</c>``), decoded a column at a time:
        plain numbers (one numpy conversion) and plain inline strings (one UTF-8 decode of them all), which
        is nearly every cell msprobe writes; anything else cell by cell."""
        out: list = [None] * len(pieces)
        num_at = [i for i, p in enumerate(pieces) if p[:6] == b"<c><v>" and p[-4:] == b"</v>"]
        if num_at:
            raw = [pieces[i][6:-4] for i in num_at]
            try:
                floats = np.array(raw, dtype=bytes).astype(np.float64).tolist()
            except ValueError:
                floats = [self._typed(b"n", v) for v in raw]
            for i, f in zip(num_at, floats):
                out[i] = f
            if len(num_at) == len(pieces):
                return out
            rest = sorted(set(range(len(pieces))) - set(num_at))
        else:
            rest = range(len(pieces))
        pre, post = _STR_OPEN, _STR_CLOSE
        str_at = [i for i in rest if pieces[i][:24] == pre and pieces[i][-9:] == post]
        if str_at:
            joined = b"\0".join([pieces[i][24:-9] for i in str_at])
            if b"<" not in joined:  # no markup inside: plain text cells
                text = joined.decode("utf-8")
                if "&" in text:
                    text = html.unescape(text)
                for i, t in zip(str_at, text.split("\0")):
                    out[i] = t
                if len(str_at) == len(rest):
                    return out
                done = set(str_at)
                rest = [i for i in rest if i not in done]
        for i in rest:
            out[i] = self._piece_value(pieces[i])
        return out

    def _batch(self, bodies: List[bytes], wanted: List[int]) -> List[tuple]:
        """The wanted cells (a tuple in ``wanted`` order) of every row in ``bodies``."""
        ncols = self.ncols
        splits = [b.split(b"</c>") for b in bodies]
        regular = [len(sp) == ncols + 1 and b' r="' not in b and b.count(b"<c") == ncols
                   for sp, b in zip(splits, bodies)]
        if all(regular):
            cols = [self._decode_column([sp[j] for sp in splits]) for j in wanted]
            return list(zip(*cols))
        wanted_set = frozenset(wanted)
        last = max(wanted) if wanted else -1  # ``wanted`` is in the caller's column order, not sorted
        out = []
        for ok, sp, body in zip(regular, splits, bodies):
            if ok:
                out.append(tuple(self._piece_value(sp[j]) for j in wanted))
            else:
                vals = self.cells(body, wanted_set)
                vals.extend([None] * (last + 1 - len(vals)))
                out.append(tuple(vals[j] for j in wanted))
        return out

    # -- public --------------------------------------------------------------------------------------

    def header(self) -> List[str]:
        if self._header is None:
            self._block_iter = self._blocks()
            for block in self._block_iter:
                bodies = self._bodies(block)
                for k, body in enumerate(bodies):
                    vals = self.cells(body)
                    if any(v is not None for v in vals):
                        self._header = ["" if v is None else str(v) for v in vals]
                        self.ncols = len(vals)
                        self._pending = bodies[k + 1:]
                        return self._header
            raise MsprobeError(f"{self.path} has an empty first sheet (no header row); "
                               "regenerate it with msprobe compare or move it out of the input directory")
        return self._header

    def _block_rows(self, block: bytes, wanted: List[int], name_test) -> Optional[List[tuple]]:
        """Fast path for a block of rows whose cells are all present, in order and without references (as
        msprobe writes them): one split at ``</c>`` for the whole block, then every column is a stride of
        the pieces.  None when the block has any other layout."""
        ncols = self.ncols
        nrows = block.count(b"</row>")
        total = nrows * ncols
        if not total or block.count(b"<row") != nrows or block.count(b"<c ") + block.count(b"<c>") != total:
            return None
        pieces = block.split(b"</c>")
        if len(pieces) != total + 1 or _CELL_REF_RE.search(block):
            return None
        firsts = pieces[0:total:ncols]
        if not all(b"<row" in p for p in firsts):
            return None

        def column(j, sel):
            if sel is None:
                cp = firsts if j == 0 else pieces[j:total:ncols]
            else:
                cp = [pieces[k * ncols + j] for k in sel]
            if j == 0:  # the row tag precedes the first cell
                cp = [p[p.rfind(b"<c"):] for p in cp]
            return self._decode_column(cp)

        sel = None
        cols: List[Optional[list]] = [None] * len(wanted)
        if name_test is not None:
            names = column(wanted[0], None)
            sel = [k for k, n in enumerate(names) if n.__class__ is str and name_test(n)]
            if not sel:
                return []
            cols[0] = [names[k] for k in sel]
        for i, j in enumerate(wanted):
            if cols[i] is None:
                cols[i] = column(j, sel)
        return list(zip(*cols))

    def rows(self, wanted: Sequence[int], prefilter: Sequence[bytes] = (), name_test=None) -> Iterator[tuple]:
        """The cells at the ``wanted`` column positions (a tuple, in that order) of every data row.
        ``name_test``: keep only rows whose first wanted cell is a string passing it.  ``prefilter``: byte
        strings of which a row's XML must contain one (a cheap test before decoding, used where rows are
        decoded one by one and the sheet has inline strings)."""
        self.header()
        pre = tuple(prefilter) if (prefilter and self.shared is None) else ()
        wanted = list(wanted)

        def slow(bodies):
            if pre:
                bodies = [b for b in bodies if any(p in b for p in pre)]
            for i in range(0, len(bodies), BATCH_ROWS):
                for row in self._batch(bodies[i:i + BATCH_ROWS], wanted):
                    if name_test is None or (row[0].__class__ is str and name_test(row[0])):
                        yield row

        pending, self._pending = self._pending, []
        yield from slow(pending)
        for block in self._block_iter:
            got = self._block_rows(block, wanted, name_test)
            if got is None:
                yield from slow(self._bodies(block))
            else:
                yield from got

    def close(self) -> None:
        self.zf.close()

    def __enter__(self) -> "SheetReader":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def read_header(path: str) -> List[str]:
    with SheetReader(path) as r:
        return r.header()

