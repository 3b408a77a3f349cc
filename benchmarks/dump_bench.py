"""Step-time benchmark of the PyTorch dump (PrecisionDebugger) against mindstudio-probe 8.3.3 and 26.2.0.

    .venv/bin/python benchmarks/dump_bench.py [--models d256,llama] [--impls ours,ref8,ref26]
                                              [--configs off,stat_L1,mix,md5_L1,tensor_L1] [--steps N]
                                              [--warmup N] [--repeat 1] [--metric wall|cpu]
                                              [--ref8 PATH] [--ref26 PATH] [--tmp-dir DIR] [--no-write]

A TinyTransformer (shared/fixtures/reference/_gen/models.py; copied into benchmarks/dump_bench_worker.py) is
trained with SGD, one thread, every step being

    dbg.start(model); opt.zero_grad(); out = model(x); loss = CE(out, y); loss.backward(); dbg.stop();
    opt.step(); dbg.step()

Models: ``d64`` = 4 blocks, d=64, seq 8, batch 2 (as models.build makes it); ``d256`` = 4 blocks, d=256,
seq 128, batch 2; ``llama`` = transformers' LlamaForCausalLM built from a config (random init, nothing downloaded:
hidden 512, 4 layers, 8 heads / 4 KV heads, seq 512, batch 1; needs ``transformers`` in our venv, and the
reference venvs see it through the same site-packages).  Default: d256 and llama (the realistic points); the
results file keeps the sections of models not run (d64's last run stays until d64 is run again).  Every (implementation, config, model) runs in a fresh subprocess
(benchmarks/dump_bench_worker.py) with its own config.json and dump_path in a temporary directory that is
deleted afterwards; warm-up steps are untimed, then the median ms/step of N timed steps is kept (wall clock;
``--metric cpu``: process CPU time; ``--repeat R``: R rounds, each running every (config, implementation) and the
baseline once, in turn, as fresh processes; the lowest median per point is kept).

Configs: ``none`` (no debugger, with our venv's python; once per round, the lowest median is the baseline), ``off`` (statistics L1 with
``step: [1000000]``, so no timed step is dumped), ``stat_L1`` (statistics, L1, summary_mode statistics), ``mix``
(statistics, level mix), ``md5_L1`` (statistics, L1, summary_mode md5), ``tensor_L1`` (tensor, L1: .pt files).
Each implementation runs with its own defaults (26.2.0's default risk_level FOCUS skips LOW-risk APIs).

The floor (column ``floor ms``): our worker, in its round-1 run of each config, captures the tensors whose
statistics one dumped step measures (each distinct value once) and times, with no tool around them, the cheapest
full pass over them: one fused pass of msprobe's compiled float32 kernel (msprobe/_native/fstats.c) for contiguous
float32 tensors, ``aminmax`` + ``sum`` + ``dot`` (float32) and one ``tolist`` for the others (stat_L1, mix); the
same plus the CRC-32 of the bytes by msprobe.core.crc (zlib-ng) (md5_L1); plus writing the raw bytes to one file
per tensor (tensor_L1).  ``ours added
/ floor`` says how far the tool is from that pass.

Goals (ours vs the faster reference, ``added`` = config ms - none ms): stat_L1, mix, md5_L1: ours added <= 1/3
of the faster reference's; tensor_L1: <= 1/2; off: ours <= 1.05 x the same process's step time before the
debugger was constructed (the worker's --baseline: a same-process A/B, immune to process-to-process noise).

The reference venvs come from --ref8/--ref26, else MSPROBE_REF8/MSPROBE_REF26, else venv833 / venv2620 under
$MSPROBE_REF_CACHE (default ~/.cache/msprobe-ref; see benchmarks/README.md for building them); a missing one, or an implementation that fails to import, gives "n/a" rows with the
reason.  The reference workers run with cwd outside the repository, ``python -E`` and no PYTHONPATH, so they
import the reference msprobe; ours runs with PYTHONPATH=<repo root>.  The module each worker imported is
checked.  The tables are printed and written to benchmarks/dump_results.md (unless --no-write).  Exit status 0
when every measured goal passes, 1 when one fails, 2 when a run fails (ours n/a included; a missing reference
venv is not a failure).
"""

from __future__ import annotations

import argparse
import datetime
import glob
import json
import os
import re
import shlex
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import clean_env, load_average as _load, machine_line  # noqa: E402
from refvenv import portable, ref_cache  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
WORKER = ROOT / "benchmarks" / "dump_bench_worker.py"
RESULTS = ROOT / "benchmarks" / "dump_results.md"

IMPL_LABEL = {"ours": "ours", "ref8": "8.3.3", "ref26": "26.2.0"}
ALL_IMPLS = ["ours", "ref8", "ref26"]
ALL_CONFIGS = ["off", "stat_L1", "mix", "md5_L1", "tensor_L1"]
ALL_MODELS = ["d64", "d256", "llama"]
DEFAULT_MODELS = ["d256", "llama"]
MODEL_DESC = {"d64": "TinyTransformer 4 blocks, d=64, heads 4, seq 8, batch 2",
              "d256": "TinyTransformer 4 blocks, d=256, heads 4, seq 128, batch 2",
              "llama": "transformers LlamaForCausalLM (random init): hidden 512, 4 layers, 8 heads / 4 KV heads, "
                       "intermediate 1408, vocab 8192, seq 512, batch 1, eager attention"}
DEFAULT_STEPS = {"d64": 20, "d256": 5, "llama": 2}
DEFAULT_WARMUP = {"d64": 3, "d256": 3, "llama": 1}
# where the reference venvs are looked for when --ref8/--ref26 and MSPROBE_REF8/MSPROBE_REF26 are not given
METRIC = "wall"   # set from --metric
REF_CACHE = ref_cache()
REF_VENV = {"ref8": "venv833", "ref26": "venv2620"}
# floor kind per config: the worker's floor of the same tensors with no tool (reductions; + CRC-32; + raw writes)
FLOOR_KIND = {"stat_L1": "stat", "mix": "stat", "md5_L1": "md5", "tensor_L1": "tensor"}
# goal per config: (kind, factor)  -- "added": ours added <= factor x faster ref's added; "none": ours <= factor x none
GOALS = {"off": ("none", 1.05), "stat_L1": ("added", 1 / 3), "mix": ("added", 1 / 3), "md5_L1": ("added", 1 / 3),
         "tensor_L1": ("added", 1 / 2)}
GOAL_TEXT = {"off": "ours <= 1.05x none", "stat_L1": "<= 1/3", "mix": "<= 1/3", "md5_L1": "<= 1/3",
             "tensor_L1": "<= 1/2"}


def make_config(name: str, dump_path: str) -> dict:
    cfg = {"task": "statistics", "dump_path": dump_path, "rank": [], "step": [], "level": "L1", "async_dump": False}
    stat = {"scope": [], "list": [], "data_mode": ["all"], "summary_mode": "statistics"}
    if name == "off":
        cfg["step"] = [1000000]
        cfg["statistics"] = stat
    elif name == "stat_L1":
        cfg["statistics"] = stat
    elif name == "mix":
        cfg["level"] = "mix"
        cfg["statistics"] = stat
    elif name == "md5_L1":
        cfg["statistics"] = dict(stat, summary_mode="md5")
    elif name == "tensor_L1":
        cfg["task"] = "tensor"
        cfg["tensor"] = {"scope": [], "list": [], "data_mode": ["all"]}
    else:
        raise ValueError(name)
    return cfg


# ---------------------------------------------------------------------------------------------------------------------
# implementations
# ---------------------------------------------------------------------------------------------------------------------

class Impl:
    def __init__(self, key: str, python: Path | None, env: dict, py_flags: list, note: str | None = None):
        self.key, self.python, self.env, self.py_flags = key, python, env, py_flags
        self.error = note  # set when the implementation cannot run: every row is "n/a (error)"
        self.version = None
        self.module_file = None

    @property
    def label(self):
        return IMPL_LABEL.get(self.key, self.key)


def our_python() -> Path:
    p = ROOT / ".venv" / "bin" / "python"
    return p if p.exists() else Path(sys.executable)


def make_impl(key: str, ref_paths: dict) -> Impl:
    if key == "ours":
        return Impl(key, our_python(), clean_env(PYTHONPATH=ROOT), [])
    venv = Path(ref_paths[key])
    py = venv / "bin" / "python"
    if not py.exists():
        return Impl(key, None, {}, [], f"no venv at {venv} (set --{key} or MSPROBE_{key.upper()})")
    return Impl(key, py, clean_env(), ["-E"])


def _tail(text: str, n: int = 6, width: int = 400) -> str:
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    return " | ".join(lines[-n:])[-width:]


def probe(impl: Impl, tmp_root: str) -> None:
    """Import msprobe.pytorch.PrecisionDebugger with the worker's interpreter/env/cwd; record version/location."""
    if impl.error:
        return
    code = ("import json, msprobe\nfrom msprobe.pytorch import PrecisionDebugger\n"
            "try:\n    from importlib.metadata import version; v = version('mindstudio-probe')\n"
            "except Exception:\n    v = getattr(msprobe, '__version__', None)\n"
            "print(json.dumps({'file': msprobe.__file__, 'version': v}))\n")
    cwd = tempfile.mkdtemp(prefix="dump_bench_probe_", dir=tmp_root)
    try:
        r = harness.run([str(impl.python), *impl.py_flags, "-c", code], cwd=cwd, env=impl.env, timeout=300)
    finally:
        shutil.rmtree(cwd, ignore_errors=True)
    if r.rc == "timeout":
        impl.error = "import failed: timeout"
        return
    info = harness.json_line(r.stdout)
    if r.rc != 0 or info is None:
        impl.error = "import failed: " + (_tail(r.stderr, 1) or f"exit {r.rc}")
        return
    impl.module_file, impl.version = info["file"], info["version"]
    err = _wrong_module(impl, impl.module_file)
    if err:
        impl.error = err


def _wrong_module(impl: Impl, module_file: str | None) -> str | None:
    if not module_file:
        return None
    inside = Path(module_file).resolve().is_relative_to(ROOT)
    if impl.key == "ours" and not inside:
        return f"imported msprobe from {module_file}, not from {ROOT}"
    if impl.key != "ours" and inside:
        return f"imported our msprobe ({module_file}) instead of the reference"
    return None


# ---------------------------------------------------------------------------------------------------------------------
# one run
# ---------------------------------------------------------------------------------------------------------------------

def _dir_bytes(path: str) -> int:
    total = 0
    for dp, _, files in os.walk(path):
        for f in files:
            try:
                total += os.path.getsize(os.path.join(dp, f))
            except OSError:
                pass
    return total


def _dump_records(dump_path: str):
    """Number of entries in the dump.json of the last dumped step (None when nothing was dumped)."""
    def step_no(p):
        m = re.search(r"step(\d+)", p)
        return int(m.group(1)) if m else -1
    files = glob.glob(os.path.join(dump_path, "**", "dump.json"), recursive=True)
    if not files:
        return None
    ranked = [f for f in files if re.search(r"[/\\]rank\d*[/\\]dump\.json$", f)] or files
    last = max(ranked, key=step_no)
    try:
        with open(last) as f:
            return len(json.load(f).get("data", {}))
    except (OSError, ValueError):
        return None


def run_one(impl: Impl, config: str | None, model: str, steps: int, warmup: int, tmp_root: str,
            timeout: float, floor: bool = False) -> dict:
    """Run the worker; returns {"ok": True, "median_ms", ...} or {"ok": False, "error": ...}."""
    if impl.error:
        return {"ok": False, "error": impl.error}
    tmp = tempfile.mkdtemp(prefix=f"dump_bench_{impl.key}_{config or 'none'}_{model}_", dir=tmp_root)
    try:
        cmd = [str(impl.python), *impl.py_flags, str(WORKER), "--impl", impl.key, "--model", model,
               "--steps", str(steps), "--warmup", str(warmup)]
        dump_path = os.path.join(tmp, "dump")
        if config:
            cfg_path = os.path.join(tmp, "config.json")
            with open(cfg_path, "w") as f:
                json.dump(make_config(config, dump_path), f, indent=2)
            cmd += ["--config", cfg_path]
            if config == "off":
                cmd += ["--baseline"]
            if floor:
                cmd += ["--floor"]   # same-process A/B: the off ratio is not blurred by process-to-process noise
        r = harness.run(cmd, cwd=tmp, env=impl.env, timeout=timeout)
        rc = f"timeout after {timeout:g} s" if r.rc == "timeout" else r.rc
        wall, out, err = r.secs, r.stdout, r.stderr
        res = harness.json_line(out, '{"dump_bench"')
        if rc != 0 or res is None:
            return {"ok": False, "error": (f"exit {rc}: " if isinstance(rc, int) else f"{rc}: ") + (_tail(err) or _tail(out) or "no output"), "wall_s": wall}
        bad = _wrong_module(impl, res.get("msprobe_file"))
        if bad:
            return {"ok": False, "error": bad, "wall_s": wall}
        res.update(ok=True, wall_s=wall, records=_dump_records(dump_path) if config else None,
                   dump_bytes=_dir_bytes(dump_path) if config and os.path.isdir(dump_path) else 0)
        return res
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


# ---------------------------------------------------------------------------------------------------------------------
# report
# ---------------------------------------------------------------------------------------------------------------------

def _ms(x):
    if x is None:
        return "n/a"
    return f"{x:.1f}" if abs(x) >= 10 else f"{x:.2f}"


def _cell(r: dict | None, impl: Impl) -> str:
    if r is None:
        return "-"
    if not r["ok"]:
        # the implementation-level reason (missing venv, import failure) is listed once under Implementations
        return "n/a" if impl.error else "n/a (run failed, see Failures)"
    return _ms(r["value_ms"])


def none_median(res: dict, model: str):
    """The no-debugger baseline: the lowest median over the rounds (it runs once per round)."""
    vals = [r["value_ms"] for r in [res.get((model, "none", "none"))] if r and r["ok"]]
    return min(vals) if vals else None


def model_table(model: str, configs: list, impls: list, res: dict) -> tuple:
    """Markdown lines of one model's table and the list of (goal, ok or None)."""
    none_ms = none_median(res, model)
    lines = ["| config | none | " + " | ".join(i.label for i in impls) +
             " | floor ms | ours added ms | faster-ref added ms | ours added / floor | ratio | goal | result |",
             "|---|---:|" + "---:|" * len(impls) + "---:|---:|---:|---:|---:|---|---|"]
    verdicts = []
    for c in configs:
        cells = [_cell(res.get((model, c, i.key)), i) for i in impls]
        ours = res.get((model, c, "ours"))
        ours_ms = ours["value_ms"] if ours and ours["ok"] else None
        ours_add = ours_ms - none_ms if ours_ms is not None and none_ms is not None else None
        refs = []
        for i in impls:
            r = res.get((model, c, i.key))
            if i.key != "ours" and r and r["ok"] and none_ms is not None:
                refs.append((r["value_ms"] - none_ms, i.label))
        fast = min(refs) if refs else None
        kind, factor = GOALS[c]
        ratio, ok = None, None
        if kind == "none" and ours_ms is not None and none_ms:
            # same-process A/B when the worker measured it (--baseline): the steps before the debugger existed
            cpu = METRIC == "cpu"
            base = ours.get("baseline_cpu_median_ms" if cpu else "baseline_median_ms")
            ratio = ours["cpu_median_ms" if cpu else "median_ms"] / base if base else ours_ms / none_ms
            ok = ratio <= factor
        elif kind == "added" and ours_add is not None and fast is not None and fast[0] > 0:
            ratio = ours_add / fast[0]
            ok = ratio <= factor
        verdict = "n/a" if ok is None else ("PASS" if ok else "FAIL")
        floor_ms = floor_of(res, model, c)
        floor_s = _ms(floor_ms) if floor_ms is not None else "-"
        mult = f"{ours_add / floor_ms:.1f}x" if floor_ms and ours_add is not None else "-"
        ratio_s = "-" if ratio is None else (f"{ratio:.3f}x none" if kind == "none" else f"{ratio:.2f}x")
        lines.append(f"| {c} | {_ms(none_ms)} | " + " | ".join(cells) +
                     f" | {floor_s} | {_ms(ours_add)} | {(_ms(fast[0]) + ' (' + fast[1] + ')') if fast else 'n/a'} | {ratio_s} |"
                     f" {GOAL_TEXT[c]} | {verdict} |".replace(f" | {ratio_s} |", f" | {mult} | {ratio_s} |", 1))
        verdicts.append((f"{model} {c}", ok))
    return lines, verdicts


def kept_sections(path: Path, models_run: list) -> dict:
    """model -> (its "## model:" section lines, its Details rows) from the previous results file, for the
    models not run now, so that running one size does not drop the others' last results."""
    try:
        old = path.read_text().splitlines()
    except OSError:
        return {}
    kept = {}
    for m in ALL_MODELS:
        if m in models_run:
            continue
        start = next((i for i, ln in enumerate(old) if ln.startswith(f"## {m}:")), None)
        if start is None:
            continue
        end = start + 1
        while end < len(old) and not old[end].startswith("## ") and not old[end].startswith("ms = ") \
                and not old[end].startswith("### "):
            end += 1
        rows = [ln for ln in old if ln.startswith(f"| {m} |")]
        kept[m] = (old[start:end], rows)
    return kept


def floor_of(res: dict, model: str, config: str, metric: str | None = None):
    """The floor (ms) of ``config``'s kind, measured by our worker on the tensors one dumped step measured."""
    kind = FLOOR_KIND.get(config)
    r = res.get((model, config, "ours"))
    fl = (r or {}).get("floor_best") if r and r.get("ok") else None
    if not kind or not fl:
        return None
    key = f"{kind}_ms" if (metric or METRIC) == "wall" else f"{kind}_cpu_ms"
    return fl.get(key)


def detail_table(models, configs, impls, res) -> list:
    lines = ["| model | config | impl | median ms | min ms | CPU median ms | repeats | steps | records/step | "
             "dump MB/step | import s | debugger ctor s | run wall s |",
             "|---|---|---|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|"]
    for m in models:
        keys = [("none", "none")] + [(c, i.key) for c in configs for i in impls]
        for c, k in keys:
            r = res.get((m, c, k))
            if r is None or not r["ok"]:
                continue
            nsteps = len(r["steps_ms"]) + r["warmup"]
            per = r["dump_bytes"] / nsteps / 1e6 if r.get("dump_bytes") else 0.0
            dumped = r.get("records")
            label = {"none": "none"}.get(k, IMPL_LABEL.get(k, k))
            reps = r.get("repeat_medians", [])
            rep_s = " / ".join(_ms(x) for x in reps) if len(reps) > 1 else "-"
            lines.append(f"| {m} | {c} | {label} | {_ms(r['median_ms'])} | {_ms(r['min_ms'])} | "
                         f"{_ms(r.get('cpu_median_ms'))} | {rep_s} | {len(r['steps_ms'])} | {'-' if dumped is None else dumped} | "
                         f"{per:.2f} | {r['import_s']:.2f} | {r['ctor_s']:.2f} | {r['wall_s']:.1f} |")
    return lines


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default=",".join(DEFAULT_MODELS), help="d64,d256,llama (default d256,llama)")
    ap.add_argument("--impls", default=",".join(ALL_IMPLS), help="ours,ref8,ref26")
    ap.add_argument("--configs", default=",".join(ALL_CONFIGS), help=",".join(ALL_CONFIGS) + " (none always runs)")
    ap.add_argument("--steps", type=int, default=None, help="timed steps (default 20 for d64, 5 for d256, 2 for llama)")
    ap.add_argument("--warmup", type=int, default=None, help="untimed steps (default 3, llama 1)")
    ap.add_argument("--repeat", type=int, default=1,
                    help="fresh runs per (implementation, config, model); the lowest median is kept")
    ap.add_argument("--metric", choices=["wall", "cpu"], default="wall",
                    help="what the tables and goals use: wall-clock median (default) or process-CPU median per step")
    ap.add_argument("--ref8", default=os.environ.get("MSPROBE_REF8", str(REF_CACHE / REF_VENV["ref8"])),
                    help="8.3.3 venv (default $MSPROBE_REF8, else $MSPROBE_REF_CACHE/venv833, cache default "
                         "~/.cache/msprobe-ref)")
    ap.add_argument("--ref26", default=os.environ.get("MSPROBE_REF26", str(REF_CACHE / REF_VENV["ref26"])),
                    help="26.2.0 venv (default $MSPROBE_REF26, else $MSPROBE_REF_CACHE/venv2620)")
    ap.add_argument("--tmp-dir", default=None, help="where the per-run temp dirs go (default: system temp)")
    ap.add_argument("--timeout", type=float, default=1800, help="seconds per run")
    ap.add_argument("--no-write", action="store_true", help="do not write benchmarks/dump_results.md")
    a = ap.parse_args(argv)

    def split(s, allowed, what):
        items = [x.strip() for x in s.split(",") if x.strip()]
        bad = [x for x in items if x not in allowed]
        if bad:
            ap.error(f"unknown {what}: {', '.join(bad)} (choose from {', '.join(allowed)})")
        return items
    models = split(a.models, ALL_MODELS, "model")
    impl_keys = split(a.impls, ALL_IMPLS, "implementation")
    configs = [c for c in split(a.configs, ALL_CONFIGS + ["none"], "config") if c != "none"]

    started = datetime.datetime.now(datetime.timezone.utc)
    machine = machine_line()
    tmp_root = a.tmp_dir or tempfile.gettempdir()
    os.makedirs(tmp_root, exist_ok=True)
    refs = {"ref8": a.ref8, "ref26": a.ref26}
    impls = [make_impl(k, refs) for k in impl_keys]
    for i in impls:
        probe(i, tmp_root)
        print(f"[dump_bench] {i.label}: " + (f"n/a ({i.error})" if i.error else
              f"msprobe {i.version} from {i.module_file} ({i.python})"), file=sys.stderr, flush=True)
    none_impl = make_impl("ours", refs)  # no debugger: just our venv's python and torch
    none_impl.key = "none"

    global METRIC
    METRIC = a.metric
    res = {}
    run_info = {}
    for m in models:
        steps = a.steps or DEFAULT_STEPS[m]
        warmup = a.warmup if a.warmup is not None else DEFAULT_WARMUP[m]
        # Round-robin: every (config, implementation) and the no-debugger baseline run once per round, and
        # the lowest median over the rounds is kept. Interleaving matters on a shared VM, whose speed drifts
        # by tens of percent over minutes: consecutive blocks would compare different machine states.
        plan = [("none", "none")] + [(c, i.key) for c in configs for i in impls]
        by_key = {i.key: i for i in impls}
        best, medians, failed, floor_best = {}, {}, {}, {}
        run_info[m] = {"start": datetime.datetime.now(datetime.timezone.utc), "load0": _load()}
        for _round in range(max(1, a.repeat)):
            for c, key in plan:
                if (c, key) in failed:
                    continue
                impl = none_impl if c == "none" else by_key[key]
                ri = run_one(impl, None if c == "none" else c, m, steps, warmup, tmp_root, a.timeout,
                             floor=key == "ours" and c in FLOOR_KIND)
                if not ri["ok"]:
                    failed[(c, key)] = ri
                    res[(m, c, key)] = ri
                    print(f"[dump_bench] {m} {c:9s} {key:8s} n/a ({ri['error']})", file=sys.stderr, flush=True)
                    continue
                ri["value_ms"] = ri["median_ms"] if a.metric == "wall" else ri["cpu_median_ms"]
                if ri.get("floor"):   # the floor's minimum over the rounds, per quantity
                    prev = (best.get((c, key)) or {}).get("floor_best") or floor_best.get((c, key)) or {}
                    fb = {k: min(v, prev.get(k, v)) if isinstance(v, float) else v for k, v in ri["floor"].items()}
                    floor_best[(c, key)] = fb
                medians.setdefault((c, key), []).append(ri["value_ms"])
                if (c, key) not in best or ri["value_ms"] < best[(c, key)]["value_ms"]:
                    best[(c, key)] = ri
                print(f"[dump_bench] {m} {c:9s} {key if c == 'none' else impl.label:8s} "
                      f"{ri['median_ms']:.1f} ms/step (min {ri['min_ms']:.1f}, CPU {ri['cpu_median_ms']:.1f}; "
                      f"run {ri['wall_s']:.1f} s, round {_round + 1}"
                      + (f", {ri['records']} records/step" if ri.get("records") is not None else "") + ")",
                      file=sys.stderr, flush=True)
        run_info[m]["load1"] = _load()
        for (c, key), r in best.items():
            r["repeat_medians"] = medians[(c, key)]
            r["floor_best"] = floor_best.get((c, key))
            res[(m, c, key)] = r

    # ---- report
    command = "python benchmarks/dump_bench.py " + " ".join(shlex.quote(x) for x in (argv or sys.argv[1:]))
    out = ["# msprobe dump (PrecisionDebugger) step-time benchmark", "",
           f"Date: {started.strftime('%Y-%m-%d %H:%M UTC')}  ",
           f"Machine: {machine}  ",
           f"Command: `{command.strip()}`  ",
           "torch.set_num_threads(1); warm-up " + ", ".join(
               f"{a.warmup if a.warmup is not None else DEFAULT_WARMUP[m]} ({m})" for m in models)
           + " steps, then the median of "
           + ", ".join(f"{a.steps or DEFAULT_STEPS[m]} ({m})" for m in models) + " timed steps; every run a fresh "
           "subprocess with its own config.json and temporary dump_path"
           + (f"; {a.repeat} runs each, the lowest median kept" if a.repeat > 1 else "") + ". Metric: "
           + ("wall clock" if a.metric == "wall" else "process CPU time (all threads)") + " per step.", ""]
    out.append("Implementations:")
    out.append("")
    out.append(f"- none: no debugger, `{portable(none_impl.python)}` (torch only)")
    for i in impls:
        out.append(f"- {i.label}: " + (f"n/a ({i.error})" if i.error else
                                       f"msprobe {i.version}, `{portable(i.module_file)}`, `{portable(i.python)}`"))
    out.append("")
    all_verdicts = []
    command_s = command.strip()
    kept = {} if a.no_write else kept_sections(RESULTS, models)
    for m in ALL_MODELS:
        if m in kept:
            out.extend(kept[m][0])
            continue
        if m not in models:
            continue
        ri = run_info.get(m, {})
        out.append(f"## {m}: {MODEL_DESC[m]}")
        out.append("")
        out.append(f"Run: {ri['start'].strftime('%Y-%m-%d %H:%M UTC')}, `{command_s}`, metric "
                   f"{a.metric}; load average before {ri['load0']}, after {ri['load1']}.")
        out.append("")
        lines, verdicts = model_table(m, configs, impls, res)
        out.extend(lines)
        out.append("")
        all_verdicts.extend(verdicts)
    out.append(("ms = median wall-clock ms/step" if a.metric == "wall" else "ms = median process-CPU ms/step")
               + "; none = the no-debugger baseline (lowest median over the rounds); points run "
               "round-robin, each the lowest median of its rounds; added = config ms - none ms; ratio = ours added / faster reference's added "
               "(off: ours ms / the same process's ms before the debugger was constructed). Goals: ours added <= 1/3 of the faster reference's for stat_L1, mix, "
               "md5_L1, <= 1/2 for tensor_L1; off <= 1.05x none.")
    out.append("")
    out.append("Configs: off = statistics L1 with `step: [1000000]` (nothing dumped in the timed steps); stat_L1 = "
               "statistics L1 summary_mode statistics; mix = statistics level mix; md5_L1 = statistics L1 "
               "summary_mode md5; tensor_L1 = tensor L1 (.pt files). Each implementation runs with its defaults: "
               "26.2.0's default `risk_level` is FOCUS, which skips LOW-risk APIs, so it dumps fewer records per "
               "step than 8.3.3 (see records/step below).")
    out.append("")
    out.append("### Details")
    out.append("")
    details = detail_table(models, configs, impls, res)
    out.extend(details[:2])
    for m in ALL_MODELS:
        if m in kept:
            out.extend(kept[m][1])
        else:
            out.extend(ln for ln in details[2:] if ln.startswith(f"| {m} |"))
    out.append("")
    if kept:
        out.append("Sections of models not run this time (" + ", ".join(sorted(kept)) + ") are kept from the "
                   "previous file, with their own Run line (or none: older than this format).")
        out.append("")
    out.append("median/min ms = wall clock per step; CPU median ms = process CPU time per step (all threads, user + "
               "system): CPU well below wall means the run waited for a core (shared machine) or for I/O, CPU above "
               "wall means the tool's own threads; repeats = the median of each run with --repeat (the run with the "
               "lowest is kept); records/step = entries in the `data` of the last step's dump.json; dump MB/step = "
               "the whole dump_path (dump.json, stack.json, construct.json, .pt files) / steps run (warm-up "
               "included).")
    fails = [(k, r) for k, r in res.items() if not r["ok"] and not any(i.error == r["error"] for i in impls)]
    if fails:
        out.append("")
        out.append("### Failures")
        out.append("")
        for (m, c, k), r in fails:
            out.append(f"- {m} {c} {IMPL_LABEL.get(k, k)}: {r['error']}")
    try:
        out.append("")
        out.append("Load average at end: " + " ".join(f"{x:.2f}" for x in os.getloadavg()) + ".")
    except OSError:
        pass
    text = "\n".join(out) + "\n"
    print(text)
    if not a.no_write:
        RESULTS.write_text(text)
        print(f"[dump_bench] wrote {RESULTS}", file=sys.stderr)

    # a missing reference venv is not a failure (its rows just say n/a); anything else that did not run is
    failed_runs = [k for k, r in res.items() if not r["ok"] and not r["error"].startswith("no venv")]
    if failed_runs:
        return 2
    return 1 if any(ok is False for _, ok in all_verdicts) else 0


if __name__ == "__main__":
    sys.exit(main())
