"""The reference's import path of the monitor's CSV -> TensorBoard converter (the code is framework-free:
msprobe.core.monitor.csv2tb)."""
from msprobe.core.monitor.csv2tb import ALL_DATA_TYPES, csv2tensorboard_by_step  # noqa: F401

__all__ = ["csv2tensorboard_by_step"]
