"""MindSpore side of the cross-framework fault cases (MindSpore target against a PyTorch golden).

A tiny transformer (Embedding, 2 blocks of LayerNorm -> multi-head attention written with ops.matmul /
ops.softmax -> residual, LayerNorm -> Dense -> GELU -> Dense -> residual) and a small CNN head (Conv2d ->
BatchNorm2d -> ReLU -> Flatten -> Dense), built from mindspore.nn / mindspore.ops layers, fp32, PyNative.
Its PyTorch twin is tests/fault_injection/xf.py (same paths, same weights through an .npz file).

Run as a script (in .venv-ms):

    python xf_models.py OUT SIDE_DIR --task statistics|tensor|md5 --level mix|L1|L0 [--fault JSON]
                        [--weights-out W.npz | --weights-in W.npz] [--dtype fp32|fp16]

writes ``SIDE_DIR/step0/rank/`` with msprobe.mindspore's PrecisionDebugger around one training step
(value_and_grad + SGD), and ``--weights-out`` the initial weights under the PyTorch twin's names.

Faults (``--fault``, a JSON object; the golden PyTorch run never has any):

  ``ln_eps``       {cell path: eps}       a LayerNorm's epsilon
  ``attn_scale``   {block index: m}       that block's attention scale x m
  ``gelu_approx``  [block index, ...]     that block's GELU with approximate=True (tanh) instead of erf
  ``dense_scale``  {cell path: s}         that Dense's output x s (the Dense multiplies inside its construct)
  ``grad_scale``   {cell path: s}         a backward hook on that Cell multiplies its input gradients by s
  ``bprop_scale``  {act path: s}          that GELU replaced by a Cell with a custom bprop: the exact derivative x s
  ``bn_eps``       eps                    the head's BatchNorm2d eps
  ``no_residual``  {block index: "attn"|"mlp"}  that residual add left out
  ``softmax_axis`` {block index: axis}    that block's attention softmax over another axis
  ``transposed``   [cell path, ...]       that (square) Dense loads its weight transposed
"""
from __future__ import annotations

import argparse
import json
import math
import os

import numpy as np
import mindspore as ms
from mindspore import Tensor, nn, ops

VOCAB, D, HEADS, T, B, HIDDEN, CLASSES = 32, 16, 2, 8, 2, 32, 3
LN_EPS = 1e-5          # PyTorch's default; MindSpore's nn.LayerNorm defaults to 1e-7


class ScaledDense(nn.Dense):
    """A Dense whose output is multiplied by ``scale`` inside its construct (a fault on the target)."""

    def __init__(self, *args, scale=1.0, **kwargs):
        super().__init__(*args, **kwargs)
        self.scale = scale

    def construct(self, x):
        return super().construct(x) * self.scale


class BpropGELU(nn.Cell):
    """GELU (erf) with a custom ``bprop``: the exact derivative x ``grad_scale`` (1.0: a custom bprop that is
    right)."""

    def __init__(self, grad_scale=1.0):
        super().__init__()
        self.grad_scale = grad_scale

    def construct(self, x):
        return ops.gelu(x, approximate="none")

    def bprop(self, x, out, dout):
        cdf = 0.5 * (1.0 + ops.erf(x / math.sqrt(2.0)))
        pdf = ops.exp(-0.5 * x * x) / math.sqrt(2.0 * math.pi)
        return (dout * (cdf + x * pdf) * self.grad_scale,)


def dense(path, fin, fout, fault):
    s = fault.get("dense_scale", {}).get(path)
    return ScaledDense(fin, fout, scale=s) if s is not None else nn.Dense(fin, fout)


class Attention(nn.Cell):
    def __init__(self, prefix, index, fault):
        super().__init__()
        self.q = dense(f"{prefix}.q", D, D, fault)
        self.k = dense(f"{prefix}.k", D, D, fault)
        self.v = dense(f"{prefix}.v", D, D, fault)
        self.o = dense(f"{prefix}.o", D, D, fault)
        self.scale = 1.0 / math.sqrt(D // HEADS) * fault.get("attn_scale", {}).get(str(index), 1.0)
        self.axis = fault.get("softmax_axis", {}).get(str(index), -1)

    def heads(self, x):
        return ops.transpose(ops.reshape(x, (B, T, HEADS, D // HEADS)), (0, 2, 1, 3))

    def construct(self, x):
        q, k, v = self.heads(self.q(x)), self.heads(self.k(x)), self.heads(self.v(x))
        scores = ops.matmul(q, ops.transpose(k, (0, 1, 3, 2))) * self.scale
        probs = ops.softmax(scores, axis=self.axis)
        ctx = ops.reshape(ops.transpose(ops.matmul(probs, v), (0, 2, 1, 3)), (B, T, D))
        return self.o(ctx)


class Block(nn.Cell):
    def __init__(self, index, fault):
        super().__init__()
        p = f"blocks.{index}"
        eps = fault.get("ln_eps", {})
        self.ln1 = nn.LayerNorm((D,), epsilon=eps.get(f"{p}.ln1", LN_EPS))
        self.attn = Attention(f"{p}.attn", index, fault)
        self.ln2 = nn.LayerNorm((D,), epsilon=eps.get(f"{p}.ln2", LN_EPS))
        self.fc1 = dense(f"{p}.fc1", D, HIDDEN, fault)
        bprop = fault.get("bprop_scale", {}).get(f"{p}.act")
        self.act = (nn.GELU(approximate=index in fault.get("gelu_approx", [])) if bprop is None
                    else BpropGELU(bprop))
        self.fc2 = dense(f"{p}.fc2", HIDDEN, D, fault)
        self.skip = fault.get("no_residual", {}).get(str(index))

    def construct(self, x):
        a = self.attn(self.ln1(x))
        x = a if self.skip == "attn" else x + a
        m = self.fc2(self.act(self.fc1(self.ln2(x))))
        return m if self.skip == "mlp" else x + m


class Net(nn.Cell):
    def __init__(self, fault=None):
        super().__init__()
        fault = fault or {}
        self.embed = nn.Embedding(VOCAB, D)
        self.blocks = nn.CellList([Block(i, fault) for i in range(2)])
        self.conv = nn.Conv2d(1, 4, 3, pad_mode="same")
        self.bn = nn.BatchNorm2d(4, eps=fault.get("bn_eps", 1e-5))
        self.relu = nn.ReLU()
        self.flatten = nn.Flatten()
        self.head = dense("head", 4 * T * D, CLASSES, fault)

    def construct(self, ids):
        x = self.embed(ids)
        for blk in self.blocks:
            x = blk(x)
        x = ops.reshape(x, (B, 1, T, D))
        return self.head(self.flatten(self.relu(self.bn(self.conv(x)))))


# MindSpore parameter name -> the PyTorch twin's state_dict name
def torch_name(name):
    for ms_suffix, pt_suffix in ((".embedding_table", ".weight"), (".gamma", ".weight"), (".beta", ".bias"),
                                 (".moving_mean", ".running_mean"), (".moving_variance", ".running_var")):
        if name.endswith(ms_suffix):
            return name[: -len(ms_suffix)] + pt_suffix
    return name


def inputs():
    rng = np.random.RandomState(0)
    ids = rng.randint(0, VOCAB, size=(B, T)).astype(np.int32)
    y = rng.randn(B, CLASSES).astype(np.float32)
    return ids, y


def add_grad_hooks(net, fault):
    for path, s in fault.get("grad_scale", {}).items():
        cell = dict(net.cells_and_names())[path]

        def hook(cell_, grad_input, grad_output, s=s):
            return tuple(g * s if g is not None else g for g in grad_input)
        cell.register_backward_hook(hook)


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("side_dir")
    ap.add_argument("--task", default="statistics")
    ap.add_argument("--level", default="mix")
    ap.add_argument("--fault", default="{}")
    ap.add_argument("--weights-out")
    ap.add_argument("--weights-in")
    ap.add_argument("--dtype", default="fp32", choices=["fp32", "fp16", "bf16"])
    a = ap.parse_args(argv)
    fault = json.loads(a.fault)

    ms.set_context(mode=ms.PYNATIVE_MODE)
    ms.set_device("CPU")
    ms.set_seed(1)
    net = Net(fault)
    net.set_train(True)
    if a.weights_in:
        w = np.load(a.weights_in)
        for p in net.get_parameters():
            p.set_data(Tensor(w[torch_name(p.name)]))
    if a.weights_out:
        np.savez(a.weights_out, **{torch_name(p.name): p.asnumpy() for p in net.get_parameters()})
    for path in fault.get("transposed", []):
        cell = dict(net.cells_and_names())[path]
        cell.weight.set_data(Tensor(cell.weight.asnumpy().T.copy()))
    if a.dtype != "fp32":
        dt = {"fp16": ms.float16, "bf16": ms.bfloat16}[a.dtype]
        for _, cell in net.cells_and_names():
            if isinstance(cell, (nn.Dense, nn.Conv2d)):
                cell.to_float(dt)
    add_grad_hooks(net, fault)

    os.makedirs(a.side_dir, exist_ok=True)
    cfg = {"task": "tensor" if a.task == "tensor" else "statistics", "dump_path": a.side_dir, "rank": [],
           "step": [], "level": a.level, "async_dump": False}
    if a.task == "md5":
        cfg["statistics"] = {"summary_mode": "md5"}
    cfg_path = os.path.join(a.side_dir, "config.json")
    with open(cfg_path, "w") as fh:
        json.dump(cfg, fh)

    from msprobe.mindspore import PrecisionDebugger
    dbg = PrecisionDebugger(config_path=cfg_path)
    opt = nn.SGD(net.trainable_params(), learning_rate=0.01)

    def fwd(ids, y):
        return ops.mse_loss(net(ids), y)

    grad_fn = ms.value_and_grad(fwd, None, opt.parameters)
    ids, y = inputs()
    dbg.start(net)
    loss, grads = grad_fn(Tensor(ids), Tensor(y))
    opt(grads)
    dbg.stop()
    print(json.dumps({"loss": float(loss.asnumpy())}))


if __name__ == "__main__":
    main()
