"""Why the tests of this folder cannot run in this interpreter (None: MindSpore is installed), and the pytest
mark that skips them then (``pytestmark = requires_mindspore``).

Decided by the installed distribution, not by find_spec: tests/ is on sys.path under pytest, so
find_spec("mindspore") would find this very folder as a namespace package. (That is also why this folder has no
__init__.py and no conftest.py: as a package it would shadow the real mindspore.)"""
import importlib.metadata
import sys

import pytest


def _skip_reason():
    try:
        importlib.metadata.distribution("mindspore")
    except importlib.metadata.PackageNotFoundError:
        return (f"mindspore is not installed in this interpreter ({sys.executable}); these tests run in .venv-ms: "
                "run `make ms-venv`, then `make test-ms`")
    return None


SKIP_REASON = _skip_reason()
requires_mindspore = pytest.mark.skipif(SKIP_REASON is not None, reason=SKIP_REASON or "")
