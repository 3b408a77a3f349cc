"""One training step of a :class:`~real_models.builders.Case`, with or without the dump, and our compare.

``plain_step`` and ``dump_step`` return the loss and every parameter gradient (clones), so a test can check
that the tool changes nothing; ``dump_step`` leaves the dump in ``dump_dir/step0/rank``.
``autograd_truth`` recomputes, in a separate identical run without the tool, the gradients a module backward
record must hold (tensor hooks on identity views of the module's inputs and outputs, see there).
"""
from __future__ import annotations

import contextlib
import glob
import json
import os

import torch

from msprobe.pytorch import PrecisionDebugger


def _autocast(dtype):
    if dtype == "bf16":
        return torch.autocast("cpu", dtype=torch.bfloat16)
    return contextlib.nullcontext()


def _grads(model):
    return {n: (p.grad.clone() if p.grad is not None else None) for n, p in model.named_parameters()}


def plain_step(case, dtype="fp32"):
    with _autocast(dtype):
        loss = case.loss(case.model(**case.inputs()))
    loss.backward()
    return loss.detach().clone(), _grads(case.model)


def write_config(path, dump_dir, task="statistics", level="mix", summary_mode="statistics"):
    cfg = {"task": task, "dump_path": str(dump_dir), "rank": [], "step": [], "level": level, "async_dump": False}
    if task == "statistics":
        cfg["statistics"] = {"scope": [], "list": [], "data_mode": ["all"], "summary_mode": summary_mode}
    with open(path, "w", encoding="utf-8") as f:
        json.dump(cfg, f)
    return str(path)


def dump_step(case, dump_dir, task="statistics", level="mix", summary_mode="statistics", dtype="fp32"):
    """One step under a fresh PrecisionDebugger; returns (loss, grads, rank dir of the dump)."""
    os.makedirs(dump_dir, exist_ok=True)
    cfg = write_config(os.path.join(dump_dir, "config.json"), os.path.join(dump_dir, "dump"), task, level,
                       summary_mode)
    PrecisionDebugger._reset_for_tests()
    try:
        debugger = PrecisionDebugger(config_path=cfg)
        debugger.start(model=case.model)
        try:
            with _autocast(dtype):
                loss = case.loss(case.model(**case.inputs()))
            loss.backward()
        finally:
            debugger.stop()
            debugger.step()
    finally:
        PrecisionDebugger._reset_for_tests()
    return loss.detach().clone(), _grads(case.model), os.path.join(dump_dir, "dump", "step0", "rank")


def load_data(rank_dir):
    with open(os.path.join(rank_dir, "dump.json"), encoding="utf-8") as f:
        return json.load(f)["data"]


def compare(target_rank_dir, golden_rank_dir, out_dir):
    """Our ``msprobe compare`` of two rank dirs, csv; returns the report as a pandas DataFrame."""
    import pandas as pd

    from msprobe.cli.main import main

    rc = main(["compare", "-tp", target_rank_dir, "-gp", golden_rank_dir, "-o", out_dir, "--csv", "-q"])
    assert rc in (0, 1), rc
    reports = sorted(glob.glob(os.path.join(out_dir, "compare_result_*.csv")))
    assert len(reports) == 1, reports
    return pd.read_csv(reports[0], keep_default_na=False, dtype=str)


def _alias(value, grads, slots):
    """``value`` with every tensor that requires grad (alone, or in a tuple/list) replaced by an identity view
    of it; the view's gradient is stored in ``grads[k]`` by a tensor hook (``None`` when none arrives).
    Returns (new value, handled); a structure other than tensor/tuple/list is left alone (not handled)."""
    if isinstance(value, torch.Tensor):
        if not value.requires_grad:
            return value, True
        k = len(slots)
        slots.append(k)
        grads.append(None)
        view = value.view_as(value)

        def keep(g, k=k):
            grads[k] = g.detach().clone()
        view.register_hook(keep)
        return view, True
    if isinstance(value, (tuple, list)) and type(value) in (tuple, list):
        items, ok = [], True
        for v in value:
            nv, handled = _alias(v, grads, slots)
            ok = ok and handled
            items.append(nv)
        return type(value)(items), ok
    if value is None or isinstance(value, (int, float, bool, str)):
        return value, True
    return value, False


def autograd_truth(case, select):
    """What a module backward record must hold, from a plain fp32 step of ``case`` without the tool, for every
    module ``select(name, module)`` keeps that runs exactly once and returns tensors (alone or in tuples):
    ``{record prefix: {"input": [...], "output": [...], "leaf": bool, "params": {name: grad}}}``.

    Each positional input and each output of such a module is routed through an identity view made in its
    forward hooks, with a tensor hook on the view: the view of an input is consumed only inside the module, so
    its gradient is the module's own share of that input's gradient; the view of an output is what the code
    outside the module consumes, so its gradient is what reaches the output from outside (``None`` when
    nothing outside uses it). ``params``: ``param.grad``."""
    calls, info, hooks = {}, {}, []
    for name, mod in case.model.named_modules():
        if not name or not select(name, mod):
            continue

        def pre(m, args, name=name):
            calls[name] = calls.get(name, 0) + 1
            ins = {"grads": [], "ok": True}
            new, ok = _alias(args, ins["grads"], [])
            ins["ok"] = ok
            info.setdefault(name, []).append({"mod": m, "in": ins})
            return new if ok else None

        def fwd(m, args, out, name=name):
            rec = info[name][-1]
            outs = {"grads": []}
            new, ok = _alias(out, outs["grads"], [])
            rec["out"] = outs
            rec["ok"] = ok and rec["in"]["ok"]
            return new if ok else None
        hooks.append(mod.register_forward_pre_hook(pre))
        hooks.append(mod.register_forward_hook(fwd))
    try:
        loss = case.loss(case.model(**case.inputs()))
    finally:
        for h in hooks:
            h.remove()
    loss.backward()
    truth = {}
    for name, recs in info.items():
        if calls[name] != 1 or not recs[0].get("ok"):
            continue
        r = recs[0]
        prefix = f"Module.{name}.{type(r['mod']).__name__}"
        truth[prefix] = {"input": r["out"]["grads"], "output": r["in"]["grads"],
                         "leaf": not any(True for _ in r["mod"].children()),
                         "params": {pn: p.grad.detach().clone() for pn, p in r["mod"].named_parameters(recurse=False)
                                    if p.grad is not None}}
    return truth, loss.detach()
