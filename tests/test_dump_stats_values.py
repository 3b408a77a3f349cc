"""StatBuffer's numbers equal torch's own reductions, for every layout the float32 CPU fast path takes.

Max and Min of float32 CPU tensors come from numpy's reductions on a view of the tensor's memory (faster than
``torch.aminmax``, most of all on transposed views); this checks them, the Mean and the Norm against torch on
contiguous, transposed, sliced, expanded and non-finite tensors, and that the general path (bf16, int,
float64, bool, 0-dim) is unchanged.
"""
import math

import pytest

torch = pytest.importorskip("torch")

from msprobe._native import f32_stats  # noqa: E402
from msprobe.core.dump.writer import NonFinite  # noqa: E402
from msprobe.pytorch.dump import stats as stats_mod  # noqa: E402
from msprobe.pytorch.dump.stats import StatBuffer  # noqa: E402


def _expected(t):
    f = t.float()
    mx, mn = torch.max(f).item(), torch.min(f).item()
    mean = torch.mean(f).item()
    norm = torch.linalg.vector_norm(f).item()
    return mx, mn, mean, norm


def _same(a, b, rel=0.0):
    if isinstance(a, NonFinite):   # NaN / Infinity are written as bare literals through these markers
        a = float(a.literal.replace("Infinity", "inf"))
    if isinstance(b, float) and math.isnan(b):
        return isinstance(a, float) and math.isnan(a)
    if isinstance(b, float) and math.isinf(b):
        return a == b
    return abs(a - b) <= rel * abs(b)


def _cases():
    g = torch.Generator().manual_seed(7)
    base = torch.randn(2, 3, 64, 48, generator=g)
    nan = base.clone()
    nan[1, 2, 5, 7] = float("nan")
    inf = base.clone()
    inf[0, 0, 0, 0] = float("inf")
    ninf = base.clone()
    ninf[1, 1, 1, 1] = float("-inf")
    return {
        "contiguous": base,
        "transposed": base.transpose(-1, -2),
        "permuted": base.permute(3, 1, 0, 2),
        "sliced": base[:, 1:, ::3, 5:40],
        "expanded": torch.randn(1, 48, generator=g).expand(30, 48),
        "one_element": torch.tensor([-3.5]),
        "negative_zero": torch.tensor([-0.0, -1.0, -2.0]),
        "nan": nan,
        "nan_transposed": nan.transpose(0, 3),
        "inf": inf,
        "minus_inf": ninf,
        "big": torch.full((1000,), 3.0e38),   # the sum overflows float32: Max/Min stay exact
    }


@pytest.mark.parametrize("kernel", [True, False], ids=["kernel", "no_kernel"])
@pytest.mark.parametrize("exact_norm", [False, True])
@pytest.mark.parametrize("name", list(_cases()))
def test_float32_cpu_statistics_equal_torch(name, exact_norm, kernel, monkeypatch):
    if not kernel:      # a machine where msprobe/_native was not built: numpy Max/Min, torch sums
        monkeypatch.setattr(stats_mod, "_F32_STATS", None)
    t = _cases()[name]
    buf = StatBuffer(exact_norm=exact_norm)
    rec = {}
    slot = buf.add(rec, t, orig=t)
    assert slot is not None and slot.kind in (5, 6, 7)
    if exact_norm:
        assert slot.kind == 6          # torch's own sum and vector_norm, to the bit
    elif kernel and f32_stats is not None and (t.is_contiguous() or (t.dim() >= 2 and t.stride()[-1] == 1)):
        assert slot.kind == 7          # the one-pass kernel (row by row for a strided view)
    elif not t.is_contiguous():
        assert slot.kind == 6
    buf.resolve()
    mx, mn, mean, norm = _expected(t)
    assert _same(rec["Max"], mx) and _same(rec["Min"], mn), (rec, mx, mn)
    # a mean is judged at the tensor's magnitude: torch's float32 sum of a zero-mean tensor carries
    # summation-order noise that the kernel's double sums do not
    if math.isfinite(mean) and math.isfinite(mx) and math.isfinite(mn):
        assert abs(rec["Mean"] - mean) <= 2 ** -20 * max(abs(mx), abs(mn)), (rec["Mean"], mean)
    else:
        assert _same(rec["Mean"], mean), (rec["Mean"], mean)
    assert _same(rec["Norm"], norm, 0.0 if slot.kind == 6 else 2 ** -20), (rec["Norm"], norm)


@pytest.mark.skipif(f32_stats is None, reason="the compiled kernel msprobe/_native/_fstats was not built")
@pytest.mark.parametrize("n", [1, 15, 16, 17, 255, 256, 257, 4096 + 3, 100_003])
def test_kernel_against_float64(n):
    """Every length (vector body, block edge, scalar tail) and every position of a NaN / inf."""
    g = torch.Generator().manual_seed(n)
    t = torch.randn(n, generator=g) * 100
    a = t.numpy()
    mx, mn, total, sq = f32_stats(a)
    d = t.double()
    assert (mx, mn) == (float(t.max()), float(t.min()))
    assert abs(total - float(d.sum())) <= 1e-6 * float(d.abs().sum())
    assert abs(sq - float((d * d).sum())) <= 1e-6 * float((d * d).sum())
    for pos in sorted({0, n // 2, n - 1}):
        b = t.clone()
        b[pos] = float("nan")
        assert all(math.isnan(v) for v in f32_stats(b.numpy())), pos
        b[pos] = float("inf")
        r = f32_stats(b.numpy())
        assert r[0] == math.inf and r[2] == math.inf and r[3] == math.inf, pos
        b[pos] = float("-inf")
        r = f32_stats(b.numpy())
        assert r[1] == -math.inf and r[2] == -math.inf, pos
    with pytest.raises(TypeError):
        f32_stats(t.double().numpy())
    with pytest.raises((TypeError, ValueError, BufferError)):
        f32_stats(t.reshape(-1, 1).expand(-1, 2).numpy())


def test_general_path_dtypes_unchanged():
    g = torch.Generator().manual_seed(3)
    cases = {
        "bf16": (torch.randn(40, 30, generator=g).bfloat16(), "torch.bfloat16"),
        "f64": (torch.randn(40, 30, generator=g, dtype=torch.float64), None),
        "int": (torch.randint(-50, 50, (17, 9), generator=g), None),
        "f64_transposed": (torch.randn(40, 30, generator=g, dtype=torch.float64).t(), None),
    }
    buf = StatBuffer()
    recs = {}
    for k, (t, _) in cases.items():
        recs[k] = {}
        buf.add(recs[k], t)
    flag = {}
    buf.add(flag, torch.tensor([True, False, True]))
    scalar = {}
    buf.add(scalar, torch.tensor(2.5))
    buf.resolve()
    for k, (t, low) in cases.items():
        mx, mn, mean, norm = _expected(t)
        rel = 2 ** -7 if low else 2 ** -20
        assert _same(recs[k]["Max"], mx) and _same(recs[k]["Min"], mn), k
        assert _same(recs[k]["Mean"], mean, rel), (k, recs[k]["Mean"], mean)
        assert _same(recs[k]["Norm"], norm, rel), (k, recs[k]["Norm"], norm)
    assert (flag["Max"], flag["Min"]) == (True, False)
    assert (scalar["Max"], scalar["Min"], scalar["Mean"], scalar["Norm"]) == (2.5, 2.5, 2.5, 2.5)


def test_shared_value_and_in_place_change():
    """A tensor recorded twice unchanged shares one slot; after an in-place change it gets new numbers."""
    t = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    buf = StatBuffer()
    a, b, c = {}, {}, {}
    s1 = buf.add(a, t, orig=t)
    assert buf.cached(t, b) is s1
    t.mul_(2)
    assert buf.cached(t, c) is None
    buf.add(c, t, orig=t)
    buf.resolve()
    assert (a["Max"], a["Min"], b["Max"]) == (11.0, 0.0, 11.0)
    assert (c["Max"], c["Min"], c["Mean"]) == (22.0, 0.0, 11.0)


def test_released_storage_is_never_read():
    """numpy views and copy_ do not check the storage: a tensor whose storage was released (FSDP frees
    parameters this way) must get no statistics and no snapshot, not a read of freed memory (a crash)."""
    from msprobe.pytorch.dump.stats import storage_covers
    t = torch.randn(64, 64)
    v = t[8:, 4:]
    assert storage_covers(t) and storage_covers(v) and storage_covers(t.t())
    t.untyped_storage().resize_(0)
    assert not storage_covers(t) and not storage_covers(v)
    buf = StatBuffer()
    assert buf._add_f32_cpu({}, t) is None
    flipped = torch.randn(10).flip(0)
    assert storage_covers(flipped)


@pytest.mark.skipif(f32_stats is None, reason="the compiled kernel msprobe/_native/_fstats was not built")
def test_kernel_rows_of_strided_views():
    """A view whose last dimension is contiguous is read row by row; other strides are refused (TypeError:
    the caller takes numpy/torch)."""
    g = torch.Generator().manual_seed(5)
    b = torch.randn(2, 37, 4, 19, generator=g)
    b[1, 30, 2, 7] = -50.0
    views = [b.permute(0, 2, 1, 3), b[:, 3:, :, :], b[..., 2:17], b.unsqueeze(0).expand(3, 2, 37, 4, 19)]
    for v in views:
        mx, mn, total, sq = f32_stats(v.numpy())
        d = v.double()
        assert (mx, mn) == (float(v.max()), float(v.min())), v.stride()
        assert abs(total - float(d.sum())) <= 1e-6 * float(d.abs().sum())
        assert abs(sq - float((d * d).sum())) <= 1e-6 * float((d * d).sum())
    nan = b.permute(0, 2, 1, 3).clone().permute(0, 2, 1, 3)
    nan[0, 0, 0, 0] = float("nan")
    assert all(math.isnan(x) for x in f32_stats(nan.numpy()))
    for bad in (b.transpose(-1, -2), b.reshape(-1)[::2]):
        with pytest.raises(TypeError):
            f32_stats(bad.numpy())


@pytest.mark.skipif(f32_stats is None, reason="the compiled kernel msprobe/_native/_fstats was not built")
def test_portable_loop_equals_vector_loop():
    """The portable scalar loop (CPUs without AVX2, other architectures) gives the same numbers as the vector
    one, on contiguous buffers and on rows: run in a child with MSPROBE_FSTATS_PORTABLE=1."""
    import json
    import os
    import subprocess
    import sys
    code = (
        "import json, torch\n"
        "from msprobe._native import f32_stats\n"
        "g = torch.Generator().manual_seed(11)\n"
        "b = torch.randn(3, 41, 5, 37, generator=g) * 7\n"
        "print(json.dumps([f32_stats(v.numpy()) for v in (b, b.permute(0, 2, 1, 3), b[..., 3:30], b.reshape(-1)[:17])]))\n"
    )
    out = {}
    for portable in (False, True):
        env = {k: v for k, v in os.environ.items() if k != "MSPROBE_FSTATS_PORTABLE"}
        if portable:
            env["MSPROBE_FSTATS_PORTABLE"] = "1"
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
        assert r.returncode == 0, r.stderr[-2000:]
        out[portable] = json.loads(r.stdout.strip().splitlines()[-1])
    for vec, port in zip(out[False], out[True]):
        assert vec[:2] == port[:2]
        assert vec[2] == pytest.approx(port[2], rel=1e-6, abs=1e-3)
        assert vec[3] == pytest.approx(port[3], rel=1e-6)
