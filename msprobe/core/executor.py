"""The one place where a command spreads its work: forked local processes, or tasks on a Ray cluster.

Every command that runs ranks, report files, graphs or chunks of tensor files in parallel calls
:func:`run_tasks` with a *backend*:

* ``None`` / ``"local"``: :mod:`msprobe.core.procpool` (forked worker processes; tasks are inherited, not
  pickled; progress events and log records come back live);
* ``"ray"`` (a local Ray instance), ``"ray:auto"`` or ``"ray:ray://host:port"`` (an existing cluster):
  :mod:`msprobe.core.executor_ray`, one Ray task per work item, retried when its worker dies. Ray is an
  optional extra, imported only for this backend.

The number of local workers is capped here at ``min(workers, cores, tasks)`` (``-j 1000`` on two ranks
starts two processes). The commands carry the backend in their frozen config (``CompareConfig.backend``,
``MergeConfig.backend``, ``GraphConfig.backend``), set from ``--ray [ADDRESS]`` by the command line.

Written for both backends, a task is ``fn(task, emit)`` where ``fn`` is a module-level function (or a
``functools.partial`` of one) and ``task`` and the partial's arguments are picklable: Ray ships them to its
workers. ``emit(*args)`` reports progress; on Ray it is a no-op (progress is counted per finished task).

Forks left outside this seam, on purpose (tests/test_ray_backend.py keeps the list): compare/engine.py's
one-worker spool that parses the golden dump while this process parses the target (a pipeline of two, not
spread work); graph/build.py's split formatter and graph/export.py's slice writers (they read one graph of
this process's memory copy-on-write, which only a fork can share; inside a worker of either backend they
stay off, :func:`in_worker`); acc_check/pool.py (a persistent worker per device).
"""

from __future__ import annotations

from typing import Callable, List, Optional, Sequence

LOCAL = "local"
RAY = "ray"


def ray_backend(address: Optional[str] = None) -> str:
    """The backend string of ``--ray [ADDRESS]``: ``"ray"`` for a local instance, ``"ray:<address>"``."""
    address = (address or "").strip()
    return f"{RAY}:{address}" if address else RAY


def is_ray(backend: Optional[str]) -> bool:
    return bool(backend) and (backend == RAY or backend.startswith(RAY + ":"))


def ray_address(backend: str) -> Optional[str]:
    """The cluster address of a Ray backend; None: start a local instance."""
    return (backend[len(RAY) + 1:] or None) if backend.startswith(RAY + ":") else None


def check_backend(backend: Optional[str]) -> None:
    """Fail early, with one line, when the backend cannot be used (the Ray extra is not installed)."""
    if is_ray(backend):
        from msprobe.core.executor_ray import import_ray

        import_ray()


def describe(backend: Optional[str]) -> str:
    if not is_ray(backend):
        return "local processes"
    addr = ray_address(backend)
    return f"Ray cluster {addr}" if addr else "a local Ray instance"


def in_worker() -> bool:
    """True inside a worker of either backend (a rank worker then does its own parts one after the other)."""
    import multiprocessing as mp

    return mp.current_process().name != "MainProcess"


def worker_count(requested: Optional[int], work: int) -> int:
    """Local workers for ``requested`` (0/None: automatic): never more than the cores nor the work."""
    from msprobe.core.resources import cpu_count

    cap = max(1, min(cpu_count(), work))
    return cap if not requested or requested <= 0 else max(1, min(requested, cap))


def run_tasks(fn: Callable, tasks: Sequence, workers: int, *, backend: Optional[str] = None,
              on_event: Optional[Callable] = None, on_result: Optional[Callable] = None,
              on_error: Optional[Callable] = None, collect: bool = True, remove_written: bool = False,
              name: str = "msprobe-worker", stop_on_error: bool = True, temp_dirs: Sequence[str] = (),
              on_late: Optional[Callable] = None) -> List:
    """Run ``fn(task, emit)`` for every task; results in task order (None where a task failed and
    ``on_error`` took its error, and everywhere when ``collect`` is false).

    ``on_result(index, result)`` is called in this process as each task finishes (the place to write its
    output: results then stream into the writer instead of piling up). ``on_error(index, exc)``: given, a
    failing task is handed to it and the other tasks go on; otherwise the first error is raised (at once
    with ``stop_on_error``). Ctrl-C or an error stops the remaining tasks (workers terminated, Ray tasks
    cancelled). ``remove_written``/``temp_dirs``: see :func:`msprobe.core.procpool.run_tasks` (local backend).
    ``on_late(index, result)`` (Ray backend): a task that finished while the run was being stopped, so that the
    caller can remove what it wrote (a local worker's files are removed by procpool itself)."""
    if is_ray(backend):
        from msprobe.core.executor_ray import run_ray

        return run_ray(fn, tasks, ray_address(backend), on_result=on_result, on_error=on_error, collect=collect,
                       stop_on_error=stop_on_error, name=name, on_late=on_late)
    from msprobe.core.procpool import run_tasks as run_local

    return run_local(fn, tasks, worker_count(workers, len(tasks)), on_event=on_event, on_result=on_result,
                     on_error=on_error, remove_written=remove_written, name=name, stop_on_error=stop_on_error,
                     temp_dirs=temp_dirs)
