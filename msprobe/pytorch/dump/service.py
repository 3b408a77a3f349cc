"""The PyTorch side of the dump lifecycle (steps, ranks, start/stop/step: msprobe.core.dump.lifecycle)."""
import logging

import torch

from msprobe.core.dump.errorlog import ErrorLog
from msprobe.core.dump.lifecycle import DumpLifecycle
from msprobe.core.errors import MsprobeError
from msprobe.pytorch.dump.collector import Collector
from msprobe.pytorch.dump.hooks import RT, Hooks, guarded

log = logging.getLogger("msprobe")


def _rank():
    try:
        import torch.distributed as dist
        if dist.is_available() and dist.is_initialized():
            return dist.get_rank()
    except Exception:
        pass
    return None


class Service(DumpLifecycle):
    def __init__(self, cfg, npu_module=None):
        self.collector = Collector(cfg)
        self.errors = ErrorLog(cfg.dump_path)
        self.collector.report = self.errors.record     # per-tensor failures: the record stays, without values
        self.cfg = cfg
        self.hooks = Hooks(self)
        self._module_dump_handles = []
        self.npu_module = npu_module
        self._init_lifecycle(cfg)
        if cfg.level in ("L1", "mix", "L2"):
            self.hooks.install_api_patches(npu_module)

    # ------------------------------------------------------------------ the framework part of the lifecycle
    def rank(self):
        return _rank()

    def _check_start(self, model):
        level = self.cfg.level
        if level not in ("L0", "mix"):
            return
        if model is None:
            raise MsprobeError(
                f"PrecisionDebugger.start(model): level {level} records modules, so pass the model: "
                "debugger.start(model=model)")
        for m in (model if isinstance(model, (list, tuple)) else [model]):
            if not isinstance(m, torch.nn.Module) or isinstance(m, torch.jit.ScriptModule):
                raise MsprobeError(
                    f"PrecisionDebugger.start(model): model must be a torch.nn.Module or a list of them, "
                    f"got {type(m).__name__}")

    def _not_dumped(self):
        self.hooks.patch_off()      # not dumped: nothing wrapped at all

    def _begin(self, model):
        if model is not None and self.cfg.level in ("L0", "mix"):
            self.hooks.register_model(model)
        RT.on = True
        self.hooks.push_mode()

    def _pause(self, in_step):
        was_on = RT.on
        if in_step and not was_on:
            return False
        RT.on = False
        self.hooks.pop_mode()
        return was_on

    def _switch_off(self):
        RT.on = False

    def _guarded(self, where, fn):
        guarded(self.errors, where, fn)

    def _flush_errors(self):
        for exc in self.collector.writer.take_errors():     # async writer thread failures
            self.errors.record("tensor file", exc)

    def _wait_writes(self):
        self.collector.wait_writes()

    def _after_writes(self, fn):
        writer = self.collector.writer
        if writer.background:
            writer.submit(fn)       # async_dump: after the step's files queued before it
        else:
            fn()

    # ------------------------------------------------------------------ module_dump
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
