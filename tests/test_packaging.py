"""Every msprobe sub-package must be a real package (with __init__.py), or a wheel leaves it out."""
import os

from setuptools import find_packages

from conftest import ROOT


def test_every_code_directory_is_a_package():
    pkg_root = os.path.join(str(ROOT), "msprobe")
    missing = []
    for dirpath, dirnames, filenames in os.walk(pkg_root):
        dirnames[:] = [d for d in dirnames if d != "__pycache__"]
        if any(f.endswith(".py") for f in filenames) and "__init__.py" not in filenames:
            missing.append(os.path.relpath(dirpath, str(ROOT)))
    assert missing == []


def test_data_files_sit_in_packages():
    found = set(find_packages(where=str(ROOT), include=["msprobe", "msprobe.*"]))
    assert "msprobe.pytorch.dump" in found
    assert os.path.isfile(os.path.join(str(ROOT), "msprobe", "pytorch", "dump", "api_lists.json"))
