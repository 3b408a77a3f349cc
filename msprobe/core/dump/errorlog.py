"""dump_error_info.log: failures inside hooks, logged once per name, never raised (framework-free).

A full disk (or quota) is one problem however many files it hits: it is reported once, on the console
first (the log file itself may not be writable then), naming the folder."""
import errno
import logging
import os
import time
import traceback

_NO_SPACE = (errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC), errno.EFBIG)


def _no_space(exc):
    e = exc
    while e is not None:
        if isinstance(e, OSError) and e.errno in _NO_SPACE:
            return True
        text = str(e).lower()
        if "no space left" in text or "disk quota" in text or "file too large" in text:
            return True   # torch.save wraps the OSError in a RuntimeError with the message
        e = e.__cause__ or e.__context__
    return False


class ErrorLog:
    """dump_error_info.log: the first failure of each name, with its traceback."""

    def __init__(self, directory):
        self.directory = directory
        self.seen = set()

    def record(self, where, exc):
        no_space = _no_space(exc)
        key = ("no space", "") if no_space else (where.rsplit(".", 2)[0] if where else "", type(exc).__name__)
        if key in self.seen:
            return
        self.seen.add(key)
        path = os.path.join(self.directory or ".", "dump_error_info.log")
        log = logging.getLogger("msprobe")
        try:
            if no_space:
                log.warning("msprobe: no space left on device in %s: the dump of this step is incomplete (files "
                            "that could not be written are absent, never left empty or partial); training "
                            "continues. Free some space or set another dump_path. First failure: %s (%s)",
                            self.directory, where, exc)
            else:
                log.warning("msprobe: could not record %s (%s: %s); training continues, details in %s",
                            where, type(exc).__name__, exc, path)
        except Exception:
            pass
        size = None
        try:
            os.makedirs(self.directory, mode=0o750, exist_ok=True)
            size = os.path.getsize(path) if os.path.isfile(path) else 0
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | getattr(os, "O_NOFOLLOW", 0), 0o640)
            text = (f"[{time.strftime('%Y-%m-%d %H:%M:%S')}] msprobe could not record {where}: "
                    f"{type(exc).__name__}: {exc}\n"
                    + "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)) + "\n")
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
