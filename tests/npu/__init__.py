"""torch_npu tests (package, so that its conftest does not shadow tests/conftest.py as module `conftest`)."""
