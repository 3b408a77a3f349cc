"""What the PyTorch and MindSpore free_benchmark handlers share (no framework imports): the per-run state
(call counts, result rows, APIs skipped), the step boundaries and the walk over nested arguments."""

from __future__ import annotations

import logging

from msprobe.core.free_benchmark.results import Results

log = logging.getLogger("msprobe")

MAX_DEPTH = 50  # nesting of lists, tuples and dicts walked in an API's arguments and outputs


def leaves(obj, kind, depth=0):
    """The objects of type ``kind`` (tensors) in a nested structure of lists, tuples and dict values."""
    if isinstance(obj, kind):
        yield obj
    elif depth < MAX_DEPTH and isinstance(obj, (list, tuple)):
        for x in obj:
            yield from leaves(x, kind, depth + 1)
    elif depth < MAX_DEPTH and isinstance(obj, dict):
        for x in obj.values():
            yield from leaves(x, kind, depth + 1)


class HandlerBase:
    """The state of a free_benchmark handler (``Hooks.api_handler``) of one dump service."""

    def __init__(self, service):
        self.svc = service
        self.cfg = service.cfg.free_benchmark
        self.errors = service.errors
        self.mode = self.cfg.pert_mode
        self.counts = {}            # api -> calls in this step
        self.results = Results()
        self.skipped = {}           # api -> reason (logged once)
        self.step = 0
        self.rank = 0

    def begin_step(self, step_dir, step, rank):
        self.step = step
        self.rank = rank if rank is not None else 0
        if self.results.step_dir != step_dir:
            self.results.new_step(step_dir)
            self._new_step_dir()

    def _new_step_dir(self):
        """Called when the rows start a new step folder."""

    def end_step(self):
        self.counts.clear()

    def next_index(self, name):
        """The call number of API ``name`` in this step (0 for its first call)."""
        n = self.counts.get(name, 0)
        self.counts[name] = n + 1
        return n

    def _skip(self, name, reason):
        if name not in self.skipped:
            self.skipped[name] = reason
            log.debug("[msprobe] Free benchmark: %s: %s; perturbation cancelled", name, reason)
