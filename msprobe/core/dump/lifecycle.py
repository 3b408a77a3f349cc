"""The dump lifecycle shared by the PyTorch and MindSpore debuggers: steps, ranks, start/stop/step, flushing.

A framework's ``Service`` subclasses :class:`DumpLifecycle` and supplies what differs: how to read the
distributed rank, how to check the model passed to ``start``, and how to switch recording on and off
(its hooks, patches and runtime flags).  Everything here is framework-free.
"""

from __future__ import annotations

import atexit
import glob
import logging
import os

from msprobe.core.errors import MsprobeError

log = logging.getLogger("msprobe")


def rank_dir_name(rank) -> str:
    return "rank" if rank is None else f"rank{rank}"


class DumpLifecycle:
    """Step counting, the step and rank filters, the step directory and the flushes.

    Subclasses set ``self.collector`` (with ``set_dir``, ``flush``, ``reset``), ``self.errors`` (an
    :class:`~msprobe.core.dump.errorlog.ErrorLog`) and ``self.hooks`` (with ``restore``) before calling
    :meth:`_init_lifecycle`, and implement the ``_``-prefixed framework methods below."""

    # ---------------------------------------------------------------- framework part
    def rank(self):
        """The distributed rank, or None outside a distributed run."""
        raise NotImplementedError

    def _check_start(self, model) -> None:
        """Raise MsprobeError when ``model`` does not suit the level (checked at every start)."""

    def _not_dumped(self) -> None:
        """start() of a step that is filtered out (step or rank list)."""

    def _begin(self, model) -> None:
        """Switch recording on for the current step (model hooks, patches, runtime flags)."""
        raise NotImplementedError

    def _pause(self, in_step: bool) -> bool:
        """stop()/step(): switch recording off; return whether it was on.  ``in_step``: called by step()."""
        raise NotImplementedError

    def _switch_off(self) -> None:
        """Recording off, nothing else (inside a hook, at the end, at exit)."""
        raise NotImplementedError

    def _guarded(self, where: str, fn) -> None:
        """Run tool code so that a failure is logged to dump_error_info.log and never raised."""
        try:
            fn()
        except Exception as exc:  # noqa: BLE001 - the training must go on
            self.errors.record(where, exc)

    def _flush_errors(self) -> None:
        """Report failures collected outside the hooks (writer threads, deferred statistics)."""

    def _after_step(self) -> None:
        """Extra per-step reset."""

    def _wait_writes(self) -> None:
        """Wait for background writes (async dump)."""

    # ---------------------------------------------------------------- shared part
    def _init_lifecycle(self, cfg) -> None:
        self.cfg = cfg
        self.loop = 0
        self.init_step = 0
        self.pid = os.getpid()
        self.first_start = True
        self.rank_ok = True
        self.ended = False
        self.active_step = None     # the step whose files are open
        self._restore_pending = False
        self._check_existing()
        atexit.register(self._at_exit)

    def _check_existing(self) -> None:
        rank = self.rank()
        pattern = os.path.join(glob.escape(self.cfg.dump_path), "step*",
                               rank_dir_name(rank) if rank is not None else "rank*", "*.json")
        found = sorted(p for p in glob.glob(pattern) if os.path.basename(p) in ("dump.json", "debug.json"))
        if found:
            raise MsprobeError(
                f"dump_path {self.cfg.dump_path} already holds a dump ({os.path.relpath(found[0], self.cfg.dump_path)}); "
                "msprobe does not overwrite results: choose a new dump_path or remove the old dump")

    @property
    def current_iter(self) -> int:
        return self.loop + self.init_step

    def _alive(self) -> bool:
        """False after the end and in forked children (a dataloader worker must not write the dump)."""
        return not self.ended and os.getpid() == self.pid

    def start(self, model=None) -> None:
        self._settle()
        if not self._alive():
            return
        cfg = self.cfg
        if cfg.level == "debug":
            self._open_step()
            return
        self._check_start(model)
        it = self.current_iter
        if cfg.step and it > max(cfg.step):
            self.end()
            return
        if cfg.step and it not in cfg.step:
            self._not_dumped()
            return
        if self.first_start:
            self.first_start = False
            rank = self.rank()
            if cfg.rank and (rank if rank is not None else 0) not in cfg.rank:
                self.rank_ok = False
        if not self.rank_ok:
            self._not_dumped()
            return
        self._open_step()
        self._begin(model)

    def _open_step(self) -> None:
        it = self.current_iter
        if self.active_step == it:
            return
        step_dir = os.path.join(self.cfg.dump_path, f"step{it}", rank_dir_name(self.rank()))
        os.makedirs(step_dir, mode=0o750, exist_ok=True)
        self.collector.set_dir(step_dir)
        self.errors.directory = step_dir
        self.active_step = it

    def stop(self) -> None:
        self._settle()
        if not self._alive() or self.cfg.level == "debug":
            return
        if self._pause(in_step=False):
            self._flush()

    def step(self) -> None:
        self._settle()
        if os.getpid() != self.pid:
            return
        self._pause(in_step=True)
        if not self.ended:
            self._flush()
        self.collector.reset()
        self._after_step()
        self.active_step = None
        self.loop += 1

    def set_init_step(self, step) -> None:
        if isinstance(step, bool) or not isinstance(step, int) or step < 0:
            raise MsprobeError(f"set_init_step: step must be an int >= 0, got {step!r}")
        self.init_step = step
        self.loop = 0

    def _flush(self) -> None:
        if self.active_step is None:
            return
        self._guarded("flush", self.collector.flush)
        self._flush_errors()

    def overflow_done(self) -> None:
        """overflow_check reached overflow_nums: write what we have and stop for good.

        Called from inside a hook, so the patches are removed at the next start/stop/step."""
        self._switch_off()
        self._flush()
        self.ended = True
        self._restore_pending = True
        log.info("msprobe ends successfully.")

    def _settle(self) -> None:
        if self._restore_pending:
            self._restore_pending = False
            self.hooks.restore()

    def end(self) -> None:
        if self.ended:
            return
        self.ended = True
        self._switch_off()
        self.hooks.restore()
        self._wait_writes()
        log.info("msprobe ends successfully.")

    def _at_exit(self) -> None:
        try:
            if os.getpid() == self.pid and not self.ended and self.active_step is not None:
                self._switch_off()
                self._flush()
            self._wait_writes()
        except Exception:  # noqa: BLE001 - nothing may fail at interpreter exit
            pass
