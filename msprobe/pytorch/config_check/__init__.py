"""PyTorch side of config_check: ``from msprobe.pytorch.config_check import ConfigChecker`` is the same
class as ``msprobe.core.config_check.ConfigChecker`` (the reference's import path); the framework parts are
in :mod:`msprobe.pytorch.config_check.adapter` and the checkpoint reader in :mod:`.ckpt`."""

from msprobe.core.config_check import ConfigChecker

__all__ = ["ConfigChecker"]
