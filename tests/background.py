"""Sub-suites that run in another venv (tests/mindspore in .venv-ms, tests/npu in .venv-npu) as one subprocess
each, started when collection ends so that they run beside the rest of the suite instead of after it (the
MindSpore one takes about two minutes on one core while the main suite mostly keeps one core busy).

A test declares its sub-suite with :func:`runs_early`; tests/conftest.py starts every selected one after
collection, and the test waits for its result with :func:`result` (or starts it then, when run without that
conftest hook, e.g. a deselected-then-reselected id).  Output goes to a temporary file (no pipe to fill), each
subprocess gets its own ``--basetemp`` (two pytest sessions never share or prune each other's temp folders),
and a run still going when the session ends is killed.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Tuple


@dataclass
class Suite:
    python: str                 # the venv's interpreter
    path: str                   # the test folder, relative to cwd
    cwd: str
    env: Dict[str, str]
    timeout: float


class Running:
    def __init__(self, suite: Suite):
        self.suite = suite
        self.tmp = tempfile.mkdtemp(prefix="msprobe-subsuite-")
        self.log = open(os.path.join(self.tmp, "out.txt"), "w+", encoding="utf-8")
        self.started = time.monotonic()
        self.proc = subprocess.Popen(
            [suite.python, "-m", "pytest", "-q", "-ra", "-p", "no:cacheprovider",
             "--basetemp", os.path.join(self.tmp, "basetemp"), suite.path],
            cwd=suite.cwd, env=suite.env, stdout=self.log, stderr=subprocess.STDOUT, text=True)

    def wait(self) -> Tuple[Optional[int], str]:
        """(exit status, or None after the time limit; the output)."""
        left = self.suite.timeout - (time.monotonic() - self.started)
        try:
            rc = self.proc.wait(timeout=max(left, 1.0))
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            rc = None
        self.log.seek(0)
        out = self.log.read()
        self.close()
        return rc, out

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        if not self.log.closed:
            self.log.close()
        shutil.rmtree(self.tmp, ignore_errors=True)


_RUNNING: Dict[str, Running] = {}


def runs_early(make: Callable[[], Optional[Suite]]):
    """Decorator: ``make()`` gives the test's sub-suite (None when it cannot run: the test then skips itself)."""
    def mark(fn):
        fn.subsuite = make
        return fn
    return mark


def start_selected(items: List) -> None:
    """Start the sub-suites of the selected tests (tests/conftest.py, after collection)."""
    for item in items:
        make = getattr(getattr(item, "function", None), "subsuite", None)
        if make is None or item.nodeid in _RUNNING:
            continue
        suite = make()
        if suite is not None:
            _RUNNING[item.nodeid] = Running(suite)


def result(nodeid: str, make: Callable[[], Optional[Suite]]) -> Tuple[Optional[int], str]:
    """The sub-suite's (exit status, output): of the run started after collection, or of one started now."""
    run = _RUNNING.pop(nodeid, None)
    if run is None:
        suite = make()
        assert suite is not None
        run = Running(suite)
    return run.wait()


def stop_all() -> None:
    """Kill what is still running (the session ended or was interrupted)."""
    while _RUNNING:
        _RUNNING.popitem()[1].close()
