"""The command line on good input: help, version, reports written, inputs left untouched.

Each test runs ``python -m msprobe`` in a subprocess (cwd = tmp_path) on copies of the reference dumps.
"""

from __future__ import annotations

import csv
import hashlib
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

TS = r"\d{14}"
STAT_ROWS = 73  # rows of mlp_bf16_stat_mix step0 (all matched)
TENSOR_ROWS = 73


def run_cli(args, cwd, env_extra=None, timeout=180):
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    for var in ("MSPROBE_DEBUG", "MSPROBE_MEMORY_LIMIT"):
        env.pop(var, None)
    env.update(env_extra or {})
    return subprocess.run(
        [sys.executable, "-m", "msprobe", *[str(a) for a in args]],
        cwd=str(cwd), env=env, capture_output=True, text=True, timeout=timeout,
    )


def ok(res):
    detail = f"rc={res.returncode}\nstdout:\n{res.stdout}\nstderr:\n{res.stderr}"
    assert res.returncode == 0, detail
    assert "Traceback" not in res.stderr and "error" not in res.stderr.lower(), detail
    return res


def copy_tree(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    for root, dirs, files in os.walk(dst):
        os.chmod(root, 0o755)
        for f in files:
            os.chmod(os.path.join(root, f), 0o644)
    return dst


def tree_hashes(*dirs: Path):
    out = {}
    for d in dirs:
        for p in sorted(d.rglob("*")):
            st = os.lstat(p)
            key = str(p)
            if p.is_file():
                out[key] = (hashlib.sha256(p.read_bytes()).hexdigest(), st.st_mode, st.st_mtime_ns)
            else:
                out[key] = ("dir", st.st_mode)
    return out


def listing(d: Path):
    """Report files in an output dir (the advisor's advisor_<ts>.txt, written by default, is left out)."""
    return sorted(p.name for p in d.iterdir() if not p.name.startswith("advisor_"))


def xlsx_rows(path: Path):
    import openpyxl

    wb = openpyxl.load_workbook(path, read_only=False)
    ws = wb.worksheets[0]
    rows = [[c.value for c in row] for row in ws.iter_rows()]
    return wb, ws, rows


def filled_cells(ws):
    out = []
    for row in ws.iter_rows():
        for c in row:
            pt = c.fill.patternType if c.fill is not None else None
            if pt not in (None, "none"):
                out.append((c.coordinate, pt, c.fill.fgColor.rgb))
    return out


@pytest.fixture
def stat_pair(tmp_path):
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


# ----------------------------------------------------------------------------------------- help, version


def test_help(tmp_path):
    res = ok(run_cli(["-h"], tmp_path))
    assert res.stdout.startswith("usage: msprobe")
    assert "compare" in res.stdout and "-V" in res.stdout


def test_version(tmp_path):
    from msprobe import __version__

    res = ok(run_cli(["-V"], tmp_path))
    assert res.stdout.strip() == f"msprobe {__version__}"
    assert re.fullmatch(r"\d+\.\d+\.\d+\S*", __version__)


def test_compare_help(tmp_path):
    res = ok(run_cli(["compare", "-h"], tmp_path))
    assert res.stdout.startswith("usage: msprobe compare")
    for flag in ("-tp", "-gp", "--csv", "-o", "-i", "--no-highlight"):
        assert flag in res.stdout
    assert listing(tmp_path) == []  # -h writes nothing (no ./output)


# ---------------------------------------------------------------------------------------------- reports


def test_single_file_xlsx(stat_pair, tmp_path):
    t, g = stat_pair
    out = tmp_path / "out"
    res = ok(run_cli(["compare", "-tp", t / "dump.json", "-gp", g / "dump.json", "-o", out], tmp_path))
    names = listing(out)
    assert len(names) == 1 and re.fullmatch(rf"compare_result_{TS}\.xlsx", names[0]), names
    assert "msprobe compare ends successfully." in res.stdout
    assert f"statistics mode, {STAT_ROWS} rows, {STAT_ROWS} matched, 0 unmatched" in res.stdout
    assert f"report: {out / names[0]}" in res.stdout
    _, _, rows = xlsx_rows(out / names[0])
    assert rows[0][:2] == ["NPU Name", "Bench Name"]
    assert len(rows) == STAT_ROWS + 1
    assert rows[1][0] == rows[1][1] == "Functional.linear.0.forward.input.0"
    assert oct((out / names[0]).stat().st_mode & 0o777) == "0o640"
    assert listing(tmp_path) == ["g", "out", "t"]  # nothing written elsewhere (no ./output)


def test_csv_matches_xlsx(stat_pair, tmp_path):
    t, g = stat_pair
    args = ["compare", "-tp", t / "dump.json", "-gp", g / "dump.json", "-q"]
    ok(run_cli(args + ["-o", tmp_path / "x"], tmp_path))
    res = ok(run_cli(args + ["-o", tmp_path / "c", "--csv"], tmp_path))
    assert " rows, " in res.stdout and " matched, " in res.stdout
    names = listing(tmp_path / "c")
    assert len(names) == 1 and re.fullmatch(rf"compare_result_{TS}\.csv", names[0]), names
    text = (tmp_path / "c" / names[0]).read_text(encoding="utf-8")
    assert text.startswith("NPU Name,Bench Name")
    crows = list(csv.reader(text.splitlines()))
    _, _, xrows = xlsx_rows(tmp_path / "x" / listing(tmp_path / "x")[0])
    assert len(crows) == len(xrows) == STAT_ROWS + 1
    assert crows[0] == xrows[0]
    assert [r[0] for r in crows] == [r[0] for r in xrows]
    res_col = crows[0].index("Result")
    assert [r[res_col] for r in crows[1:]] == [r[res_col] or "" for r in xrows[1:]]


def test_second_run_keeps_both_reports(stat_pair, tmp_path):
    t, g = stat_pair
    out = tmp_path / "out"
    args = ["compare", "-tp", t / "dump.json", "-gp", g / "dump.json", "-o", out, "-q"]
    ok(run_cli(args, tmp_path))
    (first,) = listing(out)
    before = (out / first).read_bytes()
    res = ok(run_cli(args, tmp_path))
    names = listing(out)
    assert len(names) == 2 and first in names, names
    (second,) = [n for n in names if n != first]
    assert re.fullmatch(rf"compare_result_{TS}(_\d+)?\.xlsx", second), second
    assert f"report: {out / second}" in res.stdout
    assert (out / first).read_bytes() == before
    assert not [n for n in os.listdir(out) if n.startswith(".")]  # no temp files


def test_multirank_step_dir(tmp_path):
    fx = fixtures_or_skip()
    t = copy_tree(fx / MULTI / "target" / "step0", tmp_path / "t" / "step0")
    g = copy_tree(fx / MULTI / "golden" / "step0", tmp_path / "g" / "step0")
    out = tmp_path / "out"
    res = ok(run_cli(["compare", "-tp", t, "-gp", g, "-o", out, "-q"], tmp_path))
    names = listing(out)
    assert len(names) == 2, names
    assert re.fullmatch(rf"compare_result_rank0_{TS}\.xlsx", names[0]), names
    assert re.fullmatch(rf"compare_result_rank1_{TS}\.xlsx", names[1]), names
    assert "compare rank0:" in res.stdout and "compare rank1:" in res.stdout
    assert res.stdout.count(" unmatched\n") == 2
    for name in names:
        _, _, rows = xlsx_rows(out / name)
        assert rows[0][0] == "NPU Name" and len(rows) > 1


def test_legacy_compare_json(stat_pair, tmp_path):
    t, g = stat_pair
    cj = tmp_path / "compare.json"
    cj.write_text(json.dumps({"npu_path": str(t / "dump.json"), "bench_path": str(g / "dump.json"),
                              "stack_path": str(t / "stack.json"), "is_print_compare_log": True}))
    out = tmp_path / "out"
    res = ok(run_cli(["-f", "pytorch", "compare", "-i", cj, "-o", out, "-s", "-hl", "-c"], tmp_path))
    assert "msprobe compare ends successfully." in res.stdout
    assert f"{STAT_ROWS} rows, " in res.stdout
    names = listing(out)
    assert len(names) == 1 and re.fullmatch(rf"compare_result_{TS}\.xlsx", names[0]), names
    _, _, rows = xlsx_rows(out / names[0])
    assert "NPU_Stack_Info" in rows[0]
    stack = rows[0].index("NPU_Stack_Info")
    assert "File " in str(rows[1][stack])  # the first row of an API carries its stack


def test_tensor_mode(tensor_pair, tmp_path):
    t, g = tensor_pair
    out = tmp_path / "out"
    res = ok(run_cli(["compare", "-tp", t, "-gp", g, "-o", out, "-q", "--csv"], tmp_path))
    assert f"tensor mode, {TENSOR_ROWS} rows, " in res.stdout
    (name,) = listing(out)
    rows = list(csv.reader((out / name).read_text(encoding="utf-8").splitlines()))
    header = rows[0]
    assert "Data_name" in header and "Cosine" in header
    dn, cos = header.index("Data_name"), header.index("Cosine")
    first = rows[1]
    assert first[0] == "Functional.linear.0.forward.input.0"
    assert first[dn] == "['Functional.linear.0.forward.input.0.pt', 'Functional.linear.0.forward.input.0.pt']"
    assert float(first[cos]) == pytest.approx(1.0)
    cosines = [float(r[cos]) for r in rows[1:] if re.fullmatch(r"-?\d+(\.\d+)?(e-?\d+)?", r[cos])]
    assert len(cosines) > 40 and all(c > 0.99 for c in cosines)


def test_tensor_mode_xlsx_has_data_name(tensor_pair, tmp_path):
    t, g = tensor_pair
    out = tmp_path / "out"
    ok(run_cli(["compare", "-tp", t, "-gp", g, "-o", out, "-q"], tmp_path))
    (name,) = listing(out)
    _, ws, rows = xlsx_rows(out / name)
    assert "Data_name" in rows[0]
    assert len(rows) == TENSOR_ROWS + 1
    # a bf16-vs-fp32 control pair: every difference is within bf16 rounding, so nothing is red or yellow
    # (docs/compare.md "Rule set"; the reference's fixed thresholds coloured rows with cosine 0.99998)
    assert not filled_cells(ws)


def test_damaged_tensor_file_is_reported_in_its_row(tensor_pair, tmp_path):
    t, g = tensor_pair
    (t / "dump_tensor_data" / "Functional.linear.0.forward.input.0.pt").write_bytes(b"not a tensor file")
    out = tmp_path / "out"
    ok(run_cli(["compare", "-tp", t, "-gp", g, "-o", out, "-q", "--csv"], tmp_path))
    (name,) = listing(out)
    rows = list(csv.reader((out / name).read_text(encoding="utf-8").splitlines()))
    h = rows[0]
    row = rows[1]
    assert row[0] == "Functional.linear.0.forward.input.0"
    assert row[h.index("Cosine")] == "No data"
    assert "read failed" in row[h.index("Err_message")]
    assert rows[2][h.index("Err_message")] == ""  # the next tensor is compared normally


def test_inputs_not_modified(tmp_path):
    fx = fixtures_or_skip()
    t = copy_tree(fx / TENSOR / "target" / "step0", tmp_path / "tt" / "step0")
    g = copy_tree(fx / TENSOR / "golden" / "step0", tmp_path / "tg" / "step0")
    st = copy_tree(fx / STAT / "target" / "step0", tmp_path / "st" / "step0")
    sg = copy_tree(fx / STAT / "golden" / "step0", tmp_path / "sg" / "step0")
    cj = tmp_path / "compare.json"
    cj.write_text(json.dumps({"npu_path": str(st / "rank" / "dump.json"), "bench_path": str(sg / "rank" / "dump.json")}))
    before = tree_hashes(t, g, st, sg)
    cj_before = cj.read_bytes()
    ok(run_cli(["compare", "-tp", t, "-gp", g, "-o", tmp_path / "o1", "-q"], tmp_path))
    ok(run_cli(["compare", "-tp", st, "-gp", sg, "-o", tmp_path / "o2", "-q", "--csv"], tmp_path))
    ok(run_cli(["-f", "pytorch", "compare", "-i", cj, "-o", tmp_path / "o3", "-s"], tmp_path))
    assert tree_hashes(t, g, st, sg) == before
    assert cj.read_bytes() == cj_before
    assert listing(tmp_path) == ["compare.json", "o1", "o2", "o3", "sg", "st", "tg", "tt"]


def test_no_highlight_has_no_fills(tensor_pair, tmp_path):
    t, g = tensor_pair
    out = tmp_path / "out"
    res = ok(run_cli(["compare", "-tp", t, "-gp", g, "-o", out, "-q", "--no-highlight"], tmp_path))
    assert re.search(r"red: \d+  yellow: \d+", res.stdout)
    (name,) = listing(out)
    _, ws, rows = xlsx_rows(out / name)
    assert len(rows) == TENSOR_ROWS + 1
    assert filled_cells(ws) == []


def test_default_output_dir(stat_pair, tmp_path):
    t, g = stat_pair
    ok(run_cli(["compare", "-tp", t / "dump.json", "-gp", g / "dump.json", "--csv", "-q"], tmp_path))
    names = listing(tmp_path / "output")
    assert len(names) == 1 and re.fullmatch(rf"compare_result_{TS}\.csv", names[0]), names


def test_rank_dirs_and_relative_paths(stat_pair, tmp_path):
    """Rank dirs given relative to the working directory, output dir with a space in its name."""
    out = tmp_path / "my out"
    res = ok(run_cli(["compare", "-tp", "t/rank", "-gp", "g/rank", "-o", "my out", "--csv", "-q"], tmp_path))
    (name,) = listing(out)
    assert f"report: {out / name}" in res.stdout
    rows = list(csv.reader((out / name).read_text(encoding="utf-8").splitlines()))
    assert len(rows) == STAT_ROWS + 1


# ------------------------------------------------------------------ docs (issue 16, item 14 g, h; item 12)

REPO_ROOT = Path(__file__).resolve().parents[1]


def test_docs_do_not_point_into_the_development_shared_folder():
    """Users of the package have no ../shared (spec, fixtures, tools): docs describe those instead."""
    for md in [REPO_ROOT / "README.md", *sorted((REPO_ROOT / "docs").glob("*.md"))]:
        text = md.read_text(encoding="utf-8")
        assert "../shared/" not in text and "](../shared" not in text, md.name


def test_readme_says_make_test_builds_the_extra_venvs_and_how_to_skip_them():
    readme = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
    top = readme[:readme.index("# msprobe")]  # the block before the title, what a new user reads first
    top += readme[readme.index("# msprobe"):][:3000]
    for word in (".venv-npu", ".venv-ms", "5.2 GB", "make test-main"):
        assert word in top, word
    makefile = (REPO_ROOT / "Makefile").read_text(encoding="utf-8")
    m = re.search(r"^test-main:(.*)$", makefile, re.M)
    assert m and "npu-venv" not in m.group(1) and "ms-venv" not in m.group(1)
    assert re.search(r"^test: venv npu-venv ms-venv$", makefile, re.M)  # make test is unchanged


def test_compatibility_doc_lists_every_reference_flag():
    """The table in docs/compatibility.md names every reference flag tests/test_reference_flags.py checks."""
    import test_reference_flags as rf

    text = (REPO_ROOT / "docs" / "compatibility.md").read_text(encoding="utf-8")
    table = text[text.index("## Command lines"):text.index("## compare")]
    flags = set()
    for argv, *_ in rf.COMPARE_ACCEPTED + rf.GRAPH_ACCEPTED + rf.COMPARE_REFUSED + rf.GRAPH_REFUSED + rf.MERGE_ACCEPTED:
        flags.update(a for a in argv if a.startswith("-"))
    missing = sorted(f for f in flags if f"`{f}" not in table and f"/{f}" not in table and f", {f}" not in table)
    assert not missing, missing
