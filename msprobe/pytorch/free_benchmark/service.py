"""The PyTorch service of task free_benchmark: the dump lifecycle (steps, ranks, start/stop/step, flushes at
step() and at exit) with the API wrappers routed to :class:`~msprobe.pytorch.free_benchmark.handler.FreeBenchmark`
instead of the dump collector.  Rows are written to ``step{N}/rank{R}/free_benchmark.csv`` at every flush, through
the dump's writer (async_dump: on its thread)."""
import atexit
import logging
import os

from msprobe.core.free_benchmark.results import write_csv
from msprobe.pytorch.dump.service import Service
from msprobe.pytorch.free_benchmark.handler import FreeBenchmark

log = logging.getLogger("msprobe")


class FreeBenchmarkService(Service):
    def __init__(self, cfg, npu_module=None):
        super().__init__(cfg, npu_module)
        self.fuzz = FreeBenchmark(self)
        self.hooks.api_handler = self.fuzz
        self._summary_done = False
        log.info("The api free_benchmark hook function is successfully mounted to the model.")
        atexit.register(self._summary_at_exit)

    def _begin(self, model):
        self.fuzz.begin_step(self.collector.step_dir, self.current_iter, self.rank())
        super()._begin(model)

    def _flush(self):
        super()._flush()
        snap = self.fuzz.results.snapshot()
        if snap is not None:
            step_dir, rows = snap
            self._after_writes(lambda: self._guarded("writing free_benchmark.csv", lambda: write_csv(step_dir, rows)))

    def _after_step(self):
        super()._after_step()
        self.fuzz.end_step()

    def summary(self) -> str:
        cfg = self.cfg.free_benchmark
        return self.fuzz.results.summary(self.cfg.dump_path, cfg.pert_mode, cfg.handler_type)

    def _print_summary(self):
        if self._summary_done or os.getpid() != self.pid:
            return
        self._summary_done = True
        print(self.summary(), flush=True)

    def end(self):
        was_ended = self.ended
        super().end()
        if not was_ended:
            self._print_summary()

    def _summary_at_exit(self):
        try:
            if os.getpid() == self.pid and not self.first_start:
                self._print_summary()
        except Exception:  # noqa: BLE001 - nothing may fail at interpreter exit
            pass
