"""Where the reference's scratch venvs live (one convention for every benchmark and test).

A reference venv named NAME is ``$MSPROBE_REF_CACHE/NAME`` (cache default ``~/.cache/msprobe-ref``):

* ``venv833``    mindstudio-probe 8.3.3 (PyTorch)
* ``venv2620``   mindstudio-probe 26.2.0 (PyTorch)
* ``venv2620ms`` mindstudio-probe 26.2.0 with MindSpore 2.10.0

benchmarks/README.md gives the commands that build them. Standard library only (tests import it too).
"""
import os
from pathlib import Path

CACHE_ENV = "MSPROBE_REF_CACHE"
ROOT = Path(__file__).resolve().parents[1]


def ref_cache() -> Path:
    """The folder holding the reference venvs: $MSPROBE_REF_CACHE, else ~/.cache/msprobe-ref."""
    env = os.environ.get(CACHE_ENV)
    return Path(env) if env else Path.home() / ".cache" / "msprobe-ref"


def ref_venv(name: str, env_var: str = "") -> Path:
    """The venv NAME in the cache; a non-empty environment variable ENV_VAR (a venv folder) overrides it."""
    override = os.environ.get(env_var) if env_var else None
    return Path(override) if override else ref_cache() / name


def portable(path) -> str:
    """PATH written without this machine's folders: <repo>/..., $MSPROBE_REF_CACHE/..., ~/... (else as is)."""
    p = Path(path)
    for base, label in ((ROOT, "<repo>"), (ref_cache(), "$" + CACHE_ENV), (Path.home(), "~")):
        try:
            return str(Path(label) / p.relative_to(base))
        except ValueError:
            continue
    return str(p)
