"""Alias of the reference's ``msprobe.mindspore.common.utils``: ``seed_all(seed=1234, mode=False, rm_dropout=False)``.

Without MindSpore, importing this module raises the one-line ``MindSporeMissingError`` (an ImportError) of
``msprobe.mindspore``.
"""
from msprobe.mindspore import seed_all

__all__ = ["seed_all"]
