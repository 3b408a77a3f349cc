"""grad_probe (task "grad_probe", PrecisionDebugger.monitor, GradComparator, msprobe grad_compare).

Files in the reference's layout and format (spec checks_and_monitors.md 3.1-3.2), values checked against
gradients captured independently in the training loop; a 2-layer transformer trained 50 steps three times
(two identical runs, one whose learning rate is tripled at step 20): the comparator finds nothing in the
identical pair and names step 21 in the other; bad configurations are one line each; a failing writer
never touches training.
"""
import importlib.util
import json
import os
import subprocess
import sys
import zlib

import numpy as np
import pytest

torch = pytest.importorskip("torch")
nn = torch.nn

from conftest import ROOT  # noqa: E402
from msprobe.core.errors import MsprobeError  # noqa: E402
from msprobe.core.grad_probe import stats  # noqa: E402
from msprobe.core.grad_probe.grad_compare import GradComparator, find_divergence  # noqa: E402
from msprobe.pytorch import PrecisionDebugger  # noqa: E402

_spec = importlib.util.spec_from_file_location("_msprobe_refvenv", ROOT / "benchmarks" / "refvenv.py")
refvenv = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(refvenv)
REF_PYTHON = refvenv.ref_venv("venv833") / "bin" / "python"


@pytest.fixture(autouse=True)
def _no_debugger():
    PrecisionDebugger._reset_for_tests()
    yield
    PrecisionDebugger._reset_for_tests()


def write_cfg(path, dump_path, section=None, **top):
    cfg = {"task": "grad_probe", "dump_path": str(dump_path), "rank": [], "step": []}
    cfg.update(top)
    cfg["grad_probe"] = {"grad_level": "L1", "param_list": [], "bounds": [-1, 0, 1]} if section is None else section
    path.write_text(json.dumps(cfg))
    return str(path)


class TinyTransformer(nn.Module):
    """Embedding, a 2-layer transformer encoder (d=16, 2 heads) and a linear head."""

    def __init__(self, vocab=32, d=16):
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        layer = nn.TransformerEncoderLayer(d, 2, 32, dropout=0.0, batch_first=True)
        self.enc = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        self.head = nn.Linear(d, vocab)

    def forward(self, x):
        return self.head(self.enc(self.emb(x)))


def train_transformer(tmp, name, steps=50, lr_change=None, level="L1", capture=None):
    """Train with grad_probe on; ``lr_change=(step, factor)`` multiplies the learning rate before that
    step's update.  ``capture``: dict filled with {step: {name: grad copy}}.  Returns (dump_path, model)."""
    dump = tmp / name
    cfg = write_cfg(tmp / f"{name}.json", dump, {"grad_level": level})
    torch.manual_seed(0)
    model = TinyTransformer()
    debugger = PrecisionDebugger(cfg)
    debugger.monitor(model)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    gen = torch.Generator().manual_seed(1)
    for i in range(steps):
        x = torch.randint(0, 32, (4, 8), generator=gen)
        loss = nn.functional.cross_entropy(model(x).reshape(-1, 32), x.roll(1, 1).reshape(-1))
        loss.backward()
        if capture is not None:
            capture[i] = {n: p.grad.detach().clone() for n, p in model.named_parameters()}
        if lr_change is not None and i == lr_change[0]:
            for group in opt.param_groups:
                group["lr"] *= lr_change[1]
        opt.step()
        opt.zero_grad()
    PrecisionDebugger._reset_for_tests()   # removes the hook and waits for the writer
    return dump, model


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("gp_runs")
    PrecisionDebugger._reset_for_tests()
    capture = {}
    a, model_a = train_transformer(tmp, "a", capture=capture)
    b, _ = train_transformer(tmp, "b")
    c, _ = train_transformer(tmp, "c", lr_change=(20, 3.0))
    return {"a": a, "b": b, "c": c, "tmp": tmp, "capture": capture, "model": model_a}


# ---------------------------------------------------------------------------------------------- files

def test_transformer_files_in_reference_layout(runs):
    rank = runs["a"] / "rank0"
    names = [n for n, _ in runs["model"].named_parameters()]
    assert sorted(os.listdir(rank)) == sorted([f"grad_summary_{s}.csv" for s in range(50)] + [f"step{s}" for s in range(50)])
    assert sorted(os.listdir(rank / "step7")) == sorted(f"{n}.npy" for n in names)
    raw = (rank / "grad_summary_7.csv").read_bytes()
    assert raw.startswith(b"\xef\xbb\xbfparam_name,max,min,norm,shape\r\n")
    rows = stats.read_summary(str(rank / "grad_summary_7.csv"))
    assert [r[0] for r in rows[1:]] == names          # named_parameters order
    grads = runs["capture"][7]
    for row in rows[1:]:
        g = grads[row[0]].numpy()
        assert float(row[1]) == pytest.approx(float(g.max()), rel=1e-6, abs=1e-12)
        assert float(row[2]) == pytest.approx(float(g.min()), rel=1e-6, abs=1e-12)
        assert float(row[3]) == pytest.approx(float(np.linalg.norm(g.astype(np.float64))), rel=1e-5)
        assert row[4] == str(list(g.shape))
        direction = np.load(rank / "step7" / f"{row[0]}.npy", allow_pickle=False)
        assert direction.dtype == np.bool_ and direction.shape == g.shape
        assert np.array_equal(direction, g > 0)


def _mlp_run(tmp_path, section, steps=(), n_steps=4, dtype=torch.float32, **top):
    dump = tmp_path / "dump"
    cfg = write_cfg(tmp_path / "cfg.json", dump, section, step=list(steps), **top)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4)).to(dtype)
    debugger = PrecisionDebugger(cfg)
    debugger.monitor(model)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    grads = {}
    for i in range(n_steps):
        loss = model(torch.randn(4, 8, dtype=dtype)).float().pow(2).mean()
        loss.backward()
        grads[i] = {n: p.grad.detach().float().clone() for n, p in model.named_parameters()}
        opt.step()
        opt.zero_grad()
    PrecisionDebugger._reset_for_tests()
    return dump / "rank0", grads


def test_level_L2_histogram_and_step_filter(tmp_path):
    bounds = [-0.01, 0, 0.01]
    rank, grads = _mlp_run(tmp_path, {"grad_level": "L2", "bounds": bounds}, steps=[0, 2])
    assert sorted(os.listdir(rank)) == ["grad_summary_0.csv", "grad_summary_2.csv", "step0", "step2"]
    rows = stats.read_summary(str(rank / "grad_summary_2.csv"))
    assert rows[0] == ["param_name", "(-inf, -0.01]", "(-0.01, 0]", "(0, 0.01]", "(0.01, inf)", "=0",
                       "max", "min", "norm", "shape"]
    edges = np.array(bounds, dtype=np.float32)
    for row in rows[1:]:
        g = grads[2][row[0]].numpy().reshape(-1)
        bucket = np.searchsorted(edges, g, side="left")          # (b[i-1], b[i]]: equal goes to the one it closes
        expected = [np.count_nonzero(bucket == i) / g.size for i in range(len(bounds) + 1)]
        expected.append(np.count_nonzero(g == 0) / g.size)
        got = [float(v) for v in row[1:6]]
        assert got == pytest.approx(expected, abs=0)              # counts / size: exact in float64
        assert sum(got[:4]) == pytest.approx(1.0)


def test_level_L0_md5_is_crc32_of_float32_bytes_and_no_directions(tmp_path):
    rank, grads = _mlp_run(tmp_path, {"grad_level": "L0"}, n_steps=2)
    assert sorted(os.listdir(rank)) == ["grad_summary_0.csv", "grad_summary_1.csv"]
    rows = stats.read_summary(str(rank / "grad_summary_1.csv"))
    assert rows[0] == ["param_name", "MD5", "max", "min", "norm", "shape"]
    for row in rows[1:]:
        g = grads[1][row[0]].numpy()
        assert row[1] == "%08x" % (zlib.crc32(g.astype(np.float32).tobytes()) & 0xFFFFFFFF)


def test_bfloat16_gradients(tmp_path):
    rank, grads = _mlp_run(tmp_path, {"grad_level": "L2"}, n_steps=1, dtype=torch.bfloat16)
    rows = stats.read_summary(str(rank / "grad_summary_0.csv"))
    for row in rows[1:]:
        g = grads[0][row[0]].numpy()
        assert float(row[6]) == float(g.max())                    # bf16 values are exact in float32
        assert np.array_equal(np.load(rank / "step0" / f"{row[0]}.npy"), g > 0)


def test_param_list_selects_and_unknown_names_are_refused(tmp_path):
    rank, _ = _mlp_run(tmp_path, {"param_list": ["2.weight"]}, n_steps=1)
    assert [r[0] for r in stats.read_summary(str(rank / "grad_summary_0.csv"))[1:]] == ["2.weight"]
    assert os.listdir(rank / "step0") == ["2.weight.npy"]
    cfg = write_cfg(tmp_path / "bad.json", tmp_path / "d2", {"param_list": ["2.weight", "fc.weight"]})
    debugger = PrecisionDebugger(cfg)
    with pytest.raises(MsprobeError) as exc:
        debugger.monitor(nn.Sequential(nn.Linear(2, 2), nn.ReLU(), nn.Linear(2, 2)))
    msg = str(exc.value)
    assert "\n" not in msg and "['fc.weight']" in msg and "0.weight, 0.bias, 2.weight, 2.bias" in msg


def test_monitor_api_rules(tmp_path):
    with pytest.raises(MsprobeError, match="PrecisionDebugger instance is not created"):
        PrecisionDebugger.monitor(nn.Linear(2, 2))
    cfg = write_cfg(tmp_path / "s.json", tmp_path / "d", None, task="statistics")
    PrecisionDebugger(cfg).monitor(nn.Linear(2, 2))    # another task: nothing happens
    PrecisionDebugger._reset_for_tests()
    debugger = PrecisionDebugger(write_cfg(tmp_path / "g.json", tmp_path / "g"))
    with pytest.raises(MsprobeError, match="torch.nn.Module"):
        debugger.monitor(object())
    debugger.start()        # start/stop/step do nothing for grad_probe (as in the reference)
    debugger.stop()
    debugger.step()


def test_hook_failure_never_touches_training(tmp_path, monkeypatch):
    from msprobe.core.grad_probe import writer

    def boom(self, record):
        raise OSError(28, "No space left on device")

    def train(with_tool):
        torch.manual_seed(0)
        model = TinyTransformer()
        if with_tool:
            PrecisionDebugger(write_cfg(tmp_path / "f.json", tmp_path / "f")).monitor(model)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        gen = torch.Generator().manual_seed(1)
        for _ in range(3):
            x = torch.randint(0, 32, (2, 4), generator=gen)
            nn.functional.cross_entropy(model(x).reshape(-1, 32), x.reshape(-1)).backward()
            opt.step()
            opt.zero_grad()
        PrecisionDebugger._reset_for_tests()
        return model

    plain = train(False)
    monkeypatch.setattr(writer.GradProbeWriter, "write_step", boom)
    probed = train(True)
    for (n, p), (_, q) in zip(plain.named_parameters(), probed.named_parameters()):
        assert torch.equal(p, q), n
    log = (tmp_path / "f" / "rank0" / "dump_error_info.log").read_text()
    assert log.count("could not record grad_probe step") == 1      # once per cause, not once per step


# ---------------------------------------------------------------------------------------------- config errors

@pytest.mark.parametrize("section, top, words", [
    ({"grad_level": "L3"}, {}, ['"grad_level" in the "grad_probe" section is "L3"', "L0, L1, L2"]),
    ({"grad_level": 1}, {}, ['"grad_level"', "L0, L1, L2"]),
    ({"param_list": "0.weight"}, {}, ['"param_list"', "list of parameter names"]),
    ({"bounds": 1}, {}, ['"bounds"', "bounds must be a list"]),
    ({"bounds": [-1, "0", 1]}, {}, ["bounds element '0' is not int or float"]),
    ({"bounds": [True, 2]}, {}, ["bounds element True is not int or float"]),
    ({"bounds": [-1, 2 ** 63]}, {}, ["out of int64 range"]),
    ({"bounds": [0, 0.5, 0.5]}, {}, ["bounds list is not ascending", "0.5 is followed by 0.5"]),
    ({"grad_levle": "L1"}, {}, ['unknown key "grad_levle"', 'did you mean "grad_level"']),
    ({}, {"step": ["3-1"]}, ['"step"', "reversed range"]),
    ({}, {"rank": "0"}, ['"rank"', "list of integers"]),
])
def test_bad_config_is_one_line(tmp_path, section, top, words):
    cfg = write_cfg(tmp_path / "c.json", tmp_path / "d", section, **top)
    with pytest.raises(MsprobeError) as exc:
        PrecisionDebugger(cfg)
    msg = str(exc.value)
    assert "\n" not in msg and "c.json" in msg
    for w in words:
        assert w in msg
    assert PrecisionDebugger._instance is None


def test_unwritable_dump_path_is_one_line(tmp_path):
    (tmp_path / "file").write_text("x")
    cfg = write_cfg(tmp_path / "c.json", tmp_path / "file" / "sub")
    with pytest.raises(MsprobeError) as exc:
        PrecisionDebugger(cfg)
    assert "\n" not in str(exc.value) and "dump_path" in str(exc.value)


# ---------------------------------------------------------------------------------------------- comparator

def test_identical_runs_agree_everywhere(runs, tmp_path):
    res = GradComparator.compare_distributed(str(runs["a"]), str(runs["b"]), str(tmp_path / "ab"), plots=False)
    assert len(res) == 1 and res[0].steps == list(range(50))
    assert res[0].divergence is None
    assert all(v == [1.0] * 50 for v in res[0].similarities.values())


def test_perturbed_learning_rate_names_step_and_parameters(runs, tmp_path):
    out = tmp_path / "ac"
    res = GradComparator.compare_distributed(str(runs["a"]), str(runs["c"]), str(out))[0]
    div = res.divergence
    # the learning rate is tripled at the update of step 20: the gradients of step 21 are the first that differ
    assert div is not None and div.step == 21
    sims = res.similarities
    assert all(sims[n][:21] == [1.0] * 21 for n in sims)
    flagged = {name for name, _, _ in div.params}
    expected = {n for n in sims if n != "summary" and sims[n][20] - sims[n][21] > 0.03}
    assert flagged == expected and len(flagged) >= 3
    assert [v for _, v, _ in div.params] == sorted(v for _, v, _ in div.params)
    # similarities.csv as the reference writes it
    raw = (out / "rank0" / "similarities.csv").read_bytes()
    assert raw.startswith(b"\xef\xbb\xbfstep,0,1,2,")
    rows = stats.read_summary(str(out / "rank0" / "similarities.csv"))
    names = [n for n, _ in runs["model"].named_parameters()]
    assert [r[0] for r in rows] == ["step"] + names + ["summary"]
    assert [float(v) for v in rows[-1][1:]] == pytest.approx(sims["summary"])
    # summary = element-weighted mean of the parameters
    sizes = {n: p.numel() for n, p in runs["model"].named_parameters()}
    weighted = sum(sims[n][30] * sizes[n] for n in names) / sum(sizes.values())
    assert sims["summary"][30] == pytest.approx(weighted)
    if importlib.util.find_spec("matplotlib") is not None:
        pics = sorted(os.listdir(out / "rank0" / "similarities_picture"))
        assert pics == sorted([f"{n}_similarities.png" for n in names] + ["summary_similarities.png",
                                                                          "similarities_heatmap.png"])
        assert (out / "rank0" / "similarities_picture" / "summary_similarities.png").read_bytes()[:4] == b"\x89PNG"


def test_find_divergence_rules():
    steps = [0, 1, 2, 3]
    assert find_divergence(steps, {"w": [0.96, 0.96, 0.96, 0.96], "summary": [1] * 4}).step == 0
    d = find_divergence(steps, {"w": [1.0, 0.99, 0.98, 0.94], "b": [1.0, 1.0, 0.95, 0.95], "summary": [1] * 4})
    assert d.step == 2 and [p[0] for p in d.params] == ["b"]
    assert find_divergence(steps, {"w": [1.0, 0.98, 0.96, 0.94]}) is None      # slow drift: never > 0.03 at once


def test_comparator_errors(tmp_path, runs):
    with pytest.raises(MsprobeError, match="no matched ranks"):
        GradComparator.compare_distributed(str(runs["a"]), str(tmp_path), str(tmp_path / "o"))
    with pytest.raises(RuntimeError, match="is not a directory"):     # also a RuntimeError, as in the reference
        GradComparator.compare_distributed(str(tmp_path / "nope"), str(runs["a"]), str(tmp_path / "o"))
    l0, _ = _mlp_run(tmp_path, {"grad_level": "L0"}, n_steps=1)
    with pytest.raises(MsprobeError, match="not L0"):
        GradComparator.compare(str(l0), str(l0), str(tmp_path / "o0"))
    # a direction file of another shape / dtype
    bad = tmp_path / "bad" / "rank0"
    import shutil
    shutil.copytree(runs["a"] / "rank0" / "step0", bad / "step0")
    shutil.copy(runs["a"] / "rank0" / "grad_summary_0.csv", bad / "grad_summary_0.csv")
    np.save(bad / "step0" / "head.bias.npy", np.zeros(3, dtype=bool))
    with pytest.raises(MsprobeError, match="tensor shape is not equal"):
        GradComparator.compare(str(runs["a"] / "rank0"), str(bad), str(tmp_path / "o1"), plots=False)
    np.save(bad / "step0" / "head.bias.npy", np.zeros(32, dtype=np.float32))
    with pytest.raises(MsprobeError, match="tensor type is not bool"):
        GradComparator.compare(str(runs["a"] / "rank0"), str(bad), str(tmp_path / "o1"), plots=False)


def test_cli_grad_compare(runs, tmp_path, capsys):
    from msprobe.cli.main import main
    assert main(["grad_compare", "-d1", str(runs["a"]), "-d2", str(runs["c"]), "-o", str(tmp_path / "o"),
                 "--no_plots"]) == 0
    out = capsys.readouterr().out
    assert "rank0: 50 steps (0..49): directions part at step 21:" in out
    assert not (tmp_path / "o" / "rank0" / "similarities_picture").exists()
    assert main(["grad_compare", "-d1", str(runs["a"] / "rank0"), "-d2", str(runs["b"] / "rank0"), "-o",
                 str(tmp_path / "o2"), "--no_plots"]) == 0
    assert "agree at every step" in capsys.readouterr().out
    assert main(["grad_compare", "-d1", str(tmp_path / "none"), "-d2", str(runs["a"])]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "is not a directory" in err


def test_public_import_paths():
    import msprobe
    from msprobe import GradComparator as G
    from msprobe.pytorch.grad_probe.grad_monitor import GradientMonitor  # noqa: F401
    from msprobe.pytorch.grad_probe.grad_stat_csv import GradStatCsv
    from msprobe.core.grad_probe.grad_compare import GradComparator as G2
    assert G is G2 and "GradComparator" in msprobe.__all__
    assert GradStatCsv.generate_csv_header("L2", [-1, 0, 1]) == [
        "param_name", "(-inf, -1]", "(-1, 0]", "(0, 1]", "(1, inf)", "=0", "max", "min", "norm", "shape"]
    from msprobe.core.grad_probe.constant import level_adp
    for level in ("L0", "L1", "L2"):      # the reference passes its level_adp entry
        assert GradStatCsv.generate_csv_header(level_adp[level], [-1, 0, 1]) == stats.csv_header(level, [-1, 0, 1])
    line = GradStatCsv.generate_csv_line("w", "L2", torch.tensor([[-2.0, 0.0], [0.5, 3.0]]), [-1, 0, 1])
    assert line == ["w", 0.25, 0.25, 0.25, 0.25, 0.25, 3.0, -2.0, pytest.approx(float(np.sqrt(13.25))), [2, 2]]


# ---------------------------------------------------------------------------------------------- the reference

def test_reference_comparator_reads_our_files(runs, tmp_path):
    """mindstudio-probe 8.3.3's GradComparator on our two dumps writes the similarities we write."""
    if not REF_PYTHON.exists():
        pytest.skip(f"the reference (mindstudio-probe 8.3.3) is not installed at {REF_PYTHON} "
                    "($MSPROBE_REF_CACHE/venv833); build it with the venv833 line of benchmarks/README.md")
    import shutil
    pair = []
    for run in ("a", "c"):          # steps 19..22 of both runs (the reference draws one picture per parameter)
        rank = tmp_path / f"in_{run}" / "rank0"
        for step in range(19, 23):
            shutil.copytree(runs[run] / "rank0" / f"step{step}", rank / f"step{step}")
            shutil.copy(runs[run] / "rank0" / f"grad_summary_{step}.csv", rank)
        pair.append(str(rank.parent))
    script = ("import sys\nfrom msprobe.core.grad_probe.grad_compare import GradComparator\n"
              "GradComparator.compare_distributed(sys.argv[1], sys.argv[2], sys.argv[3])\n")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.run([str(REF_PYTHON), "-c", script, pair[0], pair[1], str(tmp_path / "ref")],
                          capture_output=True, text=True, timeout=300, cwd=str(tmp_path), env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    ours = GradComparator.compare_distributed(pair[0], pair[1], str(tmp_path / "ours"), plots=False)
    ref_rows = stats.read_summary(str(tmp_path / "ref" / "rank0" / "similarities.csv"))
    our_rows = stats.read_summary(str(tmp_path / "ours" / "rank0" / "similarities.csv"))
    assert ref_rows == our_rows and ref_rows[0] == ["step", "19", "20", "21", "22"]
    assert ours[0].divergence.step == 21


# ---------------------------------------------------------------------------------------------- smaller units

def _expected_numbers(level, bounds, arrays):
    rows = []
    for g in arrays:
        g = g.reshape(-1).astype(np.float32)
        row = [float(g.max()), float(g.min()), float(np.float32(np.linalg.norm(g.astype(np.float64))))] if g.size \
            else [np.nan, np.nan, 0.0]
        if level == "L2":
            if bounds:
                b = np.searchsorted(np.asarray(bounds, dtype=np.float32), g, side="left")
                row += [float(np.count_nonzero(b == i)) for i in range(len(bounds) + 1)]
            row.append(float(np.count_nonzero(g == 0)))
        rows.append(row)
    return np.array(rows, dtype=np.float64)


@pytest.mark.parametrize("level, bounds", [("L0", (-1, 0, 1)), ("L1", (-1, 0, 1)), ("L2", (-0.5, 0, 0.5)),
                                           ("L2", ()), ("L2", (0.25,))])
def test_compute_flat_and_compute_step_agree_with_numpy(level, bounds):
    from msprobe.pytorch.grad_probe.grad_monitor import compute_step
    rng = np.random.RandomState(3)
    arrays = [rng.randn(5, 7).astype(np.float32), np.array([0.0, 0.5, -0.5, 0.25], dtype=np.float32),
              rng.randn(3).astype(np.float32), np.zeros((0, 4), dtype=np.float32)]
    arrays[0][0, :3] = 0.0
    sizes = [a.size for a in arrays]
    expected = _expected_numbers(level, bounds, arrays)
    assert expected.shape[1] == stats.number_columns(level, bounds)
    flat = np.concatenate([a.reshape(-1) for a in arrays])
    numbers, md5s, dirs = stats.compute_flat(level, bounds, flat, sizes)
    np.testing.assert_allclose(numbers[:, 3:], expected[:, 3:], rtol=0, atol=0)          # counts: exact
    np.testing.assert_allclose(numbers[:, :3], expected[:, :3], rtol=1e-6)
    names = [f"p{i}" for i in range(len(arrays))]
    with torch.no_grad():
        rec = compute_step(level, bounds, 0, names, [a.shape for a in arrays], [torch.from_numpy(a) for a in arrays])
    np.testing.assert_allclose(rec.numbers[:, 3:], expected[:, 3:], rtol=0, atol=0)
    np.testing.assert_allclose(rec.numbers[:, :3], expected[:, :3], rtol=1e-6)
    if level == "L0":
        crc = ["%08x" % (zlib.crc32(a.tobytes()) & 0xFFFFFFFF) for a in arrays]
        assert md5s == crc and rec.md5s == crc and dirs is None and rec.directions is None
    else:
        assert np.array_equal(dirs, flat > 0)
        assert all(np.array_equal(d, a > 0) for d, a in zip(rec.directions, arrays))
    rows = stats.summary_rows(level, bounds, names, [a.shape for a in arrays], numbers, md5s)
    assert all(len(r) == len(rows[0]) for r in rows)           # empty bounds: only "=0", as long as the header
    if level == "L2" and not bounds:
        assert rows[0] == ["param_name", "=0", "max", "min", "norm", "shape"]
        assert rows[1][1] == 3 / 35


def test_rerun_replaces_the_recorded_steps(tmp_path, caplog):
    _mlp_run(tmp_path, {"grad_level": "L1"}, n_steps=2)
    with caplog.at_level("WARNING", logger="msprobe"):
        rank, grads = _mlp_run(tmp_path, {"grad_level": "L1"}, n_steps=1)
    assert "earlier run" in caplog.text and "step0 will be deleted" in caplog.text
    assert sorted(os.listdir(rank)) == ["grad_summary_0.csv", "grad_summary_1.csv", "step0", "step1"]  # no temp left
    for n, g in grads[0].items():
        assert np.array_equal(np.load(rank / "step0" / f"{n}.npy"), g.numpy() > 0)


_DIST = r"""
import json, sys, torch, torch.distributed as dist
init, dump, rank, world = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
dist.init_process_group("gloo", init_method=init, rank=rank, world_size=world)
from msprobe.pytorch import PrecisionDebugger
from msprobe.core.dump.config import load_dump_config
from msprobe.pytorch.grad_probe.grad_monitor import GradientMonitor
torch.manual_seed(0)
model = torch.nn.Linear(3, 2)
cfg = f"{dump}_only1.{rank}.json"          # through the debugger: rank [1]
json.dump({"task": "grad_probe", "dump_path": dump + "_only1", "rank": [1]}, open(cfg, "w"))
PrecisionDebugger(cfg).monitor(model)
cfg = f"{dump}_both.{rank}.json"           # a second probe on the same model: every rank
json.dump({"task": "grad_probe", "dump_path": dump + "_both", "rank": []}, open(cfg, "w"))
second = GradientMonitor(load_dump_config(cfg))
second.monitor(model)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(2):
    model(torch.full((1, 3), float(rank + step + 1))).sum().backward()
    for p in model.parameters():          # data parallel: average the gradients
        dist.all_reduce(p.grad)
        p.grad /= world
    opt.step()
    opt.zero_grad()
PrecisionDebugger._reset_for_tests()
second.end()
dist.destroy_process_group()
"""


def _two_ranks(tmp_path, name):
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    dump = tmp_path / name
    procs = [subprocess.Popen([sys.executable, "-c", _DIST, f"file://{tmp_path}/init_{name}", str(dump),
                               str(r), "2"], env=env, cwd=str(tmp_path), stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for r in range(2)]
    for p in procs:
        _, err = p.communicate(timeout=180)
        assert p.returncode == 0, err[-2000:]
    return dump


def test_two_ranks_on_gloo(tmp_path):
    """Each rank writes its own rank{R} folder (the rank filter is applied); compare_distributed pairs the ranks."""
    _two_ranks(tmp_path, "d")
    only1, both = tmp_path / "d_only1", tmp_path / "d_both"
    assert os.listdir(only1) == ["rank1"]
    assert sorted(os.listdir(only1 / "rank1")) == ["grad_summary_0.csv", "grad_summary_1.csv", "step0", "step1"]
    assert sorted(os.listdir(both)) == ["rank0", "rank1"]
    # after the all-reduce both ranks hold the same gradients
    assert (both / "rank0" / "grad_summary_1.csv").read_bytes() == (both / "rank1" / "grad_summary_1.csv").read_bytes()
    res = GradComparator.compare_distributed(str(both), str(only1), str(tmp_path / "cmp"), plots=False)
    assert [os.path.basename(r.output_dir) for r in res] == ["rank1"]
    assert res[0].divergence is None and res[0].similarities["summary"] == [1.0, 1.0]


_REF_RUN = r"""
import json, sys, torch, torch.nn as nn
from msprobe.pytorch import PrecisionDebugger
out, level = sys.argv[1], sys.argv[2]
json.dump({"task": "grad_probe", "dump_path": out, "rank": [], "step": [0, 2],
           "grad_probe": {"grad_level": level, "param_list": [], "bounds": [-0.01, 0, 0.01]}}, open(out + ".json", "w"))
torch.manual_seed(0)
debugger = PrecisionDebugger(out + ".json")
model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
debugger.monitor(model)
opt = torch.optim.Adam(model.parameters(), lr=1e-2)
for i in range(4):
    model(torch.randn(4, 8)).pow(2).mean().backward()
    opt.step()
    opt.zero_grad()
if getattr(debugger, "service", None) is not None and hasattr(debugger.service, "monitor_"):
    debugger.service.monitor_.wait()
"""


def test_same_files_as_the_reference(tmp_path, level="L2"):
    """The same script under mindstudio-probe 8.3.3 and under msprobe: the same files, the same values (L2: the
    histogram and the directions; L0's CRC is checked against zlib above)."""
    if not REF_PYTHON.exists():
        pytest.skip(f"the reference (mindstudio-probe 8.3.3) is not installed at {REF_PYTHON}")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    ref = subprocess.run([str(REF_PYTHON), "-E", "-c", _REF_RUN, str(tmp_path / "ref"), level], capture_output=True,
                         text=True, timeout=300, cwd=str(tmp_path), env=env)
    assert ref.returncode == 0, ref.stderr[-2000:]
    ours = subprocess.run([sys.executable, "-c", _REF_RUN, str(tmp_path / "ours"), level], capture_output=True,
                          text=True, timeout=300, cwd=str(tmp_path), env=dict(env, PYTHONPATH=str(ROOT)))
    assert ours.returncode == 0, ours.stderr[-2000:]
    r, o = tmp_path / "ref" / "rank0", tmp_path / "ours" / "rank0"
    assert sorted(os.listdir(r)) == sorted(os.listdir(o))
    for step in (0, 2):
        rr = stats.read_summary(str(r / f"grad_summary_{step}.csv"))
        oo = stats.read_summary(str(o / f"grad_summary_{step}.csv"))
        assert rr[0] == oo[0] and [x[0] for x in rr] == [x[0] for x in oo]
        for a, b in zip(rr[1:], oo[1:]):
            assert a[-1] == b[-1] and (level != "L0" or a[1] == b[1])          # shape, CRC
            assert [float(v) for v in b[-4 if level == "L0" else 1:-1]] == pytest.approx(
                [float(v) for v in a[-4 if level == "L0" else 1:-1]], rel=1e-6, abs=1e-9)
        if level == "L2":
            for name in os.listdir(r / f"step{step}"):
                assert np.array_equal(np.load(r / f"step{step}" / name), np.load(o / f"step{step}" / name))


def test_writer_back_pressure_by_bytes(tmp_path, monkeypatch):
    """Direction arrays waiting for the writer thread are bounded: a step that would exceed the limit waits
    until the ones before it are written (one step is always accepted)."""
    import threading
    from msprobe.core.grad_probe import writer as W

    monkeypatch.setattr(W, "MAX_PENDING_BYTES", 10)
    done, release = [], threading.Event()

    def slow_write(self, record):
        release.wait(10)
        done.append(record.step)

    monkeypatch.setattr(W.GradProbeWriter, "write_step", slow_write)
    w = W.GradProbeWriter(str(tmp_path), 0, "L1", (-1, 0, 1))

    def rec(step):
        return W.StepRecord(step, ["p"], [(8,)], np.zeros((1, 3)), None, [np.ones(8, dtype=bool)])

    w.submit(rec(0))                   # accepted at once although 8 bytes are near the limit
    second = threading.Thread(target=w.submit, args=(rec(1),))
    second.start()
    second.join(0.3)
    assert second.is_alive() and done == []     # waits: 8 + 8 > 10 while step 0 is pending
    release.set()
    second.join(10)
    assert not second.is_alive() and done[:1] == [0]
    w.close()
    assert done == [0, 1]
