"""No folder of the machine a file was written on, in the project's benchmarks, tests and build files (issue 22
item 6), and the reference venvs come from one helper, benchmarks/refvenv.py, that builds them on demand.

What counts as a machine path: the repository's own absolute folder and its parent, the user's home folder, and
absolute paths under /work, /root, /tmp, /var/tmp, /mnt, /opt, /srv or /home/<someone>, as text in a tracked
source file. Allowed (they are data, not paths of this machine): the made-up frames of generated stack strings
and IR files (/home/user/..., /home/u/..., /home/a/..., /opt/b/..., /usr/local/lib/python3.11/site-packages/...),
listed in ``DATA_PATHS``.
"""
import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCANNED = ["benchmarks", "tests", ".ci", "Makefile", "setup.py", "pyproject.toml"]
SKIP_DIRS = {"__pycache__", ".pytest_cache", "bench_work"}
TEXT_SUFFIXES = {".py", ".md", ".txt", ".json", ".yaml", ".yml", ".cfg", ".toml", ".ini", ".sh", ".ir", ".csv", ""}

# built from pieces so that this file does not match itself
_SEP = "/"
MACHINE_ROOTS = ["work", "root", "tmp", "var" + _SEP + "tmp", "mnt", "opt", "srv", "home"]
PATH_RE = re.compile(r"(?<![\w.$~}/-])/(" + "|".join(re.escape(r) for r in MACHINE_ROOTS) + r")/[\w.@+-]+")
#: made-up folders of generated stack strings and hand-made IR/stack files
DATA_PATHS = re.compile(r"/home/(user|u|a)\b|/opt/b/|/srv/msprobe/jobs/")


def _files():
    for item in SCANNED:
        path = ROOT / item
        if path.is_file():
            yield path
        elif path.is_dir():
            for dirpath, dirnames, filenames in os.walk(path):
                dirnames[:] = [d for d in dirnames if d not in SKIP_DIRS and not d.startswith(".venv")]
                for name in filenames:
                    p = Path(dirpath, name)
                    if p.suffix in TEXT_SUFFIXES:
                        yield p


def _tracked(paths):
    """Only files git tracks (an untracked scratch file is nobody's business); all of them without git."""
    try:
        out = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return list(paths)
    if out.returncode != 0:
        return list(paths)
    tracked = {ROOT / p for p in out.stdout.decode("utf-8", "replace").split("\0") if p}
    return [p for p in paths if p in tracked]


def find_machine_paths(text: str, own=()):
    """(line number, match) of every machine path in TEXT; OWN: this machine's folders, matched literally."""
    hits = []
    for n, line in enumerate(text.splitlines(), 1):
        for m in PATH_RE.finditer(line):
            if not DATA_PATHS.match(line, m.start()):
                hits.append((n, m.group(0)))
        for folder in own:
            if folder and re.search(r"(?<![\w.])" + re.escape(folder.rstrip("/")) + r"(?=[/\"'\s]|$)", line):
                hits.append((n, folder))
    return hits


def _own_folders():
    home = str(Path.home())
    own = [str(ROOT), str(ROOT.parent)]
    if home not in ("/", "") and len(Path(home).parts) > 1:
        own.append(home + os.sep)
    return [f for f in own if len(f) > 4]


def test_no_machine_paths_in_benchmarks_tests_and_build_files():
    own = _own_folders()
    bad = []
    for path in _tracked(list(_files())):
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        for line, what in find_machine_paths(text, own):
            bad.append(f"{path.relative_to(ROOT)}:{line}: {what}")
    assert not bad, "absolute folders of a machine (use tmp_path, a relative path or benchmarks/refvenv.py):\n" + \
        "\n".join(bad[:30])


def test_the_scanner_finds_what_it_should():
    w, r, t = "/" + "work", "/" + "root", "/" + "tmp"
    assert find_machine_paths(f'VENV = "{w}/main/.venv833"') == [(1, f"{w}/main")]
    assert find_machine_paths(f"ref = Path('{r}/.cache/x')") == [(1, f"{r}/.cache")]
    assert find_machine_paths(f"out = '{t}/bench_out'\nok = 1") == [(1, f"{t}/bench_out")]
    assert find_machine_paths("MS_WHEEL_DIR ?= /" + "opt/wheels/ms") == [(1, "/" + "opt/wheels")]
    assert find_machine_paths("File /home/user/train.py, line 3") == []          # made-up stack frame
    assert find_machine_paths("File /usr/local/lib/python3.11/site-packages/torch/nn/f.py") == []
    assert find_machine_paths("tests/data/acc_check/dump.py and $MSPROBE_REF_CACHE/venv833/bin/python") == []
    assert find_machine_paths("x = ~/.cache/msprobe-ref") == []
    assert find_machine_paths("/" + "home/alice/msprobe") == [(1, "/" + "home/alice")]
    assert find_machine_paths("cd /somewhere/else", own=["/somewhere"]) == [(1, "/somewhere")]
    assert find_machine_paths('zf.writestr("xl/somewhere.xml")', own=["/somewhere"]) == []


# ------------------------------------------------------------------ the reference venvs: one helper, built on demand
def _refvenv():
    spec = importlib.util.spec_from_file_location("_msprobe_refvenv_t", ROOT / "benchmarks" / "refvenv.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_every_benchmark_and_reference_test_finds_the_reference_through_refvenv():
    # a benchmark or test that names a reference venv resolves it with benchmarks/refvenv.py
    names = re.compile(r"venv833|venv2620|MSPROBE_REF")
    users = []
    for path in _tracked(sorted((ROOT / "benchmarks").glob("*.py")) + sorted((ROOT / "tests").glob("*.py"))):
        if path.name in ("refvenv.py", "test_no_machine_paths.py"):
            continue
        text = path.read_text(encoding="utf-8")
        if names.search(text):
            users.append(path.name)
            assert "refvenv" in text, f"{path.name} names a reference venv without benchmarks/refvenv.py"
    assert len(users) >= 5


def test_benchmarks_build_the_reference_on_demand():
    # the benchmarks that run the reference ask refvenv for it through the building entry points
    for name in ("merge_bench.py", "run_ut_bench.py", "graph_bench.py", "monitor_bench.py", "free_benchmark_bench.py",
                 "grad_probe_bench.py", "fault_score.py", "run_all.py", "code_mapping_bench.py", "ms_dump_bench.py"):
        text = (ROOT / "benchmarks" / name).read_text(encoding="utf-8")
        assert re.search(r"ensure_ref_venv|ref_venv_or_missing", text), name


def test_ref_cache_and_override(tmp_path, monkeypatch):
    rv = _refvenv()
    monkeypatch.setenv("MSPROBE_REF_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("MSPROBE_REF_X", raising=False)
    assert rv.ref_venv("venv833") == tmp_path / "cache" / "venv833"
    monkeypatch.setenv("MSPROBE_REF_X", str(tmp_path / "mine"))
    assert rv.ref_venv("venv833", "MSPROBE_REF_X") == tmp_path / "mine"
    assert rv.portable(tmp_path / "cache" / "venv833" / "bin" / "python") == \
        os.path.join("$MSPROBE_REF_CACHE", "venv833", "bin", "python")


def test_missing_venv_without_building_says_how(tmp_path, monkeypatch):
    rv = _refvenv()
    monkeypatch.setenv("MSPROBE_REF_CACHE", str(tmp_path))
    with pytest.raises(rv.RefVenvUnavailable, match=r"python benchmarks/refvenv.py venv833"):
        rv.ensure_ref_venv("venv833", build=False)
    assert not (tmp_path / "venv833").exists()
    with pytest.raises(ValueError, match="unknown reference venv"):
        rv.ensure_ref_venv("venv999")


def _fake_reference_venv(venv: Path, version: str) -> None:
    """A venv whose interpreter reports mindstudio-probe VERSION (a dist-info only, nothing installed)."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    site = subprocess.run([str(venv / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          check=True, capture_output=True, text=True).stdout.strip()
    info = Path(site, f"mindstudio_probe-{version}.dist-info")
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: mindstudio-probe\nVersion: {version}\n")


def test_a_built_venv_is_used_as_it_is_and_a_wrong_one_is_rebuilt(tmp_path, monkeypatch, capsys):
    rv = _refvenv()
    monkeypatch.setenv("MSPROBE_REF_CACHE", str(tmp_path))
    _fake_reference_venv(tmp_path / "venv833", "8.3.3")
    built = []
    monkeypatch.setattr(rv, "build_ref_venv", lambda name, venv, log=None: built.append(name))
    assert rv.ensure_ref_venv("venv833") == tmp_path / "venv833"
    assert built == []                                   # complete: not rebuilt
    _fake_reference_venv(tmp_path / "venv2620", "8.3.3")  # the wrong version: rebuilt
    with pytest.raises(rv.RefVenvUnavailable):
        rv.ensure_ref_venv("venv2620", build=False)
    rv.ensure_ref_venv("venv2620")
    assert built == ["venv2620"]
    assert "venv2620" in capsys.readouterr().err          # says where


def test_a_failed_build_leaves_nothing_and_benchmarks_get_the_missing_path(tmp_path, monkeypatch, capsys):
    rv = _refvenv()
    monkeypatch.setenv("MSPROBE_REF_CACHE", str(tmp_path))

    def failing_run(cmd, what):
        if "pip" in cmd:
            raise rv.RefVenvUnavailable(f"{what} failed: no network")
        return subprocess.run(cmd, check=True, capture_output=True, text=True).stdout

    monkeypatch.setattr(rv, "_run", failing_run)
    with pytest.raises(rv.RefVenvUnavailable, match="no network"):
        rv.ensure_ref_venv("venv2620")
    assert not (tmp_path / "venv2620").exists()          # the half-built venv is removed
    assert rv.ref_venv_or_missing("venv2620") == tmp_path / "venv2620"
    err = capsys.readouterr().err
    assert "building venv2620" in err and "no network" in err


def test_a_named_venv_is_never_built(tmp_path, monkeypatch):
    rv = _refvenv()
    monkeypatch.setenv("MSPROBE_REF_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("MSPROBE_REF8", str(tmp_path / "elsewhere"))
    monkeypatch.setattr(rv, "build_ref_venv", lambda *a, **k: pytest.fail("built a venv named by the user"))
    with pytest.raises(rv.RefVenvUnavailable, match="MSPROBE_REF8"):
        rv.ensure_ref_venv("venv833", "MSPROBE_REF8")
