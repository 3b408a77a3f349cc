"""Safe file handling shared by every command.

* Inputs are checked before use (exists, right kind, not a symbolic link, readable) and never modified.
* JSON is parsed with orjson; the reference's dumps may contain the non-standard tokens ``NaN``,
  ``Infinity`` and ``-Infinity``, which orjson rejects: those are swapped for marker strings, parsed with
  orjson and turned back into floats (the stdlib parser is the last resort, e.g. a token inside a string).
* A file is only parsed when it fits the memory rule (:func:`json_size_limit`).
* Outputs are written atomically: to a temporary file in the destination directory, then linked into
  place with ``os.link``, which fails instead of replacing an existing file, so a result is never
  silently overwritten and a crash never leaves a partial file behind.
"""

from __future__ import annotations

import errno
import json
import os
import re
import time
import shutil
import tempfile
from typing import Callable, Optional

from msprobe.core.errors import MsprobeError

# Parsing a dump.json into Python objects and then into the compare tables costs about this many
# times the file size in memory (measured by benchmarks/bench_memory_ratio.py on generated dumps;
# see docs/compare.md).  Used to refuse files that cannot fit before trying.
JSON_MEMORY_FACTOR = 12
# Hard cap whatever the machine: beyond this a dump should be split (by step, rank, scope or list).
JSON_HARD_LIMIT = 10 * 1024 ** 3


def human_size(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(n) < 1024 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TB"  # pragma: no cover


def available_memory() -> int:
    """Bytes of memory this process may still use (MSPROBE_MEMORY_LIMIT overrides, in bytes)."""
    override = os.environ.get("MSPROBE_MEMORY_LIMIT")
    if override:
        try:
            return int(float(override))
        except ValueError:
            raise MsprobeError(f"MSPROBE_MEMORY_LIMIT={override!r} is not a number of bytes; unset it or give e.g. 8e9")
    try:
        with open("/proc/meminfo", "r", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):  # pragma: no cover - non-POSIX
        return 16 * 1024 ** 3


def json_size_limit() -> int:
    return min(JSON_HARD_LIMIT, available_memory() // JSON_MEMORY_FACTOR)


def check_path(path: str, what: str, kind: str = "any") -> str:
    """Validate an input path; return it normalised.  kind: 'file', 'dir' or 'any'."""
    if not isinstance(path, (str, os.PathLike)):
        raise MsprobeError(f"{what}: expected a path (a string), got {type(path).__name__} {str(path)[:80]}; correct it")
    if not path:
        raise MsprobeError(f"{what}: no path given")
    if "\0" in os.fspath(path):
        raise MsprobeError(f"{what} {os.fspath(path)[:200]!r} holds a NUL character; correct the path")
    if len(os.path.basename(os.fspath(path))) > 255 or len(os.fspath(path)) > 4096:
        raise MsprobeError(f"{what} {os.fspath(path)[:100]}... is {len(os.fspath(path))} characters long, over the "
                           f"file system's limit (255 per name, 4096 in all); use a shorter path")
    if os.path.islink(path):
        raise MsprobeError(
            f"{what} {path} is a symbolic link; msprobe does not follow links on inputs for safety: pass the real path ({os.path.realpath(path)})"
        )
    if not os.path.exists(path):
        raise MsprobeError(f"{what} {path} does not exist; check the path")
    if kind == "file" and not os.path.isfile(path):
        raise MsprobeError(f"{what} {path} is a directory, expected a file")
    if kind == "dir" and not os.path.isdir(path):
        raise MsprobeError(f"{what} {path} is a file, expected a directory")
    if not os.access(path, os.R_OK):
        raise MsprobeError(f"{what} {path} is not readable by this user; fix its permissions")
    return os.path.abspath(path)


_MARKERS = {b"NaN": float("nan"), b"Infinity": float("inf"), b"-Infinity": float("-inf")}
_MARK_PREFIX = "\x00msprobe:"
# marker string -> float, for callers of load_json(..., nonfinite_markers=True)
NONFINITE_MARKERS = {_MARK_PREFIX + k.decode(): v for k, v in _MARKERS.items()}


def _restore_nonfinite(obj):
    """Replace the marker strings put in by :func:`_loads` with the floats they stand for (iterative)."""
    values = NONFINITE_MARKERS
    stack = [obj]
    while stack:
        c = stack.pop()
        for k, v in (c.items() if c.__class__ is dict else enumerate(c)):
            vc = v.__class__
            if vc is str:
                if v[:1] == "\x00" and v in values:
                    c[k] = values[v]
            elif vc is dict or vc is list:
                stack.append(v)
    return obj


_BEFORE = frozenset(b":,[ \t\r\n")
_AFTER = frozenset(b",]} \t\r\n")


def _mark_nonfinite(data: bytes):
    """Replace bare NaN / Infinity / -Infinity tokens with marker strings; (new bytes, count)."""
    hits = []
    for token in (b"NaN", b"Infinity"):
        i = data.find(token)
        while i != -1:
            start = i - 1 if token == b"Infinity" and i > 0 and data[i - 1] == 45 else i  # 45 = '-'
            end = i + len(token)
            if start > 0 and data[start - 1] in _BEFORE and (end >= len(data) or data[end] in _AFTER):
                hits.append((start, end))
            i = data.find(token, end)
    if not hits:
        return data, 0
    hits.sort()
    parts = []
    pos = 0
    for a, b in hits:
        parts.append(data[pos:a])
        parts.append(b'"\\u0000msprobe:' + data[a:b] + b'"')
        pos = b
    parts.append(data[pos:])
    return b"".join(parts), len(hits)


#: deepest nesting of arrays/objects accepted in a JSON file.  Real dumps, stacks, construct and config
#: files nest at most 6 levels (the reference fixtures); code that walks values recursively (the report
#: writers' text of a value, graph nodes, the dump config) must never meet a nesting bomb.
JSON_MAX_DEPTH = 100

_DEPTH_KEEP = b'"[]{}'
_DEPTH_DELETE = bytes(b for b in range(256) if b not in _DEPTH_KEEP)


class JsonTooDeep(ValueError):
    """A JSON document nested deeper than :data:`JSON_MAX_DEPTH` (a ValueError: parse fallbacks apply)."""

    def __init__(self, depth: int):
        super().__init__(f"nested {depth} levels deep, over the limit of {JSON_MAX_DEPTH}")
        self.depth = depth


def json_depth(data: bytes) -> int:
    """Deepest nesting of arrays/objects in well-formed JSON bytes (brackets inside strings do not count).

    Vectorised: escapes and everything but quotes and brackets are dropped with C-level bytes methods,
    then the structural brackets are summed with numpy (about 3 ms per MB)."""
    import numpy as np

    if b"\\" in data:
        data = data.replace(b"\\\\", b"").replace(b'\\"', b"")
    s = data.translate(None, _DEPTH_DELETE).replace(b'""', b"")
    if not s:
        return 0
    v = np.frombuffer(s, np.uint8)
    sign = ((v == 91) | (v == 123)).astype(np.int8) * 2 - 1
    if b'"' in s:  # strings holding brackets: keep the brackets with an even number of quotes before them
        quote = v == 34
        sign = sign[((np.cumsum(quote, dtype=np.int64) & 1) == 0) & ~quote]
        if not len(sign):
            return 0
    return max(0, int(np.cumsum(sign, dtype=np.int32).max()))


def _check_depth(data: bytes, obj):
    if obj.__class__ in (dict, list) and len(data) > 2 * JSON_MAX_DEPTH:
        depth = json_depth(data)
        if depth > JSON_MAX_DEPTH:
            raise JsonTooDeep(depth)
    return obj


def _loads(data: bytes, keep_markers: bool = False):
    """Parse JSON bytes.  ``keep_markers``: leave NaN/Infinity as the marker strings of
    :data:`NONFINITE_MARKERS` for a caller that converts them itself while it walks the records anyway.
    Raises :class:`JsonTooDeep` for a nesting bomb, ValueError for anything else that is not JSON."""
    import orjson

    try:
        return _check_depth(data, orjson.loads(data))
    except orjson.JSONDecodeError as exc:
        if "depth limit" in str(exc) or "recursion limit" in str(exc):
            raise JsonTooDeep(json_depth(data)) from None
    # The reference writes NaN / Infinity as bare tokens (invalid JSON).  Turn them into marker strings,
    # parse with orjson, then put the floats back: several times faster than the stdlib parser.
    marked, n = _mark_nonfinite(data)
    if n:
        try:
            obj = _check_depth(marked, orjson.loads(marked))
            return obj if keep_markers else _restore_nonfinite(obj)
        except orjson.JSONDecodeError:
            pass
    try:
        return _check_depth(data, json.loads(data))
    except RecursionError:  # the stdlib parser recurses: a deep (and otherwise invalid) document
        raise JsonTooDeep(max(json_depth(data), JSON_MAX_DEPTH + 1)) from None


#: largest number of values a yaml config may expand to (aliases can make a small file huge)
YAML_MAX_VALUES = 1_000_000


def _shape_of(obj):
    """(depth, expanded number of values) of a parsed yaml value; depth -1 when it contains itself.

    Iterative, each container visited once (yaml aliases share containers), so a nesting bomb, a
    billion-laughs file or a self-referencing anchor costs nothing to measure."""
    memo = {}
    stack = [(obj, False)]
    on_path = set()
    while stack:
        node, done = stack.pop()
        key = id(node)
        if done:
            on_path.discard(key)
            kids = node.values() if node.__class__ is dict else node
            depth, size = 1, 1
            for k in kids:
                if k.__class__ in (dict, list):
                    d, n = memo[id(k)]
                    if d < 0:
                        memo[key] = (-1, 0)
                        break
                    depth = max(depth, d + 1)
                    size += n
                else:
                    size += 1
            else:
                memo[key] = (depth, min(size, 1 << 62))
            continue
        if node.__class__ not in (dict, list) or key in memo:
            continue
        if key in on_path:
            return -1, 0
        on_path.add(key)
        stack.append((node, True))
        for k in (node.values() if node.__class__ is dict else node):
            if k.__class__ in (dict, list):
                if id(k) in on_path:
                    return -1, 0
                stack.append((k, False))
    if obj.__class__ not in (dict, list):
        return 0, 1
    return memo[id(obj)]


def yaml_safe_load(stream, what: str, path: str):
    """``yaml.safe_load`` (yaml errors propagate to the caller's handling) that refuses, in one line, a
    value nested deeper than :data:`JSON_MAX_DEPTH`, one that contains itself (a recursive anchor) and
    one that aliases expand beyond :data:`YAML_MAX_VALUES` values."""
    import yaml

    name = f"{what} {path}".strip()
    try:
        obj = yaml.safe_load(stream)
    except RecursionError:
        raise MsprobeError(f"{name} is nested too deep (over Python's recursion limit; msprobe accepts "
                           f"{JSON_MAX_DEPTH} levels); correct the file") from None
    depth, size = _shape_of(obj)
    if depth < 0:
        raise MsprobeError(f"{name} holds a value that contains itself (a recursive yaml anchor); correct the file")
    if depth > JSON_MAX_DEPTH:
        raise MsprobeError(f"{name} is nested {depth} levels deep, over the limit of {JSON_MAX_DEPTH}; correct the file")
    if size > YAML_MAX_VALUES:
        raise MsprobeError(f"{name}: its aliases expand to {size} values, over the limit of {YAML_MAX_VALUES} "
                           f"(a yaml alias bomb?); correct the file")
    return obj


def too_deep_error(what: str, path: str, exc: "JsonTooDeep") -> MsprobeError:
    return MsprobeError(f"{what} {path} is {exc}; no dump or config nests that deep: the file is damaged or "
                        f"was not written by msprobe, re-run the dump or correct the file")


def load_json(path: str, what: str, limit: Optional[int] = None, nonfinite_markers: bool = False,
              remedy: Optional[str] = None, empty_remedy: Optional[str] = None):
    """Parse a JSON file with size and memory checks; errors become one clear MsprobeError line.
    ``remedy`` / ``empty_remedy``: what the user should do with an invalid / empty file (default: re-run
    the dump, right for files a dump wrote; a config file the user wrote says to fix it)."""
    path = check_path(path, what, "file")
    size = os.path.getsize(path)
    limit = json_size_limit() if limit is None else limit
    if size > limit:
        raise MsprobeError(
            f"{what} {path} is {human_size(size)}, over the limit of {human_size(limit)} on this machine "
            f"(msprobe needs about {JSON_MEMORY_FACTOR}x a JSON file's size in memory and this machine has "
            f"{human_size(available_memory())} available; hard cap {human_size(JSON_HARD_LIMIT)}): dump fewer steps, "
            f"ranks or APIs (config 'step', 'rank', 'scope', 'list') or run on a machine with more memory"
        )
    try:
        with open(path, "rb") as fh:
            data = fh.read()
    except OSError as exc:
        raise MsprobeError(f"{what} {path} cannot be read: {exc.strerror}")
    if not data.strip():
        raise MsprobeError(f"{what} {path} is empty; {empty_remedy or 're-run the dump or pick the right file'}")
    try:
        return _loads(data, nonfinite_markers)
    except JsonTooDeep as exc:
        raise too_deep_error(what, path, exc) from None
    except (ValueError, RecursionError) as exc:
        msg = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise MsprobeError(f"{what} {path} is not valid JSON ({msg}); "
                           f"{remedy or 'the file is truncated or damaged: re-run the dump'}")


def load_dump_json(path: str, what: str = "dump.json", nonfinite_markers: bool = False, chunk: int = 4000):
    """Parse a dump.json like :func:`load_json`, with a much lower memory peak on big files.

    A parser holds its own tree of the whole document besides the Python objects (for an 85 MB dump the
    peak is ~2.5x the final objects).  Dump writers indent their output, so every entry of ``data`` starts
    on its own line at one known indentation: the entries are cut there and parsed ``chunk`` at a time.
    Any surprise in the layout falls back to parsing the whole file.
    """
    path = check_path(path, what, "file")
    size = os.path.getsize(path)
    if size < (8 << 20):
        return load_json(path, what, nonfinite_markers=nonfinite_markers)
    limit = json_size_limit()
    if size > limit:
        return load_json(path, what, limit)  # raises the size error
    try:
        with open(path, "rb") as fh:
            raw = fh.read()
    except OSError as exc:
        raise MsprobeError(f"{what} {path} cannot be read: {exc.strerror}")
    obj = _chunked(raw, nonfinite_markers, chunk)
    if obj is None:
        return load_json(path, what, nonfinite_markers=nonfinite_markers)
    return obj


def data_key(buf, nl: int):
    """Where ``data`` sits in an indented dump.json (bytes or mmap), given the offset ``nl`` of its first
    newline: ``(indent unit, offset of the '"data": {' line, offset just after it)``, or None when the
    layout is not the usual one (one key per line at one indentation, a key on the second line)."""
    j = nl + 1
    while buf[j:j + 1] == b" ":
        j += 1
    u = j - nl - 1
    if u <= 0 or buf[j:j + 1] != b'"':
        return None
    i = buf.find(b"\n" + b" " * u + b'"data": {')
    if i < 0:
        return None
    return u, i, i + len(b"\n" + b" " * u + b'"data": {')


def dump_index(raw: bytes, markers: bool = False):
    """(header fields, entry offsets) of an indented dump.json, or None when its layout is not the usual one.

    ``offsets[i]`` is where entry i of ``data`` starts; the last element is where ``data`` ends.
    """
    sec = data_key(raw, 1) if raw.startswith(b"{\n") else None
    if sec is None:
        return None
    u, i, start = sec
    pad = b" " * u
    close = raw.find(b"\n" + pad + b"}", start)
    if close < 0:
        return None
    try:
        head = _loads(raw[:i].rstrip(b", \n") + b"}", markers)
        tail = raw[close + 1 + u + 1:].strip()
        if tail not in (b"}", b""):
            rest = _loads(b"{" + tail.lstrip(b",").strip(), markers) if tail.lstrip(b",").strip() != b"}" else {}
            if not isinstance(rest, dict):
                return None
            head.update(rest)
    except ValueError:
        return None
    if not isinstance(head, dict):
        return None
    marker = b"\n" + pad + pad + b'"'
    offsets = []
    j = raw.find(marker, start, close)
    while j >= 0:
        offsets.append(j)
        j = raw.find(marker, j + 1, close)
    if not offsets and raw[start:close].strip():
        return None
    offsets.append(close)
    return head, offsets


def parse_entries(raw: bytes, offsets: list, a: int, b: int, markers: bool = False, chunk: int = 4000):
    """Entries a..b-1 of an indexed dump.json as a dict (None if a piece does not parse as expected)."""
    data: dict = {}
    try:
        for x in range(a, b, chunk):
            y = min(x + chunk, b)
            piece = raw[offsets[x]:offsets[y]].rstrip(b", \n")
            part = _loads(b"{" + piece + b"}", markers)
            if not isinstance(part, dict):
                return None
            data.update(part)
    except ValueError:
        return None
    if len(data) != b - a:
        return None  # a key repeated or a split in the wrong place: let the full parser decide
    return data


def entry_name(raw: bytes, offset: int) -> Optional[str]:
    """The key of the entry starting at ``offset`` (None when it holds escapes)."""
    q = raw.find(b'"', offset)
    e = raw.find(b'"', q + 1)
    name = raw[q + 1:e]
    if b"\\" in name:
        return None
    return name.decode("utf-8", "replace")


def repair_truncated_dump(path: str):
    """A dump.json cut short (a write that never finished: the reference writes it in place, or a half
    copy): ``(object, last complete record name, records kept)`` from the complete entries of ``data``,
    or None when the file is not an indented dump.json cut inside ``data`` (then it cannot be repaired).

    Only the layout every dumper writes is handled: one entry of ``data`` per line at one indentation;
    the entry the cut falls in is dropped, every entry kept parses whole."""
    try:
        if os.path.getsize(path) > json_size_limit():
            return None
        with open(path, "rb") as fh:
            raw = fh.read()
    except OSError:
        return None
    sec = data_key(raw, 1) if raw.startswith(b"{\n") else None
    if sec is None:
        return None
    u, i, start = sec
    pad = b" " * u
    if raw.find(b"\n" + pad + b"}", start) >= 0:
        return None  # data is closed: not a truncation inside data
    try:
        head = _loads(raw[:i].rstrip(b", \n") + b"}")
    except ValueError:
        return None
    if not isinstance(head, dict):
        return None
    marker = b"\n" + pad + pad + b'"'
    offsets = []
    j = raw.find(marker, start)
    while j >= 0:
        offsets.append(j)
        j = raw.find(marker, j + 1)
    if len(offsets) < 2:
        return None
    # entries 0 .. n-2 end where the next one starts; the last one is where the cut fell
    data = parse_entries(raw, offsets, 0, len(offsets) - 1)
    if not data:
        return None
    head["data"] = data
    return head, entry_name(raw, offsets[-2]), len(data)


def _chunked(raw: bytes, markers: bool, chunk: int):
    idx = dump_index(raw, markers)
    if idx is None:
        return None
    head, offsets = idx
    data = parse_entries(raw, offsets, 0, len(offsets) - 1, markers, chunk)
    if data is None:
        return None
    head["data"] = data
    return head


def ensure_output_dir(path: str) -> str:
    """Create the output directory (mode 0750) if needed and check that we can write into it."""
    path = os.path.abspath(path or "./output")
    if os.path.exists(path) and not os.path.isdir(path):
        raise MsprobeError(f"output path {path} exists and is not a directory; choose another -o")
    try:
        make_dirs(path, 0o750)
    except OSError as exc:
        raise MsprobeError(f"cannot create output directory {path}: {exc.strerror}; choose another -o")
    if not os.access(path, os.W_OK | os.X_OK):
        raise MsprobeError(f"output directory {path} is not writable by this user; choose another -o or fix its permissions")
    clean_stale_temps(path)
    return path


def unique_path(path: str) -> str:
    """``path`` if free, else ``stem_1.ext``, ``stem_2.ext`` ... (never an existing file)."""
    if not os.path.lexists(path):
        return path
    stem, ext = os.path.splitext(path)
    if stem.endswith(".vis"):  # keep double extensions such as .vis.db together
        stem, ext = stem[:-4], ".vis" + ext
    i = 1
    while os.path.lexists(f"{stem}_{i}{ext}"):
        i += 1
    return f"{stem}_{i}{ext}"


def place_file(src: str, final_path: str, mode: int = 0o640) -> str:
    """Give the finished file ``src`` (in the same directory tree) the name ``final_path`` without ever
    replacing a file: a hard link under a free name (``_1``, ``_2`` ... when taken), else a copy."""
    os.chmod(src, mode)
    target = final_path
    while True:
        try:
            os.link(src, target)
            return target
        except FileExistsError:
            target = unique_path(target)
        except OSError:
            return atomic_write(final_path, lambda tmp: shutil.copyfile(src, tmp), mode)


#: ``observer(kind, path)`` told of every temporary file ("tmp") and finished output ("done") of
#: :func:`atomic_write`; a worker process (msprobe.core.procpool) sets it so that its parent can remove
#: them when it has to kill the worker (Ctrl-C, another worker's failure).
write_observer: Optional[Callable[[str, str], None]] = None


def atomic_write(final_path: str, write: Callable[[str], None], mode: int = 0o640, defer: bool = False):
    """Run ``write(tmp_path)`` and move the result to ``final_path`` without ever replacing a file.

    Returns the path written (``final_path`` or, if that name was taken meanwhile, a numbered variant).
    The temporary file is removed on any failure.  ``defer``: return a :class:`PendingWrite` instead, the
    file complete under its temporary name, for outputs that must appear together (:func:`commit_together`).
    """
    directory = os.path.dirname(os.path.abspath(final_path))
    try:
        # the pid in the name lets a later run remove what a killed run left (clean_stale_temps)
        fd, tmp = tempfile.mkstemp(prefix=f"{TEMP_PREFIX}{temp_tag()}-", suffix=".tmp", dir=directory)
    except OSError as exc:
        raise output_error(exc, final_path) from None
    os.close(fd)
    if write_observer is not None:
        write_observer("tmp", tmp)
    pending = None
    try:
        try:
            write(tmp)
            os.chmod(tmp, mode)
            if defer:
                pending = PendingWrite(tmp, final_path)
                return pending
            target = _link_free(tmp, final_path)
        except MsprobeError:
            raise
        except Exception as exc:  # noqa: BLE001 - a full disk, a quota, permissions: one clear line
            err = output_error(exc, final_path, tmp)
            if err is None:
                raise
            raise err from None
        if write_observer is not None:
            write_observer("done", target)
        return target
    finally:
        if pending is None and os.path.exists(tmp):
            os.unlink(tmp)


class PendingWrite:
    """An output written completely under its temporary name (``atomic_write(..., defer=True)``)."""

    def __init__(self, tmp: str, final_path: str):
        self.tmp = tmp
        self.final_path = final_path

    def commit(self) -> str:
        """Give it its final name (never replacing a file); returns the path."""
        try:
            target = _link_free(self.tmp, self.final_path)
        except OSError as exc:
            err = output_error(exc, self.final_path)
            raise (err or exc) from None
        finally:
            self.discard()
        if write_observer is not None:
            write_observer("done", target)
        return target

    def discard(self) -> None:
        try:
            os.unlink(self.tmp)
        except FileNotFoundError:
            pass


def commit_together(pending: list) -> list:
    """Name several finished outputs one right after the other (two links: a kill between them is
    practically impossible); on a failure the ones not named yet are removed.  Returns their paths."""
    out = []
    try:
        for p in pending:
            out.append(p.commit())
    finally:
        for p in pending[len(out):]:
            p.discard()
    return out


#: temporary files of :func:`atomic_write` are named ``.msprobe-<pid>-<random>.tmp`` (graph work dirs
#: ``.msprobe-graph-<pid>-<random>``)
TEMP_PREFIX = ".msprobe-"
_STALE_RE = re.compile(r"^\.msprobe-(?:graph-)?(\d+)(?:@([A-Za-z0-9]{1,40}))?-[^/]*$")
#: a temporary file of another machine (a shared file system) is only removed when older than this
FOREIGN_STALE_SECONDS = 24 * 3600


def _host() -> str:
    import socket

    try:
        name = socket.gethostname()
    except OSError:  # pragma: no cover
        name = ""
    return re.sub(r"[^A-Za-z0-9]", "", name)[:40] or "host"


def temp_tag() -> str:
    """``<pid>@<host>``: who owns a temporary name (see :func:`clean_stale_temps`)."""
    return f"{os.getpid()}@{_host()}"

_NO_SPACE = (errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC), errno.EFBIG)


def _is_no_space(exc: BaseException) -> bool:
    if isinstance(exc, OSError) and exc.errno in _NO_SPACE:
        return True
    # sqlite3.OperationalError, zipfile/openpyxl wrappers: judged by their message
    text = str(exc).lower()
    return "disk is full" in text or "no space left" in text or "quota exceeded" in text


def output_error(exc: BaseException, final_path: str, tmp: Optional[str] = None) -> Optional[MsprobeError]:
    """The one-line MsprobeError for a failure writing the output ``final_path`` (None: not an I/O problem,
    a bug to show as such).  A full disk names the folder, what was written when it filled and what is free."""
    directory = os.path.dirname(os.path.abspath(final_path))
    name = os.path.basename(final_path)
    if _is_no_space(exc):
        written = 0
        if tmp:
            try:
                written = os.path.getsize(tmp)
            except OSError:
                pass
        try:
            st = os.statvfs(directory)
            free = human_size(st.f_bavail * st.f_frsize + written)  # once the partial file is removed
        except OSError:
            free = "?"
        need = f"more than {human_size(written)} needed, " if written else ""
        return MsprobeError(f"no space left on device in {directory} while writing {name} ({need}{free} free); "
                            f"free some space or choose another output directory (nothing was left under that name)")
    if isinstance(exc, OSError):
        what = exc.strerror or str(exc)
        if exc.errno == errno.ENAMETOOLONG:
            return MsprobeError(f"cannot write {name[:80]}{'...' if len(name) > 80 else ''} in {directory[:200]}: "
                                f"file name too long ({len(name)} characters); use shorter names")
        if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
            return MsprobeError(f"cannot write {name} in {directory}: {what}; choose another output directory "
                                f"or fix its permissions")
        return MsprobeError(f"cannot write {name} in {directory}: {what}")
    return None


def disk_full_error(exc: BaseException, directory: str) -> Optional[MsprobeError]:
    """The one-line MsprobeError for a full disk (or quota) hit while writing into ``directory``, else None
    (for writers that do not go through :func:`atomic_write`, e.g. graph parts and worker processes)."""
    if isinstance(exc, MsprobeError) or not _is_no_space(exc):
        return None
    try:
        st = os.statvfs(directory)
        free = f" ({human_size(st.f_bavail * st.f_frsize)} free)"
    except OSError:
        free = ""
    return MsprobeError(f"no space left on device in {directory}{free}; free some space or choose another "
                        f"output directory (no partial output was left)")


def _pid_alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # EPERM: alive, another user's
        return True
    return True


def clean_stale_temps(directory: str) -> int:
    """Remove the temporary files (and graph work dirs) that a killed msprobe left in ``directory``:
    those named with the pid of a process of this machine that no longer runs.  A running msprobe's are
    left alone (two commands may share an output directory); another machine's (a shared file system) only
    when older than :data:`FOREIGN_STALE_SECONDS`.  Returns how many were removed."""
    removed = 0
    try:
        names = os.listdir(directory)
    except OSError:
        return 0
    for name in names:
        m = _STALE_RE.match(name)
        if not m:
            continue
        path = os.path.join(directory, name)
        if m.group(2) is not None and m.group(2) != _host():
            try:
                if time.time() - os.lstat(path).st_mtime < FOREIGN_STALE_SECONDS:
                    continue
            except OSError:
                continue
        elif _pid_alive(int(m.group(1))):
            continue
        try:
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path, ignore_errors=True)
            else:
                os.unlink(path)
            removed += 1
        except OSError:
            pass
    return removed


def safe_name(name: str, what: str) -> str:
    """``name`` as one file name inside an output folder: refused when it has a directory part, is
    ``.``/``..``, holds a NUL or is longer than a file name may be (names come from dump.json: a
    module or API name must not place a file outside the output folder)."""
    if (not isinstance(name, str) or not name or name in (".", "..") or "/" in name or "\\" in name
            or "\x00" in name or len(name.encode("utf-8", "surrogatepass")) > 255):
        shown = repr(name)[:120]
        raise MsprobeError(f"{what} {shown} cannot be used as a file name (it must be one name of at most 255 "
                           f"bytes, without '/', '\\' or '..'); the dump entry is damaged or was edited")
    return name


def make_dirs(path: str, mode: int = 0o750) -> str:
    """``os.makedirs`` where every directory created gets ``mode`` (os.makedirs gives the levels above the
    last one the default 0777 & ~umask, i.e. group-writable under umask 002)."""
    path = os.path.abspath(path)
    missing = []
    p = path
    while not os.path.isdir(p):
        missing.append(p)
        parent = os.path.dirname(p)
        if parent == p:
            break
        p = parent
    for d in reversed(missing):
        try:
            os.mkdir(d, mode)
        except FileExistsError:
            if not os.path.isdir(d):
                raise
    return path


def _atomic_place(tmp: str, final_path: str, write: Callable[[str], None], mode: int) -> str:
    write(tmp)
    os.chmod(tmp, mode)
    return _link_free(tmp, final_path)


def _link_free(tmp: str, final_path: str) -> str:
    """Hard-link the finished ``tmp`` to ``final_path`` or the next free numbered name; the path used."""
    target = final_path
    while True:
        try:
            os.link(tmp, target)
            break
        except FileExistsError:
            target = unique_path(target)
        except OSError as exc:
            if exc.errno in (errno.EPERM, errno.ENOTSUP, errno.EXDEV):  # filesystem without hard links
                if os.path.lexists(target):
                    target = unique_path(target)
                    continue
                os.replace(tmp, target)
                return target
            raise
    return target
