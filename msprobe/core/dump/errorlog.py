"""dump_error_info.log: failures inside hooks, never raised, logged once (framework-free).

A hook that fails fails again at every step and often at every call of the same kind, so each problem is
reported once, not per call and not per step:

* the log file gets one entry per distinct (place, exception type), where the place is the name the
  failure happened at without its call counters (``Functional.linear.0.forward`` and
  ``Functional.linear.3.forward`` of any step are one place, ``Functional.linear.forward``);
  the first entry of a cause carries the traceback, later places hit by the same cause one line each;
* the console gets one warning per cause (exception type and the code line that raised it), the first
  time it is seen, naming the log file.

A full disk (or quota) is one problem however many files it hits: it is reported once, on the console
first (the log file itself may not be writable then), naming the folder."""
import errno
import logging
import os
import re
import time
import traceback

_NO_SPACE = (errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC), errno.EFBIG)
_COUNTER = re.compile(r"\.\d+(?=[.\s]|$)")


def _text(exc) -> str:
    try:
        return str(exc)
    except Exception:  # noqa: BLE001 - an exception whose message itself fails
        return f"<the {type(exc).__name__}'s message cannot be shown>"


def _no_space(exc):
    e = exc
    for _ in range(20):
        if e is None:
            break
        if isinstance(e, OSError) and e.errno in _NO_SPACE:
            return True
        text = _text(e).lower()
        if "no space left" in text or "disk quota" in text or "file too large" in text:
            return True   # torch.save wraps the OSError in a RuntimeError with the message
        e = e.__cause__ or e.__context__
    return False


def place(where) -> str:
    """``where`` without its call counters (and list indexes): the same for every call and every step."""
    return _COUNTER.sub("", where) if where else ""


def _cause(exc):
    """The exception type and the code line that raised it (the message may differ per call)."""
    tb = exc.__traceback__
    if tb is None:
        return type(exc).__name__, _text(exc)[:200]
    while tb.tb_next is not None:
        tb = tb.tb_next
    return type(exc).__name__, tb.tb_frame.f_code.co_filename, tb.tb_lineno


def _short(exc, limit=300):
    text = _text(exc).strip().splitlines()
    text = text[0] if text else ""
    return text if len(text) <= limit else text[:limit] + "..."


class ErrorLog:
    """dump_error_info.log: each problem once (see the module docstring)."""

    def __init__(self, directory):
        self.directory = directory
        self.seen = set()       # (place, exception type) written to the log
        self.causes = set()     # causes warned about on the console
        self.counts = {}        # (place, exception type) -> how many times it happened

    def record(self, where, exc):
        try:
            self._record(where, exc)
        except Exception:       # the error log itself never fails the training
            pass

    def _record(self, where, exc):
        no_space = _no_space(exc)
        key = ("no space", "") if no_space else (place(where), type(exc).__name__)
        self.counts[key] = self.counts.get(key, 0) + 1
        if key in self.seen:
            return
        self.seen.add(key)
        cause = ("no space",) if no_space else _cause(exc)
        first = cause not in self.causes
        self.causes.add(cause)
        path = os.path.join(self.directory or ".", "dump_error_info.log")
        log = logging.getLogger("msprobe")
        if first:
            try:
                if no_space:
                    log.warning("msprobe: no space left on device in %s: the dump of this step is incomplete (files "
                                "that could not be written are absent, never left empty or partial); training "
                                "continues. Free some space or set another dump_path. First failure: %s (%s)",
                                self.directory, where, _short(exc))
                else:
                    log.warning("msprobe: could not record %s (%s: %s); training continues. Reported once: "
                                "details and the other records it hits in %s", where, type(exc).__name__,
                                _short(exc), path)
            except Exception:
                pass
        size = None
        try:
            os.makedirs(self.directory, mode=0o750, exist_ok=True)
            size = os.path.getsize(path) if os.path.isfile(path) else 0
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | getattr(os, "O_NOFOLLOW", 0), 0o640)
            head = (f"[{time.strftime('%Y-%m-%d %H:%M:%S')}] msprobe could not record {where}: "
                    f"{type(exc).__name__}: {_short(exc, 2000)}")
            if first:
                try:
                    tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
                except Exception:  # noqa: BLE001
                    tb = "".join(traceback.format_tb(exc.__traceback__))
                text = head + "\n" + tb + "\n"
            else:
                text = head + " (same cause as an earlier entry, logged there with its traceback)\n"
            with os.fdopen(fd, "a", encoding="utf-8") as f:
                f.write(text)
        except Exception:
            try:
                if size == 0 and os.path.getsize(path) == 0:
                    os.unlink(path)      # a full disk: no empty log left behind
                elif size:
                    os.truncate(path, size)  # nor half an entry
            except Exception:
                pass
