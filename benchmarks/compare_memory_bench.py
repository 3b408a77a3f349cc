"""Peak memory of ``msprobe compare`` on a big statistics dump pair, as a multiple of one dump.json's size.

    .venv/bin/python benchmarks/compare_memory_bench.py [--work-dir DIR (default: <tempdir>/msprobe_memb)] [--rows 580000]
        [--modes csv,xlsx,ranks,ranks2,csv-j1] [--msprobe-root DIR] [--interval 0.02]

Makes (once, with benchmarks/gen_inputs.py) a statistics pair of about 200 MB per dump.json
(``--rows 580000`` tensor rows per side), then runs ``msprobe compare -tp T -gp G -o OUT --csv``, the same with ``-j 1`` (csv-j1: both sides parsed one
after the other in one process) and the xlsx default, and, for ``ranks`` / ``ranks2``, a 4-rank / 2-rank layout (the same pair linked as rank0..rankN,
``-j 2``) to show that the peak does not grow with the number of ranks (it is ``-j`` workers each holding one pair).

Measurement: the command's whole process tree (the CLI, the forked worker that parses the golden side, the
rank workers) is sampled every ``--interval`` seconds from /proc (VmRSS of every process of the tree, summed);
the figure is the largest sum seen.  Summing RSS counts pages a forked child still shares with its parent
twice, so it is an upper bound of the real footprint.  Time is the wall time of the command.

``--msprobe-root`` runs another checkout (``PYTHONPATH=DIR``), e.g. an older commit unpacked with
``git archive <commit> | tar -x -C DIR``, to measure before/after on the same inputs.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
import harness  # noqa: E402


def measure(cmd: list, env: dict, interval: float) -> dict:
    """Wall time and the largest summed VmRSS of the command's process tree (benchmarks/harness.py)."""
    r = harness.run(cmd, env=env, sample=interval, pss=False, gnu_time=False)
    if not r.ok:
        raise SystemExit(f"command failed ({r.rc}): {' '.join(cmd)}\n{(r.stdout + r.stderr)[-2000:]}")
    return {"peak": r.rss_sum_mb * 2 ** 20, "procs": max(1, r.procs), "wall": r.secs}


def ensure_pair(work: Path, rows: int) -> Path:
    stat = work / "stat"
    if not (stat / "golden" / "step0" / "rank0" / "dump.json").is_file():
        subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gen_inputs.py"), "--work-dir", str(work),
                        "--cases", "stat", "--stat-rows", str(rows)], check=True)
    return stat


def ranks_layout(stat: Path, work: Path, n: int) -> Path:
    """``n`` ranks, each a hard link (or copy) of the same pair, in the reference's step/rank layout."""
    root = work / f"ranks{n}"
    if not root.is_dir():
        for side in ("target", "golden"):
            for r in range(n):
                d = root / side / "step0" / f"rank{r}"
                d.mkdir(parents=True)
                for name in ("dump.json", "stack.json", "construct.json"):
                    src = stat / side / "step0" / "rank0" / name
                    try:
                        os.link(src, d / name)
                    except OSError:
                        shutil.copy(src, d / name)
    return root


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--work-dir", default=os.path.join(tempfile.gettempdir(), "msprobe_memb"))
    ap.add_argument("--rows", type=int, default=580000)
    ap.add_argument("--modes", default="csv,xlsx,ranks")
    ap.add_argument("--msprobe-root", default=str(ROOT))
    ap.add_argument("--interval", type=float, default=0.02)
    a = ap.parse_args(argv)
    work = Path(a.work_dir)
    stat = ensure_pair(work, a.rows)
    t = stat / "target" / "step0" / "rank0" / "dump.json"
    g = stat / "golden" / "step0" / "rank0" / "dump.json"
    size = max(t.stat().st_size, g.stat().st_size)
    env = dict(os.environ, PYTHONPATH=a.msprobe_root)
    base = [sys.executable, "-c", "import sys; from msprobe.cli.main import console_main; sys.exit(console_main())",
            "compare"]
    print(f"msprobe from {a.msprobe_root}; target {t.stat().st_size / 1e6:.1f} MB, golden {g.stat().st_size / 1e6:.1f} MB")
    print(f"{'case':<22} {'peak RSS (tree)':>16} {'x dump.json':>12} {'procs':>6} {'time':>8}")
    for mode in a.modes.split(","):
        out = work / f"out_{mode}"
        shutil.rmtree(out, ignore_errors=True)
        out.mkdir(parents=True)
        if mode == "csv":
            cmd = base + ["-tp", str(t), "-gp", str(g), "-o", str(out), "--csv"]
        elif mode == "csv-j1":
            cmd = base + ["-tp", str(t), "-gp", str(g), "-o", str(out), "--csv", "-j", "1"]
        elif mode == "xlsx":
            cmd = base + ["-tp", str(t), "-gp", str(g), "-o", str(out)]
        elif mode in ("ranks", "ranks2"):
            root = ranks_layout(stat, work, 4 if mode == "ranks" else 2)
            cmd = base + ["-tp", str(root / "target" / "step0"), "-gp", str(root / "golden" / "step0"), "-o", str(out), "--csv", "-j", "2"]
        else:
            raise SystemExit(f"unknown mode {mode}")
        r = measure(cmd, env, a.interval)
        label = {"csv": "one pair, --csv", "xlsx": "one pair, xlsx", "csv-j1": "one pair, --csv -j 1", "ranks": "4 ranks, --csv -j 2",
                 "ranks2": "2 ranks, --csv -j 2"}[mode]
        print(f"{label:<22} {r['peak'] / 2**30:>12.2f} GiB {r['peak'] / size:>11.1f}x {r['procs']:>6} {r['wall']:>7.1f}s",
              flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
