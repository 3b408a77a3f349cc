"""MindSpore side of config_check (see :mod:`msprobe.mindspore.config_check.adapter`)."""

from msprobe.core.config_check import ConfigChecker

__all__ = ["ConfigChecker"]
