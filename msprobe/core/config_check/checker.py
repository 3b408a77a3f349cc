"""Collecting a pack: the static pack of ``config_check -d`` and the dynamic :class:`ConfigChecker`.

The framework-specific parts (forward pre-hook, parameters, tensor statistics, rank, random ops of the
framework) live in an adapter, ``msprobe.pytorch.config_check.adapter`` or
``msprobe.mindspore.config_check.adapter``, imported only when a ConfigChecker of that framework is made;
this module imports neither torch nor mindspore.
"""

from __future__ import annotations

import functools
import importlib
import linecache
import logging
import os
import sys
import threading
import time
from typing import Dict, List, Optional

from msprobe.core.config_check import pack as P
from msprobe.core.config_check.collect import collect_env, collect_pip, hyperparameters_from_files, log
from msprobe.core.errors import MsprobeError

logger = logging.getLogger("msprobe")

FRAMEWORKS = ("pytorch", "mindspore")
DEFAULT_ZIP = "./config_check_pack.zip"
_ADAPTERS = {"pytorch": "msprobe.pytorch.config_check.adapter",
             "mindspore": "msprobe.mindspore.config_check.adapter"}


def check_zip_path(path) -> str:
    if not isinstance(path, str) or not path.endswith(".zip"):
        raise MsprobeError("output zip path must be a string and ends with '.zip'")
    if "\0" in path:
        raise MsprobeError(f"output zip path {path[:200]!r} holds a NUL character; correct it")
    return os.path.abspath(path)


def check_fmk(fmk) -> str:
    if fmk not in FRAMEWORKS:
        raise MsprobeError(f"fmk must be one of {', '.join(FRAMEWORKS)}, not {fmk!r}")
    return fmk


def _make_parent(path: str) -> None:
    parent = os.path.dirname(path)
    try:
        os.makedirs(parent, mode=0o750, exist_ok=True)
    except OSError as exc:
        raise MsprobeError(f"cannot create the folder of {path}: {exc.strerror}; choose another output path") from None
    if not os.access(parent, os.W_OK | os.X_OK):
        raise MsprobeError(f"folder {parent} is not writable by this user; choose another output path")


def base_entries(shell_path: Optional[List[str]]) -> Dict[str, bytes]:
    """env, pip and (when scripts are given and parse) hyperparameters_static.json."""
    from msprobe import __version__

    entries = {P.MARKER: P.to_json({"writer": "msprobe", "version": __version__})}
    entries[P.ENV] = P.to_json(collect_env())
    log("add env args to zip")
    entries[P.PIP] = collect_pip().encode("utf-8")
    log("add pip info to zip")
    if shell_path:
        if isinstance(shell_path, str):
            shell_path = [shell_path]
        hyper = hyperparameters_from_files(list(shell_path))
        if hyper:
            entries[P.hyper_entry(False)] = P.to_json(hyper)
            log("add static hyperparameters args to zip")
        else:
            log(f"Warning: Failed to extract hyperparameters from script {list(shell_path)}")
    if _megatron_args:
        entries[P.hyper_entry(True)] = P.to_json(_megatron_args)
        log("add dynamic hyperparameters args to zip")
    return entries


def pack_static(scripts: Optional[List[str]], output_zip: str) -> str:
    """``config_check -d``: env, pip and hyperparameters of ``scripts`` into a new zip (never replacing one)."""
    from msprobe.core.fileio import atomic_write

    path = check_zip_path(output_zip)
    if os.path.lexists(path):
        raise MsprobeError(f"output zip {path} already exists; choose another -o or remove it (nothing is overwritten)")
    for script in scripts or ():
        # a typo must not give a pack without hyperparameters (exit 0) that later compares as "pass";
        # ConfigChecker(shell_path=...) in a training script only warns (a hook never stops the training)
        if not os.path.isfile(script):
            what = "is a folder" if os.path.isdir(script) else "does not exist"
            raise MsprobeError(f"config_check -d: script {script} {what}; pass launch scripts (.sh) or yaml files "
                               f"(nothing written)")
    _make_parent(path)
    log(f"pack result zip path {path}")
    entries = base_entries(scripts)
    return atomic_write(path, lambda tmp: P.build_zip(tmp, entries))


# ------------------------------------------------------------------------------------ random calls
_random_lock = threading.RLock()
_random_guard = threading.local()
#: op name -> [{"count": n, "stack": [frames]}] of this process
random_op_stats: Dict[str, list] = {}


def call_stack(frame) -> List[str]:
    """``File {path}, line {n}, in {function}, {code}`` frames, outermost first (the reference's form)."""
    stack = []
    while frame is not None:
        code = frame.f_code
        filename = os.path.abspath(code.co_filename)
        line = linecache.getline(code.co_filename, frame.f_lineno).strip()
        stack.append(f"File {filename}, line {frame.f_lineno}, in {code.co_name}, {line}")
        frame = frame.f_back
    return stack[::-1]


def track_random(func, name: str):
    """Wrap a random function: count its calls by call stack; the call itself is unchanged."""
    if getattr(func, "__msprobe_config_check__", False):
        return func

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        if not getattr(_random_guard, "busy", False):
            _random_guard.busy = True
            try:
                stack = call_stack(sys._getframe(1))
                with _random_lock:
                    entries = random_op_stats.setdefault(name, [])
                    for entry in entries:
                        if entry["stack"] == stack:
                            entry["count"] += 1
                            break
                    else:
                        entries.append({"count": 1, "stack": stack})
            except Exception:  # noqa: BLE001 - tracking never breaks the training
                pass
            finally:
                _random_guard.busy = False
        return func(*args, **kwargs)

    wrapper.__msprobe_config_check__ = True
    return wrapper


def _patch(owner, names, prefix: str) -> None:
    for name in names:
        func = getattr(owner, name, None)
        if func is not None:
            setattr(owner, name, track_random(func, f"{prefix}.{name}"))


def patch_python_random() -> None:
    import random

    import numpy as np

    _patch(random, ("random", "randint", "uniform", "choice"), "random")
    _patch(np.random, ("rand", "randint", "choice", "normal"), "np.random")


def random_snapshot() -> Dict[str, list]:
    with _random_lock:
        return {op: [{"count": e["count"], "stack": list(e["stack"])} for e in entries]
                for op, entries in random_op_stats.items()}


def random_delta(now: Dict[str, list], before: Dict[str, list]) -> Dict[str, list]:
    out = {}
    for op, entries in now.items():
        old = {tuple(e["stack"]): e["count"] for e in before.get(op, [])}
        new = [{"count": e["count"] - old.get(tuple(e["stack"]), 0), "stack": e["stack"]} for e in entries]
        new = [e for e in new if e["count"] > 0]
        if new:
            out[op] = new
    return out


# ------------------------------------------------------------------------------ megatron arguments
_megatron_args: Dict[str, object] = {}


def _jsonable(v):
    if isinstance(v, (str, int, float, bool)) or v is None:
        return v
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    if isinstance(v, dict):
        return {str(k): _jsonable(x) for k, x in v.items()}
    return None  # the reference's default=lambda x: None


def patch_megatron() -> None:
    """Remember Megatron's arguments the first time ``megatron.training.get_args`` returns them."""
    import importlib.util

    try:
        if importlib.util.find_spec("megatron") is None:
            log("No megatron find.")
            return
        training = importlib.import_module("megatron.training")
    except Exception as exc:  # noqa: BLE001
        log(f"No megatron find. ({type(exc).__name__})")
        return
    get_args = getattr(training, "get_args", None)
    if get_args is None or getattr(get_args, "__msprobe_config_check__", False):
        return

    @functools.wraps(get_args)
    def wrapper(*args, **kwargs):
        result = get_args(*args, **kwargs)
        if not _megatron_args and result is not None:
            try:
                _megatron_args.update({str(k): _jsonable(v) for k, v in vars(result).items()})
            except Exception:  # noqa: BLE001
                pass
        return result

    wrapper.__msprobe_config_check__ = True
    training.get_args = wrapper


# ------------------------------------------------------------------------------------ the checker
_IMPORTED_AT = time.time()
#: zips a ConfigChecker of this process writes (a second checker on one of them is refused)
_used_paths: set = set()


def _process_start() -> float:
    """When this process started (Linux: /proc/self/stat's start time after boot), else when this module
    was imported."""
    try:
        with open("/proc/self/stat", "rb") as fh:
            fields = fh.read().rsplit(b")", 1)[1].split()
        with open("/proc/stat", "rb") as fh:
            btime = next(int(line.split()[1]) for line in fh if line.startswith(b"btime"))
        return btime + int(fields[19]) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, StopIteration, AttributeError):
        return _IMPORTED_AT


def load_adapter(fmk: str):
    try:
        return importlib.import_module(_ADAPTERS[check_fmk(fmk)])
    except ImportError as exc:
        raise MsprobeError(f"ConfigChecker with fmk={fmk!r} needs {fmk} installed ({exc})") from None


class ConfigChecker:
    """Dynamic collection in a training script (the reference's API)::

        from msprobe.core.config_check import ConfigChecker
        ConfigChecker.apply_patches("pytorch")          # first lines of the entry script
        ...
        ConfigChecker(model=model, shell_path=["train.sh"], output_zip_path="./config_check_pack.zip",
                      fmk="pytorch")                     # once the model exists

    Rank 0 packs env, pip and hyperparameters at once; every rank packs, before each forward of
    ``model`` (step = micro-step count), the statistics of the weights and of the forward inputs,
    and the random calls seen so far.  All ranks append to the same zip (under a lock on its folder).
    A failure while collecting is logged once and never stops or changes the training.
    """

    step = 0

    def __init__(self, model=None, shell_path=None, output_zip_path=DEFAULT_ZIP, fmk="pytorch"):
        self.fmk = check_fmk(fmk)
        self.output_zip_path = check_zip_path(output_zip_path)
        self.adapter = load_adapter(self.fmk)
        if isinstance(model, (list, tuple)):
            model = model[0] if model else None
        if model is not None and not self.adapter.is_module(model):
            raise MsprobeError("model is not torch.nn.Module/mindspore.nn.Cell or module list.")
        self.model = model
        self.shell_path = shell_path
        self.step = 0
        self._failed = False
        self._random_written = None  # snapshot at the last random entry written
        self._megatron_written = False
        self._rank_known = False
        self.rank = self._rank()
        _make_parent(self.output_zip_path)
        self._refuse_stale()
        _used_paths.add(self.output_zip_path)
        log(f"pack result zip path {self.output_zip_path}")
        if self.rank == 0:
            entries = base_entries(shell_path)
            self._megatron_written = P.hyper_entry(True) in entries
            self._append(entries, at_init=True)
        if model is not None:
            self.adapter.register_pre_hook(model, self._on_forward)

    def _rank(self) -> int:
        """The process's rank: the framework's when communication is initialised, else $RANK, else 0
        (``self._rank_known`` says whether it came from the framework or $RANK)."""
        try:
            rank = self.adapter.rank()
        except Exception:  # noqa: BLE001
            rank = None
        self._rank_known = rank is not None
        if rank is None:
            try:
                rank = int(os.environ["RANK"])
                self._rank_known = True
            except (KeyError, ValueError):
                rank = 0
        return rank

    def _refuse_stale(self) -> None:
        """Refuse a zip of an earlier run: one last written before this process started, or one already
        holding this rank's entries.  The ranks of one run share the zip (they start together)."""
        path = self.output_zip_path
        if not os.path.lexists(path):
            return
        if not os.path.isfile(path) or os.path.islink(path):
            raise MsprobeError(f"output zip {path} exists and is not a regular file; choose another output_zip_path")
        names = P.existing_names(path)
        stale = os.path.getmtime(path) < _process_start() - 1.0
        mine = self._rank_known and any(
            P.rank_of_entry(n) == self.rank or (self.rank == 0 and P.rank_of_entry(n) is None) for n in names)
        if stale or mine or path in _used_paths:
            raise MsprobeError(f"output zip {path} already holds a pack of an earlier run: remove it or choose "
                               f"another output_zip_path (nothing is overwritten)")

    @staticmethod
    def apply_patches(fmk="pytorch") -> None:
        """Count the random calls (Python random, numpy, the framework's) by call stack from now on, and
        catch Megatron's arguments.  Call it at the very top of the training entry script."""
        fmk = check_fmk(fmk)
        patch_python_random()
        load_adapter(fmk).patch_random(track_random)
        patch_megatron()

    @staticmethod
    def compare(bench_zip_path, cmp_zip_path, output_path="./config_check_result", fmk=None) -> str:
        """Compare two packs into ``output_path`` (see msprobe.core.config_check.compare); returns result.xlsx."""
        from msprobe.core.config_check.compare import compare_packs

        return compare_packs(bench_zip_path, cmp_zip_path, output_path, fmk)[0]

    # ------------------------------------------------------------------------------------ hooks
    def _append(self, entries: Dict[str, bytes], at_init: bool = False) -> None:
        try:
            P.append_entries(self.output_zip_path, entries)
        except OSError as exc:
            if at_init:
                raise MsprobeError(f"cannot write {self.output_zip_path}: {exc.strerror or exc}; "
                                   f"choose another output_zip_path") from None
            raise

    def _on_forward(self, args, kwargs) -> None:
        if self._failed:
            return
        step = self.step
        self.step += 1
        try:
            self.rank = self._rank()
            entries = {}
            if self.model is not None:
                names, params = [], []
                for name, t in self.adapter.named_parameters(self.model):
                    names.append(name)
                    params.append(t)
                weights = dict(zip(names, self.adapter.features_many(params)))
                entries[P.weights_entry(step, self.rank)] = P.to_json(weights)
                tensors: list = []
                tree = {"args": self._inputs(args, tensors), "kwargs": self._inputs(kwargs or {}, tensors)}
                stats = self.adapter.features_many(tensors)
                entries[P.dataset_entry(step, self.rank)] = P.to_json(_fill(tree, stats))
            now = random_snapshot()
            if self._random_written is None:
                entries[P.random_entry(self.rank)] = P.to_json(now)
                self._random_written = now
            else:
                delta = random_delta(now, self._random_written)
                if delta:
                    entries[P.random_entry(self.rank, step)] = P.to_json(delta)
                    self._random_written = now
            if self.rank == 0 and not self._megatron_written and _megatron_args:
                entries[P.hyper_entry(True)] = P.to_json(_megatron_args)
                self._megatron_written = True
            self._append(entries)
        except Exception as exc:  # noqa: BLE001 - a hook never stops the training
            self._failed = True
            logger.warning("config_check: collection stopped at step %d (%s: %s); the training goes on",
                           step, type(exc).__name__, exc)

    def _inputs(self, obj, tensors: list, depth: int = 0):
        """The forward's arguments as nested dicts (list items keyed "0", "1" ...), tensors replaced by
        their index in ``tensors`` (filled with statistics by :func:`_fill`), anything else by ``""``."""
        if depth > 50:
            return ""
        if self.adapter.is_tensor(obj):
            tensors.append(obj)
            return _Slot(len(tensors) - 1)
        if isinstance(obj, (list, tuple)):
            return {str(i): self._inputs(x, tensors, depth + 1) for i, x in enumerate(obj)}
        if isinstance(obj, dict):
            return {str(k): self._inputs(v, tensors, depth + 1) for k, v in obj.items()}
        return ""


class _Slot:
    __slots__ = ("index",)

    def __init__(self, index: int):
        self.index = index


def _fill(tree, stats: list):
    if isinstance(tree, _Slot):
        return stats[tree.index]
    if isinstance(tree, dict):
        return {k: _fill(v, stats) for k, v in tree.items()}
    return tree
