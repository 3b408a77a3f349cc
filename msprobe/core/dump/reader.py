"""dump.json -> typed, columnar rows.

One row per flattened tensor or value, named and ordered as the reference does (compare.md §2):

* entry sections in the order inputs (``input_args``, ``input_kwargs``, ``input``), ``parameters``,
  ``output``; kwargs get the same ``.input`` infix; ``parameters_grad`` entries keep the parameter name
  without a list index;
* lists add ``.<i>``, dicts ``.<key>``; a dict with a string ``type`` is a leaf; empty lists/dicts give no
  row; ``None`` gives a row of ``None`` values;
* in tensor mode the row name comes from ``data_name`` (without its extension).

The walk over the JSON tree is the only per-value Python work of a compare; everything after it works on
whole columns.
"""

from __future__ import annotations

import os
import re
import sys
import zlib
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

import numpy as np

from msprobe.core.errors import MsprobeError
from msprobe.core.fileio import load_json

# compare.md §2.7 / §9.3: strings starting with a formula character (or containing ';' followed by one)
INJECTION_RE = re.compile(r"^[＋－＝％＠+\-=%@]|;[＋－＝％＠+\-=%@]")

_FORMULA_FIRST = frozenset("＋－＝％＠+-=%@")

STATE_INPUT = "input"
STATE_PARAMETERS = "parameters"
STATE_OUTPUT = "output"
STATE_PARAMETERS_GRAD = "parameters_grad"
STATE_DEBUG = "debug"

# section key -> (name infix, state)
SECTIONS = (
    ("input_args", "input", STATE_INPUT),
    ("input_kwargs", "input", STATE_INPUT),
    ("input", "input", STATE_INPUT),
    ("parameters", "parameters", STATE_PARAMETERS),
    ("output", "output", STATE_OUTPUT),
)
MAX_DEPTH = 400
TENSOR_TYPES = ("torch.Tensor", "mindspore.Tensor", "torch.nn.parameter.Parameter", "mindspore.Parameter")
DIST_VALUE_NAMES = ("src", "dst", "group_src", "group_dst")

MODE_STATISTICS = "statistics"
MODE_MD5 = "md5"
MODE_TENSOR = "tensor"


class _NoValue:
    """Marker in DumpRows.value for tensor rows (which have statistics, not a value)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "NO_VALUE"

    def __reduce__(self):
        return "NO_VALUE"  # (pickled as the module's one marker: ``is NO_VALUE`` holds in another process)


NO_VALUE = _NoValue()


_F, _I, _O, _N = 0, 1, 2, 3  # CompactValues kinds: a float, an int (exact in float64), another object, None


class CompactValues:
    """A column of statistic values (float / int / str / None / bool text ...) held as a float64 array, a kind
    byte per value (float, int, None, other) and a dict of the few other values: about 9 bytes a value instead of 32
    for a Python float and its list slot (a 200 MB dump.json has 3 million of them per side).

    Reads like the list it replaces (``len``, ``col[i]``, iteration, ``tolist()``, ``repr`` and ``==`` as
    that list): ``col[i]`` gives back an equal object of the same type (a float as ``float``, an int as
    ``int``, anything else the object itself).  :meth:`take` gives the values of many rows at once and
    :meth:`numbers` the float values with the number mask (compare.stats.numeric)."""

    __slots__ = ("_vals", "_kind", "_other", "_parts", "_n", "_pending")

    def __init__(self, values=()):
        self._vals = np.zeros(0, dtype=np.float64)
        self._kind = np.zeros(0, dtype=np.int8)
        self._other: dict = {}
        self._parts: list = []
        self._n = 0
        self._pending: list = []
        if values:
            self.extend(values)

    def extend(self, values) -> None:
        # values wait in a list until there are PART_ROWS of them: parts big enough to be their own memory
        # maps, which go back to the system when joined (thousands of small ones would leave holes in the heap)
        self._pending.extend(values)
        if len(self._pending) >= PART_ROWS:
            self._convert()

    def _convert(self) -> None:
        values, self._pending = self._pending, []
        n = len(values)
        kind = np.array([_F if v.__class__ is float else (_I if v.__class__ is int and -_EXACT <= v <= _EXACT else
                                                          (_N if v is None else _O)) for v in values], dtype=np.int8)
        vals = np.full(n, np.nan)
        num = np.flatnonzero(kind <= _I)
        if len(num):
            vals[num] = np.fromiter((values[i] for i in num.tolist()), dtype=np.float64, count=len(num))
        base = self._n
        for i in np.flatnonzero(kind == _O).tolist():
            v = values[i]
            self._other[base + i] = _intern(v) if v.__class__ is str else v  # ('N/A', 'True' ... repeat)
        self._parts.append((vals, kind))
        self._n += n

    def append(self, value) -> None:
        self.extend((value,))

    def _join(self) -> None:
        if self._pending:
            self._convert()
        if self._parts:
            self._vals = np.concatenate([self._vals] + [v for v, _ in self._parts])
            self._kind = np.concatenate([self._kind] + [k for _, k in self._parts])
            self._parts = []

    def __len__(self) -> int:
        return self._n + len(self._pending)

    def take(self, idx: np.ndarray, fill=None) -> list:
        """The values of rows ``idx`` (int64 array; -1 -> ``fill``), as the list would give them."""
        self._join()
        idx = np.asarray(idx, dtype=np.int64)
        safe = np.where(idx >= 0, idx, 0) if len(idx) and idx.min() < 0 else idx
        kind = self._kind[safe] if len(self._kind) else np.full(len(idx), _O, dtype=np.int8)
        out = self._vals[safe].tolist() if len(self._vals) else [None] * len(idx)
        for i in np.flatnonzero(kind == _I).tolist():
            out[i] = int(out[i])
        other = self._other
        for i in np.flatnonzero(kind == _O).tolist():
            out[i] = other[int(safe[i])] if idx[i] >= 0 else fill
        for i in np.flatnonzero(kind == _N).tolist():
            out[i] = None
        if len(idx) and idx.min() < 0:
            for i in np.flatnonzero(idx < 0).tolist():
                out[i] = fill
        return out

    def numbers(self) -> Tuple[np.ndarray, np.ndarray, dict]:
        """(float64 values, is-a-float-or-int mask, {row: other value}) of the whole column (views)."""
        self._join()
        return self._vals, self._kind <= _I, self._other

    def __getitem__(self, key):
        if isinstance(key, slice):
            return self.take(np.arange(len(self))[key])
        i = int(key)
        if i < 0:
            i += len(self)
        if not 0 <= i < len(self):
            raise IndexError("list index out of range")
        return self.take(np.array([i]))[0]

    def tolist(self) -> list:
        return self.take(np.arange(len(self)))

    def __iter__(self):
        return iter(self.tolist())

    def __eq__(self, other):
        if isinstance(other, (list, CompactValues)):
            return self.tolist() == list(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return repr(self.tolist())

    def __bool__(self) -> bool:
        return len(self) > 0


_EXACT = 2 ** 53  # ints up to this size are exact in a float64
#: rows a column part holds (msprobe.core.io.columns uses the same)
PART_ROWS = 1 << 16


@dataclass
class DumpRows:
    """Columnar rows of one dump.json (all lists have the same length)."""

    path: str
    task: str
    level: str
    framework: str
    names: List[str] = field(default_factory=list)
    api: List[str] = field(default_factory=list)  # dump.json key the row came from
    state: List[str] = field(default_factory=list)
    dtype: List[str] = field(default_factory=list)
    shape: List[str] = field(default_factory=list)
    stat_max: CompactValues = field(default_factory=CompactValues)  # raw statistic values (float/int/str/None)
    stat_min: CompactValues = field(default_factory=CompactValues)
    stat_mean: CompactValues = field(default_factory=CompactValues)
    stat_norm: CompactValues = field(default_factory=CompactValues)
    requires_grad: List[str] = field(default_factory=list)  # 'True' / 'False' / 'N/A'
    data_name: List[str] = field(default_factory=list)
    stack: List[Optional[str]] = field(default_factory=list)  # stack text on the first row of an API
    # the recorded value of a non-tensor leaf (int, float, bool, str, slice, torch.Size, dtype text, None ...);
    # NO_VALUE for tensors.  Compare judges such arguments by value (a differing eps or dim is a fault).
    value: list = field(default_factory=list)
    has_md5: bool = False
    _md5_raw: list = field(default_factory=list)  # md5 strings, or (value,) to CRC32 on demand

    @property
    def md5(self) -> List[str]:
        """md5 column (the reference's CRC32 text; values without one get the CRC32 of their text)."""
        if self._md5_cache is None:
            self._md5_cache = [m if m.__class__ is str else _crc(m[0]) for m in self._md5_raw]
        return self._md5_cache

    _md5_cache: Optional[List[str]] = None
    # per statistic (max, min, mean, norm): (values, usable, reference-parsed values), prepared by compare
    parsed: Optional[list] = None

    def __len__(self) -> int:
        return len(self.names) if self.names is not None else len(self.api)


def crc_text(value) -> str:
    """The reference's md5 stand-in: the CRC32 of a value's text, as 8 hex digits."""
    return "%08x" % zlib.crc32(str(value).encode())


_crc = crc_text


def _bools_to_str(v):
    if v is True:
        return "True"
    if v is False:
        return "False"
    return v


_NO_MD5 = ("",)  # a tensor record without md5 or value: the CRC32 of "" on demand (one shared tuple)
_intern = sys.intern


class _Walker:
    __slots__ = ("rows", "op", "tensor_mode", "side", "check", "out")

    def __init__(self, rows: DumpRows, tensor_mode: bool, side: str, check: bool):
        self.out: list = []  # one tuple per row, transposed into columns at the end
        self.rows = rows
        self.tensor_mode = tensor_mode
        self.side = side
        self.check = check
        self.op = ""

    def _bad(self, leaf: dict, name: str) -> None:
        """Explain why a leaf is malformed (called only when the fast checks fail)."""
        r, op = self.rows, self.op
        shape = leaf.get("shape")
        if shape is not None and not isinstance(shape, (list, tuple)):
            raise MsprobeError(
                f"{self.side} dump.json {r.path}: '{op}' has a 'shape' that is not a list ({shape!r}); the file is damaged: re-run the dump"
            )
        rg = leaf.get("requires_grad")
        if rg is not None and not isinstance(rg, bool):
            raise MsprobeError(
                f"{self.side} dump.json {r.path}: '{op}' has a 'requires_grad' that is not true/false ({rg!r}); the file is damaged: re-run the dump"
            )
        missing = [k for k in ("dtype", "shape") if k not in leaf]
        raise MsprobeError(
            f"{self.side} dump.json {r.path}: tensor entry {name} has no {' or '.join(repr(m) for m in missing)} "
            f"(a tensor needs type, dtype and shape); the file is damaged or not written by a dumper: re-run the dump"
        )

    def leaf(self, leaf: dict, name: str, state: str) -> None:
        get = leaf.get
        ltype = get("type")
        dtype = get("dtype")
        shape = get("shape")
        rg = get("requires_grad")
        if (shape is not None and shape.__class__ is not list) or (rg is not None and rg.__class__ is not bool):
            self._bad(leaf, name)
        if ltype in TENSOR_TYPES and (dtype is None or shape is None) and ("dtype" not in leaf or "shape" not in leaf):
            self._bad(leaf, name)
        data_name = get("data_name") or "-1"
        if data_name.__class__ is not str or (data_name != "-1" and ("/" in data_name or "\\" in data_name or data_name in (".", ".."))):
            raise MsprobeError(
                f"{self.side} dump.json {self.rows.path}: tensor entry {name} has data_name {data_name!r}; it must be a plain "
                f"file name inside dump_tensor_data (no directories): the file is damaged or was edited, re-run the dump"
            )
        if data_name != "-1":
            row_name = data_name.rsplit(".", 1)[0] if "." in data_name else data_name
        else:
            row_name = name
        md5 = get("md5")
        if md5 is not None and md5.__class__ is not str:
            raise MsprobeError(
                f"{self.side} dump.json {self.rows.path}: entry {name} has md5 {str(md5)[:60]!r}, expected a string "
                f"of hex digits; the file is damaged or was edited: re-run the dump"
            )
        if dtype:
            mx, mn, me, no = get("Max"), get("Min"), get("Mean"), get("Norm")
            if mx.__class__ is bool or mn.__class__ is bool or me.__class__ is bool or no.__class__ is bool:
                mx, mn, me, no = _bools_to_str(mx), _bools_to_str(mn), _bools_to_str(me), _bools_to_str(no)
            if not md5:
                md5 = (_bools_to_str(get("value")),) if "value" in leaf else _NO_MD5
            # dtype and shape texts repeat across rows: one shared string each (memory of big dumps)
            self.out.append((row_name, self.op, state, _intern(str(dtype)), _intern(str(shape)), mx, mn, me, no,
                             "N/A" if rg is None else ("True" if rg else "False"), data_name, md5, NO_VALUE))
            return
        raw = get("value")
        value = _bools_to_str(raw)
        last = name.rsplit(".", 1)[-1]
        if ltype == "torch.Size":
            dtype, shape_s = "torch.Size", str(value)
            mx = mn = me = no = None
            md5 = md5 or (value,)
        elif ltype == "slice":
            dtype = "slice"
            shape_s = "(%d,)" % len(value) if isinstance(value, list) else "()"
            mx = mn = me = no = None
            md5 = md5 or (value,)
        elif ltype == "ellipsis":
            dtype, shape_s = "ellipsis", "[]"
            mx = mn = me = no = value
            md5 = md5 or (value,)
        elif last in DIST_VALUE_NAMES:
            dtype, shape_s = ltype, "[]"
            mx = mn = me = no = str(value)
            md5 = str(value)
        elif ltype == "torch.ProcessGroup":
            ranks = str(get("group_ranks"))
            dtype, shape_s = ltype, "[]"
            mx = mn = me = no = ranks
            md5 = ranks
        else:
            dtype = _PY_TYPE_NAMES.get(type(raw)) or str(type(raw))
            shape_s = "[]"
            mx = mn = me = no = value
            md5 = md5 or ((value if "value" in leaf else ""),)
        self.out.append((row_name, self.op, state, dtype, shape_s, mx, mn, me, no,
                         "N/A" if rg is None else ("True" if rg else "False"), data_name, md5,
                         (get("group_ranks") if ltype == "torch.ProcessGroup" else raw)))

    def none_row(self, name: str, state: str) -> None:
        self.out.append((name, self.op, state, "None", "None", None, None, None, None, "N/A", "-1", "N/A", None))

    def walk(self, value, name: str, state: str, in_grad: bool, depth: int) -> None:
        if depth > MAX_DEPTH:
            raise MsprobeError(
                f"{self.side} dump.json {self.rows.path}: '{self.op}' is nested deeper than {MAX_DEPTH} levels; the file is damaged"
            )
        if value is None:
            self.none_row(name, state)
        elif isinstance(value, list):
            leaf = self.leaf
            for i, item in enumerate(value):
                child = name if in_grad else f"{name}.{i}"
                # fast path: a plain value record (the common case) needs no recursion
                if item.__class__ is dict and item.get("type").__class__ is str and "class_type" not in item:
                    leaf(item, child, state)
                else:
                    self.walk(item, child, state, in_grad, depth + 1)
        elif isinstance(value, dict):
            if not value:
                return
            if value.get("class_type") == "torch.distributed.P2POp" and isinstance(value.get("tensor"), dict):
                self.leaf(value["tensor"], name, state)
            elif isinstance(value.get("type"), str):
                self.leaf(value, name, state)
            else:
                for key, item in value.items():
                    self.walk(item, f"{name}.{key}", state, in_grad, depth + 1)
        elif not value:
            return
        else:
            raise MsprobeError(
                f"{self.side} dump.json {self.rows.path}: '{self.op}' holds a bare value {value!r} where a tensor or value record was expected; the file is damaged"
            )


_PY_TYPE_NAMES = {
    bool: "<class 'bool'>",
    int: "<class 'int'>",
    float: "<class 'float'>",
    str: "<class 'str'>",
    type(None): "<class 'NoneType'>",
    list: "<class 'list'>",
    dict: "<class 'dict'>",
}


def _has_md5_deep(value, depth: int = 0) -> bool:
    if depth > MAX_DEPTH:
        return False
    if isinstance(value, dict):
        return "md5" in value or any(_has_md5_deep(v, depth + 1) for v in value.values())
    if isinstance(value, list):
        return any(_has_md5_deep(v, depth + 1) for v in value)
    return False


def has_md5(data: dict) -> bool:
    """Whether a dump's records carry md5 values (then a compare of two statistics dumps is an md5 one)."""
    for op, body in data.items():
        if isinstance(op, str) and op.endswith(".debug"):
            if _has_md5_deep(body):
                return True
            continue
        if not isinstance(body, dict):
            continue
        for section in body.values():
            if isinstance(section, list):
                for item in section:
                    if isinstance(item, dict) and "md5" in item:
                        return True
            elif isinstance(section, dict) and "md5" in section:
                return True
    return False


def load_stack_frames(path: str) -> Dict[str, List[str]]:
    """stack.json (legacy ``{api: [lines]}`` or new ``{"0": [[apis], [lines]]}``) -> {api: lines}.

    In the new format every api of a group gets the same list object."""
    obj = load_json(path, "stack.json")
    if not isinstance(obj, dict):
        raise MsprobeError(f"stack.json {path}: the outermost value must be an object; the file is damaged: re-run the dump")
    out: Dict[str, List[str]] = {}
    if "0" in obj:
        for key, val in obj.items():
            if not (isinstance(val, list) and len(val) == 2 and isinstance(val[0], list) and isinstance(val[1], list)):
                raise MsprobeError(f"stack.json {path}: entry {key!r} is not [[api names], [stack lines]]; the file is damaged: re-run the dump")
            _check_strings(path, val[0], f"[{key!r}][0]", "API name")
            _check_strings(path, val[1], f"[{key!r}][1]", "stack line")
            for api in val[0]:
                out[api] = val[1]
    else:
        for api, lines in obj.items():
            if not isinstance(lines, list):
                raise MsprobeError(f"stack.json {path}: the stack of '{api}' is not a list; the file is damaged: re-run the dump")
            _check_strings(path, lines, f"[{api!r}]", "stack line")
            out[api] = lines
    return out


def _check_strings(path: str, items: list, where: str, what: str) -> None:
    for i, item in enumerate(items):
        if item.__class__ is not str:
            raise MsprobeError(f"stack.json {path}: {where}[{i}] is {type(item).__name__} {str(item)[:60]}, expected "
                               f"a {what} (a string); the file is damaged or was edited: re-run the dump")


def load_stack(path: str) -> Dict[str, str]:
    """stack.json -> {api: str(lines)} (the text of a shared group list is made once)."""
    texts: Dict[int, str] = {}
    out: Dict[str, str] = {}
    for api, lines in load_stack_frames(path).items():
        t = texts.get(id(lines))
        if t is None:
            t = texts[id(lines)] = str(lines)
        out[api] = t
    return out


def _repaired(path: str, side: str):
    """The complete records of a truncated dump.json (msprobe.core.fileio.repair_truncated_dump), or None."""
    import logging

    from msprobe.core.fileio import repair_truncated_dump

    fixed = repair_truncated_dump(path)
    if fixed is None:
        return None
    obj, last, n = fixed
    logging.getLogger("msprobe").warning(
        "%s dump.json %s is cut short (its writer was killed, or the copy is incomplete): using its first %d "
        "records, up to %s (the last complete record); the rest of the dump is missing", side, path, n, last)
    return obj


def _rows_of(obj, path: str, side: str) -> DumpRows:
    """Checked header fields of a dump.json (``obj``: the whole object, or its fields but ``data``)."""
    if not isinstance(obj, dict):
        raise MsprobeError(f"{side} dump.json {path}: the top level is not an object; this is not a dump.json")
    task = obj.get("task")
    if not task:
        raise MsprobeError(f"{side} dump.json {path} has no 'task'; this is not a dump.json written by a dumper")
    rows = DumpRows(path=path, task=task, level=str(obj.get("level", "")), framework=str(obj.get("framework") or "pytorch"))
    from msprobe.core.io.columns import CodedColumn, SparseColumn

    # the columns of few distinct values are coded as the pieces come (no list of the whole file)
    rows.api, rows.state, rows.dtype = CodedColumn(), CodedColumn(), CodedColumn()
    rows.shape, rows.requires_grad = CodedColumn(), CodedColumn()
    rows.value = SparseColumn((), NO_VALUE)
    return rows


def _check_task(rows: DumpRows, path: str, side: str) -> None:
    if rows.task not in (MODE_TENSOR, MODE_STATISTICS):
        raise MsprobeError(
            f"{side} dump.json {path} has task {rows.task!r}; compare works on dumps made with task 'statistics' or 'tensor'"
        )


def _walk_records(walker: "_Walker", data: dict, path: str, side: str) -> None:
    for op, body in data.items():
        if op.__class__ is not str or ((op[:1] in _FORMULA_FIRST or ";" in op) and INJECTION_RE.search(op)):
            raise MsprobeError(
                f"{side} dump.json {path}: API name {op!r} starts with a formula character (+ - = % @); refusing it as it could be a spreadsheet injection"
            )
        walker.op = op
        parts = op.split(".")
        if not isinstance(body, (dict, list)) or (isinstance(body, list) and parts[-1] != STATE_DEBUG):
            raise MsprobeError(f"{side} dump.json {path}: entry '{op}' is a {type(body).__name__}, expected an object")
        if parts[-1] == "parameters_grad" or (len(parts) > 1 and parts[-2] == "parameters_grad"):
            walker.walk(body, op, STATE_PARAMETERS_GRAD, True, 0)
            continue
        if parts[-1] == STATE_DEBUG:  # debug.json: a saved value of any shape (x.0.debug, y.0.debug.1.k)
            walker.walk(body, op, STATE_DEBUG, False, 0)
            continue
        for key, infix, state in SECTIONS:
            if key in body:
                walker.walk(body[key], f"{op}.{infix}", state, False, 0)


_COLUMNS = ("names", "api", "state", "dtype", "shape", "stat_max", "stat_min", "stat_mean", "stat_norm",
            "requires_grad", "data_name", "_md5_raw", "value")


def _flush(rows: DumpRows, walker: "_Walker") -> None:
    """Move the walker's row tuples into the columns (done per piece of a streamed file)."""
    if walker.out:
        for attr, col in zip(_COLUMNS, zip(*walker.out)):
            getattr(rows, attr).extend(col)
        walker.out = []


def _read_streamed(path: str, side: str) -> Optional[DumpRows]:
    """The rows of a big, indented dump.json read record by record (msprobe.core.dump.stream), or None
    when the file is small or its layout is not one that can be split safely (then it is parsed whole)."""
    from msprobe.core.dump import stream
    from msprobe.core.fileio import check_path, json_size_limit

    path_ok = check_path(path, f"{side} dump.json", "file")
    size = stream.file_size(path_ok)
    if size < stream.STREAM_MIN_BYTES or size > json_size_limit():
        return None
    opened = stream.open_dump(path_ok, size)
    if opened is None:
        return None
    head, pieces = opened
    try:
        rows = _rows_of(head, path, side)
        _check_task(rows, path, side)
        walker = _Walker(rows, rows.task == MODE_TENSOR, side, check=True)
        md5 = False
        error = None
        for data in pieces:
            if error is not None:
                continue  # the rest must still parse: a damaged file gets the whole-file parser's message
            try:
                _walk_records(walker, data, path, side)
            except MsprobeError as exc:
                error = exc
                continue
            _flush(rows, walker)
            if rows.task == MODE_STATISTICS and not md5:
                md5 = has_md5(data)
        if error is not None:
            raise error
        rows.has_md5 = md5
        return rows
    except stream.NotStreamable:
        return None  # the whole-file parser gives the same rows, or the right error
    finally:
        pieces.close()


def read_dump(path: str, side: str, stack_path: Optional[str] = None) -> DumpRows:
    """Parse a dump.json into rows.  ``side`` ('target'/'golden') only names the file in messages."""
    rows = _read_streamed(path, side)
    if rows is None:
        rows = _read_whole(path, side)
    if stack_path is None:
        candidate = os.path.join(os.path.dirname(path), "stack.json")
        stack_path = candidate if os.path.isfile(candidate) else None
    if stack_path:
        rows.stack = _stack_column(rows, load_stack(stack_path))
    else:
        rows.stack = []  # no stack column
    compact_columns(rows)
    return rows


def _stack_column(rows: DumpRows, stacks: Dict[str, str]):
    """The stack text on the first row of each API ('N/A' when stack.json lacks it), None on the others."""
    from msprobe.core.io.columns import CodedColumn

    api = rows.api if isinstance(rows.api, CodedColumn) else CodedColumn(rows.api)
    _, first = np.unique(api.codes, return_index=True)  # the first row of each API
    table: list = [None]
    index: Dict[str, int] = {}
    codes = np.zeros(len(api), dtype=np.int32)
    for i in first.tolist():
        text = stacks.get(api.table[int(api.codes[i])], "N/A") if stacks else "N/A"
        c = index.get(text)
        if c is None:
            c = index[text] = len(table)
            table.append(text)
        codes[i] = c
    small = np.uint8 if len(table) <= 255 else (np.uint16 if len(table) <= 65535 else np.int32)
    return CodedColumn(codes=codes.astype(small), table=table)


def compact_columns(rows: DumpRows) -> None:
    """Hold the columns of few distinct values as codes (api, state, dtype, shape, requires_grad) and the mostly
    empty ones (value, stack) as the few rows that differ: a 200 MB dump.json's rows shrink by about 40 bytes
    each.  The columns still read like lists (msprobe.core.io.columns)."""
    from msprobe.core.io.columns import CodedColumn, SparseColumn

    for attr in ("api", "state", "dtype", "shape", "requires_grad"):
        col = getattr(rows, attr)
        if isinstance(col, list):
            setattr(rows, attr, CodedColumn(col))
        getattr(rows, attr).finish()
    if isinstance(rows.value, list):
        rows.value = SparseColumn(rows.value, NO_VALUE)
    if isinstance(rows.stack, list) and rows.stack:
        rows.stack = CodedColumn(rows.stack)  # (one text per stack.json group, None on most rows)


def _read_whole(path: str, side: str) -> DumpRows:
    try:
        obj = load_json(path, f"{side} dump.json")
    except MsprobeError:
        obj = _repaired(path, side)   # a dump.json cut short: its complete records, with a warning
        if obj is None:
            raise
    rows = _rows_of(obj, path, side)
    if "data" not in obj:
        raise MsprobeError(f"{side} dump.json {path} has no 'data'; the file is damaged or not a dump.json")
    data = obj["data"]
    if not isinstance(data, dict):
        raise MsprobeError(f"{side} dump.json {path}: 'data' is a {type(data).__name__}, expected an object; the file is damaged")
    _check_task(rows, path, side)
    walker = _Walker(rows, rows.task == MODE_TENSOR, side, check=True)
    _walk_records(walker, data, path, side)
    _flush(rows, walker)
    if rows.task == MODE_STATISTICS:
        rows.has_md5 = has_md5(data)
    return rows


def dump_mode(target: DumpRows, golden: DumpRows) -> str:
    """statistics / md5 / tensor from the two dumps' tasks (compare.md §2.2)."""
    if target.task != golden.task:
        raise MsprobeError(
            f"the target dump is task {target.task!r} ({target.path}) but the golden dump is task {golden.task!r} ({golden.path}); compare needs two dumps of the same task"
        )
    if target.task == MODE_TENSOR:
        return MODE_TENSOR
    if target.has_md5 != golden.has_md5:
        (md5_side, md5_dump), (stat_side, stat_dump) = (
            (("target", target), ("golden", golden)) if target.has_md5 else (("golden", golden), ("target", target))
        )
        raise MsprobeError(
            f"the {md5_side} dump.json {md5_dump.path} holds md5 values but the {stat_side} dump.json {stat_dump.path} "
            f"holds statistics; dump both sides with the same summary_mode"
        )
    return MODE_MD5 if target.has_md5 else MODE_STATISTICS
