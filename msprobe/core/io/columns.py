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
#: rows a coded column part holds while it is built
PART_ROWS = 1 << 16


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
    a row and the table of distinct values (1 byte a row instead of an 8-byte list slot).  Built from a whole
    list, or a piece at a time with :meth:`extend` (a dump read record by record never holds the list)."""

    __slots__ = ("_codes", "_parts", "_index", "table", "_pending")

    def __init__(self, values=(), codes=None, table=None):
        self._parts: list = []
        self._pending: list = []
        self._index: dict = {}
        if codes is not None:
            self._codes, self.table = codes, list(table)
            self._index = None
            return
        self._codes = np.zeros(0, dtype=np.uint8)
        self.table = []
        if len(values):
            self.extend(values)

    def finish(self) -> None:
        """Join the pieces and drop the value -> code index (kept for :meth:`extend` only)."""
        self.codes  # noqa: B018 - joins the pieces
        self._index = None

    def extend(self, values) -> None:
        # rows wait in a list until there are PART_ROWS of them (parts big enough to be their own memory maps)
        self._pending.extend(values)
        if len(self._pending) >= PART_ROWS:
            self._convert()

    def _convert(self) -> None:
        values, self._pending = self._pending, []
        if self._index is None:
            self._index = {v: k for k, v in enumerate(self.table)}
        index, table = self._index, self.table
        # group the rows by object first (vectorised: the texts repeat as shared objects), then the few
        # distinct objects by value
        ids = np.fromiter(map(id, values), dtype=np.int64, count=len(values))
        _, first, inverse = np.unique(ids, return_index=True, return_inverse=True)
        remap = np.empty(len(first), dtype=np.int64)
        for k, i in enumerate(first.tolist()):
            v = values[i]
            c = index.get(v)
            if c is None:
                c = index[v] = len(table)
                table.append(v)
            remap[k] = c
        self._parts.append(remap[inverse.reshape(-1)].astype(np.int32) if len(values) else np.zeros(0, np.int32))

    @property
    def codes(self) -> np.ndarray:
        if self._pending:
            self._convert()
        if self._parts:
            small = np.uint8 if len(self.table) <= 255 else (np.uint16 if len(self.table) <= 65535 else np.int32)
            self._codes = np.concatenate([self._codes.astype(small)] + [p.astype(small) for p in self._parts])
            self._parts = []
        return self._codes

    def __len__(self) -> int:
        return len(self._codes) + sum(len(p) for p in self._parts) + len(self._pending)

    def __getstate__(self):
        return self.codes, self.table

    def __setstate__(self, state):
        self._codes, self.table = state
        self._parts, self._pending = [], []
        self._index = None

    def take(self, idx, fill=None) -> list:
        idx = np.asarray(idx, dtype=np.int64)
        table = self.table
        codes = self.codes
        if len(idx) and idx.min() < 0:
            # code len(table) stands for "no row" (-1)
            sel = np.where(idx >= 0, codes[np.where(idx >= 0, idx, 0)], len(table))
            return list(map((table + [fill]).__getitem__, sel.tolist()))
        return list(map(table.__getitem__, codes[idx].tolist()))

    def codes_at(self, idx):
        """The codes of rows ``idx`` (int64; -1 where idx is -1)."""
        idx = np.asarray(idx, dtype=np.int64)
        return np.where(idx >= 0, self.codes[np.where(idx >= 0, idx, 0)].astype(np.int64), -1)


class SparseColumn(ListLike):
    """A column that holds ``default`` on most rows (the recorded value of a dump's rows: NO_VALUE on every tensor
    row): the row numbers of the others (sorted int64) and their values.  :meth:`extend` adds rows."""

    __slots__ = ("n", "default", "_keys", "vals")

    def __init__(self, values=(), default=None):
        self.n = 0
        self.default = default
        self._keys: list = []
        self.vals: list = []
        if len(values):
            self.extend(values)

    def extend(self, values) -> None:
        values = values if isinstance(values, (list, tuple)) else list(values)
        ids = np.fromiter(map(id, values), dtype=np.int64, count=len(values))
        keys = np.flatnonzero(ids != id(self.default))
        self.vals.extend(values[i] for i in keys.tolist())
        self._keys.append(keys + self.n)
        self.n += len(values)

    @property
    def keys(self) -> np.ndarray:
        if len(self._keys) != 1:
            self._keys = [np.concatenate(self._keys).astype(np.int64) if self._keys else np.zeros(0, np.int64)]
        return self._keys[0]

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
    """``col[idx]`` (a :class:`CodedColumn` or :class:`SparseColumn` read at report rows ``idx``; -1 -> ``fill``)
    without a list of the whole report: cells are made a chunk at a time, ``col[i]`` is a lookup, and
    ``np.asarray(col, dtype=object)`` is made from the codes."""

    __slots__ = ("coded", "idx", "fill")

    def __init__(self, coded, idx: np.ndarray, fill=None):
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
        if j < 0:
            return self.fill
        if isinstance(self.coded, CodedColumn):
            return self.coded.table[int(self.coded.codes[j])]
        return self.coded.take(self.idx[i:i + 1], self.fill)[0]

    def __array__(self, dtype=None, copy=None):
        if not isinstance(self.coded, CodedColumn):
            out = np.empty(self.n, dtype=object)
            out[:] = self.tolist()
        else:
            table = self.coded.table
            objs = np.empty(len(table) + 1, dtype=object)
            for k, v in enumerate(table):
                objs[k] = v
            objs[-1] = self.fill
            has = self.idx >= 0
            codes = np.where(has, self.coded.codes[np.where(has, self.idx, 0)], len(table))
            out = objs[codes]
        return out if dtype is None or np.dtype(dtype) == object else out.astype(dtype)
