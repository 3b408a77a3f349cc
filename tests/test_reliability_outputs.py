"""Outputs survive kills and full disks, stay inside the output folder and carry the reference's modes; -j is
bounded; nothing read runs code (docs/reliability.md "Outputs", "Paths and permissions", "Resources")."""

from __future__ import annotations

import csv
import errno
import os
import random
import shutil
import signal
import stat
import subprocess
import time
from pathlib import Path

import pytest

from msprobe.core.errors import MsprobeError
from reliability_helpers import alive, children_of, msprobe, msprobe_popen, synthetic_dump, synthetic_pair


def _mount_small_disk(path: Path, size: str) -> bool:
    if os.name != "posix" or os.geteuid() != 0 or not shutil.which("mount"):
        return False
    path.mkdir(parents=True, exist_ok=True)
    return subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
                          capture_output=True).returncode == 0


@pytest.fixture
def small_disk(tmp_path):
    disk = tmp_path / "disk"
    if not _mount_small_disk(disk, "64k"):
        pytest.skip("needs root and tmpfs to make a small disk (mount -t tmpfs); the injected-ENOSPC tests cover "
                    "the same code paths")
    yield disk
    subprocess.run(["umount", str(disk)], capture_output=True)


def _one_error_line(res):
    assert res.returncode != 0
    assert "Traceback" not in res.stderr and "internal error" not in res.stderr, res.stderr
    lines = [ln for ln in res.stderr.splitlines() if ln.startswith("msprobe: error:")]
    assert len(lines) == 1, res.stderr
    return lines[0]


def _files(d: Path):
    return sorted(p for p in d.rglob("*") if p.is_file()) if d.exists() else []


# ------------------------------------------------------------------------------------------- full disk
def test_atomic_write_on_a_full_disk_is_one_line_and_leaves_nothing(tmp_path):
    from msprobe.core.fileio import atomic_write

    out = tmp_path / "out"
    out.mkdir()

    def write(tmp):
        with open(tmp, "wb") as fh:
            fh.write(b"x" * 5000)
        raise OSError(errno.ENOSPC, "No space left on device")

    with pytest.raises(MsprobeError) as info:
        atomic_write(str(out / "report.csv"), write)
    msg = str(info.value)
    assert msg.startswith(f"no space left on device in {out} while writing report.csv")
    assert "more than 4.9 KB needed" in msg
    assert os.listdir(out) == []


def test_compare_full_disk_injected(tmp_path, monkeypatch, capsys):
    """The disk fills while the report is written (injected ENOSPC): one line, exit 1, nothing left."""
    import msprobe.core.io.csvfile as csvfile
    from msprobe.cli.main import main

    t, g = synthetic_pair(tmp_path / "d", 50)
    real = csvfile.write_csv

    def full(path, *a, **k):
        real(path, *a, **k)
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(csvfile, "write_csv", full)
    out = tmp_path / "out"
    rc = main(["compare", "-tp", str(t / "rank"), "-gp", str(g / "rank"), "-o", str(out), "--csv"])
    err = capsys.readouterr().err
    assert rc != 0
    assert "Traceback" not in err and "internal error" not in err
    assert f"msprobe: error: no space left on device in {out}" in err
    assert _files(out) == []


def test_report_and_advisor_appear_together(tmp_path, monkeypatch, capsys):
    """The disk fills while the advisor file is written: the report is not left without it (one line,
    nothing in the folder); a normal run names the advisor file first, the report right after."""
    import msprobe.core.advisor.advisor as adv
    from msprobe.cli.main import main

    t, g = synthetic_pair(tmp_path / "d", 30)
    real_write = adv.write_advice

    def full(advice, out_dir, label=None, ts=None, **kw):
        def boom(tmp):
            Path(tmp).write_text("Line: ", encoding="utf-8")
            raise OSError(errno.ENOSPC, "No space left on device")
        from msprobe.core.fileio import atomic_write

        return atomic_write(os.path.join(out_dir, adv.advisor_name(label, ts)), boom, **kw)

    monkeypatch.setattr(adv, "write_advice", full)
    out = tmp_path / "out"
    rc = main(["compare", "-tp", str(t / "rank"), "-gp", str(g / "rank"), "-o", str(out), "--csv"])
    err = capsys.readouterr().err
    assert rc != 0 and "no space left on device" in err and "Traceback" not in err
    assert _files(out) == []
    monkeypatch.setattr(adv, "write_advice", real_write)
    linked = []
    real_link = os.link

    def spy(src, dst, *a, **k):
        real_link(src, dst, *a, **k)
        linked.append(os.path.basename(dst))

    monkeypatch.setattr(os, "link", spy)
    assert main(["compare", "-tp", str(t / "rank"), "-gp", str(g / "rank"), "-o", str(out), "--csv"]) == 0
    assert [n.split("_")[0] for n in linked] == ["advisor", "compare"]


@pytest.mark.parametrize("command", ["compare", "graph", "merge_result"])
def test_full_disk_on_a_real_small_disk(tmp_path, small_disk, command):
    t, g = synthetic_pair(tmp_path / "d", 400, ranks=(0, 1))
    out = small_disk / "out"
    if command == "compare":
        res = msprobe(["compare", "-tp", t, "-gp", g, "-o", out], tmp_path)
    elif command == "graph":
        res = msprobe(["graph", "-tp", t / "rank0", "-gp", g / "rank0", "-o", out], tmp_path)
    else:
        reports = tmp_path / "reports"
        assert msprobe(["compare", "-tp", t, "-gp", g, "-o", reports], tmp_path).returncode == 0
        cfg = tmp_path / "merge.yaml"
        cfg.write_text("api:\n" + "".join(f"- Functional.linear.{i}\n" for i in range(400)), encoding="utf-8")
        res = msprobe(["merge_result", "-i", reports, "-o", out, "-config", cfg], tmp_path)
    line = _one_error_line(res)
    assert "no space left on device in" in line and str(out) in line
    assert [p for p in _files(small_disk) if not p.name.startswith(".")] == []   # no partial output
    assert [p for p in small_disk.rglob(".msprobe-*")] == []                    # no temporary left


# ------------------------------------------------------------------------------------------- kills
def _complete_csv(path: Path, rows: int) -> None:
    with open(path, newline="", encoding="utf-8") as fh:
        got = list(csv.reader(fh))
    assert len(got) == rows + 1, f"{path.name}: {len(got) - 1} rows, expected {rows}"


def _kill(pids):
    for c in pids:
        try:
            os.kill(c, signal.SIGKILL)
        except OSError:
            pass


N_APIS = 6000          # ~11 MB per side: the golden side is parsed in a forked worker


def test_sigkill_compare_at_random_points(tmp_path):
    """SIGKILL at random moments: the output folder holds complete reports or nothing; the forked parse
    worker dies with its parent; the next run into the same folder removes the dead run's temporary files."""
    t, g = synthetic_pair(tmp_path / "d", N_APIS)
    out = tmp_path / "out"
    rng = random.Random(17)
    for i in range(3):
        p = msprobe_popen(["compare", "-tp", t / "rank", "-gp", g / "rank", "-o", out, "--csv"], tmp_path)
        seen = set()
        deadline = time.monotonic() + rng.uniform(0.3, 2.0)
        while time.monotonic() < deadline and p.poll() is None:
            seen.update(children_of(p.pid))
            time.sleep(0.01)
        if i == 0:   # once: wait for the parse worker, then kill
            while not seen and p.poll() is None:
                seen.update(children_of(p.pid))
                time.sleep(0.01)
            assert seen, "the golden side was expected to be parsed in a forked worker"
        p.send_signal(signal.SIGKILL)     # (no-op when the run already finished)
        try:
            p.communicate(timeout=60)     # an orphaned worker would keep the pipes open: a hang, not a pass
        except subprocess.TimeoutExpired:
            _kill(seen | set(children_of(p.pid)))
            pytest.fail("a forked worker outlived its killed parent (it holds the output pipes open)")
        end = time.monotonic() + 5
        while any(alive(c) for c in seen) and time.monotonic() < end:
            time.sleep(0.05)
        assert not [c for c in seen if alive(c)], "a forked worker outlived its killed parent"
        for f in _files(out):
            if f.name.endswith(".csv") and not f.name.startswith("."):
                _complete_csv(f, N_APIS * 4)
        # a report and its advisor file appear together (both written, then named one right after the other)
        assert len(list(out.glob("compare_result_*.csv"))) == len(list(out.glob("advisor_*.txt")))
    res = msprobe(["compare", "-tp", t / "rank", "-gp", g / "rank", "-o", out, "--csv"], tmp_path)
    assert res.returncode == 0, res.stderr
    assert [f.name for f in out.iterdir() if f.name.startswith(".")] == []
    reports = [f for f in out.iterdir() if f.name.startswith("compare_result")]
    assert reports
    for f in reports:
        _complete_csv(f, N_APIS * 4)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_terminated_compare_stops_its_workers_and_leaves_no_temp(tmp_path, sig):
    t, g = synthetic_pair(tmp_path / "d", N_APIS)
    out = tmp_path / "out"
    p = msprobe_popen(["compare", "-tp", t / "rank", "-gp", g / "rank", "-o", out], tmp_path)
    seen = set()
    while not seen and p.poll() is None:
        seen.update(children_of(p.pid))
        time.sleep(0.01)
    os.kill(p.pid, sig)
    try:
        _, err = p.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        _kill(seen)
        pytest.fail("a forked worker outlived its terminated parent (it holds the output pipes open)")
    assert p.returncode != 0 and "Traceback" not in err, err
    end = time.monotonic() + 5
    while any(alive(c) for c in seen) and time.monotonic() < end:
        time.sleep(0.05)
    assert not [c for c in seen if alive(c)]
    assert [f for f in _files(out) if f.name.startswith(".")] == []


def test_stale_temporary_files_of_dead_runs_are_removed(tmp_path):
    from msprobe.core.fileio import ensure_output_dir

    out = tmp_path / "out"
    out.mkdir()
    dead = subprocess.Popen(["true"])
    dead.wait()
    from msprobe.core.fileio import temp_tag

    host = temp_tag().split("@", 1)[1]
    (out / f".msprobe-{dead.pid}@{host}-abc.tmp").write_bytes(b"partial")
    (out / f".msprobe-{dead.pid}-old.tmp").write_bytes(b"partial")              # a name without the host
    (out / f".msprobe-graph-{dead.pid}@{host}-xyz").mkdir()
    (out / f".msprobe-{os.getpid()}@{host}-mine.tmp").write_bytes(b"in use")    # a running process: kept
    (out / f".msprobe-{dead.pid}@otherhost{host}-nfs.tmp").write_bytes(b"x")   # another machine, recent: kept
    old_foreign = out / f".msprobe-{dead.pid}@otherhost{host}-old.tmp"
    old_foreign.write_bytes(b"x")
    os.utime(old_foreign, (time.time() - 2 * 86400, time.time() - 2 * 86400))  # another machine, 2 days old
    (out / "compare_result_1.xlsx").write_bytes(b"a user's file")               # never touched
    ensure_output_dir(str(out))
    assert sorted(os.listdir(out)) == sorted([f".msprobe-{os.getpid()}@{host}-mine.tmp",
                                              f".msprobe-{dead.pid}@otherhost{host}-nfs.tmp", "compare_result_1.xlsx"])


# ------------------------------------------------------------------------------------------- -j
def test_jobs_capped_at_cores_and_work(tmp_path, monkeypatch, capsys):
    import msprobe.core.procpool as procpool
    from msprobe.cli.main import main
    from msprobe.core.resources import cap_jobs, cpu_count

    t, g = synthetic_pair(tmp_path / "d", 20, ranks=(0, 1))
    asked = []
    real = procpool.run_tasks

    def spy(fn, tasks, workers, *a, **k):
        asked.append(workers)
        return real(fn, tasks, workers, *a, **k)

    monkeypatch.setattr(procpool, "run_tasks", spy)
    rc = main(["compare", "-tp", str(t), "-gp", str(g), "-o", str(tmp_path / "out"), "-j", "1000", "--csv"])
    err = capsys.readouterr().err
    assert rc == 0, err
    expected = min(2, cpu_count())
    assert asked in ([expected], []) and (asked or expected == 1)
    assert f"-j 1000: using {expected} worker process" in err
    assert cap_jobs(1000, 3) == min(3, cpu_count())
    assert cap_jobs(0, 1) == 1 and cap_jobs(1, 50) == 1
    assert cap_jobs(1000, None) == cpu_count()


def test_merge_and_graph_cap_jobs(tmp_path):
    t, g = synthetic_pair(tmp_path / "d", 20, ranks=(0, 1))
    reports = tmp_path / "reports"
    assert msprobe(["compare", "-tp", t, "-gp", g, "-o", reports], tmp_path).returncode == 0
    cfg = tmp_path / "merge.yaml"
    cfg.write_text("api:\n- Functional.linear.0\n", encoding="utf-8")
    res = msprobe(["merge_result", "-i", reports, "-o", tmp_path / "m", "-config", cfg, "-j", "1000"], tmp_path)
    assert res.returncode == 0 and "-j 1000: using" in res.stderr, res.stderr
    step_t, step_g = tmp_path / "st", tmp_path / "sg"
    shutil.copytree(t, step_t / "step0")
    shutil.copytree(g, step_g / "step0")
    res = msprobe(["graph", "-tp", step_t / "step0", "-gp", step_g / "step0", "-o", tmp_path / "gr", "-j", "1000"],
                  tmp_path)
    assert res.returncode == 0 and "-j 1000: using" in res.stderr, res.stderr


# ------------------------------------------------------------------------------------------- paths and modes
def _no_group_other_write(root: Path):
    bad = []
    for p in [root] + list(root.rglob("*")):
        mode = stat.S_IMODE(os.lstat(p).st_mode)
        if mode & 0o022:
            bad.append((str(p.relative_to(root)), oct(mode)))
    return bad


def test_compare_outputs_are_0640_in_0750_dirs_whatever_the_umask(tmp_path, capsys):
    from msprobe.cli.main import main

    t, g = synthetic_pair(tmp_path / "d", 20)
    out = tmp_path / "a" / "b" / "out"
    old = os.umask(0o002)
    try:
        assert main(["compare", "-tp", str(t / "rank"), "-gp", str(g / "rank"), "-o", str(out)]) == 0
    finally:
        os.umask(old)
    files = _files(out)
    assert files and all(stat.S_IMODE(f.stat().st_mode) == 0o640 for f in files)
    for d in (out, out.parent, out.parent.parent):
        assert stat.S_IMODE(d.stat().st_mode) == 0o750, d


def test_dump_files_and_dirs_carry_no_group_or_other_write(tmp_path):
    torch = pytest.importorskip("torch")
    from msprobe.pytorch import PrecisionDebugger

    PrecisionDebugger._reset_for_tests()
    old = os.umask(0o002)
    try:
        dbg = PrecisionDebugger(task="tensor", level="L1", dump_path=str(tmp_path / "dump"))
        dbg.start()
        torch.nn.functional.relu(torch.randn(3, 3))
        dbg.stop()
        dbg.step()
    finally:
        os.umask(old)
        PrecisionDebugger._reset_for_tests()
    root = tmp_path / "dump"
    assert list(root.rglob("*.pt")) and (root / "step0" / "rank" / "dump.json").is_file()
    assert _no_group_other_write(root) == []
    assert all(stat.S_IMODE(p.stat().st_mode) == 0o640 for p in root.rglob("*") if p.is_file())


def test_module_names_with_a_slash_keep_tensor_files_inside_dump_tensor_data(tmp_path):
    torch = pytest.importorskip("torch")
    from msprobe.pytorch import PrecisionDebugger

    model = torch.nn.Sequential()
    model.add_module("a/b", torch.nn.Linear(3, 3))
    PrecisionDebugger._reset_for_tests()
    try:
        dbg = PrecisionDebugger(task="tensor", level="L0", dump_path=str(tmp_path / "dump"))
        dbg.start(model=model)
        model(torch.randn(2, 3))
        dbg.stop()
        dbg.step()
    finally:
        PrecisionDebugger._reset_for_tests()
    import json

    rank = tmp_path / "dump" / "step0" / "rank"
    tdir = rank / "dump_tensor_data"
    files = sorted(os.listdir(tdir))
    assert files and all((tdir / f).is_file() for f in files)
    data = json.loads((rank / "dump.json").read_text(encoding="utf-8"))["data"]
    names = [leaf["data_name"] for rec in data.values() for leaf in rec.get("input_args", []) if "data_name" in leaf]
    assert names and all("/" not in n and n in files for n in names)


def test_atomic_write_never_follows_a_planted_symlink(tmp_path):
    from msprobe.core.fileio import atomic_write

    victim = tmp_path / "victim"
    victim.write_text("precious", encoding="utf-8")
    out = tmp_path / "out"
    out.mkdir()
    os.symlink(victim, out / "report.csv")

    def write(tmp):
        Path(tmp).write_text("report", encoding="utf-8")

    written = atomic_write(str(out / "report.csv"), write)
    assert written == str(out / "report_1.csv")
    assert victim.read_text(encoding="utf-8") == "precious"


def test_dump_writer_never_follows_a_planted_symlink(tmp_path):
    from msprobe.core.dump.writer import write_json

    victim = tmp_path / "victim"
    victim.write_text("precious", encoding="utf-8")
    d = tmp_path / "rank"
    d.mkdir()
    os.symlink(victim, d / f".dump.json.{os.getpid()}.tmp")      # at the temporary name
    os.symlink(victim, d / "dump.json")                           # and at the final name
    write_json(str(d / "dump.json"), {"data": {}})
    assert victim.read_text(encoding="utf-8") == "precious"
    assert not (d / "dump.json").is_symlink() and stat.S_IMODE((d / "dump.json").stat().st_mode) == 0o640


def test_data_name_with_a_directory_part_is_refused(tmp_path):
    import json

    t, g = synthetic_pair(tmp_path / "d", 3)
    for side in (t, g):
        p = side / "rank" / "dump.json"
        obj = json.loads(p.read_text(encoding="utf-8"))
        obj["task"] = "tensor"
        for rec in obj["data"].values():
            for leaf in rec["input_args"] + rec["output"]:
                leaf["data_name"] = "../../../../etc/passwd"
        p.write_text(json.dumps(obj), encoding="utf-8")
        (side / "rank" / "dump_tensor_data").mkdir()
    res = msprobe(["compare", "-tp", t / "rank", "-gp", g / "rank", "-o", tmp_path / "out"], tmp_path)
    line = _one_error_line(res)
    assert "data_name" in line and "../../../../etc/passwd" in line


def test_op_generate_refuses_an_api_name_that_is_a_path(tmp_path):
    import json

    pytest.importorskip("torch")
    rank = synthetic_dump(tmp_path / "d" / "rank", 1)
    p = rank / "dump.json"
    obj = json.loads(p.read_text(encoding="utf-8"))
    rec = obj["data"].pop("Functional.linear.0.forward")
    evil = "Functional.linear/../../../../escaped.0"
    obj["data"][evil + ".forward"] = rec
    p.write_text(json.dumps(obj), encoding="utf-8")
    cfg = tmp_path / "config_op.json"
    cfg.write_text(json.dumps({"dump_json_path": str(p), "api_name": evil, "extract_api_path": str(tmp_path / "x.json"),
                               "propagation": "forward", "data_mode": "random_data", "random_seed": 1,
                               "iter_times": 1}), encoding="utf-8")
    out = tmp_path / "out" / "deep" / "er"
    res = msprobe(["op_generate", "-i", cfg, "-o", out], tmp_path)
    assert res.returncode != 0 and "Traceback" not in res.stderr, res.stderr
    assert not list(tmp_path.rglob("escaped*.py"))


# ------------------------------------------------------------------------------------------- nothing runs
class _Boom:
    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return (os.system, (f"touch {self.path}",))


def test_a_pickle_payload_in_a_pt_file_never_runs(tmp_path):
    import io
    import pickle
    import zipfile

    from msprobe.core.io.tensors import TensorReadError, load_tensor

    marker = tmp_path / "pwned"
    pt = tmp_path / "evil.pt"
    with zipfile.ZipFile(pt, "w") as zf:
        buf = io.BytesIO()
        pickle.dump(_Boom(marker), buf, protocol=2)
        zf.writestr("archive/data.pkl", buf.getvalue())
        zf.writestr("archive/version", "3\n")
    with pytest.raises(TensorReadError):
        load_tensor(str(pt))
    try:
        from msprobe.pytorch.tensor_io import load_pt_with_torch

        pytest.importorskip("torch")
        with pytest.raises(TensorReadError):
            load_pt_with_torch(str(pt))
    except ImportError:
        pass
    assert not marker.exists()


def test_a_yaml_payload_never_runs(tmp_path):
    from msprobe.cli.main import main

    marker = tmp_path / "pwned"
    y = tmp_path / "merge.yaml"
    y.write_text(f"api: !!python/object/apply:os.system ['touch {marker}']\n", encoding="utf-8")
    t, g = synthetic_pair(tmp_path / "d", 3, ranks=(0, 1))
    reports = tmp_path / "reports"
    assert main(["compare", "-tp", str(t), "-gp", str(g), "-o", str(reports)]) == 0
    rc = main(["merge_result", "-i", str(reports), "-o", str(tmp_path / "m"), "-config", str(y)])
    assert rc != 0 and not marker.exists()
