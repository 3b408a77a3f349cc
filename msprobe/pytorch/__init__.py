"""PyTorch side of msprobe: PrecisionDebugger, seed_all, module_dump and tensor I/O through torch.

Importing this package does not import torch; the names below load their modules on first use.
"""
__all__ = ["PrecisionDebugger", "seed_all", "module_dump", "module_dump_end"]


def __getattr__(name):
    if name == "TrainerMon":
        from msprobe.pytorch.monitor.trainer import TrainerMon
        return TrainerMon
    if name in __all__:
        from msprobe.pytorch import debugger
        return getattr(debugger, name)
    raise AttributeError(f"module 'msprobe.pytorch' has no attribute {name!r}")
