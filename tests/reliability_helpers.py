"""Helpers of the reliability tests (test_reliability_outputs, test_crashed_training, test_concurrency):
synthetic dumps of any size, running msprobe and training scripts in subprocesses, process listings."""

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]


def env():
    e = dict(os.environ)
    e["PYTHONPATH"] = str(REPO) + (os.pathsep + e["PYTHONPATH"] if e.get("PYTHONPATH") else "")
    for var in ("MSPROBE_DEBUG", "MSPROBE_MEMORY_LIMIT", "MSPROBE_PROGRESS"):
        e.pop(var, None)
    return e


def msprobe(args, cwd, timeout=300, **kw):
    return subprocess.run([sys.executable, "-m", "msprobe", *[str(a) for a in args]], cwd=str(cwd), env=env(),
                          capture_output=True, text=True, timeout=timeout, **kw)


def _default_sigint():
    # a job started in the background of a non-interactive shell (`cmd &`, as CI runners and nohup do) inherits
    # SIGINT ignored, and Python keeps an ignored SIGINT ignored: the command under test gets the default
    # (KeyboardInterrupt) that a terminal's Ctrl-C meets
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def msprobe_popen(args, cwd):
    return subprocess.Popen([sys.executable, "-m", "msprobe", *[str(a) for a in args]], cwd=str(cwd), env=env(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=_default_sigint)


def _stat(rng, shape, dtype="torch.float32"):
    v = rng.standard_normal(4)
    return {"type": "torch.Tensor", "dtype": dtype, "shape": list(shape), "Max": float(abs(v[0]) + 1),
            "Min": float(-abs(v[1]) - 1), "Mean": float(v[2] / 10), "Norm": float(abs(v[3]) * 10 + 1),
            "requires_grad": True}


def synthetic_dump(rank_dir: Path, n_apis: int, seed: int = 0, noise: float = 0.0) -> Path:
    """A statistics dump (dump.json, stack.json, construct.json) of ``n_apis`` linear calls.  The same
    ``seed`` with ``noise`` > 0 gives a golden side whose statistics differ slightly."""
    rng = np.random.default_rng(seed)
    data = {}
    for i in range(n_apis):
        name = f"Functional.linear.{i}.forward"
        rec = {"input_args": [_stat(rng, (8, 32)), _stat(rng, (64, 32)), _stat(rng, (64,))], "input_kwargs": {},
               "output": [_stat(rng, (8, 64), "torch.bfloat16")]}
        if noise:
            for t in rec["input_args"] + rec["output"]:
                for k in ("Max", "Min", "Mean", "Norm"):
                    t[k] *= 1 + noise
        data[name] = rec
    rank_dir.mkdir(parents=True, exist_ok=True)
    with open(rank_dir / "dump.json", "w", encoding="utf-8") as fh:
        json.dump({"task": "statistics", "level": "L1", "framework": "pytorch", "dump_data_dir": None,
                   "data": data}, fh, indent=1)
    with open(rank_dir / "stack.json", "w", encoding="utf-8") as fh:
        json.dump({"0": [list(data), ["File train.py, line 1, in <module>, x = f(x)"]]}, fh)
    with open(rank_dir / "construct.json", "w", encoding="utf-8") as fh:
        json.dump({k: None for k in data}, fh)
    return rank_dir


def synthetic_pair(root: Path, n_apis: int, ranks=(None,)):
    """target/ and golden/ step dirs with one rank dir per entry of ``ranks`` (None: 'rank')."""
    for side, noise in (("target", 1e-3), ("golden", 0.0)):
        for r in ranks:
            synthetic_dump(root / side / ("rank" if r is None else f"rank{r}"), n_apis, seed=r or 0, noise=noise)
    return root / "target", root / "golden"


def children_of(pid: int):
    """Pids whose parent is ``pid`` (Linux /proc)."""
    out = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat", "rb") as fh:
                fields = fh.read().rsplit(b")", 1)[1].split()
            if int(fields[1]) == pid:
                out.append(int(d))
        except (OSError, IndexError, ValueError):
            pass
    return out


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            state = fh.read().rsplit(b")", 1)[1].split()[0]
        return state not in (b"Z", b"X")
    except OSError:
        return False


def cut_xlsx_rows(path: Path) -> None:
    """Rewrite the workbook ``path`` so its first sheet keeps the header row and then stops inside the next
    row, mid-element (the zip is whole: a writer that died while the sheet was being produced)."""
    import zipfile

    with zipfile.ZipFile(path) as z:
        entries = {n: z.read(n) for n in z.namelist()}
    sheet = next(n for n in entries if n.startswith("xl/worksheets/"))
    xml = entries[sheet]
    cut = xml.index(b"</row>") + len(b"</row>")
    entries[sheet] = xml[:cut] + b'<row r="2"><c r="A2" t="inlineStr"><is><t>Functional.'
    with zipfile.ZipFile(path, "w") as z:
        for n, data in entries.items():
            z.writestr(n, data)
