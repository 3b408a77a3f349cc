"""The training monitor for MindSpore (PyNative): ``TrainerMon`` (see docs/monitor.md)."""
__all__ = ["TrainerMon"]


def __getattr__(name):
    if name == "TrainerMon":
        from msprobe.mindspore.monitor.trainer import TrainerMon
        return TrainerMon
    raise AttributeError(f"module 'msprobe.mindspore.monitor' has no attribute {name!r}")
