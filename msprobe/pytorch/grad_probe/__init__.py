"""grad_probe for PyTorch (the reference's ``msprobe.pytorch.grad_probe``): ``grad_monitor.GradientMonitor``,
``grad_stat_csv.GradStatCsv``.  Attached through ``PrecisionDebugger(config).monitor(model)``."""
