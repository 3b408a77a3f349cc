"""Names of the reference's ``msprobe.core.grad_probe.constant`` that user code may import: ``GradConst``
(levels, bounds range, file suffixes, CSV column keys) and ``level_adp`` (per level: the CSV column keys and
whether direction files are written).  msprobe's own code uses :mod:`msprobe.core.grad_probe.stats`."""
from msprobe.core.grad_probe.config import BOUNDS_MAX, BOUNDS_MIN, GRAD_LEVELS


class GradConst:
    LEVEL0, LEVEL1, LEVEL2 = GRAD_LEVELS
    SUPPORTED_LEVEL = set(GRAD_LEVELS)
    GRAD_FILE_SUFFIX = {"npy", "pt"}
    NPY_SUFFIX = "npy"
    PT_SUFFIX = "pt"
    BOUNDS_MINIMUM = BOUNDS_MIN
    BOUNDS_MAXIMUM = BOUNDS_MAX
    PARAM_VALID_PATTERN = r"^[a-zA-Z0-9_.]+$"
    SUMMARY = "summary"
    # keys of the CSV columns
    MD5 = "MD5"
    DISTRIBUTION = "distribution"
    MAX = "max"
    MIN = "min"
    NORM = "norm"
    SHAPE = "shape"


_STATS = [GradConst.MAX, GradConst.MIN, GradConst.NORM, GradConst.SHAPE]
level_adp = {
    "L0": {"header": [GradConst.MD5] + _STATS, "have_grad_direction": False},
    "L1": {"header": list(_STATS), "have_grad_direction": True},
    "L2": {"header": [GradConst.DISTRIBUTION] + _STATS, "have_grad_direction": True},
}
