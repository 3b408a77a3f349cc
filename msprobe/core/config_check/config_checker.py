"""The reference's module path of ``ConfigChecker`` (``msprobe.core.config_check.config_checker``), kept so
that scripts importing it from there work; the class is :class:`msprobe.core.config_check.checker.ConfigChecker`."""

from msprobe.core.config_check.checker import ConfigChecker

__all__ = ["ConfigChecker"]
