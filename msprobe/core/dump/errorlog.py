"""dump_error_info.log: failures inside hooks, logged once per name, never raised (framework-free)."""
import os
import time
import traceback


class ErrorLog:
    """dump_error_info.log: the first failure of each name, with its traceback."""

    def __init__(self, directory):
        self.directory = directory
        self.seen = set()

    def record(self, where, exc):
        key = (where.rsplit(".", 2)[0] if where else "", type(exc).__name__)
        if key in self.seen:
            return
        self.seen.add(key)
        try:
            os.makedirs(self.directory, exist_ok=True)
            path = os.path.join(self.directory, "dump_error_info.log")
            with open(path, "a", encoding="utf-8") as f:
                f.write(f"[{time.strftime('%Y-%m-%d %H:%M:%S')}] msprobe could not record {where}: "
                        f"{type(exc).__name__}: {exc}\n")
                f.write("".join(traceback.format_exception(type(exc), exc, exc.__traceback__)))
                f.write("\n")
            import logging
            logging.getLogger("msprobe").warning(
                "msprobe: could not record %s (%s: %s); training continues, details in %s",
                where, type(exc).__name__, exc, path)
        except Exception:
            pass
