"""The backward-record rules of the PyTorch dumper (docs/dump.md, "Backward records"), one hand-made module
per case, each record checked against the true gradients of the same graph from torch.autograd.grad:

- plain op: ``input`` = gradient of the op's output, ``output`` = gradients of its inputs (node order);
- op returning its input (``float()`` on fp32, ``to`` the same dtype, ``type_as``, ``dropout(p=0)``): the
  identity on the gradient reaching the returned tensor (its own shapes), leaf inputs included;
- several outputs, some without gradient: ``null`` for those (``split``), one entry per gradient;
- module with outputs unused outside it: ``null`` for them, also when the module uses them itself (and
  only the outside share when they are used outside too);
- in-place op: its own node (gradient of the result, gradient of the value before the op);
- and the training itself is unchanged: loss and gradients bit-identical with the tool on and off.
"""

from __future__ import annotations

import json
import math

import pytest

torch = pytest.importorskip("torch")
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from msprobe.pytorch import PrecisionDebugger  # noqa: E402

STATS = ("Max", "Min", "Mean", "Norm")


@pytest.fixture(autouse=True)
def _reset_debugger():
    PrecisionDebugger._reset_for_tests()
    yield
    PrecisionDebugger._reset_for_tests()


def dump(tmp_path, model, run, level="mix"):
    """Dump one step of ``run(model)`` (returns the loss); returns (dump.json data, loss)."""
    cfg = {"task": "statistics", "dump_path": str(tmp_path / "dump"), "rank": [], "step": [], "level": level,
           "async_dump": False,
           "statistics": {"scope": [], "list": [], "data_mode": ["all"], "summary_mode": "statistics"}}
    path = tmp_path / f"config_{level}.json"
    path.write_text(json.dumps(cfg))
    dbg = PrecisionDebugger(config_path=str(path))
    dbg.start(model)
    loss = run(model)
    loss.backward()
    dbg.stop()
    dbg.step()
    PrecisionDebugger._reset_for_tests()
    with open(tmp_path / "dump" / "step0" / "rank" / "dump.json", encoding="utf-8") as f:
        return json.load(f)["data"], loss


def assert_grad(rec, g, what):
    """A tensor record's statistics equal those of the true gradient ``g`` (float32 rounding)."""
    assert rec is not None, f"{what}: no record, expected a gradient of shape {list(g.shape)}"
    assert list(rec["shape"]) == list(g.shape), (what, rec["shape"], list(g.shape))
    g = g.detach().double()
    want = {"Max": g.max().item(), "Min": g.min().item(), "Mean": g.mean().item(), "Norm": g.norm().item()}
    scale = max(abs(want["Max"]), abs(want["Min"]), 1e-30)
    for k in STATS:
        assert math.isclose(rec[k], want[k], rel_tol=1e-5, abs_tol=2e-6 * scale), (what, k, rec[k], want[k])


def grads(loss, tensors):
    return torch.autograd.grad(loss, tensors, retain_graph=True, allow_unused=True)


def x_input(*shape, seed=0, requires_grad=False):
    torch.manual_seed(seed)
    return torch.randn(*shape, requires_grad=requires_grad)


# ------------------------------------------------------------------------------------------ plain op
class Plain(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 6)

    def forward(self, x, keep=None):
        h = self.fc(x)
        a = F.gelu(h)
        b = a * h
        if keep is not None:
            keep.update(h=h, a=a, b=b)
        return b.sum()


def test_plain_op_records_its_own_node(tmp_path):
    torch.manual_seed(1)
    model = Plain()
    x = x_input(4, 8)
    data, _ = dump(tmp_path, model, lambda m: m(x))
    keep = {}
    loss = model(x, keep)
    gh, ga, gb = grads(loss, [keep["h"], keep["a"], keep["b"]])
    gelu = data["Functional.gelu.0.backward"]
    assert len(gelu["input"]) == 1 and len(gelu["output"]) == 1
    assert_grad(gelu["input"][0], ga, "gelu input (grad of its output)")
    # the gradient gelu sends back to h: d(gelu)/dh * ga
    with torch.enable_grad():
        hh = keep["h"].detach().requires_grad_()
        (g_through_gelu,) = torch.autograd.grad(F.gelu(hh), hh, ga)
    assert_grad(gelu["output"][0], g_through_gelu, "gelu output (grad of its input)")
    mul = data["Tensor.__mul__.0.backward"]
    assert_grad(mul["input"][0], gb, "mul input")
    assert_grad(mul["output"][0], gb * keep["h"], "mul output.0 (grad of a)")
    assert_grad(mul["output"][1], gb * keep["a"], "mul output.1 (grad of h)")


# ------------------------------------------------------------------------------------------ op returning its input
class ReturnsInput(nn.Module):
    """fp32 ``float()``, ``to(float32)``, ``dropout(p=0)`` in training mode and ``type_as`` of the same type
    all return their input tensor itself; ``residual`` also uses that tensor after the ops."""

    def __init__(self, residual):
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.head = nn.Linear(8, 3)
        self.residual = residual

    def forward(self, x, keep=None):
        h = self.fc(x).view(2, 2, 8)             # a view: its node is the view's, shape [4, 8] upstream
        if keep is not None:
            keep["h"] = h
        f = h.float()
        t = f.to(torch.float32)
        d = F.dropout(t, p=0.0, training=True)
        ta = d.type_as(x)
        assert ta is h
        y = self.head(torch.tanh(ta) * ta)
        if self.residual:
            y = y + 0.5 * self.head(h)           # the same tensor, used again
        return y.pow(2).sum()


@pytest.mark.parametrize("residual", [False, True], ids=["alone", "used-again"])
@pytest.mark.parametrize("level", ["L1", "mix"])
def test_op_returning_its_input_records_the_identity(tmp_path, residual, level):
    """Before: the producer's node ([4, 8] ViewBackward grads, Functional.dropout missing). Now: the identity
    on the gradient of the returned tensor, with the op's shapes; that tensor is the input, so its
    gradient is the whole gradient reaching it (the residual use included)."""
    torch.manual_seed(2)
    model = ReturnsInput(residual)
    x = x_input(4, 8)
    data, _ = dump(tmp_path, model, lambda m: m(x), level)
    keep = {}
    loss = model(x, keep)
    (gh,) = grads(loss, [keep["h"]])
    for name in ("Tensor.float.0.backward", "Tensor.to.0.backward", "Functional.dropout.0.backward",
                 "Tensor.type_as.0.backward"):
        rec = data[name]
        assert len(rec["input"]) == 1 and len(rec["output"]) == 1, name      # no extra output.1
        assert_grad(rec["input"][0], gh, f"{name} input")
        assert_grad(rec["output"][0], gh, f"{name} output")
        assert rec["input"][0]["shape"] == [2, 2, 8]                        # the op's own shapes


class RMSNorm(nn.Module):
    """The transformers RMSNorm: ``to(float32)`` of its input (the identity in an fp32 run)."""

    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.linspace(0.5, 1.5, 8))

    def forward(self, h, keep=None):
        if keep is not None:                     # the truth: the input as the module sees it
            h = keep.setdefault("inside", h.view_as(h))
        dtype = h.dtype
        h = h.to(torch.float32)
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6)
        return self.weight * h.to(dtype)


class Residual(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.norm = RMSNorm()
        self.out = nn.Linear(8, 8)

    def forward(self, x, keep=None):
        h = self.fc(x)
        if keep is not None:
            keep["h"] = h
        h = h + self.out(self.norm(h, keep))     # the norm's input is the residual too
        return h.pow(2).sum()


@pytest.mark.parametrize("level", ["L1", "mix"])
def test_op_returning_a_module_input_records_that_modules_share(tmp_path, level):
    """At mix, ``to`` on an input of the module running it records that module's share of the input's
    gradient (what flows through the op; the residual use outside the module is not part of it), the
    value the reference's module hooks give. At L1 (no modules) it is the whole gradient of the tensor."""
    torch.manual_seed(9)
    model = Residual()
    x = x_input(2, 3, 8)
    data, _ = dump(tmp_path, model, lambda m: m(x), level)
    keep = {}
    loss = model(x, keep)
    g_inside, g_h = grads(loss, [keep["inside"], keep["h"]])
    rec = data["Tensor.to.0.backward"]
    want = g_inside if level == "mix" else g_h
    assert_grad(rec["input"][0], want, "to input")
    assert_grad(rec["output"][0], want, "to output")
    if level == "mix":
        assert_grad(data["Module.norm.RMSNorm.backward.0"]["output"][0], g_inside, "norm output")


def test_reference_rule_for_ops_returning_their_input(tmp_path):
    """``Hooks.identity_records = False`` (for a reference-exact capture mode): the reference's record, the
    node of the op that produced the tensor (here the view of F.linear's 2-D result: its [4, 8] gradient)."""
    torch.manual_seed(2)
    model = ReturnsInput(False)
    x = x_input(4, 8)
    cfg = {"task": "statistics", "dump_path": str(tmp_path / "dump"), "rank": [], "step": [], "level": "L1",
           "async_dump": False}
    (tmp_path / "c.json").write_text(json.dumps(cfg))
    dbg = PrecisionDebugger(config_path=str(tmp_path / "c.json"))
    PrecisionDebugger._get().service.hooks.identity_records = False
    dbg.start(model)
    model(x).backward()
    dbg.stop()
    dbg.step()
    with open(tmp_path / "dump" / "step0" / "rank" / "dump.json", encoding="utf-8") as f:
        data = json.load(f)["data"]
    for name in ("Tensor.float.0.backward", "Tensor.to.0.backward", "Functional.dropout.0.backward"):
        assert data[name]["input"][0]["shape"] == [2, 2, 8] and data[name]["output"][0]["shape"] == [4, 8]


def test_op_returning_a_leaf_input_records_the_gradient_reaching_it(tmp_path):
    class LeafFloat(nn.Module):
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(torch.randn(5, 3))

        def forward(self, x):
            return (x @ self.w.float()).pow(2).sum()

    torch.manual_seed(3)
    model = LeafFloat()
    x = x_input(2, 5)
    data, _ = dump(tmp_path, model, lambda m: m(x))
    assert isinstance(model.w, nn.Parameter)
    (gw,) = grads(model(x), [model.w])
    rec = data["Tensor.float.0.backward"]
    assert_grad(rec["input"][0], gw, "float of a parameter: input")
    assert_grad(rec["output"][0], gw, "float of a parameter: output")


# ------------------------------------------------------------------------------------------ several outputs
class Split(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(6, 8)

    def forward(self, x, keep=None):
        h = self.fc(x)
        p1, p2 = h.split(4, dim=-1)               # p2 gets no gradient
        m, idx = torch.max(h, dim=-1, keepdim=True)   # idx: integer, no gradient
        if keep is not None:
            keep.update(h=h, p1=p1, m=m)
        return (p1 * m).sum()


def test_several_outputs_some_without_gradient(tmp_path):
    torch.manual_seed(4)
    model = Split()
    x = x_input(3, 6)
    data, _ = dump(tmp_path, model, lambda m: m(x), "L1")
    keep = {}
    loss = model(x, keep)
    gp1, gm = grads(loss, [keep["p1"], keep["m"]])
    split = data["Tensor.split.0.backward"]
    assert len(split["input"]) == 2 and split["input"][1] is None
    assert_grad(split["input"][0], gp1, "split input.0")
    assert_grad(split["output"][0], torch.cat([gp1, torch.zeros_like(gp1)], -1), "split output")
    mx = data["Torch.max.0.backward"]
    assert len(mx["input"]) == 1 and len(mx["output"]) == 1
    assert_grad(mx["input"][0], gm, "max input")


# ------------------------------------------------------------------------------------------ module outputs
class Attn(nn.Module):
    """Returns (output, weights) like attention modules; it uses the weights itself."""

    def __init__(self):
        super().__init__()
        self.q = nn.Linear(8, 8)
        self.o = nn.Linear(8, 8)

    def forward(self, x):
        w = torch.softmax(self.q(x) @ x.transpose(-1, -2), dim=-1)
        return self.o(w @ x), w


class UsesAttn(nn.Module):
    def __init__(self, use_weights):
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.attn = Attn()
        self.use_weights = use_weights

    def forward(self, x, keep=None):
        h = self.fc(x)
        out, w = self.attn(h)
        if keep is not None:
            w_out = w.view_as(w)                 # the truth: the weights as seen outside the module
            keep.update(h=h, out=out, w=w_out)
            w = w_out
        loss = out.pow(2).sum()
        if self.use_weights:
            loss = loss + (w * w).sum()
        return loss


@pytest.mark.parametrize("use_weights", [False, True], ids=["weights-unused", "weights-used"])
def test_module_with_outputs_unused_outside(tmp_path, use_weights):
    torch.manual_seed(5)
    model = UsesAttn(use_weights)
    x = x_input(2, 4, 8)
    data, _ = dump(tmp_path, model, lambda m: m(x), "mix")
    keep = {}
    loss = model(x, keep)
    gout, gh, gw = grads(loss, [keep["out"], keep["h"], keep["w"]])
    rec = data["Module.attn.Attn.backward.0"]
    assert len(rec["input"]) == 2 and len(rec["output"]) == 1
    assert_grad(rec["input"][0], gout, "attn input.0")
    if use_weights:
        assert_grad(rec["input"][1], gw, "attn input.1 (outside share only)")
    else:
        assert rec["input"][1] is None
    assert_grad(rec["output"][0], gh, "attn output (grad of its input)")


# ------------------------------------------------------------------------------------------ in-place ops
class InPlace(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(5, 5)

    def forward(self, x, keep=None):
        h = self.fc(x)
        if keep is not None:                     # the truth: the out-of-place equivalent
            keep["h"] = h
            h2 = h * 3.0
            keep["h2"] = h2
            return torch.tanh(h2).sum()
        h.mul_(3.0)
        return torch.tanh(h).sum()


def test_inplace_op_records_its_own_node(tmp_path):
    torch.manual_seed(6)
    model = InPlace()
    x = x_input(3, 5)
    data, _ = dump(tmp_path, model, lambda m: m(x), "L1")
    keep = {}
    loss = model(x, keep)
    gh, gh2 = grads(loss, [keep["h"], keep["h2"]])
    rec = data["Tensor.mul_.0.backward"]
    assert_grad(rec["input"][0], gh2, "mul_ input (grad of the result)")
    assert_grad(rec["output"][0], gh, "mul_ output (grad of the value before)")
    fwd = data["Tensor.mul_.0.forward"]
    assert math.isclose(fwd["output"][0]["Max"], 3 * fwd["input_args"][0]["Max"], rel_tol=1e-6)


# ------------------------------------------------------------------------------------------ training unchanged
class Everything(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.attn = Attn()
        self.drop = nn.Dropout(0.0)
        self.norm = RMSNorm()
        self.head = nn.Linear(8, 4)

    def forward(self, x):
        h = self.fc(x).float().to(torch.float32)
        h = self.drop(h).contiguous()
        n = h.to(torch.float32)                  # RMSNorm-like: the same tensor used 3 times, residual
        n = n * torch.rsqrt(n.pow(2).mean(-1, keepdim=True) + 1e-6)
        h = h + n
        h = h + self.norm(h)
        a, w = self.attn(h)
        p1, _p2 = a.split(4, dim=-1)
        y = self.head(torch.cat([p1, p1 * 2], -1)).float() + w.sum(-1, keepdim=True)
        y = y.clone()
        y.mul_(0.5)
        return F.cross_entropy(y.reshape(-1, 4), torch.arange(8) % 4)


@pytest.mark.parametrize("level", ["L1", "mix", "L0"])
def test_training_is_bit_identical_with_the_tool(tmp_path, level):
    def step(with_tool):
        torch.manual_seed(7)
        model = Everything()
        x = x_input(2, 4, 8, seed=8, requires_grad=True)
        if with_tool:
            _data, loss = dump(tmp_path, model, lambda m: m(x), level)
        else:
            loss = model(x)
            loss.backward()
        return loss.detach(), [p.grad for p in model.parameters()] + [x.grad]

    loss0, g0 = step(False)
    loss1, g1 = step(True)
    assert torch.equal(loss0, loss1)
    assert all(torch.equal(a, b) for a, b in zip(g0, g1))


# ------------------------------------------------------------------------------------------ module inputs/outputs
class TakesMany(nn.Module):
    def forward(self, h, positions, extra):
        return h * 2 + extra[0] * 3 + positions.float().sum()


class CallsTakesMany(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.inner = TakesMany()

    def forward(self, x, keep=None):
        h = self.fc(x)
        e = torch.tanh(h)
        if keep is not None:
            keep.update(h=h, e=e)
        return self.inner(h, torch.arange(4), [e]).pow(2).sum()


def test_module_backward_output_has_one_entry_per_input_that_requires_grad(tmp_path):
    """The integer ``positions`` gets no entry; the tensor nested in a list does (the reference's module
    hooks see exactly the positional tensors that require grad, nested ones included)."""
    torch.manual_seed(10)
    model = CallsTakesMany()
    x = x_input(3, 4)
    data, _ = dump(tmp_path, model, lambda m: m(x), "mix")
    keep = {}
    model(x, keep)
    out = model.inner(keep["h"], torch.arange(4), [keep["e"]])
    g_out = 2 * out.detach()                     # loss = out.pow(2).sum()
    rec = data["Module.inner.TakesMany.backward.0"]
    assert len(rec["input"]) == 1 and len(rec["output"]) == 2
    assert_grad(rec["input"][0], g_out, "inner input (grad of its output)")
    assert_grad(rec["output"][0], 2 * g_out, "grad of h (this module's share)")
    assert_grad(rec["output"][1], 3 * g_out, "grad of the nested e")


@pytest.mark.parametrize("as_dict", [False, True], ids=["dataclass", "ModelOutput-like"])
def test_dataclass_outputs_record_every_field(tmp_path, as_dict):
    """transformers' ModelOutput is a dataclass and a dict that hides its None fields: the record has every
    field, None ones as null, in declaration order (as the reference writes it)."""
    import collections
    import dataclasses

    base = collections.OrderedDict if as_dict else object

    @dataclasses.dataclass
    class Out(base):
        logits: torch.Tensor = None
        hidden_states: tuple = None
        loss: torch.Tensor = None

        if as_dict:
            def __post_init__(self):
                for f in dataclasses.fields(self):
                    if getattr(self, f.name) is not None:
                        self[f.name] = getattr(self, f.name)

    class Head(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(4, 2)

        def forward(self, x):
            y = self.fc(x)
            return Out(logits=y, loss=y.sum())

    class Wrap(nn.Module):
        def __init__(self):
            super().__init__()
            self.head = Head()

        def forward(self, x):
            return self.head(x).loss

    if as_dict:
        assert list(Out(logits=torch.ones(1), loss=torch.ones(1)).keys()) == ["logits", "loss"]
    data, _ = dump(tmp_path, Wrap(), lambda m: m(x_input(3, 4)), "mix")
    rec = data["Module.head.Head.forward.0"]["output"][0]
    assert list(rec) == ["logits", "hidden_states", "loss"]
    assert rec["hidden_states"] is None and rec["logits"]["shape"] == [3, 2] and rec["loss"]["shape"] == []


def test_forward_that_raises_leaves_later_records_right(tmp_path):
    """A module forward that raises (caught by the training) must not bind later ops to its frame."""
    torch.manual_seed(9)
    model = Residual()
    x = x_input(2, 3, 8)

    def run(m):
        try:
            m(torch.ones(2, 3, 5))               # fc raises: wrong width
        except RuntimeError:
            pass
        return m(x)

    data, _ = dump(tmp_path, model, run, "mix")
    keep = {}
    loss = model(x, keep)
    g_inside, = grads(loss, [keep["inside"]])
    assert_grad(data["Tensor.to.0.backward"]["input"][0], g_inside, "to input after a failed forward")
