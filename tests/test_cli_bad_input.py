"""The command line on bad input: one clear line, exit status 2, no traceback, nothing left in -o.

Every case runs ``python -m msprobe`` in a subprocess (cwd = tmp_path) on a small, writable copy of a
reference dump and checks that

* the exit status is 2;
* stderr is exactly one line, starting with ``msprobe: error: `` and naming the offending path or key;
* no traceback is printed;
* the output directory holds no file (no report, no partial or temporary file).

Each bug these tests found was fixed in msprobe and its test kept as a regression test.
"""

from __future__ import annotations

import csv
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import fixtures_or_skip

REPO = Path(__file__).resolve().parents[1]

STAT = "mlp_bf16_stat_mix"
TENSOR = "mlp_bf16_tensor_mix"
MULTI = "multirank_mlp_bf16_stat_mix"
MD5 = "mlp_bf16_md5"

GB = 1024 ** 3


# --------------------------------------------------------------------------------------------- helpers


def run_cli(args, cwd, env_extra=None, timeout=120):
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    for var in ("MSPROBE_DEBUG", "MSPROBE_MEMORY_LIMIT"):
        env.pop(var, None)
    env.update(env_extra or {})
    return subprocess.run(
        [sys.executable, "-m", "msprobe", *[str(a) for a in args]],
        cwd=str(cwd), env=env, capture_output=True, text=True, timeout=timeout,
    )


def copy_tree(src: Path, dst: Path) -> Path:
    """Copy a (read-only) fixture directory and make the copy writable."""
    shutil.copytree(src, dst)
    for root, dirs, files in os.walk(dst):
        os.chmod(root, 0o755)
        for f in files:
            os.chmod(os.path.join(root, f), 0o644)
    return dst


def files_under(d: Path):
    if not d.exists():
        return []
    if not d.is_dir():
        return [d]
    return sorted(p for p in d.rglob("*") if not p.is_dir())


def assert_user_error(res, out_dir: Path, *needles):
    """Exit 2, exactly one 'msprobe: error:' line naming every needle, no traceback, no file in out_dir."""
    detail = f"rc={res.returncode}\nstdout:\n{res.stdout}\nstderr:\n{res.stderr}"
    assert "Traceback" not in res.stderr, detail
    assert res.returncode == 2, detail
    # the stage progress lines ("[msprobe] INFO compare: read ...") of stages that finished before the error
    lines = [line for line in res.stderr.splitlines() if line.strip() and not line.startswith("[msprobe] INFO ")]
    assert len(lines) == 1, detail
    line = lines[0]
    assert line.startswith("msprobe: error: "), detail
    assert len(line) > len("msprobe: error: ") + 20, detail
    for needle in needles:
        assert str(needle) in line, f"{needle!r} not in the message\n{detail}"
    assert "ends successfully" not in res.stdout, detail
    assert files_under(out_dir) == [], f"files left in the output dir: {files_under(out_dir)}\n{detail}"
    return line


def assert_argparse_error(res, out_dir: Path):
    detail = f"rc={res.returncode}\nstdout:\n{res.stdout}\nstderr:\n{res.stderr}"
    assert res.returncode == 2, detail
    assert "Traceback" not in res.stderr, detail
    assert "error:" in res.stderr, detail
    assert files_under(out_dir) == [], detail


@pytest.fixture
def stat_pair(tmp_path):
    """Writable copies of the statistics rank dirs: (target_rank_dir, golden_rank_dir)."""
    fx = fixtures_or_skip()
    t = copy_tree(fx / STAT / "target" / "step0" / "rank", tmp_path / "t" / "rank")
    g = copy_tree(fx / STAT / "golden" / "step0" / "rank", tmp_path / "g" / "rank")
    return t, g


@pytest.fixture
def tensor_pair(tmp_path):
    fx = fixtures_or_skip()
    t = copy_tree(fx / TENSOR / "target" / "step0" / "rank", tmp_path / "t" / "rank")
    g = copy_tree(fx / TENSOR / "golden" / "step0" / "rank", tmp_path / "g" / "rank")
    return t, g


@pytest.fixture
def multi_pair(tmp_path):
    fx = fixtures_or_skip()
    t = copy_tree(fx / MULTI / "target" / "step0", tmp_path / "t" / "step0")
    g = copy_tree(fx / MULTI / "golden" / "step0", tmp_path / "g" / "step0")
    return t, g


def compare_files(tmp_path, target, golden, *extra, env=None):
    out = tmp_path / "out"
    return run_cli(["compare", "-tp", target, "-gp", golden, "-o", out, "-q", *extra], tmp_path, env), out


def rewrite_json(path: Path, edit):
    obj = json.loads(path.read_text())
    obj = edit(obj)
    path.write_text(json.dumps(obj, indent=1))


def first_tensor(obj):
    """The first tensor record of a dump.json object (depth-first)."""
    stack = [obj["data"]]
    while stack:
        v = stack.pop(0)
        if isinstance(v, dict):
            if v.get("type") == "torch.Tensor":
                return v
            stack = list(v.values()) + stack
        elif isinstance(v, list):
            stack = list(v) + stack
    raise AssertionError("no tensor in the dump")


# ------------------------------------------------------------------------------------------ input paths


def test_missing_target_path(stat_pair, tmp_path):
    _, g = stat_pair
    missing = tmp_path / "nope" / "dump.json"
    res, out = compare_files(tmp_path, missing, g / "dump.json")
    line = assert_user_error(res, out, missing, "target")
    assert "does not exist" in line


def test_missing_golden_path(stat_pair, tmp_path):
    t, _ = stat_pair
    missing = tmp_path / "nope" / "dump.json"
    res, out = compare_files(tmp_path, t / "dump.json", missing)
    line = assert_user_error(res, out, missing, "golden")
    assert "does not exist" in line


def test_file_versus_directory(stat_pair, tmp_path):
    t, g = stat_pair
    res, out = compare_files(tmp_path, t / "dump.json", g)
    line = assert_user_error(res, out, t / "dump.json", g)
    assert "a file" in line and "a directory" in line


def test_empty_directory(stat_pair, tmp_path):
    _, g = stat_pair
    empty = tmp_path / "empty"
    empty.mkdir()
    res, out = compare_files(tmp_path, empty, g.parent)
    line = assert_user_error(res, out, empty)
    assert "empty directory" in line


def test_directory_without_dump_or_rank_dirs(stat_pair, tmp_path):
    _, g = stat_pair
    d = tmp_path / "junk"
    (d / "notes").mkdir(parents=True)
    (d / "readme.txt").write_text("hello")
    res, out = compare_files(tmp_path, d, g.parent)
    line = assert_user_error(res, out, d)
    assert "no dump.json" in line and "rank" in line


def test_dump_root_suggests_step_dir(tmp_path):
    fx = fixtures_or_skip()
    t = copy_tree(fx / STAT / "target", tmp_path / "troot")
    g = copy_tree(fx / STAT / "golden", tmp_path / "groot")
    res, out = compare_files(tmp_path, t, g)
    assert_user_error(res, out, t, "step0", os.path.join(str(t), "step0"))


def test_symlinked_input_is_refused(stat_pair, tmp_path):
    t, g = stat_pair
    link = tmp_path / "link.json"
    link.symlink_to(t / "dump.json")
    res, out = compare_files(tmp_path, link, g / "dump.json")
    line = assert_user_error(res, out, link)
    assert "symbolic link" in line and str(t / "dump.json") in line


def test_symlinked_dump_json_inside_rank_dir_is_refused(stat_pair, tmp_path):
    t, g = stat_pair
    real = tmp_path / "real_dump.json"
    shutil.move(str(t / "dump.json"), real)
    (t / "dump.json").symlink_to(real)
    res, out = compare_files(tmp_path, t, g)
    assert_user_error(res, out, t / "dump.json", "symbolic link")


def test_missing_compare_json(tmp_path):
    missing = tmp_path / "compare.json"
    res = run_cli(["-f", "pytorch", "compare", "-i", missing, "-o", tmp_path / "out"], tmp_path)
    assert_user_error(res, tmp_path / "out", missing)


# --------------------------------------------------------------------------------------- broken dump.json


def test_truncated_dump_json(stat_pair, tmp_path):
    """Cut inside 'data' (a writer killed mid-write, a half copy): compare uses the complete records and
    warns, naming the last one (issue 17 item 4); cut before any complete record: one error line."""
    t, g = stat_pair
    data = (t / "dump.json").read_bytes()
    (t / "dump.json").write_bytes(data[: len(data) // 2])
    res, out = compare_files(tmp_path, t / "dump.json", g / "dump.json")
    assert res.returncode == 0 and "Traceback" not in res.stderr, res.stderr
    kept = json.loads(data)["data"]
    warn = [ln for ln in res.stderr.splitlines() if "is cut short" in ln]
    assert len(warn) == 1 and str(t / "dump.json") in warn[0]
    import re

    n = int(re.search(r"using its first (\d+) records", warn[0]).group(1))
    assert 0 < n < len(kept) and f"up to {list(kept)[n - 1]} " in warn[0]
    (t / "dump.json").write_bytes(data[:300])
    (tmp_path / "second").mkdir()
    res, out = compare_files(tmp_path / "second", t / "dump.json", g / "dump.json")
    line = assert_user_error(res, out, t / "dump.json")
    assert "not valid JSON" in line and "re-run the dump" in line


def test_garbage_dump_json(stat_pair, tmp_path):
    t, g = stat_pair
    (g / "dump.json").write_bytes(b"\x00\xffthis is not json at all }{")
    res, out = compare_files(tmp_path, t / "dump.json", g / "dump.json")
    line = assert_user_error(res, out, g / "dump.json", "golden")
    assert "not valid JSON" in line


def test_empty_dump_json(stat_pair, tmp_path):
    t, g = stat_pair
    (t / "dump.json").write_text("  \n")
    res, out = compare_files(tmp_path, t / "dump.json", g / "dump.json")
    line = assert_user_error(res, out, t / "dump.json")
    assert "empty" in line


def test_top_level_list(stat_pair, tmp_path):
    t, g = stat_pair
    (t / "dump.json").write_text('[{"task": "statistics"}]')
    res, out = compare_files(tmp_path, t / "dump.json", g / "dump.json")
    line = assert_user_error(res, out, t / "dump.json")
    assert "not an object" in line


def test_no_task(stat_pair, tmp_path):
    t, g = stat_pair
    rewrite_json(t / "dump.json", lambda o: {k: v for k, v in o.items() if k != "task"})
    res, out = compare_files(tmp_path, t / "dump.json", g / "dump.json")
    assert_user_error(res, out, t / "dump.json", "'task'")


def test_no_data(stat_pair, tmp_path):
    t, g = stat_pair
    rewrite_json(g / "dump.json", lambda o: {k: v for k, v in o.items() if k != "data"})
    res, out = compare_files(tmp_path, t / "dump.json", g / "dump.json")
    assert_user_error(res, out, g / "dump.json", "'data'")


def test_data_not_an_object(stat_pair, tmp_path):
    t, g = stat_pair
    rewrite_json(t / "dump.json", lambda o: {**o, "data": [1, 2, 3]})
    res, out = compare_files(tmp_path, t / "dump.json", g / "dump.json")
    line = assert_user_error(res, out, t / "dump.json", "'data'")
    assert "list" in line


def test_empty_data(stat_pair, tmp_path):
    t, g = stat_pair
    rewrite_json(t / "dump.json", lambda o: {**o, "data": {}})
    res, out = compare_files(tmp_path, t / "dump.json", g / "dump.json")
    line = assert_user_error(res, out, t / "dump.json")
    assert "nothing to compare" in line


def test_task_structure(stat_pair, tmp_path):
    t, g = stat_pair
    rewrite_json(t / "dump.json", lambda o: {**o, "task": "structure"})
    res, out = compare_files(tmp_path, t / "dump.json", g / "dump.json")
    assert_user_error(res, out, t / "dump.json", "'structure'", "statistics", "tensor")


def test_statistics_versus_tensor(tmp_path):
    fx = fixtures_or_skip()
    t = copy_tree(fx / STAT / "target" / "step0" / "rank", tmp_path / "t" / "rank")
    g = copy_tree(fx / TENSOR / "golden" / "step0" / "rank", tmp_path / "g" / "rank")
    res, out = compare_files(tmp_path, t / "dump.json", g / "dump.json")
    assert_user_error(res, out, t / "dump.json", g / "dump.json", "'statistics'", "'tensor'")


def _md5_vs_stat(tmp_path):
    fx = fixtures_or_skip()
    t = copy_tree(fx / MD5 / "target" / "step0" / "rank", tmp_path / "t" / "rank")
    g = copy_tree(fx / STAT / "golden" / "step0" / "rank", tmp_path / "g" / "rank")
    res, out = compare_files(tmp_path, t / "dump.json", g / "dump.json")
    return res, out, t, g


def test_md5_versus_statistics(tmp_path):
    res, out, _, _ = _md5_vs_stat(tmp_path)
    line = assert_user_error(res, out, "md5", "target", "summary_mode")
    assert "statistics" in line


def test_md5_versus_statistics_names_the_files(tmp_path):
    res, out, t, g = _md5_vs_stat(tmp_path)
    assert_user_error(res, out, t / "dump.json", g / "dump.json")


@pytest.mark.parametrize("key", ["shape", "dtype"])
def test_tensor_entry_without(stat_pair, tmp_path, key):
    t, g = stat_pair

    def drop(o):
        del first_tensor(o)[key]
        return o

    rewrite_json(t / "dump.json", drop)
    res, out = compare_files(tmp_path, t / "dump.json", g / "dump.json")
    line = assert_user_error(res, out, t / "dump.json", f"'{key}'")
    # the row that lost it is named: the first tensor of the dump
    assert "Functional.linear.0.forward.input.0" in line


def test_shape_not_a_list(stat_pair, tmp_path):
    t, g = stat_pair

    def bad(o):
        first_tensor(o)["shape"] = "8x32"
        return o

    rewrite_json(g / "dump.json", bad)
    res, out = compare_files(tmp_path, t / "dump.json", g / "dump.json")
    assert_user_error(res, out, g / "dump.json", "'shape'", "Functional.linear.0.forward")


def test_damaged_stack_json(stat_pair, tmp_path):
    t, g = stat_pair
    (t / "stack.json").write_text('{"Functional.linear.0.forward": ')
    res, out = compare_files(tmp_path, t / "dump.json", g / "dump.json")
    assert_user_error(res, out, t / "stack.json")


# ------------------------------------------------------------------------------------------ tensor mode


def test_tensor_file_missing(tensor_pair, tmp_path):
    t, g = tensor_pair
    victim = t / "dump_tensor_data" / "Functional.linear.0.forward.input.0.pt"
    assert victim.is_file()
    victim.unlink()
    res, out = compare_files(tmp_path, t, g)
    line = assert_user_error(res, out, victim)
    assert "missing" in line


def test_tensor_dir_missing(tensor_pair, tmp_path):
    t, g = tensor_pair
    shutil.rmtree(g / "dump_tensor_data")
    res, out = compare_files(tmp_path, t, g)
    line = assert_user_error(res, out, g / "dump_tensor_data")
    assert "does not exist" in line


def test_symlinked_tensor_file_is_not_read(tensor_pair, tmp_path):
    t, g = tensor_pair
    victim = t / "dump_tensor_data" / "Functional.linear.0.forward.input.2.pt"
    real = tmp_path / "elsewhere.pt"
    shutil.move(str(victim), real)
    victim.symlink_to(real)
    out = tmp_path / "out"
    res = run_cli(["compare", "-tp", t, "-gp", g, "-o", out, "-q", "--csv"], tmp_path)
    assert "Traceback" not in res.stderr
    if res.returncode == 2:  # refused as a whole, naming the link
        errors = [ln for ln in res.stderr.splitlines() if not ln.startswith("[msprobe] INFO ")]   # stage lines
        assert errors[0].startswith("msprobe: error: ") and str(victim) in res.stderr
        return
    assert res.returncode == 0
    (name,) = sorted(os.listdir(out))
    rows = list(csv.reader((out / name).read_text(encoding="utf-8").splitlines()))
    h = rows[0]
    (row,) = [r for r in rows if r[0] == "Functional.linear.0.forward.input.2"]
    assert row[h.index("Cosine")] == "No data"  # not compared through the link


@pytest.mark.parametrize("value", [5, ["x.pt"]], ids=["int", "list"])
def test_non_string_data_name(tensor_pair, tmp_path, value):
    t, g = tensor_pair

    def bad(o):
        first_tensor(o)["data_name"] = value
        return o

    rewrite_json(t / "dump.json", bad)
    res, out = compare_files(tmp_path, t, g)
    line = assert_user_error(res, out, t / "dump.json", "data_name")
    assert "internal error" not in line


# ------------------------------------------------------------------------------------------- multi-rank


def test_rank_on_one_side_only(multi_pair, tmp_path):
    t, g = multi_pair
    shutil.rmtree(g / "rank1")
    res, out = compare_files(tmp_path, t, g)
    line = assert_user_error(res, out, "rank1", t)
    assert "only in the target" in line


def test_rank_dir_without_dump_json(multi_pair, tmp_path):
    t, g = multi_pair
    (g / "rank1" / "dump.json").unlink()
    res, out = compare_files(tmp_path, t, g)
    assert_user_error(res, out, g / "rank1", "dump.json")


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_one_broken_rank_leaves_no_report(multi_pair, tmp_path, jobs):
    t, g = multi_pair
    data = (g / "rank1" / "dump.json").read_bytes()
    (g / "rank1" / "dump.json").write_bytes(data[:300])   # cut before any complete record: cannot be repaired
    res, out = compare_files(tmp_path, t, g, "-j", jobs)
    assert_user_error(res, out, g / "rank1" / "dump.json")


# ------------------------------------------------------------------------------------------------ output


@pytest.mark.skipif(hasattr(os, "geteuid") and os.geteuid() == 0, reason="running as root: a 0o500 directory is still writable")
def test_unwritable_output_dir(stat_pair, tmp_path):
    t, g = stat_pair
    out = tmp_path / "ro"
    out.mkdir()
    out.chmod(0o500)
    try:
        res = run_cli(["compare", "-tp", t / "dump.json", "-gp", g / "dump.json", "-o", out, "-q"], tmp_path)
        assert_user_error(res, out, out, "-o")
    finally:
        out.chmod(0o755)


def test_output_parent_is_a_file(stat_pair, tmp_path):
    t, g = stat_pair
    afile = tmp_path / "afile"
    afile.write_text("not a dir")
    out = afile / "out"
    res = run_cli(["compare", "-tp", t / "dump.json", "-gp", g / "dump.json", "-o", out, "-q"], tmp_path)
    assert_user_error(res, out, out, "-o")
    assert afile.read_text() == "not a dir"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile", "g", "t"]


def test_output_is_a_file(stat_pair, tmp_path):
    t, g = stat_pair
    out = tmp_path / "report.xlsx"
    out.write_text("keep me")
    res = run_cli(["compare", "-tp", t / "dump.json", "-gp", g / "dump.json", "-o", out, "-q"], tmp_path)
    line = res.stderr.strip()
    assert res.returncode == 2 and line.startswith("msprobe: error: ") and "\n" not in line, res.stderr
    assert str(out) in line and "-o" in line
    assert out.read_text() == "keep me"


# ----------------------------------------------------------------------------------------------- memory


def test_5gb_dump_json_is_refused_before_reading(stat_pair, tmp_path):
    from msprobe.core.fileio import json_size_limit

    t, g = stat_pair
    big = t / "dump.json"
    os.truncate(big, 5 * GB)  # sparse: no disk used
    env = {}
    if json_size_limit() >= 5 * GB:  # a machine with > 60 GB free would accept it: pin the limit lower
        env["MSPROBE_MEMORY_LIMIT"] = str(24 * GB)
    res, out = compare_files(tmp_path, big, g / "dump.json", env=env)
    line = assert_user_error(res, out, big, "5.0 GB", "limit")
    assert "memory" in line
    assert "dump fewer steps" in line  # what to do


def test_dump_json_over_hard_cap(stat_pair, tmp_path):
    t, g = stat_pair
    big = g / "dump.json"
    os.truncate(big, 11 * GB)
    res, out = compare_files(tmp_path, t / "dump.json", big, env={"MSPROBE_MEMORY_LIMIT": "1e15"})
    assert_user_error(res, out, big, "11.0 GB", "limit of 10.0 GB")


def test_memory_limit_env_refuses_small_dump(stat_pair, tmp_path):
    t, g = stat_pair
    obj = json.loads((t / "dump.json").read_text())
    text = json.dumps(obj, indent=8)
    text += " " * (100 * 1024 - len(text))  # ~100 KB, still a valid dump
    (t / "dump.json").write_text(text)
    size = (t / "dump.json").stat().st_size
    assert size == 100 * 1024
    res, out = compare_files(tmp_path, t / "dump.json", g / "dump.json", env={"MSPROBE_MEMORY_LIMIT": "1000000"})
    # limit = 1e6 bytes / 12 = 81.4 KB
    line = assert_user_error(res, out, t / "dump.json", "100.0 KB", "limit of 81.4 KB")
    assert "dump fewer steps" in line
    # the same file compares fine without the override
    res2, out2 = compare_files(tmp_path, t / "dump.json", g / "dump.json", "--csv")
    assert res2.returncode == 0, res2.stderr


def test_memory_limit_env_not_a_number(stat_pair, tmp_path):
    t, g = stat_pair
    res, out = compare_files(tmp_path, t / "dump.json", g / "dump.json", env={"MSPROBE_MEMORY_LIMIT": "lots"})
    assert_user_error(res, out, "MSPROBE_MEMORY_LIMIT", "'lots'")


# ----------------------------------------------------------------------------------------------- legacy


def legacy(tmp_path, cfg, *extra):
    cj = tmp_path / "compare.json"
    cj.write_text(cfg if isinstance(cfg, str) else json.dumps(cfg))
    out = tmp_path / "out"
    return run_cli(["-f", "pytorch", "compare", "-i", cj, "-o", out, *extra], tmp_path), out, cj


def test_legacy_missing_npu_path(stat_pair, tmp_path):
    _, g = stat_pair
    res, out, cj = legacy(tmp_path, {"bench_path": str(g / "dump.json")})
    assert_user_error(res, out, cj, "'npu_path'")


def test_legacy_missing_bench_path(stat_pair, tmp_path):
    t, _ = stat_pair
    res, out, cj = legacy(tmp_path, {"npu_path": str(t / "dump.json"), "bench_path": ""})
    assert_user_error(res, out, cj, "'bench_path'")


def test_legacy_not_an_object(stat_pair, tmp_path):
    t, g = stat_pair
    res, out, cj = legacy(tmp_path, [str(t / "dump.json"), str(g / "dump.json")])
    line = assert_user_error(res, out, cj, "npu_path")
    assert "JSON object" in line


def test_legacy_invalid_json(tmp_path):
    res, out, cj = legacy(tmp_path, '{"npu_path": ')
    line = assert_user_error(res, out, cj)
    assert "not valid JSON" in line


def test_legacy_print_log_not_bool(stat_pair, tmp_path):
    t, g = stat_pair
    res, out, cj = legacy(tmp_path, {"npu_path": str(t / "dump.json"), "bench_path": str(g / "dump.json"),
                                     "is_print_compare_log": "yes"})
    assert_user_error(res, out, cj, "is_print_compare_log", "'yes'")


def test_legacy_stack_path_not_a_string(stat_pair, tmp_path):
    t, g = stat_pair
    res, out, cj = legacy(tmp_path, {"npu_path": str(t / "dump.json"), "bench_path": str(g / "dump.json"),
                                     "stack_path": 3})
    assert_user_error(res, out, cj, "stack_path")


def test_legacy_npu_path_missing_file(stat_pair, tmp_path):
    _, g = stat_pair
    missing = tmp_path / "gone" / "dump.json"
    res, out, _ = legacy(tmp_path, {"npu_path": str(missing), "bench_path": str(g / "dump.json")})
    assert_user_error(res, out, missing, "does not exist")


def test_legacy_unsupported_key(stat_pair, tmp_path):
    t, g = stat_pair
    res, out, cj = legacy(tmp_path, {"npu_path": str(t / "dump.json"), "bench_path": str(g / "dump.json"),
                                     "common": True})
    assert_user_error(res, out, cj, "'common'")


def test_legacy_kernel_keys_need_directories(stat_pair, tmp_path):
    """rank_id/step_id select the MindSpore kernel compare, which reads dump directories, not dump.json files."""
    t, g = stat_pair
    res, out, _ = legacy(tmp_path, {"npu_path": str(t / "dump.json"), "bench_path": str(g / "dump.json"),
                                    "rank_id": [0]})
    assert_user_error(res, out, "kernel dump directories", "is a file")


def test_input_together_with_target(stat_pair, tmp_path):
    t, g = stat_pair
    cj = tmp_path / "compare.json"
    cj.write_text(json.dumps({"npu_path": str(t / "dump.json"), "bench_path": str(g / "dump.json")}))
    out = tmp_path / "out"
    res = run_cli(["compare", "-i", cj, "-tp", t / "dump.json", "-o", out], tmp_path)
    assert_user_error(res, out, "-i", "-tp")


def test_target_without_golden(stat_pair, tmp_path):
    t, _ = stat_pair
    out = tmp_path / "out"
    res = run_cli(["compare", "-tp", t / "dump.json", "-o", out], tmp_path)
    assert_user_error(res, out, "-gp")


def test_no_inputs_at_all(tmp_path):
    out = tmp_path / "out"
    res = run_cli(["compare", "-o", out], tmp_path)
    assert_user_error(res, out, "-tp", "-gp")


def test_unknown_flag(stat_pair, tmp_path):
    t, g = stat_pair
    out = tmp_path / "out"
    res = run_cli(["compare", "-tp", t / "dump.json", "-gp", g / "dump.json", "-o", out, "--frobnicate"], tmp_path)
    assert_argparse_error(res, out)
    assert "--frobnicate" in res.stderr


def test_bad_framework(stat_pair, tmp_path):
    t, g = stat_pair
    out = tmp_path / "out"
    res = run_cli(["-f", "tensorflow", "compare", "-tp", t / "dump.json", "-gp", g / "dump.json", "-o", out], tmp_path)
    assert_user_error(res, out, "'tensorflow'", "pytorch", "mindspore")


def test_unknown_command(tmp_path):
    res = run_cli(["frobnicate"], tmp_path)
    assert res.returncode == 2 and "Traceback" not in res.stderr
    assert "msprobe: error: unknown command 'frobnicate'" in res.stderr


def test_negative_jobs(stat_pair, tmp_path):
    t, g = stat_pair
    res, out = compare_files(tmp_path, t / "dump.json", g / "dump.json", "-j", "-1")
    assert_user_error(res, out, "-j", "-1")


def test_highlight_and_no_highlight(stat_pair, tmp_path):
    t, g = stat_pair
    res, out = compare_files(tmp_path, t / "dump.json", g / "dump.json", "-hl", "--no-highlight")
    assert_user_error(res, out, "-hl", "--no-highlight")


@pytest.mark.parametrize("flags", [["-dm", "x.yaml"], ["--rank", "0"], ["--step", "0"]],
                         ids=lambda f: " ".join(f))
def test_later_feature_flags_are_rejected(stat_pair, tmp_path, flags):
    """A missing -dm file, and kernel-compare flags on dump.json files, fail before any work."""
    t, g = stat_pair
    out = tmp_path / "out"
    res = run_cli(["compare", "-tp", t / "dump.json", "-gp", g / "dump.json", "-o", out, "-q", *flags], tmp_path)
    assert_argparse_error(res, out)
    assert not out.exists()


def test_target_not_a_json_file(stat_pair, tmp_path):
    t, g = stat_pair
    txt = tmp_path / "dump.txt"
    txt.write_text((t / "dump.json").read_text())
    res, out = compare_files(tmp_path, txt, g / "dump.json")
    assert_user_error(res, out, txt, ".json")


# --------------------------------------------------------------------------------------------- issue 16, item 14


@pytest.fixture(scope="module")
def example_pair(tmp_path_factory):
    """The bundled example dump pair (no reference fixtures needed)."""
    out = tmp_path_factory.mktemp("example")
    subprocess.run([sys.executable, str(REPO / "examples" / "make_example_dumps.py"), str(out)], check=True,
                   capture_output=True, timeout=120)
    return out / "target" / "step0" / "rank0", out / "golden" / "step0" / "rank0"


def _main(argv, capsys):
    from msprobe.cli.main import main

    rc = main([str(a) for a in argv])
    cap = capsys.readouterr()
    return rc, cap.out, cap.err


def _failing_runs(tmp_path, t, g, out):
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "dump.json").write_text((t / "dump.json").read_text()[:300])  # truncated
    (tmp_path / "c.yaml").write_text("api: [Functional.relu]\n")
    (tmp_path / "emptyin").mkdir()
    (tmp_path / "op.json").write_text(json.dumps({"dump_json_path": str(t / "dump.json"), "api_name": "Functional.nope.0",
                                                  "extract_api_path": str(tmp_path / "ex" / "x.json")}))
    (tmp_path / "g.ir").write_text("not an IR\n")
    return {
        "compare": ["compare", "-tp", bad / "dump.json", "-gp", g / "dump.json", "-o", out, "-q"],
        "graph": ["graph", "-tp", bad, "-o", out, "-q"],
        "merge_result": ["merge_result", "-i", tmp_path / "emptyin", "-o", out, "-config", tmp_path / "c.yaml", "-q"],
        "op_generate": ["op_generate", "-i", tmp_path / "op.json", "-o", out],
        "code_mapping": ["code_mapping", "--ir", tmp_path / "g.ir", "--dump_data", bad, "--output", out],
    }


@pytest.mark.parametrize("command", ["compare", "graph", "merge_result", "op_generate", "code_mapping"])
def test_failed_run_leaves_no_empty_output_dir(example_pair, tmp_path, capsys, command):
    """A refused run removes the (empty) output directory it created, and the missing levels above it; an
    output directory that existed before is left alone."""
    t, g = example_pair
    out = tmp_path / "new" / "out"
    argv = _failing_runs(tmp_path, t, g, out)[command]
    rc, _, err = _main(argv, capsys)
    assert rc == 2 and err.startswith("msprobe: error: "), err
    assert not (tmp_path / "new").exists()
    existing = tmp_path / "existing"
    existing.mkdir()
    argv = [existing if a == out else a for a in argv]
    assert _main(argv, capsys)[0] == 2
    assert existing.is_dir() and not os.listdir(existing)


def test_single_process_rank_dir_is_named_like_a_file_pair(example_pair, tmp_path, capsys):
    """A single-process dump's 'rank' dir (no number) gives compare_result_<ts> and 'compare:' lines, as a
    pair of dump.json files does (compare.md §1.5), not compare_result_rank_<ts> / 'compare rank:'."""
    t, g = example_pair
    for side, src in (("t", t), ("g", g)):
        shutil.copytree(src, tmp_path / side / "step0" / "rank")
    out = tmp_path / "out"
    rc, stdout, err = _main(["compare", "-tp", tmp_path / "t" / "step0", "-gp", tmp_path / "g" / "step0", "-o", out,
                             "-q"], capsys)
    assert rc == 0, err
    names = sorted(os.listdir(out))
    reports = [n for n in names if n.startswith("compare_result")]
    assert len(reports) == 1 and re.fullmatch(r"compare_result_\d{14}\.xlsx", reports[0]), names
    assert not [n for n in names if "rank" in n], names
    assert "compare:" in stdout and "compare rank:" not in stdout and "advisor rank" not in stdout


def test_op_generate_module_entry_is_named_a_module_record(example_pair, tmp_path, capsys):
    t, _ = example_pair
    cfg = tmp_path / "op.json"
    cfg.write_text(json.dumps({"dump_json_path": str(t / "dump.json"), "api_name": "Module.fc1.Linear.forward.0",
                               "extract_api_path": str(tmp_path / "x.json")}))
    rc, _, err = _main(["op_generate", "-i", cfg, "-o", tmp_path / "out"], capsys)
    assert rc == 2
    (line,) = err.strip().splitlines()
    assert "is a module record" in line and "not in dump.json" not in line
    assert "single APIs" in line and "Functional.linear.0" in line  # the API the module called
    assert not (tmp_path / "out").exists()


def test_truncated_compare_json_is_to_be_corrected(tmp_path, capsys):
    cj = tmp_path / "compare.json"
    cj.write_text('{"npu_path": "a/dump.json",\n "bench_path": ')
    rc, _, err = _main(["compare", "-i", cj, "-o", tmp_path / "o"], capsys)
    assert rc == 2
    assert "line 2 column" in err and "correct the file" in err and "re-run the dump" not in err
