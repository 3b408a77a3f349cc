#!/usr/bin/env python3
"""Write a small, realistic target/golden dump pair in the reference's statistics format.

usage: python examples/make_example_dumps.py OUTDIR [--style g26|g8] [--seed N]

Creates OUTDIR/{target,golden}/step0/rank0/{dump.json,stack.json,construct.json} as msprobe
(MindStudio Probe) writes them for task "statistics" at level "mix", for one training step of a tiny
MLP (the root module itself is not dumped, as in the reference)::

    class TinyMLP(nn.Module):                    # fc1 = Linear(16, 32), act = ReLU(), fc2 = Linear(32, 10)
        def forward(self, x):
            h = self.act(self.fc1(x))
            h = h + 1                                # Tensor.__add__ with an int scalar argument
            return self.fc2(h)

    out = model(x)
    loss = F.cross_entropy(out, y, reduction="mean", label_smoothing=0.0)  # str and float kwargs
    loss.backward()

Everything is computed with numpy from real arrays (fixed seed), no framework needed:

* golden ("bench") side: plain fp32 computation.
* target ("NPU") side: the forward runs as under bf16 autocast (inputs/weights/activations rounded to
  bfloat16, cross_entropy in fp32, fp32 master weights and fp32 parameter gradients), and one kernel is
  broken: the ReLU forward output is scaled by 2, so the compare report has clearly highlighted rows that
  start at ``Functional.relu.0.forward``.

``--style g26`` (default) writes what mindstudio-probe 26.x writes (no ``is_recompute``, indexed
``Module.*.parameters_grad.0`` entries recorded during backward, int tensors keep int Max/Min and null
Mean/Norm); ``--style g8`` writes the 8.x layout (``is_recompute``, un-indexed ``parameters_grad`` right
after the module's forward entry, fp32-upcast statistics for int tensors, ``Torch.ones_like`` from
``loss.backward()``, the msprobe wrapper frame at the top of API stacks).

Only numpy and the standard library are used. The two dump.json paths (target, golden) are printed.
"""
import argparse
import json
import os
import sys

import numpy as np

BATCH, IN_FEATURES, HIDDEN, CLASSES = 8, 16, 32, 10
ADD_SCALAR = 1  # an int scalar argument: {"type": "int", "value": 1}
RELU_BUG_SCALE = 2.0  # the injected target-side error
DEFAULT_SEED = 2026

FP32, BF16, INT64 = "torch.float32", "torch.bfloat16", "torch.int64"

# --------------------------------------------------------------------------------------------------
# numerics


def to_fp32(a):
    return np.asarray(a, dtype=np.float32)


def to_bf16(a):
    """Round float32 values to the nearest bfloat16 (ties to even); returned as float32 values."""
    bits = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32).astype(np.uint64)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
    return rounded.astype(np.uint32).view(np.float32).reshape(np.shape(a))


def matmul(a, b):
    """fp32 matmul with a wide accumulator (as the CPU/NPU kernels do), result in fp32."""
    return to_fp32(np.asarray(a, np.float64) @ np.asarray(b, np.float64))


class T:
    """A tensor as a hook sees it: its values, its torch dtype string and requires_grad."""

    def __init__(self, value, dtype, requires_grad=False):
        self.value = np.asarray(value)
        self.dtype = dtype
        self.requires_grad = requires_grad


def _py(x):
    """numpy scalar -> Python number, as ``tensor.item()`` gives it (fp32 widened to a double)."""
    if isinstance(x, (np.integer, int)):
        return int(x)
    return float(np.float32(x))


def statistics(t, style):
    """Max, Min, Mean, Norm of a tensor record (spec dump.md section 4.2)."""
    v = t.value
    if v.size == 0:
        return None, None, None, None
    is_int = t.dtype in (INT64, "torch.int32")
    if v.ndim == 0:  # 0-dim: all four are the value itself
        item = int(v) if (is_int and style == "g26") else _py(v.astype(np.float32))
        return item, item, item, item
    if is_int:
        if style == "g26":  # native dtype: exact int Max/Min, no Mean/Norm
            return int(v.max()), int(v.min()), None, None
        v = v.astype(np.float32)  # g8: upcast to fp32 first
    wide = v.astype(np.float64)
    mean = np.float32(wide.mean())
    norm = np.float32(np.sqrt((wide * wide).sum()))
    if t.dtype == BF16:  # reductions of a bf16 tensor come back as bf16
        mean, norm = to_bf16(mean), to_bf16(norm)
    return _py(v.max()), _py(v.min()), _py(mean), _py(norm)


def record(item, style):
    """JSON record of one argument/output (a tensor, a builtin scalar or None)."""
    if item is None:
        return None
    if isinstance(item, T):
        mx, mn, mean, norm = statistics(item, style)
        return {
            "type": "torch.Tensor",
            "dtype": item.dtype,
            "shape": list(item.value.shape),
            "Max": mx,
            "Min": mn,
            "Mean": mean,
            "Norm": norm,
            "requires_grad": bool(item.requires_grad),
        }
    if isinstance(item, bool):
        return {"type": "bool", "value": item}
    if isinstance(item, int):
        return {"type": "int", "value": item}
    if isinstance(item, float):
        return {"type": "float", "value": item}
    if isinstance(item, str):
        return {"type": "str", "value": item}
    raise TypeError(type(item))


# --------------------------------------------------------------------------------------------------
# the training step


def make_inputs(seed):
    rng = np.random.default_rng(seed)
    bound1, bound2 = 1.0 / np.sqrt(IN_FEATURES), 1.0 / np.sqrt(HIDDEN)  # nn.Linear's default init range
    return {
        "x": to_fp32(rng.standard_normal((BATCH, IN_FEATURES))),
        "y": rng.integers(0, CLASSES, size=BATCH).astype(np.int64),
        "w1": to_fp32(rng.uniform(-bound1, bound1, (HIDDEN, IN_FEATURES))),
        "b1": to_fp32(rng.uniform(-bound1, bound1, HIDDEN)),
        "w2": to_fp32(rng.uniform(-bound2, bound2, (CLASSES, HIDDEN))),
        "b2": to_fp32(rng.uniform(-bound2, bound2, CLASSES)),
    }


def simulate(inp, side):
    """One forward/backward step; returns every tensor a mix-level dump records."""
    target = side == "target"
    q = to_bf16 if target else to_fp32  # the precision of the autocast region
    act = BF16 if target else FP32
    x, y, w1, b1, w2, b2 = (inp[k] for k in ("x", "y", "w1", "b1", "w2", "b2"))

    # forward
    z1 = q(matmul(q(x), q(w1).T) + q(b1))
    a1 = q(np.maximum(z1, 0))
    if target:
        a1 = q(a1 * RELU_BUG_SCALE)  # broken ReLU kernel on the "NPU"
    h = q(a1 + ADD_SCALAR)
    z2 = q(matmul(h, q(w2).T) + q(b2))
    logits = z2.astype(np.float64)  # cross_entropy runs in fp32 under autocast too
    shifted = logits - logits.max(axis=1, keepdims=True)
    log_p = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
    loss = np.float32(-log_p[np.arange(BATCH), y].mean())

    # backward (grads w.r.t. forward outputs flow in, grads w.r.t. forward inputs flow out)
    onehot = np.zeros((BATCH, CLASSES))
    onehot[np.arange(BATCH), y] = 1.0
    dlogits = to_fp32((np.exp(log_p) - onehot) / BATCH)
    dz2 = q(dlogits)
    db2 = q(dz2.astype(np.float64).sum(axis=0))
    dh = q(matmul(dz2, q(w2)))
    dw2_t = q(matmul(h.T, dz2))
    dz1 = q(dh * (z1 > 0))  # ReLU backward itself is correct
    db1 = q(dz1.astype(np.float64).sum(axis=0))
    dw1_t = q(matmul(q(x).T, dz1))

    return {
        "x": T(x, FP32), "y": T(y, INT64),
        "w1": T(w1, FP32, True), "b1": T(b1, FP32, True),
        "w2": T(w2, FP32, True), "b2": T(b2, FP32, True),
        "z1": T(z1, act, True), "a1": T(a1, act, True), "h": T(h, act, True), "z2": T(z2, act, True),
        "loss": T(loss, FP32, True),
        "ones": T(np.float32(1.0), FP32),
        "dloss": T(np.float32(1.0), FP32),
        "dlogits": T(dlogits, FP32),
        "dz2": T(dz2, act), "db2": T(db2, act), "dh": T(dh, act), "dw2_t": T(dw2_t, act),
        "dz1": T(dz1, act), "db1": T(db1, act), "dw1_t": T(dw1_t, act),
        # parameter grads are accumulated into the fp32 master parameters
        "gw1": T(to_fp32(dw1_t.T), FP32), "gb1": T(to_fp32(db1), FP32),
        "gw2": T(to_fp32(dw2_t.T), FP32), "gb2": T(to_fp32(db2), FP32),
    }


# --------------------------------------------------------------------------------------------------
# dump.json / construct.json / stack.json

SITE = "/usr/local/lib/python3.11/site-packages"
SCRIPT = "/home/user/train/tiny_mlp.py"


def frame(path, line, func, source):
    return "File {}, line {}, in {}, \n {}".format(path, line, func, source)


MODULE_PY = SITE + "/torch/nn/modules/module.py"
F_PRE_HOOK = frame(MODULE_PY, 1811, "inner", "args_kwargs_result = hook(self, args, kwargs)  # type: ignore[misc]")
F_FWD_HOOK = frame(MODULE_PY, 1843, "inner", "hook_result = hook(self, args, kwargs, result)")
F_INNER_CALL = frame(MODULE_PY, 1832, "inner", "result = forward_call(*args, **kwargs)")
F_HOOKED_CALL = [frame(MODULE_PY, 1884, "_call_impl", "return inner()"),
                 frame(MODULE_PY, 1778, "_wrapped_call_impl", "return self._call_impl(*args, **kwargs)")]
F_MSPROBE_WRAPPER = frame(SITE + "/msprobe/core/data_dump/api_registry.py", 94, "api_function",
                          "return api_instance(*args, **kwargs)")
F_MAIN = frame(SCRIPT, 40, "<module>", "train_step(model, x, y)")
F_MODEL_CALL = [frame(MODULE_PY, 1789, "_call_impl", "return forward_call(*args, **kwargs)"),
                frame(MODULE_PY, 1778, "_wrapped_call_impl", "return self._call_impl(*args, **kwargs)"),
                frame(SCRIPT, 27, "train_step", "out = model(x)"),
                F_MAIN]
F_LINE_FC1 = frame(SCRIPT, 19, "forward", "h = self.act(self.fc1(x))")
F_LINE_ADD = frame(SCRIPT, 20, "forward", "h = h + {}".format(ADD_SCALAR))
F_LINE_FC2 = frame(SCRIPT, 21, "forward", "return self.fc2(h)")
F_LINEAR = frame(SITE + "/torch/nn/modules/linear.py", 134, "forward",
                 "return F.linear(input, self.weight, self.bias)")
F_RELU = frame(SITE + "/torch/nn/modules/activation.py", 143, "forward",
               "return F.relu(input, inplace=self.inplace)")
F_CE = frame(SCRIPT, 28, "train_step", 'loss = F.cross_entropy(out, y, reduction="mean", label_smoothing=0.0)')
F_ONES_LIKE = [
    frame(SITE + "/torch/autograd/__init__.py", 233, "_make_grads",
          "torch.ones_like(out, memory_format=torch.preserve_format)"),
    frame(SITE + "/torch/autograd/__init__.py", 388, "backward",
          "grad_tensors_ = _make_grads(tensors, grad_tensors_, is_grads_batched=False)"),
    frame(SITE + "/torch/_tensor.py", 623, "backward", "torch.autograd.backward("),
    frame(SCRIPT, 29, "train_step", "loss.backward()"),
    F_MAIN,
]


def module_stack(call_line, style):
    hook = F_PRE_HOOK if style == "g26" else F_FWD_HOOK
    return [hook] + F_HOOKED_CALL + [call_line] + F_MODEL_CALL


def api_stack(frames, style):
    return ([F_MSPROBE_WRAPPER] if style == "g8" else []) + frames


def in_module(api_frame, call_line):
    return [api_frame, F_INNER_CALL] + F_HOOKED_CALL + [call_line] + F_MODEL_CALL


def build_events(t, style):
    """The dump in execution order: (name, body, parent for construct.json or "-" for none, stack)."""
    g8 = style == "g8"
    pg_suffix = "" if g8 else ".0"

    def api_fwd(args, kwargs, outputs):
        body = {"input_args": [record(a, style) for a in args],
                "input_kwargs": {k: record(v, style) for k, v in kwargs.items()}}
        if g8:
            body["is_recompute"] = False
        body["output"] = [record(o, style) for o in outputs]
        return body

    def module_fwd(args, outputs, params):
        body = {"input_args": [record(a, style) for a in args], "input_kwargs": {},
                "output": [record(o, style) for o in outputs],
                "parameters": {k: record(v, style) for k, v in params.items()}}
        if g8:
            body["is_recompute"] = False
        return body

    def bwd(inputs, outputs):
        return {"input": [record(i, style) for i in inputs], "output": [record(o, style) for o in outputs]}

    def param_grads(grads):
        return {k: [record(v, style)] for k, v in grads.items()}

    fc1_f, act_f, fc2_f = "Module.fc1.Linear.forward.0", "Module.act.ReLU.forward.0", "Module.fc2.Linear.forward.0"
    fc1_b, act_b, fc2_b = "Module.fc1.Linear.backward.0", "Module.act.ReLU.backward.0", "Module.fc2.Linear.backward.0"
    pg1, pg2 = "Module.fc1.Linear.parameters_grad" + pg_suffix, "Module.fc2.Linear.parameters_grad" + pg_suffix
    grads1 = param_grads({"weight": t["gw1"], "bias": t["gb1"]})
    grads2 = param_grads({"weight": t["gw2"], "bias": t["gb2"]})

    ev = []

    def add(name, body, parent="-", stack=None):
        ev.append((name, body, parent, stack))

    # forward. Module entries are (re-)inserted when their output arrives, i.e. after the APIs they contain.
    add("Functional.linear.0.forward", api_fwd([t["x"], t["w1"], t["b1"]], {}, [t["z1"]]), fc1_f,
        api_stack(in_module(F_LINEAR, F_LINE_FC1), style))
    add(fc1_f, module_fwd([t["x"]], [t["z1"]], {"weight": t["w1"], "bias": t["b1"]}), None,
        module_stack(F_LINE_FC1, style))
    if g8:
        add(pg1, grads1)
    add("Functional.relu.0.forward", api_fwd([t["z1"]], {"inplace": False}, [t["a1"]]), act_f,
        api_stack(in_module(F_RELU, F_LINE_FC1), style))
    add(act_f, module_fwd([t["z1"]], [t["a1"]], {}), None, module_stack(F_LINE_FC1, style))
    add("Tensor.__add__.0.forward", api_fwd([t["a1"], ADD_SCALAR], {}, [t["h"]]), None,
        api_stack([F_LINE_ADD] + F_MODEL_CALL, style))
    add("Functional.linear.1.forward", api_fwd([t["h"], t["w2"], t["b2"]], {}, [t["z2"]]), fc2_f,
        api_stack(in_module(F_LINEAR, F_LINE_FC2), style))
    add(fc2_f, module_fwd([t["h"]], [t["z2"]], {"weight": t["w2"], "bias": t["b2"]}), None,
        module_stack(F_LINE_FC2, style))
    if g8:
        add(pg2, grads2)
    add("Functional.cross_entropy.0.forward",
        api_fwd([t["z2"], t["y"]], {"reduction": "mean", "label_smoothing": 0.0}, [t["loss"]]), None,
        api_stack([F_CE, F_MAIN], style))
    if g8:  # loss.backward() creates the seed gradient through a wrapped torch.ones_like (filtered in 26.x)
        ones = api_fwd([t["loss"]], {}, [t["ones"]])
        ones["input_kwargs"] = {"memory_format": {"type": "torch.memory_format", "format": "preserve_format"}}
        add("Torch.ones_like.0.forward", ones, None, api_stack(F_ONES_LIKE, style))

    # backward, in autograd order. API backward outputs follow the autograd node's order
    # (linear: bias grad, input grad, transposed weight grad); x needs no grad, hence the null.
    add("Functional.cross_entropy.0.backward", bwd([t["dloss"]], [t["dlogits"]]), None)
    add("Functional.linear.1.backward", bwd([t["dz2"]], [t["db2"], t["dh"], t["dw2_t"]]), fc2_b)
    if not g8:
        add(pg2, grads2)
    add(fc2_b, bwd([t["dz2"]], [t["dh"]]), None)
    add("Tensor.__add__.0.backward", bwd([t["dh"]], [t["dh"]]), None)
    add("Functional.relu.0.backward", bwd([t["dh"]], [t["dz1"]]), act_b)
    add(act_b, bwd([t["dh"]], [t["dz1"]]), None)
    # fc1's input does not require grad: its module backward hook fires on the output grads only.
    add(fc1_b, bwd([t["dz1"]], []), None)
    add("Functional.linear.0.backward", bwd([t["dz1"]], [t["db1"], None, t["dw1_t"]]), None)
    if not g8:
        add(pg1, grads1)
    return ev


def stack_collection_order(events, style):
    """Forward stacks in the order the reference collects them.

    26.x collects a module's stack in its forward pre-hook (before the APIs inside it run); 8.x in its
    forward hook (after them), which is the dump order.
    """
    stacked = [(name, stack) for name, _, _, stack in events if stack is not None]
    if style == "g8":
        return stacked
    ordered = []
    for i, (name, stack) in enumerate(stacked):
        if name.startswith("Module."):
            continue
        ordered.append((name, stack))
        nxt = stacked[i + 1] if i + 1 < len(stacked) else None
        if nxt and nxt[0].startswith("Module."):  # the enclosing module's pre-hook ran before this API
            ordered.insert(len(ordered) - 1, nxt)
    return ordered


def build_stack_json(events, style):
    groups = {}  # frames tuple -> [names, frames]
    for name, stack in stack_collection_order(events, style):
        groups.setdefault(tuple(stack), [[], list(stack)])[0].append(name)
    return {str(i): group for i, group in enumerate(groups.values())}


def write_json(path, obj):
    with open(path, "w", encoding="utf-8") as f:
        json.dump(obj, f, indent=1)


def write_side(outdir, side, inputs, style):
    tensors = simulate(inputs, side)
    events = build_events(tensors, style)
    rank_dir = os.path.join(outdir, side, "step0", "rank0")
    os.makedirs(rank_dir, exist_ok=True)
    dump = {
        "task": "statistics",
        "level": "mix",
        "framework": "pytorch",
        "dump_data_dir": None,
        "data": {name: body for name, body, _, _ in events},
    }
    construct = {name: parent for name, _, parent, _ in events if parent != "-"}
    dump_path = os.path.join(rank_dir, "dump.json")
    write_json(dump_path, dump)
    write_json(os.path.join(rank_dir, "stack.json"), build_stack_json(events, style))
    write_json(os.path.join(rank_dir, "construct.json"), construct)
    return dump_path


def main(argv=None):
    parser = argparse.ArgumentParser(description="Write an example target/golden msprobe dump pair.")
    parser.add_argument("outdir", help="output folder (target/ and golden/ are created inside)")
    parser.add_argument("--style", choices=("g26", "g8"), default="g26",
                        help="reference generation whose layout to follow (default: g26)")
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED, help="random seed (default: %(default)s)")
    args = parser.parse_args(argv)

    inputs = make_inputs(args.seed)
    for side in ("target", "golden"):
        print(write_side(args.outdir, side, inputs, args.style))
    return 0


if __name__ == "__main__":
    sys.exit(main())
