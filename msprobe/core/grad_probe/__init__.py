"""grad_probe, framework-free: the config section, the per-step statistics format and writer, and the
comparator of two runs' gradient directions (``GradComparator``).  Never imports torch or mindspore."""


def __getattr__(name):
    if name == "GradComparator":
        from msprobe.core.grad_probe.grad_compare import GradComparator
        return GradComparator
    raise AttributeError(f"module 'msprobe.core.grad_probe' has no attribute {name!r}")
