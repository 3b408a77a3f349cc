"""A report column whose cells are made a row range at a time, from compact (numpy) data.

A compare report of 750,000 rows holds its relative errors as "12.5%" text and its differences as Python
floats: as Python objects that is several hundred bytes a row.  A :class:`ChunkedColumn` keeps the numbers
as arrays and makes the cells of rows ``a..b`` when asked (``col[a:b]``), which is how both writers read a
column (csv 20,000 rows and xlsx 4,096 rows at a time), so the cells of the whole report never exist at
once.  The cells are the same objects (equal values, same types) the whole column would hold.

It reads like a list (``len``, ``col[i]``, ``col[a:b]`` -> list, iteration, ``==`` with a list); code that
needs a real list calls :func:`materialise`.  Pickling gives a plain list (a rank result sent back whole).
"""

from __future__ import annotations

from typing import Callable, Iterator, List

#: rows made at a time when the column is iterated or materialised
ITER_ROWS = 20000


class ChunkedColumn:
    """``n`` cells, ``make(a, b)`` -> the list of the cells of rows ``a..b`` (0 <= a <= b <= n)."""

    __slots__ = ("n", "make")

    def __init__(self, n: int, make: Callable[[int, int], list]):
        self.n = n
        self.make = make

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, key):
        if isinstance(key, slice):
            a, b, step = key.indices(self.n)
            if step != 1:
                return self.tolist()[key]
            return self.make(a, b) if a < b else []
        i = int(key)
        if i < 0:
            i += self.n
        if not 0 <= i < self.n:
            raise IndexError("column index out of range")
        return self.make(i, i + 1)[0]

    def __iter__(self) -> Iterator:
        for a in range(0, self.n, ITER_ROWS):
            yield from self.make(a, min(a + ITER_ROWS, self.n))

    def tolist(self) -> list:
        out: List = []
        for a in range(0, self.n, ITER_ROWS):
            out.extend(self.make(a, min(a + ITER_ROWS, self.n)))
        return out

    def __eq__(self, other) -> bool:
        if isinstance(other, (list, ChunkedColumn)):
            return len(other) == self.n and self.tolist() == list(other)
        return NotImplemented

    def __ne__(self, other):
        eq = self.__eq__(other)
        return eq if eq is NotImplemented else not eq

    __hash__ = None  # type: ignore[assignment]

    def __reduce__(self):
        return (list, (self.tolist(),))

    def __repr__(self) -> str:
        return f"ChunkedColumn({self.n} rows)"


def materialise(col):
    """A real list of a chunked column; anything else unchanged."""
    return col.tolist() if isinstance(col, ChunkedColumn) else col
