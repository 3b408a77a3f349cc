"""Framework-free core: dump format, naming, config, compare, report writers.

Nothing under ``msprobe.core`` may import torch or mindspore.
"""
