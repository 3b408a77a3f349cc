"""CSV report writer: the same cells as the xlsx report, one row per line.

Floats are written with Python's shortest round-trip repr, None as an empty field.  A text cell that
starts with a formula character (``= + - @ %`` or their full-width forms, or contains ``;`` followed by
one) and is not a number is prefixed with ``'`` so spreadsheet programs show it as text instead of
evaluating it (compare.md §9.3; the reference refuses to write such files instead).
"""

from __future__ import annotations

from typing import List, Sequence

from msprobe.core.dump.reader import INJECTION_RE

_FIRST = frozenset("+-=%@＋－＝％＠")


_SEMI = tuple(";" + c for c in _FIRST)


def _texts(values: Sequence) -> List[str]:
    """Every cell of a column as CSV text, guarded and quoted (RFC 4180, like the csv module)."""
    # one pass converts; bools before ints since bool is an int subclass
    cells = [v if v.__class__ is str else ("" if v is None else (str(v) if v.__class__ is bool else repr(v)))
             for v in values]
    # set lookups and a couple of substring searches (C speed) tell whether any cell needs a look
    joined = "\x00".join(cells)
    risky = not _FIRST.isdisjoint({c[:1] for c in cells}) or (";" in joined and any(m in joined for m in _SEMI))
    if risky:
        for i, v in enumerate(values):
            if v.__class__ is str and INJECTION_RE.search(v):
                try:
                    float(v)
                except ValueError:
                    cells[i] = "'" + v
    if '"' in joined or "," in joined or "\n" in joined or "\r" in joined:
        cells = [('"' + c.replace('"', '""') + '"') if ('"' in c or "," in c or "\n" in c or "\r" in c) else c
                 for c in cells]
    return cells


#: rows turned into text at a time (every cell's text depends on that cell only, so the file is the same
#: for any value; smaller keeps the text of a big report out of memory)
CSV_CHUNK_ROWS = 20000


def write_csv(path: str, header: List[str], columns: List[Sequence]) -> None:
    n = max((len(c) for c in columns), default=0)
    with open(path, "w", newline="", encoding="utf-8") as fh:
        fh.write(",".join(_texts(header)) + "\r\n")
        for a in range(0, n, CSV_CHUNK_ROWS):
            cols = [_texts(c[a:a + CSV_CHUNK_ROWS]) for c in columns]
            fh.writelines(line + "\r\n" for line in map(",".join, zip(*cols)))
            del cols
