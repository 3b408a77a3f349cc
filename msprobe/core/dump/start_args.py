"""The reference's extra ``start()`` arguments, both frameworks (framework-free).

* ``token_range=[a, b]`` (inference): record only the forwards number a..b of the model, counted from 0 at that
  start, both included. The debugger passes its runtime switch object and the names of its on/off attributes.
* ``rank_id=R`` (26.x): the rank this process records as (directory ``rank{R}``, the ``rank`` filter) instead
  of the one torch.distributed / MindSpore's communication reports.
"""
from __future__ import annotations

import logging

from msprobe.core.errors import MsprobeError

log = logging.getLogger("msprobe")


def check_token_range(token_range):
    """``(a, b)`` from ``[a, b]`` with ints 0 <= a <= b, else one MsprobeError line."""
    if (not isinstance(token_range, (list, tuple)) or len(token_range) != 2
            or any(isinstance(v, bool) or not isinstance(v, int) for v in token_range)
            or not 0 <= token_range[0] <= token_range[1]):
        raise MsprobeError(f"PrecisionDebugger.start: token_range must be [start, end] with ints "
                           f"0 <= start <= end, got {token_range!r}")
    return int(token_range[0]), int(token_range[1])


def apply_rank_id(service, rank_id):
    """``start(rank_id=R)``: ``service.rank()`` returns R from now on (an int >= 0, else one MsprobeError line)."""
    if rank_id is None:
        return
    if isinstance(rank_id, bool) or not isinstance(rank_id, int) or rank_id < 0:
        raise MsprobeError(f"PrecisionDebugger.start: rank_id must be an int >= 0, got {rank_id!r}")
    service.rank = lambda: rank_id


class TokenWindow:
    """Counts the forwards of one root model (a forward pre-hook) and switches ``rt``'s ``switches`` on at
    forward number a and off at b + 1. ``arm`` at every start with a token_range, ``disarm`` before stop."""

    def __init__(self, rt, switches):
        self.rt, self.switches = rt, tuple(switches)
        self.model = None
        self.state = None

    def _set(self, value):
        for name in self.switches:
            setattr(self.rt, name, value)

    def arm(self, root, token_range, register_pre_hook):
        a, b = token_range
        if isinstance(root, (list, tuple)):
            if len(root) > 1:
                log.warning("msprobe: start(token_range=...) counts the forwards of the first model of the list")
            root = root[0]
        live = bool(getattr(self.rt, self.switches[0]))
        self.state = {"id": 0, "range": (a, b), "live": live}
        if live:
            self._set(False)            # on at forward number a
        if self.model is not root:
            self.model = root
            register_pre_hook(root, self._count)

    def _count(self, module, *args, **kwargs):
        state = self.state
        if not state or not state["live"] or module is not self.model:
            return None
        i, (a, b) = state["id"], state["range"]
        if i == a:
            self._set(True)
        elif i == b + 1:
            self._set(False)
        state["id"] = i + 1
        return None

    def disarm(self):
        """Before stop(): the step was recorded since start (switched off between tokens), so switch on
        again for stop() to write the files. Without an armed window: nothing."""
        state, self.state = self.state, None
        if state and state["live"]:
            self._set(True)
