"""``PrecisionDebugger.save`` for PyTorch: the torch side of :mod:`msprobe.core.dump.debug_save`."""
import torch

from msprobe.core.dump import debug_save as core
from msprobe.pytorch.dump.hooks import TLS, guarded


class _TorchSave(core.SaveAdapter):
    def is_tensor(self, value):
        return isinstance(value, torch.Tensor)

    def wants_grad(self, tensor):
        return tensor.requires_grad

    def grad_enabled(self):
        return torch.is_grad_enabled()

    def guarded(self, errors, where, fn, *args):
        return guarded(errors, where, fn, *args)

    def in_tool(self):
        return bool(TLS.depth)


ADAPTER = _TorchSave()


def debug_save(service, value, name, save_backward=True):
    core.debug_save(service, ADAPTER, value, name, save_backward)
