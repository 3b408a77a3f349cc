"""Worker processes that stop at once: Ctrl-C, or one task failing, ends them all without waiting.

:func:`run_tasks` runs ``fn(task, emit)`` for every task in forked worker processes and returns the results
in task order. Compared with ``concurrent.futures.ProcessPoolExecutor``:

* the workers ignore SIGINT (a Ctrl-C in the terminal reaches the whole process group): only the parent
  handles it, so no worker prints a traceback;
* when the parent leaves early (KeyboardInterrupt, a task's exception, a worker that died), the workers are
  terminated (SIGTERM, SIGKILL after a short grace) instead of being waited for, and the temporary files they
  had open through :func:`msprobe.core.fileio.atomic_write` are removed (as are the files they finished, with
  ``remove_written``);
* a worker reports progress and log records through ``emit``/its logger: the parent hands them to
  ``on_event(*args)`` and to its own ``msprobe`` logger, so everything is printed by one process.

Tasks are inherited by the forked workers (not pickled); results and exceptions are pickled back.
"""

from __future__ import annotations

import logging
import os
import pickle
import queue
import signal
import time
from typing import Callable, List, Optional, Sequence

from msprobe.core.errors import MsprobeError

log = logging.getLogger("msprobe")

GRACE_SECONDS = 1.0  # how long a terminated worker may take before it is killed


class WorkerDied(MsprobeError):
    """A worker process ended without a result (killed, out of memory)."""


class _QueueLogHandler(logging.Handler):
    def __init__(self, out_q):
        super().__init__()
        self.out_q = out_q

    def emit(self, record):
        try:
            self.out_q.put(("log", record.levelno, record.getMessage()))
        except Exception:  # noqa: BLE001
            pass


def _worker(fn, tasks, task_q, out_q, file_q) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)     # the parent handles Ctrl-C and terminates us
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    from msprobe.core import fileio

    # told synchronously (SimpleQueue: no feeder thread; a short message is one atomic pipe write), so the
    # parent knows a temporary file before anything is written into it
    fileio.write_observer = lambda kind, path: file_q.put((kind, path))
    logger = logging.getLogger("msprobe")
    logger.handlers[:] = [_QueueLogHandler(out_q)]
    logger.propagate = False

    def emit(*args):
        out_q.put(("event", current, args))

    while True:
        current = task_q.get()
        if current is None:
            break
        try:
            # pickled here, not in the queue's feeder thread, so that a result that cannot be pickled is an
            # error of its task instead of a message silently lost
            payload = pickle.dumps(fn(tasks[current], emit), protocol=pickle.HIGHEST_PROTOCOL)
            out_q.put(("result", current, payload))
        except BaseException as exc:  # noqa: BLE001 - handed to the parent
            try:  # kept for the internal-error log of the CLI (msprobe.cli.main.report_internal_error)
                import traceback

                exc.worker_traceback = traceback.format_exc()
            except Exception:  # noqa: BLE001
                pass
            out_q.put(("error", current, _picklable(exc)))
    out_q.close()
    out_q.join_thread()


def _picklable(exc: BaseException) -> BaseException:
    try:
        pickle.dumps(exc)
        return exc
    except Exception:  # noqa: BLE001
        return RuntimeError(f"{type(exc).__name__}: {exc}")


def run_tasks(fn: Callable, tasks: Sequence, workers: int, on_event: Optional[Callable] = None,
              on_result: Optional[Callable] = None, remove_written: bool = False, name: str = "msprobe-worker",
              stop_on_error: bool = True, temp_dirs: Sequence[str] = (), on_error: Optional[Callable] = None) -> List:
    """Run ``fn(task, emit)`` for every task in up to ``workers`` forked processes; results in task order.

    ``emit(*args)`` in a worker calls ``on_event(index, *args)`` in the parent; ``on_result(index, result)``
    is called as each task finishes. ``on_error(index, exc)``, when given, takes each task's exception (its
    result is None) and the other tasks go on. Otherwise the first task exception is raised in the parent; with
    ``stop_on_error`` the other workers are terminated at once, otherwise the remaining tasks run first.
    Anything raised in the parent (KeyboardInterrupt included) terminates the workers at once; the temporary
    files they announced are removed, and so are those of the killed workers' pids in ``temp_dirs`` and in the
    directories of announced files (fileio.clean_stale_temps: a kill between creating a temporary file and
    announcing it)."""
    import multiprocessing as mp

    if "fork" not in mp.get_all_start_methods() or workers <= 1 or len(tasks) <= 1:
        return _run_here(fn, tasks, on_event, on_result, on_error)
    ctx = mp.get_context("fork")
    task_q, out_q, file_q = ctx.SimpleQueue(), ctx.Queue(), ctx.SimpleQueue()
    n = max(1, min(workers, len(tasks)))
    procs = [ctx.Process(target=_worker, args=(fn, tasks, task_q, out_q, file_q), name=f"{name}-{k}", daemon=True)
             for k in range(n)]
    for i in range(len(tasks)):
        task_q.put(i)
    for _ in procs:
        task_q.put(None)
    results: dict = {}
    temps: set = set()
    written: List[str] = []
    error: Optional[BaseException] = None
    finished = False
    try:
        for p in procs:
            p.start()
        while len(results) < len(tasks):
            _read_files(file_q, temps, written)     # keep its pipe from filling up
            try:
                msg = out_q.get(timeout=0.2)
            except queue.Empty:
                dead = [p for p in procs if p.exitcode not in (None, 0)]
                if dead:
                    raise WorkerDied(f"a worker process ended without its result (exit code {dead[0].exitcode}; "
                                     f"out of memory?); try fewer parallel workers with -j")
                if all(p.exitcode is not None for p in procs) and out_q.empty():
                    raise WorkerDied("the worker processes ended before every task was done; try -j 1")
                continue
            kind = msg[0]
            if kind == "event":
                if on_event is not None:
                    on_event(msg[1], *msg[2])
            elif kind == "log":
                log.log(msg[1], "%s", msg[2])
            elif kind == "result":
                results[msg[1]] = value = pickle.loads(msg[2])
                if on_result is not None:
                    on_result(msg[1], value)
            elif kind == "error":
                results[msg[1]] = None
                if on_error is not None:
                    on_error(msg[1], msg[2])
                    continue
                if error is None:
                    error = msg[2]
                if stop_on_error:
                    raise error
        if error is not None:
            raise error
        finished = True
    finally:
        if finished:
            for p in procs:
                p.join()
        else:
            _stop(procs)
            _read_files(file_q, temps, written)
            for path in list(temps) + (written if remove_written else []):
                try:
                    os.unlink(path)
                except OSError:
                    pass
            _clean_dirs(set(temp_dirs) | {os.path.dirname(p) for p in temps})
        out_q.close()
        out_q.cancel_join_thread()
    return [results[i] for i in range(len(tasks))]


def _clean_dirs(dirs) -> None:
    from msprobe.core import fileio

    clean = getattr(fileio, "clean_stale_temps", None)     # removes temporary files of pids no longer running
    if clean is None:
        return
    for d in dirs:
        if d:
            clean(d)


def _run_here(fn, tasks, on_event, on_result, on_error=None) -> List:
    """One worker or no fork: the tasks run in this process, one after the other."""
    out = []
    for i, task in enumerate(tasks):
        def emit(*args, _i=i):
            if on_event is not None:
                on_event(_i, *args)
        if on_error is None:
            out.append(fn(task, emit))
        else:
            try:
                out.append(fn(task, emit))
            except Exception as exc:  # noqa: BLE001 - handed to the caller, the other tasks go on
                on_error(i, exc)
                out.append(None)
                continue
        if on_result is not None:
            on_result(i, out[-1])
    return out


def _stop(procs) -> None:
    started = [p for p in procs if p.pid is not None]
    for p in started:
        if p.is_alive():
            p.terminate()
    deadline = time.monotonic() + GRACE_SECONDS
    for p in started:
        p.join(max(0.0, deadline - time.monotonic()))
    for p in started:
        if p.is_alive():
            p.kill()
            p.join()


def _read_files(file_q, temps: set, written: list) -> None:
    """The files the (now stopped) workers announced: every message is whole (one atomic pipe write)."""
    try:
        while not file_q.empty():
            kind, path = file_q.get()
            (temps.add(path) if kind == "tmp" else written.append(path))
    except (OSError, EOFError, ValueError):
        pass
