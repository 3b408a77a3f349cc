"""What the PyTorch and MindSpore ``PrecisionDebugger`` classes share (framework-free).

A process-wide singleton per framework class; ``start``/``stop``/``step``/``set_init_step`` also work
as class methods once an instance exists; construction either succeeds completely or leaves no
instance behind.  Subclasses implement ``_setup`` (config, framework checks, ``self.service``).
"""

from __future__ import annotations

import dataclasses
import os
import random
import threading

from msprobe.core.dump.config import prepare_dump_path
from msprobe.core.errors import MsprobeError

LOCK = threading.RLock()


class DebuggerBase:
    _instance = None  # each subclass declares its own

    def __new__(cls, *args, **kwargs):
        with LOCK:
            if cls._instance is None:
                obj = super().__new__(cls)
                obj._ready = False
                cls._instance = obj
            return cls._instance

    def _init_once(self, setup) -> None:
        """Run ``setup()`` for the first construction only; a failure leaves no instance behind."""
        with LOCK:
            if self._ready:
                return
            try:
                setup()
            except BaseException:
                type(self)._instance = None
                raise
            self._ready = True

    def _model_for_start(self, model):
        return model

    @classmethod
    def _get(cls):
        inst = cls._instance
        if inst is None or not inst._ready:
            raise MsprobeError("PrecisionDebugger instance is not created: construct PrecisionDebugger(...) first")
        return inst

    @classmethod
    def start(cls, model=None):
        inst = cls._get()
        with LOCK:
            inst.service.start(inst._model_for_start(model))

    @classmethod
    def stop(cls):
        inst = cls._get()
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
