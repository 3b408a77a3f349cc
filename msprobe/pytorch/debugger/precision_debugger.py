"""Alias of the reference's module path ``msprobe.pytorch.debugger.precision_debugger`` (8.x).

Integrations written for MindStudio Probe import from here; the objects are those of
:mod:`msprobe.pytorch.debugger` (one singleton, whichever path it was imported through).
"""
from msprobe.pytorch.debugger import PrecisionDebugger, module_dump, module_dump_end, seed_all

__all__ = ["PrecisionDebugger", "module_dump", "module_dump_end", "seed_all"]
