"""2-rank gloo training of a tiny ``transformers`` model (builders.build) under DDP, FSDP2 (fully_shard) or
FSDP1 (use_orig_params), with or without msprobe's dump, for tests/test_real_models_distributed.py.

``python -m real_models.dist OUT JOBS_JSON`` (run with tests/ on sys.path) spawns 2 processes; each runs
every job in order (2 steps each: forward, backward, SGD step) and saves ``OUT/{job}_r{rank}.pt``:

* ``losses``: the 2 losses; ``grads``: per step, every parameter's ``.grad`` after backward as torch holds it
  on this rank (DDP: the all-reduced average; FSDP2: the local shard of the sharded DTensor gradient;
  FSDP1: the local piece of the flat gradient, ``None`` where this rank holds no element);
* ``full``: per step, every parameter's whole averaged gradient (FSDP2: ``full_tensor()``);
* ``local`` (DDP jobs): per step, the gradient each parameter received on this rank before DDP's
  all-reduce (tensor hooks that return nothing; registered before the debugger's, so they see the same).

A job: ``{"name", "wrap": "ddp"|"fsdp2"|"fsdp2_bf16"|"fsdp1", "arch", "dump": null|{"level", "mode"}, "fault": null|
"act"|"grad"|"nan"}``; faults are planted on rank 1 only: ``act`` multiplies layer 1's MLP activation output
by 1.05 (a forward hook on ``mlp.act_fn``), ``grad`` multiplies the gradient of layer 1's
``mlp.down_proj.weight`` by 1.5 (a tensor hook, before DDP's reduce), ``nan`` writes a NaN into layer 1's MLP
activation output (``o[0, 0, 0] = nan`` in a forward hook: recorded as ``Tensor.__setitem__``), ``gradnan``
writes a NaN into the gradient of layer 1's ``mlp.down_proj.weight`` (a tensor hook, before DDP's reduce).
The dump of a job is in ``OUT/{name}/step{0,1}/rank{0,1}``.
"""
from __future__ import annotations

import json
import os
import socket
import sys

import torch
import torch.distributed as dist

WORLD = 2
STEPS = 2


def _layers(model):
    return model.model.layers if hasattr(model, "model") else model.transformer.h


def _mlp_act(model):
    layer = _layers(model)[1]
    return layer.mlp.act_fn if hasattr(layer.mlp, "act_fn") else layer.mlp.act


def _wrap(kind, model):
    if kind == "ddp":
        from torch.nn.parallel import DistributedDataParallel
        return DistributedDataParallel(model)
    if kind in ("fsdp2", "fsdp2_bf16"):
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
        mesh = init_device_mesh("cpu", (WORLD,))
        kw = {"mp_policy": MixedPrecisionPolicy(param_dtype=torch.bfloat16)} if kind == "fsdp2_bf16" else {}
        for layer in _layers(model):
            fully_shard(layer, mesh=mesh, **kw)
        fully_shard(model, mesh=mesh, **kw)
        return model
    if kind == "fsdp1":
        from torch.distributed.fsdp import FullyShardedDataParallel
        # without device_id FSDP1 refuses a CPU-only machine ("FSDP needs a non-CPU accelerator device")
        return FullyShardedDataParallel(model, use_orig_params=True, device_id=torch.device("cpu"))
    raise KeyError(kind)


def _plant(fault, model, rank):
    if not fault or rank != 1:
        return
    if fault == "act":
        _mlp_act(model).register_forward_hook(lambda m, a, o: o * 1.05)
    elif fault == "grad":
        _layers(model)[1].mlp.down_proj.weight.register_hook(lambda g: g * 1.5)
    elif fault == "gradnan":
        def nan_grad(g):
            g = g.clone()
            g[0, 0] = float("nan")
            return g
        _layers(model)[1].mlp.down_proj.weight.register_hook(nan_grad)
    elif fault == "nan":
        def nanify(m, a, o):
            o = o.clone()
            o[0, 0, 0] = float("nan")
            return o
        _mlp_act(model).register_forward_hook(nanify)
    else:
        raise KeyError(fault)


def _run(job, out, rank):
    from msprobe.pytorch import PrecisionDebugger

    from real_models.builders import VOCAB, build

    case = build(job.get("arch", "llama"))
    model = case.model
    _plant(job.get("fault"), model, rank)
    local = [{} for _ in range(STEPS)]
    cur = [0]
    if job["wrap"] == "ddp":
        for n, p in model.named_parameters():
            p.register_hook(lambda g, n=n: local[cur[0]].__setitem__(n, g.detach().clone()))
    wrapped = _wrap(job["wrap"], model)
    opt = torch.optim.SGD(wrapped.parameters(), lr=0.1)
    dbg = None
    if job.get("dump"):
        d = job["dump"]
        cfg = {"task": "statistics", "dump_path": os.path.join(out, job["name"]), "rank": [], "step": [],
               "level": d.get("level", "mix"), "async_dump": False,
               "statistics": {"scope": [], "list": [], "data_mode": ["all"],
                              "summary_mode": d.get("mode", "statistics")}}
        path = os.path.join(out, f"{job['name']}_config{rank}.json")
        with open(path, "w", encoding="utf-8") as f:
            json.dump(cfg, f)
        PrecisionDebugger._reset_for_tests()
        dbg = PrecisionDebugger(config_path=path)
    g = torch.Generator().manual_seed(100 + rank)
    losses, grads, full = [], [], []
    for step in range(STEPS):
        cur[0] = step
        ids = torch.randint(1, VOCAB, (2, 16), generator=g)
        if dbg:
            dbg.start(model=wrapped)
        loss = wrapped(input_ids=ids, labels=ids.clone()).loss
        loss.backward()
        if dbg:
            dbg.stop()
        losses.append(loss.detach().clone())
        grads.append({n: (None if p.grad is None else
                          (p.grad.to_local() if hasattr(p.grad, "to_local") else p.grad).detach().clone())
                      for n, p in wrapped.named_parameters()})
        if job["wrap"].startswith("fsdp2"):
            full.append({n: p.grad.full_tensor().detach().clone() for n, p in wrapped.named_parameters()})
        elif job["wrap"] == "ddp":
            full.append({n: p.grad.detach().clone() for n, p in wrapped.named_parameters()})
        opt.step()
        opt.zero_grad()
        if dbg:
            dbg.step()
    if dbg:
        PrecisionDebugger._reset_for_tests()
    torch.save({"losses": losses, "grads": grads, "full": full, "local": local},
               os.path.join(out, f"{job['name']}_r{rank}.pt"))


def _worker(rank, out, jobs, port):
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    for p in (here, os.path.dirname(here)):
        if p not in sys.path:
            sys.path.insert(0, p)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(WORLD))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=WORLD)
    try:
        for job in jobs:
            _run(job, out, rank)
            dist.barrier()
    finally:
        dist.destroy_process_group()


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main(argv):
    import torch.multiprocessing as mp

    out, jobs = argv[0], json.loads(argv[1])
    mp.spawn(_worker, args=(out, jobs, _free_port()), nprocs=WORLD, join=True)


if __name__ == "__main__":
    main(sys.argv[1:])
