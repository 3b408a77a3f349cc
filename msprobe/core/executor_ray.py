"""The Ray backend of :mod:`msprobe.core.executor` (``--ray [ADDRESS]``).

One Ray task per work item (a rank, a report file, a graph, a chunk of tensor files). The task reads its
inputs from the path it was given (shared storage: nothing is copied through the driver) and returns its
result; the driver hands each result to ``on_result`` as soon as it arrives, so results stream into the
command's writers and the files written are the ones the local backend writes.

* At most ``2 x`` the cluster's CPUs tasks are in flight; the others wait on the driver, so the object store
  never holds more than that many results.
* A task whose worker process dies (killed, out of memory, node lost) is run again by Ray (``max_retries``);
  an error raised by the task itself (bad input) is not retried: it is returned as a value, handed to
  ``on_error`` (the command records it) or raised on the driver.
* Ctrl-C, or an error on the driver, cancels every task still pending or running.
* Log records of the task (the ``msprobe`` logger) are sent back with its result and logged by the driver.

``ray`` is imported only here, only when the backend is chosen. Fault drill: with the environment variable
``MSPROBE_FAULT_KILL_ONCE=<path>`` set on the driver, the first task to create ``<path>`` kills its own
worker process (SIGKILL) before doing its work; Ray runs it again (tests/test_ray_backend.py).
"""

from __future__ import annotations

import logging
import os
from typing import Callable, List, Optional, Sequence

from msprobe.core.errors import MsprobeError

log = logging.getLogger("msprobe")

INSTALL_HINT = "pip install 'msprobe[ray]'  (or: pip install 'ray[client]')"
MAX_RETRIES = 3          # a worker that dies is replaced and its task run again, this many times
KILL_ONCE_ENV = "MSPROBE_FAULT_KILL_ONCE"
NICENESS_ENV = "RAY_worker_niceness"   # read by the raylet a local instance starts
LATE_SECONDS = 10.0      # how long a stopped run waits for each cancelled task's end
WORKER_NAME = "msprobe-ray-task"


def import_ray():
    """The ray module, or one MsprobeError line saying how to install it."""
    try:
        import ray
    except ImportError as exc:
        raise MsprobeError(f"--ray needs the optional Ray extra, which is not installed ({exc}); install it with "
                           f"{INSTALL_HINT}, or run without --ray") from None
    return ray


_state = {"started": False}


def connect(address: Optional[str]):
    """Join the cluster at ``address`` ("auto", "ray://host:port"), or start a local instance (None).
    A Ray already initialised in this process (an application, a test session) is used as it is."""
    ray = import_ray()
    if ray.is_initialized():
        return ray
    from msprobe.core.resources import cpu_count

    kwargs = dict(include_dashboard=False, log_to_driver=False, logging_level=logging.WARNING)
    try:
        if address:
            ray.init(address=address, **kwargs)
        else:
            # a local instance works for this command alone: its workers run at our own priority, as -j's
            # processes do (Ray starts them at niceness 15, behind everything else on a shared machine)
            nice = os.environ.get(NICENESS_ENV)
            os.environ.setdefault(NICENESS_ENV, "0")
            try:
                ray.init(num_cpus=cpu_count(), **kwargs)
            finally:
                if nice is None:
                    os.environ.pop(NICENESS_ENV, None)
    except ImportError as exc:         # ray:// needs Ray Client's grpcio (the [client] extra of ray)
        raise MsprobeError(f"--ray {address}: Ray Client is not installed ({exc}); install it with "
                           f"{INSTALL_HINT}") from None
    except (ConnectionError, RuntimeError, ValueError, TimeoutError) as exc:
        where = f"the Ray cluster at {address}" if address else "a local Ray instance"
        raise MsprobeError(f"--ray: cannot start or reach {where}: {str(exc).splitlines()[0] if str(exc) else exc}; "
                           f"check the address (auto, ray://host:port) and that the cluster is running") from None
    if not _state["started"]:
        _state["started"] = True
        import atexit

        atexit.register(_shutdown)
    return ray


def _shutdown() -> None:
    try:
        import ray

        if ray.is_initialized():
            ray.shutdown()
    except Exception:  # noqa: BLE001 - leaving anyway
        pass


class _Records(logging.Handler):
    def __init__(self):
        super().__init__(logging.INFO)
        self.records = []

    def emit(self, record):
        try:
            self.records.append((record.levelno, record.getMessage()))
        except Exception:  # noqa: BLE001
            pass


def _noop(*_args) -> None:
    return None


def run_one(fn, task, kill_marker: Optional[str] = None):
    """The body of every Ray task: ``("ok", result, logs)`` or ``("error", exception, logs)``."""
    import multiprocessing as mp

    if kill_marker:
        try:
            fd = os.open(kill_marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
        except FileExistsError:
            pass
        else:
            os.close(fd)
            import signal

            os.kill(os.getpid(), signal.SIGKILL)
    proc = mp.current_process()
    name, proc.name = proc.name, WORKER_NAME    # nested pools (tensor chunks, graph writers) stay in this task
    logger = logging.getLogger("msprobe")
    handler = _Records()
    logger.addHandler(handler)
    old_level = logger.level
    if logger.getEffectiveLevel() > logging.INFO:
        logger.setLevel(logging.INFO)
    try:
        return "ok", fn(task, _noop), handler.records
    except Exception as exc:  # noqa: BLE001 - returned, not raised: Ray must not retry a bad input
        return "error", _picklable(exc), handler.records
    finally:
        logger.removeHandler(handler)
        logger.setLevel(old_level)
        proc.name = name


def _picklable(exc: BaseException) -> BaseException:
    import pickle

    try:
        pickle.loads(pickle.dumps(exc))
        return exc
    except Exception:  # noqa: BLE001
        return RuntimeError(f"{type(exc).__name__}: {exc}")


def run_ray(fn: Callable, tasks: Sequence, address: Optional[str], *, on_result: Optional[Callable] = None,
            on_error: Optional[Callable] = None, collect: bool = True, stop_on_error: bool = True,
            name: str = "msprobe", on_late: Optional[Callable] = None) -> List:
    """See :func:`msprobe.core.executor.run_tasks`."""
    ray = connect(address)
    from ray.exceptions import RayError

    remote = ray.remote(run_one).options(num_cpus=1, max_retries=MAX_RETRIES, retry_exceptions=False,
                                         name=name)
    n = len(tasks)
    results: list = [None] * n
    if not n:
        return results
    window = max(2, 2 * int(ray.cluster_resources().get("CPU", 1)))
    fn_ref = ray.put(fn)                                        # shipped once, not once per task
    kill = os.environ.get(KILL_ONCE_ENV) or None
    pending: dict = {}
    nxt = 0
    error: Optional[BaseException] = None
    try:
        while nxt < n or pending:
            while nxt < n and len(pending) < window:
                pending[remote.remote(fn_ref, tasks[nxt], kill)] = nxt
                nxt += 1
            ready, _ = ray.wait(list(pending), num_returns=1, timeout=0.5)
            for ref in ready:
                i = pending.pop(ref)
                try:
                    status, value, records = ray.get(ref)
                except RayError as exc:            # the worker died more than MAX_RETRIES times, node lost, ...
                    from msprobe.core.procpool import WorkerDied

                    status, records = "error", []
                    value = WorkerDied(f"Ray task {i + 1}/{n} failed after {MAX_RETRIES} retries: "
                                       f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}")
                for level, msg in records:
                    log.log(level, "%s", msg)
                if status == "ok":
                    if collect:
                        results[i] = value
                    if on_result is not None:
                        on_result(i, value)
                elif on_error is not None:
                    on_error(i, value)
                else:
                    if error is None:
                        error = value
                    if stop_on_error:
                        raise error
        if error is not None:
            raise error
    except BaseException:
        for ref in pending:
            try:
                ray.cancel(ref, force=True)
            except Exception:  # noqa: BLE001 - already finished or gone
                pass
        if on_late is not None:
            # a task that finished before its cancel arrived may have written its outputs: the caller removes them
            for ref, i in pending.items():
                try:
                    status, value, _records = ray.get(ref, timeout=LATE_SECONDS)
                except BaseException:  # noqa: BLE001 - cancelled, killed, or still running: nothing to hand over
                    continue
                if status == "ok":
                    on_late(i, value)
        raise
    return results
