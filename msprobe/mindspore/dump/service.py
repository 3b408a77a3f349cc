"""The MindSpore side of the dump lifecycle (steps, ranks, start/stop/step: msprobe.core.dump.lifecycle)."""
import logging

from msprobe.core.dump.errorlog import ErrorLog
from msprobe.core.dump.lifecycle import DumpLifecycle
from msprobe.core.errors import MsprobeError
from msprobe.mindspore.dump.collector import Collector
from msprobe.mindspore.dump.hooks import RT, Hooks, guarded

log = logging.getLogger("msprobe")


def _rank():
    try:
        from mindspore.communication import get_rank
        from mindspore.communication.management import GlobalComm
        if getattr(GlobalComm, "INITED", False):
            return get_rank()
    except Exception:
        pass
    return None


def _is_cell(obj):
    from mindspore import nn
    return isinstance(obj, nn.Cell)


class Service(DumpLifecycle):
    def __init__(self, cfg):
        self.cfg = cfg
        self.collector = Collector(cfg)
        self.errors = ErrorLog(cfg.dump_path)
        self.hooks = Hooks(self)
        self._init_lifecycle(cfg)
        if cfg.level in ("L1", "mix"):
            self.hooks.install_api_patches()

    # ------------------------------------------------------------------ the framework part of the lifecycle
    def rank(self):
        return _rank()

    def _check_start(self, model):
        if model is not None:
            for m in (model if isinstance(model, (list, tuple)) else [model]):
                if not _is_cell(m):
                    raise MsprobeError(f"PrecisionDebugger.start(model): model must be a mindspore.nn.Cell or a "
                                       f"list of them, got {type(m).__name__}")
        if self.cfg.level in ("L0", "mix") and model is None:
            raise MsprobeError(f"PrecisionDebugger.start(model): level {self.cfg.level} records Cells, so pass the "
                               "network: debugger.start(model=net)")

    def _begin(self, model):
        cfg = self.cfg
        if model is not None:
            try:
                for m in (model if isinstance(model, (list, tuple)) else [model]):
                    for p in m.get_parameters():
                        self.collector.param_keys.add((tuple(p.shape), p.dtype))
            except Exception as exc:
                self.errors.record("parameters", exc)
            if cfg.level in ("L0", "mix"):
                self.hooks.register_model(model)
            if cfg.level in ("L1", "mix") and not self.hooks._prims:
                self.hooks.register_primitives(model)
        self.hooks.patch_on()
        RT.on = True
        RT.primitives_on = True

    def _pause(self, in_step):
        was_on = RT.on
        if not in_step and not was_on:
            return False
        self._switch_off()
        self.hooks.patch_off()
        return was_on

    def _switch_off(self):
        RT.on = False
        RT.primitives_on = False

    def _guarded(self, where, fn):
        guarded(self.errors, where, fn)

    def _flush_errors(self):
        errors, self.collector.stat_errors = self.collector.stat_errors, []
        for exc in errors[:1]:
            self.errors.record("statistics", exc)

    def _after_step(self):
        self.hooks.prim_count.clear()
