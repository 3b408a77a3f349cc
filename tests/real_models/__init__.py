"""Tiny random-init models built from ``transformers`` configs (and nothing fetched at run time), for the
real-model dump tests (tests/test_real_models.py) and anything else that needs modeling code nobody here wrote.

``build(arch)`` -> :class:`Case`; ``ARCHS`` lists the architectures.
"""
from real_models.builders import ARCHS, Case, build, transformers_missing  # noqa: F401
