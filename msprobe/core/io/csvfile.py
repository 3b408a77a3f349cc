"""CSV report writer: the same cells as the xlsx report, one row per line.

Floats are written with Python's shortest round-trip repr, None as an empty field.  A text cell that
starts with a formula character (``= + - @ %`` or their full-width forms, or contains ``;`` followed by
one) and is not a number is prefixed with ``'`` so spreadsheet programs show it as text instead of
evaluating it (compare.md §9.3; the reference refuses to write such files instead).
"""

from __future__ import annotations

import csv
from typing import List, Sequence

from msprobe.core.dump.reader import INJECTION_RE

_NUMBER_TYPES = (int, float)


_FIRST = frozenset("+-=%@＋－＝％＠")


_MARKERS = tuple("\x00" + c for c in _FIRST) + tuple(";" + c for c in _FIRST)


def _guard(values: Sequence) -> Sequence:
    # the column's text cells joined by NUL: a few substring searches (C speed) tell whether any cell
    # starts with a formula character or holds ';' followed by one; only then look cell by cell
    texts = [v for v in values if v.__class__ is str]
    if not texts:
        return values
    joined = "\x00" + "\x00".join(texts)
    if not any(m in joined for m in _MARKERS):
        return values
    hits = [i for i, v in enumerate(values) if v.__class__ is str and INJECTION_RE.search(v)]
    if not hits:
        return values
    out = list(values)
    for i in hits:
        try:
            float(out[i])
        except ValueError:
            out[i] = "'" + out[i]
    return out


def write_csv(path: str, header: List[str], columns: List[Sequence]) -> None:
    cols = [_guard(c) for c in columns]
    with open(path, "w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(header)
        w.writerows(zip(*cols))
