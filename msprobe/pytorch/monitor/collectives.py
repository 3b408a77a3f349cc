"""``cc_distribution``: statistics of the tensors of communication calls (spec 4.5.5).

The functions of ``torch.distributed`` the reference lists (``OPS``) are replaced, in ``torch.distributed`` and
``torch.distributed.distributed_c10d``, by wrappers; ``Work.wait`` too, for the async calls.  On a collected
step, a call whose Python stack matches one of ``cc_codeline`` (all calls when the list is empty) gets, for its
i-th tensor argument (a list of tensors or of ``P2POp`` counts as one, its tensors' values together), the
statistics with kind ``post_{i}`` after the call (an async call: when its ``wait()`` returns) and, with
``cc_pre_hook``, ``pre_{i}`` before it.  Tag ``{op}/rank{R}/{post|pre}_{i}``, e.g. ``all_reduce/rank0/post_0``.
The calls of one op in a step are aggregated as the reference does (min of the mins, max of the maxes, sum of
the norms and of the NaN counts, mean of the means and of the zero fractions) into the ``other`` output.
``cc_log_only``: only the call stacks are collected and printed at the second step (the reference then stops
the training; here collecting stops).  Outside a collected step a wrapper costs one flag check.

Create ``TrainerMon`` before the libraries that call these functions keep their own references to them
(``from torch.distributed import all_reduce`` made earlier is not seen).  DDP's reducer communicates in C++ and
is not seen either (as in the reference).
"""

from __future__ import annotations

import functools
import re
import traceback

import torch
import torch.distributed as dist

OPS = ("send", "recv", "isend", "irecv", "batch_isend_irecv", "broadcast", "all_reduce", "reduce", "scatter",
       "reduce_scatter", "_reduce_scatter_base", "reduce_scatter_tensor", "all_gather", "gather", "_all_gather_base",
       "all_gather_into_tensor")
_SKIP_STACK = re.compile(r"msprobe[/\\]pytorch[/\\]monitor|torch[/\\]nn[/\\]modules[/\\]module\.py|multiprocessing|"
                         r"debugpy")


def call_stack() -> str:
    """'path[line]   func' of the Python frames (this tool's, torch.nn.Module's and multiprocessing's left out),
    joined by ';' as the reference's."""
    out = []
    for fr in reversed(traceback.extract_stack()):
        line = f"{fr.filename}[{fr.lineno}]"
        if not _SKIP_STACK.search(line):
            out.append(f"{line}   {fr.name}")
    return ";".join(out)


def _tensor_args(args):
    """[(index, tensor or list of tensors)] of a call's arguments, as the reference numbers them."""
    found = []
    for a in args:
        if isinstance(a, torch.Tensor):
            found.append(a)
        elif isinstance(a, (list, tuple)) and a:
            if all(isinstance(x, torch.Tensor) for x in a):
                found.append(list(a))
            elif all(isinstance(x, dist.P2POp) for x in a):
                found.append([x.tensor for x in a])
    return list(enumerate(found))


class Collectives:
    def __init__(self, monitor, codeline, pre_hook, log_only):
        self.mon = monitor
        self.codeline = [re.compile(c) for c in codeline]
        self.pre_hook = pre_hook
        self.log_only = log_only
        self.stacks = {}                 # cc_log_only: op -> set of stacks
        self.pending = {}                # Work -> (op, args)
        self.originals = {}
        self.orig_wait = None
        self.active = True

    # -------------------------------------------------------------------------------------------- patching
    def install(self):
        for mod in (dist, dist.distributed_c10d):
            for name in OPS:
                fn = getattr(mod, name, None)
                if fn is None or getattr(fn, "_msprobe_cc", False):
                    continue
                self.originals[(mod, name)] = fn
                setattr(mod, name, self._wrap(name, fn))
        work = getattr(dist, "Work", None)
        if work is not None and not getattr(work.wait, "_msprobe_cc", False):
            self.orig_wait = work.wait
            orig, pending, owner = work.wait, self.pending, self

            def wait(w, *args, **kwargs):
                result = orig(w, *args, **kwargs)
                item = pending.pop(w, None)
                if item is not None and owner.mon._on:
                    try:
                        owner._record(item[0], item[1], "post")
                    except Exception as exc:   # noqa: BLE001
                        owner.mon._fail(f"monitor.cc.{item[0]}", exc)
                return result
            wait._msprobe_cc = True
            work.wait = wait

    def remove(self):
        for (mod, name), fn in self.originals.items():
            setattr(mod, name, fn)
        self.originals = {}
        if self.orig_wait is not None:
            dist.Work.wait = self.orig_wait
            self.orig_wait = None
        self.active = False

    def _wrap(self, name, fn):
        me = self

        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            if not (me.active and me.mon._on):
                return fn(*args, **kwargs)
            try:
                chosen = me._chosen(name)
                allargs = args + tuple(kwargs.values())
                if chosen and me.pre_hook and not me.log_only:
                    me._record(name, allargs, "pre")
            except Exception as exc:   # noqa: BLE001
                me.mon._fail(f"monitor.cc.{name}", exc)
                chosen = False
            out = fn(*args, **kwargs)
            if chosen and not me.log_only:
                try:
                    works = out if isinstance(out, list) else [out]
                    works = [w for w in works if isinstance(w, dist.Work)]
                    if works:                        # async: when its wait() returns
                        for w in works:
                            me.pending[w] = (name, allargs)
                    else:
                        me._record(name, allargs, "post")
                except Exception as exc:   # noqa: BLE001
                    me.mon._fail(f"monitor.cc.{name}", exc)
            return out
        wrapper._msprobe_cc = True
        return wrapper

    def _chosen(self, name):
        if self.log_only:
            self.stacks.setdefault(name, set()).add(call_stack())
            return False
        if not self.codeline:
            return True
        stack = call_stack()
        return any(p.search(stack) for p in self.codeline)

    # -------------------------------------------------------------------------------------------- records
    def _record(self, name, args, prefix):
        mon = self.mon
        for i, t in _tensor_args(args):
            tag = f"{name}/rank{mon.rank}/{prefix}_{i}"
            if isinstance(t, list):
                t = torch.stack([x.detach().reshape(-1) for x in t]) if len({x.shape for x in t}) == 1 \
                    else torch.cat([x.detach().reshape(-1) for x in t])
            mon._add_cc(tag, t)

    def end_step(self):
        """Async calls not waited for by the end of the step are dropped (their tensors are not kept)."""
        self.pending.clear()

    def log_stacks(self):
        import json
        import logging
        logging.getLogger("msprobe").warning("> Used communication ops and corresponding stack\n%s",
                                          json.dumps({k: sorted(v) for k, v in self.stacks.items()}, indent=2))
