"""Safe detection of torch_npu (Ascend) for the PyTorch side of msprobe.

``npu_state()`` answers one of:

* ``'absent'``         -- torch_npu is not installed (``importlib.util.find_spec`` finds nothing); torch_npu is
                          then never imported, and torch is not imported either;
* ``'broken:<why>'``   -- torch_npu is installed but ``import torch`` / ``import torch_npu`` fails. Without the
                          CANN runtime, torch's backend autoload raises ``RuntimeError: Failed to load the backend
                          extension: torch_npu`` from ``import torch`` itself, and ``import torch_npu`` raises
                          ``ImportError: libhccl.so ...``; both (and anything else) end up here, never raised;
* ``'no-device'``      -- torch_npu imports (e.g. through the CANN stub used by the tests) but
                          ``torch.npu.is_available()`` is False or no device is counted;
* ``'available'``      -- a usable NPU.

The answer is computed once, on the first call, and cached (``_reset_cache()`` clears it, for tests).
Nothing is imported when this module is imported: torch and torch_npu are imported lazily inside the functions,
so torch-free code paths (offline compare, dump.json parsing) never touch them. Call ``npu_state()`` only when the
user's framework is torch. ``torch.accelerator.current_accelerator()`` is deliberately not used: it reports
``npu`` even when no device exists.
"""
import importlib.util
import sys
import threading

__all__ = ["npu_state", "npu_module", "is_npu_available", "has_npu_api"]

ABSENT = "absent"
BROKEN = "broken"
NO_DEVICE = "no-device"
AVAILABLE = "available"

_lock = threading.Lock()
_state = None


def _describe(exc):
    """'Type: first line of message', followed by the chained cause (the autoload RuntimeError wraps the
    ImportError that names the missing CANN library)."""
    parts = []
    seen = set()
    while exc is not None and id(exc) not in seen and len(parts) < 3:
        seen.add(id(exc))
        lines = str(exc).strip().splitlines()
        name = type(exc).__name__
        parts.append(f"{name}: {lines[0].strip()}" if lines else name)
        exc = exc.__cause__ or exc.__context__
    return " <- ".join(parts) or "unknown error"


def _find_torch_npu():
    try:
        return importlib.util.find_spec("torch_npu") is not None
    except (ImportError, ValueError):
        # ValueError: torch_npu in sys.modules with no __spec__ (e.g. a test double); treat it as installed.
        return "torch_npu" in sys.modules


def _compute_state():
    if not _find_torch_npu():
        return ABSENT
    try:
        import torch  # may itself raise RuntimeError through torch's backend autoload of torch_npu
        import torch_npu  # noqa: F401  ImportError/OSError without CANN
    except (Exception, SystemExit) as exc:  # not only ImportError: the autoload failure is a RuntimeError
        return f"{BROKEN}:{_describe(exc)}"
    try:
        npu = getattr(torch, "npu", None)
        if npu is None:
            return f"{BROKEN}:torch.npu is missing after import torch_npu"
        if npu.is_available() and npu.device_count() > 0:
            return AVAILABLE
        return NO_DEVICE
    except (Exception, SystemExit) as exc:
        return f"{BROKEN}:{_describe(exc)}"


def npu_state():
    """'absent' | 'broken:<why>' | 'no-device' | 'available'. Never raises; cached after the first call."""
    global _state
    if _state is not None:
        return _state
    with _lock:
        if _state is None:
            try:
                _state = _compute_state()
            except BaseException as exc:  # pragma: no cover - last-resort guard (KeyboardInterrupt re-raised)
                if isinstance(exc, KeyboardInterrupt):
                    raise
                _state = f"{BROKEN}:{_describe(exc)}"
        return _state


def npu_module():
    """The imported ``torch_npu`` module when it imports (state 'no-device' or 'available'), else None."""
    if npu_state() in (NO_DEVICE, AVAILABLE):
        return sys.modules.get("torch_npu")
    return None


def is_npu_available():
    """True only with a usable NPU device (decides "run on NPU")."""
    return npu_state() == AVAILABLE


def has_npu_api(name):
    """Whether torch_npu provides API ``name`` (``torch_npu.<name>`` or ``torch.ops.npu.<name>``); False when
    torch_npu does not import. Decides "is NPU API X present" independently of a device."""
    mod = npu_module()
    if mod is None:
        return False
    try:
        if hasattr(mod, name):
            return True
        import torch
        return hasattr(torch.ops.npu, name)
    except Exception:
        return False


def _reset_cache():
    """Forget the cached state (tests only). Modules already imported stay imported."""
    global _state
    with _lock:
        _state = None
