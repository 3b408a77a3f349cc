"""Alias package of the reference's ``msprobe.mindspore.common``. Importing it does not import MindSpore."""
