"""Make the golden record lists with the reference (MindStudio Probe 8.x) in a scratch venv.

    python tests/golden_records/make_golden.py [--python REF_PYTHON] [CASE ...]

REF_PYTHON: an interpreter with mindstudio-probe, torch and transformers installed (default: the
environment variable MSPROBE_REF_PYTHON, else ~/.cache/msprobe-ref/venv833/bin/python). Each case
(CASES below: model, level, dtype) dumps one training step of a tiny random-init model from
models.py with the reference and writes ``<case>.json.gz``: the record names in dump.json order, each
record's structure (keys; type, dtype, shape, requires_grad per tensor; plain values), construct.json,
and the versions used. For REF_DUMP_CASE the reference's dump.json itself is kept too
(``ref_dump_<case>.json.gz``, read by the compare test). Without the interpreter the script says so
and exits 0. tests/test_api_capture.py checks our dumps against these files.
"""
import argparse
import gzip
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from golden import golden_of  # noqa: E402

CASES = [
    ("llama", "mix", "fp32"), ("gpt2", "mix", "fp32"), ("bert", "mix", "fp32"), ("t5", "mix", "fp32"),
    ("mixtral", "mix", "fp32"),
    ("llama", "L1", "fp32"), ("gpt2", "L1", "fp32"), ("llama", "L0", "fp32"), ("bert", "L0", "fp32"),
    ("llama", "mix", "bf16"), ("bert", "mix", "bf16"), ("mixtral", "mix", "bf16"),
    ("handmade", "mix", "fp32"),
]
REF_DUMP_CASE = ("gpt2", "mix", "fp32")


def case_name(case):
    return "_".join(case)


def default_python():
    return os.environ.get("MSPROBE_REF_PYTHON") or os.path.expanduser("~/.cache/msprobe-ref/venv833/bin/python")


def write_gz(path, obj):
    data = json.dumps(obj, separators=(",", ":"), sort_keys=False).encode()
    tmp = path + ".tmp"
    with gzip.GzipFile(tmp, "wb", mtime=0) as f:
        f.write(data)
    os.replace(tmp, path)


def versions(python):
    code = ("import importlib.metadata as m, torch, transformers;"
            "print(m.version('mindstudio-probe'), torch.__version__, transformers.__version__)")
    out = subprocess.run([python, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    return {"mindstudio-probe": out[0], "torch": out[1], "transformers": out[2]}


def make(python, case, out_dir=HERE):
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}   # the reference's msprobe, not ours
    with tempfile.TemporaryDirectory() as tmp:
        dump = os.path.join(tmp, "dump")
        proc = subprocess.run([python, os.path.join(HERE, "models.py"), *case, dump], cwd=tmp, env=env,
                              capture_output=True, text=True)
        if proc.returncode:
            raise SystemExit(f"{case_name(case)}: the reference run failed:\n{proc.stderr[-3000:]}")
        rank_dir = proc.stdout.strip().splitlines()[-1]
        g = golden_of(rank_dir)
        raw = g.pop("raw")
        g["case"] = list(case)
        write_gz(os.path.join(out_dir, case_name(case) + ".json.gz"), g)
        if tuple(case) == REF_DUMP_CASE:
            with open(os.path.join(rank_dir, "dump.json"), encoding="utf-8") as f:
                full = json.load(f)
            full["dump_data_dir"] = None
            write_gz(os.path.join(out_dir, f"ref_dump_{case_name(case)}.json.gz"), full)
        return len(raw)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--python", default=default_python(), help="the reference's interpreter")
    p.add_argument("cases", nargs="*", help="case names (e.g. llama_mix_fp32); default all")
    a = p.parse_args(argv)
    if not os.path.exists(a.python):
        print(f"reference interpreter {a.python} not found: nothing made (pip install mindstudio-probe "
              f"transformers in a scratch venv and pass --python)")
        return 0
    cases = [c for c in CASES if not a.cases or case_name(c) in a.cases]
    meta = versions(a.python)
    for case in cases:
        n = make(a.python, case)
        print(f"{case_name(case)}: {n} records")
    meta["cases"] = [case_name(c) for c in CASES]
    with open(os.path.join(HERE, "versions.json"), "w", encoding="utf-8") as f:
        json.dump(meta, f, indent=1)
        f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
