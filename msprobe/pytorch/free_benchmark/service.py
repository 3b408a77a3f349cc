"""The PyTorch service of task free_benchmark: the dump lifecycle (steps, ranks, start/stop/step, flushes at
step() and at exit) with the API wrappers routed to :class:`~msprobe.pytorch.free_benchmark.handler.FreeBenchmark`
instead of the dump collector (msprobe.core.free_benchmark.lifecycle: the CSV at every flush, the summary)."""
from msprobe.core.free_benchmark.lifecycle import FreeBenchmarkLifecycle
from msprobe.pytorch.dump.service import Service
from msprobe.pytorch.free_benchmark.handler import FreeBenchmark


class FreeBenchmarkService(FreeBenchmarkLifecycle, Service):
    def __init__(self, cfg, npu_module=None):
        super().__init__(cfg, npu_module)
        self._init_free_benchmark(FreeBenchmark(self))

    def _begin(self, model):
        self._begin_free_benchmark()
        super()._begin(model)
