"""Moved to :mod:`msprobe.core.dump.stack` (shared by the PyTorch and MindSpore dumpers)."""
from msprobe.core.dump.stack import StackTable, _format  # noqa: F401
