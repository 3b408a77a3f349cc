"""The config_check pack: a zip of plain entries (JSON or text), written and read safely.

Layout (the reference's names, so that packs travel both ways)::

    env                                          JSON object of the environment variables
    pip                                          "Name=version" lines of the installed distributions
    hyperparameters/hyperparameters_static.json  parsed from launch scripts / yaml (-d, shell_path)
    hyperparameters/hyperparameters_dynamic.json Megatron's get_args() (dynamic mode)
    weights/step{S}/rank{R}/weight.json          {param: {max, min, mean, norm}} before forward S
    dataset/step{S}/rank{R}/dataset.json         {"args": {...}, "kwargs": {...}} stats of forward S's inputs
    random/rank{R}.json                          {op: [{"count", "stack"}]} random calls up to the first forward
    random/step{S}/rank{R}.json                  (msprobe) random calls made since the previous forward
    msprobe_pack.json                            (msprobe) {"writer": "msprobe", "version": ...}: this pack
                                                 has the per-step random files (the reference ignores it)

Reading (:func:`read_pack`) never extracts blindly: member names must be relative and stay inside the
pack, sizes are bounded, and a zip holding none of the known entries is refused as "not a pack".
"""

from __future__ import annotations

import json
import logging
import os
import posixpath
import re
import zipfile
import zlib
from typing import Dict, Iterable, Optional

from msprobe.core.errors import MsprobeError

ENV = "env"
PIP = "pip"
HYPER_DIR = "hyperparameters"
HYPER_FILES = ("hyperparameters_static.json", "hyperparameters_dynamic.json")
WEIGHTS = "weights"
DATASET = "dataset"
RANDOM = "random"
MARKER = "msprobe_pack.json"
TOP_LEVEL = (ENV, PIP, HYPER_DIR, WEIGHTS, DATASET, RANDOM)

#: limits of what a pack may hold (a pack of a large run is tens of MB; anything far beyond is refused)
MAX_MEMBERS = 1_000_000
MAX_TOTAL_BYTES = 8 << 30
MAX_MEMBER_BYTES = 2 << 30
MAX_RATIO = 1000  # uncompressed / compressed of one member (zip bombs)

_STEP_RANK_RE = re.compile(r"^(weights|dataset)/step(\d+)/rank(\d+)/(weight|dataset)\.json$")
_RANDOM_RE = re.compile(r"^random/(?:step(\d+)/)?rank(\d+)\.json$")


def weights_entry(step: int, rank: int) -> str:
    return f"{WEIGHTS}/step{step}/rank{rank}/weight.json"


def dataset_entry(step: int, rank: int) -> str:
    return f"{DATASET}/step{step}/rank{rank}/dataset.json"


def random_entry(rank: int, step: Optional[int] = None) -> str:
    return f"{RANDOM}/rank{rank}.json" if step is None else f"{RANDOM}/step{step}/rank{rank}.json"


def hyper_entry(dynamic: bool) -> str:
    return f"{HYPER_DIR}/{HYPER_FILES[1 if dynamic else 0]}"


def to_json(obj) -> bytes:
    return json.dumps(obj, indent=4, ensure_ascii=False).encode("utf-8")


def rank_of_entry(name: str) -> Optional[int]:
    """The rank an entry belongs to (None: rank-0-only entries such as env / pip / hyperparameters)."""
    m = _STEP_RANK_RE.match(name)
    if m:
        return int(m.group(3))
    m = _RANDOM_RE.match(name)
    if m:
        return int(m.group(2))
    return None


# ------------------------------------------------------------------------------------------ writing
def build_zip(path: str, entries: Dict[str, bytes]) -> None:
    """Write ``entries`` (name -> bytes) into a new zip at ``path`` (the caller's temporary file)."""
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for name, data in entries.items():
            zf.writestr(name, data)


_lock_warned = False


class _DirLock:
    """An exclusive flock on a directory: several ranks append to one pack, one at a time."""

    def __init__(self, directory: str):
        self.directory = directory
        self.fd = None

    def __enter__(self):
        try:
            import fcntl
        except ImportError:  # pragma: no cover - Windows: no locking, one process per pack there
            return self
        try:
            self.fd = os.open(self.directory, os.O_RDONLY)
            fcntl.flock(self.fd, fcntl.LOCK_EX)
        except OSError as exc:  # a file system without flock on folders: go on unlocked, say it once
            if self.fd is not None:
                os.close(self.fd)
                self.fd = None
            global _lock_warned
            if not _lock_warned:
                _lock_warned = True
                logging.getLogger("msprobe").warning(
                    "config_check: cannot lock %s (%s); ranks writing the pack at the same moment may damage it",
                    self.directory, exc.strerror or exc)
        return self

    def __exit__(self, *exc):
        if self.fd is not None:
            import fcntl

            try:
                fcntl.flock(self.fd, fcntl.LOCK_UN)
            finally:
                os.close(self.fd)
                self.fd = None


def append_entries(zip_path: str, entries: Dict[str, bytes]) -> None:
    """Append entries to the pack shared by all ranks of a run (created when missing), under a lock on
    its folder.  Names already present are skipped (a pack never holds one name twice)."""
    directory = os.path.dirname(os.path.abspath(zip_path))
    with _DirLock(directory):
        mode = "a" if os.path.exists(zip_path) else "w"
        with zipfile.ZipFile(zip_path, mode, compression=zipfile.ZIP_DEFLATED) as zf:
            present = set(zf.namelist()) if mode == "a" else set()
            for name, data in entries.items():
                if name not in present:
                    zf.writestr(name, data)
        try:
            os.chmod(zip_path, 0o640)
        except OSError:
            pass


def existing_names(zip_path: str) -> Iterable[str]:
    """Entry names of an existing pack (raises MsprobeError when the file is not a zip)."""
    try:
        with zipfile.ZipFile(zip_path) as zf:
            return zf.namelist()
    except (zipfile.BadZipFile, OSError, NotImplementedError, ValueError, EOFError) as exc:
        raise MsprobeError(f"output zip {zip_path} exists and is not a readable zip ({exc}); "
                           f"remove it or choose another output_zip_path") from None


# ------------------------------------------------------------------------------------------ reading
def _safe_member(name: str) -> bool:
    if not name or name.startswith("/") or "\\" in name or "\0" in name or ":" in name.split("/")[0]:
        return False
    norm = posixpath.normpath(name)
    return not (norm.startswith("..") or norm.startswith("/")) and ".." not in name.split("/")


class Pack:
    """The entries of one pack zip held in memory: ``names`` and :meth:`read` / :meth:`json`."""

    def __init__(self, path: str, entries: Dict[str, bytes]):
        self.path = path
        self.entries = entries

    @property
    def names(self):
        return list(self.entries)

    def has(self, name: str) -> bool:
        return name in self.entries

    def has_dir(self, prefix: str) -> bool:
        prefix = prefix.rstrip("/") + "/"
        return any(n.startswith(prefix) for n in self.entries)

    def read(self, name: str) -> bytes:
        return self.entries[name]

    def text(self, name: str) -> str:
        return self.entries[name].decode("utf-8", errors="replace")

    def json(self, name: str):
        data = self.entries[name]
        try:
            return json.loads(data.decode("utf-8", errors="replace"))
        except (ValueError, RecursionError) as exc:
            msg = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise MsprobeError(f"entry {name} of pack {self.path} is not valid JSON ({msg}); "
                               f"the pack is damaged: collect it again") from None


def read_pack(path: str, what: str = "pack") -> Pack:
    """Read a config_check pack zip safely into memory (see the module docstring)."""
    from msprobe.core.fileio import check_path

    path = check_path(path, what, "file")
    if not zipfile.is_zipfile(path):
        raise MsprobeError(f"{what} {path} is not a zip file; pass two packs written by 'config_check -d' "
                           f"or ConfigChecker")
    entries: Dict[str, bytes] = {}
    try:
        with zipfile.ZipFile(path) as zf:
            infos = zf.infolist()
            if len(infos) > MAX_MEMBERS:
                raise MsprobeError(f"{what} {path} holds {len(infos)} entries, over the limit of {MAX_MEMBERS}")
            from msprobe.core.fileio import available_memory, human_size, json_size_limit

            limit = min(MAX_TOTAL_BYTES, json_size_limit())  # entries are held in memory and parsed as JSON
            total = 0
            for info in infos:
                if info.is_dir():
                    continue
                name = info.filename
                if not _safe_member(name):
                    raise MsprobeError(f"{what} {path} holds the entry {name[:200]!r} that points outside the pack; "
                                       f"it was not written by config_check: refusing it")
                if (info.external_attr >> 16) & 0o170000 == 0o120000:
                    raise MsprobeError(f"{what} {path} holds a symbolic link {name[:200]!r}; refusing it")
                total += info.file_size
                if total > limit and info.file_size <= MAX_MEMBER_BYTES:
                    raise MsprobeError(f"{what} {path} unpacks to over {human_size(limit)}, more than this machine "
                                       f"can hold to compare it ({human_size(available_memory())} available)")
                if info.file_size > MAX_MEMBER_BYTES or (
                        info.compress_size and info.file_size > MAX_RATIO * info.compress_size
                        and info.file_size > (1 << 20)):
                    raise MsprobeError(f"{what} {path}: entry {name[:200]} unpacks to {info.file_size} bytes "
                                       f"(a zip bomb or not a config_check pack); refusing it")
                entries[posixpath.normpath(name)] = zf.read(info)
    except MsprobeError:
        raise
    except (zipfile.BadZipFile, zipfile.LargeZipFile, OSError, EOFError, RuntimeError, ValueError,
            NotImplementedError, zlib.error) as exc:   # zlib.error: a damaged deflate stream
        raise MsprobeError(f"{what} {path} cannot be read as a zip ({type(exc).__name__}: "
                           f"{str(exc).splitlines()[0][:200] if str(exc) else ''}); collect the pack again") from None
    if not any(n.split("/")[0] in TOP_LEVEL for n in entries):
        raise MsprobeError(f"{what} {path} is a zip but not a config_check pack (none of the entries "
                           f"{', '.join(TOP_LEVEL)}); pass packs written by 'config_check -d' or ConfigChecker")
    return Pack(path, entries)


def step_rank_files(pack: Pack, kind: str) -> Dict[tuple, str]:
    """{(step, rank): entry name} of the weights or dataset entries of a pack."""
    out = {}
    for name in pack.entries:
        m = _STEP_RANK_RE.match(name)
        if m and m.group(1) == kind:
            out[(int(m.group(2)), int(m.group(3)))] = name
    return out


def random_files(pack: Pack) -> Dict[int, list]:
    """{rank: [entry names]} of the random entries: rank{R}.json first, then the per-step files in step order."""
    found: Dict[int, list] = {}
    for name in pack.entries:
        m = _RANDOM_RE.match(name)
        if m:
            step = -1 if m.group(1) is None else int(m.group(1))
            found.setdefault(int(m.group(2)), []).append((step, name))
    return {r: [n for _, n in sorted(v)] for r, v in found.items()}
