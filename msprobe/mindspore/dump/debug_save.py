"""``PrecisionDebugger.save`` for MindSpore: the MindSpore side of :mod:`msprobe.core.dump.debug_save`."""
import mindspore as ms

from msprobe.core.dump import debug_save as core
from msprobe.mindspore.dump.hooks import TLS, _is_float, guarded


class _MindSporeSave(core.SaveAdapter):
    def is_tensor(self, value):
        return isinstance(value, ms.Tensor)

    def wants_grad(self, tensor):
        # MindSpore tensors carry no requires_grad: a float tensor inside a grad computation gets one
        return _is_float(tensor)

    def guarded(self, errors, where, fn, *args):
        return guarded(errors, where, fn, *args)

    def in_tool(self):
        return bool(TLS.depth)


ADAPTER = _MindSporeSave()


def debug_save(service, value, name, save_backward=True):
    core.debug_save(service, ADAPTER, value, name, save_backward)
