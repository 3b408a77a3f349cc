"""config_check: compare the training configuration of two environments.

Collect a pack in each environment (``msprobe config_check -d [scripts...] -o pack.zip`` for environment
variables, installed packages and hyperparameters; :class:`ConfigChecker` in the training script for
weights, dataset batches and random calls per rank and step), then compare two packs with
``msprobe config_check -c bench.zip cmp.zip -o DIR`` into ``DIR/result.xlsx``.  See docs/config_check.md.

Framework-free: torch / mindspore are imported only by a ConfigChecker of that framework.
"""

from msprobe.core.config_check.checker import ConfigChecker, pack_static
from msprobe.core.config_check.compare import compare_packs

__all__ = ["ConfigChecker", "pack_static", "compare_packs"]
