"""The dump lifecycle shared by the PyTorch and MindSpore debuggers: steps, ranks, start/stop/step, flushing.

Crashes and reruns (docs/reliability.md "Crashed training"):

* While a step is being recorded its rank directory holds ``dump_incomplete.json`` (see
  :data:`INCOMPLETE_NAME`); it is removed once the step's files are written at stop()/step().  A run that
  dies meanwhile (exception, SIGTERM, SIGKILL) leaves it behind, and ``compare`` / ``graph`` say that the
  dump is incomplete.  On an exception the files recorded so far are still written at exit (valid JSON).
* A rerun with the same dump_path never mixes runs: before this process writes its first step, the rank
  directories of *its own rank* left by an earlier run are moved to ``dump_path/previous_<ts>/stepN/rankR``
  (one warning; other ranks' directories are never touched).

A framework's ``Service`` subclasses :class:`DumpLifecycle` and supplies what differs: how to read the
distributed rank, how to check the model passed to ``start``, and how to switch recording on and off
(its hooks, patches and runtime flags).  Everything here is framework-free.
"""

from __future__ import annotations

import atexit
import logging
import os
import re
import time

from msprobe.core.errors import MsprobeError
from msprobe.core.progress import SlowStages

log = logging.getLogger("msprobe")

#: left in a rank directory while its step is being recorded; still there = the run died mid-step
INCOMPLETE_NAME = "dump_incomplete.json"
#: where a rerun moves an earlier run's rank directories: dump_path/previous_<ts>/stepN/rankR
PREVIOUS_PREFIX = "previous_"
_STEP_DIR = re.compile(r"^step\d+$")
#: a flush (statistics, dump.json, stack.json ...) says what it is doing once it takes longer than this
SLOW_FLUSH_SECONDS = 1.0


def rank_dir_name(rank) -> str:
    return "rank" if rank is None else f"rank{rank}"


def incomplete_note(rank_dir: str):
    """One line saying why the dump in ``rank_dir`` is incomplete (None when it is complete)."""
    path = os.path.join(rank_dir, INCOMPLETE_NAME)
    if not os.path.isfile(path):
        return None
    info = {}
    try:
        import json

        with open(path, "r", encoding="utf-8") as fh:
            info = json.load(fh)
        if not isinstance(info, dict):
            info = {}
    except (OSError, ValueError, RecursionError):
        pass
    step = info.get("step")
    started = info.get("started")
    how = ("the training process exited while recording it (an exception?)" if info.get("state") == "exited"
           else "the training process was killed or crashed while recording it")
    last = info.get("last_record")
    has_json = any(os.path.isfile(os.path.join(rank_dir, n)) for n in ("dump.json", "debug.json"))
    if has_json:
        tail = (f"the last record written is {last}" if isinstance(last, str)
                else "records after its last stop()/step() are missing")
    else:
        tail = "nothing of this step was written but tensor files"
    where = f" (step {step}, started {started})" if isinstance(step, int) and isinstance(started, str) else ""
    return f"the dump in {rank_dir} is incomplete: {how}{where}; {tail}"


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
        self._claimed = set()       # rank dirs this process created (an earlier run's are moved away)
        self._marker = None         # the INCOMPLETE_NAME file of the step being recorded
        self._started = time.strftime("%Y%m%d%H%M%S")
        atexit.register(self._at_exit)

    def _set_aside(self, rank_name: str) -> None:
        """Move this rank's directories of an earlier run out of the way (see the module docstring)."""
        root = self.cfg.dump_path
        try:
            steps = [n for n in os.listdir(root) if _STEP_DIR.match(n)]
        except OSError:
            return
        moved = []
        dest_root = os.path.join(root, f"{PREVIOUS_PREFIX}{self._started}")
        for step in sorted(steps):
            src = os.path.join(root, step, rank_name)
            if src in self._claimed or not os.path.isdir(src) or os.path.islink(src):
                continue
            dest = os.path.join(dest_root, step, rank_name)
            k = 1
            while os.path.lexists(dest):
                dest = os.path.join(f"{dest_root}_{k}", step, rank_name)
                k += 1
            try:
                from msprobe.core.fileio import make_dirs

                make_dirs(os.path.dirname(dest), 0o750)
                os.rename(src, dest)
                moved.append(os.path.relpath(src, root))
            except OSError as exc:
                self.errors.record("moving the previous dump aside", exc)
        if moved:
            log.warning("msprobe: dump_path %s already held %s of an earlier run; moved to %s so that runs are "
                        "never mixed", root, ", ".join(moved[:3]) + (" ..." if len(moved) > 3 else ""),
                        os.path.relpath(dest_root, root) + os.sep)

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
            if self._open_step_safely():
                self._mark_recording()
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
        if not self._open_step_safely():
            self._not_dumped()
            return
        self._mark_recording()
        self._begin(model)

    def _open_step_safely(self) -> bool:
        """Open the step's directory; a failure (permissions, a full disk) skips the dump of this step, logged
        once, and never reaches the training."""
        try:
            self._open_step()
            return True
        except Exception as exc:  # noqa: BLE001 - start() is called by the training
            self.errors.record("opening the step directory", exc)
            return False

    def _open_step(self) -> None:
        it = self.current_iter
        if self.active_step == it:
            return
        from msprobe.core.fileio import make_dirs

        name = rank_dir_name(self.rank())
        step_dir = os.path.join(self.cfg.dump_path, f"step{it}", name)
        if step_dir not in self._claimed:
            # a rerun: this rank's directories of the earlier run go to previous_<ts>/ (never mixed, never
            # overwritten, never a crash of the training)
            self._set_aside(name)
        make_dirs(step_dir, 0o750)
        self._claimed.add(step_dir)
        self.collector.set_dir(step_dir)
        self.errors.directory = step_dir
        self.active_step = it

    # ---------------------------------------------------------------- the "step being recorded" marker
    def _after_writes(self, fn) -> None:
        """Run ``fn`` once the files flushed so far are on disk (async dump: queued behind them)."""
        fn()

    def _mark_recording(self) -> None:
        step_dir = getattr(self.collector, "step_dir", None)
        if self._marker is not None or step_dir is None:
            return
        path = os.path.join(step_dir, INCOMPLETE_NAME)
        self._marker = path
        info = {"state": "recording", "step": self.current_iter, "pid": os.getpid(),
                "started": time.strftime("%Y-%m-%d %H:%M:%S")}

        def write():
            from msprobe.core.dump.writer import write_json

            write_json(path, info)
        self._guarded("writing " + INCOMPLETE_NAME, write)

    def _mark_complete(self) -> None:
        path, self._marker = self._marker, None
        if path is None:
            return

        def remove():
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass
        self._after_writes(lambda: self._guarded("removing " + INCOMPLETE_NAME, remove))

    def _mark_exited(self) -> None:
        """At exit while recording: the files written now hold the records so far; say so in the marker."""
        path = self._marker
        if path is None:
            return
        data = getattr(self.collector, "debug" if self.cfg.level == "debug" else "data", None)
        last = next(reversed(data), None) if isinstance(data, dict) and data else None
        info = {"state": "exited", "step": self.active_step, "pid": os.getpid(),
                "started": time.strftime("%Y-%m-%d %H:%M:%S"), "last_record": last}

        def write():
            from msprobe.core.dump.writer import write_json

            write_json(path, info)
        self._after_writes(lambda: self._guarded("writing " + INCOMPLETE_NAME, write))

    def stop(self) -> None:
        self._settle()
        if not self._alive() or self.cfg.level == "debug":
            return
        if self._pause(in_step=False):
            self._flush()
            self._mark_complete()

    def step(self) -> None:
        self._settle()
        if os.getpid() != self.pid:
            return
        self._pause(in_step=True)
        if not self.ended:
            self._flush()
        self._mark_complete()
        try:
            self.collector.reset()
        except Exception as exc:  # noqa: BLE001 - step() is called by the training: never raise into it
            self.errors.record("step", exc)
            self._guarded("step", self.collector._reset_step)    # at least: no record carried into the next step
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
        # silent when quick; after a second, one line per stage (statistics, then each file) and the total
        with SlowStages(self._flush_name(), delay=SLOW_FLUSH_SECONDS) as stages:
            stages.stage("resolving the recorded statistics")
            self._guarded("flush", self.collector.flush)
        self._flush_errors()

    def _flush_name(self) -> str:
        try:
            rank = self.rank()
        except Exception:  # noqa: BLE001 - only a label
            rank = None
        return f"dump step {self.active_step}" + (f" rank {rank}" if rank is not None else "") + ": writing"

    def _wait_writes_said(self) -> None:
        """Wait for the queued tensor and JSON files (async dump), saying so when it takes over a second."""
        with SlowStages("dump: finishing the queued file writes", delay=SLOW_FLUSH_SECONDS) as stages:
            stages.stage("waiting for the writer thread")
            self._wait_writes()

    def overflow_done(self) -> None:
        """overflow_check reached overflow_nums: write what we have and stop for good.

        Called from inside a hook, so the patches are removed at the next start/stop/step."""
        self._switch_off()
        self._flush()
        self._mark_complete()
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
        self._wait_writes_said()
        log.info("msprobe ends successfully.")

    def _at_exit(self) -> None:
        try:
            if os.getpid() == self.pid and not self.ended and self.active_step is not None:
                self._switch_off()
                self._flush()
                self._mark_exited()
            self._wait_writes_said()
        except Exception:  # noqa: BLE001 - nothing may fail at interpreter exit
            pass


_warned_incomplete: set = set()


def warn_if_incomplete(rank_dir: str, missing: str = ""):
    """compare / graph reading ``rank_dir``: warn once when its dump is incomplete (the results cover what
    was recorded).  With ``missing`` (a file the command needs and did not find) raise the MsprobeError that
    says why it is missing.  Returns the note, or None for a complete dump."""
    note = incomplete_note(rank_dir)
    if note is None:
        return None
    if missing:
        raise MsprobeError(f"{note}: it has no {missing}; compare an earlier, complete step or dump again")
    key = os.path.abspath(rank_dir)
    if key not in _warned_incomplete:
        _warned_incomplete.add(key)
        log.warning("%s; what follows covers only what was recorded", note)
    return note
