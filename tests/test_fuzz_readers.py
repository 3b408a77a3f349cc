"""Property-based fuzzing (hypothesis) of every reader and every command on the reference fixtures.

Each example takes a fixture file, applies one to three mutations drawn by hypothesis (truncation, byte
flips, inserted bytes, another encoding, a wrong type / a missing key / NaN / huge numbers / a value nested
1,000 deep in a JSON or yaml document, garbage or huge-header tensor files; the mutation engine is the one
of ``tools/fuzz.py``) and checks that

* the reader returns or raises :class:`msprobe.core.errors.MsprobeError` (one line) - nothing else;
* a command (run in-process through ``msprobe.cli.main.main``) exits 0, 1 or 2, with no traceback and no
  ``internal error``;
* the input files are unchanged (hashes before and after);
* nothing hangs: every example runs under a SIGALRM bound set by the harness (no timing assert).

Examples are derandomised (the same inputs on every run) so that CI is reproducible; the long run with
fresh inputs is ``tools/fuzz.py`` (docs/reliability.md).  Skipped when the fixtures are absent.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import random
import shutil
import signal
import sys
import tempfile
from pathlib import Path

import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from conftest import FIXTURES  # noqa: E402

from tools import fuzz  # noqa: E402

PER_EXAMPLE_SECONDS = 60


def _settings(n: int):
    return settings(max_examples=n, deadline=None, derandomize=True, database=None, print_blob=True,
                    suppress_health_check=list(HealthCheck))


def fixtures():
    if not FIXTURES.is_dir():
        pytest.skip(f"reference fixtures not found at {FIXTURES} (../shared/fixtures is absent)")
    return FIXTURES


class Hang(Exception):
    pass


@contextlib.contextmanager
def time_bound(seconds: int = PER_EXAMPLE_SECONDS):
    """Fail an example that runs longer than ``seconds`` (a hang), without a timing assert on speed."""
    def on_alarm(signum, frame):
        raise Hang(f"example still running after {seconds} s")

    old = signal.signal(signal.SIGALRM, on_alarm)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def sha(path: Path) -> str:
    return hashlib.sha1(path.read_bytes()).hexdigest() if path.is_file() else "-"


def check_reader(fn, path: Path):
    """Call a reader; it may return or raise MsprobeError (one line).  The input stays as it was."""
    from msprobe.core.errors import MsprobeError

    before = sha(path)
    with time_bound():
        try:
            fn(str(path))
        except MsprobeError as exc:
            text = str(exc)
            assert text and "\n" not in text.strip(), repr(text)
    assert sha(path) == before, f"{path} was modified by the reader"


def mutated_copy(src: Path, dst_dir: Path, rnd: random.Random, name: str = None) -> Path:
    dst = dst_dir / (name or src.name)
    shutil.copyfile(src, dst)
    for _ in range(rnd.choice((1, 1, 2, 3))):
        if dst.is_file():
            fuzz.mutate_file(dst, rnd)
    return dst


# ------------------------------------------------------------------------------------------- readers


def _rank_files(name: str):
    fx = fixtures()
    out = []
    for case in ("mlp_bf16_stat_mix", "mlp_bf16_md5", "mlp_bf16_tensor_mix", "mlp_bf16_stat_L1", "cnn_fp16_stat_mix",
                 "mlp_bf16_stat_mix_v26dump", "mindspore_cpu_mix", "torch_npu_stubcann_cpu_mix"):
        step = fx / case / "target" / "step0"
        if step.is_dir():
            out += sorted(step.glob(f"*/{name}"))[:1]
    if not out:
        pytest.skip(f"no {name} in the fixtures")
    return out


def _read_dump(path):
    from msprobe.core.dump.reader import read_dump

    read_dump(path, "target", stack_path=None)


def _read_stack(path):
    from msprobe.core.dump.reader import load_stack

    load_stack(path)


def _read_construct(path):
    from msprobe.core.graph.build import read_construct

    read_construct(path)


def _read_dump_graph(path):
    from msprobe.core.graph.build import read_dump_json

    read_dump_json(path)


def _read_config(path):
    from msprobe.core.dump.config import load_dump_config

    load_dump_config(path, dump_path=os.path.join(os.path.dirname(path), "dump_out"))


def _read_compare_json(path):
    from msprobe.cli.compare import _legacy_config

    _legacy_config(path)


READERS = [
    ("dump.json", _read_dump),
    ("dump.json", _read_dump_graph),
    ("stack.json", _read_stack),
    ("construct.json", _read_construct),
]


@pytest.mark.parametrize("name,reader", READERS, ids=[f"{n}-{r.__name__}" for n, r in READERS])
@_settings(200)
@given(rnd=st.randoms(use_true_random=False), which=st.integers(0, 7))
def test_json_readers(name, reader, rnd, which):
    files = _rank_files(name)
    src = files[which % len(files)]
    with tempfile.TemporaryDirectory() as d:
        p = mutated_copy(src, Path(d), rnd)
        check_reader(reader, p)


@_settings(120)
@given(rnd=st.randoms(use_true_random=False), which=st.integers(0, 7))
def test_dump_config_reader(rnd, which):
    fx = fixtures()
    cfgs = sorted(fx.glob("*/configs/*.json")) + sorted(fx.glob("mindspore_cpu_mix/config_*.json"))
    if not cfgs:
        pytest.skip("no config.json in the fixtures")
    with tempfile.TemporaryDirectory() as d:
        p = mutated_copy(cfgs[which % len(cfgs)], Path(d), rnd, "config.json")
        check_reader(_read_config, p)


@_settings(80)
@given(rnd=st.randoms(use_true_random=False))
def test_compare_json_reader(rnd):
    fx = fixtures()
    src = fx / "mlp_bf16_stat_mix" / "reference_out" / "_inputs" / "compare_file.json"
    if not src.is_file():
        pytest.skip("no compare.json in the fixtures")
    with tempfile.TemporaryDirectory() as d:
        p = mutated_copy(src, Path(d), rnd, "compare.json")
        check_reader(_read_compare_json, p)


@_settings(200)
@given(rnd=st.randoms(use_true_random=False), which=st.integers(0, 1000))
def test_tensor_readers(rnd, which):
    from msprobe.core.io.tensors import load_tensor

    fx = fixtures()
    files = sorted((fx / "mlp_bf16_tensor_mix" / "target" / "step0").rglob("*.pt"))[:20]
    files += sorted((fx / "mindspore_ir").rglob("*.npy"))[:20]
    if not files:
        pytest.skip("no tensor files in the fixtures")
    with tempfile.TemporaryDirectory() as d:
        p = mutated_copy(files[which % len(files)], Path(d), rnd)
        check_reader(load_tensor, p)


YAMLS = {
    "data": ("Functional.linear.0.forward.input.0: Functional.linear.0.forward.input.0\n", "load_data_yaml"),
    "api": ("- ms_api: Functional.linear\n  pt_api: Functional.linear\n  ms_args: [0, 1]\n  pt_args: [0, 1]\n"
            "  ms_outputs: [0]\n  pt_outputs: [0]\n", "load_user_api_yaml"),
    "cell": ("fc1: fc1\nfc2: fc2\n", "load_cell_yaml"),
    "layer": ("Linear:\n  fc1: fc1\n  fc2: fc2\n", "layer"),
    "merge": ("api:\n- Distributed.all_reduce\n- Functional.linear\ncompare_index:\n- Max diff\n- L2norm diff\n", "merge"),
}


@_settings(120)
@given(rnd=st.randoms(use_true_random=False), kind=st.sampled_from(sorted(YAMLS)))
def test_yaml_readers(rnd, kind):
    from msprobe.core.compare import mapping
    from msprobe.core.compare.layer_mapping import load_layer_mapping_yaml
    from msprobe.core.merge.config import load_merge_yaml

    text, fn_name = YAMLS[kind]
    fn = {"layer": load_layer_mapping_yaml, "merge": load_merge_yaml}.get(fn_name) or getattr(mapping, fn_name)
    with tempfile.TemporaryDirectory() as d:
        src = Path(d) / "src.yaml"
        src.write_text(text)
        p = mutated_copy(src, Path(d), rnd, "m.yaml")
        check_reader(fn, p)


@_settings(100)
@given(rnd=st.randoms(use_true_random=False), which=st.integers(0, 100))
def test_xlsx_csv_report_readers(rnd, which):
    """merge_result's readers of compare reports (.xlsx zip/XML and .csv)."""
    from msprobe.core.merge.xlsxread import SheetReader, read_header

    fx = fixtures()
    reports = sorted((fx / "multirank_mlp_bf16_stat_mix" / "reference_out").glob("*/compare_result_*.xlsx"))
    if not reports:
        pytest.skip("no xlsx reports in the fixtures")

    def read(path):
        read_header(path)
        with SheetReader(path) as r:
            head = r.header()
            for _ in r.rows(list(range(len(head)))):
                pass

    with tempfile.TemporaryDirectory() as d:
        p = mutated_copy(reports[which % len(reports)], Path(d), rnd, "compare_result_rank0_1.xlsx")
        check_reader(read, p)


@_settings(80)
@given(rnd=st.randoms(use_true_random=False), which=st.integers(0, 3))
def test_ir_reader(rnd, which):
    from msprobe.core.code_mapping.ir import parse_ir

    irs = sorted((fixtures() / "mindspore_ir").rglob("*.ir"))
    if not irs:
        pytest.skip("no MindSpore IR in the fixtures")
    with tempfile.TemporaryDirectory() as d:
        p = mutated_copy(irs[which % len(irs)], Path(d), rnd, "graph.ir")
        check_reader(parse_ir, p)


@_settings(80)
@given(rnd=st.randoms(use_true_random=False))
def test_op_generate_config_reader(rnd):
    pytest.importorskip("torch")
    from msprobe.pytorch.op_generate.generator import build_case, extract, load_config

    dump = _rank_files("dump.json")[0]
    with tempfile.TemporaryDirectory() as d:
        src = Path(d) / "src.json"
        src.write_text(json.dumps({"dump_json_path": str(dump), "api_name": "Functional.linear.0",
                                   "extract_api_path": str(Path(d) / "extract.json"), "propagation": "forward",
                                   "data_mode": "random_data", "random_seed": 1234, "iter_times": 1}, indent=1))
        p = mutated_copy(src, Path(d), rnd, "config_op.json")

        def read(path):
            cfg = load_config(path, str(Path(d) / "out"))
            build_case(cfg, extract(cfg))

        # a mutated extract_api_path can be any relative name ("NaN" once): written in the temp dir, not the repo
        cwd = os.getcwd()
        os.chdir(d)
        try:
            check_reader(read, p)
        finally:
            os.chdir(cwd)


# ------------------------------------------------------------------------------------------- commands


@_settings(80)
@given(index=st.integers(0, 10 ** 9))
def test_commands_on_mutated_inputs(index):
    """Every command (compare in all its modes, graph, merge_result, op_generate, code_mapping, the dump
    config) on mutated fixture copies, in-process: exit 0/1/2, no traceback, inputs unchanged, no hang."""
    scen = fuzz.make_scenarios(fixtures())
    res = fuzz.run_one(0, index, scen, timeout=PER_EXAMPLE_SECONDS)
    assert res["outcome"] in ("success", "clean error"), json.dumps(res, indent=1, default=str)[-6000:]


FLAGS = {
    "compare": ["-tp", "-gp", "-i", "-o", "-fm", "-am", "-cm", "-dm", "-lm", "--rank", "--step", "--csv", "--xlsx",
                "--no-highlight", "-hl", "-s", "-c", "--no-match-column", "-da", "--noise-op", "--da-config", "--top",
                "-tensor_log", "-j", "-q", "-m", "--consistent_check", "--backend", "--config", "-f", "-h"],
    "graph": ["-tp", "-gp", "-i", "-o", "--db", "--file_type", "-fm", "-lm", "-oc", "-cs", "-j", "-q", "-tensor_log",
              "-progress_log", "--rank_size", "--tp", "--pp", "--vpp", "--order"],
    "merge_result": ["-i", "-o", "-config", "--config", "-j", "-q"],
    "op_generate": ["-i", "-o"],
    "code_mapping": ["--ir", "--dump_data", "--output"],
    "nan_analyze": ["-i", "-o", "-j", "-q"],
    "overflow_check": ["-i", "-o", "-j", "-q"],
    "api_precision_compare": ["-npu", "-gpu", "-o", "--npu_csv_path", "--gpu_csv_path", "--out_path"],
    # run_ut on a real dump re-runs its 7 APIs (a few seconds): the per-example bound still holds
    "run_ut": ["-api_info", "-o", "-save_error_data", "-j", "-d", "-csv_path", "-f", "-config", "--timeout",
               "--data_mode", "-q"],
    "multi_run_ut": ["-api_info", "-o", "-n", "-d", "-csv_path", "-config", "-q"],
    # (an overflowed-API re-run: on the fixture's statistics dump with no overflow it re-runs nothing)
    "run_overflow_check": ["-api_info", "-o", "-j", "-d", "--timeout", "--data_mode", "-q"],
    "config_check": ["-d", "-c", "-o"],
    # (dc's -cmp_path names a converter script to run: a user's choice, left out of the fuzzing)
    "parse": ["pt", "cn", "pk", "dc", "-n", "-m", "-g", "-p", "-s", "-al", "-rl", "-f", "-out"],
    "grad_compare": ["-d1", "-d2", "-o", "--no_plots"],
    "csv2tensorboard": ["-d", "-o", "--time_start", "--time_end", "--types"],
}


@st.composite
def argv_strategy(draw):
    fx = fixtures()
    rank = fx / "mlp_bf16_stat_mix" / "target" / "step0" / "rank"
    values = [str(rank / "dump.json"), str(rank), str(rank.parent), str(rank / "stack.json"), "0", "-1", "1000",
              "1,2", "x", "", "auto", "db", "json", "\u4e2d", "a" * 300, "1e9", "--", "-", "nan"]
    legacy = draw(st.sampled_from([[], ["-f", "pytorch"], ["-f", "mindspore"], ["-f", "tensorflow"]]))
    cmd = draw(st.sampled_from(sorted(FLAGS) + ["nonsense", "-V", "-h"]))
    tokens = draw(st.lists(st.one_of(st.sampled_from(FLAGS.get(cmd, ["-x"])), st.sampled_from(values)), max_size=8))
    return legacy + [cmd] + tokens


@_settings(300)
@given(argv=argv_strategy())
def test_argument_parsing(argv, tmp_path_factory):
    """Any argument list: exit status 0, 1 or 2, no traceback, no internal error (outputs go to a temp dir)."""
    from msprobe.cli.main import main

    out = tmp_path_factory.mktemp("args")
    argv = [a if a != "x" else str(out / "x") for a in argv]
    cwd = os.getcwd()
    with tempfile.TemporaryFile("w+") as cap:
        saved = os.dup(1), os.dup(2)
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(cap.fileno(), 1)
        os.dup2(cap.fileno(), 2)
        try:
            os.chdir(out)
            with time_bound(), contextlib.redirect_stdout(sys.__stdout__), contextlib.redirect_stderr(sys.__stderr__):
                try:
                    rc = main(argv)
                except SystemExit as exc:
                    rc = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 2)
        finally:
            sys.__stdout__.flush()
            sys.__stderr__.flush()
            os.chdir(cwd)
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            os.close(saved[0])
            os.close(saved[1])
        cap.seek(0)
        text = cap.read()
    assert rc in (0, 1, 2), (argv, rc, text)
    assert "Traceback" not in text and "internal error" not in text, (argv, text)
