"""``PrecisionDebugger`` for MindSpore PyNative training.

The same config.json, the same methods and the same guarantees as :mod:`msprobe.pytorch.debugger`:
a process-wide singleton; ``start``/``stop``/``step`` also work as class methods once an instance
exists; every configuration problem is one :class:`~msprobe.core.errors.MsprobeError` at
construction; once training runs, nothing the tool does may stop or change it.
"""
import dataclasses
import logging
import os
import random
import threading

from msprobe.core.dump.config import load_dump_config, prepare_dump_path
from msprobe.core.errors import MsprobeError

log = logging.getLogger("msprobe")
_LOCK = threading.RLock()


def _device_target():
    import mindspore as ms
    try:
        return ms.get_context("device_target")
    except Exception:
        return "CPU"


class PrecisionDebugger:
    _instance = None

    def __new__(cls, *args, **kwargs):
        with _LOCK:
            if cls._instance is None:
                obj = super().__new__(cls)
                obj._ready = False
                cls._instance = obj
            return cls._instance

    def __init__(self, config_path=None, task=None, dump_path=None, level=None, step=None):
        with _LOCK:
            if self._ready:
                return
            try:
                self._setup(config_path, task, dump_path, level, step)
            except BaseException:
                PrecisionDebugger._instance = None
                raise
            self._ready = True

    def _setup(self, config_path, task, dump_path, level, step):
        cfg = load_dump_config(config_path, task=task, dump_path=dump_path, level=level, step=step,
                               framework="mindspore")
        import mindspore as ms
        if cfg.level == "L2":
            raise MsprobeError(
                f"level L2 (kernel dump through MindSpore's own dump) needs an Ascend device; this MindSpore "
                f"runs on {_device_target()}. Use level L0, L1 or mix here")
        if cfg.level == "debug":
            raise MsprobeError("level debug (PrecisionDebugger.save) is not supported for MindSpore by this "
                               "msprobe; use level L0, L1 or mix")
        try:
            mode = ms.get_context("mode")
        except Exception:
            mode = ms.PYNATIVE_MODE
        if mode != ms.PYNATIVE_MODE:
            raise MsprobeError("the MindSpore PrecisionDebugger records PyNative runs only (GRAPH_MODE runs no "
                               "Python hooks); call mindspore.set_context(mode=mindspore.PYNATIVE_MODE)")
        dump_root = prepare_dump_path(cfg.dump_path)
        if dump_root != cfg.dump_path:
            cfg = dataclasses.replace(cfg, dump_path=dump_root)
        if cfg.seed is not None:
            seed_all(cfg.seed, cfg.is_deterministic)
        from msprobe.mindspore.dump.service import Service
        self.config = cfg
        self.service = Service(cfg)

    @classmethod
    def _get(cls):
        inst = cls._instance
        if inst is None or not inst._ready:
            raise MsprobeError("PrecisionDebugger instance is not created: construct PrecisionDebugger(...) first")
        return inst

    @classmethod
    def start(cls, model=None):
        inst = cls._get()
        with _LOCK:
            inst.service.start(model)

    @classmethod
    def stop(cls):
        inst = cls._get()
        with _LOCK:
            inst.service.stop()

    @classmethod
    def forward_backward_dump_end(cls):
        """Deprecated alias of :meth:`stop` (kept for 8.x scripts)."""
        cls.stop()

    @classmethod
    def step(cls):
        inst = cls._get()
        with _LOCK:
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
            except Exception:
                pass
        cls._instance = None


def seed_all(seed=1234, mode=False, rm_dropout=False):
    """Fix Python, numpy and MindSpore random state; ``mode`` asks for deterministic kernels."""
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise MsprobeError(f"seed_all: seed must be an integer, got {seed!r}")
    if not 0 <= seed <= 2 ** 32 - 1:
        raise MsprobeError(f"seed_all: seed must be between 0 and 4294967295, got {seed}")
    if not isinstance(mode, bool):
        raise MsprobeError(f"seed_all: mode must be bool, got {mode!r}")
    if not isinstance(rm_dropout, bool):
        raise MsprobeError(f"seed_all: rm_dropout must be bool, got {rm_dropout!r}")
    import numpy as np
    import mindspore as ms
    random.seed(seed)
    os.environ["PYTHONHASHSEED"] = str(seed)
    np.random.seed(seed)
    ms.set_seed(seed)
    try:
        ms.set_context(deterministic="ON" if mode else "OFF")
    except Exception:
        pass
    os.environ["HCCL_DETERMINISTIC"] = str(mode)
    if rm_dropout:
        log.warning("seed_all(rm_dropout=True) is not supported for MindSpore by this msprobe; dropout is kept")
