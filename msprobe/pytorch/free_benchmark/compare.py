"""Comparing an API's original and re-run outputs, chunk by chunk (rules: msprobe.core.free_benchmark.rules)."""
import math

import torch

from msprobe.core.free_benchmark import rules


def output_pairs(out, pout):
    """(output_index or None, original, re-run) for every float tensor output present in both."""
    if isinstance(out, torch.Tensor):
        if isinstance(pout, torch.Tensor):
            yield None, out, pout
        return
    if type(out).__module__ == "torch.return_types" and hasattr(out, "values"):
        if isinstance(out.values, torch.Tensor) and isinstance(getattr(pout, "values", None), torch.Tensor):
            yield None, out.values, pout.values
        return
    if isinstance(out, (list, tuple)) and isinstance(pout, (list, tuple)) and len(out) == len(pout):
        for i, (o, p) in enumerate(zip(out, pout)):
            if isinstance(o, torch.Tensor) and isinstance(p, torch.Tensor):
                yield i, o, p


def comparable(o, p):
    return (o.is_floating_point() and p.is_floating_point() and o.numel() == p.numel()
            and not o.is_meta and not p.is_meta)


def _pieces(o, p):
    n = rules.chunk_count(p.numel() * p.element_size())
    o = o.detach().reshape(-1)
    p = p.detach().reshape(-1)
    return zip(o.chunk(n), p.chunk(n)) if n > 1 else ((o, p),)


def ratio(orig, pert, tol):
    """max over pieces of max(|o|/|p|, |p|/|o|) with both clamped to >= tol, or SYMBOL_FLIPPING.

    The original is cast to the re-run's dtype and device one piece at a time, so the temporaries stay a small
    fraction of the tensor (rules.chunk_count)."""
    if pert.numel() == 0:
        return 1.0
    worst = 1.0
    for oc, pc in _pieces(orig, pert):
        oc = oc.to(device=pc.device, dtype=pc.dtype)
        r = oc.abs().clamp_min(tol).div_(pc.abs().clamp_min(tol))
        r.nan_to_num_(nan=1.0, posinf=math.inf, neginf=-math.inf)
        lo, hi = torch.aminmax(r)
        prod_min, lo, hi = torch.stack([(oc * pc).min().to(r.dtype), lo, hi]).tolist()
        if prod_min < -tol * tol:
            return rules.SYMBOL_FLIPPING
        worst = max(worst, rules.chunk_ratio(hi, lo))
    return worst


def single_benchmark(actual, golden):
    """The CPU rule (spec 2.5 "single benchmark"): True when ``actual`` agrees with the CPU ``golden``."""
    if not torch.isfinite(golden).all():
        return True
    rtol, small, atol, balance = rules.single_benchmark_limits(actual.dtype)
    abs_err = rel_err = 0.0
    eb_sum = 0.0
    for ac, gc in _pieces(actual, golden):
        a = ac.to(torch.float64)
        a = torch.where(torch.isfinite(a), a, torch.ones_like(a))
        g = gc.to(device=a.device, dtype=torch.float64)
        diff = a - g
        dabs = diff.abs()
        gabs = g.abs()
        small_a = a.abs() < small
        zero = torch.zeros((), dtype=torch.float64, device=a.device)
        ae = torch.where(small_a, dabs, zero).max()
        re = torch.where(small_a, zero, dabs / gabs).max()
        eb = (diff / torch.where(gabs >= small, gabs, torch.ones_like(gabs))).sum()
        ae, re, eb = torch.stack([ae, re, eb]).tolist()
        abs_err, rel_err, eb_sum = max(abs_err, ae), max(rel_err, re), eb_sum + eb
    eb_mean = eb_sum / max(actual.numel(), 1)
    return not (abs_err > atol or rel_err > rtol or eb_mean > balance)
