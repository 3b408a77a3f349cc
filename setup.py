"""Packaging for msprobe (precision-debugging toolkit, compatible with MindStudio Probe)."""
import os
import re

from setuptools import Extension, find_packages, setup

HERE = os.path.dirname(os.path.abspath(__file__))


def read_version():
    with open(os.path.join(HERE, "msprobe", "__init__.py"), encoding="utf-8") as f:
        match = re.search(r'^__version__\s*=\s*["\']([^"\']+)["\']', f.read(), re.MULTILINE)
    if not match:
        raise RuntimeError("__version__ not found in msprobe/__init__.py")
    return match.group(1)


def read_long_description():
    path = os.path.join(HERE, "README.md")
    if not os.path.exists(path):
        return ""
    with open(path, encoding="utf-8") as f:
        return f.read()


# Data-only folders inside the package (no __init__.py), e.g. msprobe/config with the default config.json:
# listed explicitly so their json/yaml files ship in the wheel. Folders that do not exist are skipped.
DATA_PATTERNS = ["*.json", "*.yaml", "*.yml"]
DATA_PACKAGES = [
    pkg for pkg in ("msprobe.config",)
    if os.path.isdir(os.path.join(HERE, *pkg.split(".")))
]


# Optional one-pass float32 statistics for the dump (msprobe/_native/fstats.c): a build failure (no compiler)
# only costs speed, msprobe falls back to numpy/torch.
NATIVE = [Extension("msprobe._native._fstats", ["msprobe/_native/fstats.c"], optional=True,
                    extra_compile_args=["-O3", "-fno-math-errno"])]


setup(
    name="msprobe",
    ext_modules=NATIVE,
    version=read_version(),
    description="Precision debugging for deep-learning training: dump, compare and analyse "
                "(compatible with MindStudio Probe)",
    long_description=read_long_description(),
    long_description_content_type="text/markdown",
    license="Apache-2.0",
    packages=find_packages(include=["msprobe", "msprobe.*"]) + DATA_PACKAGES,
    package_data={**{pkg: DATA_PATTERNS for pkg in DATA_PACKAGES},
                  "msprobe.pytorch.dump": ["api_lists.json"]},
    python_requires=">=3.9",
    install_requires=[
        "numpy",
        "orjson",
        # zlib-ng: the CRC-32 of the md5 summary and of .pt entries, ~10x faster than zlib (msprobe.core.crc)
        "zlib-ng",
        "pyyaml",
        # rich: the one console library (live progress of core/progress.py, parse's tables); exactly what the
        # package imports is declared, tests/test_dependencies.py checks it (openpyxl is for the tests only)
        "rich",
    ],
    extras_require={
        # A bare `torch` pulls a multi-GB CUDA build from the registry; the 2.13.0 CPU wheel is on local disk.
        "pytorch": ["torch==2.13.0"],
        # MindSpore 2.10.0 wheels need numpy<2 (see the frameworks spec).
        "mindspore": ["mindspore==2.10.0", "numpy<2"],
        # grad_probe's comparator draws similarities_picture/*.png with it (skipped with a warning without it)
        "plots": ["matplotlib"],
        # --ray on compare / merge_result / graph (msprobe.core.executor_ray, docs/scale.md); imported only with the flag.
        # [client]: grpcio, for --ray ray://host:port (Ray Client); a local instance or --ray auto need plain ray
        "ray": ["ray[client]"],
        # the training monitor's format 'tensorboard' and `msprobe csv2tensorboard` (a clear error without it)
        "tensorboard": ["tensorboard"],
        # transformers: tests/real_models builds tiny models from configs (no download). torchvision is not listed:
        # it must come after the CPU torch without dependencies (the Makefile installs torchvision==0.28.0 with
        # --no-deps into .venv/torchvision-site, outside site-packages: its wheel's _C extension is built for CUDA
        # torch, so importing it fails, and transformers would import it); tests/tvmodels.py imports the models.
        "test": ["pytest", "hypothesis", "pandas", "openpyxl", "tensorboard", "tb-graph-ascend", "transformers>=4.46",
                 "matplotlib", "ray"],
    },
    entry_points={
        "console_scripts": [
            "msprobe = msprobe.cli.main:console_main",
        ],
    },
    classifiers=[
        "Programming Language :: Python :: 3",
        "License :: OSI Approved :: Apache Software License",
        "Operating System :: POSIX :: Linux",
        "Topic :: Scientific/Engineering :: Artificial Intelligence",
    ],
)
