"""The reference's module path of TrainerMon (``msprobe.pytorch.monitor.module_hook.TrainerMon``)."""
from msprobe.pytorch.monitor.trainer import TrainerMon  # noqa: F401

__all__ = ["TrainerMon"]
