"""Worker processes for the pre-check, each API with a time limit (framework-free).

``run_pool(target, init, tasks, workers, timeout, on_result)`` starts ``workers`` processes; each builds a
checker with ``target(init, worker_index)`` (``target`` is "module:function", imported in the worker, so
this process never imports the framework) and runs the tasks handed to it one at a time. A task that runs
longer than ``timeout`` seconds has its worker killed and is reported as timed out; a worker that dies (a
crash in native code, out of memory) reports its task as failed; a fresh worker takes over and the other
tasks go on. ``on_result(index, result)`` is called in this process as tasks finish (any order).

Workers are forked where possible (fast, and they inherit this process's state) and die with it: a worker
whose parent has gone finds its pipe closed and leaves.
"""

from __future__ import annotations

import importlib
import multiprocessing as mp
import os
import signal
import time
from multiprocessing.connection import wait
from typing import Any, Callable, Dict, List, Optional, Sequence

#: result of a task whose worker was killed or died: ("timeout" | "died", message)
Failure = tuple


def _serve(conn, target: str, init: Any, k: int) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's: it stops us
    try:
        import logging

        logging.getLogger("msprobe").handlers[:] = []  # a handler lock inherited from the parent is never touched
        mod, fn = target.split(":")
        check = getattr(importlib.import_module(mod), fn)(init, k)
    except BaseException as exc:  # noqa: BLE001 - told to the parent, which stops
        try:
            conn.send(("init_error", -1, f"{type(exc).__name__}: {exc}"))
        finally:
            os._exit(1)
    conn.send(("ready", -1, None))
    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError):
            break  # the parent has gone
        if msg is None:
            break
        index, task = msg
        try:
            result = ("ok", index, check(task))
        except BaseException as exc:  # noqa: BLE001 - one task's failure is its result
            result = ("fail", index, f"{type(exc).__name__}: {exc}")
        try:
            conn.send(result)
        except (EOFError, OSError, BrokenPipeError):
            break
        except Exception as exc:  # noqa: BLE001 - a result that cannot be pickled is its task's failure
            try:
                conn.send(("fail", index, f"its result could not be sent: {type(exc).__name__}: {exc}"))
            except Exception:  # noqa: BLE001
                break
    os._exit(0)


class _Worker:
    def __init__(self, ctx, target: str, init: Any, k: int):
        self.k = k
        parent, child = ctx.Pipe()
        self.conn = parent
        self.proc = ctx.Process(target=_serve, args=(child, target, init, k), name=f"msprobe-acc-check-{k}", daemon=True)
        self.proc.start()
        child.close()
        self.task: Optional[int] = None
        self.started = 0.0
        self.ready = False

    def give(self, index: int, task: Any) -> None:
        self.task = index
        self.started = time.monotonic()
        self.conn.send((index, task))

    def kill(self) -> None:
        try:
            self.proc.kill()
        except (OSError, ValueError):
            pass
        self.proc.join(5)
        try:
            self.conn.close()
        except OSError:
            pass


class PoolInitError(RuntimeError):
    """A worker could not build its checker (e.g. the framework does not import)."""


def run_pool(target: str, init: Any, tasks: Sequence[Any], workers: int, timeout: float,
             on_result: Callable[[int, Any], None], init_timeout: float = 600.0) -> None:
    """Run every task; see the module docstring. ``on_result`` gets ``("ok", value)``, ``("fail", text)``,
    ``("timeout", text)`` or ``("died", text)``."""
    if not tasks:
        return
    method = "fork" if "fork" in mp.get_all_start_methods() else "spawn"
    ctx = mp.get_context(method)
    n = max(1, min(workers, len(tasks)))
    pending: List[int] = list(range(len(tasks)))[::-1]
    pool: Dict[int, _Worker] = {}
    remaining = len(tasks)
    try:
        for k in range(n):
            pool[k] = _Worker(ctx, target, init, k)
        born = time.monotonic()
        while remaining:
            for w in pool.values():
                if w.ready and w.task is None and pending:
                    i = pending.pop()
                    w.give(i, tasks[i])
            conns = {w.conn: w for w in pool.values()}
            busy = [w for w in pool.values() if w.task is not None]
            now = time.monotonic()
            wait_for = min([max(0.0, w.started + timeout - now) for w in busy] + [1.0])
            for conn in wait(list(conns), timeout=wait_for):
                w = conns[conn]
                try:
                    kind, index, value = conn.recv()
                except (EOFError, OSError):
                    kind, index, value = "eof", w.task, None
                if kind == "ready":
                    w.ready = True
                elif kind == "init_error":
                    raise PoolInitError(value)
                elif kind in ("ok", "fail"):
                    w.task = None
                    remaining -= 1
                    on_result(index, (kind, value))
                else:  # the worker died
                    code = w.proc.exitcode
                    w.kill()
                    if not w.ready:
                        raise PoolInitError(f"a worker process ended while starting (exit code {code})")
                    if index is not None:
                        remaining -= 1
                        on_result(index, ("died", f"the worker process died while running it (exit code {code}; "
                                                  f"a crash in native code or out of memory)"))
                    pool[w.k] = _Worker(ctx, target, init, w.k)
            now = time.monotonic()
            for w in list(pool.values()):
                if w.task is not None and now - w.started > timeout:
                    index = w.task
                    w.kill()
                    remaining -= 1
                    on_result(index, ("timeout", f"timed out after {timeout:g} s; the worker running it was stopped"))
                    pool[w.k] = _Worker(ctx, target, init, w.k)
            if not any(w.ready for w in pool.values()) and time.monotonic() - born > init_timeout:
                raise PoolInitError(f"no worker process started within {init_timeout:g} s")
    finally:
        for w in pool.values():
            try:
                if w.proc.is_alive() and w.task is None and w.ready:
                    w.conn.send(None)
            except (OSError, ValueError, BrokenPipeError):
                pass
        deadline = time.monotonic() + 2.0
        for w in pool.values():
            w.proc.join(max(0.0, deadline - time.monotonic()))
            if w.proc.is_alive():
                w.kill()
