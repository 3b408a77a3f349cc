"""What the PyTorch and MindSpore free_benchmark services add to the dump lifecycle (no framework imports).

Mixed in before the framework's dump ``Service``: the handler (``self.fuzz``, with ``results``, ``begin_step``
and ``end_step``) replaces the dump collector for API calls; each flush (stop(), step(), the end of the
process) rewrites the step's ``free_benchmark.csv`` through the dump's writer; the closing summary is printed
once, when the run ends or at exit.
"""

from __future__ import annotations

import atexit
import logging
import os

from msprobe.core.free_benchmark.results import write_csv

log = logging.getLogger("msprobe")


class FreeBenchmarkLifecycle:
    fuzz = None

    def _init_free_benchmark(self, handler) -> None:
        self.fuzz = handler
        self.hooks.api_handler = handler
        self._summary_done = False
        log.info("The api free_benchmark hook function is successfully mounted to the model.")
        atexit.register(self._summary_at_exit)

    def _begin_free_benchmark(self) -> None:
        self.fuzz.begin_step(self.collector.step_dir, self.current_iter, self.rank())

    def _flush(self) -> None:
        super()._flush()
        snap = self.fuzz.results.snapshot() if self.fuzz is not None else None
        if snap is not None:
            step_dir, rows = snap
            self._after_writes(lambda: self._guarded("writing free_benchmark.csv", lambda: write_csv(step_dir, rows)))

    def _after_step(self) -> None:
        super()._after_step()
        if self.fuzz is not None:
            self.fuzz.end_step()

    def summary(self) -> str:
        cfg = self.cfg.free_benchmark
        return self.fuzz.results.summary(self.cfg.dump_path, cfg.pert_mode, cfg.handler_type)

    def _print_summary(self) -> None:
        if self._summary_done or os.getpid() != self.pid:
            return
        self._summary_done = True
        print(self.summary(), flush=True)

    def end(self) -> None:
        was_ended = self.ended
        super().end()
        if not was_ended:
            self._print_summary()

    def _summary_at_exit(self) -> None:
        try:
            if os.getpid() == self.pid and not self.first_start:
                self._print_summary()
        except Exception:  # noqa: BLE001 - nothing may fail at interpreter exit
            pass
