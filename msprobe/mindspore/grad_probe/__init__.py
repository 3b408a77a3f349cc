"""grad_probe for MindSpore PyNative (the reference's ``msprobe.mindspore.grad_probe``): attached through
``PrecisionDebugger(config).monitor(optimizer)``; see :mod:`msprobe.mindspore.grad_probe.grad_monitor`."""
