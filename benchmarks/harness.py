"""The timing harness every benchmark of this folder uses (one copy).

* ``run(cmd, env=, cwd=, timeout=, log=, sample=)``: runs a command in a fresh process and returns a ``Run``:
  exit status, wall seconds, CPU seconds (user + system of the command and the children it waited for, from
  ``wait4``), ``RSS max`` (the command's ``ru_maxrss``: GNU ``time -f %M`` when ``/usr/bin/time`` exists,
  because Linux carries the RSS high-water mark across exec and a command forked straight from a bigger runner
  would report at least the runner's; ``wait4`` otherwise), and, with ``sample=SECONDS``, the largest sums of
  ``Pss`` and of ``VmRSS`` over every live process of the command's tree (children and grandchildren
  included) sampled from /proc, and the most processes alive at once.  A timeout kills the whole tree.
* ``repeat(fn, n, warmup=)`` and ``summary(runs)``: warm-up runs, then ``n`` timed runs; best, median and every
  wall time, the largest memory figures.
* ``time_steps(step, n)``: in-process wall and CPU milliseconds of ``n`` calls (the step-time workers).
* ``machine_line()``: the machine description the reports start with; ``load_average()``.
* ``clean_env()``, ``json_line()``: a child's environment without the runner's Python settings, and the
  result line a worker prints.
* ``write_section(path, body, begin, end)``: rewrite one marked section of a results file, keep the rest.
* ``shown(path)``: a path as a report shows it (relative to the repository, or ``$MSPROBE_REF_CACHE/...``).

Standard library only: the step-time workers import it from the reference venvs too.
"""

from __future__ import annotations

import json
import os
import platform
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GNU_TIME = "/usr/bin/time"
PAGE_KB = os.sysconf("SC_PAGE_SIZE") // 1024


class RunError(RuntimeError):
    """A timed command failed (exit status, missing output): the message says which and shows its log tail."""


# ---------------------------------------------------------------------------------------------------------------------
# machine
# ---------------------------------------------------------------------------------------------------------------------

def load_average() -> str:
    try:
        return " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "?"


def machine_line() -> str:
    """The one-line machine description the benchmark reports start with."""
    mem_gib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 1024 ** 3
    cpu = ""
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return (f"{platform.node()}: nproc {os.cpu_count()}, {mem_gib:.1f} GiB RAM, {cpu or platform.machine()}, "
            f"Linux {platform.release()}, Python {platform.python_version()}; load average at start {load_average()}")


def clean_env(threads: int | None = 1, **extra) -> dict:
    """os.environ without PYTHON* and VIRTUAL_ENV (a child interpreter imports only what its venv and ``extra``
    give it), one intra-op thread unless ``threads`` is None, plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON") and k != "VIRTUAL_ENV"}
    if threads is not None:
        env.update(OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
    env.update({k: str(v) for k, v in extra.items()})
    return env


def shown(p) -> str:
    """A path as the reports show it: relative to the repository, ``$MSPROBE_REF_CACHE/...`` for a reference
    venv, else as given (never a folder of this machine where either applies)."""
    from refvenv import portable

    p = str(p)
    return os.path.relpath(p, ROOT) if p.startswith(str(ROOT) + os.sep) else portable(p) if p.startswith(os.sep) else p


def show_cmd(cmd) -> str:
    return shlex.join(shown(c) for c in cmd)


# ---------------------------------------------------------------------------------------------------------------------
# process tree
# ---------------------------------------------------------------------------------------------------------------------

def children(pid: int) -> list:
    """Direct children of a process (/proc/PID/task/TID/children of each of its threads)."""
    out: list = []
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/children", "rb") as f:
                out.extend(int(x) for x in f.read().split())
        except OSError:
            pass
    return out


def tree(root: int) -> list:
    """``root`` and its live descendants, root first."""
    out, todo, seen = [], [root], set()
    while todo:
        p = todo.pop()
        if p in seen:
            continue
        seen.add(p)
        out.append(p)
        todo.extend(children(p))
    return out


def pss_kb(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/smaps_rollup", "rb") as f:
            for line in f:
                if line.startswith(b"Pss:"):
                    return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return 0


def rss_kb(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/statm", "rb") as f:
            return int(f.read().split()[1]) * PAGE_KB
    except (OSError, ValueError, IndexError):
        return 0


class TreeSampler(threading.Thread):
    """Every ``interval`` s (or 30x the cost of one sample, if longer: reading Pss walks page tables, milliseconds
    for a big process, and the sampler should stay near 3% of one core): the sums of Pss (when ``pss``) and of
    VmRSS over the live processes of the tree, and their count; the largest of each is kept."""

    def __init__(self, pid: int, interval: float = 0.02, skip_root: bool = False, pss: bool = True):
        super().__init__(daemon=True)
        self.pid, self.interval, self.skip_root, self.pss = pid, interval, skip_root, pss
        self.pss_kb = self.rss_kb = self.procs = 0
        self.cpu_share = 0.0  # CPU time the sampler itself used, as a share of one core
        self._stop_evt = threading.Event()

    def run(self):
        t0, c0 = time.monotonic(), time.thread_time()
        while not self._stop_evt.is_set():
            s0 = time.thread_time()
            pids = tree(self.pid)
            if self.skip_root:  # the GNU time wrapper is not part of the measured command
                pids = pids[1:]
            if self.pss:
                self.pss_kb = max(self.pss_kb, sum(pss_kb(p) for p in pids))
            self.rss_kb = max(self.rss_kb, sum(rss_kb(p) for p in pids))
            self.procs = max(self.procs, len(pids))
            self._stop_evt.wait(max(self.interval, 30 * (time.thread_time() - s0)))
        self.cpu_share = (time.thread_time() - c0) / max(1e-9, time.monotonic() - t0)

    def stop(self):
        self._stop_evt.set()
        self.join()


def kill_tree(pid: int) -> None:
    for p in reversed(tree(pid)):
        try:
            os.kill(p, signal.SIGKILL)
        except OSError:
            pass


# ---------------------------------------------------------------------------------------------------------------------
# one run
# ---------------------------------------------------------------------------------------------------------------------

class Run:
    """What ``run`` measured.  ``rc`` is the exit status, or "timeout"; ``stdout`` / ``stderr`` are the
    command's output when no ``log`` was given (else it is in the log)."""

    def __init__(self, **kw):
        self.cmd: list = []
        self.rc = 0
        self.secs = self.cpu = 0.0
        self.rss_mb = self.pss_mb = self.rss_sum_mb = 0.0
        self.procs = 0
        self.sampler_cpu = 0.0
        self.stdout = self.stderr = ""
        self.__dict__.update(kw)

    @property
    def ok(self) -> bool:
        return self.rc == 0

    @property
    def peak_mb(self) -> float:
        """max(RSS max, PSS sum): at least the biggest single process, and at least the whole tree."""
        return max(self.rss_mb, self.pss_mb)

    def tail(self, n: int = 3000, log: Path | None = None) -> str:
        text = log.read_bytes()[-n:].decode("utf-8", "replace") if log else (self.stderr or self.stdout)[-n:]
        return text

    def failure(self, log: Path | None = None, n: int = 3000) -> str:
        what = "timeout" if self.rc == "timeout" else f"exit status {self.rc}"
        where = f" ({log})" if log else ""
        return f"{what} after {self.secs:.1f} s: {shlex.join(self.cmd)}\n--- log tail{where} ---\n{self.tail(n, log)}"


def run(cmd: list, env: dict | None = None, cwd=None, timeout: float | None = None, log: Path | None = None,
        echo: bool = False, sample: float | None = None, pss: bool = True, gnu_time: bool = True) -> Run:
    """Run ``cmd`` once and measure it (see the module docstring).

    ``log``: stdout and stderr go to that file (``echo`` first writes the command line there), else both are
    kept in the returned ``Run`` (through temporary files: a chatty command cannot block on a full pipe).
    ``sample``: sample the tree's memory every that many seconds (``pss=False``: VmRSS only, cheaper).
    ``gnu_time``: take RSS max from GNU time when it exists (``wait4``'s ``ru_maxrss`` otherwise).
    """
    cmd = [str(c) for c in cmd]
    use_time = gnu_time and os.access(GNU_TIME, os.X_OK)
    rss_file = None
    if use_time:
        fd, rss_file = tempfile.mkstemp(prefix="harness_maxrss_")
        os.close(fd)
    full = [GNU_TIME, "-f", "%M", "-o", rss_file, *cmd] if use_time else cmd
    if log is not None:
        out = err = open(log, "wb")
        if echo:
            out.write(f"$ {shlex.join(cmd)}\n".encode())
            out.flush()
    else:
        out, err = tempfile.TemporaryFile(), tempfile.TemporaryFile()
    try:
        t0 = time.perf_counter()
        proc = subprocess.Popen(full, stdout=out, stderr=subprocess.STDOUT if log is not None else err,
                                stdin=subprocess.DEVNULL, env=env, cwd=None if cwd is None else str(cwd))
        sampler = TreeSampler(proc.pid, sample, skip_root=use_time, pss=pss) if sample else None
        if sampler:
            sampler.start()
        killed: list = []

        def expire():
            killed.append(True)
            kill_tree(proc.pid)

        timer = threading.Timer(timeout, expire) if timeout else None
        if timer:
            timer.start()
        _, status, ru = os.wait4(proc.pid, 0)
        secs = time.perf_counter() - t0
        if timer:
            timer.cancel()
        timed_out = bool(killed)
        if sampler:
            sampler.stop()
        proc.returncode = os.waitstatus_to_exitcode(status)  # already reaped: keep Popen from waiting again
        r = Run(cmd=cmd, rc="timeout" if timed_out else proc.returncode, secs=secs, cpu=ru.ru_utime + ru.ru_stime,
                rss_mb=ru.ru_maxrss / 1024)
        if use_time and not timed_out:
            try:
                r.rss_mb = int(Path(rss_file).read_text().split()[-1]) / 1024
            except (OSError, ValueError, IndexError):
                if r.rc == 0:
                    raise RunError(f"could not read GNU time's %M from {rss_file} for: {shlex.join(cmd)}")
        if sampler:
            r.pss_mb, r.rss_sum_mb = sampler.pss_kb / 1024, sampler.rss_kb / 1024
            r.procs, r.sampler_cpu = sampler.procs, sampler.cpu_share
        if log is None:
            for f, attr in ((out, "stdout"), (err, "stderr")):
                f.seek(0)
                setattr(r, attr, f.read().decode("utf-8", "replace"))
        return r
    finally:
        out.close()
        if err is not out:
            err.close()
        if rss_file:
            try:
                os.unlink(rss_file)
            except OSError:
                pass


# ---------------------------------------------------------------------------------------------------------------------
# several runs
# ---------------------------------------------------------------------------------------------------------------------

def repeat(fn, n: int, warmup: int = 0) -> list:
    """``warmup`` untimed calls of ``fn()``, then ``n`` (at least one) whose results are returned."""
    for _ in range(warmup):
        fn()
    return [fn() for _ in range(max(1, n))]


def summary(runs: list) -> dict:
    """Best / median / every wall time of ``runs`` (Run objects), and the largest memory figures over them."""
    best = min(runs, key=lambda r: r.secs)
    return {"best": best, "secs": best.secs, "median_secs": statistics.median(r.secs for r in runs),
            "all_secs": [r.secs for r in runs], "n": len(runs),
            "rss_mb": max(r.rss_mb for r in runs), "pss_mb": max(r.pss_mb for r in runs),
            "rss_sum_mb": max(r.rss_sum_mb for r in runs), "procs": max(r.procs for r in runs),
            "sampler_cpu": max(r.sampler_cpu for r in runs)}


def peak(r: dict) -> float:
    """max(RSS max, PSS sum) of a ``summary``."""
    return max(r["rss_mb"], r["pss_mb"])


def best_of(fn, n: int) -> tuple:
    """(lowest wall seconds of ``n`` calls of ``fn()`` (at least one), what the last call returned)."""
    best, out = float("inf"), None
    for _ in range(max(1, n)):
        t0 = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t0)
    return best, out


def time_steps(step, n: int, warmup: int = 0) -> tuple:
    """Call ``step()`` ``warmup`` times untimed, then ``n`` times: (wall ms of each, process CPU ms of each)."""
    for _ in range(warmup):
        step()
    wall, cpu = [], []
    for _ in range(n):
        c0, t0 = time.process_time(), time.perf_counter()
        step()
        wall.append((time.perf_counter() - t0) * 1000.0)
        cpu.append((time.process_time() - c0) * 1000.0)
    return wall, cpu


# ---------------------------------------------------------------------------------------------------------------------
# workers' output and results files
# ---------------------------------------------------------------------------------------------------------------------

def json_line(text: str, marker: str = "{", contains: str = ""):
    """The JSON object of the last line of ``text`` that starts with ``marker`` and holds ``contains`` (a worker's
    result line; a marker that is not JSON itself, e.g. ``"GPBENCH "``, is cut off first), or None."""
    for line in reversed(text.splitlines()):
        if line.startswith(marker) and contains in line:
            try:
                return json.loads(line if marker.startswith("{") else line[len(marker):])
            except ValueError:
                return None
    return None


def last_line(text: str) -> list:
    """The last non-empty line of a command's output, as a one-element list (empty when there is none)."""
    return text.strip().splitlines()[-1:]


def report_block(table: str, goals: list, checks: list, failures: list, notes: list) -> list:
    """The lines of a comparison report after its method: the table, the goals (name, verdict, measured), the
    checks with one ``FAILURE`` line per failure, and the notes when there are any."""
    return [table, "", "| goal | verdict | measured |", "|---|---|---|",
            *[f"| {n} | **{v}** | {d} |" for n, v, d in goals], "", "Checks:", "", *[f"- {c}" for c in checks],
            *[f"- FAILURE: {f}" for f in failures], *(["", "Notes:", ""] + [f"- {n}" for n in notes] if notes else [])]


def remove_subdirs(folder: Path) -> None:
    """Delete the folders inside ``folder`` (the runs' outputs), keep its files (the logs)."""
    for p in Path(folder).iterdir():
        if p.is_dir():
            shutil.rmtree(p, ignore_errors=True)


def exit_status(failures: list, verdicts, heading: str) -> int:
    """2 when a run failed (the failures are printed under ``heading``), 1 when a goal's verdict is FAIL, else 0."""
    if failures:
        print(heading + "\n" + "\n".join(failures), file=sys.stderr)
        return 2
    return 0 if all(v != "FAIL" for v in verdicts) else 1


def write_section(path: Path, body: str, begin: str | None = None, end: str | None = None, title: str = "") -> None:
    """Write ``body`` into ``path`` as the section after the marker ``begin`` (None: the start of the file) up to
    the marker ``end`` (None, or not found: the end of the file), keeping what lies outside.  A missing file or
    ``begin`` marker: the section is appended to the old text (``title`` for a new file) after a blank line,
    with its ``end`` marker."""
    path = Path(path)
    old = path.read_text() if path.is_file() else ""
    start = 0 if begin is None else old.find(begin)
    if start < 0:
        head = (old or title).rstrip("\n")
        new = (head + "\n\n" if head else "") + f"{begin}\n{body}" + (f"{end}\n" if end else "")
    else:
        stop = old.find(end, start) if end else -1
        new = old[:start] + (f"{begin}\n" if begin is not None else "") + body + (old[stop:] if stop >= 0 else "")
    path.write_text(new)


if __name__ == "__main__":
    print(machine_line())
    sys.exit(0)
