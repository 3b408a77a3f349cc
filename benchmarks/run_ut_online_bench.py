"""Online run_ut: a 200-step training loop (small MLP) streaming to the checker on 127.0.0.1, the checker killed
(SIGKILL) once a third of the calls are written and restarted; both transports, forward calls only
(``online_run_ut_recompute``), then one TCP run with the backward aten ops sent too (``--backward tcp``: 14
``Aten.*`` calls per step besides the 9 forward ones). Prints one JSON object per run with the training side's
totals and what the result CSV holds.

    python benchmarks/run_ut_online_bench.py [--steps 200] [--transport tcp dir] [--backward tcp]
"""

import argparse
import csv
import glob
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests"))
from test_run_ut_online import STEP_APIS, TRAIN  # noqa: E402

BASELINE = r'''
import sys, time, torch
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
t0 = time.time()
for s in range(int(sys.argv[1])):
    x = torch.randn(4, 8); y = torch.randn(4, 1)
    loss = torch.nn.functional.mse_loss(model(x), y)
    opt.zero_grad(); loss.backward(); opt.step()
print(f"TRAIN_SECONDS {time.time() - t0:.3f}")
'''


def env():
    e = dict(os.environ)
    e["PYTHONPATH"] = ROOT + os.pathsep + e.get("PYTHONPATH", "")
    return e


def checker(work, block, name):
    cfg = os.path.join(work, f"{name}.json")
    with open(cfg, "w") as fh:
        json.dump({"task": "run_ut", "run_ut": dict(block, is_online=True)}, fh)
    return subprocess.Popen([sys.executable, "-m", "msprobe", "-f", "pytorch", "run_ut", "-config", cfg, "-o",
                             os.path.join(work, "out")], cwd=work, env=env(),
                            stdout=open(os.path.join(work, f"{name}.log"), "w"), stderr=subprocess.STDOUT)


def result_rows(work):
    files = glob.glob(os.path.join(work, "out", "rank0", "accuracy_checking_result_*.csv"))
    if not files:
        return []
    with open(files[0], encoding="utf-8-sig", newline="") as fh:
        return list(csv.reader(fh))[1:]


#: the aten ops of one step's backward of TRAIN's MLP that are sent (views like aten.t are, view/detach are not)
STEP_ATEN = (["Aten.mse_loss_backward.0", "Aten.threshold_backward.0", "Aten.sum.0", "Aten.sum.1"]
             + [f"Aten.mm.{k}" for k in range(3)] + [f"Aten.t.{k}" for k in range(7)])


def run(transport, steps, kill, backward=False):
    work = tempfile.mkdtemp(prefix=f"online-bench-{transport}-")
    if transport == "tcp":
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        block = {"host": "127.0.0.1", "port": port}
    else:
        os.makedirs(os.path.join(work, "nfs"))
        block = {"nfs_path": os.path.join(work, "nfs")}
    with open(os.path.join(work, "train.json"), "w") as fh:
        json.dump({"task": "tensor", "dump_path": os.path.join(work, "dump"), "level": "L1",
                   "tensor": dict(block, online_run_ut=True, online_run_ut_recompute=not backward)}, fh)
    with open(os.path.join(work, "train.py"), "w") as fh:
        fh.write(TRAIN)
    apis = STEP_APIS + (STEP_ATEN if backward else [])
    started = time.time()
    chk = checker(work, block, "checker1")
    train = subprocess.Popen([sys.executable, os.path.join(work, "train.py"),
                              json.dumps({"config": os.path.join(work, "train.json"), "steps": steps})],
                             cwd=work, env=env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    killed_at = None
    if kill:
        target = steps * len(apis) // 3
        while len(result_rows(work)) < target and chk.poll() is None:
            time.sleep(0.05)
        killed_at = len(result_rows(work))
        chk.send_signal(signal.SIGKILL)
        chk.wait()
        time.sleep(0.5)
        chk = checker(work, block, "checker2")
    out, _ = train.communicate(timeout=900)
    rc_chk = chk.wait(300)
    rows = result_rows(work)
    names = [r[0] for r in rows]
    stats = json.loads([ln for ln in out.splitlines() if ln.startswith("STATS ")][-1][6:])
    expected = {f"{a}.step{s}" for s in range(steps) for a in apis}
    verdicts = {}
    for r in rows:
        verdicts[r[1]] = verdicts.get(r[1], 0) + 1
    return {"transport": transport, "backward": backward, "steps": steps, "checker_killed_after_rows": killed_at,
            "training_rc": train.returncode, "checker_rc": rc_chk,
            "training_seconds": float([ln for ln in out.splitlines() if ln.startswith("TRAIN_SECONDS")][-1].split()[1]),
            "wall_seconds": round(time.time() - started, 1), "client": stats,
            "rows": len(names), "unique_rows": len(set(names)), "missing": len(expected - set(names)),
            "unexpected": len(set(names) - expected), "verdicts": verdicts,
            "connection_lost_lines": out.count("connection to the checker lost"), "work": work}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--transport", nargs="+", default=["tcp", "dir"])
    ap.add_argument("--backward", nargs="*", default=["tcp"], help="transports of the runs with the backward aten "
                    "ops sent too (none: --backward with no value)")
    ap.add_argument("--no-kill", action="store_true")
    args = ap.parse_args()
    base = subprocess.run([sys.executable, "-c", BASELINE, str(args.steps)], capture_output=True, text=True, env=env())
    print(json.dumps({"baseline_training_seconds_no_tool": float(base.stdout.split()[1]), "steps": args.steps}))
    for t in args.transport:
        print(json.dumps(run(t, args.steps, not args.no_kill)), flush=True)
    for t in args.backward:
        print(json.dumps(run(t, args.steps, not args.no_kill, backward=True)), flush=True)


if __name__ == "__main__":
    main()
