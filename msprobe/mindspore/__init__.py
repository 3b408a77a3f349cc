"""MindSpore side of msprobe.

Importing this package does not import mindspore (``msprobe -f mindspore code_mapping`` works without
it). ``from msprobe.mindspore import PrecisionDebugger`` (or ``seed_all``, ``TrainerMon``) imports MindSpore; where
MindSpore is not installed it raises one ImportError line saying how to install it.
"""
import importlib.util

from msprobe.core.errors import MsprobeError

__all__ = ["PrecisionDebugger", "seed_all", "TrainerMon"]
_LAZY = {"PrecisionDebugger": "msprobe.mindspore.debugger", "seed_all": "msprobe.mindspore.debugger",
         "TrainerMon": "msprobe.mindspore.monitor.trainer"}


class MindSporeMissingError(MsprobeError, ImportError):
    """MindSpore is not installed (or cannot be imported): one clear line."""


def _mindspore_state():
    try:
        spec = importlib.util.find_spec("mindspore")
        if spec is None or spec.origin in (None, "namespace"):     # absent, or just a folder of that name
            return "not installed"
    except (ImportError, ValueError) as exc:
        return f"not importable ({type(exc).__name__}: {exc})"
    return None


def __getattr__(name):
    if name not in _LAZY:
        raise AttributeError(f"module 'msprobe.mindspore' has no attribute {name!r}")
    problem = _mindspore_state()
    if problem is None:
        try:
            import mindspore  # noqa: F401
        except Exception as exc:   # a broken install (e.g. numpy 2 with MindSpore 2.10)
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
            problem = f"not importable ({type(exc).__name__}: {first})"
    if problem is not None:
        raise MindSporeMissingError(
            f"msprobe.mindspore.{name} needs MindSpore, which is {problem} in this Python: "
            'pip install mindspore==2.10.0 "numpy<2"   (or: pip install "msprobe[mindspore]")')
    import importlib
    value = getattr(importlib.import_module(_LAZY[name]), name)
    globals()[name] = value
    return value
