"""The training monitor for PyTorch: ``TrainerMon`` (see docs/monitor.md)."""
__all__ = ["TrainerMon"]


def __getattr__(name):
    if name == "TrainerMon":
        from msprobe.pytorch.monitor.trainer import TrainerMon
        return TrainerMon
    raise AttributeError(f"module 'msprobe.pytorch.monitor' has no attribute {name!r}")
