"""Alias of the reference's 26.x module path ``msprobe.pytorch.dump.debugger.precision_debugger``.

The objects are those of :mod:`msprobe.pytorch.debugger` (see docs/compatibility.md, "Import paths").
"""
from msprobe.pytorch.debugger import PrecisionDebugger, module_dump, module_dump_end, seed_all

__all__ = ["PrecisionDebugger", "module_dump", "module_dump_end", "seed_all"]
