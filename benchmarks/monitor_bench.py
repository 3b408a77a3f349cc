"""Step-time overhead of the training monitor (TrainerMon) against mindstudio-probe 8.3.3's, in the same run.

    .venv/bin/python benchmarks/monitor_bench.py [--model d256] [--steps 30] [--warmup 3] [--repeat 1]
                                                 [--impls ours,ref8] [--ref8 PATH] [--no-write]

The d256 TinyTransformer of benchmarks/dump_bench_worker.py (4 blocks, d=256, seq 128, batch 2) is trained with
Adam, one thread; every step is ``out = model(x); loss = CE(out, y); loss.backward(); opt.step();
opt.zero_grad()`` and, with a monitor, ``TrainerMon(cfg, params_have_main_grad=False).set_monitor(model,
optimizer=opt, grad_acc_steps=1)`` was called before the loop (nothing else per step, as the reference's docs).

Monitor config (both implementations): activations of every module (``xy_distribution`` + ``all_xy``), weight
gradients (``wg_distribution``), Adam's m and v (``mv_distribution``), ops min, max, norm, zeros, nans, mean,
format csv (the reference's tensorboard writer crashes on shape/dtype, spec 4.9); ``step_interval`` 1 ("every
step") or 10 ("every 10 steps").  Each (implementation, config) runs in a fresh process (this file with
``--worker``) with MONITOR_OUTPUT_DIR in a temporary folder deleted afterwards.  ``--warmup`` untimed steps
(a multiple of 10 minus 0 keeps the collected steps at the same place in the timed window), then ``--steps``
timed steps (a multiple of 10); the **mean** ms/step (``--metric cpu``, default: process CPU time, steadier on
a shared machine; ``wall``: wall clock) is kept (a median would hide the collected steps of the
every-10 config); with ``--repeat R`` the lowest mean of R rounds.

Goals (issue 20): every step, ours added <= 1/2 of the reference's added time; every 10 steps, ours <= 1.1 x
the no-tool step time.  Results are printed and written to benchmarks/monitor_results.md (unless --no-write).
The reference runs with its venv's python, ``-E``, cwd outside the repository; ours with PYTHONPATH=<repo>.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
import harness  # noqa: E402
from harness import machine_line  # noqa: E402
from refvenv import portable, ref_venv_or_missing  # noqa: E402

OPS = ["min", "max", "norm", "zeros", "nans", "mean"]
CONFIGS = {"none": None, "every1": 1, "every10": 10}


def monitor_config(interval):
    return {"targets": {}, "xy_distribution": True, "all_xy": True, "wg_distribution": True,
            "mv_distribution": True, "format": "csv", "ops": OPS, "step_interval": interval,
            "step_count_per_record": 1000}


# ------------------------------------------------------------------------------------------------ worker
def worker(args):
    import logging
    import torch
    import torch.nn.functional as F
    from dump_bench_worker import build

    torch.set_num_threads(1)
    model, x, y = build(args.model)
    opt = torch.optim.Adam(model.parameters(), lr=1e-4)
    info = {}
    if args.config:
        logging.disable(logging.WARNING)          # both tools log each step; keep the console out of the timing
        import msprobe
        from msprobe.pytorch import TrainerMon
        info["msprobe"] = msprobe.__file__
        mon = TrainerMon(args.config, params_have_main_grad=False)
        mon.set_monitor(model, optimizer=opt, grad_acc_steps=1)
    vocab = 100

    def step():
        out = model(x)
        loss = F.cross_entropy(out.reshape(-1, vocab), y.reshape(-1))
        loss.backward()
        opt.step()
        opt.zero_grad()
        return loss.item()
    times, cpu = harness.time_steps(step, args.steps, args.warmup)
    info.update(monitor_bench=1, wall_ms=sum(times) / len(times), cpu_ms=sum(cpu) / len(cpu), times=times)
    print(json.dumps(info))


# ------------------------------------------------------------------------------------------------ parent
def run_one(python, flags, env, cfg_interval, args, tmp):
    work = tempfile.mkdtemp(prefix="monitor_bench_", dir=tmp)
    try:
        cmd = [str(python), *flags, str(HERE / "monitor_bench.py"), "--worker", "--model", args.model,
               "--steps", str(args.steps), "--warmup", str(args.warmup)]
        if cfg_interval is not None:
            path = os.path.join(work, "monitor_config.json")
            with open(path, "w") as f:
                json.dump(monitor_config(cfg_interval), f)
            cmd += ["--config", path]
        env = dict(env, MONITOR_OUTPUT_DIR=os.path.join(work, "monitor_output"))
        r = harness.run(cmd, cwd=work, env=env, timeout=1800)
        res = harness.json_line(r.stdout, '{"', '"monitor_bench": 1')
        return res if res is not None else {"error": harness.last_line(r.stderr or r.stdout) or ["no output"]}
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--config", default=None, help=argparse.SUPPRESS)
    p.add_argument("--model", default="d256", choices=["d64", "d256"])
    p.add_argument("--steps", type=int, default=30, help="timed steps (a multiple of 10; default 30)")
    p.add_argument("--warmup", type=int, default=3, help="untimed steps first (default 3)")
    p.add_argument("--repeat", type=int, default=1, help="rounds; the lowest mean per point is kept")
    p.add_argument("--metric", default="cpu", choices=["cpu", "wall"],
                   help="cpu: process CPU time per step (default; steadier on a shared machine), wall: wall clock")
    p.add_argument("--impls", default="ours,ref8")
    p.add_argument("--ref8", default=None, help="mindstudio-probe 8.3.3 venv (default $MSPROBE_REF8, else "
                                                "venv833 under the reference cache)")
    p.add_argument("--no-write", action="store_true")
    args = p.parse_args(argv)
    if args.worker:
        return worker(args)
    if args.steps % 10:
        p.error("--steps must be a multiple of 10 (the every-10 config collects one step in ten)")
    ours_py = ROOT / ".venv" / "bin" / "python"
    ours_py = ours_py if ours_py.exists() else Path(sys.executable)
    impls = {"ours": (ours_py, [], harness.clean_env(PYTHONPATH=ROOT))}
    ref = Path(args.ref8) if args.ref8 else ref_venv_or_missing("venv833", "MSPROBE_REF8")
    notes = []
    if "ref8" in args.impls.split(","):
        if (ref / "bin" / "python").exists():
            impls["ref8"] = (ref / "bin" / "python", ["-E"], harness.clean_env())
        else:
            notes.append(f"8.3.3: no venv at {portable(ref)}")
    head = machine_line()
    print(head)
    tmp = tempfile.mkdtemp(prefix="monitor_bench_")
    best = {}
    where = {}
    try:
        for rnd in range(args.repeat):
            for key in ["none"] + [f"{i}:{c}" for i in impls for c in ("every1", "every10")]:
                if key == "none":
                    py, fl, env = impls["ours"]
                    res = run_one(py, fl, env, None, args, tmp)
                else:
                    impl, c = key.split(":")
                    py, fl, env = impls[impl]
                    res = run_one(py, fl, env, CONFIGS[c], args, tmp)
                if "error" in res:
                    print(f"{key}: failed: {res['error']}")
                    best.setdefault(key, None)
                    continue
                where[key] = res.get("msprobe")
                m = res[f"{args.metric}_ms"]
                best[key] = m if best.get(key) is None else min(best[key], m)
                print(f"round {rnd + 1} {key:16s} {m:9.1f} ms/step")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    for k, f in where.items():
        if f:
            print(f"{k}: msprobe from {portable(os.path.dirname(os.path.dirname(f)))}")
    base = best.get("none")
    rows = []
    verdicts = []
    for c, label in (("every1", "every step"), ("every10", "every 10 steps")):
        o, r = best.get(f"ours:{c}"), best.get(f"ref8:{c}")
        ao = o - base if o is not None and base else None
        ar = r - base if r is not None and base else None
        rows.append((label, o, ao, r, ar))
        if c == "every1" and ao is not None and ar is not None:
            ok = ao <= ar / 2
            verdicts.append(f"every step: ours added {ao:.1f} ms vs 8.3.3 added {ar:.1f} ms "
                            f"({ao / ar:.2f} of it; goal <= 0.5): {'PASS' if ok else 'FAIL'}")
        if c == "every10" and o is not None and base:
            ok = o <= 1.1 * base
            verdicts.append(f"every 10 steps: ours {o / base:.3f} x no tool (goal <= 1.1): {'PASS' if ok else 'FAIL'}")

    def f(x, signed=False):
        return "n/a" if x is None else (f"{x:+.1f}" if signed else f"{x:.1f}")
    lines = [f"| config | ours ms/step | ours added | 8.3.3 ms/step | 8.3.3 added | ours added / 8.3.3 added |",
             "|---|---|---|---|---|---|",
             f"| no tool | {f(base)} | | | | |"]
    for label, o, ao, r, ar in rows:
        ratio = f"{ao / ar:.2f}" if ao is not None and ar else "n/a"
        lines.append(f"| {label} | {f(o)} | {f(ao, True)} | {f(r)} | {f(ar, True)} | {ratio} |")
    print("\n".join(lines))
    print("\n".join(verdicts + notes))
    if not args.no_write:
        cmd = "benchmarks/monitor_bench.py " + " ".join(a for a in (argv if argv is not None else sys.argv[1:]))
        text = (f"# Training monitor overhead (TrainerMon), ours vs mindstudio-probe 8.3.3\n\n"
                f"Command: `.venv/bin/python {cmd.strip()}` ({datetime.date.today().isoformat()})\n\n"
                f"Machine: {head}\n\n"
                f"Model {args.model} (benchmarks/dump_bench_worker.py), Adam, one thread; monitor config: "
                f"xy_distribution + all_xy, wg_distribution, mv_distribution, ops {', '.join(OPS)}, format csv; "
                f"step_interval 1 or 10. Metric: {'process CPU time' if args.metric == 'cpu' else 'wall clock'} per "
                f"step. Mean ms over {args.steps} timed steps after {args.warmup} warm-up steps, "
                f"each point a fresh process; lowest of {args.repeat} round(s).\n\n"
                + "\n".join(lines) + "\n\n" + "\n".join(f"* {v}" for v in verdicts + notes) + "\n"
                + f"\nLoad average at the end: {' '.join(f'{x:.2f}' for x in os.getloadavg())} (a shared machine: "
                  f"other jobs ran beside the benchmark; each point is one process's mean, so expect a few % "
                  f"of noise between rounds).\n")
        (HERE / "monitor_results.md").write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main() or 0)
