"""MindSpore PyNative dump: collector, hooks and service behind msprobe.mindspore.PrecisionDebugger."""
