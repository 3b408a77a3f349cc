"""What the PyTorch and MindSpore ``PrecisionDebugger`` classes share (framework-free).

A process-wide singleton per framework class; ``start``/``stop``/``step``/``set_init_step`` also work
as class methods once an instance exists; construction either succeeds completely or leaves no
instance behind.  Subclasses implement ``_setup`` (config, framework checks, ``self.service``).
"""

from __future__ import annotations

import dataclasses
import logging
import os
import random
import threading

from msprobe.core.dump.config import prepare_dump_path
from msprobe.core.errors import MsprobeError

LOCK = threading.RLock()
log = logging.getLogger("msprobe")


class DebuggerBase:
    _instance = None  # each subclass declares its own

    def __new__(cls, *args, **kwargs):
        with LOCK:
            if cls._instance is None:
                obj = super().__new__(cls)
                obj._ready = False
                cls._instance = obj
            return cls._instance

    def _init_once(self, setup, requested=None) -> None:
        """Run ``setup()`` for the first construction only; a failure leaves no instance behind.
        ``requested``: the arguments of this construction; on a later construction the ones that differ
        from the instance in force are named in a warning (once per distinct set), since they are ignored."""
        with LOCK:
            if self._ready:
                if requested:
                    self._warn_ignored(requested)
                return
            try:
                setup()
            except BaseException:
                type(self)._instance = None
                raise
            self._ready = True

    def _warn_ignored(self, requested: dict) -> None:
        cfg = getattr(self, "config", None)
        if cfg is None:
            return
        ignored = []
        path = requested.get("config_path")
        if path is not None and (not isinstance(path, (str, os.PathLike))
                                 or os.path.abspath(os.fspath(path)) != os.path.abspath(cfg.source)):
            ignored.append(f"config_path={os.fspath(path) if isinstance(path, (str, os.PathLike)) else path!r}")
        for key, current in (("task", cfg.task), ("level", cfg.level)):
            value = requested.get(key)
            if value is not None and value != current:
                ignored.append(f"{key}={value!r}")
        dump_path = requested.get("dump_path")
        if dump_path is not None and (not isinstance(dump_path, str)
                                      or os.path.abspath(dump_path) != os.path.abspath(cfg.dump_path)):
            ignored.append(f"dump_path={dump_path!r}")
        step = requested.get("step")
        if step is not None:
            try:
                from msprobe.core.dump.config import parse_step_or_rank

                same = parse_step_or_rank(step, "step") == tuple(cfg.step)
            except MsprobeError:
                same = False
            if not same:
                ignored.append(f"step={step!r}")
        model = requested.get("model")
        if model is not None and model is not getattr(self, "model", None):
            ignored.append("model (another object)")
        if not ignored:
            return
        key = tuple(ignored)
        warned = self.__dict__.setdefault("_warned_ignored", set())
        if key in warned:
            return
        warned.add(key)
        log.warning(
            "%s is already created in this process; this %s(...) returns that same instance and ignores %s. "
            "In force: task=%r, level=%r, dump_path=%r, config %s%s (the first configuration stays for the "
            "whole process)", type(self).__name__, type(self).__name__, ", ".join(ignored), cfg.task, cfg.level,
            cfg.dump_path, cfg.source, f", step={list(cfg.step)}" if cfg.step else "")

    def _model_for_start(self, model):
        return model

    @classmethod
    def _get(cls):
        inst = cls._instance
        if inst is None or not inst._ready:
            raise MsprobeError("PrecisionDebugger instance is not created: construct PrecisionDebugger(...) first")
        return inst

    # the framework adapter's part of start(token_range=...): the word for the root ("model" / "network"), and
    # the runtime switch object with the names of its on/off attributes (a TokenWindow flips them)
    _ROOT_WORD = "model"

    def _token_switches(self):
        raise NotImplementedError

    @classmethod
    def start(cls, model=None, token_range=None, rank_id=None):
        """``token_range=[a, b]`` (inference): record only the forwards number a..b (counted from 0 at this
        start, both included) of the model (the first one of a list); without it, record from here on.
        ``rank_id``: the rank to record as (the reference's 26.x argument), instead of the distributed rank."""
        from msprobe.core.dump.start_args import TokenWindow, apply_rank_id, check_token_range
        inst = cls._get()
        apply_rank_id(inst.service, rank_id)
        window = inst.__dict__.get("_tokens")
        if window is not None:
            window.state = None
        if token_range is None:
            with LOCK:
                inst.service.start(inst._model_for_start(model))
            return
        window_range = check_token_range(token_range)
        root = inst._model_for_start(model)
        word = cls._ROOT_WORD
        if root is None:
            raise MsprobeError(f"PrecisionDebugger.start(token_range=...) counts the forwards of the {word}: pass "
                               f"it, debugger.start(model={'net' if word == 'network' else 'model'}, "
                               f"token_range=[start, end])")
        with LOCK:
            inst.service.start(root)
            if window is None:
                window = inst._tokens = TokenWindow(*inst._token_switches())
            window.arm(root, window_range, lambda m, fn: m.register_forward_pre_hook(fn))

    @classmethod
    def stop(cls):
        inst = cls._get()
        window = inst.__dict__.get("_tokens")
        if window is not None:
            window.disarm()
        with LOCK:
            inst.service.stop()

    @classmethod
    def forward_backward_dump_end(cls):
        """Deprecated alias of :meth:`stop` (kept for 8.x scripts)."""
        cls.stop()

    @classmethod
    def step(cls):
        inst = cls._get()
        with LOCK:
            inst.service.step()

    @classmethod
    def set_init_step(cls, step):
        cls._get().service.set_init_step(step)

    @classmethod
    def _reset_for_tests(cls):
        """Drop the singleton (restoring every patch and hook). For tests only."""
        inst = cls._instance
        if inst is not None and getattr(inst, "_ready", False):
            try:
                inst.service.end()
            except Exception:  # noqa: BLE001 - best effort in tests
                pass
        cls._instance = None


def check_seed_args(seed, mode, rm_dropout) -> None:
    """seed_all's argument checks (one MsprobeError line each)."""
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise MsprobeError(f"seed_all: seed must be an integer, got {seed!r}")
    if not 0 <= seed <= 2 ** 32 - 1:
        raise MsprobeError(f"seed_all: seed must be between 0 and 4294967295, got {seed}")
    if not isinstance(mode, bool):
        raise MsprobeError(f"seed_all: mode must be bool, got {mode!r}")
    if not isinstance(rm_dropout, bool):
        raise MsprobeError(f"seed_all: rm_dropout must be bool, got {rm_dropout!r}")


def seed_python(seed: int) -> None:
    """Python's and numpy's random state."""
    import numpy as np

    random.seed(seed)
    os.environ["PYTHONHASHSEED"] = str(seed)
    np.random.seed(seed)


def prepared_config(cfg, seed_all):
    """``cfg`` with its dump_path created and normalised; the random state fixed when the config has a seed."""
    dump_root = prepare_dump_path(cfg.dump_path)
    if dump_root != cfg.dump_path:
        cfg = dataclasses.replace(cfg, dump_path=dump_root)
    if cfg.seed is not None:
        seed_all(cfg.seed, cfg.is_deterministic)
    return cfg
