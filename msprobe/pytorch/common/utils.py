"""Alias of the reference's ``msprobe.pytorch.common.utils``: the names integrations import from it.

``seed_all(seed=1234, mode=False, rm_dropout=False)`` and ``remove_dropout()`` (what ``rm_dropout=True``
does: ``F.dropout``/``dropout2d``/``dropout3d`` run with ``p=0``) are those of :mod:`msprobe.pytorch.debugger`.
"""
from msprobe.pytorch.debugger import _remove_dropout as remove_dropout
from msprobe.pytorch.debugger import seed_all

__all__ = ["seed_all", "remove_dropout"]
