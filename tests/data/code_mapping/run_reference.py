"""Run the reference's code_mapping (mindstudio-probe 8.3.3) without MindSpore installed.

Used by tests/test_code_mapping.py and benchmarks/code_mapping_bench.py to compare with the reference:

    $MSPROBE_REF_CACHE/venv833/bin/python tests/data/code_mapping/run_reference.py --ir IR --dump_data PATH --output DIR

The reference's code_mapping is pure text processing, but its import chain goes through
msprobe.mindspore.common, which imports mindspore.  This harness installs an import hook that answers
every ``mindspore*`` import with an inert stub module (any attribute is a class that can be subclassed
and called), then calls the reference's own ``code_mapping_main``.  Nothing of the reference is copied.
"""

import argparse
import concurrent.futures  # noqa: F401 - the reference uses concurrent.futures without importing it
import importlib.abc
import importlib.machinery
import sys
import types


class _AnyMeta(type):
    def __getattr__(cls, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return _AnyMeta(name, (_Any,), {})


class _Any(metaclass=_AnyMeta):
    def __init__(self, *args, **kwargs):
        pass

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return _Any()

    def __call__(self, *args, **kwargs):
        return _Any()


class _StubModule(types.ModuleType):
    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        value = _AnyMeta(name, (_Any,), {})
        setattr(self, name, value)
        return value


class _StubFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, name, path, target=None):
        if name == "mindspore" or name.startswith("mindspore."):
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        return None

    def create_module(self, spec):
        module = _StubModule(spec.name)
        module.__path__ = []
        module.__version__ = "2.10.0"
        return module

    def exec_module(self, module):
        pass


def main() -> None:
    sys.meta_path.insert(0, _StubFinder())
    from msprobe.mindspore.code_mapping.main import code_mapping_main

    p = argparse.ArgumentParser()
    p.add_argument("--ir", required=True)
    p.add_argument("--dump_data", required=True)
    p.add_argument("--output", default="./")
    code_mapping_main(p.parse_args())


if __name__ == "__main__":
    main()
