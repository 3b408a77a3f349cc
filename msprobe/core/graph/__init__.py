"""Hierarchical model graphs (``msprobe graph``): build from a dump, compare two, write .vis / .vis.db.

Framework-free: reads construct.json, dump.json and stack.json; never imports torch or mindspore.
"""
