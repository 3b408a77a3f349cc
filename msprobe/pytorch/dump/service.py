"""The dump lifecycle behind PrecisionDebugger: steps, ranks, start/stop/step, flushing."""
import atexit
import glob
import logging
import os

import torch

from msprobe.core.errors import MsprobeError
from msprobe.pytorch.dump.collector import Collector
from msprobe.pytorch.dump.hooks import RT, ErrorLog, Hooks, guarded

log = logging.getLogger("msprobe")


def _rank():
    try:
        import torch.distributed as dist
        if dist.is_available() and dist.is_initialized():
            return dist.get_rank()
    except Exception:
        pass
    return None


class Service:
    def __init__(self, cfg, npu_module=None):
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
        self.active_step = None     # the step whose files are open
        self._restore_pending = False
        self._module_dump_handles = []
        self.npu_module = npu_module
        self._check_existing()
        if cfg.level in ("L1", "mix", "L2"):
            self.hooks.install_api_patches(npu_module)
        atexit.register(self._at_exit)

    # ------------------------------------------------------------------ helpers
    def _rank_dir_name(self, rank):
        return "rank" if rank is None else f"rank{rank}"

    def _check_existing(self):
        rank = _rank()
        pattern = os.path.join(glob.escape(self.cfg.dump_path), "step*", self._rank_dir_name(rank)
                               if rank is not None else "rank*", "*.json")
        found = sorted(p for p in glob.glob(pattern) if os.path.basename(p) in ("dump.json", "debug.json"))
        if found:
            raise MsprobeError(
                f"dump_path {self.cfg.dump_path} already holds a dump ({os.path.relpath(found[0], self.cfg.dump_path)}); "
                "msprobe does not overwrite results: choose a new dump_path or remove the old dump")

    @property
    def current_iter(self):
        return self.loop + self.init_step

    # ------------------------------------------------------------------ lifecycle
    def start(self, model=None):
        self._settle()
        if self.ended or os.getpid() != self.pid:
            return
        cfg = self.cfg
        if cfg.level == "debug":
            self._open_step()
            return
        if cfg.level in ("L0", "mix"):
            if model is None:
                raise MsprobeError(
                    f"PrecisionDebugger.start(model): level {cfg.level} records modules, so pass the model: "
                    "debugger.start(model=model)")
            models = model if isinstance(model, (list, tuple)) else [model]
            for m in models:
                if not isinstance(m, torch.nn.Module) or isinstance(m, torch.jit.ScriptModule):
                    raise MsprobeError(
                        f"PrecisionDebugger.start(model): model must be a torch.nn.Module or a list of them, "
                        f"got {type(m).__name__}")
        it = self.current_iter
        if cfg.step and it > max(cfg.step):
            self.end()
            return
        if cfg.step and it not in cfg.step:
            self.hooks.patch_off()      # not dumped: nothing wrapped at all
            return
        if self.first_start:
            self.first_start = False
            rank = _rank()
            if cfg.rank and (rank if rank is not None else 0) not in cfg.rank:
                self.rank_ok = False
        if not self.rank_ok:
            self.hooks.patch_off()
            return
        if model is not None and cfg.level in ("L0", "mix"):
            self.hooks.register_model(model)
        self._open_step()
        RT.on = True
        self.hooks.push_mode()

    def _open_step(self):
        it = self.current_iter
        if self.active_step == it:
            return
        rank = _rank()
        step_dir = os.path.join(self.cfg.dump_path, f"step{it}", self._rank_dir_name(rank))
        os.makedirs(step_dir, mode=0o750, exist_ok=True)
        self.collector.set_dir(step_dir)
        self.errors.directory = step_dir
        self.active_step = it

    def stop(self):
        self._settle()
        if self.ended or os.getpid() != self.pid:
            return
        if self.cfg.level == "debug":
            return
        if not RT.on:
            self.hooks.pop_mode()
            return
        RT.on = False
        self.hooks.pop_mode()
        self._flush()

    def step(self):
        self._settle()
        if os.getpid() != self.pid:
            return
        if RT.on:
            RT.on = False
            self.hooks.pop_mode()
        if not self.ended:
            self._flush()
        self.collector.reset()
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
        for exc in self.collector.writer.take_errors():     # async writer thread failures
            self.errors.record("tensor file", exc)

    def overflow_done(self):
        """overflow_check reached overflow_nums: write what we have and stop for good.

        Called from inside a hook (possibly inside the function mode's handler, where torch has popped
        the mode temporarily), so the patches and the mode are removed at the next start/stop/step."""
        RT.on = False
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
        self.hooks.restore()
        self.collector.wait_writes()
        log.info("msprobe ends successfully.")

    def module_dump(self, module, dump_name):
        """Record ``module`` as one unit (APIs inside it are not recorded) until module_dump_end()."""
        hooks = self.hooks
        for model in hooks.hooked_models:
            roots = model if isinstance(model, (list, tuple)) else [model]
            if any(module is m for root in roots for m in root.modules()):
                log.warning("msprobe: module_dump(%s): this module is already recorded by the %s level dump; "
                            "module_dump ignored", dump_name, self.cfg.level)
                return
        hooks.apis_suspended = True
        before = len(hooks._module_handles)
        hooks._hook_module(module, f"Module.{dump_name}.{type(module).__name__}")
        self._module_dump_handles = hooks._module_handles[before:]
        del hooks._module_handles[before:]

    def module_dump_end(self):
        self.hooks.apis_suspended = False
        for h in self._module_dump_handles:
            try:
                h.remove()
            except Exception:
                pass
        self._module_dump_handles = []

    def _at_exit(self):
        try:
            if os.getpid() == self.pid and not self.ended and self.active_step is not None:
                RT.on = False
                self._flush()
            self.collector.wait_writes()
        except Exception:
            pass
