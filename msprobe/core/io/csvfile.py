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


def _guard(values: Sequence) -> list:
    out = list(values)
    for i, v in enumerate(out):
        if type(v) is str and v and INJECTION_RE.search(v):
            try:
                float(v)
            except ValueError:
                out[i] = "'" + v
    return out


def write_csv(path: str, header: List[str], columns: List[Sequence]) -> None:
    cols = [_guard(c) for c in columns]
    with open(path, "w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(header)
        w.writerows(zip(*cols))
