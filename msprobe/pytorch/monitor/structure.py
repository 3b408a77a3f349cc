"""``stack_info`` and ``print_struct`` of the training monitor (spec 4.5.6).

* :class:`StackRecorder`: a forward hook on every module records its call stack once (the hook removes itself
  after its first call); the monitor writes ``stack_info.csv`` (``module_name,stack_info``) into the rank folder
  at the first collected step.  Stack lines are the reference's: ``File {path}, line {n}, in {func}, \\n {code} \\n``.
* :class:`StructRecorder`: the inputs / outputs (and which of them carry a gradient) of every module at the
  first step, saved to ``{MONITOR_OUTPUT_DIR}/module_struct/rank{R}/module_struct.json``.  The reference then
  stops the training with an exception at the next step; here monitoring stops and training goes on.
"""

from __future__ import annotations

import csv
import io
import json
import os
import traceback

import torch

from msprobe.core.fileio import atomic_write

_SKIP = (os.sep + os.path.join("torch", "nn", "modules", "module.py"), os.path.abspath(__file__))


def _stack_text():
    frames = traceback.extract_stack()[:-2]
    lines = []
    for fr in reversed(frames):                 # innermost first, as inspect.stack()
        if fr.filename.endswith(_SKIP) or not fr.line:
            continue
        lines.append(f"File {fr.filename}, line {fr.lineno}, in {fr.name}, \n {fr.line.strip()} \n")
    return "".join(lines)


class StackRecorder:
    def __init__(self, modules, on_error):
        self.stacks = {}                        # module name -> stack text, in first-call order
        self.handles = []
        self.on_error = on_error
        for mod, name in modules:
            holder = {}
            holder["h"] = mod.register_forward_hook(self._hook(name, holder))
            self.handles.append(holder["h"])

    def _hook(self, name, holder):
        def hook(module, args, output):
            try:
                if name not in self.stacks:
                    self.stacks[name] = _stack_text()
                holder["h"].remove()
            except Exception as exc:   # noqa: BLE001
                self.on_error(f"monitor.stack.{name}", exc)
        return hook

    def remove(self):
        for h in self.handles:
            h.remove()
        self.handles = []

    def write(self, directory):
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        w.writerow(["module_name", "stack_info"])
        w.writerows(self.stacks.items())

        def put(tmp):
            with open(tmp, "w", encoding="utf-8", newline="") as f:
                f.write(buf.getvalue())
        return atomic_write(os.path.join(directory, "stack_info.csv"), put)


def _describe(obj):
    if isinstance(obj, torch.Tensor):
        return {"config": "tensor", "0": f"size={tuple(obj.shape)}, dtype={obj.dtype}"}
    if isinstance(obj, (tuple, list)):
        d = {"config": f"{type(obj).__name__}[{len(obj)}]"}
        for i, x in enumerate(obj):
            if isinstance(x, torch.Tensor):
                d[str(i)] = f"size={tuple(x.shape)}, dtype={x.dtype}"
        return d
    return {"config": type(obj).__name__}


def _grads(obj):
    """What the gradients of ``obj``'s tensors will look like (the tensors that require grad)."""
    items = [obj] if isinstance(obj, torch.Tensor) else list(obj) if isinstance(obj, (tuple, list)) else []
    d = {"config": f"tuple[{len(items)}]"}
    for i, x in enumerate(items):
        if isinstance(x, torch.Tensor) and x.requires_grad:
            d[str(i)] = f"size={tuple(x.shape)}, dtype={x.dtype}"
    return d


class StructRecorder:
    def __init__(self, modules, on_error):
        self.struct = {}
        self.on_error = on_error
        self.handles = [mod.register_forward_hook(self._hook(name)) for mod, name in modules]

    def _hook(self, name):
        def hook(module, args, output):
            try:
                if name not in self.struct:
                    ins = args[0] if len(args) == 1 else args
                    self.struct[name] = {"input": _describe(ins), "output": _describe(output),
                                         "input_grad": _grads(args), "output_grad": _grads(output)}
            except Exception as exc:   # noqa: BLE001
                self.on_error(f"monitor.struct.{name}", exc)
        return hook

    def remove(self):
        for h in self.handles:
            h.remove()
        self.handles = []

    def write(self, output_base, rank):
        directory = os.path.join(output_base, "module_struct", f"rank{rank}")
        os.makedirs(directory, mode=0o750, exist_ok=True)
        text = json.dumps(self.struct, indent=2)

        def put(tmp):
            with open(tmp, "w", encoding="utf-8") as f:
                f.write(text)
        return atomic_write(os.path.join(directory, "module_struct.json"), put)
