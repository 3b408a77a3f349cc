"""Alias package of the reference's ``msprobe.pytorch.common`` (``from msprobe.pytorch.common import seed_all``).

Importing it does not import torch; ``seed_all`` does when called.
"""
from msprobe.pytorch.common.utils import seed_all

__all__ = ["seed_all"]
