"""msprobe: precision debugging for deep-learning training (compatible with MindStudio Probe)."""

__version__ = "0.1.0"
