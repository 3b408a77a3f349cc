"""The dump lifecycle behind the MindSpore PrecisionDebugger: steps, ranks, start/stop/step, flushing."""
import atexit
import glob
import logging
import os

from msprobe.core.dump.errorlog import ErrorLog
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


class Service:
    def __init__(self, cfg):
        self.cfg = cfg
        self.collector = Collector(cfg)
        self.errors = ErrorLog(cfg.dump_path)
        self.hooks = Hooks(self)
        self.loop = 0
        self.init_step = 0
        self.pid = os.getpid()
        self.first_start = True
        self.rank_ok = True
        self.ended = False
        self.active_step = None
        self._restore_pending = False
        self._check_existing()
        if cfg.level in ("L1", "mix"):
            self.hooks.install_api_patches()
        atexit.register(self._at_exit)

    @staticmethod
    def _rank_dir_name(rank):
        return "rank" if rank is None else f"rank{rank}"

    def _check_existing(self):
        pattern = os.path.join(glob.escape(self.cfg.dump_path), "step*", "rank*", "dump.json")
        found = sorted(glob.glob(pattern))
        if found:
            raise MsprobeError(
                f"dump_path {self.cfg.dump_path} already holds a dump "
                f"({os.path.relpath(found[0], self.cfg.dump_path)}); msprobe does not overwrite results: "
                "choose a new dump_path or remove the old dump")

    @property
    def current_iter(self):
        return self.loop + self.init_step

    def start(self, model=None):
        self._settle()
        if self.ended or os.getpid() != self.pid:
            return
        cfg = self.cfg
        if model is not None:
            models = model if isinstance(model, (list, tuple)) else [model]
            for m in models:
                if not _is_cell(m):
                    raise MsprobeError(f"PrecisionDebugger.start(model): model must be a mindspore.nn.Cell or a "
                                       f"list of them, got {type(m).__name__}")
        if cfg.level in ("L0", "mix") and model is None:
            raise MsprobeError(f"PrecisionDebugger.start(model): level {cfg.level} records Cells, so pass the "
                               "network: debugger.start(model=net)")
        it = self.current_iter
        if cfg.step and it > max(cfg.step):
            self.end()
            return
        if cfg.step and it not in cfg.step:
            return
        if self.first_start:
            self.first_start = False
            rank = _rank()
            if cfg.rank and (rank if rank is not None else 0) not in cfg.rank:
                self.rank_ok = False
        if not self.rank_ok:
            return
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
        self._open_step()
        self.hooks.patch_on()
        RT.on = True
        RT.primitives_on = True

    def _open_step(self):
        it = self.current_iter
        if self.active_step == it:
            return
        step_dir = os.path.join(self.cfg.dump_path, f"step{it}", self._rank_dir_name(_rank()))
        os.makedirs(step_dir, mode=0o750, exist_ok=True)
        self.collector.set_dir(step_dir)
        self.errors.directory = step_dir
        self.active_step = it

    def stop(self):
        self._settle()
        if self.ended or os.getpid() != self.pid:
            return
        if not RT.on:
            return
        RT.on = False
        RT.primitives_on = False
        self.hooks.patch_off()
        self._flush()

    def step(self):
        self._settle()
        if os.getpid() != self.pid:
            return
        RT.on = False
        RT.primitives_on = False
        self.hooks.patch_off()
        if not self.ended:
            self._flush()
        self.collector.reset()
        self.hooks.prim_count.clear()
        self.active_step = None
        self.loop += 1

    def set_init_step(self, step):
        if isinstance(step, bool) or not isinstance(step, int) or step < 0:
            raise MsprobeError(f"set_init_step: step must be an int >= 0, got {step!r}")
        self.init_step = step
        self.loop = 0

    def _flush(self):
        if self.active_step is None:
            return
        guarded(self.errors, "flush", self.collector.flush)
        errors, self.collector.stat_errors = self.collector.stat_errors, []
        for exc in errors[:1]:
            self.errors.record("statistics", exc)

    def overflow_done(self):
        RT.on = False
        RT.primitives_on = False
        self._flush()
        self.ended = True
        self._restore_pending = True
        log.info("msprobe ends successfully.")

    def _settle(self):
        if self._restore_pending:
            self._restore_pending = False
            self.hooks.restore()

    def end(self):
        if self.ended:
            return
        self.ended = True
        RT.on = False
        RT.primitives_on = False
        self.hooks.restore()
        log.info("msprobe ends successfully.")

    def _at_exit(self):
        try:
            if os.getpid() == self.pid and not self.ended and self.active_step is not None:
                RT.on = False
                self._flush()
        except Exception:
            pass
