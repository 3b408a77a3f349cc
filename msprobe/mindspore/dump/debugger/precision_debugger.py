"""Alias of the reference's 26.x module path ``msprobe.mindspore.dump.debugger.precision_debugger``.

The object is :class:`msprobe.mindspore.debugger.PrecisionDebugger`; without MindSpore, importing this module
raises the one-line ``MindSporeMissingError`` (an ImportError) of ``msprobe.mindspore``.
"""
from msprobe.mindspore import PrecisionDebugger, seed_all

__all__ = ["PrecisionDebugger", "seed_all"]
