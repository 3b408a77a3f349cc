"""MindSpore side of msprobe.

Importing this package does not import mindspore.
"""
