"""The training monitor with real MindSpore 2.10 PyNative on CPU (runs in .venv-ms; see tests/test_mindspore_dump.py).

A 2-layer MLP trained 10 steps with nn.Adam under ``TrainerMon(...).set_monitor(net, optimizer=opt)``: the CSV
files have the PyTorch monitor's (the reference's) names and headers, the values are those of the tensors
computed directly (gradients the optimizer received, Adam's moment1, the network's input); a gradient
multiplied by 100 at step 6 raises the alert at step 6 and nowhere else, a clean run none; the losses are the
same with and without the monitor (and with a failing hook; within the last float32 bit, by
which two plain MindSpore CPU runs can differ here); a bad config is one line.
"""
import csv
import json
import os
import sys

import numpy as np
import pytest

from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT))


from ms_skip import requires_mindspore  # noqa: E402 (this folder is on sys.path)

pytestmark = requires_mindspore

STEPS = 10
SPIKE = 6
SPIKED = "fc2.weight"
OPS = ["min", "max", "norm", "zeros", "nans", "mean"]
FULL = {"targets": {}, "xy_distribution": True, "wg_distribution": True, "mv_distribution": True,
        "param_distribution": True, "mg_direction": True, "ops": OPS, "step_count_per_record": 5}
ALERT = {"targets": {}, "wg_distribution": True, "ops": ["norm", "min", "max"],
         "alert": {"rules": [{"rule_name": "AnomalyTurbulence", "args": {"threshold": 3.0}}], "dump": True}}


def _ms():
    import mindspore as ms
    ms.set_context(mode=ms.PYNATIVE_MODE, device_target="CPU")
    return ms


def build_net():
    from mindspore import nn

    class MLP(nn.Cell):
        def __init__(self):
            super().__init__()
            self.fc1 = nn.Dense(8, 16)
            self.act = nn.ReLU()
            self.fc2 = nn.Dense(16, 4)

        def construct(self, x):
            return self.fc2(self.act(self.fc1(x)))

    return MLP()


def train(out, config=None, steps=STEPS, spike=None, capture=None, setup=None, make_opt=None, moments="moment1"):
    """Train; returns (losses, monitor).  ``spike``: step at which the gradient of SPIKED is multiplied by 100."""
    ms = _ms()
    from mindspore import nn, ops
    ms.set_seed(0)
    net = build_net()
    opt = (make_opt or (lambda ps: nn.Adam(ps, learning_rate=1e-2)))(net.trainable_params())
    mon = None
    old = os.environ.get("MONITOR_OUTPUT_DIR")
    os.environ["MONITOR_OUTPUT_DIR"] = str(out)
    try:
        if config is not None:
            from msprobe.mindspore import TrainerMon
            cfg = Path(str(out) + ".json")
            cfg.write_text(json.dumps(config))
            mon = TrainerMon(str(cfg), params_have_main_grad=False)
            mon.set_monitor(net, optimizer=opt, grad_acc_steps=1)
            if setup is not None:
                setup(mon)

        def loss_fn(x, y):
            return ops.cross_entropy(net(x), y)

        grad_fn = ms.value_and_grad(loss_fn, None, opt.parameters)
        names = [p.name for p in opt.parameters]
        rng = np.random.RandomState(1)
        losses = []
        for i in range(steps):
            x = ms.Tensor(rng.randn(6, 8).astype(np.float32))
            y = ms.Tensor(rng.randint(0, 4, (6,)).astype(np.int32))
            loss, grads = grad_fn(x, y)
            if spike == i:
                grads = tuple(g * 100 if n == SPIKED else g for n, g in zip(names, grads))
            if capture is not None:
                capture[i] = {"x": x.asnumpy().copy(), "grads": {n: g.asnumpy().copy() for n, g in zip(names, grads)},
                              "m": {n: m.asnumpy().copy() for n, m in zip(names, getattr(opt, moments))}}
            opt(grads)
            losses.append(float(loss.asnumpy()))
    finally:
        if old is None:
            os.environ.pop("MONITOR_OUTPUT_DIR", None)
        else:
            os.environ["MONITOR_OUTPUT_DIR"] = old
    if mon is not None:
        mon.remove()
    return losses, mon


def _rank_dir(out):
    dirs = [d for d in os.listdir(out) if "-rank0-" in d]
    assert len(dirs) == 1, dirs
    return Path(out) / dirs[0]


def _rows(path):
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.reader(f))


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("ms_mon")
    capture = {}
    full, mon_full = train(tmp / "full", FULL, capture=capture)
    plain, _ = train(tmp / "plain")
    clean, _ = train(tmp / "clean", ALERT)
    spike, _ = train(tmp / "spike", ALERT, spike=SPIKE)
    return dict(tmp=tmp, capture=capture, full=full, plain=plain, clean=clean, spike=spike, mon_full=mon_full)


def test_files_and_headers_are_the_pytorch_monitors(runs):
    from msprobe.core.monitor.names import MICRO_PREFIXES
    rank = _rank_dir(runs["tmp"] / "full")
    assert rank.name.split("-rank0-")[0].count("_") == 1 and len(rank.name.split("-rank0-")[1]) == 8
    prefixes = ["actv", "actv_grad", "grad_unreduced", "grad_reduced", "exp_avg", "exp_avg_sq", "param_origin",
                "param_updated", "other"]
    want = {f"{p}_{a}-{a + 4}.csv" for p in prefixes for a in (0, 5)}
    assert set(os.listdir(rank)) == want
    for p in prefixes:
        head = _rows(rank / f"{p}_5-9.csv")[0]
        micro = ["micro_step"] if p in MICRO_PREFIXES else []
        assert head == ["vpp_stage", "name", "step"] + micro + OPS + ["shape", "dtype"], p
    rows = _rows(rank / "actv_0-4.csv")[1:]
    names = {r[1] for r in rows if r[2] == "0"}
    assert names == {".input", ".output", "fc1.input", "fc1.output", "act.input", "act.output", "fc2.input",
                     "fc2.output"}
    # Adam's state is empty before its first update: exp_avg starts at step 1, as the PyTorch monitor's
    assert sorted({int(r[2]) for r in _rows(rank / "exp_avg_0-4.csv")[1:]}) == [1, 2, 3, 4]
    grads = _rows(rank / "grad_reduced_5-9.csv")
    assert [r[1] for r in grads[1:5]] == ["fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"]
    assert grads[1][-2:] == ["[16, 8]", "Float32"]


def _value(path, name, step, op):
    rows = _rows(path)
    col = rows[0].index(op)
    hit = [r for r in rows[1:] if r[1] == name and r[2] == str(step)]
    assert len(hit) == 1, (name, step, hit)
    return float(hit[0][col])


def test_values_are_those_computed_directly(runs):
    rank = _rank_dir(runs["tmp"] / "full")
    cap = runs["capture"]
    for step in (0, 7):
        f = f"_{step // 5 * 5}-{step // 5 * 5 + 4}.csv"
        g = cap[step]["grads"][SPIKED].astype(np.float64)
        assert _value(rank / ("grad_reduced" + f), SPIKED, step, "norm") == pytest.approx(np.linalg.norm(g), rel=1e-5)
        assert _value(rank / ("grad_reduced" + f), SPIKED, step, "min") == pytest.approx(g.min(), rel=1e-5, abs=1e-6)
        assert _value(rank / ("grad_unreduced" + f), SPIKED, step, "norm") == pytest.approx(np.linalg.norm(g),
                                                                                          rel=1e-5)
        x = cap[step]["x"].astype(np.float64)
        assert _value(rank / ("actv" + f), "fc1.input", step, "norm") == pytest.approx(np.linalg.norm(x), rel=1e-5)
        assert _value(rank / ("actv" + f), "fc1.input", step, "mean") == pytest.approx(x.mean(), rel=1e-4, abs=1e-6)
    m = cap[7]["m"]["fc1.weight"].astype(np.float64)          # moment1 read before the step-7 update
    assert _value(rank / "exp_avg_5-9.csv", "fc1.weight", 7, "norm") == pytest.approx(np.linalg.norm(m), rel=1e-5)
    # the gradient of the ReLU's output is the one fc2 passed back as its input gradient
    assert _value(rank / "actv_grad_5-9.csv", "act.output", 7, "norm") == pytest.approx(
        _value(rank / "actv_grad_5-9.csv", "fc2.input", 7, "norm"), rel=1e-6)


def _same(a, b):
    # two plain MindSpore 2.10 CPU runs of this loop in one process differ in the last bit of float32 at times
    # (seen: 1.2e-7 on a loss of 1.35); a monitor that touched a gradient would differ by far more
    np.testing.assert_allclose(a, b, rtol=2e-6, atol=0)


def test_training_unchanged(runs):
    _same(runs["full"], runs["plain"])
    _same(runs["clean"], runs["plain"])
    _same(runs["spike"][:SPIKE + 1], runs["plain"][:SPIKE + 1])
    assert abs(runs["spike"][SPIKE + 1] - runs["plain"][SPIKE + 1]) > 1e-3     # the spike itself does show


def test_alert_at_the_spiked_step_only(runs):
    anomalies = json.loads((runs["tmp"] / "spike" / "anomaly_detected" / "rank0" / "anomaly.json").read_text())
    assert anomalies, "no anomaly recorded"
    assert {v["step"] for v in anomalies.values()} == {SPIKE}
    tags = {v["tag_name"] for v in anomalies.values()}
    assert f"0:{SPIKED}/rank0/post_grad" in tags
    assert all(SPIKED in t for t in tags), tags
    key = f"0:{SPIKED}/rank0/post_grad_step_{SPIKE}_call_-1"
    rec = anomalies[key]
    assert rec["rank"] == 0 and rec["group_mates"] == [0] and rec["vpp_stage"] == 0
    assert rec["message"].startswith(f"Rule AnomalyTurbulence reports anomaly signal in ('0:{SPIKED}/rank0/post_grad'"
                                     f", 'norm') at step {SPIKE}, current value ")
    clean = json.loads((runs["tmp"] / "clean" / "anomaly_detected" / "rank0" / "anomaly.json").read_text())
    assert clean == {}


@pytest.mark.parametrize("which", ["AdamWeightDecay", "experimental.optim.Adam"])
def test_moments_of_other_adams(tmp_path, which):
    from mindspore import nn
    if which == "AdamWeightDecay":
        make, attr = (lambda ps: nn.AdamWeightDecay(ps, learning_rate=1e-2)), "moments1"
    else:
        from mindspore.experimental.optim import Adam
        make, attr = (lambda ps: Adam(ps, lr=1e-2)), "exp_avg"
    capture = {}
    train(tmp_path / "o", {"mv_distribution": True, "ops": ["norm"]}, steps=3, capture=capture, make_opt=make,
          moments=attr)
    path = _rank_dir(tmp_path / "o") / "exp_avg_2-2.csv"
    m = capture[2]["m"]["fc2.weight"].astype(np.float64)
    assert np.linalg.norm(m) > 0
    assert _value(path, "fc2.weight", 2, "norm") == pytest.approx(np.linalg.norm(m), rel=1e-5)


def test_device_ops_path_equals_host_path():
    ms = _ms()
    from msprobe.mindspore.monitor.stats import StatPlan
    ops_list = ["min", "max", "norm", "zeros", "nans", "mean", "id"]
    a = np.random.RandomState(0).randn(5, 7).astype(np.float32)
    a[0, :3] = 0.0
    a[1, 1] = np.nan
    tensors = [ms.Tensor(a), ms.Tensor(a[2:]).astype(ms.float16), ms.Tensor(np.arange(6, dtype=np.int32)),
               ms.Tensor(np.float32(2.5)), ms.Tensor(np.zeros((0, 3), np.float32))]
    dev, host = StatPlan(ops_list, host=False), StatPlan(ops_list, host=True)
    numel = np.array([float(t.size) for t in tensors])
    d = dev.finish(dev.to_host([dev(t) for t in tensors]), numel)
    h = host.finish(host.to_host([host(t) for t in tensors]), numel)
    np.testing.assert_allclose(d, h, rtol=1e-5, equal_nan=True)
    assert h[0].tolist()[3:5] == [3 / 35, 1.0] and np.isnan(h[0][2])     # zeros fraction, nan count, norm of a NaN
    assert h[2].tolist()[:3] == [0.0, 5.0, pytest.approx(np.sqrt(55.0))]
    assert h[3][6] == 2.5 and np.isnan(h[0][6]) and np.isnan(h[4]).all()


def test_step_interval_installs_nothing_off_steps(tmp_path):
    seen = []

    def setup(mon):
        orig = mon._post_step

        def post(cell, inputs, output):
            r = orig(cell, inputs, output)
            seen.append((mon.step, mon._installed, len(mon._handles)))
            return r
        mon._opt_handles[1].remove()
        mon._opt_handles[1] = mon.optimizer.register_forward_hook(post)

    cfg = dict(FULL, step_interval=2, step_count_per_record=10)
    losses, _ = train(tmp_path / "o", cfg, steps=5, setup=setup)
    rank = _rank_dir(tmp_path / "o")
    assert sorted({r[2] for r in _rows(rank / "actv_0-9.csv")[1:]}) == ["0", "2", "4"]
    assert sorted({r[2] for r in _rows(rank / "grad_reduced_0-9.csv")[1:]}) == ["0", "2", "4"]
    # backward hooks removed after step 0 and installed again fire again at steps 2 and 4
    grads = _rows(rank / "actv_grad_0-9.csv")[1:]
    assert sorted({r[2] for r in grads}) == ["0", "2", "4"]
    assert sum(r[1] == "fc2.input" for r in grads) == 3
    # after a step, the next step's hooks: none before an odd step
    assert [(s, inst) for s, inst, _ in seen] == [(1, False), (2, True), (3, False), (4, True), (5, False)]
    assert all(n == 0 for s, inst, n in seen if not inst)
    _same(losses, train(tmp_path / "p", steps=5)[0])


def test_api_format_writes_nothing(tmp_path):
    losses, mon = train(tmp_path / "o", dict(FULL, format="api"), steps=2)
    assert not [d for d in os.listdir(tmp_path / "o") if "-rank0-" in d]
    reduced, unreduced = mon.generate_wgrad_metrics()
    key = f"0:{SPIKED}/rank0/post_grad"
    assert set(reduced) == {f"0:{n}/rank0/post_grad" for n in ("fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias")}
    assert reduced[key]["shape"] == [4, 16] and reduced[key]["dtype"] == "Float32" and reduced[key]["norm"] > 0
    actv, actv_grad = mon.generate_xy_metrics()
    assert "0:fc1.input:0/rank0/actv" in actv and "0:fc2.output:0/rank0/actv_grad" in actv_grad


def test_a_failing_hook_does_not_stop_training(tmp_path):
    class Broken:
        def __init__(self, plan):
            self.ops, self.finish, self.to_host = plan.ops, plan.finish, plan.to_host

        def __call__(self, t):
            raise RuntimeError("statistics broken")

    def setup(mon):
        mon.plan = Broken(mon.plan)

    losses, _ = train(tmp_path / "o", FULL, steps=3, setup=setup)
    _same(losses, train(tmp_path / "p", steps=3)[0])
    log = (_rank_dir(tmp_path / "o") / "dump_error_info.log").read_text()
    assert "statistics broken" in log


@pytest.mark.parametrize("config, words", [
    ({"format": "tensorboard"}, ["format 'tensorboard' is not supported", "csv"]),
    ({"xy_distributon": True}, ["unknown key 'xy_distributon'", "did you mean 'xy_distribution'"]),
    ({"targets": {"fc3": {}}, "xy_distribution": True}, ["targets key 'fc3'", "fc1"]),     # at set_monitor
])
def test_bad_config_is_one_line(tmp_path, config, words):
    from msprobe.core.errors import MsprobeError
    _ms()
    with pytest.raises(MsprobeError) as exc:
        train(tmp_path / "o", config, steps=1)
    msg = str(exc.value)
    assert "\n" not in msg and all(w in msg for w in words), msg


def test_graph_mode_is_refused_in_one_line(tmp_path, monkeypatch):
    ms = _ms()
    from mindspore import nn
    from msprobe.core.errors import MsprobeError
    from msprobe.mindspore import TrainerMon
    cfg = tmp_path / "c.json"
    cfg.write_text(json.dumps({"wg_distribution": True}))
    monkeypatch.setenv("MONITOR_OUTPUT_DIR", str(tmp_path / "o"))
    net = build_net()
    mon = TrainerMon(str(cfg))
    ms.set_context(mode=ms.GRAPH_MODE)
    try:
        with pytest.raises(MsprobeError) as exc:
            mon.set_monitor(net, optimizer=nn.Adam(net.trainable_params()))
    finally:
        ms.set_context(mode=ms.PYNATIVE_MODE)
    assert "\n" not in str(exc.value) and "PyNative" in str(exc.value) and "GRAPH_MODE" in str(exc.value)


def test_keyword_tensors_are_inputs_too(tmp_path, monkeypatch):
    ms = _ms()
    from mindspore import nn, ops
    from msprobe.mindspore import TrainerMon

    class Scale(nn.Cell):
        def construct(self, x, scale=None):
            return x * scale

    class Net(nn.Cell):
        def __init__(self):
            super().__init__()
            self.fc = nn.Dense(3, 2)
            self.scale = Scale()

        def construct(self, x):
            return self.scale(self.fc(x), scale=ms.Tensor(np.full((2,), 3.0, np.float32)))

    net = Net()
    opt = nn.Adam(net.trainable_params())
    cfg = tmp_path / "c.json"
    cfg.write_text(json.dumps({"xy_distribution": True, "forward_only": True, "format": "api", "ops": ["max"]}))
    monkeypatch.setenv("MONITOR_OUTPUT_DIR", str(tmp_path / "o"))
    mon = TrainerMon(str(cfg))
    mon.set_monitor(net, optimizer=opt)
    grad_fn = ms.value_and_grad(lambda x: ops.sum(net(x)), None, opt.parameters)
    _, grads = grad_fn(ms.Tensor(np.ones((4, 3), np.float32)))
    opt(grads)
    actv, _ = mon.generate_xy_metrics()
    assert actv["0:scale.input_1:0/rank0/actv"]["max"] == 3.0 and actv["0:scale.input_1:0/rank0/actv"]["shape"] == [2]
    assert actv["0:scale.input_0:0/rank0/actv"]["shape"] == [4, 2]
    mon.remove()
