"""What the PyTorch and MindSpore grad_probe recorders share (no framework imports): the configuration, the
optimizer-step counter, the background writer and its error log, and the ``service`` PrecisionDebugger holds
for task grad_probe."""
from __future__ import annotations

import logging
from typing import List, Sequence

import numpy as np

from msprobe.core.grad_probe.writer import GradProbeWriter

log = logging.getLogger("msprobe")


class GradientMonitorBase:
    """The grad_probe recorder of one process; the framework attaches the hook (``monitor``) and computes
    a step's numbers."""

    def __init__(self, cfg, threaded: bool = True):
        self.level = cfg.grad_level
        self.bounds = tuple(cfg.bounds)
        self.param_list = tuple(cfg.param_list)
        self.steps = frozenset(cfg.step)
        self.ranks = tuple(cfg.rank)
        self.dump_path = cfg.dump_path
        self.threaded = threaded
        self.step = -1
        self.rank = 0
        self._writer = None

    def _open_writer(self) -> None:
        if self._writer is None:
            self._writer = GradProbeWriter(self.dump_path, self.rank, self.level, self.bounds, threaded=self.threaded)

    def _next_step(self, record) -> None:
        """One optimizer step: advance the counter and, on a selected step, ``record(step)`` (which submits
        the step to the writer); a failure is logged once and never reaches training."""
        self.step += 1
        if self.steps and self.step not in self.steps:
            return
        try:
            log.info("grad_probe: optimizer step %d", self.step)
            record(self.step)
        except Exception as exc:  # noqa: BLE001 - a hook never stops training
            try:
                self._writer.errors.record(f"grad_probe step {self.step}", exc)
            except Exception:  # noqa: BLE001
                pass

    def wait(self) -> None:
        if self._writer is not None:
            self._writer.wait()

    def _close_writer(self) -> None:
        if self._writer is not None:
            self._writer.close()


def split_flat(host: np.ndarray, sizes: Sequence[int]) -> List[np.ndarray]:
    """Views of one concatenated host array, one per tensor of ``sizes`` elements."""
    out, start = [], 0
    for n in sizes:
        out.append(host[start:start + n])
        start += n
    return out


class GradProbeServiceBase:
    """What PrecisionDebugger holds as ``service`` for task grad_probe: start/stop/step do nothing (the
    reference creates no dump service for it); ``monitor(model / optimizer)`` attaches the probe."""

    def __init__(self, cfg, monitor: GradientMonitorBase):
        self.config = cfg
        self.monitor_ = monitor

    def monitor(self, target) -> None:
        self.monitor_.monitor(target)

    def start(self, model=None) -> None:
        pass

    def stop(self) -> None:
        self.monitor_.wait()

    def step(self) -> None:
        pass

    def set_init_step(self, step) -> None:
        pass

    def end(self) -> None:
        self.monitor_.end()
