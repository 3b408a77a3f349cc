"""``PrecisionDebugger`` for PyTorch: the object users put into their training scripts.

Compatible with MindStudio Probe's API (8.x): a process-wide singleton; ``start``/``stop``/``step``/
``save`` also work as class methods once an instance exists. Every configuration problem is raised
as one :class:`~msprobe.core.errors.MsprobeError` at construction, before training starts; once it
runs, nothing the tool does may stop or change the training.
"""
import logging
import os

from msprobe.core.dump.config import load_dump_config
from msprobe.core.dump.debugger_base import DebuggerBase, check_seed_args, prepared_config, seed_python
from msprobe.core.errors import MsprobeError

log = logging.getLogger("msprobe")


class PrecisionDebugger(DebuggerBase):
    _instance = None

    def __init__(self, config_path=None, task=None, dump_path=None, level=None, model=None, step=None):
        self._init_once(lambda: self._setup(config_path, task, dump_path, level, model, step),
                        dict(config_path=config_path, task=task, dump_path=dump_path, level=level, model=model,
                             step=step))

    def _setup(self, config_path, task, dump_path, level, model, step):
        cfg = load_dump_config(config_path, task=task, dump_path=dump_path, level=level, step=step,
                               framework="pytorch")
        npu_module = None
        from msprobe.pytorch.npu import npu_module as _npu_module, npu_state
        state = npu_state()
        if cfg.level == "L2" and state != "available":
            raise MsprobeError(
                f"level L2 (kernel dump) needs an Ascend NPU with torch_npu; here torch_npu is {state}. "
                "Use level L0, L1 or mix on this machine")
        if state in ("available", "no-device"):
            npu_module = _npu_module()
        cfg = prepared_config(cfg, seed_all)
        self.config = cfg
        if cfg.task == "grad_probe":   # no dump service; monitor(model) attaches the probe
            from msprobe.pytorch.grad_probe.grad_monitor import GradProbeService
            self.service = GradProbeService(cfg)
        else:
            from msprobe.pytorch.dump.service import Service
            if cfg.task == "free_benchmark":
                from msprobe.pytorch.free_benchmark.service import FreeBenchmarkService as Service
            elif cfg.task == "tensor" and getattr(cfg, "online", None) is not None:   # online run_ut
                from msprobe.pytorch.acc_check.online_client import OnlineService as Service
            self.service = Service(cfg, npu_module)
        self.model = model
        self.npu_state = state

    # ------------------------------------------------------------------ class-level API (start/stop/step: DebuggerBase)
    def _model_for_start(self, model):
        return model if model is not None else self.model

    _ROOT_WORD = "model"

    def _token_switches(self):
        from msprobe.pytorch.dump.hooks import RT
        return RT, ("on",)

    @classmethod
    def monitor(cls, model):
        """task grad_probe: record the gradients of ``model``'s parameters at every optimizer step
        (docs/grad_probe.md); with another task it does nothing."""
        inst = cls._get()
        if inst.config.task != "grad_probe":
            return
        inst.service.monitor(model)

    @classmethod
    def save(cls, variable, name, save_backward=True):
        inst = cls._get()
        if inst.config.level != "debug":
            return
        from msprobe.pytorch.dump.debug_save import debug_save
        debug_save(inst.service, variable, name, save_backward)

    @classmethod
    def register_custom_api(cls, module, api, api_prefix=None):
        """Record calls of ``module.api`` as ``{api_prefix}.{api}.{n}.forward`` (prefix: the module's name)."""
        inst = cls._get()
        if not isinstance(api, str) or not hasattr(module, api):
            raise MsprobeError(f"register_custom_api: module {getattr(module, '__name__', module)!s} does not have "
                               f"{api!r}")
        prefix = api_prefix if api_prefix is not None else getattr(module, "__name__", None)
        if not isinstance(prefix, str) or not prefix:
            raise MsprobeError("register_custom_api: api_prefix must be a non-empty str (the module has no __name__)")
        inst.service.hooks.register_custom(module, api, prefix)

    @classmethod
    def restore_custom_api(cls, module, api):
        """Undo :meth:`register_custom_api`."""
        cls._get().service.hooks.restore_custom(module, api)


def seed_all(seed=1234, mode=False, rm_dropout=False):
    """Fix Python, numpy and torch random state (and CUDA/NPU when present); ``mode`` turns on
    deterministic algorithms; ``rm_dropout`` makes F.dropout* use p=0 (call it before the debugger)."""
    check_seed_args(seed, mode, rm_dropout)
    import torch
    seed_python(seed)
    torch.manual_seed(seed)
    torch.use_deterministic_algorithms(mode)
    if torch.cuda.is_available():
        torch.cuda.manual_seed_all(seed)
        torch.backends.cudnn.deterministic = True
        torch.backends.cudnn.benchmark = False
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    from msprobe.pytorch.npu import npu_state
    if npu_state() == "available":
        try:
            torch.npu.manual_seed_all(seed)
            os.environ["HCCL_DETERMINISTIC"] = str(mode)
        except Exception:
            pass
    if rm_dropout:
        _remove_dropout()


def _remove_dropout():
    import torch.nn.functional as F
    for name in ("dropout", "dropout2d", "dropout3d"):
        orig = getattr(F, name)
        if getattr(orig, "__msprobe_no_dropout__", False):
            continue

        def make(fn):
            def no_dropout(input, p=0.5, training=True, inplace=False):
                if p < 0.0 or p > 1.0:
                    raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")
                return fn(input, 0.0, training, inplace)
            no_dropout.__msprobe_no_dropout__ = True
            no_dropout.__name__ = fn.__name__
            return no_dropout

        setattr(F, name, make(orig))


def module_dump(module, dump_name):
    """Dump ``module`` as one unit (its inner APIs are not recorded) until :func:`module_dump_end`."""
    import torch
    if not isinstance(module, torch.nn.Module):
        raise MsprobeError(f"module_dump: module must be a torch.nn.Module, got {type(module).__name__}")
    if not isinstance(dump_name, str):
        raise MsprobeError(f"module_dump: dump_name must be a str, got {type(dump_name).__name__}")
    inst = PrecisionDebugger._get()
    inst.service.module_dump(module, dump_name)


def module_dump_end():
    inst = PrecisionDebugger._get()
    inst.service.module_dump_end()
