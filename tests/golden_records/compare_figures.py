"""Both compares on our dumps against the reference's dump of the identical fp32 run.

    python tests/golden_records/compare_figures.py [--python REF_PYTHON] [--work DIR] [MODEL ...]

For each model (models.py; default all): one training step at level mix, fp32, dumped by the reference
(REF_PYTHON, as in make_golden.py) and by msprobe under "api_capture": "full" and "reference"; then our
``msprobe compare`` and the reference's ``msprobe -f pytorch compare`` with our dump as target and the
reference's as golden. Prints per model and mode: rows, matched, target-only and golden-only rows, rows
with all four differences zero, rows whose only difference is the L2 norm's last bits, other non-zero
rows, rows holding inf (diff NaN), and the largest relative difference. Needs openpyxl (reads the
reference's .xlsx). Skips (exit 0) without REF_PYTHON.
"""
import argparse
import csv
import glob
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
from make_golden import default_python  # noqa: E402

DIFFS = ("Max diff", "Min diff", "Mean diff", "L2norm diff")
BENCH = ("Bench max", "Bench min", "Bench mean", "Bench l2norm")


def _zero(v):
    return str(v) in ("0", "0.0", "-0.0", "N/A", "None", "")


def _nan(v):
    return str(v).lower() == "nan"


def summarise(rows):
    def absent(v):
        return str(v) in ("N/A", "None", "")
    matched = [r for r in rows if not absent(r.get("Bench Name")) and not absent(r.get("NPU Name"))]
    res = {"rows": len(rows), "matched": len(matched),
           "target_only": sum(1 for r in rows if absent(r.get("Bench Name"))),
           "golden_only": sum(1 for r in rows if absent(r.get("NPU Name"))),
           "zero": 0, "norm_bits": 0, "other": 0, "inf": 0, "max_rel": 0.0}
    for r in matched:
        vals = [r.get(k) for k in DIFFS]
        if any(_nan(v) for v in vals):
            res["inf"] += 1
            continue
        if all(_zero(v) for v in vals):
            res["zero"] += 1
        elif all(_zero(v) for v in vals[:3]):
            res["norm_bits"] += 1
        else:
            res["other"] += 1
        for k, b in zip(DIFFS, BENCH):
            try:
                if not _zero(r.get(k)):
                    res["max_rel"] = max(res["max_rel"], abs(float(r[k])) / max(abs(float(r[b])), 1e-30))
            except (TypeError, ValueError):
                pass
    return res


def run(cmd, **kw):
    proc = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if proc.returncode:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{proc.stderr[-3000:]}")
    return proc.stdout


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--python", default=default_python())
    p.add_argument("--work", default=None, help="directory for dumps and reports (default: a temporary one)")
    p.add_argument("models", nargs="*", default=["llama", "gpt2", "bert", "t5", "mixtral"])
    a = p.parse_args(argv)
    if not os.path.exists(a.python):
        print(f"reference interpreter {a.python} not found: nothing compared")
        return 0
    import openpyxl
    ref_cli = os.path.join(os.path.dirname(a.python), "msprobe")
    work = os.path.abspath(a.work) if a.work else tempfile.mkdtemp(prefix="msprobe_figures_")
    os.makedirs(work, exist_ok=True)
    ref_env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    our_env = dict(os.environ, PYTHONPATH=ROOT)
    models_py = os.path.join(HERE, "models.py")
    for m in a.models:
        golden = run([a.python, models_py, m, "mix", "fp32", os.path.join(work, f"ref_{m}")], cwd=work,
                     env=ref_env).strip().splitlines()[-1]
        for mode in ("full", "reference"):
            target = run([sys.executable, models_py, m, "mix", "fp32", os.path.join(work, f"{mode}_{m}"),
                          json.dumps({"api_capture": mode})], cwd=work, env=our_env).strip().splitlines()[-1]
            out = os.path.join(work, f"cmp_{mode}_{m}")
            run([sys.executable, "-m", "msprobe", "compare", "-tp", os.path.join(target, "dump.json"),
                 "-gp", os.path.join(golden, "dump.json"), "-o", out, "--csv", "-q"], env=our_env)
            with open(glob.glob(os.path.join(out, "compare_result*.csv"))[0], encoding="utf-8") as f:
                ours = summarise(list(csv.DictReader(f)))
            rout = os.path.join(work, f"refcmp_{mode}_{m}")
            cj = rout + ".json"
            with open(cj, "w", encoding="utf-8") as f:
                json.dump({"npu_path": os.path.join(target, "dump.json"),
                           "bench_path": os.path.join(golden, "dump.json"), "is_print_compare_log": False}, f)
            run([ref_cli, "-f", "pytorch", "compare", "-i", cj, "-o", rout], env=ref_env, cwd=work)
            ws = openpyxl.load_workbook(glob.glob(os.path.join(rout, "compare_result*.xlsx"))[0], read_only=True).active
            rows = list(ws.iter_rows(values_only=True))
            theirs = summarise([dict(zip(rows[0], r)) for r in rows[1:]])
            for tool, r in (("ours", ours), ("8.3.3", theirs)):
                print(f"{m:8s} {mode:9s} {tool:5s} rows {r['rows']} matched {r['matched']} target-only "
                      f"{r['target_only']} golden-only {r['golden_only']} | zero {r['zero']} norm-last-bits "
                      f"{r['norm_bits']} other {r['other']} inf {r['inf']} max-rel {r['max_rel']:.1e}", flush=True)
    print(f"(dumps and reports in {work})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
