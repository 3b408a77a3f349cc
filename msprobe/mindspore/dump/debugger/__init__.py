"""Alias package of the reference's 26.x module path ``msprobe.mindspore.dump.debugger``."""
