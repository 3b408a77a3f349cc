"""The statistics cache (msprobe.pytorch.dump.stats.StatBuffer): a tensor, or a contiguous alias of it (a view,
a reshape, the gradient autograd hands on as a view), recorded again unchanged reuses the statistics; any
write in between (through the alias or its base) makes it measure again; the values are those of the tensor."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from msprobe.pytorch.dump.stats import StatBuffer  # noqa: E402


def _rec(buf, t):
    rec = {}
    slot = buf.cached(t, rec)
    if slot is None:
        buf.add(rec, t.detach(), t)
    return rec


def _want(t):
    d = t.detach().double()
    return d.max().item(), d.min().item(), d.mean().item(), d.norm().item()


def _check(rec, t):
    got = (rec["Max"], rec["Min"], rec["Mean"], rec["Norm"])
    for g, w in zip(got, _want(t)):
        assert g == pytest.approx(w, rel=1e-5, abs=1e-6)


def test_contiguous_alias_reuses_and_write_through_base_invalidates():
    torch.manual_seed(0)
    base = torch.randn(4, 6)
    buf = StatBuffer()
    r1 = _rec(buf, base)
    view = base.view(2, 12)
    assert buf.cached(view, {}) is not None           # same elements, same order: shared
    r2 = _rec(buf, base.reshape(24))
    base.add_(1.0)                                     # bumps the version counter shared with every view
    r3 = _rec(buf, view)
    buf.resolve()
    _check(r1, base - 1.0)
    _check(r2, base - 1.0)
    _check(r3, base)


def test_non_contiguous_or_partial_alias_is_measured_afresh():
    torch.manual_seed(1)
    base = torch.randn(4, 6)
    buf = StatBuffer()
    _rec(buf, base)
    assert buf.cached(base.t(), {}) is None            # other order
    assert buf.cached(base[1:], {}) is None            # other elements
    assert buf.cached(base.view(torch.int32), {}) is None   # other dtype
    r = _rec(buf, base[1:])
    buf.resolve()
    _check(r, base[1:])


def test_alias_of_a_freed_tensor_is_not_trusted():
    buf = StatBuffer()
    a = torch.full((1000,), 2.0)
    _rec(buf, a)
    del a
    b = torch.full((1000,), 3.0)                       # may get the freed memory
    r = _rec(buf, b)
    buf.resolve()
    _check(r, b)
