"""Regression tests: every bad-input signature listed in issue 17 and found by the fuzzer (tools/fuzz.py).

Each case damages a copy of a reference dump in one way and runs the command in-process
(``msprobe.cli.main.main``).  It must end with a non-zero status and exactly one ``msprobe: error:``
line naming the damaged file: no traceback, no ``internal error`` (before the fix each one crashed with
the exception named in its test's docstring).  Log lines (``[msprobe] INFO ...``) may precede it.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest

from conftest import fixtures_or_skip

STAT = "mlp_bf16_stat_mix"
MD5 = "mlp_bf16_md5"
TENSOR = "mlp_bf16_tensor_mix"
DEEP = 1000


DEEP_MARK = "@@deep@@"


def deep(depth: int = DEEP):
    """A placeholder that :func:`edit_json` turns into a value nested ``depth`` deep."""
    return DEEP_MARK


def deep_text(depth: int = DEEP) -> str:
    return "[" * depth + "1" + "]" * depth


def copy_rank(tmp_path: Path, case: str = STAT):
    fx = fixtures_or_skip()
    out = []
    for side, short in (("target", "t"), ("golden", "g")):
        src = next(p for p in sorted((fx / case / side / "step0").iterdir()) if p.is_dir())
        dst = tmp_path / short / "rank"
        shutil.copytree(src, dst)
        for root, dirs, files in os.walk(dst):
            os.chmod(root, 0o755)
            for f in files:
                os.chmod(os.path.join(root, f), 0o644)
        out.append(dst)
    return out


def run(argv, capsys, monkeypatch, tmp_path):
    from msprobe.cli.main import main

    monkeypatch.delenv("MSPROBE_DEBUG", raising=False)
    monkeypatch.setenv("MSPROBE_LOG_DIR", str(tmp_path / "_logs"))
    monkeypatch.chdir(tmp_path)
    capsys.readouterr()
    try:
        rc = main([str(a) for a in argv])
    except SystemExit as exc:  # argparse
        rc = exc.code
    cap = capsys.readouterr()
    return rc, cap.out + cap.err


def assert_clean(rc, text, *needles):
    assert "Traceback" not in text, text
    assert "internal error" not in text, text
    assert rc not in (0, None), text
    errors = [line for line in text.splitlines() if line.startswith("msprobe: error:")]
    others = [line for line in text.splitlines()
              if line.strip() and not line.startswith(("msprobe: error:", "[msprobe] "))]
    assert len(errors) == 1, text
    assert not others, text
    for n in needles:
        assert str(n) in errors[0], text
    return errors[0]


def edit_json(path: Path, fn):
    obj = json.loads(path.read_text())
    fn(obj)
    path.write_text(json.dumps(obj, indent=1).replace(json.dumps(DEEP_MARK), deep_text()))


# ------------------------------------------------------------------------ 1,000-deep JSON (RecursionError)


def _deep_in_dump(path: Path):
    def fn(obj):
        first = next(iter(obj["data"].values()))
        first["input_args"][0]["value"] = deep()  # a leaf's value: the writers' text of it recursed
        first["input_args"].append({"type": "int", "value": deep()})
    edit_json(path, fn)


@pytest.mark.parametrize("fmt", ["--xlsx", "--csv"])
def test_deep_dump_json_compare(tmp_path, capsys, monkeypatch, fmt):
    """RecursionError in the xlsx / csv writers (a value nested 1,000 deep in dump.json)."""
    t, g = copy_rank(tmp_path)
    _deep_in_dump(t / "dump.json")
    rc, text = run(["compare", "-tp", t / "dump.json", "-gp", g / "dump.json", "-o", tmp_path / "out", fmt],
                   capsys, monkeypatch, tmp_path)
    line = assert_clean(rc, text, t / "dump.json")
    assert "levels deep" in line and "100" in line


def test_deep_dump_json_graph(tmp_path, capsys, monkeypatch):
    """RecursionError in graph format_nodes / _leaf_item."""
    t, g = copy_rank(tmp_path)
    _deep_in_dump(t / "dump.json")
    rc, text = run(["graph", "-tp", t, "-o", tmp_path / "out"], capsys, monkeypatch, tmp_path)
    assert_clean(rc, text, t / "dump.json")


def test_deep_stack_json(tmp_path, capsys, monkeypatch):
    """RecursionError in load_stack (compare -s) and in the graph."""
    t, g = copy_rank(tmp_path)
    edit_json(t / "stack.json", lambda obj: obj["0"][1].append(deep()))
    rc, text = run(["compare", "-tp", t / "dump.json", "-gp", g / "dump.json", "-o", tmp_path / "out", "-s"],
                   capsys, monkeypatch, tmp_path)
    assert_clean(rc, text, t / "stack.json")
    rc, text = run(["graph", "-tp", t, "-o", tmp_path / "out2"], capsys, monkeypatch, tmp_path)
    assert_clean(rc, text, t / "stack.json")


def test_deep_construct_json(tmp_path, capsys, monkeypatch):
    """RecursionError from construct.json in the graph."""
    t, g = copy_rank(tmp_path)
    edit_json(t / "construct.json", lambda obj: obj.__setitem__("Module.fc1.Linear.forward.0", deep()))
    rc, text = run(["graph", "-tp", t, "-gp", g, "-o", tmp_path / "out"], capsys, monkeypatch, tmp_path)
    assert_clean(rc, text, t / "construct.json")


def test_deeper_than_orjson_limit(tmp_path, capsys, monkeypatch):
    """Nesting beyond the JSON parser's own limit (1,024) gets the same one line."""
    t, g = copy_rank(tmp_path)
    text = (t / "dump.json").read_text()
    (t / "dump.json").write_text(text.replace('"data": {', '"junk": ' + deep_text(5000) + ', "data": {', 1))
    rc, out = run(["compare", "-tp", t / "dump.json", "-gp", g / "dump.json", "-o", tmp_path / "out"],
                  capsys, monkeypatch, tmp_path)
    assert "levels deep" in assert_clean(rc, out, t / "dump.json")


def test_deep_config_json_precision_debugger(tmp_path):
    """RecursionError raised into the training script by PrecisionDebugger(config_path=...)."""
    pytest.importorskip("torch")
    from msprobe.core.errors import MsprobeError
    from msprobe.pytorch import PrecisionDebugger

    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps({"task": "statistics", "dump_path": str(tmp_path / "dump"), "level": "L1",
                               "statistics": {"scope": [], "list": deep()}}).replace(json.dumps(DEEP_MARK), deep_text()))
    with pytest.raises(MsprobeError) as err:
        PrecisionDebugger(config_path=str(cfg))
    assert str(cfg) in str(err.value) and "levels deep" in str(err.value)
    assert "\n" not in str(err.value)


def test_depth_limit_is_above_real_dumps():
    """The limit leaves room: the reference fixtures nest at most 6 levels; counting ignores brackets in strings."""
    from msprobe.core.fileio import JSON_MAX_DEPTH, json_depth

    fx = fixtures_or_skip()
    depths = [json_depth(p.read_bytes()) for p in fx.rglob("*.json")]
    assert depths and max(depths) <= 10 < JSON_MAX_DEPTH <= 200
    assert json_depth(b'{"a": "[[[[\\"[[", "b": [[[{}]]], "c": "\\\\"}') == 5
    assert json_depth(deep_text(1000).encode()) == 1000


# ------------------------------------------------------------------------ valid JSON of the wrong shape


@pytest.mark.parametrize("frame", [{"a": 1}, ["x", "y"], 3])
def test_stack_frame_not_a_string_compare(tmp_path, capsys, monkeypatch, frame):
    """load_stack_frames: TypeError 'unhashable type' (a stack.json frame that is a dict or a list)."""
    t, g = copy_rank(tmp_path)
    edit_json(t / "stack.json", lambda obj: obj["0"][1].__setitem__(0, frame))
    rc, text = run(["compare", "-tp", t / "dump.json", "-gp", g / "dump.json", "-o", tmp_path / "out", "-s"],
                   capsys, monkeypatch, tmp_path)
    assert_clean(rc, text, t / "stack.json")


@pytest.mark.parametrize("where", ["frame", "api"])
def test_stack_frame_not_a_string_graph(tmp_path, capsys, monkeypatch, where):
    """graph simplify_stack / load_stack_frames: TypeError on a frame or API name that is a list/dict."""
    t, g = copy_rank(tmp_path)
    edit_json(t / "stack.json", lambda obj: obj["0"][1 if where == "frame" else 0].__setitem__(0, ["x"] if where == "frame" else {"a": 1}))
    rc, text = run(["graph", "-tp", t, "-gp", g, "-o", tmp_path / "out"], capsys, monkeypatch, tmp_path)
    assert_clean(rc, text, t / "stack.json")


@pytest.mark.parametrize("value", [["a", "b"], 7, True])
def test_compare_json_path_wrong_type(tmp_path, capsys, monkeypatch, value):
    """check_path: TypeError on a compare.json npu_path / bench_path that is a list, int or bool."""
    t, g = copy_rank(tmp_path)
    cfg = tmp_path / "compare.json"
    cfg.write_text(json.dumps({"npu_path": str(t / "dump.json"), "bench_path": value}))
    rc, text = run(["-f", "pytorch", "compare", "-i", cfg, "-o", tmp_path / "out"], capsys, monkeypatch, tmp_path)
    assert_clean(rc, text, cfg, "bench_path")


def test_check_path_refuses_non_strings():
    from msprobe.core.errors import MsprobeError
    from msprobe.core.fileio import check_path

    for bad in (["a"], 3, True, {"a": 1}):
        with pytest.raises(MsprobeError, match="expected a path"):
            check_path(bad, "target path")


def test_construct_parent_not_a_string(tmp_path, capsys, monkeypatch):
    """graph _fix_inplace_parent: AttributeError on a construct.json parent that is a number or list."""
    t, g = copy_rank(tmp_path)
    edit_json(t / "construct.json", lambda obj: obj.__setitem__("Functional.linear.0.forward", [1, 2, 3]))
    rc, text = run(["graph", "-tp", t, "-gp", g, "-o", tmp_path / "out"], capsys, monkeypatch, tmp_path)
    assert_clean(rc, text, t / "construct.json", "Functional.linear.0.forward")


def test_md5_not_a_string(tmp_path, capsys, monkeypatch):
    """compare (md5 mode): KeyError 0 when an md5 field holds a dict."""
    t, g = copy_rank(tmp_path, MD5)

    def fn(obj):
        rec = next(iter(obj["data"].values()))["input_args"][0]
        rec["md5"] = {"x": 1}
    edit_json(g / "dump.json", fn)
    rc, text = run(["compare", "-tp", t / "dump.json", "-gp", g / "dump.json", "-o", tmp_path / "out"],
                   capsys, monkeypatch, tmp_path)
    assert_clean(rc, text, g / "dump.json", "md5")


def test_graph_data_name_not_a_string(tmp_path, capsys, monkeypatch):
    """graph compare _tensor_fields: TypeError 'join() argument must be str ... not float'."""
    t, g = copy_rank(tmp_path, TENSOR)

    def fn(obj):
        rec = obj["data"]["Functional.linear.0.forward"]["input_args"][0]
        rec["data_name"] = 1.5
    edit_json(t / "dump.json", fn)
    rc, text = run(["graph", "-tp", t, "-gp", g, "-o", tmp_path / "out"], capsys, monkeypatch, tmp_path)
    assert_clean(rc, text, t / "dump.json", "data_name")


# ------------------------------------------------------------------------ op_generate


def _op_config(tmp_path: Path, dump_json: Path, **extra) -> Path:
    cfg = tmp_path / "config_op.json"
    obj = {"dump_json_path": str(dump_json), "api_name": "Functional.linear.0",
           "extract_api_path": str(tmp_path / "extract.json"), "propagation": "forward",
           "data_mode": "random_data", "random_seed": 1234, "iter_times": 1}
    obj.update(extra)
    cfg.write_text(json.dumps(obj))
    return cfg


def test_op_generate_dict_in_shape(tmp_path, capsys, monkeypatch):
    """op_generate generator.py: TypeError on a dict inside a shape."""
    pytest.importorskip("torch")
    t, g = copy_rank(tmp_path)

    def fn(obj):
        obj["data"]["Functional.linear.0.forward"]["input_args"][0]["shape"] = [8, {"a": 1}]
    edit_json(t / "dump.json", fn)
    cfg = _op_config(tmp_path, t / "dump.json")
    rc, text = run(["op_generate", "-i", cfg, "-o", tmp_path / "out"], capsys, monkeypatch, tmp_path)
    assert_clean(rc, text, "shape")


def test_op_generate_data_name_not_a_string(tmp_path, capsys, monkeypatch):
    """Fuzzer signature op_generate:internal:TypeError:pytorch/op_generate/generator.py:<listcomp> (input 99,371
    of the 10^5 run): a data_name that is a dict reached os.path.isfile in real_data mode."""
    pytest.importorskip("torch")
    t, g = copy_rank(tmp_path, TENSOR)

    def fn(obj):
        obj["data"]["Functional.linear.0.forward"]["input_args"][0]["data_name"] = {"a": 1}
    edit_json(t / "dump.json", fn)
    cfg = _op_config(tmp_path, t / "dump.json", data_mode="real_data")
    rc, text = run(["op_generate", "-i", cfg, "-o", tmp_path / "out"], capsys, monkeypatch, tmp_path)
    assert "data_name must be a file name" in assert_clean(rc, text)


def test_op_generate_path_too_long(tmp_path, capsys, monkeypatch):
    """op_generate: OSError 'File name too long' from atomic_write (a 100,000-character path)."""
    pytest.importorskip("torch")
    t, g = copy_rank(tmp_path)
    cfg = _op_config(tmp_path, t / "dump.json", extract_api_path=str(tmp_path / ("x" * 100_000 + ".json")))
    rc, text = run(["op_generate", "-i", cfg, "-o", tmp_path / "out"], capsys, monkeypatch, tmp_path)
    assert "too long" in assert_clean(rc, text)
    rc, text = run(["op_generate", "-i", cfg, "-o", str(tmp_path / "o") + "x" * 100_000], capsys, monkeypatch, tmp_path)
    assert "long" in assert_clean(rc, text)


# ------------------------------------------------------------------------ encodings


@pytest.mark.parametrize("name", ["dump.json", "stack.json"])
def test_not_utf8(tmp_path, capsys, monkeypatch, name):
    """UnicodeDecodeError: a dump.json / stack.json that is not UTF-8 (GBK / UTF-16 bytes)."""
    t, g = copy_rank(tmp_path)
    p = t / name
    text = p.read_text()
    p.write_bytes(text.replace('"', '"\u4e2d\u6587', 2).encode("gbk"))
    rc, out = run(["compare", "-tp", t / "dump.json", "-gp", g / "dump.json", "-o", tmp_path / "out", "-s"],
                  capsys, monkeypatch, tmp_path)
    assert_clean(rc, out, p)
    rc, out = run(["graph", "-tp", t, "-o", tmp_path / "out2"], capsys, monkeypatch, tmp_path)
    assert_clean(rc, out, p)
    p.write_bytes(text.encode("utf-16"))  # JSON's own encoding detection reads UTF-16: a success is fine
    rc, out = run(["compare", "-tp", t / "dump.json", "-gp", g / "dump.json", "-o", tmp_path / "out3", "-s"],
                  capsys, monkeypatch, tmp_path)
    assert rc in (0, 2) and "Traceback" not in out and "internal error" not in out, out


def test_config_not_utf8(tmp_path):
    from msprobe.core.dump.config import load_dump_config
    from msprobe.core.errors import MsprobeError

    cfg = tmp_path / "config.json"
    cfg.write_bytes('{"task": "statistics", "dump_path": "\u4e2d\u6587"}'.encode("gbk"))
    with pytest.raises(MsprobeError) as err:
        load_dump_config(str(cfg))
    assert str(cfg) in str(err.value)


# ------------------------------------------------------------------------ tensors (.npy kernel dumps, .pt)


def _kernel_pair(tmp_path: Path):
    fx = fixtures_or_skip()
    src = fx / "mindspore_ir" / "train" / "dump"
    if not src.is_dir():
        pytest.skip("mindspore_ir fixture absent")
    out = []
    for side in ("t", "g"):
        shutil.copytree(src / "rank_0" / "Net", tmp_path / side / "rank_0" / "Net")
        out.append(tmp_path / side)
    return out


@pytest.mark.parametrize("damage", ["empty", "truncated", "header", "huge"])
def test_kernel_npy_damaged(tmp_path, capsys, monkeypatch, damage):
    """kernel compare _npy_row: EOFError (empty), TokenError / ValueError (damaged header), MemoryError
    (a header claiming a huge shape).  The damaged file's row says it cannot be read; the others are compared."""
    t, g = _kernel_pair(tmp_path)
    victim = sorted(g.rglob("*.npy"))[0]
    data = victim.read_bytes()
    if damage == "empty":
        victim.write_bytes(b"")
    elif damage == "truncated":
        victim.write_bytes(data[:len(data) - 3])
    elif damage == "header":
        victim.write_bytes(data[:20] + b"\x00(((" + data[24:])
    else:
        head = "{'descr': '<f4', 'fortran_order': False, 'shape': (1048576, 1048576), }"
        head = head + " " * (118 - len(head)) + "\n"
        victim.write_bytes(b"\x93NUMPY\x01\x00" + len(head).to_bytes(2, "little") + head.encode() + data[128:])
    rc, text = run(["compare", "-tp", t, "-gp", g, "-o", tmp_path / "out", "--rank", "0", "--csv"],
                   capsys, monkeypatch, tmp_path)
    assert "Traceback" not in text and "internal error" not in text, text
    assert rc == 0, text
    assert victim.name in text  # the warning names the file


def test_npy_huge_header_refused_before_loading(tmp_path):
    """A 10-GB 'tensor': refused from its header, before any allocation."""
    from msprobe.core.io.tensors import TensorReadError, load_npy

    p = tmp_path / "x.npy"
    np.save(p, np.zeros((4, 4), np.float32))
    data = p.read_bytes()
    head = "{'descr': '<f4', 'fortran_order': False, 'shape': (50000, 50000), }"
    head = head + " " * (118 - len(head)) + "\n"
    p.write_bytes(b"\x93NUMPY\x01\x00" + len(head).to_bytes(2, "little") + head.encode() + data[128:])
    with pytest.raises(TensorReadError, match="10000000000 bytes") as err:
        load_npy(p)
    assert str(p) in str(err.value) and "\n" not in str(err.value)


def test_npy_shape_beyond_memory(tmp_path, monkeypatch):
    from msprobe.core.io.tensors import TensorReadError, load_npy

    p = tmp_path / "x.npy"
    np.save(p, np.zeros((1000, 1000), np.float32))
    monkeypatch.setenv("MSPROBE_MEMORY_LIMIT", "1000000")
    with pytest.raises(TensorReadError, match="memory"):
        load_npy(p)


# ------------------------------------------------------------------------ -da on md5 dumps, internal errors


def test_diff_analyze_on_md5_pair(tmp_path, capsys, monkeypatch):
    """-da on an md5 dump pair: ValueError "'NPU max' is not in list" in diff_analyze (no mutation needed)."""
    t, g = copy_rank(tmp_path, MD5)
    rc, text = run(["compare", "-tp", t / "dump.json", "-gp", g / "dump.json", "-o", tmp_path / "out", "-da"],
                   capsys, monkeypatch, tmp_path)
    assert "Traceback" not in text and "internal error" not in text, text
    assert rc in (0, 1, 2), text


def test_nul_in_argument(tmp_path, capsys, monkeypatch):
    """ValueError 'embedded null byte' from os calls (only reachable in-process)."""
    t, g = copy_rank(tmp_path)
    rc, text = run(["compare", "-tp", t / "dump.json", "-gp", g / "dump.json", "-o", str(tmp_path / "out") + "\x00"],
                   capsys, monkeypatch, tmp_path)
    assert_clean(rc, text, "NUL")


def test_internal_error_logs_traceback(tmp_path, capsys, monkeypatch):
    """A real bug: one 'msprobe: internal error:' line naming a 0600 log file that holds the traceback."""
    import msprobe.cli.compare as cli_compare

    def boom(args):
        raise ZeroDivisionError("boom")

    monkeypatch.setattr(cli_compare, "run", boom)
    rc, text = run(["compare", "-tp", "x", "-gp", "y"], capsys, monkeypatch, tmp_path)
    assert rc == 1
    lines = [line for line in text.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("msprobe: internal error: ZeroDivisionError: boom"), text
    assert "Traceback" not in text
    logs = list((tmp_path / "_logs").glob("*.log"))
    assert len(logs) == 1 and str(logs[0]) in lines[0]
    assert "Traceback" in logs[0].read_text() and "boom" in logs[0].read_text()
    assert (logs[0].stat().st_mode & 0o777) == 0o600
    monkeypatch.setenv("MSPROBE_DEBUG", "1")
    from msprobe.cli.main import main

    capsys.readouterr()
    assert main(["compare", "-tp", "x", "-gp", "y"]) == 1
    err = capsys.readouterr().err
    assert "Traceback" in err and "msprobe: internal error: ZeroDivisionError" in err


# ------------------------------------------------------------------------ yaml files (mapping, merge, -da)


YAML_BOMBS = {
    "deep": "a: " + "[" * 1000 + "1" + "]" * 1000 + "\n",
    "recursive": "a: &a [1, *a]\n",
    "laughs": "a: &a [x,x,x,x,x,x,x,x,x,x]\n" + "".join(
        f"{n}: &{n} [{', '.join(['*' + p] * 10)}]\n" for p, n in zip("abcdef", "bcdefg")),
}


@pytest.mark.parametrize("bomb", sorted(YAML_BOMBS))
@pytest.mark.parametrize("flag", ["-dm", "-am", "-cm", "-lm", "--da-config"])
def test_yaml_bombs_compare(tmp_path, capsys, monkeypatch, bomb, flag):
    """RecursionError (deep or self-referencing value) and endless walks (alias bomb) in the yaml readers."""
    t, g = copy_rank(tmp_path)
    y = tmp_path / "m.yaml"
    y.write_text(YAML_BOMBS[bomb])
    argv = ["compare", "-tp", t / "dump.json", "-gp", g / "dump.json", "-o", tmp_path / "out", flag, y]
    rc, text = run(argv + (["-da"] if flag == "--da-config" else []), capsys, monkeypatch, tmp_path)
    assert_clean(rc, text, y)


@pytest.mark.parametrize("bomb", sorted(YAML_BOMBS))
def test_yaml_bombs_merge_result(tmp_path, capsys, monkeypatch, bomb):
    fx = fixtures_or_skip()
    reports = fx / "multirank_mlp_bf16_stat_mix" / "reference_out" / "v833_compare_stepdir"
    y = tmp_path / "merge.yaml"
    y.write_text(YAML_BOMBS[bomb])
    rc, text = run(["merge_result", "-i", reports, "-o", tmp_path / "out", "-config", y], capsys, monkeypatch, tmp_path)
    assert_clean(rc, text, y)


# ------------------------------------------------------------------------ found by tools/fuzz.py (later runs)


def test_xlsx_unknown_compression(tmp_path, capsys, monkeypatch):
    """merge_result: NotImplementedError 'That compression method is not supported' (a flipped zip header)."""
    import zipfile

    fx = fixtures_or_skip()
    src = fx / "multirank_mlp_bf16_stat_mix" / "reference_out" / "v833_compare_stepdir"
    reports = tmp_path / "reports"
    shutil.copytree(src, reports)
    victim = sorted(reports.glob("*.xlsx"))[0]
    os.chmod(victim, 0o644)
    data = bytearray(victim.read_bytes())
    with zipfile.ZipFile(victim) as zf:
        infos = zf.infolist()
    for info in infos:  # compression method 99 in every local header (offset 8) ...
        data[info.header_offset + 8:info.header_offset + 10] = (99).to_bytes(2, "little")
    cd = bytes(data).find(b"PK\x01\x02")
    while cd >= 0:  # ... and central-directory entry (offset 10)
        data[cd + 10:cd + 12] = (99).to_bytes(2, "little")
        cd = bytes(data).find(b"PK\x01\x02", cd + 4)
    victim.write_bytes(bytes(data))
    y = fx / "multirank_mlp_bf16_stat_mix" / "reference_out" / "_inputs" / "merge_config.yaml"
    rc, text = run(["merge_result", "-i", reports, "-o", tmp_path / "out", "-config", y], capsys, monkeypatch, tmp_path)
    assert_clean(rc, text, victim)


def _version_needed(path: Path, version: int) -> None:
    """Set 'version needed to extract' of every central-directory entry (offset 6) of a zip to ``version``."""
    data = bytearray(path.read_bytes())
    cd = bytes(data).find(b"PK\x01\x02")
    while cd >= 0:
        data[cd + 6:cd + 8] = version.to_bytes(2, "little")
        cd = bytes(data).find(b"PK\x01\x02", cd + 4)
    path.write_bytes(bytes(data))


def test_xlsx_unknown_zip_version(tmp_path, capsys, monkeypatch):
    """merge_result xlsxread.SheetReader: NotImplementedError 'zip file version 25.5' from zipfile.ZipFile itself
    (a flipped central-directory byte; fuzzer input 2xx,xxx of the 30,000-input run on 0e5e498)."""
    fx = fixtures_or_skip()
    src = fx / "multirank_mlp_bf16_stat_mix" / "reference_out" / "v833_compare_stepdir"
    reports = tmp_path / "reports"
    shutil.copytree(src, reports)
    victim = sorted(reports.glob("*.xlsx"))[0]
    os.chmod(victim, 0o644)
    _version_needed(victim, 255)
    y = fx / "multirank_mlp_bf16_stat_mix" / "reference_out" / "_inputs" / "merge_config.yaml"
    rc, text = run(["merge_result", "-i", reports, "-o", tmp_path / "out", "-config", y], capsys, monkeypatch, tmp_path)
    assert_clean(rc, text, victim, "not a valid .xlsx")


def test_pt_unknown_zip_version(tmp_path):
    """The torch-free .pt reader: the same damaged zip header is a TensorReadError naming the file."""
    torch = pytest.importorskip("torch")
    from msprobe.core.io.tensors import load_tensor

    f = tmp_path / "t.pt"
    torch.save(torch.arange(6.0), f)
    _version_needed(f, 255)
    with pytest.raises(Exception) as info:
        load_tensor(str(f))
    assert "t.pt" in str(info.value) and type(info.value).__name__ != "NotImplementedError"


def test_ir_reader_on_a_directory(tmp_path):
    """code_mapping parse_ir: IsADirectoryError when the IR path is a directory."""
    from msprobe.core.code_mapping.ir import parse_ir
    from msprobe.core.errors import MsprobeError

    (tmp_path / "graph.ir").mkdir()
    with pytest.raises(MsprobeError, match="directory"):
        parse_ir(str(tmp_path / "graph.ir"))


def test_op_generate_nul_in_path(tmp_path, capsys, monkeypatch):
    """op_generate: ValueError 'embedded null byte' from os.link (a \\u0000 in extract_api_path)."""
    pytest.importorskip("torch")
    t, g = copy_rank(tmp_path)
    cfg = _op_config(tmp_path, t / "dump.json", extract_api_path=str(tmp_path / "ex\u0000tract.json"))
    rc, text = run(["op_generate", "-i", cfg, "-o", tmp_path / "out"], capsys, monkeypatch, tmp_path)
    assert_clean(rc, text, "extract_api_path", "NUL")


def test_merge_short_row_unsorted_columns(tmp_path, capsys, monkeypatch):
    """merge_result xlsxread._batch: IndexError when a row has fewer cells than the highest wanted column
    (the wanted columns are not in ascending order)."""
    from msprobe.core.merge.xlsxread import SheetReader

    fx = fixtures_or_skip()
    src = sorted((fx / "multirank_mlp_bf16_stat_mix" / "reference_out" / "v833_compare_stepdir").glob("*.xlsx"))[0]
    with SheetReader(str(src)) as r:
        head = r.header()
        body = b'<row r="2"><c r="A2" t="inlineStr"><is><t>x</t></is></c></row>'  # one cell only
        rows = r._batch([body], [0, len(head) - 1, 2])
    assert rows == [("x", None, None)]


def test_pt_beyond_memory_refused_before_loading(tmp_path, monkeypatch):
    """A .pt whose tensor needs more memory than is available is refused from its header."""
    torch = pytest.importorskip("torch")
    from msprobe.core.io.tensors import TensorReadError, load_pt

    p = tmp_path / "x.pt"
    torch.save(torch.zeros(1000, 1000), p)
    monkeypatch.setenv("MSPROBE_MEMORY_LIMIT", "1000000")
    with pytest.raises(TensorReadError, match="memory") as err:
        load_pt(p)
    assert str(p) in str(err.value) and "4000000 bytes" in str(err.value)


def test_sigterm_blocked_across_fork():
    """A worker stopped with SIGTERM while Python's after-fork hooks run printed 'Exception ignored ...
    KeyboardInterrupt' (tools/fuzz.py): SIGTERM stays blocked until the child has reset its handler, and
    is unblocked again in both processes."""
    import signal

    from msprobe.core.resources import process_guards

    with process_guards():
        pid = os.fork()
        if pid == 0:  # pragma: no cover - child
            mask = signal.pthread_sigmask(signal.SIG_BLOCK, set())
            os._exit(0 if signal.SIGTERM not in mask and signal.getsignal(signal.SIGTERM) == signal.SIG_DFL else 3)
        _, status = os.waitpid(pid, 0)
        assert os.WEXITSTATUS(status) == 0
        assert signal.SIGTERM not in signal.pthread_sigmask(signal.SIG_BLOCK, set())


def _fails_in_worker(task, emit):
    if task == 1:
        raise IndexError("list index out of range in the worker")
    return task


def test_internal_error_in_a_worker_logs_the_worker_traceback(tmp_path, monkeypatch, capsys):
    """An internal error raised in a forked worker: the log holds the worker's own traceback (before, only
    the parent's re-raise in procpool.run_tasks, which names no line of the real fault)."""
    from msprobe.cli.main import report_internal_error
    from msprobe.core.procpool import run_tasks

    with pytest.raises(IndexError) as err:
        run_tasks(_fails_in_worker, [0, 1, 2], 2)
    monkeypatch.setenv("MSPROBE_LOG_DIR", str(tmp_path / "_logs"))
    monkeypatch.delenv("MSPROBE_DEBUG", raising=False)
    assert report_internal_error(err.value, ["msprobe", "merge_result"]) == 1
    log = next((tmp_path / "_logs").glob("*.log")).read_text()
    assert "In the worker process:" in log and "_fails_in_worker" in log
    assert "internal error: IndexError" in capsys.readouterr().err


def test_deep_and_truncated_dump_json(tmp_path, capsys, monkeypatch):
    """RecursionError from the stdlib JSON fallback (orjson refused the file for another reason: it is cut
    short) while compare tries to repair a truncated dump.json (found by tools/fuzz.py)."""
    t, g = copy_rank(tmp_path)
    text = (g / "dump.json").read_text()
    cut = text.index('"output"')
    (g / "dump.json").write_text(text[:cut] + '"output": ' + "[" * 5000)
    rc, out = run(["compare", "-tp", t / "dump.json", "-gp", g / "dump.json", "-o", tmp_path / "out", "--csv"],
                  capsys, monkeypatch, tmp_path)
    assert "Traceback" not in out and "internal error" not in out, out
    assert rc in (0, 2), out


def test_loads_recursion_becomes_depth_error():
    from msprobe.core.fileio import JsonTooDeep, _loads

    with pytest.raises(JsonTooDeep):
        _loads(b'{"a": ' + b"[" * 100000 + b"NaN")


def test_run_ut_data_name_not_a_string(tmp_path, capsys, monkeypatch):
    """Fuzzer signature run_ut:internal:TypeError:core/acc_check/plan.py:<listcomp> (a ``data_name`` that is
    a number reached ``os.path.isfile``): the API is skipped with its reason, the rest are judged."""
    t, _ = copy_rank(tmp_path, TENSOR)
    names = []

    def damage(obj):
        for name, rec in obj["data"].items():
            if name.endswith(".forward"):
                args = rec.get("input_args") or []
                if args and isinstance(args[0], dict) and "data_name" in args[0]:
                    args[0]["data_name"] = 1.5
                    names.append(name)
                    return

    edit_json(t / "dump.json", damage)
    assert names
    rc, text = run(["-f", "pytorch", "run_ut", "-api_info", t / "dump.json", "-o", tmp_path / "out",
                    "--data_mode", "real_data", "-q"], capsys, monkeypatch, tmp_path)
    assert rc == 0, text
    assert "Traceback" not in text and "internal error" not in text, text
    result = next((tmp_path / "out").glob("accuracy_checking_result_*.csv")).read_text("utf-8-sig")
    api = names[0].rsplit(".", 1)[0]
    row = next(line for line in result.splitlines() if line.startswith(api + ","))
    assert "no data_name" in row and "SKIP" in row, row


@pytest.mark.parametrize("where", ["dtype", "type"])
def test_run_ut_unhashable_dtype_or_type(tmp_path, capsys, monkeypatch, where):
    """Fuzzer signature run_ut:internal:TypeError:core/acc_check/plan.py:<setcomp> (a tensor record whose
    ``dtype`` is a dict or list: "unhashable type"): the API is skipped or judged, never an internal error."""
    t, _ = copy_rank(tmp_path, STAT)

    def damage(obj):
        for name, rec in obj["data"].items():
            args = rec.get("input_args") or []
            if name.endswith(".forward") and args and isinstance(args[0], dict) and "dtype" in args[0]:
                args[0][where] = {"x": [1]} if where == "dtype" else ["torch.Tensor"]
                return

    edit_json(t / "dump.json", damage)
    rc, text = run(["-f", "pytorch", "run_ut", "-api_info", t / "dump.json", "-o", tmp_path / "out", "-q"],
                   capsys, monkeypatch, tmp_path)
    assert "Traceback" not in text and "internal error" not in text, text
    assert rc == 0, text


# ---------------------------------------------- grad_compare and csv2tensorboard (tools/fuzz.py's new scenarios)


def _grad_dumps(tmp_path: Path):
    """Two grad_probe L1 dumps (rank0, 2 steps, 2 parameters) in the layout grad_probe writes."""
    from msprobe.core.grad_probe import stats

    names, shapes = ["fc.weight", "fc.bias"], [(2, 3), (2,)]
    rng = np.random.default_rng(0)
    for run_name in ("a", "b"):
        rank = tmp_path / run_name / "rank0"
        for step in range(2):
            grads = [rng.standard_normal(s) for s in shapes]
            numbers = np.array([[g.max(), g.min(), np.linalg.norm(g)] for g in grads])
            (rank / f"step{step}").mkdir(parents=True)
            (rank / f"grad_summary_{step}.csv").write_bytes(
                stats.csv_bytes(stats.summary_rows("L1", [], names, shapes, numbers)))
            for n, g in zip(names, grads):
                np.save(rank / f"step{step}" / f"{n}.npy", g > 0)
    return tmp_path / "a", tmp_path / "b"


@pytest.mark.parametrize("damage", ["latin-1", "directory"])
def test_grad_compare_summary_csv_unreadable(tmp_path, capsys, monkeypatch, damage):
    """Fuzzer signatures grad_compare:internal:UnicodeDecodeError:core/grad_probe/stats.py and
    IsADirectoryError:core/grad_probe/stats.py:read_summary (a grad_summary csv in another encoding, or a folder
    in its place): one line naming the file."""
    a, b = _grad_dumps(tmp_path)
    csv_path = a / "rank0" / "grad_summary_0.csv"
    if damage == "latin-1":
        csv_path.write_bytes(csv_path.read_bytes()[3:].decode("utf-8").replace("fc.bias", "fc.bi\u00e9s").encode("latin-1"))
    elif damage == "directory":
        csv_path.unlink()
        csv_path.mkdir()
    rc, text = run(["grad_compare", "-d1", a, "-d2", b, "-o", tmp_path / "out", "--no_plots"], capsys, monkeypatch, tmp_path)
    assert_clean(rc, text, csv_path)


def test_grad_compare_parameter_named_twice(tmp_path, capsys, monkeypatch):
    """Fuzzer signature grad_compare:internal:ValueError:core/grad_probe/grad_compare.py:find_divergence (a
    grad_summary csv naming a parameter twice gave that parameter two similarities a step: "inhomogeneous shape")."""
    a, b = _grad_dumps(tmp_path)
    csv_path = a / "rank0" / "grad_summary_0.csv"
    lines = csv_path.read_bytes().split(b"\r\n")
    csv_path.write_bytes(b"\r\n".join(lines[:2] + lines[1:]))
    rc, text = run(["grad_compare", "-d1", a, "-d2", b, "-o", tmp_path / "out", "--no_plots"], capsys, monkeypatch, tmp_path)
    assert_clean(rc, text, csv_path, "'fc.weight' twice")


def _monitor_folder(tmp_path: Path) -> Path:
    d = tmp_path / "monitor_output" / "Nov25_14-04-10-rank0-abc"
    d.mkdir(parents=True)
    rows = ["vpp_stage,name,step,micro_step,norm,max,shape,dtype"]
    rows += [f'0,fc.output,{s},0,{s + 1.5},{s},"[2, 3]",torch.float32' for s in range(3)]
    (d / "actv_0-2.csv").write_text("\n".join(rows) + "\n")
    return d


@pytest.mark.parametrize("damage", ["latin-1", "directory", "no_step_column", "step_not_a_number",
                                    "step_beyond_int64"])
def test_csv2tensorboard_damaged_csv(tmp_path, capsys, monkeypatch, damage):
    """Fuzzer signatures csv2tensorboard:internal:UnicodeDecodeError / IsADirectoryError / ValueError in
    core/monitor/csv2tb.py:read_type (a CSV in another encoding, a folder in its place, a header without
    ``step``, a step cell that is not an integer; and, found reading that code, a step beyond int64): one line
    naming the file."""
    pytest.importorskip("tensorboard")
    d = _monitor_folder(tmp_path)
    p = d / "actv_0-2.csv"
    text = p.read_text()
    if damage == "latin-1":
        p.write_bytes(text.replace("fc.output", "fc.\u00e9").encode("latin-1"))
    elif damage == "directory":
        p.unlink()
        p.mkdir()
    elif damage == "no_step_column":
        p.write_text(text.replace(",step,", ",stp,", 1))
    elif damage == "step_not_a_number":
        p.write_text(text.replace("0,fc.output,1,", "0,fc.output,x,", 1))
    else:
        p.write_text(text.replace("0,fc.output,1,", "0,fc.output,99999999999999999999999,", 1))
    rc, out = run(["csv2tensorboard", "-d", d.parent, "-o", tmp_path / "tb"], capsys, monkeypatch, tmp_path)
    assert_clean(rc, out, p)


@pytest.mark.parametrize("damage", ["huge_header", "pickled"])
def test_grad_compare_direction_file_checked_before_loading(tmp_path, capsys, monkeypatch, damage):
    """Seen in the grad_compare fuzz scenario: a direction .npy whose damaged header claims 10,000,000,000
    float32 made numpy try to allocate 37 GiB ("Unable to allocate ..."), and an object array answered with numpy's
    advice to load it with allow_pickle.  Both are refused from the header now, before numpy reads the data."""
    a, b = _grad_dumps(tmp_path)
    victim = b / "rank0" / "step1" / "fc.weight.npy"
    if damage == "huge_header":
        head = "{'descr': '<f4', 'fortran_order': False, 'shape': (10000000000,), }"
        head = head + " " * (118 - len(head)) + "\n"
        victim.write_bytes(b"\x93NUMPY\x01\x00" + len(head).to_bytes(2, "little") + head.encode() + b"\0" * 64)
    else:
        np.save(victim, np.array([{"x": 1}, None], dtype=object), allow_pickle=True)
    real_load = np.load

    def guarded_load(path, *args, **kwargs):
        assert os.fspath(path) != str(victim), "np.load called on the damaged file"
        return real_load(path, *args, **kwargs)

    monkeypatch.setattr(np, "load", guarded_load)
    rc, text = run(["grad_compare", "-d1", a, "-d2", b, "-o", tmp_path / "out", "--no_plots"], capsys, monkeypatch, tmp_path)
    line = assert_clean(rc, text, victim, "dump the run again")
    assert ("10 GiB limit" if damage == "huge_header" else "pickled") in line
    assert "allow_pickle" not in line


# ------------------------------------------------------------------- config_check (tools/fuzz.py's new scenarios)


def test_config_check_pack_entries_clash(tmp_path, capsys, monkeypatch):
    """Seen in the config_check_compare fuzz scenario: a pack holding both ``weights/step0/rank0`` (a file) and
    ``weights/step0/rank0/weight.json`` failed extracting with "cannot write result.xlsx in OUT: File exists",
    blaming the output.  Now one line naming the pack and the entry, and nothing is left in OUT."""
    from msprobe.core.config_check import pack as P

    entries = {P.ENV: P.to_json({"A": "1"}), P.PIP: b"numpy=2.0\n",
               P.weights_entry(0, 0): P.to_json({"fc.weight": {"max": 1.0, "min": 0.0, "mean": 0.5, "norm": 2.0}})}
    bench, cmp = tmp_path / "bench.zip", tmp_path / "cmp.zip"
    P.build_zip(str(bench), entries)
    P.build_zip(str(cmp), dict(entries, **{"weights/step0/rank0": b"{}"}))
    out = tmp_path / "out"
    rc, text = run(["config_check", "-c", bench, cmp, "-o", out], capsys, monkeypatch, tmp_path)
    assert_clean(rc, text, cmp, "'weights/step0/rank0'", "clashes")
    assert not out.exists() or not os.listdir(out)


def test_config_check_checkpoint_shard_missing(tmp_path, capsys, monkeypatch):
    """Seen in the config_check_ckpt fuzz scenario: with ``mp_rank_01/model_optim_rng.pt`` a folder (or gone) in
    a tensor_model_parallel_size 2 checkpoint, the remaining shard was compared as the whole parameter (shape
    warnings, a similarity file written).  Now one line naming the missing shard."""
    torch = pytest.importorskip("torch")
    import argparse

    def ckpt(root: Path, drop_second: bool):
        torch.manual_seed(0)
        qkv = torch.randn(8, 4)
        for r in range(2):
            d = root / "iter_0000005" / f"mp_rank_{r:02d}"
            d.mkdir(parents=True)
            if r == 1 and drop_second:
                (d / "model_optim_rng.pt").mkdir()
                continue
            torch.save({"model": {"decoder.layers.0.self_attention.linear_qkv.weight": qkv.chunk(2, 0)[r]},
                        "args": argparse.Namespace(tensor_model_parallel_size=2, pipeline_model_parallel_size=1),
                        "iteration": 5}, d / "model_optim_rng.pt")
        (root / "latest_checkpointed_iteration.txt").write_text("5")
        return root

    a, b = ckpt(tmp_path / "a", True), ckpt(tmp_path / "b", False)
    out = tmp_path / "sim.json"
    rc, text = run(["config_check", "-c", a, b, "-o", out], capsys, monkeypatch, tmp_path)
    assert_clean(rc, text, "tensor_model_parallel_size 2", "the shard of tp 1 is missing")
    assert not out.exists()
    rc, text = run(["config_check", "-c", b, b, "-o", out], capsys, monkeypatch, tmp_path)
    assert rc == 0, text
    assert json.loads(out.read_text())["decoder.layers.0.self_attention.linear_qkv.weight"]["shape"] == [8, 4]


def test_config_check_pack_damaged_deflate_stream(tmp_path, capsys, monkeypatch):
    """Fuzzer signature config_check:internal:error:core/config_check/pack.py:read_pack (a flipped byte inside
    an entry's deflate stream: zlib.error "invalid distance too far back" out of ZipFile.read)."""
    import zipfile
    import zlib

    from msprobe.core.config_check import pack as P

    env = P.to_json({f"VAR_{i}": "value " * (i % 7) for i in range(200)})
    good = tmp_path / "good.zip"
    with zipfile.ZipFile(good, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr(P.ENV, env)
        zf.writestr(P.PIP, b"numpy=2.0\n")
    data = good.read_bytes()
    with zipfile.ZipFile(good) as zf:
        info = zf.getinfo(P.ENV)
    start = info.header_offset + 30 + len(info.filename.encode()) + len(info.extra)
    bad = tmp_path / "bad.zip"
    for i in range(start, start + info.compress_size):  # the first byte flip that zlib itself refuses
        damaged = bytearray(data)
        damaged[i] ^= 0x55
        try:
            zlib.decompress(bytes(damaged[start:start + info.compress_size]), -15)
        except zlib.error:
            bad.write_bytes(bytes(damaged))
            break
    assert bad.exists()
    rc, text = run(["config_check", "-c", bad, good, "-o", tmp_path / "out"], capsys, monkeypatch, tmp_path)
    assert_clean(rc, text, bad, "cannot be read as a zip")


@pytest.mark.parametrize("damage", ["latin-1", "directory", "no_step_column", "step_not_a_number", "vpp_not_a_number",
                                    "micro_not_a_number", "stat_column_missing_in_second_file"])
def test_csv2db_damaged_csv(tmp_path, damage):
    """The csv2tensorboard signatures above, in csv2db's reader of the same CSVs (found reading that code; csv2db
    is a Python API): UnicodeDecodeError, IsADirectoryError, ValueError ('step' is not in list, int('x')) became
    one MsprobeError naming the file."""
    from msprobe.core.errors import MsprobeError
    from msprobe.core.monitor.csv2db import CSV2DBConfig, csv2db

    d = _monitor_folder(tmp_path)
    p = d / "actv_0-2.csv"
    text = p.read_text()
    if damage == "latin-1":
        p.write_bytes(text.replace("fc.output", "fc.\u00e9").encode("latin-1"))
    elif damage == "directory":
        p.unlink()
        p.mkdir()
    elif damage == "no_step_column":
        p.write_text(text.replace(",step,", ",stp,", 1))
    elif damage == "step_not_a_number":
        p.write_text(text.replace("0,fc.output,1,", "0,fc.output,x,", 1))
    elif damage == "vpp_not_a_number":
        p.write_text(text.replace("0,fc.output,1,", "v,fc.output,1,", 1))
    elif damage == "micro_not_a_number":
        p.write_text(text.replace("0,fc.output,1,0,", "0,fc.output,1,1.5,", 1))
    else:
        p = d / "actv_3-5.csv"
        p.write_text('vpp_stage,name,step,micro_step,max,shape,dtype\n0,fc.output,3,0,1.0,"[2, 3]",torch.float32\n')
    with pytest.raises(MsprobeError) as err:
        csv2db(CSV2DBConfig(str(d.parent), output_dirpath=str(tmp_path / "db")))
    assert str(p) in str(err.value) and "\n" not in str(err.value)
