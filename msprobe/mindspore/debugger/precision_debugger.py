"""Alias of the reference's module path ``msprobe.mindspore.debugger.precision_debugger`` (8.x).

The object is :class:`msprobe.mindspore.debugger.PrecisionDebugger`. Without MindSpore, importing this
module raises the one-line ``MindSporeMissingError`` (an ImportError) of ``msprobe.mindspore``.
"""
from msprobe.mindspore import PrecisionDebugger, seed_all

__all__ = ["PrecisionDebugger", "seed_all"]
