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

import numpy as np

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


class ListLike:
    """Shared list behaviour of the compact dump columns below: ``len``, ``col[i]``, ``col[a:b]``, iteration,
    ``tolist()``, ``==`` with a list, truth; and :meth:`take` for many rows at once (-1 -> ``fill``)."""

    __slots__ = ()

    def __len__(self) -> int:  # pragma: no cover - defined by each class
        raise NotImplementedError

    def take(self, idx, fill=None) -> list:  # pragma: no cover - defined by each class
        raise NotImplementedError

    def __getitem__(self, key):
        n = len(self)
        if isinstance(key, slice):
            return self.take(np.arange(n)[key])
        i = int(key)
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError("list index out of range")
        return self.take(np.array([i]))[0]

    def tolist(self) -> list:
        return self.take(np.arange(len(self)))

    def __iter__(self) -> Iterator:
        return iter(self.tolist())

    def __bool__(self) -> bool:
        return len(self) > 0

    def __eq__(self, other):
        if isinstance(other, (list, ListLike)):
            return len(other) == len(self) and self.tolist() == list(other)
        return NotImplemented

    def __ne__(self, other):
        eq = self.__eq__(other)
        return eq if eq is NotImplemented else not eq

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return repr(self.tolist())


class CodedColumn(ListLike):
    """A column of few distinct hashable values (dtype, shape, state, requires_grad texts): one small integer code
    a row and the table of distinct values (1 byte a row instead of an 8-byte list slot)."""

    __slots__ = ("codes", "table")

    def __init__(self, values=(), codes=None, table=None):
        if codes is not None:
            self.codes, self.table = codes, list(table)
            return
        values = values if isinstance(values, list) else list(values)
        # group the rows by object first (vectorised: the texts repeat as shared objects), then the few
        # distinct objects by value
        ids = np.fromiter(map(id, values), dtype=np.int64, count=len(values))
        _, first, inverse = np.unique(ids, return_index=True, return_inverse=True)
        index: dict = {}
        setdefault = index.setdefault
        remap = np.fromiter((setdefault(values[i], len(index)) for i in first.tolist()), dtype=np.int64,
                            count=len(first))
        raw = remap[inverse.reshape(-1)] if len(values) else remap
        self.table = list(index)
        small = np.uint8 if len(self.table) <= 255 else (np.uint16 if len(self.table) <= 65535 else np.int32)
        self.codes = raw.astype(small)

    def __len__(self) -> int:
        return len(self.codes)

    def take(self, idx, fill=None) -> list:
        idx = np.asarray(idx, dtype=np.int64)
        table = self.table
        if len(idx) and idx.min() < 0:
            # code len(table) stands for "no row" (-1)
            codes = np.where(idx >= 0, self.codes[np.where(idx >= 0, idx, 0)], len(table))
            return list(map((table + [fill]).__getitem__, codes.tolist()))
        return list(map(table.__getitem__, self.codes[idx].tolist()))

    def codes_at(self, idx):
        """The codes of rows ``idx`` (int64; -1 where idx is -1)."""
        idx = np.asarray(idx, dtype=np.int64)
        return np.where(idx >= 0, self.codes[np.where(idx >= 0, idx, 0)].astype(np.int64), -1)


class SparseColumn(ListLike):
    """A column that holds ``default`` on most rows (the recorded value of a dump's rows: NO_VALUE on every tensor
    row): the row numbers of the others (sorted int64) and their values."""

    __slots__ = ("n", "default", "keys", "vals")

    def __init__(self, values=(), default=None):
        self.n = len(values)
        self.default = default
        ids = np.fromiter(map(id, values), dtype=np.int64, count=self.n)
        self.keys = np.flatnonzero(ids != id(default)).astype(np.int64)
        self.vals = [values[i] for i in self.keys.tolist()]

    def __len__(self) -> int:
        return self.n

    def take(self, idx, fill=None) -> list:
        idx = np.asarray(idx, dtype=np.int64)
        out = [self.default] * len(idx)
        keys, vals = self.keys, self.vals
        if len(keys) and len(idx):
            pos = np.minimum(np.searchsorted(keys, idx), len(keys) - 1)
            hit = np.flatnonzero(keys[pos] == idx)
            for k, p in zip(hit.tolist(), pos[hit].tolist()):
                out[k] = vals[p]
        if len(idx) and idx.min() < 0:
            for k in np.flatnonzero(idx < 0).tolist():
                out[k] = fill
        return out


class TakenColumn(ChunkedColumn):
    """``coded[idx]`` (a :class:`CodedColumn` read at report rows ``idx``; -1 -> ``fill``) without a list of the
    whole report: cells are made a chunk at a time, and ``col[i]`` is a table lookup."""

    __slots__ = ("coded", "idx", "fill")

    def __init__(self, coded: CodedColumn, idx: np.ndarray, fill=None):
        self.coded, self.idx, self.fill = coded, np.asarray(idx, dtype=np.int64), fill
        super().__init__(len(self.idx), lambda a, b: coded.take(self.idx[a:b], fill))

    def __getitem__(self, key):
        if isinstance(key, slice):
            return super().__getitem__(key)
        i = int(key)
        if i < 0:
            i += self.n
        if not 0 <= i < self.n:
            raise IndexError("column index out of range")
        j = int(self.idx[i])
        return self.coded.table[int(self.coded.codes[j])] if j >= 0 else self.fill
