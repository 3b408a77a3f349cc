"""msprobe graph against the reference's own graph files and the real tb-graph-ascend plugin.

For every fixture case with reference graph outputs, our build and compare (JSON .vis and SQLite .vis.db,
from the same inputs and the legacy -f pytorch -i compare.json syntax the reference ran) must have the same
node ids, parents, children order, node types, matched partners and precision colour buckets as the
reference's 8.1.2 .vis and 8.3.3 .vis.db files; our precision indexes must equal 8.3.3's exactly.
Then ../shared/tools/vis_acceptance.py drives the real plugin over everything we wrote.
"""

from __future__ import annotations

import glob
import importlib.util
import json
import os
import subprocess
import sys

import pytest

from conftest import FIXTURES, ROOT
from graph_ref import diff_sides, read_db, read_vis

MSPROBE = [sys.executable, "-m", "msprobe.cli.main"]
ACCEPTANCE = ROOT.parent / "shared" / "tools" / "vis_acceptance.py"


def _cases():
    if not FIXTURES.is_dir():
        return [pytest.param(None, marks=pytest.mark.skip(reason=f"reference fixtures not found at {FIXTURES}"))]
    out = []
    for d in sorted(glob.glob(str(FIXTURES / "*" / "reference_out" / "v833_graph_compare"))):
        case = os.path.basename(os.path.dirname(os.path.dirname(d)))
        out.append(pytest.param(case, id=case))
    return out


def _run(case_dir: str, args, out: str):
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    r = subprocess.run(MSPROBE + args + ["-o", out], cwd=case_dir, capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stderr
    return r


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    """Run our graph on every fixture case once: {case: {kind: out_dir}}."""
    if not FIXTURES.is_dir():
        pytest.skip(f"reference fixtures not found at {FIXTURES}")
    base = tmp_path_factory.mktemp("graphs")
    done = {}
    for p in _cases():
        case = p.values[0]
        case_dir = str(FIXTURES / case)
        inputs = os.path.join(case_dir, "reference_out", "_inputs")
        done[case] = {}
        for kind in ("build", "compare"):
            out = str(base / case / kind)
            cfg = os.path.join(inputs, f"graph_{kind}_rank.json")
            # the reference's colouring, to compare precision indexes (msprobe's verdict colouring, the
            # default, goes to the plugin through the extra cases below and tests/test_graph_verdict.py)
            _run(case_dir, ["-f", "pytorch", "graph", "-i", cfg, "-q", "--reference-colours"], out)
            _run(case_dir, ["graph"] + _paths(cfg) + ["--db", "-q", "--reference-colours"], out)
            done[case][kind] = out
        # msprobe's verdict colouring (the default): same files but for the colours
        out = str(base / case / "compare_verdict")
        cfg = os.path.join(inputs, "graph_compare_rank.json")
        _run(case_dir, ["-f", "pytorch", "graph", "-i", cfg, "-q"], out)
        _run(case_dir, ["graph"] + _paths(cfg) + ["--db", "-q"], out)
        done[case]["compare_verdict"] = out
    # fixture cases without reference graph outputs (26.x proc<pid> layout, MindSpore, torch_npu stub): the
    # plugin must read what we write for them too
    for case in ("mindspore_cpu_mix", "torch_npu_stubcann_cpu_mix"):
        step = FIXTURES / case / "target" / "step0"
        if not step.is_dir():
            continue
        for kind, extra in (("build", []), ("compare", ["-gp", str(FIXTURES / case / "golden" / "step0")])):
            for db in ([], ["--db"]):
                _run(str(FIXTURES / case), ["graph", "-tp", str(step)] + extra + db + ["-q"], str(base / "extra" / case / kind))
    return base, done


def _paths(cfg: str):
    obj = json.load(open(cfg))
    args = ["-tp", obj["npu_path"]]
    if obj.get("bench_path"):
        args += ["-gp", obj["bench_path"]]
    return args


@pytest.mark.parametrize("case", _cases())
@pytest.mark.parametrize("kind", ["build", "compare"])
def test_same_graph_as_reference_vis_and_db(written, case, kind):
    _, done = written
    out = done[case][kind]
    ro = FIXTURES / case / "reference_out"
    ours_vis = sorted(glob.glob(os.path.join(out, "*.vis")))
    ref_vis = sorted(glob.glob(str(ro / f"v812_graph_{kind}" / "*.vis")))
    assert len(ours_vis) == len(ref_vis) >= 1
    # file names follow the reference's pattern (build_{ts}.vis, compare_rank0_{ts}.vis ...)
    for o, r in zip(ours_vis, ref_vis):
        assert os.path.basename(o).rsplit("_", 1)[0] == os.path.basename(r).rsplit("_", 1)[0]
        a, _ = read_vis(o)
        b, task = read_vis(r)
        assert sum(len(s) for s in b.values()) > 0
        assert diff_sides(a, b, task) == []
    ours_db = glob.glob(os.path.join(out, "*.vis.db"))
    ref_db = glob.glob(str(ro / f"v833_graph_{kind}" / "*.vis.db"))
    assert len(ours_db) == 1 and len(ref_db) == 1
    import sqlite3

    con = sqlite3.connect(ref_db[0])
    ranks = json.loads(con.execute("SELECT rank_list FROM tb_config").fetchone()[0])
    con.close()
    for rank in ranks:
        a, _ = read_db(ours_db[0], rank=rank)
        b, task = read_db(ref_db[0], rank=rank)
        assert diff_sides(a, b, task) == []
        # the .vis and the .vis.db we wrote hold the same graph
        assert a.keys() == b.keys()
        if kind == "compare":
            for nid, (*_, pi) in b["NPU"].items():
                assert a["NPU"][nid][4] == pi, nid  # exact precision index, not only the bucket


@pytest.mark.parametrize("case", _cases())
def test_vis_and_db_hold_the_same_graph(written, case):
    _, done = written
    out = done[case]["compare"]
    vis = sorted(glob.glob(os.path.join(out, "*.vis")))
    db = glob.glob(os.path.join(out, "*.vis.db"))[0]
    for rank, v in enumerate(vis):
        a, _ = read_vis(v)
        b, _ = read_db(db, rank=rank)
        assert a == b


@pytest.mark.parametrize("case", _cases())
def test_verdict_colours_change_only_the_colours(written, case):
    """The default (verdict) colouring writes the same graph as --reference-colours, keeps the reference's
    precision index in the node data, and writes indexes inside the legend's green / middle / red buckets."""
    from msprobe.core.graph.colors import RED, YELLOW, GREEN, bucket

    _, done = written
    ref_vis = sorted(glob.glob(os.path.join(done[case]["compare"], "*.vis")))
    ver_vis = sorted(glob.glob(os.path.join(done[case]["compare_verdict"], "*.vis")))
    assert len(ref_vis) == len(ver_vis) >= 1
    for r, v in zip(ref_vis, ver_vis):
        a, task = read_vis(v)
        b, _ = read_vis(r)
        for side in b:
            assert a[side].keys() == b[side].keys()
            for nid, (up, subs, nt, partner, _) in b[side].items():
                assert a[side][nid][:4] == (up, subs, nt, partner), nid
        with open(v, "rb") as f:
            obj = json.load(f)
        with open(r, "rb") as f:
            ref_nodes = json.load(f)["NPU"]["node"]
        assert set(obj["Colors"]) == {GREEN, YELLOW, RED, "#C7C7C7"}
        for nid, node in obj["NPU"]["node"].items():
            pi = node["data"].get("precision_index")
            assert node["data"].get("reference precision_index") == ref_nodes[nid]["data"].get("precision_index"), nid
            if pi is not None:
                assert bucket(task, pi) in (GREEN, YELLOW, RED) and obj["Colors"][bucket(task, pi)]
                assert node["data"]["msprobe verdict"].split(":")[0] in ("pass", "noise", "warn", "fail")
    db_v = glob.glob(os.path.join(done[case]["compare_verdict"], "*.vis.db"))[0]
    for rank, v in enumerate(ver_vis):
        a, _ = read_vis(v)
        b, _ = read_db(db_v, rank=rank)
        assert a == b


def test_real_plugin_accepts_every_file_we_write(written):
    if not ACCEPTANCE.is_file():
        pytest.skip(f"acceptance tool not found at {ACCEPTANCE}")
    missing = [m for m in ("tensorboard", "server") if importlib.util.find_spec(m) is None]
    if missing or importlib.util.find_spec("server.plugin") is None:
        pytest.skip("tensorboard / tb-graph-ascend not installed (pip install -e '.[test]')")
    base, _ = written
    r = subprocess.run([sys.executable, str(ACCEPTANCE), str(base), "--max-graphs", "8", "--timeout", "120"],
                       capture_output=True, text=True, cwd=str(base))
    tail = r.stdout[-3000:] + r.stderr[-2000:]
    assert r.returncode == 0, tail
    last = [ln for ln in r.stdout.splitlines() if ln.startswith("vis_acceptance:")][-1]
    passed = int(last.split()[1])
    assert passed > 500 and " 0 failed" in last, last
