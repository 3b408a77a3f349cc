"""The training monitor (TrainerMon, issue 20): a 2-layer tiny transformer trained 50 steps on CPU.

Runs (each 50 steps, module-scoped): no monitor; CSV with every switch; TensorBoard with weight gradients and
an AnomalyTurbulence rule, clean and with a gradient spike injected at one step.  Checked: the reference's CSV
headers and file names, TensorBoard tags read back with tensorboard's event reader, statistics against values
computed directly from the training, an alert at exactly the spiked step and none on the clean run, training
losses identical with and without the monitor, bad configs one line each, a failing hook never stops the
training, off steps (step_interval) install no hook, and 2 ranks on gloo.
"""

from __future__ import annotations

import csv
import glob
import json
import logging
import math
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from msprobe.core.errors import MsprobeError  # noqa: E402

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
STEPS = 50
SPIKE_STEP = 30
SPIKE_PARAM = "blocks.1.fc2.weight"
OPS6 = ["min", "max", "norm", "zeros", "nans", "mean"]


# ------------------------------------------------------------------------------------------------ model
class Attention(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.h = heads
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)

    def forward(self, x):
        b, s, d = x.shape
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        q, k, v = (t.view(b, s, self.h, d // self.h).transpose(1, 2) for t in (q, k, v))
        att = F.softmax(q @ k.transpose(-2, -1) / (d // self.h) ** 0.5, dim=-1)
        return self.proj((att @ v).transpose(1, 2).reshape(b, s, d))


class Block(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.ln1, self.attn = nn.LayerNorm(d), Attention(d, heads)
        self.ln2, self.fc1, self.act, self.fc2 = nn.LayerNorm(d), nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d)

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.fc2(self.act(self.fc1(self.ln2(x))))


class TinyTransformer(nn.Module):
    def __init__(self, vocab=100, d=32, heads=4, n_layers=2, seq=8):
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        self.pos = nn.Parameter(torch.zeros(1, seq, d))
        self.blocks = nn.ModuleList([Block(d, heads) for _ in range(n_layers)])
        self.ln_f = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab)

    def forward(self, idx):
        x = self.emb(idx) + self.pos
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.ln_f(x))


class _Records(logging.Handler):
    def __init__(self):
        super().__init__(logging.DEBUG)
        self.lines = []

    def emit(self, record):
        self.lines.append(record.getMessage())


def train(out, cfg=None, steps=STEPS, spike_step=None, grad_acc=1, probe=None, set_kwargs=None):
    """Train; returns (losses, monitor, log lines, rank folder). ``probe(step, model, monitor)`` runs after each
    step's backward (inside the step)."""
    torch.manual_seed(0)
    model = TinyTransformer()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    gen = torch.Generator().manual_seed(1)
    handler = _Records()
    log = logging.getLogger("msprobe")
    log.addHandler(handler)
    old_level = log.level
    log.setLevel(logging.INFO)
    old_env = os.environ.get("MONITOR_OUTPUT_DIR")
    mon = None
    state = {"step": 0}
    threads = torch.get_num_threads()
    torch.set_num_threads(1)           # tiny tensors: threads only contend on a loaded machine
    try:
        if cfg is not None:
            os.makedirs(out, exist_ok=True)
            path = os.path.join(out, "monitor_config.json")
            with open(path, "w") as f:
                json.dump(cfg, f)
            os.environ["MONITOR_OUTPUT_DIR"] = os.path.join(out, "monitor_output")
            from msprobe.pytorch import TrainerMon
            mon = TrainerMon(path, params_have_main_grad=False)
            mon.set_monitor(model, optimizer=opt, grad_acc_steps=grad_acc, **(set_kwargs or {}))
        if spike_step is not None:
            p = dict(model.named_parameters())[SPIKE_PARAM]
            p.register_hook(lambda g: g * 100.0 if state["step"] == spike_step else g)
        losses = []
        for step in range(steps):
            state["step"] = step
            total = 0.0
            for _ in range(grad_acc):
                x = torch.randint(0, 100, (4, 8), generator=gen)
                y = torch.randint(0, 100, (4, 8), generator=gen)
                loss = F.cross_entropy(model(x).reshape(-1, 100), y.reshape(-1)) / grad_acc
                loss.backward()
                total += loss.item()
            if probe is not None:
                probe(step, model, mon)
            opt.step()
            opt.zero_grad()
            losses.append(total)
    finally:
        torch.set_num_threads(threads)
        log.removeHandler(handler)
        log.setLevel(old_level)
        if old_env is None:
            os.environ.pop("MONITOR_OUTPUT_DIR", None)
        else:
            os.environ["MONITOR_OUTPUT_DIR"] = old_env
    rank_dir = mon.rank_dir if mon is not None else None
    if mon is not None:
        mon.remove()
    return losses, mon, handler.lines, rank_dir


def read_csv(path):
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    return rows[0], rows[1:]


def wg_cfg(fmt):
    return {"targets": {}, "wg_distribution": True, "format": fmt, "ops": ["norm", "min", "max"],
            "alert": {"rules": [{"rule_name": "AnomalyTurbulence", "args": {"threshold": 3.0}}], "dump": True}}


FULL_CFG = {"targets": {}, "xy_distribution": True, "all_xy": True, "wg_distribution": True, "mv_distribution": True,
            "param_distribution": True, "mg_direction": True, "format": "csv", "ops": OPS6, "ndigits": 6,
            "step_count_per_record": 25}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    base = tmp_path_factory.mktemp("monitor")
    grads = {}

    def probe(step, model, mon):
        if step in (0, 10, 49):
            p = dict(model.named_parameters())
            grads[step] = {n: p[n].grad.detach().clone() for n in ("blocks.0.fc1.weight", "head.bias")}
    plain = train(str(base / "plain"), probe=probe)
    full = train(str(base / "full"), FULL_CFG)
    tb_clean = train(str(base / "tb_clean"), wg_cfg("tensorboard"))
    tb_spike = train(str(base / "tb_spike"), wg_cfg("tensorboard"), spike_step=SPIKE_STEP)
    return {"plain": plain, "full": full, "tb_clean": tb_clean, "tb_spike": tb_spike, "grads": grads, "base": base}


# ------------------------------------------------------------------------------------------------ outputs
def test_losses_identical_with_and_without_the_monitor(runs):
    plain = runs["plain"][0]
    assert len(plain) == STEPS and all(math.isfinite(x) for x in plain)
    assert runs["full"][0] == plain
    assert runs["tb_clean"][0] == plain
    assert runs["tb_spike"][0][:SPIKE_STEP + 1] == plain[:SPIKE_STEP + 1]


def test_csv_files_and_headers_are_the_reference_s(runs):
    d = runs["full"][3]
    names = sorted(os.path.basename(p) for p in glob.glob(os.path.join(d, "*.csv")))
    kinds = ("actv", "actv_grad", "exp_avg", "exp_avg_sq", "grad_reduced", "grad_unreduced", "other",
             "param_origin", "param_updated")
    assert names == sorted(f"{k}_{a}-{a + 24}.csv" for k in kinds for a in (0, 25))
    ops = ",".join(OPS6 + ["shape", "dtype"])
    for k in kinds:
        head, rows = read_csv(os.path.join(d, f"{k}_0-24.csv"))
        micro = ",micro_step" if k in ("actv", "actv_grad") else ""
        assert ",".join(head) == f"vpp_stage,name,step{micro},{ops}", k
        assert rows
    head, rows = read_csv(os.path.join(d, "actv_0-24.csv"))
    by = {(r[1], int(r[2])): r for r in rows}
    assert set(int(r[2]) for r in rows) == set(range(25))
    # the root module's input is the int64 token ids; names carry no '0:' prefix and no micro step
    r = by[("emb.input", 0)]
    assert r[3] == "0" and r[-2] == "[4, 8]" and r[-1] == "torch.int64"
    assert ("blocks.1.fc2.output", 7) in by and (".output", 7) in by
    # Adam's state is empty before the first step: m and v start at step 1 (as the reference)
    _, rows = read_csv(os.path.join(d, "exp_avg_0-24.csv"))
    assert min(int(r[2]) for r in rows) == 1
    # mg_direction is 1.0 at step 0
    _, rows = read_csv(os.path.join(d, "other_0-24.csv"))
    assert [r[3:6] for r in rows if r[2] == "0"][0] == ["1.0", "1.0", "1.0"]


def test_gradient_statistics_match_the_training(runs):
    d = runs["full"][3]
    head, rows = read_csv(os.path.join(d, "grad_reduced_0-24.csv"))
    col = {h: i for i, h in enumerate(head)}
    by = {(r[1], int(r[2])): r for r in rows}
    for step in (0, 10):
        for name, g in runs["grads"][step].items():
            r = by[(name, step)]
            g64 = g.double()
            assert float(r[col["norm"]]) == pytest.approx(g64.norm().item(), rel=1e-5, abs=1e-6)
            assert float(r[col["min"]]) == pytest.approx(g64.min().item(), rel=1e-5, abs=1e-6)
            assert float(r[col["max"]]) == pytest.approx(g64.max().item(), rel=1e-5, abs=1e-6)
            assert float(r[col["mean"]]) == pytest.approx(g64.mean().item(), abs=1e-6)
            assert int(r[col["nans"]]) == 0
            assert r[col["shape"]] == str(list(g.shape)) and r[col["dtype"]] == "torch.float32"
    # the unreduced (accumulated) gradient of a single-process run is the same tensor
    _, rows_u = read_csv(os.path.join(d, "grad_unreduced_0-24.csv"))
    un = {(r[1], int(r[2])): r[3:] for r in rows_u}
    assert un[("head.bias", 10)] == by[("head.bias", 10)][3:]


def _scalars(rank_dir):
    ea = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator",
                             reason="tensorboard is not installed (pip install tensorboard)")
    acc = ea.EventAccumulator(rank_dir, size_guidance={ea.SCALARS: 0})
    acc.Reload()
    return acc


def test_tensorboard_tags_are_the_reference_s(runs):
    rank_dir = runs["tb_clean"][3]
    assert len(glob.glob(os.path.join(rank_dir, "events.out.tfevents.*"))) == 1
    acc = _scalars(rank_dir)
    tags = set(acc.Tags()["scalars"])
    for kind in ("post_grad", "acc_grad"):
        for op in ("norm", "min", "max"):
            assert f"0:{SPIKE_PARAM}/rank0/{kind}_{op}" in tags
    assert not any(t.endswith(("_shape", "_dtype")) for t in tags)   # not scalars (the reference crashes on them)
    ev = acc.Scalars(f"0:{SPIKE_PARAM}/rank0/post_grad_norm")
    assert [e.step for e in ev] == list(range(STEPS))
    spiked = {e.step: e.value for e in _scalars(runs["tb_spike"][3]).Scalars(f"0:{SPIKE_PARAM}/rank0/post_grad_norm")}
    clean = {e.step: e.value for e in ev}
    assert spiked[SPIKE_STEP] == pytest.approx(100 * clean[SPIKE_STEP], rel=1e-5)
    assert spiked[SPIKE_STEP - 1] == clean[SPIKE_STEP - 1]


def test_alert_at_the_spiked_step_and_none_on_the_clean_run(runs):
    clean_lines = runs["tb_clean"][2]
    assert not [x for x in clean_lines if "reports anomaly signal" in x]
    lines = [x for x in runs["tb_spike"][2] if "reports anomaly signal" in x]
    assert lines, "no alert for the spike"
    for tag_kind in ("post_grad", "acc_grad"):
        want = (f"Rule AnomalyTurbulence reports anomaly signal in ('0:{SPIKE_PARAM}/rank0/{tag_kind}', 'norm') "
                f"at step {SPIKE_STEP}, current value ")
        assert any(want in x for x in lines), tag_kind
    assert all(f"at step {SPIKE_STEP}," in x for x in lines)
    assert all(SPIKE_PARAM in x for x in lines)
    assert all("the history mean)" in x for x in lines)          # the jump, e.g. (x97.3 the history mean)
    adir = os.path.join(runs["base"], "tb_spike", "monitor_output", "anomaly_detected", "rank0")
    with open(os.path.join(adir, "anomaly.json")) as f:
        anomalies = json.load(f)
    assert {v["step"] for v in anomalies.values()} == {SPIKE_STEP}
    rec = anomalies[next(k for k in anomalies if "post_grad" in k)]
    assert rec["tag_name"] == f"0:{SPIKE_PARAM}/rank0/post_grad" and rec["rank"] == 0 and rec["group_mates"] == [0]
    v = float(rec["message"].split("current value ")[1].split(",")[0])
    h = float(rec["message"].split("history mean ")[1].rstrip("."))
    assert v > 4 * h


def test_csv2tensorboard_reads_the_csv_output(runs, tmp_path):
    pytest.importorskip("tensorboard")
    from msprobe.cli.main import main
    out = tmp_path / "tb"
    assert main(["csv2tensorboard", "-d", str(runs["base"] / "full" / "monitor_output"), "-o", str(out),
                 "--types", "grad_reduced,actv"]) == 0
    acc = _scalars(str(out / "rank0" / "grad_reduced"))
    ev = acc.Scalars("vp0:head.bias/norm")
    assert [e.step for e in ev] == list(range(STEPS))
    assert ev[10].value == pytest.approx(runs["grads"][10]["head.bias"].norm().item(), rel=1e-5)
    assert "vp0:blocks.0.fc1.output:micro0/max" in _scalars(str(out / "rank0" / "actv")).Tags()["scalars"]
    assert main(["csv2tensorboard", "-d", str(runs["base"] / "full" / "monitor_output"), "-o", str(out)]) == 2


def test_csv2db(runs, tmp_path):
    """The reference's SQLite layout (checked against 8.3.3's csv2db on the same CSV files: same statistics
    tables, rows and global_stats)."""
    import sqlite3
    from msprobe.core.monitor.csv2db import CSV2DBConfig, csv2db
    out = csv2db(CSV2DBConfig(str(runs["base"] / "full" / "monitor_output"), output_dirpath=str(tmp_path / "db"),
                              data_type_list=["grad_reduced", "actv"], step_partition=20))
    db = sqlite3.connect(os.path.join(out, "monitor_metrics.db"))
    metrics = dict(db.execute("SELECT metric_name, metric_id FROM monitoring_metrics"))
    assert set(metrics) == {"grad_reduced", "actv"}
    assert dict(db.execute("SELECT * FROM global_stats")) == {"max_rank": 0, "max_step": 49, "min_step": 0,
                                                              "step_partition_size": 20}
    gid = metrics["grad_reduced"]
    tables = sorted(r[0] for r in db.execute(f"SELECT name FROM sqlite_master WHERE name LIKE 'metric_{gid}_step_%'"))
    assert tables == [f"metric_{gid}_step_0_19", f"metric_{gid}_step_20_39", f"metric_{gid}_step_40_59"]
    cols = [r[1] for r in db.execute(f"PRAGMA table_info(metric_{gid}_step_0_19)")]
    assert cols == ["rank", "step", "target_id", "norm", "min", "max", "zeros", "nans", "mean"]
    tid = db.execute("SELECT target_id FROM monitoring_targets WHERE target_name='head.bias'").fetchone()[0]
    norm = db.execute(f"SELECT norm FROM metric_{gid}_step_0_19 WHERE step=10 AND target_id=?", (tid,)).fetchone()[0]
    assert norm == pytest.approx(runs["grads"][10]["head.bias"].norm().item(), rel=1e-5)
    with pytest.raises(MsprobeError, match="exists"):
        csv2db(CSV2DBConfig(str(runs["base"] / "full" / "monitor_output"), output_dirpath=str(tmp_path / "db")))


# ------------------------------------------------------------------------------------------------ steps
def test_step_interval_installs_hooks_only_on_collected_steps(tmp_path):
    seen = {}

    def probe(step, model, mon):
        seen[step] = (len(model.blocks[0].fc1._forward_hooks), len(mon._handles))
    cfg = {"targets": {}, "xy_distribution": True, "wg_distribution": True, "mv_distribution": True,
           "step_interval": 10, "start_step": 2, "ops": ["norm"], "step_count_per_record": 100}
    losses, mon, _, d = train(str(tmp_path), cfg, steps=23, probe=probe)
    assert seen[2][0] == 1 and seen[12][1] > 0 and seen[22][0] == 1
    assert all(seen[s] == (0, 0) for s in (0, 1, 3, 5, 11, 13, 21))
    _, rows = read_csv(os.path.join(d, "actv_0-99.csv"))
    assert sorted({int(r[2]) for r in rows}) == [2, 12, 22]
    _, rows = read_csv(os.path.join(d, "exp_avg_0-99.csv"))
    assert sorted({int(r[2]) for r in rows}) == [2, 12, 22]


def test_grad_accumulation_micro_steps(tmp_path):
    cfg = {"targets": {"blocks.0.fc1": {}}, "xy_distribution": True, "wg_distribution": True, "ops": ["norm"]}
    grads = {}

    def probe(step, model, mon):
        grads[step] = model.blocks[0].fc1.weight.grad.norm().item()
    _, _, _, d = train(str(tmp_path), cfg, steps=3, grad_acc=2, probe=probe)
    _, rows = read_csv(os.path.join(d, "actv_2-2.csv"))
    assert sorted((r[1], r[3]) for r in rows) == [("blocks.0.fc1.input", "0"), ("blocks.0.fc1.input", "1"),
                                                 ("blocks.0.fc1.output", "0"), ("blocks.0.fc1.output", "1")]
    # the unreduced gradient is the accumulated one (after the last micro step), parameters by prefix
    _, rows = read_csv(os.path.join(d, "grad_unreduced_2-2.csv"))
    assert sorted(r[1] for r in rows) == ["blocks.0.fc1.bias", "blocks.0.fc1.weight"]
    w = [r for r in rows if r[1] == "blocks.0.fc1.weight"][0]
    assert float(w[3]) == pytest.approx(grads[2], rel=1e-5)


def test_activation_gradients_are_the_module_s_grad_input_and_output(tmp_path):
    """actv_grad of a residual-stream input is the gradient through that module only (the reference's
    full-backward-hook grad_input), not the input's total gradient."""
    want = {}

    def grab(name):
        def hook(module, gin, gout):
            want[name] = (gin[0].norm().item(), gout[0].norm().item())
        return hook
    torch.manual_seed(0)
    model = TinyTransformer()
    model.blocks[0].ln1.register_full_backward_hook(grab("blocks.0.ln1"))
    model.blocks[1].fc2.register_full_backward_hook(grab("blocks.1.fc2"))
    gen = torch.Generator().manual_seed(1)
    x = torch.randint(0, 100, (4, 8), generator=gen)
    y = torch.randint(0, 100, (4, 8), generator=gen)
    F.cross_entropy(model(x).reshape(-1, 100), y.reshape(-1)).backward()
    cfg = {"targets": {"blocks.0.ln1": {}, "blocks.1.fc2": {}, "": {}}, "xy_distribution": True, "ops": ["norm"],
           "ndigits": 12}
    _, _, _, d = train(str(tmp_path), cfg, steps=1)
    _, rows = read_csv(os.path.join(d, "actv_grad_0-0.csv"))
    got = {r[1]: float(r[4]) for r in rows}
    for name, (gin, gout) in want.items():
        assert got[f"{name}.input"] == pytest.approx(gin, rel=1e-5)
        assert got[f"{name}.output"] == pytest.approx(gout, rel=1e-5)
    assert got[".input"] != got[".input"]           # the token ids have no gradient: NaN row, as the reference


def test_in_place_ops_after_hooked_modules_train_unchanged(tmp_path):
    """ReLU(inplace=True) on a hooked module's output, and a module modifying its own output in place: a
    full backward hook would make these fail ('Output 0 of BackwardHookFunction is a view ...')."""
    class AddInPlace(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(16, 16)

        def forward(self, x):
            y = self.lin(x)
            y += 1
            return y

    def run(cfg):
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(inplace=True), AddInPlace(), nn.ReLU(inplace=True),
                              nn.Linear(16, 4))
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        mon = None
        if cfg:
            (tmp_path / "c.json").write_text(json.dumps(cfg))
            os.environ["MONITOR_OUTPUT_DIR"] = str(tmp_path / "out")
            try:
                from msprobe.pytorch import TrainerMon
                mon = TrainerMon(str(tmp_path / "c.json"), params_have_main_grad=False)
                mon.set_monitor(model, optimizer=opt)
            finally:
                os.environ.pop("MONITOR_OUTPUT_DIR", None)
        gen = torch.Generator().manual_seed(3)
        losses = []
        for _ in range(3):
            loss = model(torch.randn(4, 8, generator=gen)).pow(2).mean()
            loss.backward()
            opt.step()
            opt.zero_grad()
            losses.append(loss.item())
        return losses, mon
    plain, _ = run(None)
    losses, mon = run({"targets": {}, "xy_distribution": True, "ops": ["norm"]})
    assert losses == plain
    _, rows = read_csv(os.path.join(mon.rank_dir, "actv_grad_2-2.csv"))
    got = {r[1]: r[4] for r in rows}
    assert {"1.input", "1.output", "2.input", "2.output", "3.input", "3.output"} <= set(got)
    # the reference's values for this model and step (8.3.3, which clones the inputs of hooked modules);
    # ReLU(inplace=True) writes into its input: its grad_input comes from the write's CopySlices node
    ref = {"4.input": 0.050355, "4.output": 0.074884, "3.input": 0.050355, "3.output": 0.050355,
           "2.lin.input": 0.029904, "2.lin.output": 0.050355, "2.input": 0.029904, "2.output": 0.050355,
           "1.input": 0.02589, "1.output": 0.029904, "0.output": 0.02589, ".output": 0.074884}
    assert {k: float(v) for k, v in got.items() if k in ref} == pytest.approx(ref, abs=2e-6)
    # the model's input needs no gradient: NaN rows for the root's and the first layer's input, as the reference
    assert got[".input"] == got["0.input"] == "nan"
    assert not mon._failed


def test_monitor_mbs_grad_records_every_micro_step(tmp_path):
    cfg = {"targets": {"head.bias": {}}, "wg_distribution": True, "monitor_mbs_grad": True, "ops": ["norm"],
           "ndigits": 10}
    seen = {}

    def probe(step, model, mon):
        seen[step] = model.head.bias.grad.norm().item()
    _, _, _, d = train(str(tmp_path), cfg, steps=2, grad_acc=3, probe=probe)
    head, rows = read_csv(os.path.join(d, "grad_unreduced_1-1.csv"))
    assert head == ["vpp_stage", "name", "step", "micro_step", "norm", "shape", "dtype"]
    assert [(r[1], r[3]) for r in rows] == [("head.bias", "0"), ("head.bias", "1"), ("head.bias", "2")]
    assert float(rows[2][4]) == pytest.approx(seen[1], rel=1e-6)     # after the last micro step: the total
    assert float(rows[0][4]) != pytest.approx(seen[1], rel=1e-3)


def test_api_format_returns_the_step_s_metrics_and_writes_nothing(tmp_path):
    cfg = {"targets": {}, "xy_distribution": True, "wg_distribution": True, "mv_distribution": True,
           "format": "api", "ops": ["norm", "max"]}
    got = {}

    def probe(step, model, mon):
        if step == 2:
            actv, actv_grad = mon.generate_xy_metrics()
            reduced, unreduced = mon.generate_wgrad_metrics()
            got.update(actv=actv, actv_grad=actv_grad, unreduced=unreduced,
                       fc1=model.blocks[0].fc1.weight.grad.norm().item())
    losses, mon, _, d = train(str(tmp_path), cfg, steps=3, probe=probe)
    assert got["actv"]["0:blocks.0.fc1.output:0/rank0/actv"]["shape"] == [4, 8, 128]
    assert "0:blocks.0.fc1.input:0/rank0/actv_grad" in got["actv_grad"]
    assert got["unreduced"]["0:blocks.0.fc1.weight/rank0/acc_grad"]["norm"] == pytest.approx(got["fc1"], rel=1e-5)
    assert not os.path.exists(d)           # nothing written
    assert losses == train(str(tmp_path / "plain"), steps=3)[0]


def test_module_ranks_without_this_rank_monitors_nothing(tmp_path):
    cfg = {"targets": {}, "xy_distribution": True, "wg_distribution": True, "module_ranks": [1]}
    seen = []
    losses, mon, _, d = train(str(tmp_path), cfg, steps=2,
                              probe=lambda step, model, m: seen.append(len(model.blocks[0].fc1._forward_hooks)))
    assert seen == [0, 0] and d is None and not os.path.exists(tmp_path / "monitor_output" / "anomaly_detected")
    assert not [x for x in os.listdir(tmp_path / "monitor_output")]


def test_stack_info_and_print_struct(tmp_path):
    cfg = {"targets": {}, "wg_distribution": True, "stack_info": True, "print_struct": True, "ops": ["norm"],
           "step_count_per_record": 10}
    losses, mon, lines, d = train(str(tmp_path), cfg, steps=3)
    head, rows = read_csv(os.path.join(d, "stack_info.csv"))
    assert head == ["module_name", "stack_info"]
    stacks = dict(rows)
    assert list(stacks)[:3] == ["0:emb", "0:blocks.0.ln1", "0:blocks.0.attn.qkv"]   # first-call order
    assert "0:" in stacks and "0:blocks.1.fc2" in stacks
    first = stacks["0:blocks.0.attn.qkv"].split(" \n")[0]
    assert first.startswith("File ") and "test_monitor.py" in first and "in forward, \n" in first + " \n"
    assert "self.qkv(x)" in stacks["0:blocks.0.attn.qkv"]
    struct = json.load(open(tmp_path / "monitor_output" / "module_struct" / "rank0" / "module_struct.json"))
    a, b = "size=(4, 8, 32), dtype=torch.float32", "size=(4, 8, 128), dtype=torch.float32"
    assert struct["0:blocks.0.fc1"] == {"input": {"config": "tensor", "0": a}, "output": {"config": "tensor", "0": b},
                                       "input_grad": {"config": "tuple[1]", "0": a},
                                       "output_grad": {"config": "tuple[1]", "0": b}}
    assert any("save module struct to" in x for x in lines)
    # print_struct stops monitoring after the first step (the reference stops the training): steps 0 only
    _, rows = read_csv(os.path.join(d, "grad_reduced_0-9.csv"))
    assert {r[2] for r in rows} == {"0"}
    assert losses == train(str(tmp_path / "plain"), steps=3)[0]


def test_dynamic_mode(tmp_path, monkeypatch):
    """DYNAMIC_MONITOR=true: nothing until the config file changes with dynamic_on true; then collect_times
    steps from the next step on, and the file gets dynamic_on false; a bad update keeps the state."""
    monkeypatch.setenv("DYNAMIC_MONITOR", "true")
    path = tmp_path / "monitor_config.json"
    on = {"targets": {}, "wg_distribution": True, "ops": ["norm"], "dynamic_on": True, "collect_times": 2,
          "step_count_per_record": 100}
    seen = {}

    def write(cfg, stamp):
        path.write_text(json.dumps(cfg))
        os.utime(path, ns=(stamp, stamp))

    def probe(step, model, mon):
        seen[step] = len(mon._handles)
        if step == 2:
            write(on, 2_000_000_000_000_000_000)
        if step == 5:
            seen["file"] = json.loads(path.read_text())
        if step == 6:
            write({"dynamic_on": True, "bogus": 1}, 3_000_000_000_000_000_000)
    losses, mon, lines, d = train(str(tmp_path), {"dynamic_on": False, "wg_distribution": True}, steps=8,
                                  probe=probe)
    assert [seen[s] > 0 for s in range(8)] == [False, False, False, True, True, False, False, False]
    assert any("config is updated at step2, will start new hook at step3." in x for x in lines)
    _, rows = read_csv(os.path.join(mon.rank_dir, "grad_reduced_0-99.csv"))
    assert sorted({int(r[2]) for r in rows}) == [3, 4]
    assert seen["file"] == dict(on, dynamic_on=False)          # rewritten after the last collection
    assert any("get config.json wrong because" in x and "bogus" in x for x in lines)
    assert any("Finish monitor, set config'dynamic_on=False" in x for x in lines)
    assert losses == train(str(tmp_path / "plain"), steps=8)[0]


def test_ur_distribution_heatmaps(tmp_path):
    ea = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator",
                             reason="tensorboard is not installed (pip install tensorboard)")
    cfg = {"targets": {"head.weight": {}}, "ur_distribution": True, "format": "tensorboard", "ops": ["norm"]}
    want = {}

    def probe(step, model, mon):       # Adam's bias-corrected update of head.weight before this step's update
        st = mon.optimizer.state.get(model.head.weight)
        if st:
            b1, b2 = mon.optimizer.defaults["betas"]
            m = st["exp_avg"] / (1 - b1 ** float(st["step"]))
            v = st["exp_avg_sq"] / (1 - b2 ** float(st["step"]))
            want[step] = torch.histc(m / (v.sqrt() + mon.optimizer.defaults["eps"]), 30, -1, 1).tolist()
    _, mon, _, d = train(str(tmp_path), cfg, steps=4, probe=probe)
    cols = mon._heat["0:head.weight/rank0/adam_update"]
    assert [c.tolist() for c in cols] == [want[1], want[2], want[3]]     # Adam's state is empty at step 0
    acc = ea.EventAccumulator(d, size_guidance={ea.IMAGES: 0})
    acc.Reload()
    assert set(acc.Tags()["images"]) == {"0:head.weight/rank0/adam_update", "0:head.weight/rank0/adam_ratio"}
    imgs = acc.Images("0:head.weight/rank0/adam_update")
    assert [i.step for i in imgs] == [1, 2, 3]
    assert imgs[-1].encoded_image_string[:8] == b"\x89PNG\r\n\x1a\n"
    assert (imgs[-1].height, imgs[-1].width) == (30 * 6, 3 * 4)          # 30 bins x 3 collected steps


def test_l2_features(tmp_path):
    """attention_hook on a module taking (q, k, v) in s,b,h,d order, linear_hook on every 2-D weight."""
    class CoreAttention(nn.Module):
        def forward(self, q, k, v):
            att = torch.softmax(q.permute(1, 2, 0, 3) @ k.permute(1, 2, 3, 0), dim=-1)
            return (att @ v.permute(1, 2, 0, 3)).permute(2, 0, 1, 3)

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(50, 16)
            self.qkv = nn.Linear(16, 48)
            self.core = CoreAttention()
            self.out = nn.Linear(16, 50)

        def forward(self, idx):                      # idx: (s, b)
            x = self.emb(idx)
            q, k, v = (t.reshape(idx.shape[0], idx.shape[1], 2, 8) for t in self.qkv(x).chunk(3, dim=-1))
            return self.out(self.core(q, k, v).reshape(idx.shape[0], idx.shape[1], 16))

    torch.manual_seed(0)
    model = Net()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    (tmp_path / "c.json").write_text(json.dumps({"recording_l2_features": True, "ndigits": 10,
                                                 "l2_targets": {"attention_hook": ["0:core"], "linear_hook": []}}))
    os.environ["MONITOR_OUTPUT_DIR"] = str(tmp_path / "out")
    try:
        from msprobe.pytorch import TrainerMon
        mon = TrainerMon(str(tmp_path / "c.json"), params_have_main_grad=False)
        mon.set_monitor(model, optimizer=opt)
    finally:
        os.environ.pop("MONITOR_OUTPUT_DIR", None)
    want = {}

    def grab(module, inputs, output):
        q, k = inputs[0][:, 0, 0, :], inputs[1][:, 0, 0, :]
        a = (q @ k.t()) / 8 ** 0.5
        a = a.masked_fill(torch.ones_like(a, dtype=torch.bool).tril().logical_not(), float("-inf"))
        p = torch.softmax(a, dim=1)
        want["entropy"] = (-(p * p.log()).nansum(dim=1)).mean().item()
        want["softmax_max"] = p.amax(dim=1).mean().item()
    model.core.register_forward_hook(grab)
    idx = torch.randint(0, 50, (6, 3))
    rng_after_input = torch.random.get_rng_state()
    F.cross_entropy(model(idx).reshape(-1, 50), idx.reshape(-1)).backward()
    assert torch.equal(torch.random.get_rng_state(), rng_after_input)    # the power iteration left it alone
    w = model.out.weight.detach().clone()
    opt.step()
    mon.remove()
    head, rows = read_csv(os.path.join(mon.rank_dir, "attention_hook_0-0.csv"))
    assert head == ["vpp_stage", "name", "step", "micro_step", "entropy", "softmax_max"]
    assert rows[0][1] == "core.attention"
    assert float(rows[0][4]) == pytest.approx(want["entropy"], rel=1e-5)
    assert float(rows[0][5]) == pytest.approx(want["softmax_max"], rel=1e-5)
    head, rows = read_csv(os.path.join(mon.rank_dir, "linear_hook_0-0.csv"))
    assert head == ["vpp_stage", "name", "step", "sr", "kernel_norm"]
    by = {r[1]: (float(r[3]), float(r[4])) for r in rows}
    assert set(by) == {"qkv.linear", "out.linear"}                        # the embedding is excluded
    # kernel_norm: 3 power iterations on W^T W from the monitor's own generator (seed 0; qkv drew first)
    g = torch.Generator().manual_seed(0)
    torch.randn(16, generator=g)
    u = torch.randn(16, generator=g)
    u, m = u / u.norm(), w.t() @ w
    for _ in range(3):
        v = m @ u
        est = (v @ u).item()
        u = v / v.norm()
    assert by["out.linear"][1] == pytest.approx(est ** 0.5, rel=1e-5)
    assert by["out.linear"][1] <= torch.linalg.matrix_norm(w, ord=2).item() * (1 + 1e-5)   # a lower estimate
    assert by["out.linear"][0] == pytest.approx(w.norm().item() / by["out.linear"][1], rel=1e-6)


def test_append_output_continues_the_rank_folder(tmp_path):
    cfg = {"targets": {"head": {}}, "wg_distribution": True, "ops": ["norm"], "step_count_per_record": 10}
    _, _, _, first = train(str(tmp_path), cfg, steps=2)
    tag = os.path.basename(first).split("-rank")[0]
    cfg2 = dict(cfg, append_output=[tag, tag])
    _, mon, _, second = train(str(tmp_path), cfg2, steps=2, set_kwargs={"start_iteration": 2})
    assert second == first
    _, rows = read_csv(os.path.join(first, "grad_reduced_0-9.csv"))
    assert [int(r[2]) for r in rows if r[1] == "head.bias"] == [0, 1, 2, 3]
    _, _, lines, third = train(str(tmp_path), dict(cfg, append_output=["Jan01_00-00-00", "Jan01_00-00-01"]), steps=1)
    assert third != first and any("no folder of rank 0 in that range" in x for x in lines)


def test_everything_on_leaves_the_training_unchanged(tmp_path):
    pytest.importorskip("tensorboard")
    cfg = {"targets": {}, "xy_distribution": True, "wg_distribution": True, "monitor_mbs_grad": True,
           "mv_distribution": True, "ur_distribution": True, "param_distribution": True, "mg_direction": True,
           "recording_l2_features": True, "l2_targets": {"linear_hook": []}, "stack_info": True,
           "format": "tensorboard", "ops": ["min", "max", "norm", "zeros", "nans", "mean", "id"],
           "alert": {"rules": [{"rule_name": "AnomalyTurbulence", "args": {"threshold": 0.5}},
                               {"rule_name": "AnomalyNan", "args": {}}], "dump": True}}
    rng = torch.random.get_rng_state()
    losses, mon, _, d = train(str(tmp_path), cfg, steps=6, grad_acc=2)
    assert not mon._failed
    torch.random.set_rng_state(rng)
    assert losses == train(str(tmp_path / "plain"), steps=6, grad_acc=2)[0]
    assert os.path.isfile(os.path.join(d, "stack_info.csv"))


def test_model_chunks_get_vpp_prefixes(tmp_path):
    """A list of model chunks (virtual pipeline stages): names '0:...' and '1:...', vpp_stage column 0 / 1."""
    torch.manual_seed(0)
    chunks = [nn.Sequential(nn.Linear(4, 8), nn.ReLU()), nn.Sequential(nn.Linear(8, 2))]
    opt = torch.optim.SGD([p for c in chunks for p in c.parameters()], lr=0.1)
    (tmp_path / "c.json").write_text(json.dumps({"targets": {}, "xy_distribution": True, "wg_distribution": True,
                                                 "ops": ["norm"]}))
    os.environ["MONITOR_OUTPUT_DIR"] = str(tmp_path / "out")
    try:
        from msprobe.pytorch.monitor.module_hook import TrainerMon        # the reference's module path
        mon = TrainerMon(str(tmp_path / "c.json"), params_have_main_grad=False)
        mon.set_monitor(chunks, optimizer=opt)
    finally:
        os.environ.pop("MONITOR_OUTPUT_DIR", None)
    chunks[1](chunks[0](torch.randn(3, 4))).sum().backward()
    opt.step()
    mon.remove()
    _, rows = read_csv(os.path.join(mon.rank_dir, "grad_reduced_0-0.csv"))
    assert sorted((r[0], r[1]) for r in rows) == [("0", "0.bias"), ("0", "0.weight"), ("1", "0.bias"),
                                                  ("1", "0.weight")]
    assert sorted(mon.name2param) == ["0:0.bias", "0:0.weight", "1:0.bias", "1:0.weight"]
    _, rows = read_csv(os.path.join(mon.rank_dir, "actv_0-0.csv"))
    assert ("1", "0.output") in {(r[0], r[1]) for r in rows}


def test_a_failing_hook_is_logged_once_and_training_goes_on(tmp_path, monkeypatch):
    from msprobe.pytorch.monitor import stats

    def boom(self, t):
        raise RuntimeError("injected statistics failure")
    monkeypatch.setattr(stats.StatPlan, "__call__", boom)
    losses, mon, lines, d = train(str(tmp_path), dict(FULL_CFG), steps=5)
    plain = train(str(tmp_path / "plain"), steps=5)[0]
    assert losses == plain
    warned = [x for x in lines if "injected statistics failure" in x]
    assert len(warned) == 1 and "training continues" in warned[0]
    text = open(os.path.join(d, "dump_error_info.log")).read()
    assert text.count("Traceback") == 1


# ------------------------------------------------------------------------------------------------ config
def _cfg_error(tmp_path, cfg, model_targets=False):
    path = tmp_path / "cfg.json"
    path.write_text(json.dumps(cfg))
    os.environ["MONITOR_OUTPUT_DIR"] = str(tmp_path / "out")
    try:
        from msprobe.pytorch import TrainerMon
        with pytest.raises(MsprobeError) as e:
            mon = TrainerMon(str(path), params_have_main_grad=False)
            model = TinyTransformer()
            mon.set_monitor(model, optimizer=torch.optim.SGD(model.parameters(), lr=0.1))
    finally:
        os.environ.pop("MONITOR_OUTPUT_DIR", None)
    msg = str(e.value)
    assert "\n" not in msg
    return msg


@pytest.mark.parametrize("cfg, words", [
    ({"xy_distributon": True}, ["unknown key 'xy_distributon'", "did you mean 'xy_distribution'"]),
    ({"wg_distribution": "yes"}, ["wg_distribution must be true or false", "'yes'"]),
    ({"ops": "norm"}, ["ops must be a list"]),
    ({"ndigits": 0}, ["ndigits must be 1..20"]),
    ({"step_interval": 1.5}, ["step_interval must be an integer"]),
    ({"targets": ["blocks.0"]}, ["targets must be an object"]),
    ({"alert": {"rules": [{"rule_name": "AnomalyTurbulance", "args": {"threshold": 1}}]}},
     ["is not a rule", "did you mean 'AnomalyTurbulence'"]),
    ({"alert": {"rules": [{"rule_name": "AnomalyTurbulence", "args": {"threshold": -1}}]}}, ["threshold must be"]),
    ({"targets": {"blocks.0.fc9": {}}, "xy_distribution": True},
     ["targets key 'blocks.0.fc9' is neither a module nor a parameter", "close names: ", "blocks.0.fc1",
      "blocks.0.fc2"]),
])
def test_bad_config_is_one_line(tmp_path, cfg, words):
    msg = _cfg_error(tmp_path, cfg)
    for w in words:
        assert w in msg, msg


def test_a_module_without_parameters_is_a_valid_target(tmp_path):
    _, mon, _, _ = train(str(tmp_path), {"targets": {"blocks.0.act": {}, "head": {}}, "wg_distribution": True},
                         steps=1)
    assert sorted(mon.name2param) == ["0:head.bias", "0:head.weight"]


def test_unwritable_output_dir_is_one_line(tmp_path):
    (tmp_path / "cfg.json").write_text("{}")
    blocker = tmp_path / "file"
    blocker.write_text("x")
    from msprobe.pytorch import TrainerMon
    for bad in (blocker, blocker / "sub"):
        os.environ["MONITOR_OUTPUT_DIR"] = str(bad)
        try:
            with pytest.raises(MsprobeError) as e:
                TrainerMon(str(tmp_path / "cfg.json"), params_have_main_grad=False)
        finally:
            os.environ.pop("MONITOR_OUTPUT_DIR", None)
        assert "MONITOR_OUTPUT_DIR" in str(e.value) and "\n" not in str(e.value)


def test_reference_configs_are_accepted(tmp_path):
    from msprobe.core.monitor.config import validate_config
    doc = {"targets": {"language_model.encoder.layers.0": {"input": "tuple[2]:0", "output": "tensor"}},
           "dynamic_on": False, "start_step": 0, "collect_times": 100000000, "step_interval": 1,
           "print_struct": False, "module_ranks": [0, 1, 2, 3], "ur_distribution": True, "xy_distribution": True,
           "all_xy": True, "forward_only": False, "backward_only": False, "mv_distribution": True,
           "param_distribution": True, "wg_distribution": True, "monitor_mbs_grad": True,
           "cc_distribution": {"enable": True, "cc_codeline": []},
           "alert": {"rules": [{"rule_name": "AnomalyTurbulence", "args": {"threshold": 0.5}}], "dump": False},
           "format": "csv", "ops": ["min", "max", "norm", "zeros", "nans", "mean", "bogus"], "eps": 1e-8,
           "ndigits": 12, "step_count_per_record": 1, "append_output": [], "squash_name": True}
    cfg = validate_config(doc)
    assert cfg["ops"] == ["min", "max", "norm", "zeros", "nans", "mean", "shape", "dtype"]
    assert cfg["ur_distribution"] is False          # only with tensorboard, as the reference
    assert validate_config({})["targets"] == {"": {}}
    assert validate_config({"xy_distribution": True})["all_xy"] is True


# ------------------------------------------------------------------------------------------------ rules
def test_anomaly_rules_vectorised():
    from msprobe.core.monitor.anomaly import AnomalyDetector
    det = AnomalyDetector([{"rule_name": "AnomalyTurbulence", "args": {"threshold": 0.5}},
                           {"rule_name": "AnomalyNan", "args": {}}], ("min", "norm", "mean"))
    tags = ["a/rank0/post_grad", "b/rank0/post_grad"]
    assert det.check(tags, [[10.0, 10.0, 10.0], [1.0, 1.0, 1.0]], 0) == []       # first value: never flagged
    found = det.check(tags, [[20.0, 20.0, 1.0], [1.0, float("nan"), 1.0]], 1)
    got = [(a.tag.split("/")[0], a.op, a.rule) for a in found]
    # turbulence on norm (min is not reported for it), NaN by the second rule
    assert got == [("a", "norm", "AnomalyTurbulence"), ("b", "norm", "AnomalyNan")]
    assert found[0].history == 10.0 and found[0].value == 20.0 and "x2 the history mean" in found[0].console()
    # running mean 0.99*10 + 0.01*20 = 10.1; NaN kept out of b's mean
    assert det.avg[det.index["a/rank0/post_grad"], 1] == pytest.approx(10.1)
    assert det.check(tags, [[15.0, 15.0, 1.0], [1.0, 1.4, 1.0]], 2) == []
    assert [a.op for a in det.check(tags, [[1.0, 1.0, 1.0], [1.0, 1.6, 1.0]], 3)] == ["norm"]


def test_anomaly_sorter(tmp_path, capsys):
    """python -m msprobe.core.monitor.anomaly_processor: earliest first, by step, micro step, stage (unknown kinds
    first), vpp/pp (ascending forward, descending otherwise), call id (order checked against 8.3.3's sorter on a
    583-entry anomaly.json of the 2-layer model: identical)."""
    from msprobe.core.monitor.anomaly_processor import main

    def rec(tag, step, call, vpp=0, pp=0, rank=0):
        return {"rank": rank, "step": step, "micro_step": 0, "pp_stage": pp, "vpp_stage": vpp, "call_id": call,
                "tag_name": tag, "message": f"m {tag} {step}", "group_mates": [0, 1]}
    r0 = [rec("0:a.output:0/rank0/actv", 2, 5), rec("0:w/rank0/post_grad", 1, -1), rec("0:w/rank0/exp_avg", 1, -1),
          rec("0:a.input:0/rank0/actv", 1, 3), rec("0:w/rank0/param_origin", 1, -1)]
    r1 = [rec("1:a.output:0/rank1/actv", 1, 1, vpp=1, rank=1), rec("1:w/rank1/post_grad", 1, -1, vpp=1, rank=1)]
    for r, recs in ((0, r0), (1, r1)):
        (tmp_path / f"rank{r}").mkdir()
        (tmp_path / f"rank{r}" / "anomaly.json").write_text(
            json.dumps({f"{a['tag_name']}_step_{a['step']}_call_{a['call_id']}": a for a in recs}))
    assert main(["-d", str(tmp_path), "-k", "6"]) == 0
    got = [(a["tag_name"], a["step"]) for a in json.loads((tmp_path / "anomaly_analyse.json").read_text()).values()]
    assert got == [("0:w/rank0/param_origin", 1), ("0:a.input:0/rank0/actv", 1), ("1:a.output:0/rank1/actv", 1),
                   ("1:w/rank1/post_grad", 1), ("0:w/rank0/post_grad", 1), ("0:w/rank0/exp_avg", 1)]
    assert main(["-d", str(tmp_path), "-s", "[2]"]) == 0
    got = list(json.loads((tmp_path / "anomaly_analyse.json").read_text()))
    assert got == ["0:a.output:0/rank0/actv_step_2_call_5"]
    capsys.readouterr()
    assert main(["-d", str(tmp_path), "-s", "x"]) == 2
    assert main(["-d", str(tmp_path), "-k", "0"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err == ["msprobe: error: The step list must be a resolvable list type.",
                   "msprobe: error: The top k number must be greater than 0."]


# ------------------------------------------------------------------------------------------------ 2 ranks
WORLD = 2


def _worker(rank, port, out):
    import torch.distributed as dist
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=WORLD)
    torch.set_num_threads(1)
    if rank == 1:        # this rank's tool fails: it logs and trains on
        from msprobe.pytorch.monitor import stats

        def boom(self, t):
            raise RuntimeError("rank 1 statistics failure")
        stats.StatPlan.__call__ = boom
    cfg = {"targets": {}, "wg_distribution": True, "xy_distribution": True, "ops": ["norm", "max"],
           "format": "csv", "step_count_per_record": 10, "cc_distribution": {"enable": True, "cc_pre_hook": True}}
    path = os.path.join(out, f"cfg{rank}.json")
    with open(path, "w") as f:
        json.dump(cfg, f)
    os.environ["MONITOR_OUTPUT_DIR"] = os.path.join(out, "monitor_output")
    from msprobe.pytorch import TrainerMon
    torch.manual_seed(0)
    model = TinyTransformer()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    mon = TrainerMon(path, params_have_main_grad=False)
    mon.set_monitor(model, optimizer=opt, dp_group=dist.group.WORLD)
    gen = torch.Generator().manual_seed(10 + rank)
    losses, cc = [], {}
    for step in range(4):
        x = torch.randint(0, 100, (4, 8), generator=gen)
        loss = F.cross_entropy(model(x).reshape(-1, 100), x.reshape(-1))
        loss.backward()
        pre = [p.grad.norm().item() for p in model.parameters()]
        work = dist.all_reduce(model.pos.grad, async_op=True)        # an async call: recorded at wait()
        work.wait()
        post = [model.pos.grad.norm().item()]
        for p in list(model.parameters())[1:]:
            dist.all_reduce(p.grad)
            post.append(p.grad.norm().item())
        for p in model.parameters():
            p.grad.div_(WORLD)
        cc[step] = {"pre": sum(pre), "post": sum(post)}
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
    w = model.head.weight.detach().clone()
    dist.all_reduce(w)
    with open(os.path.join(out, f"result{rank}.json"), "w") as f:
        json.dump({"losses": losses, "rank_dir": mon.rank_dir, "cc": cc,
                   "same_weights": bool(torch.allclose(w / 2, model.head.weight))}, f)
    # leave together: a rank that tears gloo down while its peer is still in a call aborted once in CI
    # ("terminate called without an active exception" from rank 0, after its result was written)
    del work
    dist.barrier()
    dist.destroy_process_group()


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_two_ranks_on_gloo(tmp_path):
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env["OMP_NUM_THREADS"] = "1"
    port = _free_port()
    procs = [subprocess.Popen([sys.executable, str(Path(__file__).resolve()), str(r), str(port), str(tmp_path)],
                              cwd=str(tmp_path), env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for r in range(WORLD)]
    logs = []
    for p in procs:
        try:
            logs.append(p.communicate(timeout=120)[0])
        except subprocess.TimeoutExpired:
            p.kill()
            logs.append(p.communicate()[0])
    assert all(p.returncode == 0 for p in procs), "\n".join(x[-3000:] for x in logs)
    res = [json.load(open(tmp_path / f"result{r}.json")) for r in range(WORLD)]
    assert all(r["same_weights"] for r in res)                 # training went on in step on both ranks
    assert "rank 1 statistics failure" in logs[1] and "training continues" in logs[1]
    d0, d1 = res[0]["rank_dir"], res[1]["rank_dir"]
    assert "-rank0-" in os.path.basename(d0) and "-rank1-" in os.path.basename(d1)
    _, rows = read_csv(os.path.join(d0, "grad_reduced_0-9.csv"))
    assert sorted({int(r[2]) for r in rows}) == [0, 1, 2, 3] and any(r[1] == "head.weight" for r in rows)
    # communication calls (cc_distribution, cc_pre_hook): per step, the sum of the norms of the all_reduce'd
    # tensors before / after the calls (the reference's aggregation), the async call included
    head, rows = read_csv(os.path.join(d0, "other_0-9.csv"))
    by = {(r[1], int(r[2])): float(r[3]) for r in rows}
    for step in range(4):
        want = res[0]["cc"][str(step)]
        assert by[("all_reduce.pre_0", step)] == pytest.approx(want["pre"], rel=1e-5)
        assert by[("all_reduce.post_0", step)] == pytest.approx(want["post"], rel=1e-5)
    # rank 1's gradients are dp duplicates (not reported); its failed statistics leave no rows, only the log
    assert not glob.glob(os.path.join(d1, "grad_*.csv"))
    assert os.path.isfile(os.path.join(d1, "dump_error_info.log"))


def make_figure(png):
    """docs/img/monitor_grad_norm.png: the tests' spike run (post_grad norms from its TensorBoard events) with
    the alert marked.  ``python tests/test_monitor.py --figure docs/img/monitor_grad_norm.png``"""
    import tempfile

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from tensorboard.backend.event_processing import event_accumulator as ea
    with tempfile.TemporaryDirectory() as tmp:
        _, _, lines, rank_dir = train(tmp, wg_cfg("tensorboard"), spike_step=SPIKE_STEP)
        acc = ea.EventAccumulator(rank_dir, size_guidance={ea.SCALARS: 0})
        acc.Reload()
        fig, ax = plt.subplots(figsize=(7, 3.4), dpi=90)
        peak = 1.0
        for name in ("blocks.0.fc1.weight", "blocks.1.attn.qkv.weight", SPIKE_PARAM, "head.weight"):
            ev = acc.Scalars(f"0:{name}/rank0/post_grad_norm")
            ax.plot([e.step for e in ev], [e.value for e in ev], label=name, lw=1.4)
            if name == SPIKE_PARAM:
                peak = ev[SPIKE_STEP].value
        alerts = [x for x in lines if "reports anomaly signal" in x and "post_grad" in x]
        ax.axvline(SPIKE_STEP, color="red", ls=":", lw=1)
        ax.annotate(f"alert at step {SPIKE_STEP}: {SPIKE_PARAM}\npost_grad norm "
                    f"{alerts[0].split('(x')[1].split(' ')[0] if alerts else '?'} x its history mean",
                    xy=(SPIKE_STEP, peak), xytext=(SPIKE_STEP - 27, 3), color="red", fontsize=8,
                    arrowprops=dict(arrowstyle="->", color="red"))
        ax.set_yscale("log")
        ax.set_xlabel("step")
        ax.set_ylabel("gradient L2 norm (post_grad_norm)")
        ax.set_title("TrainerMon, format tensorboard: a x100 gradient spike injected at step 30", fontsize=9)
        ax.legend(fontsize=7, loc="upper right")
        fig.tight_layout()
        fig.savefig(png)
    print(png)
    print("\n".join(x for x in lines if "reports anomaly signal" in x))


if __name__ == "__main__":
    if sys.argv[1] == "--figure":
        make_figure(sys.argv[2])
    else:
        _worker(int(sys.argv[1]), int(sys.argv[2]), sys.argv[3])
