"""Writing dump files (dump.json, stack.json, construct.json, debug.json): framework-free.

Non-finite statistics are written as the bare literals ``NaN``, ``Infinity`` and ``-Infinity``,
exactly as MindStudio Probe writes them (Python's ``json`` module and both compare tools read them;
turning them into ``null`` would hide the overflow the user is looking for). Callers mark such
numbers with :func:`number`, which returns the float itself when it is finite and a marker
otherwise; the marker is serialised through orjson's ``default`` hook and spliced back as a literal.

Files are written to a temporary name in the same directory and renamed over the target, so a
reader never sees half a file.
"""
import math
import os

import orjson

_TOKENS = {}


class NonFinite:
    """Marker for a float that JSON cannot hold; serialises as a bare NaN/Infinity literal."""

    __slots__ = ("literal",)

    def __init__(self, literal):
        self.literal = literal

    def __repr__(self):
        return self.literal


NAN = NonFinite("NaN")
POS_INF = NonFinite("Infinity")
NEG_INF = NonFinite("-Infinity")
_TOKENS = {m: "\x00msprobe:" + m.literal for m in (NAN, POS_INF, NEG_INF)}
_SPLICE = [(orjson.dumps(tok), m.literal.encode()) for m, tok in _TOKENS.items()]


def number(v):
    """``v`` when finite (or not a float), else the matching :class:`NonFinite` marker."""
    if v.__class__ is float and not math.isfinite(v):
        if v != v:
            return NAN
        return POS_INF if v > 0 else NEG_INF
    return v


def _default(obj):
    tok = _TOKENS.get(obj)
    if tok is not None:
        return tok
    if isinstance(obj, NonFinite):
        return "\x00msprobe:" + obj.literal
    raise TypeError(f"cannot write {type(obj).__name__} to JSON")


def _lenient(obj):
    try:
        return _default(obj)
    except TypeError:
        return str(obj)


def dumps(obj, indent=True, lenient=False):
    """Serialise ``obj`` to JSON bytes (2-space indent by default), NaN/Infinity as literals. ``lenient``: a value
    JSON has no type for is written as its ``str()`` instead of raising TypeError."""
    opt = orjson.OPT_INDENT_2 if indent else 0
    data = orjson.dumps(obj, default=_lenient if lenient else _default, option=opt)
    if b"\\u0000msprobe:" in data:
        for token, literal in _SPLICE:
            data = data.replace(token, literal)
    return data


def write_json(path, obj, indent=True, mode=0o640):
    """Write ``obj`` as JSON to ``path`` through a temporary file and an atomic rename."""
    return write_bytes(path, dumps(obj, indent), mode)


def write_bytes(path, data, mode=0o640):
    """Write ``data`` to ``path`` through a temporary file and an atomic rename."""
    def fill(fh):
        fh.write(data)
    return write_file(path, fill, mode)


def _open_temp(path, mode):
    """A new temporary file next to ``path``: created exclusively (O_EXCL: never a file or link planted
    there), ``mode`` from the start.  Returns (fd, temporary path)."""
    directory = os.path.dirname(path) or "."
    base = os.path.basename(path)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    for k in range(100):
        tmp = os.path.join(directory, f".{base}.{os.getpid()}{'.' + str(k) if k else ''}.tmp")
        try:
            return os.open(tmp, flags, mode), tmp
        except FileExistsError:
            continue
    raise FileExistsError(f"no free temporary name next to {path}")


def write_file(path, fill, mode=0o640):
    """Write ``path`` atomically: ``fill(binary file object)`` writes the content into a temporary file in
    the same directory (mode ``mode``), which is renamed to ``path`` once complete.  A kill or a full disk
    at any moment leaves the complete file or none under ``path``; the temporary file is removed on failure
    (a kill -9 leaves ``.<name>.<pid>.tmp``, which no reader opens)."""
    fd, tmp = _open_temp(path, mode)

    def _fill():
        with os.fdopen(fd, "wb") as f:
            fill(f)

    return _commit(tmp, path, _fill)


def write_path(path, write, mode=0o640):
    """Like :func:`write_file` for writers that want a path (``write(tmp_path)``, e.g. ``torch.save``):
    the temporary file is created empty with ``mode`` first, so the writer only truncates and fills it."""
    fd, tmp = _open_temp(path, mode)
    os.close(fd)
    return _commit(tmp, path, lambda: write(tmp))


def _commit(tmp, path, write):
    """Run ``write()`` (which fills ``tmp``), then rename ``tmp`` to ``path``; on any failure remove ``tmp``."""
    try:
        write()
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    return path


def write_step_files(step_dir, files, submit=None):
    """Write a step's JSON files: ``files`` is [(file name, object), ...] (dump.json, stack.json, ...).

    With ``submit`` (async dump: a callable running a function on the writer thread) the objects are
    serialised now, because the caller keeps changing them, and written on that thread."""
    from msprobe.core.progress import slow_stage

    failed = []
    blobs = []
    for name, obj in files:
        slow_stage(f"serialising {name}" if submit is not None else f"writing {name}", _entries(obj), "entries")
        try:
            blob = dumps(obj)
        except TypeError as exc:
            # a value JSON has no type for (a bug in a recorder): the step's file is written all the same, with
            # that value as text, and the problem goes to dump_error_info.log (raised below, once all are written)
            failed.append(f"{name}: {exc}")
            blob = dumps(obj, lenient=True)
        if submit is not None:
            blobs.append((name, blob))
        else:
            write_bytes(os.path.join(step_dir, name), blob)
    if submit is not None:
        def write_all():
            for name, blob in blobs:
                write_bytes(os.path.join(step_dir, name), blob)
        submit(write_all)
    if failed:
        raise TypeError("; ".join(failed) + " (written with the value's text in its place)")


def _entries(obj):
    """How many records a step file holds (for the slow-flush lines): dump.json's data, else top-level keys."""
    if isinstance(obj, dict):
        data = obj.get("data")
        return len(data) if isinstance(data, dict) else len(obj)
    return len(obj) if isinstance(obj, list) else None
