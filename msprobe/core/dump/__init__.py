"""Dump format: reading dump.json / stack.json into columnar rows."""
