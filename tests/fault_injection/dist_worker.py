"""The 2-rank cases: a small MLP on two gloo processes, with an all_reduce of the hidden activation in the
forward pass and an all_reduce of every parameter gradient after backward (data parallel by hand).

A collective fault is planted inside ``torch.distributed.all_reduce`` itself: the function the model calls
is replaced, before the debugger exists, by one that reduces and then (on the faulty call and rank)
multiplies the result, so the dump records one ``Distributed.all_reduce.N.forward`` whose output is wrong
on that rank, and no extra op.  ``reduce_op: "max"`` passes a wrong reduce op (an argument fault).
"""

from __future__ import annotations

import os
import socket
from pathlib import Path

import torch
import torch.distributed as dist
import torch.distributed.distributed_c10d as c10d
import torch.nn.functional as F

WORLD = 2
_STATE = {"calls": 0, "fault": {}, "rank": 0}


def _faulty_all_reduce(tensor, op=dist.ReduceOp.SUM, group=None, async_op=False):
    """all_reduce, then x scale on the rank and call listed in the active fault (``allreduce_out``)."""
    n = _STATE["calls"]
    _STATE["calls"] += 1
    work = _ORIG_ALL_REDUCE(tensor, op=op, group=group, async_op=async_op)
    scale = _STATE["fault"].get("allreduce_out", {}).get(f"{n}.{_STATE['rank']}")
    if scale is not None:
        if work is not None:
            work.wait()
        with torch.no_grad():
            tensor.mul_(scale)
    return work


_ORIG_ALL_REDUCE = c10d.all_reduce


def _one_run(case, side, out: Path, rank: int):
    from msprobe.pytorch import PrecisionDebugger

    from fault_injection.generate import precision_ctx, write_config
    from fault_injection.models import DistMLP, add_param_grad_faults

    fault = case.fault if side == "target" else case.golden_fault
    dtype = case.target_dtype if side == "target" else case.golden_dtype
    side_dir = out / case.name / side
    side_dir.mkdir(parents=True, exist_ok=True)
    cfg = write_config(out / case.name / f"config_{side}_{rank}.json", side_dir, case.task, case.level)
    _STATE.update(calls=0, fault=fault, rank=rank)
    PrecisionDebugger._reset_for_tests()
    torch.manual_seed(1234)
    net = DistMLP()
    add_param_grad_faults(net, fault)
    x = torch.randn(6, 16, generator=torch.Generator().manual_seed(100 + rank))
    y = torch.randn(6, 4, generator=torch.Generator().manual_seed(200 + rank))
    op = dist.ReduceOp.MAX if fault.get("reduce_op") == "max" else dist.ReduceOp.SUM
    dbg = PrecisionDebugger(config_path=str(cfg))
    try:
        dbg.start(net)
        with precision_ctx(dtype):
            out_t = net(x, lambda t: dist.all_reduce(t, op=op))
        loss = F.mse_loss(out_t.float(), y)
        loss.backward()
        for p in net.parameters():
            dist.all_reduce(p.grad)
        dbg.stop()
    finally:
        PrecisionDebugger._reset_for_tests()
    dist.barrier()


def _worker(rank, cases, out, port):
    import sys
    here = Path(__file__).resolve()
    for p in (str(here.parents[1]), str(here.parents[2])):
        if p not in sys.path:
            sys.path.insert(0, p)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(WORLD))
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    dist.init_process_group("gloo", rank=rank, world_size=WORLD)
    dist.all_reduce = _faulty_all_reduce  # what the model calls; the debugger wraps it like the original
    try:
        for case in cases:
            for side in ("target", "golden"):
                _one_run(case, side, Path(out), rank)
    finally:
        dist.all_reduce = _ORIG_ALL_REDUCE
        dist.destroy_process_group()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_dist(cases, out: Path) -> None:
    import torch.multiprocessing as mp

    mp.spawn(_worker, args=(list(cases), str(out), _free_port()), nprocs=WORLD, join=True)
