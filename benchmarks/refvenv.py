"""Where the reference's scratch venvs live, and how they are built on demand (one helper for every benchmark and
every test that compares with the reference).

A reference venv named NAME is ``$MSPROBE_REF_CACHE/NAME`` (cache default ``~/.cache/msprobe-ref``):

* ``venv833``    mindstudio-probe 8.3.3 (PyTorch)
* ``venv2620``   mindstudio-probe 26.2.0 (PyTorch)
* ``venv2620ms`` mindstudio-probe 26.2.0 with MindSpore 2.10.0

:func:`ensure_ref_venv` returns such a venv, building it first when it is missing (``python -m venv`` and
``pip install`` of the pinned packages in :data:`SPECS`, from the package registry), and prints where. For the
PyTorch ones, an interpreter that has torch (the project's .venv) lends it through a ``zz_host_torch.pth`` file
instead of a second multi-GB torch (the venv's own packages win); without one, ``torch==2.13.0`` is installed.
As a command it builds the named venvs (default: venv833 venv2620)::

    python benchmarks/refvenv.py [venv833 venv2620 venv2620ms]

Standard library only (tests import it too).
"""
import fcntl
import os
import shutil
import subprocess
import sys
from pathlib import Path

CACHE_ENV = "MSPROBE_REF_CACHE"
ROOT = Path(__file__).resolve().parents[1]

#: NAME -> (framework lent by the running interpreter if it has it, pip requirements, the reference's version)
SPECS = {
    "venv833": ("torch", ["numpy<2", "pandas<2.1", "mindstudio-probe==8.3.3"], "8.3.3"),
    "venv2620": ("torch", ["mindstudio-probe==26.2.0"], "26.2.0"),
    "venv2620ms": (None, ["mindspore==2.10.0", "numpy<2", "mindstudio-probe==26.2.0"], "26.2.0"),
}
#: installed when the framework cannot be lent (a bare `torch` would pull a multi-GB CUDA build)
FRAMEWORK_PINS = {"torch": "torch==2.13.0"}
#: written into a venv once it is complete (a folder without it is an interrupted build)
READY = ".msprobe-ref-ready"


class RefVenvUnavailable(RuntimeError):
    """The reference venv is missing and could not be built; the message says why."""


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


def installed_version(venv: Path):
    """mindstudio-probe's version in VENV, or None (no interpreter, not installed)."""
    py = venv / "bin" / "python"
    if not py.exists():
        return None
    try:
        p = subprocess.run([str(py), "-E", "-c", "import importlib.metadata as m; print(m.version('mindstudio-probe'))"],
                           capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return p.stdout.strip() if p.returncode == 0 else None


def _host_site(framework: str):
    """The site-packages folder holding FRAMEWORK for this interpreter, or None."""
    import importlib.util
    spec = importlib.util.find_spec(framework)
    if spec is None or not spec.origin:
        return None
    return os.path.dirname(os.path.dirname(spec.origin))


def _run(cmd, what: str):
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        tail = (p.stderr or p.stdout).strip().splitlines()[-1:] or ["(no output)"]
        raise RefVenvUnavailable(f"{what} failed: {tail[0]}")
    return p.stdout


def build_ref_venv(name: str, venv: Path, log=sys.stderr) -> None:
    """Create VENV for the reference NAME of :data:`SPECS` (any previous content is replaced)."""
    framework, reqs, version = SPECS[name]
    lend = _host_site(framework) if framework else None
    reqs = list(reqs) + ([] if lend or not framework else [FRAMEWORK_PINS[framework]])
    print(f"refvenv: building {name} (mindstudio-probe {version}) in {venv}: pip install {' '.join(reqs)}"
          + (f", {framework} lent by {sys.executable}" if lend else "") + " ...", file=log, flush=True)
    try:
        _run([sys.executable, "-m", "venv", "--clear", str(venv)], f"python -m venv {venv}")
        _run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", *reqs], f"pip install {' '.join(reqs)}")
        if lend:
            site = _run([str(venv / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                        "locating the venv's site-packages").strip()
            Path(site, "zz_host_torch.pth").write_text(lend + "\n")
        got = installed_version(venv)
        if got != version:
            raise RefVenvUnavailable(f"mindstudio-probe {version} expected in {venv}, found {got}")
        (venv / READY).write_text(f"{name} {version}\n")
    except BaseException:
        shutil.rmtree(venv, ignore_errors=True)   # no half-built venv left behind
        raise
    print(f"refvenv: {name} ready in {venv}", file=log, flush=True)


def ensure_ref_venv(name: str, env_var: str = "", build: bool = True, log=sys.stderr) -> Path:
    """The reference venv NAME (``$ENV_VAR`` when set, else the cache's), built first when it is missing and BUILD.

    A venv named by ENV_VAR is used as it is, never built or replaced. Raises :class:`RefVenvUnavailable` with the
    reason when there is no usable venv."""
    if name not in SPECS:
        raise ValueError(f"unknown reference venv {name!r} (known: {', '.join(SPECS)})")
    venv = ref_venv(name, env_var)
    version = SPECS[name][2]
    if env_var and os.environ.get(env_var):
        if installed_version(venv) is None:
            raise RefVenvUnavailable(f"${env_var}={venv} holds no interpreter with mindstudio-probe")
        return venv
    if installed_version(venv) == version and (venv / "bin" / "python").exists():
        return venv
    if not build:
        raise RefVenvUnavailable(f"no reference venv {name} at {venv}; build it with: "
                                 f"python benchmarks/refvenv.py {name}")
    venv.parent.mkdir(parents=True, exist_ok=True)
    with open(venv.parent / f".{name}.lock", "w") as lock:     # one build at a time, across processes
        fcntl.flock(lock, fcntl.LOCK_EX)
        if installed_version(venv) != version:
            try:
                build_ref_venv(name, venv, log=log)
            except OSError as exc:
                raise RefVenvUnavailable(f"building {venv} failed: {exc}") from None
    print(f"refvenv: using {name} in {venv}", file=log, flush=True)
    return venv


def ref_venv_or_missing(name: str, env_var: str = "", log=sys.stderr) -> Path:
    """For benchmarks: :func:`ensure_ref_venv`, and when that fails the (missing) path, with the reason printed,
    so that the benchmark's own 'no reference venv' path takes over (it skips the reference rows)."""
    try:
        return ensure_ref_venv(name, env_var, log=log)
    except RefVenvUnavailable as exc:
        print(f"refvenv: {exc}", file=log, flush=True)
        return ref_venv(name, env_var)


def main(argv=None) -> int:
    names = (argv if argv is not None else sys.argv[1:]) or ["venv833", "venv2620"]
    status = 0
    for name in names:
        try:
            print(ensure_ref_venv(name))
        except (RefVenvUnavailable, ValueError) as exc:
            print(f"refvenv: {exc}", file=sys.stderr)
            status = 1
    return status


if __name__ == "__main__":
    sys.exit(main())
