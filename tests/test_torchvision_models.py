"""The PyTorch dump on torchvision models (code nobody here wrote): small random-init ResNet (BasicBlock x
[1,1,1,1]), MobileNetV3-small (in-place Hardswish / ReLU, squeeze-excitation), a 2-layer VisionTransformer,
ConvNeXt and EfficientNet with stochastic depth, and a Swin transformer with shifted windows
(tests/tvmodels.py; ``weights=None``, nothing downloaded), one SGD training step each, two for ResNet
(BatchNorm's running statistics and an updated model in the second).

- records against torch's own values, from an identical run without the tool (forward pre-hooks and hooks that
  clone every leaf module's inputs and outputs): every leaf module's forward record of both steps, with its
  nested ``Sequential`` index in the name, holds the statistics (or, for md5, the CRC-32; for the tensor task,
  the saved tensor) of what the module got and returned.  An in-place ``ReLU`` / ``Hardswish`` records the value
  it overwrote as its input (as the reference: inputs are taken before the call), and the module before it
  (BatchNorm) its own output, not the activated one;
- BatchNorm: ``Functional.batch_norm`` gets the running statistics as they were before the step's update
  (which it makes), the module record its weight and bias, ``parameters_grad`` equals ``param.grad``;
- backward records equal autograd: every module's ``input`` (gradient of its outputs) and ``output`` (its share
  of its inputs' gradient) against a twin of the model whose activations are not in-place (the same numbers);
  before the fixes a module returning a tensor an in-place op had overwritten (``nn.ReLU(inplace=True)``, and every
  block ending in one) recorded the gradient of the overwritten value, or ``null``, and a module whose input is a
  view an in-place op inside overwrote (EfficientNet's ``Dropout(inplace=True)`` on ``torch.flatten(x, 1)``)
  recorded ``null`` for that input;
- two identical runs compare all green; bf16 autocast against fp32 names no red.
"""
from __future__ import annotations

import json
import math
import os
import re
import zlib

import pytest

torch = pytest.importorskip("torch")

from tvmodels import build, torchvision_missing  # noqa: E402

_SKIP = torchvision_missing()
pytestmark = pytest.mark.skipif(_SKIP is not None, reason=_SKIP or "")

from real_models.run import autograd_truth, compare  # noqa: E402

STEPS = 2
#: two SGD steps where the second step's records matter (BatchNorm running statistics, an updated model)
ARCH_STEPS = {"resnet": 2}


def _leaves(model):
    return [(n, m) for n, m in model.named_modules() if n and not any(True for _ in m.children())]


def _train(case, steps=STEPS, debugger=None, dtype="fp32", capture=None):
    """``steps`` SGD steps; ``capture``: {(step, module name, call): (inputs, outputs)} cloned around each leaf
    module (inputs in the pre-hook, before an in-place module overwrites them)."""
    opt = torch.optim.SGD(case.model.parameters(), lr=0.1)
    handles, calls = [], {}
    state = {"step": 0}
    if capture is not None:
        for name, mod in _leaves(case.model):
            def pre(m, args, name=name):
                k = (state["step"], name, calls.get((state["step"], name), 0))
                capture[k] = ([a.detach().clone() for a in args if isinstance(a, torch.Tensor)], None)

            def post(m, args, out, name=name):
                n = calls.get((state["step"], name), 0)
                k = (state["step"], name, n)
                outs = [out] if isinstance(out, torch.Tensor) else [o for o in out if isinstance(o, torch.Tensor)]
                capture[k] = (capture[k][0], [o.detach().clone() for o in outs])
                calls[(state["step"], name)] = n + 1
            handles += [mod.register_forward_pre_hook(pre), mod.register_forward_hook(post)]
    losses = []
    try:
        for s in range(steps):
            state["step"] = s
            if debugger is not None:
                debugger.start(model=case.model)
            ctx = torch.autocast("cpu", dtype=torch.bfloat16) if dtype == "bf16" else torch.autocast("cpu",
                                                                                                   enabled=False)
            with ctx:
                loss = case.loss(case.model(**case.inputs()))
            opt.zero_grad()
            loss.backward()
            if debugger is not None:
                debugger.stop()
            opt.step()
            if debugger is not None:
                debugger.step()
            losses.append(loss.detach())
    finally:
        for h in handles:
            h.remove()
    return losses


def _dump(arch, root, task="statistics", level="mix", summary="statistics", dtype="fp32", steps=None):
    from msprobe.pytorch import PrecisionDebugger

    os.makedirs(root, exist_ok=True)
    cfg = {"task": task, "dump_path": os.path.join(root, "dump"), "rank": [], "step": [], "level": level,
           "async_dump": False}
    if task == "statistics":
        cfg["statistics"] = {"scope": [], "list": [], "data_mode": ["all"], "summary_mode": summary}
    path = os.path.join(root, "config.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(cfg, f)
    steps = steps or ARCH_STEPS.get(arch, 1)
    PrecisionDebugger._reset_for_tests()
    try:
        case = build(arch)
        losses = _train(case, steps, PrecisionDebugger(config_path=path), dtype)
    finally:
        PrecisionDebugger._reset_for_tests()
    return losses, [os.path.join(root, "dump", f"step{s}", "rank") for s in range(steps)]


def _data(rank_dir):
    with open(os.path.join(rank_dir, "dump.json"), encoding="utf-8") as f:
        return json.load(f)["data"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    base = tmp_path_factory.mktemp("tv")
    cache = {}

    def get(arch, *args, copy="a", **kw):
        key = (arch, args, tuple(sorted(kw.items())), copy)
        if key not in cache:
            cache[key] = _dump(arch, str(base / f"{arch}_{len(cache)}"), *args, **kw)
        return cache[key]
    get.base = base
    return get


@pytest.fixture(scope="module")
def truth():
    cache = {}

    def get(arch):
        if arch not in cache:
            cap = {}
            case = build(arch)
            losses = _train(case, ARCH_STEPS.get(arch, 1), capture=cap)
            cache[arch] = (losses, cap, case.model)
        return cache[arch]
    return get


def _stats64(t):
    t = t.detach().double()
    return {"Max": t.max().item(), "Min": t.min().item(), "Mean": t.mean().item(), "Norm": t.norm().item()}


def _close(rec, t, problems, where, rel=3e-6):
    if not isinstance(rec, dict) or rec.get("shape") != list(t.shape):
        problems.append((where, "shape/record", rec if not isinstance(rec, dict) else rec.get("shape"),
                         list(t.shape)))
        return
    want = _stats64(t)
    scale = max(abs(want["Max"]), abs(want["Min"]), 1e-30)
    for key, value in want.items():
        ref = want["Norm"] if key == "Norm" else scale
        got = rec.get(key)
        if got is None or not math.isclose(got, value, rel_tol=0, abs_tol=rel * ref + 1e-30):
            problems.append((where, key, got, value))


def _module_records(data, model):
    """{(module name, call n): record} of the dump's leaf-module forward records."""
    kinds = {n: type(m).__name__ for n, m in _leaves(model)}
    out = {}
    for key, rec in data.items():
        if not key.startswith("Module.") or ".forward." not in key:
            continue
        head, n = key.rsplit(".forward.", 1)
        name, cls = head[len("Module."):].rsplit(".", 1)
        if kinds.get(name) == cls:
            out[(name, int(n))] = rec
    return out


def _check_forward(arch, rank_dirs, truth, check):
    _, cap, model = truth(arch)
    problems, n = [], 0
    for step, rd in enumerate(rank_dirs):
        recs = _module_records(_data(rd), model)
        want = {(name, c): v for (s, name, c), v in cap.items() if s == step}
        assert set(recs) == set(want), (step, sorted(set(want) ^ set(recs))[:10])
        for (name, c), (ins, outs) in want.items():
            rec = recs[(name, c)]
            for i, t in enumerate(ins):
                check(rec["input_args"][i], t, problems, f"step{step} {name}.{c}.input.{i}", rd)
                n += 1
            for i, t in enumerate(outs):
                check(rec["output"][i], t, problems, f"step{step} {name}.{c}.output.{i}", rd)
                n += 1
    assert not problems, f"{len(problems)} of {n} differ: {problems[:8]}"
    return n


def _stat_check(rec, t, problems, where, _rd):
    _close(rec, t, problems, where)


@pytest.mark.parametrize("arch", ["resnet", "mobilenet", "vit", "convnext", "efficientnet", "swin"])
def test_statistics_records_equal_torch(runs, truth, arch):
    losses, rank_dirs = runs(arch)
    ref_losses = truth(arch)[0]
    assert all(torch.equal(a, b) for a, b in zip(losses, ref_losses)), "the tool changed training"
    n = _check_forward(arch, rank_dirs, truth, _stat_check)
    assert n > 30
    data = _data(rank_dirs[0])
    # nested Sequential indices, repeated calls of one module, the record of every API under it
    names = set(data)
    expect = {"resnet": ["Module.layer1.0.relu.ReLU.forward.1", "Module.layer2.0.downsample.1.BatchNorm2d.forward.0",
                         "Module.layer1.0.BasicBlock.backward.0"],
              "mobilenet": ["Module.features.0.2.Hardswish.forward.0",
                            "Module.features.1.block.0.Conv2dNormActivation.forward.0",
                            "Module.features.1.block.1.SqueezeExcitation.forward.0"],
              "vit": ["Module.encoder.layers.encoder_layer_1.self_attention.MultiheadAttention.forward.0"],
              "convnext": ["Module.features.1.0.stochastic_depth.StochasticDepth.forward.0"],
              "efficientnet": ["Module.features.2.1.stochastic_depth.StochasticDepth.forward.0"],
              "swin": ["Module.features.1.1.attn.ShiftedWindowAttention.forward.0"]}[arch]
    assert not [e for e in expect if e not in names], [e for e in expect if e not in names]


@pytest.mark.parametrize("arch", ["mobilenet", "swin"])
def test_level_l0_module_records_equal_torch(runs, truth, arch):
    _, rank_dirs = runs(arch, "statistics", "L0")
    assert _check_forward(arch, rank_dirs, truth, _stat_check) > 60
    data = _data(rank_dirs[0])
    assert not [k for k in data if not k.startswith("Module.")]          # L0: modules only


@pytest.mark.parametrize("level", ["mix", "L1"])
def test_inplace_activation_records_the_overwritten_value(runs, level):
    _, rank_dirs = runs("resnet", "statistics", level)
    d = _data(rank_dirs[0])
    bn_out = d["Functional.batch_norm.0.forward"]["output"][0]
    relu = d["Functional.relu.0.forward"]
    assert relu["input_kwargs"]["inplace"]["value"] is True
    assert relu["input_args"][0]["Min"] == bn_out["Min"] < 0          # the value before the ReLU
    assert relu["output"][0]["Min"] == 0.0
    if level == "mix":
        assert d["Module.relu.ReLU.forward.0"]["input_args"][0]["Min"] == bn_out["Min"]
        assert d["Module.bn1.BatchNorm2d.forward.0"]["output"][0]["Min"] == bn_out["Min"]
    # `out += identity` (Tensor.__iadd__) records the value it overwrote, and the ReLU after it the sum
    iadd = d["Tensor.__iadd__.0.forward"]
    assert iadd["output"][0]["Norm"] != iadd["input_args"][0]["Norm"]
    assert d["Functional.relu.2.forward"]["input_args"][0] == iadd["output"][0]


def test_batch_norm_running_stats_and_parameters(runs):
    _, rank_dirs = runs("resnet")
    plain = build("resnet")
    bn = plain.model.bn1
    before = [(bn.running_mean.clone(), bn.running_var.clone())]
    _train(plain, steps=1)
    before.append((bn.running_mean.clone(), bn.running_var.clone()))
    for step, rd in enumerate(rank_dirs):
        d = _data(rd)
        rec = d["Functional.batch_norm.0.forward"]
        problems = []
        _close(rec["input_args"][1], before[step][0], problems, "running_mean")
        _close(rec["input_args"][2], before[step][1], problems, "running_var")
        assert not problems, (step, problems)
        assert [a.get("value") for a in rec["input_args"][5:]] == [True, 0.1, 1e-5]
        assert set(d["Module.bn1.BatchNorm2d.forward.0"]["parameters"]) == {"weight", "bias"}
        assert d["Tensor.add_.0.forward"]["output"][0]["Max"] == step + 1      # num_batches_tracked += 1
    # parameter gradients of the second step (after one SGD update) equal torch's
    d = _data(rank_dirs[1])
    problems = []
    ref = build("resnet")
    _train(ref, steps=2)
    for mod_name, mod in ref.model.named_modules():
        if isinstance(mod, torch.nn.BatchNorm2d) or isinstance(mod, torch.nn.Conv2d):
            rec = d[f"Module.{mod_name}.{type(mod).__name__}.parameters_grad"]
            for pn, p in mod.named_parameters(recurse=False):
                _close(rec[pn][0] if isinstance(rec[pn], list) else rec[pn], p.grad, problems,
                       f"{mod_name}.{pn}", rel=2e-5)
    assert not problems, problems[:6]


def _twin_truth(arch):
    """Backward truth from a twin whose activations are not in-place (the same numbers, and tensor hooks that
    see every value): {record prefix: {"input": [...], "output": [...]}}."""
    case = build(arch)
    for m in case.model.modules():
        if hasattr(m, "inplace"):
            m.inplace = False
    t, _ = autograd_truth(case, lambda n, m: True)
    return t


@pytest.mark.parametrize("arch", ["resnet", "mobilenet", "efficientnet"])
def test_module_backward_records_after_inplace_ops_equal_autograd(runs, arch):
    _, rank_dirs = runs(arch)
    data = _data(rank_dirs[0])
    problems, checked, inplace_checked = [], 0, 0
    inplace_kinds = ("ReLU", "Hardswish", "SiLU", "Conv2dNormActivation", "BasicBlock")
    for prefix, t in _twin_truth(arch).items():
        rec = data.get(f"{prefix}.backward.0")
        if not t["input"] or rec is None:
            continue
        for side in ("input", "output"):
            if len(rec[side]) != len(t[side]):
                problems.append((prefix, side, "entries", len(rec[side]), len(t[side])))
                continue
            for i, (r, g) in enumerate(zip(rec[side], t[side])):
                if g is None:
                    continue      # a module output an in-place `+=` overwrites: the twin's view hook never fires
                _close(r, g, problems, f"{prefix}.backward.0.{side}.{i}", rel=2e-5)
                checked += 1
                inplace_checked += prefix.endswith(inplace_kinds)
    assert checked > 40 and inplace_checked >= 8, (checked, inplace_checked)
    if arch == "efficientnet":     # Dropout(inplace=True) on torch.flatten(x, 1), a view: re-based by autograd
        assert data["Module.classifier.0.Dropout.backward.0"]["output"][0] is not None
    assert not problems, f"{len(problems)} of {checked}: {problems[:8]}"


def test_md5_records_are_the_crc_of_torch_values(runs, truth):
    _, rank_dirs = runs("mobilenet", "statistics", "mix", "md5")

    def check(rec, t, problems, where, _rd):
        want = "%08x" % (zlib.crc32(t.contiguous().numpy().tobytes()) & 0xFFFFFFFF)
        if not isinstance(rec, dict) or rec.get("md5") != want:
            problems.append((where, rec.get("md5") if isinstance(rec, dict) else rec, want))

    assert _check_forward("mobilenet", rank_dirs, truth, check) > 100


@pytest.mark.parametrize("arch", ["vit", "mobilenet"])
def test_tensor_records_hold_torch_values(runs, truth, arch):
    _, rank_dirs = runs(arch, "tensor", "mix")

    def check(rec, t, problems, where, rd):
        f = os.path.join(rd, "dump_tensor_data", rec.get("data_name", "?")) if isinstance(rec, dict) else "?"
        if not os.path.isfile(f):
            problems.append((where, "no file", f))
            return
        saved = torch.load(f)
        if not torch.equal(saved, t):
            problems.append((where, "values differ"))

    assert _check_forward(arch, rank_dirs, truth, check) > 20


@pytest.mark.parametrize("arch,task,level,summary", [("convnext", "statistics", "mix", "statistics"),
                                                     ("swin", "statistics", "L1", "md5"),
                                                     ("vit", "tensor", "L0", "statistics")])
def test_identical_runs_compare_all_green(runs, arch, task, level, summary):
    _, a = runs(arch, task, level, summary, copy="a")
    _, b = runs(arch, task, level, summary, copy="b")
    for step in range(len(a)):
        df = compare(a[step], b[step], str(runs.base / f"cmp_{arch}_{task}_{level}_{summary}_{step}"))
        assert len(df) > 20
        assert not ((df["Bench Name"] == "N/A") | (df["NPU Name"] == "N/A")).any()
        col = "Accuracy Reached or Not" if task == "tensor" else "Result"
        # torch.empty returns uninitialised memory (stochastic depth: ``torch.empty(...).bernoulli_(p)``): its
        # output, and that same tensor as the input of the bernoulli_ that fills it, differ between runs by nature
        garbage = df["NPU Name"].str.contains(r"^(?:Torch\.empty\.\d+\.forward\.output\.0|"
                                              r"Tensor\.bernoulli_\.\d+\.forward\.input\.0)$")
        bad = df[~garbage & ~df[col].str.lower().isin(["pass", "yes", "", "n/a", "none"])]
        assert bad.empty, bad[["NPU Name", col]].head(10).to_dict("records")


@pytest.mark.parametrize("arch", ["vit", "swin"])
def test_bf16_autocast_against_fp32_names_no_red(runs, arch, capsys):
    from msprobe.cli.main import main

    _, t = runs(arch, dtype="bf16")
    _, g = runs(arch)
    capsys.readouterr()
    rc = main(["compare", "-tp", t[0], "-gp", g[0], "-o", str(runs.base / f"bf16_{arch}"), "--csv"])
    text = capsys.readouterr().out
    assert rc in (0, 1), rc
    m = re.search(r"red: (\d+)\s+yellow: (\d+)", text)
    assert m, text[-2000:]
    assert int(m.group(1)) == 0, text[-3000:]
    assert "first failing row" not in text, text[-3000:]
