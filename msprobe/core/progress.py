"""Stage progress of long work: compare, graph, merge_result, and the dump's final flush (framework-free).

A command runs one or more *jobs* (a rank, a graph, a merge), each through named *stages* (read, match,
metrics, write, ...). A job is driven through one callable, ``job(stage, done, total, unit=None, detail=None)``:
a new stage name ends the previous stage. Two outputs, both on stderr:

* one plain INFO log line per finished stage, always (also in pipes, CI logs and tests)::

      [msprobe] INFO compare rank0: read 2/2 files (240,600 + 240,600 rows) in 3.12 s

* a live display (rich) of every running job's stage, count and elapsed time, only when stderr is a terminal;
  ``MSPROBE_PROGRESS=1`` forces it on (e.g. to see it through a pipe), ``MSPROBE_PROGRESS=0`` or ``-q`` turns
  it off. The display is transient: it is cleared when the command ends or is interrupted, and the cursor is
  restored; log lines printed while it runs go above it instead of through it.

:class:`SlowStages` is the quiet variant for work that is usually quick (the dump's final flush): it says
nothing unless the work is still running after a delay (one second), then one line per stage.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
import time
from typing import Callable, Dict, Optional

log = logging.getLogger("msprobe")

ENV = "MSPROBE_PROGRESS"
_OFF = ("0", "false", "no", "off")
_ON = ("1", "true", "yes", "on")

#: default count unit of a stage (a caller may name another)
UNITS = {"read": "files", "match": "rows", "metrics": "rows", "write": "rows", "build": "graphs",
         "compare": "graphs", "merge": "rows"}

ProgressFn = Callable[..., None]


def display_wanted(quiet: bool = False, stream=None) -> bool:
    """Whether to draw the live display: not with -q or MSPROBE_PROGRESS=0; yes with MSPROBE_PROGRESS=1;
    otherwise only when ``stream`` (stderr) is a terminal."""
    env = os.environ.get(ENV, "").strip().lower()
    if quiet or env in _OFF:
        return False
    if env in _ON:
        return True
    stream = stream if stream is not None else sys.stderr
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError, OSError):
        return False


def _units(n, unit: str) -> str:
    """``unit`` for ``n`` of them: "1 dump", "2 dumps"."""
    return unit[:-1] if n == 1 and unit.endswith("s") and not unit.endswith("ss") else unit


def _count_text(done, total, unit: str) -> str:
    unit = _units(total if total is not None else done, unit)
    if total is None:
        return f"{done:,} {unit}".rstrip()
    if done == total:
        return f"{total:,} {unit}".rstrip()
    return f"{done:,}/{total:,} {unit}".rstrip()


def stage_line(name: str, stage: str, done, total, unit: str, detail: Optional[str], seconds: float) -> str:
    """``compare rank0: read 2 files (240,600 + 240,600 rows) in 3.12 s``"""
    extra = f" ({detail})" if detail else ""
    return f"{name}: {stage} {_count_text(done, total, unit)}{extra} in {seconds:.2f} s"


class Job:
    """One job's stages; call it as ``job(stage, done, total, unit=None, detail=None)``."""

    def __init__(self, owner: "Progress", name: str):
        self._owner = owner
        self.name = name
        self.stage: Optional[str] = None
        self._start = 0.0
        self._done = 0
        self._total = None
        self._unit = ""
        self._detail: Optional[str] = None
        self._task = None
        self.finished = False

    def __call__(self, stage: str, done=0, total=None, unit: Optional[str] = None, detail: Optional[str] = None) -> None:
        if self.finished:
            return
        if stage != self.stage:
            self._end_stage()
            self.stage = stage
            self._start = time.perf_counter()
            self._unit = unit if unit is not None else UNITS.get(stage, "")
            self._detail = None
        elif unit is not None:
            self._unit = unit
        self._done = done
        self._total = total
        if detail is not None:
            self._detail = detail
        self._owner._show(self)

    def _end_stage(self) -> None:
        if self.stage is None:
            return
        seconds = time.perf_counter() - self._start
        log.info("%s", stage_line(self.name, self.stage, self._done, self._total, self._unit, self._detail, seconds))
        self.stage = None

    def finish(self) -> None:
        """End the current stage (its log line) and take the job off the display."""
        if self.finished:
            return
        self._end_stage()
        self.finished = True
        self._owner._drop(self)

    def abandon(self) -> None:
        """Take the job off the display without a line for its unfinished stage (failure, interruption)."""
        self.stage = None
        self.finished = True
        self._owner._drop(self)


class _Shield:
    """Ctrl-C deferred to the end of a block (main thread only): an interrupt inside rich's console code can
    leave its output buffered for good (the display then stays on screen and the cursor hidden)."""

    def __init__(self):
        self.old = None
        self.hit = False

    def _hit(self, *_):
        self.hit = True

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():
            try:
                self.old = signal.signal(signal.SIGINT, self._hit)
            except (ValueError, OSError):
                self.old = None
        return self

    def __exit__(self, exc_type, *_):
        old, self.old = self.old, None
        if old is None:
            return
        signal.signal(signal.SIGINT, old)
        if self.hit and exc_type is None:
            self.hit = False
            if callable(old):
                old(signal.SIGINT, None)             # the default handler raises KeyboardInterrupt
            elif old == signal.SIG_DFL:
                raise KeyboardInterrupt


class _ConsoleHandler(logging.Handler):
    """While the live display runs, msprobe's log lines are printed through its console (above it)."""

    def __init__(self, console, formatter):
        super().__init__()
        self.console = console
        self.setFormatter(formatter)

    def emit(self, record):
        try:
            with _Shield():
                self.console.print(self.format(record), markup=False, highlight=False, soft_wrap=True)
        except Exception:  # noqa: BLE001 - a log line must never break the command
            self.handleError(record)


class Progress:
    """The jobs of one command and their live display. Use as a context manager::

        with Progress("compare", display=display_wanted(args.quiet)) as prog:
            job = prog.job("rank0")
            job("read", 0, 2)
            ...
            job.finish()

    Leaving the block (normally, by an error or by Ctrl-C) stops the display and restores the terminal.
    """

    def __init__(self, command: str, display: bool = False, stream=None):
        self.command = command
        self.display = display
        self._stream = stream if stream is not None else sys.stderr
        self._rich = None
        self._lock = threading.Lock()
        self._saved_handlers = None
        self.jobs: Dict[object, Job] = {}

    # ------------------------------------------------------------------ lifecycle
    def __enter__(self) -> "Progress":
        if self.display:
            try:
                with _Shield():
                    self._start_display()
            except Exception:  # noqa: BLE001 - no display is better than no command
                self._rich = None
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        rich, self._rich = self._rich, None
        if rich is not None:
            with _Shield():
                try:
                    rich.stop()
                except Exception:  # noqa: BLE001
                    pass
                self._restore_logging()

    def _start_display(self) -> None:
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress as RichProgress, TextColumn, \
            TimeElapsedColumn

        console = Console(file=self._stream, force_terminal=True if os.environ.get(ENV, "").strip().lower() in _ON
                          else None)
        rich = RichProgress(TextColumn("{task.description}"), BarColumn(bar_width=30), MofNCompleteColumn(),
                            TextColumn("{task.fields[unit]}"), TimeElapsedColumn(), TextColumn("{task.fields[detail]}"),
                            console=console, transient=True, refresh_per_second=4, redirect_stdout=False,
                            redirect_stderr=False)
        rich.start()
        self._rich = rich
        logger = logging.getLogger("msprobe")
        self._saved_handlers = list(logger.handlers)
        formatter = next((h.formatter for h in logger.handlers if h.formatter is not None), None) \
            or logging.Formatter("[msprobe] %(levelname)s %(message)s")
        logger.handlers[:] = [h for h in logger.handlers if not _writes_to_terminal(h, self._stream)] + \
            [_ConsoleHandler(console, formatter)]

    def _restore_logging(self) -> None:
        if self._saved_handlers is not None:
            logging.getLogger("msprobe").handlers[:] = self._saved_handlers
            self._saved_handlers = None

    # ------------------------------------------------------------------ jobs
    def job(self, label: Optional[str] = None, key=None) -> Job:
        name = f"{self.command} {label}" if label else self.command
        job = Job(self, name)
        self.jobs[key if key is not None else len(self.jobs)] = job
        return job

    def _show(self, job: Job) -> None:
        rich = self._rich
        if rich is None:
            return
        with _Shield(), self._lock:
            total = job._total if job._total else None
            desc = f"{job.name}: {job.stage}"
            if job._task is None:
                job._task = rich.add_task(desc, total=total, completed=job._done, unit=job._unit,
                                          detail=job._detail or "")
            elif job._task_stage != job.stage:
                rich.reset(job._task, total=total, completed=job._done, description=desc, unit=job._unit,
                           detail=job._detail or "")
            else:
                rich.update(job._task, total=total, completed=job._done, unit=job._unit, detail=job._detail or "")
            job._task_stage = job.stage

    def _drop(self, job: Job) -> None:
        rich = self._rich
        if rich is None or job._task is None:
            return
        with _Shield(), self._lock:
            try:
                rich.remove_task(job._task)
            except KeyError:
                pass
            job._task = None


Job._task_stage = None  # the stage the display row shows (class default)


def _writes_to_terminal(handler: logging.Handler, stream) -> bool:
    target = getattr(handler, "stream", None)
    return target is not None and (target is stream or target is sys.__stderr__ or target is sys.stderr)


_CURRENT = threading.local()


def current_slow_stages() -> "Optional[SlowStages]":
    """The :class:`SlowStages` open in this thread (a writer deep inside a flush names its stages there)."""
    return getattr(_CURRENT, "stages", None)


def slow_stage(name: str, count: Optional[int] = None, unit: str = "") -> None:
    """Start a stage of the :class:`SlowStages` open in this thread, if any (cheap when there is none)."""
    stages = getattr(_CURRENT, "stages", None)
    if stages is not None:
        stages.stage(name, count, unit)


def count_rows(n: int) -> None:
    """Tell the stage counting rows in this thread (:func:`counting_rows`) that ``n`` more rows are done; a
    writer calls it per chunk (cheap when nobody counts)."""
    add = getattr(_CURRENT, "rows", None)
    if add is not None:
        add(n)


class counting_rows:  # noqa: N801 - used like a function: ``with counting_rows(cb):``
    """Within the block, :func:`count_rows` in this thread calls ``callback(rows done so far)``."""

    def __init__(self, callback: Optional[Callable[[int], None]]):
        self.callback = callback
        self.done = 0
        self._outer = None

    def _add(self, n: int) -> None:
        self.done += n
        self.callback(self.done)

    def __enter__(self) -> "counting_rows":
        self._outer = getattr(_CURRENT, "rows", None)
        if self.callback is not None:
            _CURRENT.rows = self._add
        return self

    def __exit__(self, *exc) -> None:
        _CURRENT.rows = self._outer


class _Watchdog:
    """One daemon thread that wakes the :class:`SlowStages` whose delay has passed (a dump flushes every step:
    a thread started per flush costs more than the flush of a small step)."""

    def __init__(self):
        self._cv = threading.Condition()
        self._due: Dict[int, tuple] = {}     # id(stages) -> (deadline, stages)
        self._thread: Optional[threading.Thread] = None

    def add(self, stages: "SlowStages", deadline: float) -> bool:
        with self._cv:
            if self._thread is None or not self._thread.is_alive():
                thread = threading.Thread(target=self._run, name="msprobe-slow-stages", daemon=True)
                try:
                    thread.start()
                except RuntimeError:   # at interpreter shutdown no thread can start: the work goes on, silently
                    return False
                self._thread = thread
            self._due[id(stages)] = (deadline, stages)
            self._cv.notify()
        return True

    def remove(self, stages: "SlowStages") -> None:
        with self._cv:
            self._due.pop(id(stages), None)

    def _run(self) -> None:
        while True:
            with self._cv:
                now = time.perf_counter()
                due = [st for (when, st) in self._due.values() if when <= now]
                for st in due:
                    self._due.pop(id(st), None)
                if not due:
                    nxt = min((when for when, _ in self._due.values()), default=None)
                    self._cv.wait(None if nxt is None else max(nxt - now, 0.001))
                    continue
            for st in due:
                try:
                    st._wake()
                except Exception:  # noqa: BLE001 - a log line must not kill the watchdog
                    pass


_WATCHDOG = _Watchdog()


class SlowStages:
    """Stages of usually quick work that say something only when it is slow.

    Nothing is printed while the work takes less than ``delay`` seconds. After that, one INFO line for the
    stage then running (printed by a timer thread) and one per later stage, and a closing line with the
    total time. Use as a context manager; ``stage(name, count=None, unit='')`` starts a stage."""

    def __init__(self, name: str, delay: float = 1.0):
        self.name = name
        self.delay = delay
        self._lock = threading.Lock()
        self._start = time.perf_counter()
        self._stage_start = self._start
        self._stage = None
        self._count = None
        self._unit = ""
        self._loud = False
        self._timer = False           # registered with the watchdog thread (_WATCHDOG)

    def __enter__(self) -> "SlowStages":
        self._start = time.perf_counter()
        self._outer = getattr(_CURRENT, "stages", None)
        _CURRENT.stages = self
        self._timer = _WATCHDOG.add(self, self._start + self.delay)
        return self

    def _describe(self) -> str:
        what = self._stage or "working"
        if self._count is not None:
            what += f" ({self._count:,} {self._unit})".replace(" )", ")")
        return what

    def _wake(self) -> None:
        with self._lock:
            if not self._timer:
                return
            self._loud = True
            log.info("%s: %s ... (%.1f s so far)", self.name, self._describe(), time.perf_counter() - self._start)

    def stage(self, name: str, count: Optional[int] = None, unit: str = "") -> None:
        with self._lock:
            now = time.perf_counter()
            if self._loud and self._stage is not None:
                log.info("%s: %s done in %.2f s", self.name, self._describe(), now - self._stage_start)
            self._stage, self._count, self._unit, self._stage_start = name, count, unit, now
            if self._loud:
                log.info("%s: %s ...", self.name, self._describe())

    def __exit__(self, exc_type, exc, tb) -> None:
        _CURRENT.stages = getattr(self, "_outer", None)
        with self._lock:
            timer, self._timer = self._timer, False
            if timer:
                _WATCHDOG.remove(self)
            if self._loud:
                now = time.perf_counter()
                if self._stage is not None and exc_type is None:
                    log.info("%s: %s done in %.2f s", self.name, self._describe(), now - self._stage_start)
                log.info("%s: %s after %.2f s", self.name, "finished" if exc_type is None else "stopped",
                         now - self._start)
