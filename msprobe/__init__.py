"""msprobe: precision debugging for deep-learning training (compatible with MindStudio Probe)."""

__version__ = "0.1.0"

# The reference exports its grad_probe comparator from the package (``from msprobe import GradComparator``,
# or ``from msprobe import *`` as its docs write); loaded on first use, importing msprobe stays light.
__all__ = ["GradComparator"]


def __getattr__(name):
    if name == "GradComparator":
        from msprobe.core.grad_probe.grad_compare import GradComparator
        return GradComparator
    raise AttributeError(f"module 'msprobe' has no attribute {name!r}")
