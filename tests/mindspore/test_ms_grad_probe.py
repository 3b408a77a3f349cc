"""grad_probe with real MindSpore 2.10 PyNative on CPU (runs in .venv-ms; see tests/test_mindspore_dump.py).

A 2-layer transformer trained 10 steps (MindSpore PyNative on CPU is slow: ~0.5 s a step here) through ``PrecisionDebugger(cfg).monitor(optimizer)``: the files are in
the reference's layout and format (the same as PyTorch's) with values equal to the gradients the optimizer
received; a run whose learning rate is tripled from step 4 on is told apart from an identical run by
GradComparator at step 5; training is unchanged by the tool; a bad param_list is one line.
"""
import json
import os
import sys
import zlib

import numpy as np
import pytest

from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT))


from ms_skip import requires_mindspore  # noqa: E402 (this folder is on sys.path)

pytestmark = requires_mindspore


def _ms():
    import mindspore as ms
    ms.set_context(mode=ms.PYNATIVE_MODE, device_target="CPU")
    return ms


def _debugger():
    from msprobe.mindspore import PrecisionDebugger
    return PrecisionDebugger


def build_net(ms):
    from mindspore import nn

    class Tiny(nn.Cell):
        def __init__(self, vocab=32, d=16):
            super().__init__()
            self.emb = nn.Embedding(vocab, d)
            layer = nn.TransformerEncoderLayer(d, 2, 32, dropout=0.0, batch_first=True)
            self.enc = nn.TransformerEncoder(layer, 2)
            self.head = nn.Dense(d, vocab)

        def construct(self, x):
            return self.head(self.enc(self.emb(x)))

    return Tiny()


def train(tmp, name, steps=10, lr_change=None, section=None, with_tool=True, capture=None):
    ms = _ms()
    from mindspore import nn, ops
    PD = _debugger()
    PD._reset_for_tests()
    dump = tmp / name
    cfg = tmp / f"{name}.json"
    cfg.write_text(json.dumps({"task": "grad_probe", "dump_path": str(dump),
                               "grad_probe": section or {"grad_level": "L1"}}))
    ms.set_seed(0)
    np.random.seed(0)
    net = build_net(ms)
    lrs = [1e-2] * steps            # a dynamic learning rate: lr_change=(step, factor) multiplies it from that step on
    if lr_change is not None:
        lrs[lr_change[0]:] = [1e-2 * lr_change[1]] * (steps - lr_change[0])
    opt = nn.Adam(net.trainable_params(), learning_rate=lrs)
    if with_tool:
        PD(str(cfg)).monitor(opt)

    def loss_fn(x, y):
        return ops.cross_entropy(net(x).reshape(-1, 32), y.reshape(-1))

    grad_fn = ms.value_and_grad(loss_fn, None, opt.parameters)
    rng = np.random.RandomState(1)
    names = [p.name for p in opt.parameters]
    for i in range(steps):
        xs = rng.randint(0, 32, (4, 8)).astype(np.int32)
        x = ms.Tensor(xs)
        y = ms.Tensor(np.roll(xs, 1, axis=1))
        _, grads = grad_fn(x, y)
        if capture is not None:
            capture[i] = {n: g.asnumpy().copy() for n, g in zip(names, grads)}
        opt(grads)
    PD._reset_for_tests()
    return dump, {p.name: p.asnumpy().copy() for p in net.trainable_params()}, names


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("ms_gp")
    capture = {}
    a, weights_a, names = train(tmp, "a", capture=capture)
    b, _, _ = train(tmp, "b", steps=5)          # identical to a's first 5 steps
    c, _, _ = train(tmp, "c", lr_change=(4, 3.0))
    return dict(tmp=tmp, a=a, b=b, c=c, capture=capture, weights=weights_a, names=names)


def test_files_in_reference_layout(runs):
    from msprobe.core.grad_probe import stats
    rank = runs["a"] / "rank0"
    assert sorted(os.listdir(rank)) == sorted([f"grad_summary_{s}.csv" for s in range(10)] +
                                              [f"step{s}" for s in range(10)])
    raw = (rank / "grad_summary_7.csv").read_bytes()
    assert raw.startswith(b"\xef\xbb\xbfparam_name,max,min,norm,shape\r\n")
    rows = stats.read_summary(str(rank / "grad_summary_7.csv"))
    assert [r[0] for r in rows[1:]] == runs["names"]
    for row in rows[1:]:
        g = runs["capture"][7][row[0]]
        assert float(row[1]) == pytest.approx(float(g.max()), rel=1e-6, abs=1e-12)
        assert float(row[2]) == pytest.approx(float(g.min()), rel=1e-6, abs=1e-12)
        assert float(row[3]) == pytest.approx(float(np.linalg.norm(g.astype(np.float64))), rel=1e-5)
        assert row[4] == str(list(g.shape))
        assert np.array_equal(np.load(rank / "step7" / f"{row[0]}.npy"), g > 0)


def test_comparator_names_the_perturbed_step(runs, tmp_path):
    from msprobe.core.grad_probe.grad_compare import GradComparator
    clean = GradComparator.compare_distributed(str(runs["a"]), str(runs["b"]), str(tmp_path / "ab"), plots=False)[0]
    assert clean.divergence is None and clean.steps == list(range(5))
    res = GradComparator.compare_distributed(str(runs["a"]), str(runs["c"]), str(tmp_path / "ac"), plots=False)[0]
    assert res.divergence is not None and res.divergence.step == 5
    assert all(v[:5] == [1.0] * 5 for v in res.similarities.values())


def test_training_unchanged_and_L0_L2(runs, tmp_path):
    _, plain, _ = train(tmp_path, "plain", steps=3, with_tool=False)
    _, probed, names = train(tmp_path, "l2", steps=3, section={"grad_level": "L2", "bounds": [-0.01, 0, 0.01]})
    for n in plain:
        assert np.array_equal(plain[n], probed[n]), n
    from msprobe.core.grad_probe import stats
    rows = stats.read_summary(str(tmp_path / "l2" / "rank0" / "grad_summary_2.csv"))
    assert rows[0][1:6] == ["(-inf, -0.01]", "(-0.01, 0]", "(0, 0.01]", "(0.01, inf)", "=0"]
    assert all(sum(float(v) for v in r[1:5]) == pytest.approx(1.0) for r in rows[1:])
    capture = {}
    train(tmp_path, "l0", steps=1, section={"grad_level": "L0"}, capture=capture)
    rows = stats.read_summary(str(tmp_path / "l0" / "rank0" / "grad_summary_0.csv"))
    assert rows[0] == ["param_name", "MD5", "max", "min", "norm", "shape"]
    for r in rows[1:]:
        assert r[1] == "%08x" % (zlib.crc32(capture[0][r[0]].astype(np.float32).tobytes()) & 0xFFFFFFFF)
    assert not (tmp_path / "l0" / "rank0" / "step0").exists()


def test_bad_param_list_is_one_line(tmp_path):
    ms = _ms()
    from mindspore import nn
    from msprobe.core.errors import MsprobeError
    PD = _debugger()
    PD._reset_for_tests()
    cfg = tmp_path / "c.json"
    cfg.write_text(json.dumps({"task": "grad_probe", "dump_path": str(tmp_path / "d"),
                               "grad_probe": {"param_list": ["nope.weight"]}}))
    net = nn.Dense(2, 2)
    debugger = PD(str(cfg))
    with pytest.raises(MsprobeError) as exc:
        debugger.monitor(nn.SGD(net.trainable_params()))
    assert "\n" not in str(exc.value) and "['nope.weight']" in str(exc.value) and "weight" in str(exc.value)
    with pytest.raises(MsprobeError, match="optimizer"):
        debugger.monitor(object())
    PD._reset_for_tests()
