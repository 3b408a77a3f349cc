"""Tensor-task snapshots: copies taken when the record is made, into recycled buffers, are what the files hold."""
import pytest

torch = pytest.importorskip("torch")

from msprobe.pytorch.dump import collector as col  # noqa: E402


def _load(path):
    return torch.load(path, weights_only=True)


def test_snapshot_keeps_value_at_record_time_and_reuses_buffers(tmp_path):
    w = col.TensorWriter(False, threaded=True)
    t = torch.arange(64 * 1024, dtype=torch.float32).reshape(256, 256)
    expected = []
    for step in range(4):
        path = str(tmp_path / f"x{step}.pt")
        w.save_snapshot(t.t(), path)            # a transposed view: the snapshot is compact
        expected.append(t.t().clone())
        t.add_(1000.0)                          # in place, after the record, before the file is written
        w.wait()
    for step in range(4):
        got = _load(str(tmp_path / f"x{step}.pt"))
        assert got.is_contiguous() and got.shape == (256, 256)
        assert torch.equal(got, expected[step]), step
    # the four snapshots of one size used one recycled buffer
    assert sum(len(v) for v in w._pool._free.values()) == 1
    w.release()
    assert w._pool._free == {} and w._pool._held == 0


def test_pool_is_bounded_and_small_tensors_are_cloned(tmp_path):
    k = 1024
    pool = col._SnapshotPool(limit=300 * k)
    a = pool.take(200 * k)
    assert a is not None and pool.take(200 * k) is None    # free + out would pass the limit: the caller clones
    pool.give(a)
    assert pool._held == 200 * k and pool._out == 0
    assert pool.take(400 * k) is None                       # bigger than the whole pool
    assert pool.take(200 * k) is a                          # the same size comes back recycled
    pool.give(a)
    c = pool.take(150 * k)          # a new size: the free 200 KiB buffer is let go to stay within the limit
    assert c is not None and pool._held == 0 and pool._out == 150 * k
    pool.give(c)
    assert pool._held == 150 * k and pool._out == 0
    w = col.TensorWriter(False, threaded=True)
    small = torch.ones(10, dtype=torch.bfloat16)
    w.save_snapshot(small, str(tmp_path / "s.pt"))
    small.zero_()
    w.wait()
    assert torch.equal(_load(str(tmp_path / "s.pt")), torch.ones(10, dtype=torch.bfloat16))
    assert w._pool._free == {}


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.int64, torch.bool, torch.complex64])
def test_snapshot_dtypes(tmp_path, dtype):
    w = col.TensorWriter(False, threaded=True)
    src = (torch.arange(40000) % 7).to(dtype)
    for k in range(2):
        w.save_snapshot(src, str(tmp_path / f"{k}.pt"))
        w.wait()
    for k in range(2):
        got = _load(str(tmp_path / f"{k}.pt"))
        assert got.dtype == dtype and torch.equal(got, src)
