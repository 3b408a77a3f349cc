"""Alias package of the reference's 26.x module path ``msprobe.pytorch.dump.debugger``."""
