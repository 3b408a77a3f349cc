"""Concurrent commands into one output folder, concurrent training ranks into one dump_path
(docs/reliability.md "Concurrency")."""

from __future__ import annotations

import csv
import json
import os
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from reliability_helpers import env, msprobe_popen, synthetic_pair


def _rows(path: Path) -> int:
    with open(path, newline="", encoding="utf-8") as fh:
        return sum(1 for _ in csv.reader(fh)) - 1


def test_two_compares_into_one_folder_at_the_same_moment(tmp_path):
    t, g = synthetic_pair(tmp_path / "d", 300)
    out = tmp_path / "out"
    for rnd in range(3):
        procs = [msprobe_popen(["compare", "-tp", t / "rank", "-gp", g / "rank", "-o", out, "--csv"], tmp_path)
                 for _ in range(2)]
        for p in procs:
            _, err = p.communicate(timeout=300)
            assert p.returncode == 0 and "Traceback" not in err, err
        reports = sorted(out.glob("compare_result_*.csv"))
        assert len(reports) == 2 * (rnd + 1), [r.name for r in reports]      # distinct names, none replaced
        for r in reports:
            assert _rows(r) == 300 * 4
        advisors = sorted(out.glob("advisor_*.txt"))
        assert len(advisors) == 2 * (rnd + 1)
    assert [f.name for f in out.iterdir() if f.name.startswith(".")] == []


TRAIN = textwrap.dedent('''
    import os, sys
    import torch
    import torch.distributed as dist
    from msprobe.pytorch import PrecisionDebugger

    rank = int(os.environ["RANK"])
    dbg = PrecisionDebugger(task="statistics", level="L1", dump_path=sys.argv[1])
    dist.init_process_group("gloo", rank=rank, world_size=2)
    width = 3 + rank                      # each rank's records are recognisable by their shapes
    lin = torch.nn.Linear(width, width)
    for step in range(3):
        dbg.start()
        y = lin(torch.randn(2, width))
        t = torch.ones(1)
        dist.all_reduce(t)
        dbg.stop()
        dbg.step()
    dist.destroy_process_group()
    print("done", rank)
''')


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _run_ranks(tmp_path: Path, dump: Path):
    script = tmp_path / "train.py"
    script.write_text(TRAIN, encoding="utf-8")
    port = _free_port()
    procs = []
    for rank in (0, 1):
        e = env()
        e.update(RANK=str(rank), WORLD_SIZE="2", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        procs.append(subprocess.Popen([sys.executable, str(script), str(dump)], env=e, cwd=str(tmp_path),
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    outs = [p.communicate(timeout=300) for p in procs]
    for p, (o, e) in zip(procs, outs):
        assert p.returncode == 0, e
        assert "Traceback" not in e
    return outs


def _widths(rank_dir: Path):
    data = json.loads((rank_dir / "dump.json").read_text(encoding="utf-8"))["data"]
    return {rec["input_args"][0]["shape"][-1] for name, rec in data.items() if name.startswith("Functional.linear")}


def test_two_ranks_share_a_dump_path_and_never_mix(tmp_path):
    pytest.importorskip("torch")
    import torch.distributed as dist

    if not dist.is_available():
        pytest.skip("torch.distributed is not available in this build")
    dump = tmp_path / "dump"
    _run_ranks(tmp_path, dump)
    for step in range(3):
        for rank in (0, 1):
            d = dump / f"step{step}" / f"rank{rank}"
            assert _widths(d) == {3 + rank}, d
            assert not (d / "dump_incomplete.json").exists()
    # both ranks again into the same dump_path: each moves only its own old directories aside
    _, errs = zip(*_run_ranks(tmp_path, dump))
    assert all("moved to previous_" in e for e in errs)
    prev = [p for p in dump.iterdir() if p.name.startswith("previous_")]
    assert prev
    old = {}
    for p in prev:
        for rd in p.glob("step*/rank*"):
            old.setdefault(rd.name, []).append(rd)
            assert _widths(rd) == {3 + int(rd.name[4:])}
    assert sorted(old) == ["rank0", "rank1"] and all(len(v) == 3 for v in old.values())
    for step in range(3):
        for rank in (0, 1):
            assert _widths(dump / f"step{step}" / f"rank{rank}") == {3 + rank}
