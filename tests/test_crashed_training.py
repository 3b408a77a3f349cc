"""A training script that dies mid-step (exception, SIGTERM, SIGKILL), a rerun into the same dump_path, and a
tensor dump into a full disk (docs/reliability.md "Crashed training" and "Outputs").

Each case runs a real training script in a subprocess: what was dumped so far stays readable, ``compare``
says the dump is incomplete (one line, no traceback), a rerun is not blocked and does not mix runs."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("torch")

from reliability_helpers import env, msprobe  # noqa: E402

SCRIPT = textwrap.dedent('''
    import os, signal, sys
    import torch
    from msprobe.pytorch import PrecisionDebugger

    mode, dump_path, task = sys.argv[1], sys.argv[2], sys.argv[3]
    torch.manual_seed(0)

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1 = torch.nn.Linear(16, 32)
            self.fc2 = torch.nn.Linear(32, 8)

        def forward(self, x):
            h = torch.relu(self.fc1(x))
            if mode != "none" and STEP[0] == 1:        # die in the middle of step 1's forward
                if mode == "exception":
                    raise RuntimeError("the training script failed mid-step")
                os.kill(os.getpid(), signal.SIGTERM if mode == "sigterm" else signal.SIGKILL)
            return self.fc2(h)

    STEP = [0]
    dbg = PrecisionDebugger(task=task, level="mix", dump_path=dump_path)
    model = Net()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(3):
        STEP[0] = step
        dbg.start(model=model)
        loss = model(torch.randn(4, 16)).pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
        dbg.stop()
        dbg.step()
    print("training finished, loss", float(loss))
''')


def train(tmp_path: Path, mode: str, dump: Path, task: str = "statistics", timeout=240):
    script = tmp_path / "train.py"
    script.write_text(SCRIPT, encoding="utf-8")
    return subprocess.run([sys.executable, str(script), mode, str(dump), task], cwd=str(tmp_path), env=env(),
                          capture_output=True, text=True, timeout=timeout)


def rank_dir(dump: Path, step: int) -> Path:
    return dump / f"step{step}" / "rank"


@pytest.mark.parametrize("mode", ["exception", "sigterm", "sigkill"])
def test_crash_mid_step_leaves_a_readable_dump_marked_incomplete(tmp_path, mode):
    dump = tmp_path / "dump"
    res = train(tmp_path, mode, dump, task="tensor")
    assert res.returncode != 0
    # step 0 finished: complete, valid JSON, no marker
    done = rank_dir(dump, 0)
    json.loads((done / "dump.json").read_text(encoding="utf-8"))
    assert not (done / "dump_incomplete.json").exists()
    # step 1 died mid-forward: the marker says so
    broken = rank_dir(dump, 1)
    marker = json.loads((broken / "dump_incomplete.json").read_text(encoding="utf-8"))
    assert marker["step"] == 1
    # every tensor file under its final name is complete (no empty or partial .pt)
    from msprobe.core.io.tensors import load_tensor

    for d in (done, broken):
        tdir = d / "dump_tensor_data"
        for f in os.listdir(tdir) if tdir.is_dir() else []:
            if not f.startswith("."):
                assert (tdir / f).stat().st_size > 0, f
                load_tensor(str(tdir / f))
    if mode == "exception":
        # the records so far were written at exit: valid JSON, and the marker names the last one
        data = json.loads((broken / "dump.json").read_text(encoding="utf-8"))["data"]
        assert marker["state"] == "exited" and marker["last_record"] == list(data)[-1]
        assert any(k.startswith("Functional.linear.") for k in data)
        out = msprobe(["compare", "-tp", broken, "-gp", done, "-o", tmp_path / "out", "--csv"], tmp_path)
        assert out.returncode == 0, out.stderr
        assert "is incomplete" in out.stderr and marker["last_record"] in out.stderr
    else:
        assert not (broken / "dump.json").exists()
        out = msprobe(["compare", "-tp", broken, "-gp", done, "-o", tmp_path / "out"], tmp_path)
        assert out.returncode != 0
        assert "Traceback" not in out.stderr
        lines = [ln for ln in out.stderr.splitlines() if ln.startswith("msprobe: error:")]
        assert len(lines) == 1 and "is incomplete" in lines[0] and "killed or crashed" in lines[0], out.stderr
    # graph says it too
    g = msprobe(["graph", "-tp", broken, "-o", tmp_path / "gout"], tmp_path)
    assert "is incomplete" in g.stderr and "Traceback" not in g.stderr


def test_rerun_into_the_same_dump_path_moves_the_old_run_aside(tmp_path):
    dump = tmp_path / "dump"
    first = train(tmp_path, "sigkill", dump)
    assert first.returncode != 0
    old0 = (rank_dir(dump, 0) / "dump.json").read_bytes()
    second = train(tmp_path, "none", dump)
    assert second.returncode == 0, second.stderr
    assert "Traceback" not in second.stderr and "MsprobeError" not in second.stderr
    assert "training finished" in second.stdout
    assert "moved to previous_" in second.stderr
    prev = [p for p in os.listdir(dump) if p.startswith("previous_")]
    assert len(prev) == 1
    # the old run intact, marker included; the new run complete and on its own
    assert (dump / prev[0] / "step0" / "rank" / "dump.json").read_bytes() == old0
    assert (dump / prev[0] / "step1" / "rank" / "dump_incomplete.json").is_file()
    for step in range(3):
        d = rank_dir(dump, step)
        assert (d / "dump.json").is_file() and not (d / "dump_incomplete.json").exists()
    # a third run does the same again (no error, another previous_ folder or a numbered one)
    third = train(tmp_path, "none", dump)
    assert third.returncode == 0 and "Traceback" not in third.stderr
    assert len([p for p in os.listdir(dump) if p.startswith("previous_")]) >= 1


def _mount_small_disk(path: Path, size: str) -> bool:
    if os.name != "posix" or os.geteuid() != 0 or not shutil.which("mount"):
        return False
    path.mkdir(parents=True, exist_ok=True)
    return subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
                          capture_output=True).returncode == 0


def test_tensor_dump_into_a_full_disk(tmp_path):
    """Training completes; the problem is logged once; no 0-byte or partial file under a final name."""
    disk = tmp_path / "disk"
    if not _mount_small_disk(disk, "160k"):
        pytest.skip("needs root and tmpfs to make a small disk (mount -t tmpfs)")
    try:
        res = train(tmp_path, "none", disk / "dump", task="tensor")
        assert res.returncode == 0, res.stderr
        assert "training finished" in res.stdout and "Traceback" not in res.stderr
        assert res.stderr.count("no space left on device") == 1, res.stderr
        for root, dirs, files in os.walk(disk):
            for f in files:
                assert os.path.getsize(os.path.join(root, f)) > 0, f
                assert not f.endswith(".tmp"), f
            for f in files:
                if f.endswith(".json"):
                    json.loads(Path(root, f).read_text(encoding="utf-8"))
    finally:
        subprocess.run(["umount", str(disk)], capture_output=True)


def test_hook_failures_on_a_full_disk_are_logged_once_in_process(tmp_path, monkeypatch, caplog):
    """Injected ENOSPC (no tmpfs needed): every torch.save fails; one warning, training goes on, no files."""
    import errno

    import torch

    from msprobe.pytorch import PrecisionDebugger

    real_save = torch.save

    def full(obj, f, *a, **k):
        with open(f, "wb") as fh:
            fh.write(b"PK\x03\x04partial")
        raise RuntimeError(f"[enforce fail at inline_container.cc] . PytorchStreamWriter failed writing file: "
                           f"{OSError(errno.ENOSPC, 'No space left on device')}")

    monkeypatch.setattr(torch, "save", full)
    # plain CPU tensors are written by msprobe's own .pt writer (one writev per file), not torch.save: the disk
    # is full for it too
    from msprobe.pytorch import tensor_io

    def full_writev(fh, parts):
        fh.write(b"PK\x03\x04partial")
        fh.flush()
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(tensor_io, "_writev_all", full_writev)
    PrecisionDebugger._reset_for_tests()
    try:
        dbg = PrecisionDebugger(task="tensor", level="L1", dump_path=str(tmp_path / "dump"))
        lin = torch.nn.Linear(4, 4)
        import logging

        logging.getLogger("msprobe").addHandler(caplog.handler)
        for _ in range(2):
            dbg.start()
            lin(torch.randn(2, 4)).relu().sum()
            dbg.stop()
            dbg.step()
    finally:
        monkeypatch.setattr(torch, "save", real_save)
        logging.getLogger("msprobe").removeHandler(caplog.handler)
        PrecisionDebugger._reset_for_tests()
    # (the record may reach caplog twice: through its handler and through propagation)
    warnings = list({id(r): r.getMessage() for r in caplog.records if "no space left" in r.getMessage()}.values())
    assert len(warnings) == 1, [r.getMessage() for r in caplog.records]
    tdir = tmp_path / "dump" / "step0" / "rank" / "dump_tensor_data"
    assert not tdir.exists() or not [f for f in os.listdir(tdir)]
