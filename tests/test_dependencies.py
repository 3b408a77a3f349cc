"""Declared = used: the third-party modules that msprobe/ imports are exactly the distributions setup.py declares.

The package's sources are read with ``ast`` (nothing is imported): every ``import X`` / ``from X import ...`` at
any depth (module level, inside functions, inside ``try``), and every ``importlib.import_module("X...")`` /
``importlib.util.find_spec("X")`` with a literal name. The top-level module names that are neither in the
standard library nor ``msprobe`` are mapped to their PyPI distributions by :data:`IMPORT_TO_DIST`; the set of
those distributions must equal ``install_requires`` plus the extras (the ``test`` extra is for tests/, not for
the package, and is left out). A module that is imported but not declared fails the test until it is declared
or listed in :data:`UNDECLARED` with its reason; a declared distribution that nothing imports fails it too.

Where an extra's modules may be imported (:data:`EXTRA_SCOPES`): only under the extra's own package folder, or
inside a function (a lazy import that runs only when that feature is used), never at module level elsewhere,
so ``import msprobe`` and every command that does not use the extra work without it.
"""
import ast
import importlib.util
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "msprobe"

#: import name -> PyPI distribution (only where they differ does the entry matter; every import is listed so
#: that a new dependency is a conscious edit here)
IMPORT_TO_DIST = {
    "numpy": "numpy",
    "orjson": "orjson",
    "yaml": "pyyaml",
    "zlib_ng": "zlib-ng",
    "rich": "rich",              # the one console library: progress display (core/progress.py) and tables (parse)
    "torch": "torch",
    "mindspore": "mindspore",
    "matplotlib": "matplotlib",
    "tensorboard": "tensorboard",
    "ray": "ray",
}

#: imported, deliberately not declared: import name -> why
UNDECLARED = {
    "torch_npu": "Ascend's PyTorch adapter, installed with the CANN toolkit on NPU machines; looked for with "
                 "find_spec and imported inside functions of msprobe/pytorch only",
    "megatron": "the user's training framework; config_check looks for it with find_spec and reads it when present",
    "isal": "second fallback of msprobe/core/crc.py when the declared zlib-ng cannot be imported",
    "importlib_metadata": "backport of importlib.metadata for Python < 3.8, never taken (python_requires >= 3.9)",
}

#: extra name -> folders of msprobe/ where its modules may be imported at module level (elsewhere: in functions)
EXTRA_SCOPES = {
    "pytorch": ("msprobe/pytorch",),
    "mindspore": ("msprobe/mindspore",),
    "plots": (),
    "tensorboard": (),
    "ray": (),
}

#: extras that are not about the package's own imports
NOT_PACKAGE_EXTRAS = {"test"}


def _dist_name(requirement: str) -> str:
    name = re.split(r"[\s<>=!~;\[(]", requirement.strip(), maxsplit=1)[0]
    return re.sub(r"[-_.]+", "-", name).lower()


def _setup_kwargs():
    """install_requires and extras_require as written in setup.py (literals, read with ast)."""
    tree = ast.parse((ROOT / "setup.py").read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "setup":
            kw = {k.arg: k.value for k in node.keywords if k.arg}
            return ast.literal_eval(kw["install_requires"]), ast.literal_eval(kw.get("extras_require", ast.Dict([], [])))
    raise AssertionError("setup() call not found in setup.py")


class _Imports(ast.NodeVisitor):
    """(top-level module, lineno, inside a function) for every import of one file; ``guarded``: the lines of
    imports inside a ``try`` block (at any depth)."""

    _LITERAL_CALLS = {"import_module", "find_spec", "__import__"}

    def __init__(self):
        self.found = []
        self.guarded = set()
        self._depth = 0
        self._try = 0

    def _add(self, name, node):
        if name:
            self.found.append((name.split(".")[0], node.lineno, self._depth > 0))
            if self._try:
                self.guarded.add(node.lineno)

    def _function(self, node):
        self._depth += 1
        self.generic_visit(node)
        self._depth -= 1

    visit_FunctionDef = visit_AsyncFunctionDef = visit_Lambda = _function

    def visit_Try(self, node):
        self._try += 1
        for stmt in node.body:
            self.visit(stmt)
        self._try -= 1
        for part in (*node.handlers, *node.orelse, *node.finalbody):
            self.visit(part)

    visit_TryStar = visit_Try

    def visit_Import(self, node):
        for alias in node.names:
            self._add(alias.name, node)

    def visit_ImportFrom(self, node):
        if node.level == 0:
            self._add(node.module, node)

    def visit_Call(self, node):
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
        if name in self._LITERAL_CALLS and node.args and isinstance(node.args[0], ast.Constant) \
                and isinstance(node.args[0].value, str):
            self._add(node.args[0].value, node)
        self.generic_visit(node)


def _third_party_imports():
    """{module: [(relative path, lineno, lazy, guarded by a try), ...]} over msprobe/."""
    stdlib = set(sys.stdlib_module_names)
    out = {}
    for path in sorted(PKG.rglob("*.py")):
        visitor = _Imports()
        visitor.visit(ast.parse(path.read_text(encoding="utf-8"), filename=str(path)))
        rel = path.relative_to(ROOT).as_posix()
        for mod, line, lazy in visitor.found:
            if mod in stdlib or mod == "msprobe" or mod == "__future__":
                continue
            out.setdefault(mod, []).append((rel, line, lazy, line in visitor.guarded))
    return out


IMPORTS = _third_party_imports()
INSTALL_REQUIRES, EXTRAS = _setup_kwargs()


def test_every_import_is_mapped():
    unknown = {m: sites[:3] for m, sites in IMPORTS.items() if m not in IMPORT_TO_DIST and m not in UNDECLARED}
    assert not unknown, (f"msprobe imports modules this test does not know: {unknown}; declare their distribution "
                         "in setup.py and add them to IMPORT_TO_DIST (or to UNDECLARED with the reason)")


def test_declared_equals_imported():
    declared = {_dist_name(r) for r in INSTALL_REQUIRES}
    for extra, reqs in EXTRAS.items():
        if extra not in NOT_PACKAGE_EXTRAS:
            declared |= {_dist_name(r) for r in reqs}
    imported = {_dist_name(IMPORT_TO_DIST[m]) for m in IMPORTS if m in IMPORT_TO_DIST}
    assert sorted(imported - declared) == [], "imported by msprobe/ but not declared in setup.py"
    assert sorted(declared - imported) == [], "declared in setup.py but never imported by msprobe/"


def test_required_distributions_are_exactly_the_core_ones():
    # the dependencies every install gets: what msprobe/core, cli and the top package import
    assert sorted(_dist_name(r) for r in INSTALL_REQUIRES) == ["numpy", "orjson", "pyyaml", "rich", "zlib-ng"]


def test_one_console_library():
    # progress bars, stage lines and tables all go through rich; tqdm is neither used nor declared
    assert "tqdm" not in IMPORTS
    assert "tqdm" not in {_dist_name(r) for r in INSTALL_REQUIRES}
    assert {site[0] for site in IMPORTS["rich"]} <= {"msprobe/core/progress.py", "msprobe/core/parse/render.py"}


def test_extras_are_imported_only_where_they_belong():
    required = {_dist_name(r) for r in INSTALL_REQUIRES}
    dist_to_extra = {}
    for extra, reqs in EXTRAS.items():
        if extra in NOT_PACKAGE_EXTRAS:
            continue
        for r in reqs:
            if _dist_name(r) not in required:
                dist_to_extra.setdefault(_dist_name(r), extra)
    bad = []
    for mod, sites in IMPORTS.items():
        dist = IMPORT_TO_DIST.get(mod)
        if mod in UNDECLARED:
            # optional by nature: imported inside a function or a try block, never unguarded at module level
            bad += [f"{rel}:{line} imports the undeclared {mod} unguarded at module level"
                    for rel, line, lazy, guarded in sites if not (lazy or guarded)]
            continue
        if dist is None or _dist_name(dist) in required:
            continue
        extra = dist_to_extra.get(_dist_name(dist))
        assert extra is not None, f"{mod}: {dist} is in no extra"
        scopes = EXTRA_SCOPES.get(extra)
        assert scopes is not None, f"extra {extra!r}: add its folders to EXTRA_SCOPES in this test"
        for rel, line, lazy, _ in sites:
            if not lazy and not any(rel == s or rel.startswith(s + "/") for s in scopes):
                bad.append(f"{rel}:{line} imports {mod} (extra {extra}) at module level")
    assert not bad, bad


def test_core_never_imports_a_framework():
    bad = [f"{rel}:{line} {mod}" for mod in ("torch", "mindspore", "torch_npu") for rel, line, *_ in IMPORTS.get(mod, [])
           if rel.startswith("msprobe/core/") or rel.startswith("msprobe/cli/")]
    assert not bad


def test_mapping_matches_installed_distributions():
    """Where a mapped module is installed here, the distribution that provides it has the mapped name."""
    try:
        from importlib.metadata import packages_distributions
    except ImportError:  # pragma: no cover - Python < 3.10
        pytest.skip("importlib.metadata.packages_distributions needs Python >= 3.10")
    provided = packages_distributions()
    checked = 0
    for mod, dist in IMPORT_TO_DIST.items():
        if mod in provided and importlib.util.find_spec(mod) is not None:
            assert _dist_name(dist) in {_dist_name(d) for d in provided[mod]}, (mod, provided[mod])
            checked += 1
    assert checked >= 4   # numpy, orjson, yaml, rich at least are installed wherever the suite runs


def test_scanner_sees_lazy_and_literal_imports():
    src = ("import os\nimport numpy as np\ntry:\n    import yaml\nexcept ImportError:\n    yaml = None\n"
           "def f():\n    from matplotlib import pyplot\n    return importlib.import_module('megatron.training')\n")
    v = _Imports()
    v.visit(ast.parse(src))
    assert v.found == [("os", 1, False), ("numpy", 2, False), ("yaml", 4, False), ("matplotlib", 8, True),
                       ("megatron", 9, True)]
    assert v.guarded == {4}
    assert _dist_name("numpy<2") == "numpy" and _dist_name("zlib_ng") == "zlib-ng" \
        and _dist_name("transformers>=4.46") == "transformers" and _dist_name("torch==2.13.0") == "torch"
