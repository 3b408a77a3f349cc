"""Dump overhead on MindSpore 2.10 CPU (PyNative): msprobe vs the reference (mindstudio-probe 26.2.0).

usage: python benchmarks/ms_dump_bench.py [--ours .venv-ms/bin/python] [--ref $MSPROBE_REF_CACHE/venv2620ms/bin/python]
                                          [--steps 40] [--rounds 3] [--out bench_work/ms_dump]

For each interpreter, runs the test network (tests/mindspore/ms_net.py's; benchmarks/ms_bench_worker.py) without
a debugger and with a statistics dump at level L1 and mix, in separate processes, interleaved over --rounds
rounds. Step time = median over the steps of a run (the first 3 steps, which compile, are dropped), then the
median over rounds. ratio = dumped step time / undumped step time of the same interpreter; overhead = ratio - 1.
The reference needs `mindspore.mint.norm = ops.norm` on CPU (no LinalgVectorNorm kernel; spec frameworks.md);
the worker applies that shim for it. Each dump goes to a fresh folder under --out.
"""
import argparse
import os
import shutil
import statistics
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
WORKER = os.path.join(HERE, "ms_bench_worker.py")
sys.path.insert(0, HERE)
import harness  # noqa: E402
from refvenv import ref_venv_or_missing  # noqa: E402

WARMUP = 3


def run(py, impl, level, steps, out, cwd, env):
    if os.path.exists(out):
        shutil.rmtree(out)
    res = harness.run([py, WORKER, impl, level, str(steps), out], cwd=cwd, env=env, timeout=1800)
    if not res.ok:
        raise RuntimeError(f"{py} {impl} {level} failed:\n{res.stderr[-3000:]}")
    times = harness.json_line(res.stdout)["times"][WARMUP:]
    return statistics.median(times)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ours", default=os.path.join(ROOT, ".venv-ms", "bin", "python"))
    ap.add_argument("--ref", default=None,
                    help="the reference's interpreter (default $MSPROBE_REF_CACHE/venv2620ms/bin/python, cache "
                         "default ~/.cache/msprobe-ref, built on demand by benchmarks/refvenv.py)")
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", default=os.path.join(ROOT, "bench_work", "ms_dump"))
    a = ap.parse_args()
    if a.ref is None:
        a.ref = str(ref_venv_or_missing("venv2620ms") / "bin" / "python")
    base_env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    base_env.update(GLOG_v="3", OMP_NUM_THREADS="1")
    sides = [("msprobe", a.ours, "ours", ROOT), ("reference 26.2.0", a.ref, "ref", "/")]
    sides = [s for s in sides if os.path.exists(s[1])]
    results = {}
    for r in range(a.rounds):
        for label, py, impl, cwd in sides:
            for level in ("none", "L1", "mix"):
                out = os.path.join(a.out, f"{impl}_{level}_{r}")
                t = run(py, "none" if level == "none" else impl, level if level != "none" else "L1", a.steps,
                        out, cwd, base_env)
                results.setdefault((label, level), []).append(t)
                print(f"round {r} {label:16s} {level:4s} {t * 1000:8.2f} ms/step", flush=True)
    print()
    print("| implementation | no dump (ms/step) | L1 (ms/step) | L1 ratio | mix (ms/step) | mix ratio |")
    print("|---|---|---|---|---|---|")
    summary = {}
    for label, _, _, _ in sides:
        base = statistics.median(results[(label, "none")])
        row = [label, f"{base * 1000:.2f}"]
        for level in ("L1", "mix"):
            t = statistics.median(results[(label, level)])
            row += [f"{t * 1000:.2f}", f"{t / base:.2f}"]
            summary[(label, level)] = t / base - 1
        print("| " + " | ".join(row) + " |")
    if len(sides) == 2:
        for level in ("L1", "mix"):
            o, r_ = summary[("msprobe", level)], summary[("reference 26.2.0", level)]
            print(f"{level}: overhead msprobe {o:.2f} vs reference {r_:.2f} -> {o / r_:.2f} of the reference's")


if __name__ == "__main__":
    sys.exit(main())
