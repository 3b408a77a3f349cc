"""The MindSpore service of task free_benchmark: the dump lifecycle with the API wrappers routed to
:class:`~msprobe.mindspore.free_benchmark.handler.MsFreeBenchmark` (no Cell hooks, no Primitive recording)."""
from msprobe.core.free_benchmark.lifecycle import FreeBenchmarkLifecycle
from msprobe.mindspore.dump.hooks import RT
from msprobe.mindspore.dump.service import Service
from msprobe.mindspore.free_benchmark.handler import MsFreeBenchmark


class MsFreeBenchmarkService(FreeBenchmarkLifecycle, Service):
    def __init__(self, cfg):
        super().__init__(cfg)
        self._init_free_benchmark(MsFreeBenchmark(self))

    def _begin(self, model):
        self._begin_free_benchmark()
        self.hooks.patch_on()
        RT.on = True
        RT.primitives_on = False
