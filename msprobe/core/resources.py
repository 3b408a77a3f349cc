"""Processes and workers of a command: bounded, and never outliving the command.

* :func:`cap_jobs`: the number of worker processes for ``-j``, capped at the cores of this machine and at
  the amount of work (ranks, report files, tensor pairs), with one note when the request was cut.
* :func:`process_guards`: set up by the command line for the time of one command.  Every process forked
  from now on dies with its parent (Linux ``PR_SET_PDEATHSIG``; elsewhere the child checks its parent),
  so a ``kill -9`` of ``msprobe compare`` while a forked worker parses the golden dump leaves no orphan;
  and ``SIGTERM`` ends the command like Ctrl-C (KeyboardInterrupt), so temporary files are removed and
  workers are stopped on the way out.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
from typing import Optional

log = logging.getLogger("msprobe")

_noted: set = set()


def cpu_count() -> int:
    """Cores this process may run on (the affinity mask where the platform has one)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # pragma: no cover - non-Linux
        return max(1, os.cpu_count() or 1)


def cap_jobs(requested: int, work: Optional[int] = None, unit: str = "tasks") -> int:
    """Worker processes to use for ``-j requested`` (0 = automatic) on ``work`` units of ``unit``.

    Never more than the cores and never more than the work; a request that is cut gets one INFO note
    naming the limit (once per process and request)."""
    cores = cpu_count()
    limit = cores if work is None else max(1, min(cores, work))
    if requested is None or requested <= 0:
        return limit
    if requested <= limit:
        return requested
    key = (requested, limit, unit)
    if key not in _noted:
        _noted.add(key)
        if work is not None and work < cores:
            why = f"there {'is' if work == 1 else 'are'} only {work} {unit} to do"
        else:
            why = f"this machine has {cores} core{'s' if cores != 1 else ''}"
        log.info("-j %d: using %d worker process%s (%s)", requested, limit, "" if limit == 1 else "es", why)
    return limit


# ---------------------------------------------------------------------------------------- child processes
_state = {"registered": False, "active": False, "parent": None, "main_thread": True}
PR_SET_PDEATHSIG = 1


def _before_fork() -> None:
    _state["parent"] = os.getpid()
    _state["main_thread"] = threading.current_thread() is threading.main_thread()
    # SIGTERM stays blocked across the fork until the child has reset its handler: a worker told to stop
    # while Python's own after-fork hooks run (before ours) would otherwise raise KeyboardInterrupt there
    # and print "Exception ignored ... Traceback" (found by tools/fuzz.py)
    _state["blocked"] = False
    if _state["active"]:
        try:
            _state["blocked"] = signal.SIGTERM not in signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
        except (AttributeError, ValueError, OSError):
            pass


def _unblock_term() -> None:
    if _state.get("blocked"):
        _state["blocked"] = False
        try:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
        except (AttributeError, ValueError, OSError):
            pass


def _after_fork_in_parent() -> None:
    _unblock_term()


def _after_fork_in_child() -> None:
    if not _state["active"]:
        return
    parent = _state["parent"]
    try:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)   # a worker told to stop stops (no KeyboardInterrupt)
    except (ValueError, OSError):
        pass
    _unblock_term()
    # PR_SET_PDEATHSIG fires when the *thread* that forked ends: only safe for forks from the main thread
    if _state["main_thread"]:
        _set_pdeathsig()
    if parent is not None and os.getppid() != parent:   # the parent died before we got here
        os._exit(1)


def _set_pdeathsig() -> bool:
    try:
        import ctypes
        import sys

        if not sys.platform.startswith("linux"):
            return False
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0) == 0
    except Exception:  # noqa: BLE001 - best effort
        return False


def _on_sigterm(signum, frame):
    raise KeyboardInterrupt


class process_guards:
    """Context manager used by the CLI around one command (see the module docstring)."""

    def __enter__(self):
        if not _state["registered"] and hasattr(os, "register_at_fork"):
            os.register_at_fork(before=_before_fork, after_in_child=_after_fork_in_child,
                                after_in_parent=_after_fork_in_parent)
            _state["registered"] = True
        self._was_active = _state["active"]
        _state["active"] = True
        self._old_term = None
        if threading.current_thread() is threading.main_thread():
            try:
                old = signal.getsignal(signal.SIGTERM)
                if old in (signal.SIG_DFL, None):
                    signal.signal(signal.SIGTERM, _on_sigterm)
                    self._old_term = old
            except (ValueError, OSError):  # pragma: no cover
                pass
        return self

    def __exit__(self, *exc):
        _state["active"] = self._was_active
        if self._old_term is not None:
            try:
                signal.signal(signal.SIGTERM, self._old_term)
            except (ValueError, OSError):  # pragma: no cover
                pass
        return False
