"""``PrecisionDebugger`` for MindSpore PyNative training.

The same config.json, the same methods and the same guarantees as :mod:`msprobe.pytorch.debugger`:
a process-wide singleton; ``start``/``stop``/``step`` also work as class methods once an instance
exists; every configuration problem is one :class:`~msprobe.core.errors.MsprobeError` at
construction; once training runs, nothing the tool does may stop or change it.
"""
import logging
import os

from msprobe.core.dump.config import load_dump_config
from msprobe.core.dump.debugger_base import DebuggerBase, check_seed_args, prepared_config, seed_python
from msprobe.core.errors import MsprobeError

log = logging.getLogger("msprobe")


def _device_target():
    import mindspore as ms
    try:
        return ms.get_context("device_target")
    except Exception:
        return "CPU"


class PrecisionDebugger(DebuggerBase):
    _instance = None

    def __init__(self, config_path=None, task=None, dump_path=None, level=None, step=None):
        self._init_once(lambda: self._setup(config_path, task, dump_path, level, step),
                        dict(config_path=config_path, task=task, dump_path=dump_path, level=level, step=step))

    def _setup(self, config_path, task, dump_path, level, step):
        cfg = load_dump_config(config_path, task=task, dump_path=dump_path, level=level, step=step,
                               framework="mindspore")
        import mindspore as ms
        try:
            mode = ms.get_context("mode")
        except Exception:
            mode = ms.PYNATIVE_MODE
        if mode != ms.PYNATIVE_MODE:
            # static graph: MindSpore's own kernel dump, converted to dump.json at every step()
            from msprobe.mindspore.dump import static_graph as sg
            sg.check_static_config(cfg, sg._device_target(), sg._jit_level())
            self.config = cfg = prepared_config(cfg, seed_all)
            self.service = sg.StaticGraphService(cfg)
            return
        if cfg.level == "L2":
            raise MsprobeError(
                f"level L2 (kernel dump through MindSpore's own dump) needs an Ascend device in PyNative mode; this "
                f"MindSpore runs on {_device_target()}. Use level L0, L1 or mix here, or run the network in GRAPH_MODE "
                "(mindspore.set_context(mode=mindspore.GRAPH_MODE)), where L2 converts MindSpore's kernel dump")
        cfg = prepared_config(cfg, seed_all)
        self.config = cfg
        if cfg.task == "grad_probe":   # no dump service; monitor(optimizer) attaches the probe
            from msprobe.mindspore.grad_probe.grad_monitor import GradProbeService
            self.service = GradProbeService(cfg)
            return
        if cfg.task == "free_benchmark":
            from msprobe.mindspore.free_benchmark.service import MsFreeBenchmarkService
            self.service = MsFreeBenchmarkService(cfg)
            return
        from msprobe.mindspore.dump.service import Service
        self.service = Service(cfg)

    _ROOT_WORD = "network"

    def _token_switches(self):
        if type(self.service).__name__ == "StaticGraphService":
            raise MsprobeError("start(token_range=...) counts the network's forwards with a Python hook, which a "
                               "GRAPH_MODE graph does not run; select iterations with \"step\" in the config instead")
        from msprobe.mindspore.dump.hooks import RT
        return RT, ("on", "primitives_on")

    @classmethod
    def monitor(cls, optimizer):
        """task grad_probe: record the gradients the optimizer receives at every call (docs/grad_probe.md);
        with another task it does nothing."""
        inst = cls._get()
        if inst.config.task != "grad_probe":
            return
        inst.service.monitor(optimizer)

    @classmethod
    def save(cls, variable, name, save_backward=True):
        """Level ``debug``: record ``variable`` (tensors, numbers, str, lists/tuples/dicts of them) as
        ``{name}.{n}.debug`` in debug.json, and with ``save_backward`` its gradients as ``{name}_grad.{n}.debug``."""
        inst = cls._get()
        if inst.config.level != "debug":
            return
        from msprobe.mindspore.dump.debug_save import debug_save
        debug_save(inst.service, variable, name, save_backward)


def seed_all(seed=1234, mode=False, rm_dropout=False):
    """Fix Python, numpy and MindSpore random state; ``mode`` asks for deterministic kernels."""
    check_seed_args(seed, mode, rm_dropout)
    import mindspore as ms
    seed_python(seed)
    ms.set_seed(seed)
    try:
        ms.set_context(deterministic="ON" if mode else "OFF")
    except Exception:
        pass
    os.environ["HCCL_DETERMINISTIC"] = str(mode)
    if rm_dropout:
        log.warning("seed_all(rm_dropout=True) is not supported for MindSpore by this msprobe; dropout is kept")
