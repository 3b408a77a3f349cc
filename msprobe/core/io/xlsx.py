"""Fast, streaming writer for single-table ``.xlsx`` workbooks.

Only the standard library (``zipfile``, ``zlib``, ``threading``) and numpy are
used.  The writer is tuned for compare reports: tens of thousands of rows of a
few dozen columns, written in a fraction of a second.

Package layout
--------------
``[Content_Types].xml``, ``_rels/.rels``, ``docProps/core.xml``,
``docProps/app.xml``, ``xl/workbook.xml``, ``xl/_rels/workbook.xml.rels``,
``xl/styles.xml`` and one ``xl/worksheets/sheetN.xml`` per sheet.  There is no
shared-string table: strings are written as inline strings
(``<c t="inlineStr"><is><t>..</t></is></c>``).  That costs a few bytes per
cell more than a shared-string index, but needs no per-cell hash lookup and
the (mostly unique) names of a compare report would not deduplicate anyway;
deflate squeezes the repeated markup out.

Styles (``cellXfs``): 0 = default, 1 = red solid fill (``FFFF0000``),
2 = yellow solid fill (``00FFFF00``, what openpyxl writes for ``'FFFF00'``),
3 = bold font for the header row, 4/5/6 = the percent number format
``0.00%`` (built-in format 10) without fill / red / yellow.  The fill of a
styled row is put on every cell of the row; an empty value in a styled row
is written as ``<c s=".."/>``.

Percent columns (``percent_columns``): a text cell of such a column that
reads as a finite number followed by ``%`` (``"12.5%"``, how compare reports
hold relative errors) is written as the number ``12.5E-2`` (0.125: the same
digits, no rounding) with the percent format, so spreadsheet programs sort
and filter it as a number and still show ``12.50%``.  Other cells of the column (``N/A``, ``Nan``, ``inf``, numbers)
are written as usual.

Worksheet niceties: ``<dimension>``, a frozen header row, ``<cols>`` widths
and an ``<autoFilter>`` over the whole table (with the hidden
``_xlnm._FilterDatabase`` defined name Excel itself writes).

Cells
-----
* Rows always carry ``r="N"``.  Cells carry no ``r`` attribute (readers count
  cells from the left, as ECMA-376 allows), except the first cell after an
  absent one (an empty cell in an unstyled row), so a gap never shifts later
  cells to the left.
* ``float``: the shortest of the 15, 16 or 17 significant-digit decimal
  renderings that reads back as exactly the same float64 (``0.1`` stays
  ``0.1``), in plain notation for 1e-4 <= |x| < 1e16 and scientific notation
  (``1.2345E-7``) otherwise; integral floats keep a ``.0`` so readers such as
  openpyxl return them as ``float``.  The digits are computed with vectorised
  double-double arithmetic and every candidate is checked against the
  rounding interval of the input; the few values this cannot settle
  (|x| < 1e-280, |x| > 1e280, subnormals, near-ties) fall back to ``repr``.
  ``NaN`` is an empty cell, ``+inf``/``-inf`` are the text cells
  ``'inf'``/``'-inf'``.
* integers with ``|v| <= 2**53`` are numbers; larger ones are written as text
  so that no digit is lost.  ``bool`` values are boolean cells (``t="b"``).
* ``None`` is an empty cell (no ``<c>`` element unless the row is styled).
* Strings: ``&``, ``<`` and ``>`` are escaped; characters that XML 1.0 forbids
  (C0 controls other than tab, newline and carriage return, lone surrogates,
  U+FFFE, U+FFFF) are replaced by the ``_xHHHH_`` escape Excel uses, e.g.
  ``"\\x01"`` -> ``"_x0001_"`` (Excel shows the original character again;
  openpyxl shows the escape).  Literal ``_xHHHH_`` text is not escaped, so
  Excel (not openpyxl) would decode it.  A carriage return is written as the
  character reference ``&#13;`` (a literal one would be turned into a line
  feed by XML end-of-line handling).  Text with leading/trailing whitespace,
  tabs or line breaks gets ``xml:space="preserve"``.  Strings
  longer than Excel's limit of 32,767 characters are truncated to it.  A
  string starting with ``=`` is plain text, never a formula.
* Other objects in object columns (``Decimal``, dates, ...) are written as
  ``str(value)``.

Speed
-----
No per-cell Python code runs for numeric columns or for ordinary strings.
Rows are processed in chunks; every cell of a chunk column becomes one row of
a fixed-width ``uint8`` matrix padded with NUL bytes (NUL cannot occur in XML,
so it is free to use as padding), the column matrices are laid side by side
and the NUL bytes are dropped in one numpy pass, giving the chunk's XML.
Numbers are rendered four digits at a time from lookup tables of ASCII quads.
The fill attribute of styled rows is a one-byte marker expanded afterwards,
and strings longer than a few hundred bytes bypass the matrix and are
spliced in afterwards (both markers are control characters, which never
occur unescaped in cell text).  The chunk bytes are deflated
(``compresslevel=1``) by a background thread, which overlaps with building
the next chunk because zlib releases the GIL.  Memory stays bounded by the
chunk size.
"""

from __future__ import annotations

import datetime as _dt
import queue
import threading
import unicodedata
import zipfile
from fractions import Fraction
from functools import lru_cache
from itertools import repeat
from typing import Any, NamedTuple, Sequence

import numpy as np

from msprobe.core.io.columns import ChunkedColumn
from msprobe.core.progress import count_rows

__all__ = ["write_xlsx", "write_workbook", "RELATIVE_ERROR_COLUMNS"]

#: Rows per chunk of sheet XML built at once (4096 keeps numpy temporaries
#: small enough to be recycled by malloc and to stay in cache; measured best).
CHUNK_ROWS = 4096
#: Strings whose escaped UTF-8 form is longer than this many bytes skip the
#: fixed-width matrix (one very long message must not widen a whole chunk).
LONG_CELL_BYTES = 256
#: Excel's maximum number of characters in a cell.
EXCEL_MAX_CHARS = 32767
#: Excel's maximum number of rows in a sheet (header included).
EXCEL_MAX_ROWS = 1_048_576
#: deflate level of the zip members (1 is about 2-3x faster than 6 for
#: ~30% larger files on report data).
COMPRESS_LEVEL = 1

#: The relative-error columns of compare reports, held as "12.5%" text in memory (the reference's form)
#: and written as percent-formatted numbers (see ``percent_columns``).
RELATIVE_ERROR_COLUMNS = ("MaxRelativeErr", "MinRelativeErr", "MeanRelativeErr", "NormRelativeErr")
#: Excel's built-in number format 10, ``0.00%``.
PERCENT_FORMAT_ID = 10
#: Sheet name of a single-sheet workbook: the reference's (pandas) name, also in 26.x ``--xlsx`` reports.
DEFAULT_SHEET_NAME = "Sheet1"

_U8 = np.uint8
_MAX_EXACT_INT = 2**53
_FORBIDDEN_SHEET_CHARS = set('[]:*?/\\')

# ----------------------------------------------------------------------------
# small byte-matrix helpers
# ----------------------------------------------------------------------------


def _table(items: Sequence[bytes]) -> np.ndarray:
    """(len(items), max_len) uint8 matrix, rows NUL padded."""
    width = max(1, max(map(len, items)))
    return np.frombuffer(b"".join(s.ljust(width, b"\0") for s in items), _U8).reshape(len(items), width)


def _const(s: bytes) -> np.ndarray:
    return np.frombuffer(s, _U8)


_POW10 = np.array([10**i for i in range(20)], dtype=np.uint64)
_U10K = np.uint64(10000)


def _quad_table(fmt) -> np.ndarray:
    """10,000 ASCII quads as uint32 (one per value 0..9999)."""
    raw = np.array([[ord(c) for c in fmt(f"{i:04d}")] for i in range(10000)], dtype=_U8)
    return raw.view(np.uint32).ravel()


# Index i in [0, 10000): the four digits of i.  Index 10000 + i: the digits of
# i with the leading zeros (_QUAD_LEAD, for the most significant quad of an
# integer) or the trailing zeros (_QUAD_TRAIL, for the last non-zero quad of a
# fraction) replaced by NUL.
_QUAD_LEAD = np.concatenate([_quad_table(lambda d: d), _quad_table(lambda d: d.lstrip("0").rjust(4, "\0"))])
_QUAD_TRAIL = np.concatenate([_quad_table(lambda d: d), _quad_table(lambda d: d.rstrip("0").ljust(4, "\0"))])


def _render_int(v: np.ndarray, out: np.ndarray) -> None:
    """Right-aligned digits of the uint64 array ``v`` into ``out`` (n, quads)
    of uint32 quads; leading zeros are NUL, zero is rendered as ``0``."""
    j = out.shape[1]
    zero = v == 0
    while j > 0:
        j -= 1
        hi = v // _U10K
        out[:, j] = _QUAD_LEAD[(v - hi * _U10K) + _U10K * (hi == 0)]
        v = hi
        if not v.any():
            out[:, :j] = 0
            break
    if zero.any():
        out[zero, -1] = 48 << 24  # NUL NUL NUL "0"


def _render_frac(v: np.ndarray, out: np.ndarray) -> None:
    """``'.'`` and the 19 left-aligned fraction digits ``v`` (< 10**19) into
    ``out`` (n, 5) uint32 quads; trailing zeros are NUL, ``0`` gives ``.0``."""
    seen = np.zeros(len(v), bool)
    for j in range(4, -1, -1):
        hi = v // _U10K
        r = v - hi * _U10K
        out[:, j] = _QUAD_TRAIL[r + _U10K * ~seen]
        seen |= r != 0
        v = hi
    # the first of the 20 digits is always 0: it becomes the decimal point
    out[:, 0] = np.where(seen, (out[:, 0] & 0xFFFFFF00) | 46, 46 | (48 << 8))


def _num_digits(v: np.ndarray) -> np.ndarray:
    """Number of decimal digits of the uint64 array ``v`` (at least 1)."""
    return np.maximum(np.searchsorted(_POW10, v, side="right"), 1)


def _quads(s: bytes, nquads: int) -> np.ndarray:
    return np.frombuffer(s.ljust(4 * nquads, b"\0"), np.uint32)


def _col_letters(index: int) -> str:
    """0 -> 'A', 25 -> 'Z', 26 -> 'AA'."""
    letters = ""
    index += 1
    while index:
        index, rem = divmod(index - 1, 26)
        letters = chr(65 + rem) + letters
    return letters


# ----------------------------------------------------------------------------
# text escaping
# ----------------------------------------------------------------------------

_ILLEGAL_CODEPOINTS = frozenset(
    [c for c in range(32) if c not in (9, 10, 13)] + list(range(0xD800, 0xE000)) + [0xFFFE, 0xFFFF])


def _escape_text(s: str) -> str:
    """Escape one string for XML text content (see module docstring)."""
    if len(s) > EXCEL_MAX_CHARS:
        s = s[:EXCEL_MAX_CHARS]
    if "&" in s:
        s = s.replace("&", "&amp;")
    if "<" in s:
        s = s.replace("<", "&lt;")
    if ">" in s:
        s = s.replace(">", "&gt;")
    if "\r" in s:  # a literal CR would be normalised away by XML parsers
        s = s.replace("\r", "&#13;")
    if not s.isascii() or not s.isprintable():
        bad = _ILLEGAL_CODEPOINTS
        if any(ord(ch) in bad for ch in s):
            s = "".join(f"_x{ord(ch):04X}_" if ord(ch) in bad else ch for ch in s)
    return s


def _needs_preserve(s: str) -> bool:
    return bool(s) and (s[0] in " \t\n\r" or s[-1] in " \t\n\r" or "\t" in s or "\n" in s or "\r" in s)


# ----------------------------------------------------------------------------
# cell bodies
# ----------------------------------------------------------------------------
#
# A "body" is what follows ``<c`` (plus the optional r= and s= attributes) up to
# and including the closing tag, e.g. ``><v>1.5</v></c>`` or
# `` t="inlineStr"><is><t>abc</t></is></c>``; an empty cell of a styled row has
# the body ``/>``.


class _Cells(NamedTuple):
    body: np.ndarray  # (n, w) uint8, NUL padded; all NUL where absent
    present: np.ndarray  # (n,) bool: a <c> element is written
    longs: list  # [(row, body bytes)] of cells that bypass the matrix


_LONG_MARK = 2  # byte standing in for a long cell (control chars in text are escaped)

_EMPTY_BODY = b"/>"
_STR_OPEN = (b' t="inlineStr"><is><t>', b' t="inlineStr"><is><t xml:space="preserve">')
_STR_OPEN_TABLE = _table(_STR_OPEN)
_STR_CLOSE = b"</t></is></c>"
_BOOL_TABLE = _table([b' t="b"><v>0</v></c>', b' t="b"><v>1</v></c>'])
_INF_TABLE = _table([_STR_OPEN[0] + b"inf" + _STR_CLOSE, _STR_OPEN[0] + b"-inf" + _STR_CLOSE])
_V_OPEN = b"><v>"
_V_CLOSE = b"</v></c>"
_Q_V_OPEN = _quads(_V_OPEN, 1)[0]
_Q_V_CLOSE = _quads(_V_CLOSE, 2)

# plain notation for 10**_FIX_EMIN <= |x| < 10**(_FIX_EMAX + 1), like repr()
_FIX_EMIN, _FIX_EMAX = -4, 15
_FRAC_DIGITS = 19
_EXP_MIN, _EXP_MAX = -400, 400
_Q_SUFFIX = np.stack([_quads(b"E%d" % e + _V_CLOSE, 4) for e in range(_EXP_MIN, _EXP_MAX + 1)]
                     + [_quads(_V_CLOSE, 4)])
_PLAIN_SUFFIX = len(_Q_SUFFIX) - 1
_REPR_WIDTH = 32
# Number bodies are laid out in uint32 quads.  Floats: "><v>" | sign (only if
# the batch has negatives) | integer digits (as many quads as the batch needs)
# | "." + 19 fraction digits | "</v></c>", or exponent + "</v></c>" if the
# batch has values in scientific notation.  Integers: "><v>" | sign |
# 16 digits | "</v></c>".


def _empty_cells(n: int, styled: np.ndarray | None) -> _Cells:
    body = np.zeros((n, len(_EMPTY_BODY)), _U8)
    if styled is None:
        return _Cells(body, np.zeros(n, bool), [])
    body[styled] = _const(_EMPTY_BODY)
    return _Cells(body, styled.copy(), [])


def _merge(n: int, parts: list[tuple[np.ndarray, _Cells]]) -> _Cells:
    """Combine cells built for disjoint row subsets ``idx`` into one column."""
    width = max(c.body.shape[1] for _, c in parts)
    body = np.zeros((n, width), _U8)
    present = np.zeros(n, bool)
    longs: list = []
    for idx, cells in parts:
        body[idx, :cells.body.shape[1]] = cells.body
        present[idx] = cells.present
        longs.extend((int(idx[i]), b) for i, b in cells.longs)
    return _Cells(body, present, longs)


# --- numbers -----------------------------------------------------------------

_SPLIT = 134217729.0  # 2**27 + 1, Dekker splitter
_K_MIN, _K_MAX = -280, 300  # range of the power-of-ten table (covers |x| in [_FAST_MIN, _FAST_MAX])
_FAST_MIN, _FAST_MAX = 1e-280, 1e280  # |x| range handled by the vectorised path


@lru_cache(maxsize=1)
def _pow10_dd() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """10**k as double-double (hi + lo, exact to ~2**-106) and hi's Dekker split."""
    hi = np.empty(_K_MAX - _K_MIN + 1)
    lo = np.empty_like(hi)
    for i, k in enumerate(range(_K_MIN, _K_MAX + 1)):
        exact = Fraction(10**k) if k >= 0 else Fraction(1, 10**-k)
        hi[i] = float(exact)
        lo[i] = float(exact - Fraction(hi[i]))
    c = _SPLIT * hi
    hi_hi = c - (c - hi)
    return hi, lo, hi_hi, hi - hi_hi


def _shortest_decimal(ax: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Decimal significand/exponent of non-negative finite floats.

    Returns ``(D, q, ok)``: wherever ``ok``, ``float(D * 10**q)`` is exactly the
    input, ``D`` (uint64) has no trailing zeros and is the shortest of the 15,
    16 and 17 significant-digit correctly rounded candidates that reads back
    exactly.  Zero gives ``D = 0, q = 0`` with ``ok`` False.
    """
    n = len(ax)
    D = np.zeros(n, np.int64)
    q = np.zeros(n, np.int64)
    ok = np.zeros(n, bool)
    inside = (ax >= _FAST_MIN) & (ax <= _FAST_MAX)
    full = bool(inside.all())
    todo = None if full else np.flatnonzero(inside)
    a = ax if full else ax[todo]
    if not len(a):
        return D.view(np.uint64), q, ok
    hi, lo, hi_hi, hi_lo = _pow10_dd()
    with np.errstate(all="ignore"):
        # y = a * 10**k (about 17 significant digits) as double-double ph + pl
        k = 16 - np.floor(np.log10(a)).astype(np.int64)
        ki = k - _K_MIN
        bh = hi[ki]
        ph = a * bh
        c = _SPLIT * a
        ah = c - (c - a)
        al = a - ah
        bhh = hi_hi[ki]
        bhl = hi_lo[ki]
        pl = (((ah * bhh - ph) + ah * bhl + al * bhh) + al * bhl) + a * lo[ki]
        fl = np.floor(ph)
        frac = (ph - fl) + pl
        rnd = np.rint(frac)
        r17 = frac - rnd  # y - D17, accurate to ~1e-13
        d17 = fl.astype(np.int64) + rnd.astype(np.int64)
        # half the gap to the neighbouring floats, scaled by 10**k; the gap
        # below a power of two is half the gap above it
        h_up = 0.5 * np.spacing(a) * bh
        pow2 = (a.view(np.uint64) & np.uint64((1 << 52) - 1)) == 0
        h_dn = np.where(pow2, 0.5 * h_up, h_up)
        # a candidate reads back as ``a`` iff |y - candidate| < half a gap;
        # the margins make near-ties fail (they then go to repr)
        good = np.abs(r17) < np.where(r17 > 0, h_dn, h_up) * (1.0 - 1e-9) - 1e-9
        # 16 and 15 digits, derived exactly from D17 and its residual
        b10 = d17 // 10
        b100 = b10 // 10
        t16 = ((d17 - b10 * 10) + r17) * 0.1
        t15 = ((d17 - b100 * 100) + r17) * 0.01
        u16 = np.rint(t16)
        u15 = np.rint(t15)
        t16 -= u16
        t15 -= u15
        g16 = np.abs(t16) < np.where(t16 > 0, h_dn, h_up) * ((1.0 - 1e-9) / 10) - 1e-9
        g15 = np.abs(t15) < np.where(t15 > 0, h_dn, h_up) * ((1.0 - 1e-9) / 100) - 1e-9
        dc = np.where(g15, b100 + u15.astype(np.int64), np.where(g16, b10 + u16.astype(np.int64), d17))
        qc = np.where(g15, 2, g16.view(np.int8)) - k
        good |= g16 | g15
    if full:
        D, q, ok = dc, qc, good
    else:
        D[todo] = dc
        q[todo] = qc
        ok[todo] = good
    # strip trailing zeros (at most 31, binary decomposition)
    t = np.flatnonzero((D % 10 == 0) & (D != 0))
    if len(t):
        dt, qt = D[t], q[t]
        for s in (16, 8, 4, 2, 1):
            p = 10**s
            m = dt % p == 0
            if m.any():
                dt[m] //= p
                qt[m] += s
        D[t] = dt
        q[t] = qt
    return D.view(np.uint64), q, ok


def _decimal_body(D: np.ndarray, q: np.ndarray, neg: np.ndarray, as_float: bool) -> np.ndarray:
    """Bodies ``><v>TEXT</v></c>`` for the values ``(-1)**neg * D * 10**q``
    (``D`` uint64; for ``as_float=False`` ``q`` is ignored and ``D < 1e16``)."""
    n = len(D)
    sign = neg.astype(np.uint32) * 45
    if not as_float:
        body = np.empty((n, 8), np.uint32)
        body[:, 0] = _Q_V_OPEN
        body[:, 1] = sign
        _render_int(D, body[:, 2:6])
        body[:, 6:8] = _Q_V_CLOSE
        return body.view(_U8)
    nd = _num_digits(D)
    E = q + nd - 1  # scientific exponent
    plain = (E >= _FIX_EMIN) & (E <= _FIX_EMAX) & (q >= -_FRAC_DIGITS)
    fl = np.where(plain, np.maximum(-q, 0), nd - 1)  # number of fraction digits
    p10 = _POW10[fl]
    ipart = D // p10
    fpart = D - ipart * p10
    lift = plain & (q > 0)
    if lift.any():
        ipart[lift] *= _POW10[q[lift]]
    # only as many quads as this batch needs (NUL padding costs time later)
    has_sign = bool(neg.any())
    iq = (int(_num_digits(ipart.max(keepdims=True))[0]) + 3) // 4 if n else 1
    sci = np.flatnonzero(~plain)
    sq = 4 if len(sci) else 2
    c_int = 1 + has_sign
    c_frac = c_int + iq
    c_suf = c_frac + 5
    body = np.empty((n, c_suf + sq), np.uint32)
    body[:, 0] = _Q_V_OPEN
    if has_sign:
        body[:, 1] = sign
    _render_int(ipart, body[:, c_int:c_frac])
    _render_frac(fpart * _POW10[_FRAC_DIGITS - fl], body[:, c_frac:c_suf])
    body[:, c_suf:] = 0
    body[:, c_suf:c_suf + 2] = _Q_V_CLOSE
    if len(sci):
        body[sci, c_suf:c_suf + 4] = _Q_SUFFIX[np.clip(E[sci], _EXP_MIN, _EXP_MAX) - _EXP_MIN]
    return body.view(_U8)


def _repr_body(values: list[float], width: int) -> np.ndarray:
    text = np.array([repr(v).encode() for v in values], dtype=f"S{_REPR_WIDTH}").view(_U8)
    body = np.zeros((len(values), width), _U8)
    body[:, :4] = _const(_V_OPEN)
    body[:, 4:4 + _REPR_WIDTH] = text.reshape(len(values), _REPR_WIDTH)
    # </v></c> after the text: the NULs in between are dropped later
    body[:, 4 + _REPR_WIDTH:4 + _REPR_WIDTH + len(_V_CLOSE)] = _const(_V_CLOSE)
    return body


def _finite_float_body(x: np.ndarray) -> np.ndarray:
    neg = np.signbit(x)
    ax = np.abs(x)
    D, q, ok = _shortest_decimal(ax)
    body = _decimal_body(D, q, neg, as_float=True)
    bad = np.flatnonzero(~(ok | (ax == 0)))
    if len(bad):
        width = 4 + _REPR_WIDTH + len(_V_CLOSE)
        if body.shape[1] < width:
            body = np.concatenate([body, np.zeros((len(body), width - body.shape[1]), _U8)], axis=1)
        body[bad] = _repr_body(x[bad].tolist(), body.shape[1])
    return body


def _float_cells(x: np.ndarray, styled: np.ndarray | None) -> _Cells:
    n = len(x)
    finite = np.isfinite(x)
    if finite.all():
        return _Cells(_finite_float_body(x), np.ones(n, bool), [])
    parts = []
    fi = np.flatnonzero(finite)
    if len(fi):
        parts.append((fi, _Cells(_finite_float_body(x[fi]), np.ones(len(fi), bool), [])))
    nan = np.flatnonzero(np.isnan(x))
    if len(nan):
        parts.append((nan, _empty_cells(len(nan), None if styled is None else styled[nan])))
    inf = np.flatnonzero(np.isinf(x))
    if len(inf):
        parts.append((inf, _Cells(_INF_TABLE[(x[inf] < 0).astype(np.intp)], np.ones(len(inf), bool), [])))
    return _merge(n, parts)


def _int_cells(v: np.ndarray, styled: np.ndarray | None) -> _Cells:
    n = len(v)
    if v.dtype.kind == "u":
        v = v.astype(np.uint64)
        big = v > np.uint64(_MAX_EXACT_INT)
        neg = np.zeros(n, bool)
        mag = v
    else:
        v = v.astype(np.int64)
        big = (v > _MAX_EXACT_INT) | (v < -_MAX_EXACT_INT)
        neg = v < 0
        mag = np.abs(np.where(big, 0, v)).astype(np.uint64)
    if not big.any():
        return _Cells(_decimal_body(mag, np.zeros(n, np.int64), neg, as_float=False), np.ones(n, bool), [])
    small = np.flatnonzero(~big)
    bigi = np.flatnonzero(big)
    parts = [(bigi, _str_cells([str(i) for i in v[bigi].tolist()]))]
    if len(small):
        parts.append((small, _Cells(_decimal_body(mag[small], np.zeros(len(small), np.int64), neg[small], False),
                                    np.ones(len(small), bool), [])))
    return _merge(n, parts)


def _bool_cells(b: np.ndarray) -> _Cells:
    return _Cells(_BOOL_TABLE[b.astype(np.intp)], np.ones(len(b), bool), [])


# --- strings -----------------------------------------------------------------


_WS = np.zeros(256, bool)
_WS[[9, 10, 13, 32]] = True
_ALLOWED_CTRL = np.zeros(32, bool)
_ALLOWED_CTRL[[0, 9, 10, 13]] = True


def _escaped_utf8(strs: list[str]) -> tuple[bytes, bool]:
    """UTF-8 of the escaped strings joined with NUL, and whether no string
    needed escaping (then ``strs`` itself is the escaped text)."""
    n = len(strs)
    joined = "\x00".join(strs)
    clean = True
    if "&" in joined:
        joined = joined.replace("&", "&amp;")
        clean = False
    if "<" in joined:
        joined = joined.replace("<", "&lt;")
        clean = False
    if ">" in joined:
        joined = joined.replace(">", "&gt;")
        clean = False
    if "\r" in joined:
        joined = joined.replace("\r", "&#13;")
        clean = False
    try:
        data = joined.encode("utf-8")
    except UnicodeEncodeError:  # lone surrogates
        data = None
    if data is not None and (data.isascii() or ("\ufffe" not in joined and "\uffff" not in joined)):
        arr = np.frombuffer(data, _U8)
        low = arr < 32
        nlow = int(np.count_nonzero(low))
        if nlow == n - 1 or (_ALLOWED_CTRL[arr[low]].all() and data.count(b"\0") == n - 1):
            return data, clean
    return "\x00".join([_escape_text(s) for s in strs]).encode("utf-8"), False


def _str_cells(strs: list[str]) -> _Cells:
    """Inline-string cells for a non-empty list of ``str``."""
    n = len(strs)
    data, clean = _escaped_utf8(strs)
    arr = np.frombuffer(data, _U8)
    starts = np.empty(n, np.int64)
    starts[0] = 0
    starts[1:] = np.flatnonzero(arr == 0) + 1
    ends = np.empty(n, np.int64)
    ends[:-1] = starts[1:] - 1
    ends[-1] = len(arr)
    lens = ends - starts
    longs: list = []
    is_long = lens > LONG_CELL_BYTES
    if is_long.any():
        if clean and (lens > EXCEL_MAX_CHARS).any():  # may need truncation
            return _str_cells([_escape_text(s) for s in strs])
        for i in np.flatnonzero(is_long).tolist():
            text = data[starts[i]:ends[i]]
            longs.append((i, _STR_OPEN[_needs_preserve(text.decode("utf-8"))] + text + _STR_CLOSE))
        lens = np.where(is_long, 0, lens)
        clean = False
    width = max(int(lens.max()), 1)
    if clean and data.isascii():
        text = np.array(strs, dtype=f"S{width}").view(_U8).reshape(n, width)
    else:
        padded = np.zeros(len(arr) + width, _U8)
        padded[:len(arr)] = arr
        text = np.lib.stride_tricks.sliding_window_view(padded, width)[starts]
        text *= np.arange(width) < lens[:, None]
    # xml:space="preserve" for leading/trailing whitespace, tabs and newlines
    pres = None
    has_ctrl_ws = b"\t" in data or b"\n" in data
    if b"&#13;" in data:  # carriage returns (written as character references)
        pres = np.fromiter(("\r" in s for s in strs), bool, n)
    if has_ctrl_ws or b" " in data:
        edge = (lens > 0) & (_WS[text[:, 0]] | _WS[text[np.arange(n), np.maximum(lens - 1, 0)]])
        pres = edge if pres is None else pres | edge
        if has_ctrl_ws:
            pres |= ((text == 9) | (text == 10)).any(axis=1)
    if pres is not None and not pres.any():
        pres = None
    opening = _const(_STR_OPEN[0]) if pres is None else _STR_OPEN_TABLE[pres.astype(np.intp)]
    p = opening.shape[-1]
    body = np.empty((n, p + width + len(_STR_CLOSE)), _U8)
    body[:, :p] = opening
    body[:, p:p + width] = text
    body[:, p + width:] = _const(_STR_CLOSE)  # the NULs between text and tag are dropped
    if longs:
        li = np.fromiter((i for i, _ in longs), np.intp, len(longs))
        body[li] = 0
        body[li, 0] = _LONG_MARK
    return _Cells(body, np.ones(n, bool), longs)


# --- object columns ----------------------------------------------------------

_NONE, _STR, _FLOAT, _INT, _BOOL, _OTHER = range(6)
_TYPE_CODES: dict[type, int] = {type(None): _NONE, str: _STR, np.str_: _STR, float: _FLOAT, int: _INT,
                                bool: _BOOL, np.bool_: _BOOL}
for _t in (np.float16, np.float32, np.float64, np.longdouble):
    _TYPE_CODES[_t] = _FLOAT
for _t in (np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64):
    _TYPE_CODES[_t] = _INT


def _int_list_cells(values: list, styled: np.ndarray | None) -> _Cells:
    if values and -_MAX_EXACT_INT <= min(values) and max(values) <= _MAX_EXACT_INT:
        return _int_cells(np.array(values, dtype=np.int64), styled)
    # arbitrary precision ints: exact ones as numbers, the rest as text
    n = len(values)
    small = np.fromiter((-_MAX_EXACT_INT <= v <= _MAX_EXACT_INT for v in values), bool, n)
    parts = []
    si = np.flatnonzero(small)
    bi = np.flatnonzero(~small)
    if len(si):
        parts.append((si, _int_cells(np.array([values[i] for i in si.tolist()], np.int64), None)))
    parts.append((bi, _str_cells([str(values[i]) for i in bi.tolist()])))
    return _merge(n, parts)


def _object_cells(values: list, styled: np.ndarray | None) -> _Cells:
    n = len(values)
    codes = np.fromiter(map(_TYPE_CODES.get, map(type, values), repeat(_OTHER)), np.int8, n)
    kinds = np.unique(codes) if n else np.array([], np.int8)
    if len(kinds) == 1:
        return _typed_cells(int(kinds[0]), values, styled)
    obj = np.fromiter(values, dtype=object, count=n)  # never broadcasts sequence values
    parts = []
    for kind in kinds.tolist():
        idx = np.flatnonzero(codes == kind)
        sub = obj[idx].tolist()
        parts.append((idx, _typed_cells(kind, sub, None if styled is None else styled[idx])))
    return _merge(n, parts)


def _typed_cells(kind: int, values: list, styled: np.ndarray | None) -> _Cells:
    if kind == _STR:
        return _str_cells(values)
    if kind == _FLOAT:
        return _float_cells(np.array(values, dtype=np.float64), styled)
    if kind == _INT:
        return _int_list_cells(values, styled)
    if kind == _BOOL:
        return _bool_cells(np.array(values, dtype=bool))
    if kind == _NONE:
        return _empty_cells(len(values), styled)
    return _str_cells([str(v) for v in values])


def _column_cells(col: Any, styled: np.ndarray | None) -> _Cells:
    if isinstance(col, np.ndarray):
        kind = col.dtype.kind
        if kind == "f":
            return _float_cells(col.astype(np.float64, copy=False), styled)
        if kind == "b":
            return _bool_cells(col)
        if kind in "iu":
            return _int_cells(col, styled)
        if kind == "O":
            return _object_cells(col.tolist(), styled)
        if kind == "S":
            return _str_cells([b.decode("utf-8", "replace") for b in col.tolist()])
        return _str_cells([str(v) for v in col.tolist()])
    return _object_cells(list(col), styled)


# --- percent columns ---------------------------------------------------------


def _percent_cells(col: Any, styled: np.ndarray | None) -> tuple[_Cells, np.ndarray | None]:
    """Cells of a percent column and the mask of its percent cells (None when there is none).

    A text cell ``"<finite number>%"`` becomes a number cell holding the same decimal digits scaled by
    ``E-2`` (``"12.5%"`` -> ``<v>12.5E-2</v>``, i.e. 0.125, a valid xsd:double): no float rounding, and
    a reader that knows the percent style gets the exact text back (``msprobe.core.merge.xlsxread``)."""
    if isinstance(col, np.ndarray) and col.dtype.kind not in "OU":
        return _column_cells(col, styled), None
    values = col.tolist() if isinstance(col, np.ndarray) else list(col)
    n = len(values)
    at = np.flatnonzero(np.fromiter(map(str.__instancecheck__, values), bool, n)) if n else np.zeros(0, np.intp)
    pct = None
    if len(at):
        text = np.array([values[i] for i in at.tolist()], dtype=str)
        ends = np.char.endswith(text, "%") & (np.char.count(text, "%") == 1)
        if ends.any():
            at, text = at[ends], np.char.rstrip(text[ends], "%")
            # plain decimal or scientific numbers only (float() would also take "1_0", " 1", "infinity")
            ok = (np.char.strip(text, "0123456789.-+eE") == "") & (np.char.str_len(text) > 0)
            nums = np.full(len(text), np.nan)
            try:
                nums[ok] = text[ok].astype(np.float64)
            except ValueError:  # e.g. "1-2": one by one
                for k in np.flatnonzero(ok).tolist():
                    try:
                        nums[k] = float(text[k])
                    except ValueError:
                        pass
            ok &= np.isfinite(nums)
            if ok.any():
                at, text = at[ok], text[ok]
                pct = np.zeros(n, bool)
                pct[at] = True
    if pct is None:
        return _column_cells(col, styled), None
    low = np.char.lower(text)
    sci = np.char.find(low, "e") >= 0
    digits = np.char.add(text, "E-2")
    if sci.any():
        parts = np.char.partition(low[sci], "e")
        exps = parts[:, 2].astype(np.int64) - 2
        digits[sci] = np.char.add(np.char.add(parts[:, 0], "E"), exps.astype(str))
    body_s = np.char.add(np.char.add(_V_OPEN.decode(), digits), _V_CLOSE.decode()).astype("S")
    body = body_s.view(_U8).reshape(len(body_s), body_s.dtype.itemsize)
    parts_list = [(at, _Cells(body, np.ones(len(at), bool), []))]
    rest = np.flatnonzero(~pct)
    if len(rest):
        sub = np.fromiter(values, dtype=object, count=n)[rest]
        parts_list.append((rest, _column_cells(sub, None if styled is None else styled[rest])))
    return _merge(n, parts_list), pct


# ----------------------------------------------------------------------------
# sheet XML
# ----------------------------------------------------------------------------

# Cell start by row style; the fill attribute is a one-byte marker expanded
# after the NUL bytes are dropped (keeps the matrix narrow); last: absent cell.
_STYLE_MARKS = {1: (b"\x03", b' s="1"'), 2: (b"\x04", b' s="2"')}
# percent cells (style 4, 5, 6 = percent without fill, red, yellow): lead index 4 + row style
_PERCENT_MARKS = ((b"\x05", b' s="4"'), (b"\x06", b' s="5"'), (b"\x07", b' s="6"'))
_LEAD = _table([b"<c", b"<c\x03", b"<c\x04", b"", b"<c\x05", b"<c\x06", b"<c\x07"])
_ABSENT = 3
_PERCENT_LEAD = 4
_ROW_DIGITS = 8  # two quads; Excel rows <= 1,048,576
_ROW_OPEN = b'<row r="'
_ROW_CLOSE = b"</row>"


class _ChunkBuilder:
    def __init__(self, ncols: int):
        self.letters = [_col_letters(j).encode() for j in range(ncols)]

    def build(self, columns: list, styles: np.ndarray | None, first_row: int, percent=frozenset()) -> bytes:
        """XML of the rows ``first_row ..`` (1-based Excel row numbers); ``percent``: positions of the
        percent columns."""
        n = len(styles) if styles is not None else len(columns[0]) if columns else 0
        if n == 0:
            return b""
        styled = None if styles is None or not styles.any() else styles != 0
        rownum = np.empty((n, 2), np.uint32)
        _render_int(np.arange(first_row, first_row + n, dtype=np.uint64), rownum)
        rownum = rownum.view(_U8)
        pieces = [np.broadcast_to(_const(_ROW_OPEN), (n, len(_ROW_OPEN))), rownum,
                  np.broadcast_to(_const(b'">'), (n, 2))]
        # "<c" plus the fill attribute of every row; absent cells get NULs
        if styled is None:
            lead_all = np.broadcast_to(_LEAD[0], (n, _LEAD.shape[1]))
            lead_codes = np.zeros(n, np.intp)
        else:
            lead_codes = styles.astype(np.intp)
            lead_all = _LEAD[lead_codes]
        longs: list = []
        prev_present = None
        used_percent = False
        for j, col in enumerate(columns):
            pct = None
            if j in percent:
                cells, pct = _percent_cells(col, styled)
            else:
                cells = _column_cells(col, styled)
            present = cells.present
            if pct is not None:
                used_percent = True
                codes = np.where(pct, lead_codes + _PERCENT_LEAD, lead_codes)
                pieces.append(_LEAD[np.where(present, codes, _ABSENT)])
            elif present.all():
                pieces.append(lead_all)
            else:
                pieces.append(_LEAD[np.where(present, lead_codes, _ABSENT)])
            if prev_present is not None:
                need_r = present & ~prev_present
                if need_r.any():
                    letters = self.letters[j]
                    ref = np.zeros((n, 4 + len(letters) + _ROW_DIGITS + 1), _U8)
                    ref[need_r, :4 + len(letters)] = _const(b' r="' + letters)
                    ref[need_r, 4 + len(letters):-1] = rownum[need_r]
                    ref[need_r, -1] = 34  # '"'
                    pieces.append(ref)
            pieces.append(cells.body)
            if cells.longs:
                longs.extend((i, j, b) for i, b in cells.longs)
            prev_present = present
        pieces.append(np.broadcast_to(_const(_ROW_CLOSE), (n, len(_ROW_CLOSE))))
        flat = np.concatenate(pieces, axis=1).reshape(-1)
        data = flat[flat != 0].tobytes()
        if styled is not None:
            for code, (mark, attr) in _STYLE_MARKS.items():
                if (styles == code).any():
                    data = data.replace(mark, attr)
        if used_percent:
            for mark, attr in _PERCENT_MARKS:
                if mark in data:
                    data = data.replace(mark, attr)
        if longs:
            longs.sort(key=lambda t: (t[0], t[1]))
            parts = data.split(bytes([_LONG_MARK]))
            out = [parts[0]]
            for (_, _, b), p in zip(longs, parts[1:]):
                out.append(b)
                out.append(p)
            data = b"".join(out)
        return data


def _attr_escape(s: str) -> str:
    return _escape_text(s).replace('"', "&quot;")


def _header_row(header: Sequence[str]) -> bytes:
    cells = []
    for h in header:
        t = _escape_text(str(h))
        cells.append('<c s="3" t="inlineStr"><is><t%s>%s</t></is></c>'
                      % (' xml:space="preserve"' if _needs_preserve(t) else "", t))
    return ('<row r="1">' + "".join(cells) + "</row>").encode("utf-8")


def _display_width(s: str) -> int:
    return sum(2 if unicodedata.east_asian_width(ch) in "WF" else 1 for ch in s)


def _default_widths(header: Sequence[str], columns: list, nrows: int) -> list[float]:
    widths = []
    sample = min(nrows, 200)
    for h, col in zip(header, columns):
        w = _display_width(str(h)) * 1.1 + 2.5
        head = col[:sample]
        if isinstance(head, np.ndarray) and head.dtype.kind in "fiub":
            w = max(w, 10.0)
        else:
            vals = head.tolist() if isinstance(head, np.ndarray) else list(head)
            lens = [len(v) if isinstance(v, str) else 10 for v in vals if v is not None]
            if lens:
                w = max(w, min(max(lens), 60) + 2)
        widths.append(round(min(max(w, 8.0), 60.0), 2))
    return widths


def _sheet_head(ncols: int, nrows: int, widths: Sequence[float] | None, selected: bool) -> bytes:
    last = _col_letters(max(ncols, 1) - 1)
    ref = f"A1:{last}{nrows + 1}" if ncols else "A1"
    parts = [
        '<?xml version="1.0" encoding="UTF-8" standalone="yes"?>\n'
        '<worksheet xmlns="http://schemas.openxmlformats.org/spreadsheetml/2006/main" '
        'xmlns:r="http://schemas.openxmlformats.org/officeDocument/2006/relationships">',
        f'<dimension ref="{ref}"/>',
        f'<sheetViews><sheetView{" tabSelected=%s1%s" % (chr(34), chr(34)) if selected else ""} workbookViewId="0">'
        '<pane ySplit="1" topLeftCell="A2" activePane="bottomLeft" state="frozen"/>'
        '<selection pane="bottomLeft" activeCell="A2" sqref="A2"/></sheetView></sheetViews>',
        '<sheetFormatPr defaultRowHeight="15"/>',
    ]
    if ncols and widths is not None:
        parts.append("<cols>")
        parts.extend(f'<col min="{j + 1}" max="{j + 1}" width="{float(w):.6g}" customWidth="1"/>'
                     for j, w in enumerate(widths))
        parts.append("</cols>")
    parts.append("<sheetData>")
    return "".join(parts).encode()


def _sheet_tail(ncols: int, nrows: int) -> bytes:
    tail = "</sheetData>"
    if ncols:
        tail += f'<autoFilter ref="A1:{_col_letters(ncols - 1)}{nrows + 1}"/>'
    tail += ('<pageMargins left="0.7" right="0.7" top="0.75" bottom="0.75" header="0.3" footer="0.3"/>'
             "</worksheet>")
    return tail.encode()


# ----------------------------------------------------------------------------
# package parts
# ----------------------------------------------------------------------------

_NS_MAIN = "http://schemas.openxmlformats.org/spreadsheetml/2006/main"
_NS_REL = "http://schemas.openxmlformats.org/officeDocument/2006/relationships"
_NS_PKG_REL = "http://schemas.openxmlformats.org/package/2006/relationships"
_XML_DECL = '<?xml version="1.0" encoding="UTF-8" standalone="yes"?>\n'

_STYLES_XML = (
    _XML_DECL
    + f'<styleSheet xmlns="{_NS_MAIN}">'
    '<fonts count="2">'
    '<font><sz val="11"/><color rgb="FF000000"/><name val="Calibri"/><family val="2"/></font>'
    '<font><b/><sz val="11"/><color rgb="FF000000"/><name val="Calibri"/><family val="2"/></font>'
    "</fonts>"
    '<fills count="4">'
    '<fill><patternFill patternType="none"/></fill>'
    '<fill><patternFill patternType="gray125"/></fill>'
    '<fill><patternFill patternType="solid"><fgColor rgb="FFFF0000"/><bgColor indexed="64"/></patternFill></fill>'
    '<fill><patternFill patternType="solid"><fgColor rgb="00FFFF00"/><bgColor indexed="64"/></patternFill></fill>'
    "</fills>"
    '<borders count="1"><border><left/><right/><top/><bottom/><diagonal/></border></borders>'
    '<cellStyleXfs count="1"><xf numFmtId="0" fontId="0" fillId="0" borderId="0"/></cellStyleXfs>'
    '<cellXfs count="7">'
    '<xf numFmtId="0" fontId="0" fillId="0" borderId="0" xfId="0"/>'
    '<xf numFmtId="0" fontId="0" fillId="2" borderId="0" xfId="0" applyFill="1"/>'
    '<xf numFmtId="0" fontId="0" fillId="3" borderId="0" xfId="0" applyFill="1"/>'
    '<xf numFmtId="0" fontId="1" fillId="0" borderId="0" xfId="0" applyFont="1"/>'
    f'<xf numFmtId="{PERCENT_FORMAT_ID}" fontId="0" fillId="0" borderId="0" xfId="0" applyNumberFormat="1"/>'
    f'<xf numFmtId="{PERCENT_FORMAT_ID}" fontId="0" fillId="2" borderId="0" xfId="0" applyNumberFormat="1" applyFill="1"/>'
    f'<xf numFmtId="{PERCENT_FORMAT_ID}" fontId="0" fillId="3" borderId="0" xfId="0" applyNumberFormat="1" applyFill="1"/>'
    "</cellXfs>"
    '<cellStyles count="1"><cellStyle name="Normal" xfId="0" builtinId="0"/></cellStyles>'
    '<dxfs count="0"/><tableStyles count="0" defaultTableStyle="TableStyleMedium9" '
    'defaultPivotStyle="PivotStyleLight16"/>'
    "</styleSheet>"
)


def _content_types(nsheets: int) -> str:
    sheets = "".join(
        f'<Override PartName="/xl/worksheets/sheet{i + 1}.xml" '
        'ContentType="application/vnd.openxmlformats-officedocument.spreadsheetml.worksheet+xml"/>'
        for i in range(nsheets))
    return (_XML_DECL
            + '<Types xmlns="http://schemas.openxmlformats.org/package/2006/content-types">'
            '<Default Extension="rels" ContentType="application/vnd.openxmlformats-package.relationships+xml"/>'
            '<Default Extension="xml" ContentType="application/xml"/>'
            '<Override PartName="/xl/workbook.xml" '
            'ContentType="application/vnd.openxmlformats-officedocument.spreadsheetml.sheet.main+xml"/>'
            + sheets
            + '<Override PartName="/xl/styles.xml" '
            'ContentType="application/vnd.openxmlformats-officedocument.spreadsheetml.styles+xml"/>'
            '<Override PartName="/docProps/core.xml" '
            'ContentType="application/vnd.openxmlformats-package.core-properties+xml"/>'
            '<Override PartName="/docProps/app.xml" '
            'ContentType="application/vnd.openxmlformats-officedocument.extended-properties+xml"/>'
            "</Types>")


_ROOT_RELS = (
    _XML_DECL
    + f'<Relationships xmlns="{_NS_PKG_REL}">'
    f'<Relationship Id="rId1" Type="{_NS_REL}/officeDocument" Target="xl/workbook.xml"/>'
    f'<Relationship Id="rId2" Type="{_NS_PKG_REL}/metadata/core-properties" Target="docProps/core.xml"/>'
    f'<Relationship Id="rId3" Type="{_NS_REL}/extended-properties" Target="docProps/app.xml"/>'
    "</Relationships>"
)


def _workbook_rels(nsheets: int) -> str:
    rels = "".join(f'<Relationship Id="rId{i + 1}" Type="{_NS_REL}/worksheet" '
                   f'Target="worksheets/sheet{i + 1}.xml"/>' for i in range(nsheets))
    return (_XML_DECL + f'<Relationships xmlns="{_NS_PKG_REL}">' + rels
            + f'<Relationship Id="rId{nsheets + 1}" Type="{_NS_REL}/styles" Target="styles.xml"/>'
            "</Relationships>")


def _workbook(names: list[str], filter_refs: list[str | None]) -> str:
    sheets = "".join(f'<sheet name="{_attr_escape(nm)}" sheetId="{i + 1}" r:id="rId{i + 1}"/>'
                     for i, nm in enumerate(names))
    defined = "".join(
        f'<definedName name="_xlnm._FilterDatabase" localSheetId="{i}" hidden="1">'
        f"{_escape_text(_quote_sheet(nm))}!{ref}</definedName>"
        for i, (nm, ref) in enumerate(zip(names, filter_refs)) if ref)
    return (_XML_DECL + f'<workbook xmlns="{_NS_MAIN}" xmlns:r="{_NS_REL}">'
            '<bookViews><workbookView activeTab="0"/></bookViews>'
            f"<sheets>{sheets}</sheets>"
            + (f"<definedNames>{defined}</definedNames>" if defined else "")
            + '<calcPr calcId="191029"/></workbook>')


def _quote_sheet(name: str) -> str:
    return "'" + name.replace("'", "''") + "'"


def _core_xml() -> str:
    now = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    return (_XML_DECL
            + '<cp:coreProperties xmlns:cp="http://schemas.openxmlformats.org/package/2006/metadata/core-properties" '
            'xmlns:dc="http://purl.org/dc/elements/1.1/" xmlns:dcterms="http://purl.org/dc/terms/" '
            'xmlns:dcmitype="http://purl.org/dc/dcmitype/" xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance">'
            "<dc:creator>msprobe</dc:creator>"
            f'<dcterms:created xsi:type="dcterms:W3CDTF">{now}</dcterms:created>'
            f'<dcterms:modified xsi:type="dcterms:W3CDTF">{now}</dcterms:modified>'
            "</cp:coreProperties>")


_APP_XML = (_XML_DECL
            + '<Properties xmlns="http://schemas.openxmlformats.org/officeDocument/2006/extended-properties" '
            'xmlns:vt="http://schemas.openxmlformats.org/officeDocument/2006/docPropsVTypes">'
            "<Application>msprobe</Application><DocSecurity>0</DocSecurity><ScaleCrop>false</ScaleCrop>"
            "</Properties>")


# ----------------------------------------------------------------------------
# streaming into the zip member
# ----------------------------------------------------------------------------


class _BackgroundWriter:
    """Writes byte chunks to a file object from a worker thread.

    zlib and file I/O release the GIL, so deflating chunk k overlaps with
    building chunk k+1 in the calling thread.
    """

    def __init__(self, fh: Any, depth: int = 3):
        self._fh = fh
        self._queue: queue.Queue = queue.Queue(maxsize=depth)
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="xlsx-deflate", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            if self._error is None:
                try:
                    self._fh.write(item)
                except BaseException as exc:  # re-raised in the caller's thread
                    self._error = exc

    def write(self, data: bytes) -> None:
        if self._error is not None:
            raise self._error
        if data:
            self._queue.put(data)

    def close(self) -> None:
        self._queue.put(None)
        self._thread.join()
        if self._error is not None:
            raise self._error


def _check_sheet_name(name: str) -> None:
    if not isinstance(name, str) or not 1 <= len(name) <= 31 or _FORBIDDEN_SHEET_CHARS & set(name) \
            or name[0] == "'" or name[-1] == "'":
        raise ValueError(f"invalid Excel sheet name: {name!r}")


def _normalise_column(col: Any, nrows: int, index: int) -> Any:
    if isinstance(col, ChunkedColumn):  # cells made a chunk at a time (col[a:b] -> list), never all at once
        pass
    elif isinstance(col, np.ndarray):
        if col.ndim != 1:
            raise ValueError(f"column {index} must be one-dimensional")
    elif not isinstance(col, list):
        col = np.asarray(col) if hasattr(col, "__array__") else list(col)
        if isinstance(col, np.ndarray) and col.ndim != 1:
            raise ValueError(f"column {index} must be one-dimensional")
    if len(col) != nrows:
        raise ValueError(f"column {index} has {len(col)} rows, expected {nrows}")
    return col


def write_xlsx(path, header, columns, row_styles=None, sheet_name=DEFAULT_SHEET_NAME, max_rows_per_sheet=1_048_500,
               col_widths=None, percent_columns=()) -> list[str]:
    """Write one workbook holding a single table (see the module docstring).

    ``header``: list of column titles (row 1).  ``columns``: one entry per
    header item, each a numpy float/int/bool array or a list / object array of
    Python values (``str``, ``float``, ``int``, ``bool`` or ``None``); data
    rows start at row 2.  ``row_styles``: ``None`` or one int per data row,
    0 = no fill, 1 = red fill, 2 = yellow fill (applied to every cell of the
    row).  Tables longer than ``max_rows_per_sheet`` data rows are split over
    sheets ``part_0``, ``part_1``, ... each repeating the header; otherwise
    the single sheet is named ``sheet_name``.  ``col_widths``: list of column
    widths, or ``None`` for a heuristic from the header and the first rows.
    ``percent_columns``: header names of the columns whose ``"12.5%"`` text
    cells are written as percent-formatted numbers (see the module docstring;
    e.g. :data:`RELATIVE_ERROR_COLUMNS`).

    The file is written to ``path`` directly.  Returns the sheet names.
    """
    header = [str(h) for h in header]
    columns = list(columns)
    ncols = len(header)
    if len(columns) != ncols:
        raise ValueError(f"{len(columns)} columns for {ncols} header items")
    nrows = len(columns[0]) if columns else (len(row_styles) if row_styles is not None else 0)
    columns = [_normalise_column(c, nrows, j) for j, c in enumerate(columns)]
    styles = None
    if row_styles is not None:
        styles = np.asarray(row_styles).astype(np.int8, copy=False).reshape(-1)
        if len(styles) != nrows:
            raise ValueError(f"row_styles has {len(styles)} entries, expected {nrows}")
        if len(styles) and (styles.min() < 0 or styles.max() > 2):
            raise ValueError("row_styles values must be 0, 1 or 2")
    if max_rows_per_sheet < 1 or max_rows_per_sheet > EXCEL_MAX_ROWS - 1:
        raise ValueError(f"max_rows_per_sheet must be in 1..{EXCEL_MAX_ROWS - 1}")
    if col_widths is not None and len(col_widths) != ncols:
        raise ValueError(f"{len(col_widths)} column widths for {ncols} columns")

    if nrows > max_rows_per_sheet:
        bounds = [(s, min(s + max_rows_per_sheet, nrows)) for s in range(0, nrows, max_rows_per_sheet)]
        names = [f"part_{i}" for i in range(len(bounds))]
    else:
        bounds = [(0, nrows)]
        _check_sheet_name(sheet_name)
        names = [sheet_name]
    widths = list(col_widths) if col_widths is not None else _default_widths(header, columns, nrows)
    percent = _percent_positions(header, percent_columns)
    _write_package_retry(path, [_SheetPlan(n, header, columns, styles, a, b, widths, percent)
                                for n, (a, b) in zip(names, bounds)])
    return names


def _percent_positions(header: list, percent_columns) -> frozenset:
    wanted = set(percent_columns or ())
    return frozenset(j for j, h in enumerate(header) if h in wanted)


def write_workbook(path, sheets) -> list[str]:
    """Write several tables into one workbook, one sheet each.

    ``sheets``: ``[(sheet_name, header, columns), ...]`` with ``header``/``columns`` as for
    :func:`write_xlsx` (no row styles; each table must fit one sheet); an entry may carry a fourth
    item, the header names of its percent columns.  Returns the sheet names."""
    plans = []
    for entry in sheets:
        name, header, columns = entry[:3]
        percent_columns = entry[3] if len(entry) > 3 else ()
        _check_sheet_name(name)
        header = [str(h) for h in header]
        columns = list(columns)
        if len(columns) != len(header):
            raise ValueError(f"sheet {name!r}: {len(columns)} columns for {len(header)} header items")
        nrows = len(columns[0]) if columns else 0
        if nrows > EXCEL_MAX_ROWS - 1:
            raise ValueError(f"sheet {name!r}: {nrows} rows do not fit an Excel sheet")
        columns = [_normalise_column(c, nrows, j) for j, c in enumerate(columns)]
        plans.append(_SheetPlan(name, header, columns, None, 0, nrows, _default_widths(header, columns, nrows),
                                _percent_positions(header, percent_columns)))
    if not plans:
        raise ValueError("no sheets to write")
    _write_package_retry(path, plans)
    return [p.name for p in plans]


class _SheetPlan(NamedTuple):
    name: str
    header: list
    columns: list
    styles: Any  # int8 array over all rows of ``columns``, or None
    start: int   # the sheet holds rows start..stop of the columns
    stop: int
    widths: list
    percent: frozenset = frozenset()  # positions of the percent columns


def _write_package_retry(path, plans) -> None:
    try:
        _write_package(path, plans, force_zip64=False)
    except RuntimeError as exc:  # a sheet's XML grew past 2 GiB: redo with ZIP64 members
        if "force_zip64" not in str(exc):
            raise
        _write_package(path, plans, force_zip64=True)


def _write_package(path, plans, force_zip64: bool) -> None:
    names = [p.name for p in plans]
    filter_refs = [f"$A$1:${_col_letters(len(p.header) - 1)}${p.stop - p.start + 1}" if p.header else None
                   for p in plans]
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=COMPRESS_LEVEL) as zf:
        zf.writestr("[Content_Types].xml", _content_types(len(names)))
        zf.writestr("_rels/.rels", _ROOT_RELS)
        zf.writestr("docProps/app.xml", _APP_XML)
        zf.writestr("docProps/core.xml", _core_xml())
        zf.writestr("xl/workbook.xml", _workbook(names, filter_refs))
        zf.writestr("xl/_rels/workbook.xml.rels", _workbook_rels(len(names)))
        zf.writestr("xl/styles.xml", _STYLES_XML)
        builders = {}
        for i, p in enumerate(plans):
            ncols = len(p.header)
            builder = builders.get(ncols) or builders.setdefault(ncols, _ChunkBuilder(ncols))
            with zf.open(f"xl/worksheets/sheet{i + 1}.xml", "w", force_zip64=force_zip64) as fh:
                out = _BackgroundWriter(fh)
                try:
                    out.write(_sheet_head(ncols, p.stop - p.start, p.widths, selected=i == 0) + _header_row(p.header))
                    for c0 in range(p.start, p.stop, CHUNK_ROWS):
                        c1 = min(c0 + CHUNK_ROWS, p.stop)
                        chunk_cols = [col[c0:c1] for col in p.columns]
                        chunk_styles = None if p.styles is None else p.styles[c0:c1]
                        out.write(builder.build(chunk_cols, chunk_styles, c0 - p.start + 2, p.percent))
                        count_rows(c1 - c0)          # the write stage's row count (msprobe.core.progress)
                    out.write(_sheet_tail(ncols, p.stop - p.start))
                finally:
                    out.close()
