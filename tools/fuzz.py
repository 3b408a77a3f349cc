"""Fuzz every msprobe command with mutated copies of the reference fixtures.

    .venv/bin/python tools/fuzz.py [-n 100000] [-j 2] [--seed 0] [--timeout 60] [--out fuzz_out]
                                   [--fixtures ../shared/fixtures/reference] [--only compare,graph]

Each input ``i`` is fully determined by ``(seed, i)``: a scenario (a command with its arguments:
compare on statistics / md5 / tensor / step-dir / compare.json / mapping yaml / MindSpore kernel dumps,
graph build and compare, merge_result, op_generate, code_mapping, nan_analyze, api_precision_compare, run_ut,
run_ut -csv_path on a mutated resume CSV (white_list of 1-3 APIs), run_overflow_check on a statistics / tensor
dump with inf/nan written into 1-3 outputs,
the dump's config.json loader; config_check -c / -d / checkpoints, parse pt / cn / pk / dc, grad_compare and
csv2tensorboard on small valid inputs made once per worker), a
fresh copy of the scenario's input files in a temporary folder, and one to three mutations of one or more
of them (truncation, byte flips, a wrong type, a missing key, NaN / huge numbers, a value nested 1,000
deep, a 100,000-character string, another encoding, a directory or nothing in place of a file, garbage
or huge-header tensor files).  The command then runs in-process (``msprobe.cli.main.main``) in a worker
process with stdout/stderr sent to a file.

Every input is classified as

* ``success``: exit status 0;
* ``clean error``: exit status 1 or 2 with an ``msprobe: error:`` line, no traceback;
* ``internal error``: the ``msprobe: internal error:`` line (a bug: its traceback is in the log file);
* ``traceback``: a Python traceback on the console, or an exception out of ``main``;
* ``hang``: not finished within ``--timeout`` seconds (SIGALRM in the worker, the worker killed by the
  parent if even that does not help);
* ``damaged``: an input file whose bytes changed during the run.

The figures are printed at the end (and every ``--every`` inputs); every failing input whose signature
(command, exception type, innermost msprobe frame) was not seen before is saved under ``--out/<sig>/``
with its files, ``argv.json`` and the console output, to become a regression test.  Exit status 1 when
any input failed.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import multiprocessing as mp
import os
import random
import re
import shutil
import signal
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Callable, Dict, List, Optional, Tuple

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))
DEFAULT_FIXTURES = REPO.parent / "shared" / "fixtures" / "reference"

OUTCOMES = ("success", "clean error", "internal error", "traceback", "hang", "damaged")


# ------------------------------------------------------------------------------------------- mutations

DEEP = 1000
_DEEP_MARK = "@@msprobe-fuzz-deep-%d@@"


def _deep_value(depth: int = DEEP):
    """A placeholder string, replaced by a value nested ``depth`` deep once the document is serialised
    (the serialisers themselves recurse)."""
    return _DEEP_MARK % depth


def _expand_deep(text: str) -> str:
    return re.sub(r'"@@msprobe-fuzz-deep-(\d+)@@"', lambda m: "[" * int(m.group(1)) + "1" + "]" * int(m.group(1)), text)


def _odd_values(rnd: random.Random) -> list:
    return [None, True, False, 0, -1, 1 << 70, -(1 << 70), 1e308, -1e308, float("nan"), float("inf"),
            float("-inf"), "", "x" * rnd.choice((3, 300, 100_000)), "../../../../etc/passwd", "=cmd|' /C calc'!A0",
            [], {}, [1, "a", None], {"type": "torch.Tensor"}, {"a": {"b": [1, {"c": None}]}}, "\u4e2d\u6587",
            "\x00", [[[[1]]]], {"dtype": {}, "shape": {"x": 1}}, [{"type": []}], _deep_value(), 3.5, "NaN"]


def _paths(obj, prefix=(), out=None, limit=4000):
    """Every (container path) in a parsed JSON/YAML value (breadth limited)."""
    if out is None:
        out = []
    if len(out) >= limit:
        return out
    out.append(prefix)
    if isinstance(obj, dict):
        for k, v in list(obj.items())[:200]:
            _paths(v, prefix + (k,), out, limit)
    elif isinstance(obj, list):
        for i, v in enumerate(obj[:50]):
            _paths(v, prefix + (i,), out, limit)
    return out


def _get(obj, path):
    for p in path:
        obj = obj[p]
    return obj


def _structural(data: bytes, rnd: random.Random, fmt: str) -> Optional[bytes]:
    """Parse, change one value / key, serialise; None when the file does not parse."""
    try:
        if fmt == "yaml":
            import yaml

            obj = yaml.safe_load(data.decode("utf-8"))
        else:
            obj = json.loads(data.decode("utf-8"))
    except Exception:  # noqa: BLE001 - not parseable: the caller falls back to a byte mutation
        return None
    paths = _paths(obj)
    path = rnd.choice(paths)
    op = rnd.choice(("replace", "replace", "delete", "wrap", "rename", "deep", "nan"))
    if not path:
        obj = rnd.choice(_odd_values(rnd)) if op == "replace" else ([obj] if op == "wrap" else obj)
    else:
        parent = _get(obj, path[:-1])
        key = path[-1]
        if op == "replace":
            parent[key] = rnd.choice(_odd_values(rnd))
        elif op == "delete":
            del parent[key]
        elif op == "wrap":
            parent[key] = rnd.choice(([parent[key]], {"x": parent[key]}, [[parent[key]]]))
        elif op == "rename" and isinstance(parent, dict):
            parent[rnd.choice(("", " ", "a/b", "..", "\u4e2d", "x" * 300, "=1+1", "0"))] = parent.pop(key)
        elif op == "deep":
            parent[key] = _deep_value(rnd.choice((DEEP, 150, 99)))
        else:
            parent[key] = rnd.choice((float("nan"), float("inf"), 1e308, -(1 << 64), 1 << 64, 0.0, -0.0))
    try:
        if fmt == "yaml":
            import yaml

            text = yaml.safe_dump(obj, allow_unicode=rnd.random() < 0.5)
            return re.sub(r"'?@@msprobe-fuzz-deep-(\d+)@@'?", lambda m: "[" * int(m.group(1)) + "1" + "]" * int(m.group(1)), text).encode("utf-8")
        text = json.dumps(obj, indent=rnd.choice((None, 1, 4)), ensure_ascii=rnd.random() < 0.5)
        return _expand_deep(text).encode("utf-8")
    except (RecursionError, ValueError, TypeError):
        return None


def _npy_header(shape) -> bytes:
    head = ("{'descr': '<f4', 'fortran_order': False, 'shape': %s, }" % (tuple(shape),)).encode()
    pad = 64 - (10 + len(head) + 1) % 64
    head = head + b" " * pad + b"\n"
    return b"\x93NUMPY\x01\x00" + len(head).to_bytes(2, "little") + head


def mutate_bytes(data: bytes, rnd: random.Random, fmt: str) -> Tuple[bytes, str]:
    """One mutation of a file's bytes; (new bytes, what was done)."""
    kinds = ["truncate", "flip", "insert", "encoding", "empty", "garbage"]
    if fmt in ("json", "yaml"):
        kinds += ["structural"] * 6
    if fmt in ("pt", "npy"):
        kinds += ["huge_tensor", "flip", "truncate"]
    kind = rnd.choice(kinds)
    n = len(data)
    if kind == "structural":
        out = _structural(data, rnd, fmt)
        if out is not None:
            return out, "structural"
        kind = "flip"
    if kind == "truncate":
        return data[:rnd.randrange(0, max(1, n))], "truncate"
    if kind == "flip":
        b = bytearray(data)
        for _ in range(rnd.choice((1, 1, 2, 8))):
            if b:
                i = rnd.randrange(len(b))
                b[i] = rnd.choice((rnd.randrange(256), b[i] ^ (1 << rnd.randrange(8)), ord("{"), ord("["),
                                   ord('"'), ord("\\"), 0xFF))
        return bytes(b), "flip"
    if kind == "insert":
        i = rnd.randrange(n + 1)
        piece = rnd.choice((b"\xff\xfe", b"\x00", b"\xc3\x28", b'"', b"[" * 1000, b"NaN", b"1e999", b"-",
                            b"\\u0000", b"\xe4\xb8\xad", b"}", b"\n\t- ", b": :"))
        return data[:i] + piece + data[i:], "insert"
    if kind == "encoding":
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            return data + b"\xff", "encoding"
        enc = rnd.choice(("utf-16", "latin-1", "gbk", "utf-8-sig"))
        text = text.replace('"', '"\u00e9\u4e2d', 1) if enc != "utf-8-sig" else text
        return text.encode(enc, "replace"), f"encoding:{enc}"
    if kind == "empty":
        return rnd.choice((b"", b" ", b"{}", b"[]", b"null", b"0", b'""')), "empty"
    if kind == "huge_tensor":
        if fmt == "npy":
            return _npy_header(rnd.choice(((1 << 20, 1 << 20), (10_000_000_000,), (-1, 3), (1 << 62,)))) + data[128:], "huge_tensor"
        b = bytearray(data)  # a .pt zip: change digits in its storage record
        for m in re.finditer(rb"\d{1,3}", bytes(b[:4096])):
            if rnd.random() < 0.3:
                b[m.start():m.end()] = b"9" * (m.end() - m.start())
        return bytes(b), "huge_tensor"
    return bytes(rnd.randrange(256) for _ in range(rnd.choice((1, 64, 4096)))), "garbage"


def _fmt(path: Path) -> str:
    s = path.suffix.lower()
    return {".json": "json", ".yaml": "yaml", ".yml": "yaml", ".pt": "pt", ".npy": "npy", ".csv": "csv",
            ".xlsx": "xlsx", ".ir": "ir"}.get(s, "bin")


def mutate_file(path: Path, rnd: random.Random) -> str:
    """Mutate one input file in place (or replace it by a directory / remove it); what was done."""
    r = rnd.random()
    if r < 0.04:
        path.unlink()
        path.mkdir()
        return "directory"
    if r < 0.06:
        path.unlink()
        return "missing"
    data, what = mutate_bytes(path.read_bytes(), rnd, _fmt(path))
    path.write_bytes(data)
    return what


def mutate_csv(data: bytes, rnd: random.Random) -> bytes:
    """One structural change of a CSV file: a cell replaced by an odd value, a column dropped from the header
    or from one row, a row duplicated, the header renamed."""
    import csv as _csv
    import io

    try:
        rows = list(_csv.reader(io.StringIO(data.decode("utf-8-sig"))))
    except (UnicodeDecodeError, _csv.Error):
        return data
    if not rows:
        return data
    i = rnd.randrange(len(rows))
    op = rnd.choice(("cell", "cell", "cell", "drop_col", "short_row", "dup_row", "header"))
    if op == "cell" and rows[i]:
        rows[i][rnd.randrange(len(rows[i]))] = rnd.choice(("", "nan", "inf", "-inf", "1e999", "x", "-1", "1.5",
                                                           "9" * 40, "[1, 2]", "[-1]", "[]", "\u4e2d", "=1+1", "None"))
    elif op == "drop_col" and rows[0]:
        j = rnd.randrange(len(rows[0]))
        rows = [r[:j] + r[j + 1:] for r in rows]
    elif op == "short_row" and rows[i]:
        rows[i] = rows[i][:-1]
    elif op == "dup_row":
        rows.insert(i, list(rows[i]))
    elif op == "header" and rows[0]:
        rows[0][rnd.randrange(len(rows[0]))] = rnd.choice(("", "step", "name", "param_name", "x"))
    buf = io.StringIO()
    _csv.writer(buf).writerows(rows)
    return buf.getvalue().encode("utf-8")


_MADE: dict = {}   # small valid inputs made once per worker process (config_check packs, checkpoints, grad dumps)
_TRAIN_SH = """#!/bin/bash
LR=0.0001
GPT_ARGS="
    --num-layers 24 \\
    --seq-length 4096 \\
"
torchrun --nproc_per_node 8 pretrain_gpt.py $GPT_ARGS \\
    --lr $LR \\
    --use-flash-attn \\
    --micro-batch-size 1
"""
_TRAIN_YAML = "model:\n  hidden_size: 1024\n  num_layers: 24\ntraining:\n  lr: 0.0001\n  seed: 1234\n"


# ------------------------------------------------------------------------------------------- scenarios


class Scenario:
    """A command on a copy of fixture files: ``setup(ws, rnd)`` -> (argv, files it may mutate)."""

    def __init__(self, name: str, command: str, setup: Callable, weight: int = 1):
        self.name, self.command, self.setup, self.weight = name, command, setup, weight


def _copy(src: Path, dst: Path) -> Path:
    if src.is_dir():
        shutil.copytree(src, dst)
    else:
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src, dst)
    return dst


def _files(d: Path, pattern: str = "*") -> List[Path]:
    return sorted(p for p in d.rglob(pattern) if p.is_file())


def _pick(rnd: random.Random, files: List[Path], k: int) -> List[Path]:
    return rnd.sample(files, min(k, len(files))) if files else []


def make_scenarios(fx: Path) -> List[Scenario]:
    out: List[Scenario] = []
    dump_cases = [c for c in ("mlp_bf16_stat_mix", "mlp_bf16_md5", "mlp_bf16_stat_L1", "cnn_fp16_stat_mix",
                              "mlp_bf16_stat_mix_v26dump", "mlp_bf16_tensor_mix", "cnn_fp16_tensor_mix",
                              "mindspore_cpu_mix", "torch_npu_stubcann_cpu_mix")
                  if (fx / c / "target" / "step0").is_dir()]

    def rank_dir(case: str, side: str) -> Path:
        step = fx / case / side / "step0"
        return next(p for p in sorted(step.iterdir()) if p.is_dir())

    def compare_file(ws: Path, rnd: random.Random):
        case = rnd.choice(dump_cases)
        t = _copy(rank_dir(case, "target"), ws / "t")
        g = _copy(rank_dir(case, "golden"), ws / "g")
        argv = ["compare", "-tp", str(t / "dump.json"), "-gp", str(g / "dump.json"), "-o", str(ws / "out")]
        argv += rnd.sample(["--csv", "-s", "-fm", "-c", "-da", "--no-match-column", "-q"], rnd.randrange(3))
        cand = [t / "dump.json", g / "dump.json", t / "stack.json", t / "construct.json"]
        tensors = _files(t / "dump_tensor_data") + _files(g / "dump_tensor_data") if (t / "dump_tensor_data").is_dir() else []
        return argv, cand + _pick(rnd, tensors, 3)

    def compare_stepdir(ws: Path, rnd: random.Random):
        case = rnd.choice([c for c in dump_cases if "tensor" not in c] + ["multirank_mlp_bf16_stat_mix"])
        t = _copy(fx / case / "target" / "step0", ws / "t")
        g = _copy(fx / case / "golden" / "step0", ws / "g")
        argv = ["compare", "-tp", str(t), "-gp", str(g), "-o", str(ws / "out"), "-q"]
        argv += rnd.sample(["--csv", "-j", "2", "-c"], rnd.randrange(2))
        return argv, _files(t, "*.json") + _files(g, "*.json")

    def compare_json(ws: Path, rnd: random.Random):
        case = rnd.choice(dump_cases)
        t = _copy(rank_dir(case, "target"), ws / "t")
        g = _copy(rank_dir(case, "golden"), ws / "g")
        cfg = ws / "compare.json"
        cfg.write_text(json.dumps({"npu_path": str(t / "dump.json"), "bench_path": str(g / "dump.json"),
                                   "stack_path": str(t / "stack.json"), "is_print_compare_log": True}, indent=2))
        argv = ["-f", "pytorch", "compare", "-i", str(cfg), "-o", str(ws / "out")] + (["-s"] if rnd.random() < .5 else [])
        return argv, [cfg, cfg, t / "dump.json"]

    def compare_mapping(ws: Path, rnd: random.Random):
        t = _copy(rank_dir("mlp_bf16_stat_mix", "target"), ws / "t")
        g = _copy(rank_dir("mlp_bf16_stat_mix", "golden"), ws / "g")
        y = ws / "map.yaml"
        flag = rnd.choice(("-dm", "-am", "-lm", "-cm"))
        if flag == "-dm":
            y.write_text("Functional.linear.0.forward.input.0: Functional.linear.0.forward.input.0\n"
                         "Module.fc1.Linear.forward.0.output.0: Module.fc1.Linear.forward.0.output.0\n")
        elif flag == "-am":
            y.write_text("- ms_api: Functional.linear\n  pt_api: Functional.linear\n  ms_args: [0, 1]\n  pt_args: [0, 1]\n"
                         "  ms_outputs: [0]\n  pt_outputs: [0]\n")
        else:
            y.write_text("Linear:\n  fc1: fc1\n  fc2: fc2\n" if flag == "-lm" else "fc1: fc1\nfc2: fc2\n")
        argv = ["compare", "-tp", str(t / "dump.json"), "-gp", str(g / "dump.json"), "-o", str(ws / "out"), flag, str(y)]
        return argv, [y, y, y]

    def graph(ws: Path, rnd: random.Random):
        case = rnd.choice([c for c in dump_cases if c != "mlp_bf16_stat_L1"])
        t = _copy(rank_dir(case, "target"), ws / "t")
        argv = ["graph", "-tp", str(t), "-o", str(ws / "out"), "-q"]
        cand = [t / "dump.json", t / "construct.json", t / "stack.json"]
        if rnd.random() < 0.5:
            g = _copy(rank_dir(case, "golden"), ws / "g")
            argv += ["-gp", str(g)]
            cand += [g / "dump.json", g / "construct.json", g / "stack.json"]
        argv += rnd.sample(["--db", "-oc", "-cs", "-fm"], rnd.randrange(2))
        return argv, cand

    def graph_json(ws: Path, rnd: random.Random):
        case = rnd.choice([c for c in dump_cases if c != "mlp_bf16_stat_L1"])
        t = _copy(rank_dir(case, "target"), ws / "t")
        g = _copy(rank_dir(case, "golden"), ws / "g")
        cfg = ws / "compare.json"
        cfg.write_text(json.dumps({"npu_path": str(t), "bench_path": str(g), "is_print_compare_log": True}, indent=2))
        argv = ["-f", "pytorch", "graph", "-i", str(cfg), "-o", str(ws / "out"), "-q"]
        return argv, [cfg, cfg, t / "construct.json"]

    def merge(ws: Path, rnd: random.Random):
        base = fx / "multirank_mlp_bf16_stat_mix" / "reference_out"
        src = rnd.choice([d for d in ("v833_compare_stepdir", "v26_compare_stepdir_xlsx", "v26_compare_stepdir_csv")
                          if (base / d).is_dir()])
        d = _copy(base / src, ws / "reports")
        cfg = _copy(base / "_inputs" / "merge_config.yaml", ws / "merge.yaml")
        argv = ["merge_result", "-i", str(d), "-o", str(ws / "out"), "-config", str(cfg), "-q"]
        return argv, _files(d) + [cfg]

    def op_generate(ws: Path, rnd: random.Random):
        case = rnd.choice(("mlp_bf16_stat_mix", "mlp_bf16_tensor_mix"))
        t = _copy(rank_dir(case, "target"), ws / "t")
        cfg = ws / "config_op.json"
        cfg.write_text(json.dumps({"dump_json_path": str(t / "dump.json"), "api_name": "Functional.linear.0",
                                   "extract_api_path": str(ws / "extract.json"), "propagation": rnd.choice(("forward", "backward")),
                                   "data_mode": "real_data" if "tensor" in case else "random_data",
                                   "random_seed": 1234, "iter_times": 1}, indent=1))
        argv = ["op_generate", "-i", str(cfg), "-o", str(ws / "out")]
        tensors = _files(t / "dump_tensor_data", "Functional.linear.0.*") if (t / "dump_tensor_data").is_dir() else []
        return argv, [cfg, cfg, t / "dump.json"] + _pick(rnd, tensors, 2)

    def code_mapping(ws: Path, rnd: random.Random):
        src = fx / "mindspore_ir" / rnd.choice(("train", "infer"))
        ir = _copy(next((src / "dump").rglob("*.ir")), ws / "graph.ir")
        npys = _files(src / "dump", "*.npy")
        dump = ws / "dump"
        dump.mkdir()
        for p in _pick(rnd, npys, 6):
            shutil.copyfile(p, dump / p.name)
        argv = ["code_mapping", "--ir", str(ir), "--dump_data", str(dump), "--output", str(ws / "out")]
        return argv, [ir, ir] + _files(dump)

    def kernel(ws: Path, rnd: random.Random):
        src = fx / "mindspore_ir" / "train" / "dump"
        t = ws / "t"
        g = ws / "g"
        for side in (t, g):
            for p in _files(src / "rank_0" / "Net"):
                rel = p.relative_to(src)
                if rnd.random() < 0.5 or side is t:
                    (side / rel.parent).mkdir(parents=True, exist_ok=True)
                    shutil.copyfile(p, side / rel)
        argv = ["compare", "-tp", str(t), "-gp", str(g), "-o", str(ws / "out"), "--rank", "0", "-q"]
        return argv, _files(t) + _files(g)

    def config_json(ws: Path, rnd: random.Random):
        case = rnd.choice([c for c in dump_cases if (fx / c / "configs").is_dir()])
        cfgs = _files(fx / case / "configs", "*.json")
        cfg = _copy(rnd.choice(cfgs), ws / "config.json")
        return ["@config", str(cfg), str(ws / "dump")], [cfg, cfg, cfg]

    def nan_analyze(ws: Path, rnd: random.Random):
        case = rnd.choice(["multirank_mlp_bf16_stat_mix"] * 2 + [c for c in dump_cases if "md5" not in c])
        step = _copy(fx / case / rnd.choice(("target", "golden")) / "step0", ws / "step")
        argv = rnd.choice((["-f", "pytorch", "nan_analyze"], ["nan_analyze"], ["overflow_check"]))
        argv = argv + ["-i", str(step), "-o", str(ws / "out"), "-q"] + (["-j", "2"] if rnd.random() < .2 else [])
        files = _files(step, "*.json")
        return argv, files + _pick(rnd, [p for p in files if p.name == "dump.json"], 2)

    def run_ut(ws: Path, rnd: random.Random):
        case = rnd.choice(("mlp_bf16_stat_mix", "mlp_bf16_stat_L1", "mlp_bf16_tensor_mix"))
        t = _copy(rank_dir(case, "target"), ws / "t")
        command = rnd.choice(("-f pytorch run_ut", "acc_check", "-f pytorch multi_run_ut"))
        argv = command.split() + ["-api_info", str(t / "dump.json"), "-o", str(ws / "out"), "-q", "--timeout", "20"]
        if "multi" in command:
            argv += ["-n", "2"]
        tensors = _files(t / "dump_tensor_data") if (t / "dump_tensor_data").is_dir() else []
        return argv, [t / "dump.json", t / "dump.json"] + _pick(rnd, tensors, 2)

    def _white_list(ws: Path, rnd: random.Random, dump_json: Path) -> List[str]:
        """A config.json whose run_ut white_list keeps 1-3 APIs of the dump (each input stays a few seconds)."""
        try:
            names = list(json.loads(dump_json.read_text())["data"])
        except Exception:  # noqa: BLE001 - the fixture itself is fine; only a copy is mutated later
            names = []
        apis = sorted({n.split(".")[1] for n in names if n.count(".") >= 3 and not n.startswith("Module.")})
        cfg = ws / "ut_config.json"
        cfg.write_text(json.dumps({"run_ut": {"white_list": rnd.sample(apis, min(len(apis), rnd.randint(1, 3)))}}))
        return ["-config", str(cfg)]

    def _set_overflow(dump_json: Path, rnd: random.Random) -> None:
        """Give one to three forward outputs an inf/nan Max or Min, so that run_overflow_check re-runs them."""
        doc = json.loads(dump_json.read_text())
        fwd = [k for k in doc.get("data", {}) if k.endswith(".forward") and not k.startswith("Module.")]
        for k in rnd.sample(fwd, min(len(fwd), rnd.randint(1, 3))):
            outs = doc["data"][k].get("output") or []
            outs = outs if isinstance(outs, list) else [outs]
            for o in outs:
                if isinstance(o, dict) and "Max" in o:
                    o[rnd.choice(("Max", "Min"))] = rnd.choice(("inf", "-inf", "nan", float("inf"), float("nan")))
        dump_json.write_text(json.dumps(doc, indent=1))

    def run_overflow_check(ws: Path, rnd: random.Random):
        case = rnd.choice([c for c in ("mlp_bf16_stat_mix", "mlp_bf16_stat_L1", "cnn_fp16_stat_mix", "mlp_bf16_tensor_mix")
                           if c in dump_cases])
        t = _copy(rank_dir(case, "target"), ws / "t")
        if rnd.random() < 0.7:
            _set_overflow(t / "dump.json", rnd)
        argv = ["-f", "pytorch", "run_overflow_check", "-api_info", str(t / "dump.json"), "-q", "--timeout", "20"]
        if rnd.random() < 0.5:
            argv += ["-o", str(ws / "out")]
        if rnd.random() < 0.2:
            argv += ["--data_mode", rnd.choice(("random_data", "real_data"))]
        tensors = _files(t / "dump_tensor_data") if (t / "dump_tensor_data").is_dir() else []
        return argv, [t / "dump.json", t / "dump.json"] + _pick(rnd, tensors, 2)

    def run_ut_ms(ws: Path, rnd: random.Random):
        """MindSpore run_ut on a MindSpore dump (about 1.5 s an input): needs MindSpore, so weight 0; run it with
        ``.venv-ms/bin/python tools/fuzz.py --only run_ut_ms`` (under .venv every input is the clean error
        "No module named 'mindspore'")."""
        t = _copy(rank_dir("mindspore_cpu_mix", "target"), ws / "t")
        argv = ["-f", "mindspore", "run_ut", "-api_info", str(t / "dump.json"), "-o", str(ws / "out"), "-q", "-j", "1",
                "--timeout", "20"]
        if rnd.random() < 0.2:
            argv += ["--data_mode", rnd.choice(("random_data", "real_data"))]
        tensors = _files(t / "dump_tensor_data") if (t / "dump_tensor_data").is_dir() else []
        return argv, [t / "dump.json", t / "dump.json"] + _pick(rnd, tensors, 2)

    def run_ut_resume(ws: Path, rnd: random.Random):
        """run_ut -csv_path on the result/details CSVs of an earlier run (made once per worker), mutated."""
        case = "mlp_bf16_stat_mix"
        if "resume" not in _MADE:
            tmp = Path(tempfile.mkdtemp(prefix="msprobe-fuzz-resume-"))
            from msprobe.cli.main import main as _main
            with open(os.devnull, "w") as null, contextlib.redirect_stdout(null), contextlib.redirect_stderr(null):
                _main(["-f", "pytorch", "run_ut", "-api_info", str(rank_dir(case, "target") / "dump.json"),
                       "-o", str(tmp), "-q", "-j", "1"])
            _MADE["resume"] = {p.name: p.read_bytes() for p in tmp.glob("accuracy_checking_*.csv")}
            shutil.rmtree(tmp, ignore_errors=True)
        t = _copy(rank_dir(case, "target"), ws / "t")
        res = ws / "resume"   # appended to by the run: not an input (see run_one)
        res.mkdir()
        files = []
        for name, data in _MADE["resume"].items():
            rows = data.split(b"\n")
            if rnd.random() < 0.5 and len(rows) > 3:  # an interrupted run: its last rows missing
                data = b"\n".join(rows[:rnd.randrange(2, len(rows))])
            (res / name).write_bytes(data)
            files.append(res / name)
        for p in _pick(rnd, files, 1):
            if rnd.random() < 0.5:
                p.write_bytes(mutate_csv(p.read_bytes(), rnd))
        result = next((p for p in files if "_result_" in p.name), res / "accuracy_checking_result_20260101000000.csv")
        argv = ["-f", "pytorch", "run_ut", "-api_info", str(t / "dump.json"), "-csv_path", str(result), "-q", "-j", "1",
                "--timeout", "20"] + _white_list(ws, rnd, t / "dump.json")
        return argv, files + files + [t / "dump.json"]

    def api_precision_compare(ws: Path, rnd: random.Random):
        from msprobe.core.acc_check.results import DETAILS_HEADER
        import csv as _csv

        rows = []
        for k, (api, dtype) in enumerate((("Functional.linear", "torch.bfloat16"), ("Functional.softmax", "torch.float32"),
                                          ("Tensor.__add__", "torch.float16"), ("Torch.argmax", "torch.int64"),
                                          ("Functional.conv2d", "torch.float16"), ("Torch.sum", "torch.float64"))):
            for io in ("forward.output.0", "backward.output.0"):
                rows.append([f"{api}.{k}.{io}", "torch.float32", dtype, "(4, 8)"] +
                            [f"{rnd.random() * rnd.choice((1e-4, 1e-2, 1, 100)):.6g}" for _ in range(17)] +
                            [rnd.choice(("pass", "error", "Warning", "SKIP")), "\nmetrics"])
        pair = []
        for side in ("npu", "gpu"):
            path = ws / f"{side}_details.csv"
            with open(path, "w", encoding="utf-8-sig", newline="") as fh:
                w = _csv.writer(fh)
                w.writerow(DETAILS_HEADER)
                for r in rows:
                    w.writerow(r[:4] + [c if rnd.random() < .7 else f"{rnd.random():.4g}" for c in r[4:21]] + r[21:])
            pair.append(path)
        argv = ["api_precision_compare", "-npu", str(pair[0]), "-gpu", str(pair[1]), "-o", str(ws / "out")]
        return argv, pair

    # ---- config_check, parse, grad_compare, csv2tensorboard: small valid inputs made once per worker (_MADE),
    # written fresh for every input, then mutated like the fixture files
    def config_packs() -> Dict[str, Dict[str, bytes]]:
        if "packs" not in _MADE:
            from msprobe.core.config_check import pack as P
            from msprobe.core.config_check.checker import base_entries

            src = Path(tempfile.mkdtemp(prefix="msprobe-fuzz-made-"))
            try:
                (src / "train.sh").write_text(_TRAIN_SH)
                (src / "config.yaml").write_text(_TRAIN_YAML)
                base = base_entries([str(src / "train.sh"), str(src / "config.yaml")])
            finally:
                shutil.rmtree(src, ignore_errors=True)
            packs = {}
            for side, scale in (("bench", 1.0), ("cmp", 1.01)):
                entries = dict(base)
                for step in range(2):
                    for rank in range(2):
                        entries[P.weights_entry(step, rank)] = P.to_json(
                            {f"{k}.weight": {"max": 1.5 * scale, "min": -1.0, "mean": 0.01 * (step + 1), "norm": 3.0 + rank}
                             for k in ("fc1", "fc2")})
                        entries[P.dataset_entry(step, rank)] = P.to_json(
                            {"args": {"0": {"max": 2.0, "min": -2.0, "mean": 0.1 * rank * scale, "norm": 5.0}}, "kwargs": {}})
                        entries[P.random_entry(rank, step if step else None)] = P.to_json(
                            {"torch.rand": [{"count": 1 + step, "stack": ["train.py:12 main", "train.py:40 <module>"]}]})
                if side == "cmp":
                    entries[P.ENV] = P.to_json({"NCCL_DETERMINISTIC": "1", "HCCL_DETERMINISTIC": "true"})
                packs[side] = entries
            _MADE["packs"] = packs
        return _MADE["packs"]

    def write_pack(path: Path, entries: Dict[str, bytes], rnd: random.Random) -> None:
        """The pack zip, with one of its entries mutated, removed, or an odd entry added (sometimes)."""
        import zipfile

        entries = dict(entries)
        r = rnd.random()
        name = rnd.choice(sorted(entries))
        if r < 0.6:
            entries[name] = mutate_bytes(entries[name], rnd, "json" if name != "pip" else "bin")[0]
        elif r < 0.7:
            del entries[name]
        elif r < 0.8:
            entries[rnd.choice(("../escape.json", "/abs.json", "weights/step0/rank0", "weights/stepx/rank0/weight.json",
                                "random/rank99999999999999999999.json", "dataset/step0/rank0/dataset.json/x"))] = b"{}"
        with zipfile.ZipFile(path, "w", rnd.choice((zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED))) as zf:
            for k, v in entries.items():
                zf.writestr(k, v)

    def config_check_compare(ws: Path, rnd: random.Random):
        packs = config_packs()
        b, c = ws / "bench.zip", ws / "cmp.zip"
        write_pack(b, packs["bench"], rnd)
        write_pack(c, packs["cmp"] if rnd.random() < .8 else packs["bench"], rnd)
        argv = rnd.choice((["-f", "pytorch"], ["-f", "mindspore"], [])) + ["config_check", "-c", str(b), str(c),
                                                                           "-o", str(ws / "out")]
        return argv, ([b, c] if rnd.random() < 0.3 else [])   # mostly the entries' mutations alone

    def config_check_pack(ws: Path, rnd: random.Random):
        sh, yml = ws / "train.sh", ws / "config.yaml"
        sh.write_text(_TRAIN_SH)
        yml.write_text(_TRAIN_YAML)
        scripts = rnd.sample([str(sh), str(yml)], rnd.randrange(1, 3))
        argv = ["config_check", "-d"] + scripts + ["-o", str(ws / "out" / "pack.zip")]
        return argv, [sh, yml, sh, yml]

    def config_check_ckpt(ws: Path, rnd: random.Random):
        if "ckpt" not in _MADE:
            import io
            import torch

            torch.manual_seed(1)
            qkv, proj, norm = torch.randn(8, 4), torch.randn(4, 6), torch.ones(4)
            made = {}
            for r in range(2):
                model = {"decoder.layers.0.self_attention.linear_qkv.weight": qkv.chunk(2, 0)[r],
                         "decoder.layers.0.self_attention.linear_proj.weight": proj.chunk(2, 1)[r],
                         "decoder.layers.0.input_layernorm.weight": norm}
                buf = io.BytesIO()
                torch.save({"model": model, "args": argparse.Namespace(tensor_model_parallel_size=2,
                                                                        pipeline_model_parallel_size=1),
                            "iteration": 5}, buf)
                made[f"iter_0000005/mp_rank_{r:02d}/model_optim_rng.pt"] = buf.getvalue()
            made["latest_checkpointed_iteration.txt"] = b"5"
            _MADE["ckpt"] = made
        dirs = []
        (ws / "out").mkdir()
        for side in ("a", "b"):
            for rel, data in _MADE["ckpt"].items():
                p = ws / side / rel
                p.parent.mkdir(parents=True, exist_ok=True)
                p.write_bytes(data)
            dirs.append(ws / side)
        argv = ["config_check", "-c", str(dirs[0]), str(dirs[1]), "-o", str(ws / "out" / "ckpt_similarity.json")]
        return argv, _files(dirs[0]) + _files(dirs[1], "*.pt")

    def parse(ws: Path, rnd: random.Random):
        import numpy as np

        sub = rnd.choice(("pt", "cn", "cn", "pk", "dc"))
        if sub == "pk":
            case = rnd.choice(dump_cases)
            if rnd.random() < 0.3:   # a legacy .pkl dump: JSON lines [name, id, 0, dtype, shape, [max, min, mean]]
                lines = []
                for k in range(6):
                    name = rnd.choice(("Functional_linear_0_forward", "Functional_relu_0_forward", "Torch_add_1_backward"))
                    lines.append(json.dumps([f"{name}_input.{k}", k, 0, "torch.float32", [2, k + 1],
                                             [rnd.random(), -rnd.random(), 0.1, 0.5]]))
                    lines.append(json.dumps([f"{name}_stack_info", [["train.py", 10 + k, "forward", "y = f(x)"]]]))
                if rnd.random() < 0.5:
                    line = json.loads(rnd.choice(lines))
                    line[rnd.randrange(len(line))] = rnd.choice(_odd_values(rnd))
                    lines.append(_expand_deep(json.dumps(line)))
                t = ws / "api_stack_dump.pkl"
                t.write_text("\n".join(lines) + "\n")
                api = rnd.choice(("Functional_linear_0_forward", "Functional", "Torch_add", "Functional_relu"))
            else:
                t = _copy(rank_dir(case, "target") / "dump.json", ws / "dump.json")
                if (rank_dir(case, "target") / "stack.json").is_file() and rnd.random() < 0.6:
                    st = _copy(rank_dir(case, "target") / "stack.json", ws / "stack.json")
                    api = rnd.choice(("Functional.linear.0", "Functional.conv2d.0", "Module."))
                    argv = ["parse", "pk", "-f", str(t), "-n", api]
                    return argv, [t, st, st]
                api = rnd.choice(("Functional", "Functional.linear.0", "Module", "Functional.conv2d.0.forward"))
            argv = ["parse", "pk", "-f", str(t), "-n", api]
            return argv, [t, t]
        if sub == "dc" or (sub == "pt" and rnd.random() < 0.3):
            case = rnd.choice([c for c in dump_cases if "tensor" in c and "mindspore" not in c] or dump_cases)
            pts = _files(rank_dir(case, "target") / "dump_tensor_data", "*.pt") if \
                (rank_dir(case, "target") / "dump_tensor_data").is_dir() else []
            if pts:
                src = rnd.choice(pts)
                if sub == "dc":
                    d = ws / "pts"
                    for p in [src] + _pick(rnd, pts, 3):
                        _copy(p, d / p.name)
                    argv = ["parse", "dc", "-n", str(d if rnd.random() < .5 else d / src.name), "-out", str(ws / "out")]
                    return argv, _files(d) + [d / src.name] * 2
                p = _copy(src, ws / "a.pt")
                return ["parse", "pt", "-n", str(p)], [p, p]
        g = np.random.default_rng(rnd.randrange(1 << 30))
        shape = rnd.choice(((4, 8), (3,), (2, 3, 4), (1,), (0,), (40, 40)))
        dtype = rnd.choice((np.float32, np.float16, np.float64, np.int64, np.bool_))
        a = (g.standard_normal(shape) * 3).astype(dtype)
        b = (a.astype(np.float64) + g.standard_normal(shape) * rnd.choice((0, 1e-4, 1))).astype(
            rnd.choice((dtype, np.float32)))
        pa, pb = ws / "my.npy", ws / "golden.npy"
        np.save(pa, a)
        np.save(pb, b)
        if sub == "pt":
            return ["parse", "pt", "-n", str(pa)], [pa, pa]
        argv = ["parse", "cn", "-m", str(pa), "-g", str(pb)]
        for opt in rnd.sample([["-s"], ["-p", str(rnd.choice((0, 5, 10**9, -1)))],
                               ["-al", rnd.choice(("0", "1e-3", "nan", "-1", "1e308"))],
                               ["-rl", rnd.choice(("0.5", "inf", "x", "0"))]], rnd.randrange(3)):
            argv += opt
        return argv, [pa, pb]

    def grad_dumps():
        if "grad" not in _MADE:
            import numpy as np
            from msprobe.core.grad_probe import stats

            g = np.random.default_rng(0)
            names, shapes = ["fc1.weight", "fc1.bias", "fc2.weight"], [(4, 8), (4,), (2, 4)]
            made = {}
            for run, noise in (("a", 0.0), ("b", 0.5)):
                for step in range(3):
                    grads = [g.standard_normal(s) + (noise * step) for s in shapes]
                    numbers = np.array([[x.max(), x.min(), np.linalg.norm(x)] for x in grads])
                    rows = stats.summary_rows("L1", [], names, shapes, numbers)
                    made[f"{run}/rank0/grad_summary_{step}.csv"] = stats.csv_bytes(rows)
                    for n, x in zip(names, grads):
                        buf = __import__("io").BytesIO()
                        np.save(buf, x > 0)
                        made[f"{run}/rank0/step{step}/{n}.npy"] = buf.getvalue()
            _MADE["grad"] = made
        return _MADE["grad"]

    def grad_compare(ws: Path, rnd: random.Random):
        for rel, data in grad_dumps().items():
            p = ws / rel
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_bytes(data)
        rank = rnd.random() < 0.4
        d1, d2 = (ws / "a" / "rank0", ws / "b" / "rank0") if rank else (ws / "a", ws / "b")
        argv = ["grad_compare", "-d1", str(d1), "-d2", str(d2), "-o", str(ws / "out")] + \
            (["--no_plots"] if rnd.random() < 0.8 else [])
        files = _files(ws / "a") + _files(ws / "b")
        csvs = [f for f in files if f.suffix == ".csv"]
        if rnd.random() < 0.4:   # a structural CSV change on top of the byte-level ones
            p = rnd.choice(csvs)
            p.write_bytes(mutate_csv(p.read_bytes(), rnd))
        return argv, _pick(rnd, [f for f in files if f.suffix == ".csv"], 2) + _pick(rnd, files, 4)

    def csv2tensorboard(ws: Path, rnd: random.Random):
        mon = ws / "monitor_output"
        ops = ["norm", "min", "max", "zeros", "nans", "mean"]
        files = []
        for rank in range(rnd.choice((1, 2))):
            d = mon / f"Nov25_14-04-1{rank}-rank{rank}-abc{rank}"
            d.mkdir(parents=True)
            for kind, micro in (("actv", True), ("grad_reduced", False), ("exp_avg", False)):
                head = ["vpp_stage", "name", "step"] + (["micro_step"] if micro else []) + ops + ["shape", "dtype"]
                lines = [",".join(head)]
                for step in range(3):
                    for name in ("blocks.0.fc1.output", "blocks.0.fc1.weight"):
                        for m in range(2 if micro else 1):
                            vals = [f"{rnd.random() * 10:.6g}" for _ in ops]
                            lines.append(",".join(["0", name, str(step)] + ([str(m)] if micro else []) + vals +
                                                  ['"[4, 8]"', "torch.float32"]))
                p = d / f"{kind}_0-2.csv"
                p.write_text("\n".join(lines) + "\n")
                files.append(p)
        if rnd.random() < 0.4:
            p = rnd.choice(files)
            p.write_bytes(mutate_csv(p.read_bytes(), rnd))
        argv = ["csv2tensorboard", "-d", str(mon), "-o", str(ws / "out")]
        if rnd.random() < 0.3:
            argv += ["--types", rnd.choice(("actv", "grad_reduced,exp_avg", "other", "actv,,x"))]
        if rnd.random() < 0.2:
            argv += [rnd.choice(("--time_start", "--time_end")), rnd.choice(("Nov25_14-04-10", "Nov25_14-04-11", "bad", ""))]
        return argv, files + _pick(rnd, files, 2)

    if dump_cases:
        out += [Scenario("compare_file", "compare", compare_file, 6), Scenario("compare_stepdir", "compare", compare_stepdir, 2),
                Scenario("compare_json", "compare", compare_json, 2), Scenario("compare_mapping", "compare", compare_mapping, 1),
                Scenario("graph", "graph", graph, 4), Scenario("graph_json", "graph", graph_json, 1), Scenario("op_generate", "op_generate", op_generate, 2),
                Scenario("config_json", "config", config_json, 2), Scenario("nan_analyze", "nan_analyze", nan_analyze, 2),
                Scenario("api_precision_compare", "api_precision_compare", api_precision_compare, 1),
                # run_ut starts worker processes and re-runs every API (~3 s an input): weight 0 in the mixed run,
                # fuzzed on its own with --only run_ut (see docs/reliability.md)
                Scenario("run_ut", "run_ut", run_ut, 0),
                # a white_list of 1-3 APIs, -j 1: about a second an input; weight 1 in the mixed run
                Scenario("run_overflow_check", "run_overflow_check", run_overflow_check, 1),
                Scenario("run_ut_resume", "run_ut", run_ut_resume, 1)]
    if "mindspore_cpu_mix" in dump_cases:
        out.append(Scenario("run_ut_ms", "run_ut", run_ut_ms, 0))
    if (fx / "multirank_mlp_bf16_stat_mix" / "reference_out").is_dir():
        out.append(Scenario("merge_result", "merge_result", merge, 2))
    if (fx / "mindspore_ir").is_dir():
        out += [Scenario("code_mapping", "code_mapping", code_mapping, 1), Scenario("kernel_compare", "compare", kernel, 1)]
    out += [Scenario("config_check_compare", "config_check", config_check_compare, 2),
            Scenario("config_check_pack", "config_check", config_check_pack, 1),
            Scenario("config_check_ckpt", "config_check", config_check_ckpt, 1),
            Scenario("grad_compare", "grad_compare", grad_compare, 2),
            Scenario("csv2tensorboard", "csv2tensorboard", csv2tensorboard, 2)]
    if dump_cases:
        out.append(Scenario("parse", "parse", parse, 2))
    return out


# ------------------------------------------------------------------------------------------- one input


class Hang(BaseException):
    pass


def _on_alarm(signum, frame):
    raise Hang()


def _hash_tree(paths: List[Path]) -> Dict[str, str]:
    out = {}
    for root in paths:
        items = [root] if root.is_file() else (sorted(root.rglob("*")) if root.is_dir() else [])
        for p in items:
            if p.is_file() and not p.is_symlink():
                out[str(p)] = hashlib.sha1(p.read_bytes()).hexdigest()
    return out


def run_config(cfg: str, dump_dir: str) -> int:
    """The dump's config.json loader as PrecisionDebugger uses it: 0, or 2 with an msprobe: error line."""
    from msprobe.core.dump.config import load_dump_config
    from msprobe.core.errors import MsprobeError

    try:
        load_dump_config(cfg, dump_path=dump_dir)
    except MsprobeError as exc:
        print(f"msprobe: error: {exc}", file=sys.stderr)
        return 2
    return 0


def _innermost_frame(text: str) -> str:
    frames = re.findall(r'File "([^"]+)", line (\d+), in (\S+)', text)
    ours = [f for f in frames if "/msprobe/" in f[0]]
    f = (ours or frames or [("?", "0", "?")])[-1]
    path = f[0].split("/msprobe/", 1)[-1] if "/msprobe/" in f[0] else os.path.basename(f[0])
    return f"{path}:{f[2]}"


def run_one(seed: int, index: int, scenarios: List[Scenario], timeout: float, keep: Optional[Path] = None) -> dict:
    """Generate input ``index`` and run it; a result dict (outcome, signature, scenario, ...)."""
    rnd = random.Random(seed * 1_000_003 + index)
    weights = [s.weight for s in scenarios]
    if not any(weights):   # --only naming weight-0 scenarios alone
        weights = [1] * len(scenarios)
    sc = rnd.choices(scenarios, weights)[0]
    ws = Path(tempfile.mkdtemp(prefix=f"msprobe-fuzz-{index}-"))
    logdir = ws / "_logs"
    result = {"index": index, "scenario": sc.name, "command": sc.command, "mutations": []}
    try:
        argv, cand = sc.setup(ws, rnd)
        cand = [c for c in cand if c.exists()]
        for _ in range(rnd.choice((1, 1, 1, 2, 3))):
            if not cand:
                break
            target = rnd.choice(cand)
            if target.is_file():
                result["mutations"].append(f"{target.relative_to(ws)}:{mutate_file(target, rnd)}")
        if rnd.random() < 0.05:  # argument-level mutation: a very long or odd path, a flag twice
            i = rnd.randrange(1, len(argv))
            argv[i] = rnd.choice((argv[i] + "x" * 100_000, "", "-", argv[i] + "/", "\u4e2d" * 50, argv[i] + "\x00"))
            result["mutations"].append(f"argv[{i}]")
        inputs = [p for p in ws.iterdir() if p.name not in ("out", "_logs", "dump", "extract.json", "resume")]
        before = _hash_tree(inputs)
        result["argv"] = [a if len(a) < 300 else a[:100] + f"...({len(a)} chars)" for a in argv]
        out_file = ws / "_console.txt"
        os.environ["MSPROBE_LOG_DIR"] = str(logdir)
        os.environ.pop("MSPROBE_DEBUG", None)
        sys.stdout.flush()
        sys.stderr.flush()
        saved = os.dup(1), os.dup(2)
        fd = os.open(out_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        os.close(fd)
        escaped = None
        old = signal.signal(signal.SIGALRM, _on_alarm)
        signal.alarm(max(1, int(timeout)))
        cwd = os.getcwd()
        redirect = contextlib.ExitStack()  # Python-level streams too (pytest replaces sys.stdout/stderr)
        redirect.enter_context(contextlib.redirect_stdout(sys.__stdout__))
        redirect.enter_context(contextlib.redirect_stderr(sys.__stderr__))
        try:
            os.chdir(ws)
            if argv[0] == "@config":
                rc = run_config(argv[1], argv[2])
            else:
                from msprobe.cli.main import main

                rc = main(argv)
        except SystemExit as exc:
            rc = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 2)
        except Hang:
            rc = None
        except BaseException:  # noqa: BLE001 - an exception out of main is what we look for
            escaped = traceback.format_exc()
            rc = -1
        finally:
            signal.alarm(0)
            signal.signal(signal.SIGALRM, old)
            redirect.close()
            os.chdir(cwd)
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            os.close(saved[0])
            os.close(saved[1])
        console = out_file.read_text("utf-8", "replace")
        if escaped:
            console += "\n" + escaped
        after = _hash_tree(inputs)
        result["rc"] = rc
        result["console"] = console[-4000:]
        if rc is None:
            outcome, sig = "hang", f"{sc.command}:hang"
        elif "Traceback (most recent call last)" in console:
            outcome = "traceback"
            exc_line = [line for line in console.splitlines() if re.match(r"^\w[\w.]*(Error|Exception|Exit|Interrupt)\b", line)]
            sig = f"{sc.command}:traceback:{(exc_line[-1].split(':')[0] if exc_line else '?')}:{_innermost_frame(console)}"
        elif "internal error" in console:
            outcome = "internal error"
            m = re.search(r"internal error: (\w+)", console)
            logs = sorted(logdir.glob("*.log")) if logdir.is_dir() else []
            tb = logs[-1].read_text("utf-8", "replace") if logs else ""
            result["traceback"] = tb[-6000:]
            sig = f"{sc.command}:internal:{m.group(1) if m else '?'}:{_innermost_frame(tb)}"
        elif rc == 0:
            outcome, sig = "success", ""
        elif rc in (1, 2) and re.search(r"^msprobe( \w+)?: error:", console, re.M):
            outcome, sig = "clean error", ""
        else:
            outcome, sig = "traceback", f"{sc.command}:rc{rc}"
        if before != after:
            changed = sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))
            result["changed"] = [str(Path(c).relative_to(ws)) for c in changed][:10]
            outcome, sig = "damaged", f"{sc.command}:damaged"
        result["outcome"] = outcome
        result["signature"] = sig
        if sig and keep is not None:
            name = re.sub(r"[^\w.-]+", "_", sig)[:150]
            dest = keep / name
            if not dest.exists():
                try:
                    shutil.copytree(ws, dest, ignore=shutil.ignore_patterns("out", "_logs"), symlinks=True)
                    (dest / "result.json").write_text(json.dumps(result, indent=1, default=str))
                except OSError:
                    pass
        return result
    finally:
        shutil.rmtree(ws, ignore_errors=True)


# ------------------------------------------------------------------------------------------- driver


def _worker(seed, indexes, fixtures, timeout, keep, queue, only=""):
    import logging

    logging.getLogger("msprobe").handlers[:] = []
    scenarios = make_scenarios(Path(fixtures))
    if only:
        scenarios = [s for s in scenarios if s.name in set(only.split(","))]
    for i in indexes:
        queue.put(("start", i, os.getpid()))
        try:
            res = run_one(seed, i, scenarios, timeout, Path(keep) if keep else None)
        except Exception as exc:  # noqa: BLE001 - a harness problem: report, keep going
            res = {"index": i, "outcome": "harness", "signature": f"harness:{type(exc).__name__}:{exc}"[:200]}
        queue.put(("done", i, res))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-n", type=int, default=100_000, help="number of inputs (default 100000)")
    ap.add_argument("-j", type=int, default=max(1, (os.cpu_count() or 2)), help="worker processes")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--start", type=int, default=0, help="first input index")
    ap.add_argument("--timeout", type=float, default=60.0, help="seconds one input may take before it is a hang")
    ap.add_argument("--out", default="fuzz_out", help="folder for failing inputs (one per new signature)")
    ap.add_argument("--fixtures", default=str(DEFAULT_FIXTURES))
    ap.add_argument("--only", default="", help="comma-separated scenario names")
    ap.add_argument("--every", type=int, default=500, help="print the figures every N inputs")
    ap.add_argument("--batch", type=int, default=200, help="inputs per worker process before it is replaced")
    args = ap.parse_args(argv)
    fx = Path(args.fixtures)
    if not fx.is_dir():
        print(f"fuzz: fixtures not found at {fx}", file=sys.stderr)
        return 2
    scen = make_scenarios(fx)
    if args.only:
        names = set(args.only.split(","))
        scen = [s for s in scen if s.name in names]
    keep = Path(args.out).resolve()
    keep.mkdir(parents=True, exist_ok=True)
    counts = {k: 0 for k in OUTCOMES}
    counts["harness"] = 0
    sigs: Dict[str, int] = {}
    per_scenario: Dict[str, Dict[str, int]] = {}
    ctx = mp.get_context("fork")
    queue = ctx.Queue()
    todo = list(range(args.start, args.start + args.n))
    batches = [todo[i:i + args.batch] for i in range(0, len(todo), args.batch)]
    running: Dict[int, dict] = {}
    t0 = time.time()
    done = 0
    log = open(keep / "results.jsonl", "a")

    def launch():
        b = batches.pop(0)
        p = ctx.Process(target=_worker, args=(args.seed, b, str(fx), args.timeout, str(keep), queue, args.only))
        p.start()
        running[p.pid] = {"proc": p, "left": list(b), "current": None, "since": time.time()}

    def record(res):
        nonlocal done
        done += 1
        o = res.get("outcome", "harness")
        counts[o] = counts.get(o, 0) + 1
        per = per_scenario.setdefault(res.get("scenario", "?"), {})
        per[o] = per.get(o, 0) + 1
        s = res.get("signature")
        if s:
            if s not in sigs:
                print(f"  new signature after {done} inputs: {s} (input {res['index']}: {res.get('mutations')})", flush=True)
            sigs[s] = sigs.get(s, 0) + 1
            log.write(json.dumps({k: v for k, v in res.items() if k != "console"}, default=str) + "\n")
            log.flush()
        if done % args.every == 0:
            report()

    def report():
        el = time.time() - t0
        print(f"[{done} inputs, {el:.0f} s] " + ", ".join(f"{k}: {v}" for k, v in counts.items()), flush=True)

    def dispatch(msg):
        kind, i, payload = msg
        for st in running.values():
            if i in st["left"]:
                if kind == "start":
                    st["current"], st["since"] = i, time.time()
                else:
                    st["left"].remove(i)
                    st["current"] = None
                    record(payload)
                break

    while batches or running:
        while batches and len(running) < args.j:
            launch()
        try:
            msg = queue.get(timeout=1.0)
        except Exception:  # noqa: BLE001 - queue.Empty
            msg = None
        if msg:
            dispatch(msg)
        for pid, st in list(running.items()):
            p = st["proc"]
            if st["current"] is not None and time.time() - st["since"] > args.timeout * 2 + 30:
                p.kill()
                p.join()
                i = st["current"]
                st["left"].remove(i)
                record({"index": i, "outcome": "hang", "signature": "hang:killed", "scenario": "?"})
                del running[pid]
                if st["left"]:
                    batches.insert(0, st["left"])
            elif not p.is_alive() and not st["left"]:
                p.join()
                del running[pid]
            elif not p.is_alive():
                # ended with inputs unreported: its last messages may still be in the pipe (a worker that ran
                # its batch to the end exits 0 right after its last put; on a loaded machine the parent can see
                # the exit first), else it died (the OOM killer, os._exit in a command). Every message drained
                # here goes to the worker it belongs to.
                deadline = time.time() + (15.0 if p.exitcode == 0 else 0.5)
                while st["left"] and time.time() < deadline:
                    try:
                        dispatch(queue.get(timeout=0.2))
                    except Exception:  # noqa: BLE001 - queue.Empty
                        pass
                if st["left"]:
                    i = st["current"] if st["current"] in st["left"] else st["left"][0]
                    st["left"].remove(i)
                    record({"index": i, "outcome": "traceback", "signature": f"worker died (exit {p.exitcode})", "scenario": "?"})
                    if st["left"]:
                        batches.insert(0, st["left"])
                del running[pid]
    report()
    print("per scenario:")
    for name, c in sorted(per_scenario.items()):
        print(f"  {name}: " + ", ".join(f"{k} {v}" for k, v in sorted(c.items())))
    if sigs:
        print(f"{len(sigs)} failure signatures (inputs saved under {keep}):")
        for s, n in sorted(sigs.items(), key=lambda x: -x[1]):
            print(f"  {n:6d}  {s}")
    bad = sum(counts[k] for k in ("internal error", "traceback", "hang", "damaged", "harness"))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
