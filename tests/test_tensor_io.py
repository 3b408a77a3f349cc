"""Tests for msprobe.core.io.tensors (torch-free .pt/.npy reader) and msprobe.pytorch.tensor_io."""

import os
import pickle
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import numpy as np
import pytest

from msprobe.core.io import tensors as tio
from msprobe.core.io.tensors import TensorReadError, UnsupportedTensorFormat, load_pt, load_tensor

REPO = Path(__file__).resolve().parents[1]
FIXTURES = Path(__file__).resolve().parents[2] / "shared" / "fixtures"

FLOAT8_NAMES = ["float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz", "float8_e8m0fnu"]


@pytest.fixture(autouse=True)
def _no_fallback():
    """Every test starts and ends without a registered fallback."""
    tio.register_fallback(None)
    yield
    tio.register_fallback(None)


def _torch():
    return pytest.importorskip("torch")


def _expected(tensor):
    """What load_pt must return for ``tensor``: torch's own view of the data as numpy."""
    torch = _torch()
    t = tensor.detach()
    if t.dtype == torch.bfloat16 or "float8" in str(t.dtype):
        t = t.float()
    t = t.resolve_conj().resolve_neg()
    return t.numpy()


def _assert_same(actual, expected):
    assert isinstance(actual, np.ndarray)
    assert actual.dtype == expected.dtype, (actual.dtype, expected.dtype)
    assert actual.shape == expected.shape, (actual.shape, expected.shape)
    assert np.array_equal(actual, expected, equal_nan=actual.dtype.kind in "fc")
    # owns its memory (not a view on a buffer of the closed file) and is writable
    assert actual.flags.owndata and actual.flags.writeable and actual.flags.c_contiguous


def _save(tmp_path, tensor, name="t.pt"):
    torch = _torch()
    path = tmp_path / name
    torch.save(tensor, path)
    return path


def _random(torch, dtype, shape=(3, 5, 7), seed=0):
    gen = torch.Generator().manual_seed(seed)
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=gen).bool()
    if dtype.is_complex:
        return torch.randn(shape, dtype=dtype, generator=gen) * 100
    if dtype.is_floating_point:
        if dtype.itemsize == 1:  # float8: every byte pattern, some shuffled
            codes = torch.randint(0, 256, shape, generator=gen, dtype=torch.int64).to(torch.uint8)
            return codes.view(dtype)
        return (torch.randn(shape, dtype=torch.float64, generator=gen) * 1000).to(dtype)
    info = torch.iinfo(dtype)
    low, high = max(info.min, -(2 ** 62)), min(info.max, 2 ** 62)
    return torch.randint(low, high, shape, generator=gen, dtype=torch.int64).to(dtype)


# ------------------------------------------------------------------------------------------
# dtypes
# ------------------------------------------------------------------------------------------

DTYPE_NAMES = [
    "float16", "bfloat16", "float32", "float64", "int8", "int16", "int32", "int64", "uint8",
    "uint16", "uint32", "uint64", "bool", "complex64", "complex128",
] + FLOAT8_NAMES


@pytest.mark.parametrize("name", DTYPE_NAMES)
def test_dtype_roundtrip(tmp_path, name):
    torch = _torch()
    if not hasattr(torch, name):
        pytest.skip(f"torch {torch.__version__} has no {name}")
    dtype = getattr(torch, name)
    t = _random(torch, dtype)
    path = _save(tmp_path, t)
    got = load_pt(path)
    expected = _expected(t)
    _assert_same(got, expected)
    if name == "bfloat16" or name.startswith("float8"):
        assert got.dtype == np.float32
    # load_tensor dispatches .pt to load_pt
    _assert_same(load_tensor(str(path)), expected)


def test_bfloat16_widening_is_exact_bitwise(tmp_path):
    torch = _torch()
    bits = torch.arange(0, 65536, dtype=torch.int32).to(torch.int16)  # every bf16 bit pattern
    t = bits.view(torch.bfloat16)
    got = load_pt(_save(tmp_path, t))
    expected_bits = (np.arange(65536, dtype=np.uint32) << 16)
    assert np.array_equal(got.view(np.uint32), expected_bits)
    exp = t.float().numpy()
    finite = ~np.isnan(exp)
    assert np.array_equal(got[finite].view(np.uint32), exp[finite].view(np.uint32))


@pytest.mark.parametrize("name", FLOAT8_NAMES)
def test_float8_table_matches_torch_bitwise(tmp_path, name):
    torch = _torch()
    if not hasattr(torch, name):
        pytest.skip(f"torch {torch.__version__} has no {name}")
    t = torch.arange(256, dtype=torch.int32).to(torch.uint8).view(getattr(torch, name))
    got = load_pt(_save(tmp_path, t))
    exp = t.float().numpy()
    assert got.dtype == np.float32 and got.shape == (256,)
    assert np.array_equal(np.isnan(got), np.isnan(exp))
    ok = ~np.isnan(exp)
    assert np.array_equal(got[ok].view(np.uint32), exp[ok].view(np.uint32))  # -0.0 included


# ------------------------------------------------------------------------------------------
# layouts
# ------------------------------------------------------------------------------------------


def test_views_offsets_strides(tmp_path):
    torch = _torch()
    base = torch.randn(6, 7, 8, dtype=torch.float64)
    views = {
        "slice_offset": base[2:5, 1:, 3],
        "transpose": base.transpose(0, 2),
        "permute_step": base.permute(1, 0, 2)[::2, 1:, ::3],
        "row_tail": base[5, 6],
        "element": base[3, 4, 5],
        "expand": torch.arange(4.0).expand(3, 4),  # stride 0
        "diag": base[0].diagonal(),
        "narrow_contig": base[1:3],  # contiguous with offset: only its bytes are read
    }
    for name, view in views.items():
        path = _save(tmp_path, view, f"{name}.pt")
        _assert_same(load_pt(path), _expected(view))


@pytest.mark.parametrize("name", ["bfloat16", "float8_e4m3fn", "float16", "int32", "complex64"])
def test_non_contiguous_converted_dtypes(tmp_path, name):
    torch = _torch()
    base = _random(torch, getattr(torch, name), shape=(5, 6, 4))
    view = base.permute(2, 0, 1)[1:, ::2, 1::2]
    assert not view.is_contiguous() and view.storage_offset() > 0
    _assert_same(load_pt(_save(tmp_path, view)), _expected(view))


def test_zero_dim_and_empty(tmp_path):
    torch = _torch()
    for name, t in {
        "scalar": torch.tensor(3.25),
        "scalar_bf16": torch.tensor(-1.5, dtype=torch.bfloat16),
        "scalar_int": torch.tensor(7, dtype=torch.int64),
        "scalar_bool": torch.tensor(True),
        "empty": torch.zeros(0, 3),
        "empty2": torch.ones(2, 0, 4, dtype=torch.bfloat16),
        "empty_view": torch.randn(4, 5)[:, 5:],
    }.items():
        got = load_pt(_save(tmp_path, t, f"{name}.pt"))
        _assert_same(got, _expected(t))
        assert got.ndim == t.dim()


def test_parameter_and_requires_grad(tmp_path):
    torch = _torch()
    p = torch.nn.Parameter(torch.randn(4, 3))
    _assert_same(load_pt(_save(tmp_path, p, "p.pt")), _expected(p))
    p_bf16 = torch.nn.Parameter(torch.randn(4, 3).bfloat16(), requires_grad=False)
    _assert_same(load_pt(_save(tmp_path, p_bf16, "pb.pt")), _expected(p_bf16))
    g = torch.randn(2, 5, requires_grad=True) * 2  # non-leaf with grad_fn
    _assert_same(load_pt(_save(tmp_path, g, "g.pt")), _expected(g))
    leaf = torch.randn(3, requires_grad=True)
    _assert_same(load_pt(_save(tmp_path, leaf, "leaf.pt")), _expected(leaf))


def test_conj_and_neg_bits_are_resolved(tmp_path):
    torch = _torch()
    c = torch.randn(5, dtype=torch.complex64)
    _assert_same(load_pt(_save(tmp_path, c.conj(), "c.pt")), c.conj().resolve_conj().numpy())
    n = torch.randn(5, dtype=torch.complex64).conj().imag  # carries the neg bit
    assert n.is_neg()
    _assert_same(load_pt(_save(tmp_path, n, "n.pt")), n.resolve_neg().numpy())


def test_big_endian_archive(tmp_path):
    """An archive written on a big-endian machine (byteorder record "big") is byte-swapped."""
    torch = _torch()
    t = torch.randn(3, 4)
    src = _save(tmp_path, t)
    dst = tmp_path / "be.pt"
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w", zipfile.ZIP_STORED) as zout:
        for info in zin.infolist():
            data = zin.read(info)
            if info.filename.endswith("/byteorder"):
                data = b"big"
            elif "/data/" in info.filename and not info.filename.endswith("serialization_id"):
                data = np.frombuffer(data, dtype="<f4").astype(">f4").tobytes()
            zout.writestr(info.filename, data)
    _assert_same(load_pt(dst), t.numpy())


# ------------------------------------------------------------------------------------------
# real dumps
# ------------------------------------------------------------------------------------------


def _fixture_files():
    root = FIXTURES / "reference"
    files = []
    for side in ("target", "golden"):
        files += sorted(root.glob(f"*/{side}/step0/rank/dump_tensor_data/*.pt"))
    return files


def test_reference_fixture_dumps_match_torch():
    if not FIXTURES.is_dir():
        pytest.skip(f"shared fixtures not found at {FIXTURES}")
    torch = _torch()
    files = _fixture_files()
    if not files:
        pytest.skip(f"no .pt dumps under {FIXTURES / 'reference'}")
    dtypes = set()
    for path in files:
        t = torch.load(path, map_location="cpu", weights_only=True)
        dtypes.add(str(t.dtype))
        got = load_pt(path)
        try:
            _assert_same(got, _expected(t))
        except AssertionError as exc:
            raise AssertionError(f"{path}: {exc}") from None
    assert "torch.bfloat16" in dtypes or "torch.float16" in dtypes


# ------------------------------------------------------------------------------------------
# .npy and dispatch
# ------------------------------------------------------------------------------------------


def test_npy(tmp_path):
    for arr in [np.arange(12, dtype=np.float16).reshape(3, 4), np.array(2.5), np.zeros((0, 2), np.int8),
                np.array([True, False])]:
        path = tmp_path / "a.npy"
        np.save(path, arr)
        got = load_tensor(str(path))
        assert got.dtype == arr.dtype and got.shape == arr.shape and np.array_equal(got, arr)


def test_npy_object_array_refused(tmp_path):
    path = tmp_path / "obj.npy"
    np.save(path, np.array([{"a": 1}], dtype=object), allow_pickle=True)
    with pytest.raises(TensorReadError, match="obj.npy"):
        load_tensor(path)


def test_unknown_suffix(tmp_path):
    path = tmp_path / "x.bin"
    path.write_bytes(b"123")
    with pytest.raises(TensorReadError, match=r"x\.bin.*unsupported file type"):
        load_tensor(path)


# ------------------------------------------------------------------------------------------
# hostile, corrupt and unsupported files
# ------------------------------------------------------------------------------------------


def _write_archive(path, pickled, records=None, prefix="archive"):
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as zf:
        zf.writestr(f"{prefix}/data.pkl", pickled)
        zf.writestr(f"{prefix}/byteorder", "little")
        for key, data in (records or {}).items():
            zf.writestr(f"{prefix}/data/{key}", data)
        zf.writestr(f"{prefix}/version", "3\n")


class _OsSystem:
    def __reduce__(self):
        return (os.system, ("echo pwned > /dev/null",))


def test_os_system_pickle_is_refused(tmp_path):
    path = tmp_path / "evil.pt"
    _write_archive(path, pickle.dumps(_OsSystem(), protocol=2))
    with pytest.raises(UnsupportedTensorFormat) as err:
        load_tensor(path)
    msg = str(err.value)
    assert "evil.pt" in msg and "system" in msg and "only plain tensors are supported" in msg
    assert "\n" not in msg


def test_builtins_eval_pickle_is_refused(tmp_path):
    path = tmp_path / "evil2.pt"
    payload = b"\x80\x02cbuiltins\neval\nX\x04\x00\x00\x001+1\x85R."
    _write_archive(path, payload)
    with pytest.raises(TensorReadError, match=r"builtins\.eval"):
        load_pt(path)


def test_marker_cannot_be_mutated_by_build(tmp_path):
    """A BUILD opcode on a storage marker must not poison later loads."""
    path = tmp_path / "build.pt"
    # push torch.FloatStorage, BUILD it with (None, {"dtype": ...}) slot state
    payload = (b"\x80\x02ctorch\nFloatStorage\nN}X\x05\x00\x00\x00dtypeNs\x86b.")
    _write_archive(path, payload)
    with pytest.raises(TensorReadError):
        load_pt(path)
    assert tio._SAFE_GLOBALS[("torch", "FloatStorage")].dtype.name == "float32"


def test_top_level_not_a_tensor(tmp_path):
    torch = _torch()
    for name, obj in {"dict": {"a": torch.zeros(2)}, "list": [torch.zeros(2), torch.ones(2)],
                      "int": 3}.items():
        path = _save(tmp_path, obj, f"{name}.pt")
        with pytest.raises(TensorReadError, match="not a single tensor") as err:
            load_pt(path)
        assert not isinstance(err.value, UnsupportedTensorFormat)


def test_missing_file(tmp_path):
    with pytest.raises(TensorReadError, match="file not found"):
        load_tensor(tmp_path / "nope.pt")
    with pytest.raises(TensorReadError, match="file not found"):
        load_tensor(tmp_path / "nope.npy")
    d = tmp_path / "dir.pt"
    d.mkdir()
    with pytest.raises(TensorReadError, match="not a regular file"):
        load_pt(d)


def test_empty_and_garbage_files(tmp_path):
    empty = tmp_path / "empty.pt"
    empty.write_bytes(b"")
    with pytest.raises(TensorReadError, match="empty"):
        load_pt(empty)
    garbage = tmp_path / "garbage.pt"
    garbage.write_bytes(b"hello world, not a tensor" * 10)
    with pytest.raises(TensorReadError, match="neither a zip archive nor a pickle"):
        load_pt(garbage)
    npy = tmp_path / "garbage.npy"
    npy.write_bytes(b"not numpy")
    with pytest.raises(TensorReadError, match="garbage.npy"):
        load_tensor(npy)


def test_truncated_files(tmp_path):
    torch = _torch()
    t = torch.randn(64, 64)
    good = _save(tmp_path, t, "good.pt").read_bytes()
    for cut in (10, 200, len(good) // 2, len(good) - 30, len(good) - 1):
        path = tmp_path / f"cut{cut}.pt"
        path.write_bytes(good[:cut])
        with pytest.raises(TensorReadError) as err:
            load_tensor(path)
        assert f"cut{cut}.pt" in str(err.value)
        assert not isinstance(err.value, UnsupportedTensorFormat)
    np.save(tmp_path / "a.npy", np.arange(1000.0))
    data = (tmp_path / "a.npy").read_bytes()
    (tmp_path / "b.npy").write_bytes(data[: len(data) // 2])
    with pytest.raises(TensorReadError, match="b.npy"):
        load_tensor(tmp_path / "b.npy")


def test_corrupted_bytes_never_leak_other_exceptions(tmp_path):
    torch = _torch()
    good = bytearray(_save(tmp_path, torch.randn(8, 8), "good.pt").read_bytes())
    rng = np.random.default_rng(0)
    for i in range(300):
        data = bytearray(good)
        for pos in rng.integers(0, len(data), size=rng.integers(1, 6)):
            data[pos] = int(rng.integers(0, 256))
        path = tmp_path / f"fuzz{i}.pt"
        path.write_bytes(bytes(data))
        try:
            out = load_tensor(path)
        except TensorReadError:
            continue
        assert isinstance(out, np.ndarray)  # flips in unused bytes (or data) may still load


def test_missing_data_pkl_and_storage_record(tmp_path):
    path = tmp_path / "nopkl.pt"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("archive/version", "3")
    with pytest.raises(TensorReadError, match="no data.pkl"):
        load_pt(path)

    torch = _torch()
    src = _save(tmp_path, torch.randn(3))
    dst = tmp_path / "nodata.pt"
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w") as zout:
        for info in zin.infolist():
            if "/data/" not in info.filename:
                zout.writestr(info.filename, zin.read(info))
    with pytest.raises(TensorReadError, match="missing"):
        load_pt(dst)


def test_compressed_record_zip_bomb_refused(tmp_path):
    """Storage records must be stored, not deflated: a deflated one (e.g. a zip bomb) is refused."""
    torch = _torch()
    src = _save(tmp_path, torch.zeros(1000))
    dst = tmp_path / "bomb.pt"
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w") as zout:
        for info in zin.infolist():
            compress = zipfile.ZIP_DEFLATED if "/data/" in info.filename else zipfile.ZIP_STORED
            zout.writestr(info.filename, zin.read(info), compress_type=compress)
    with pytest.raises(TensorReadError, match="compressed"):
        load_pt(dst)


def test_view_beyond_storage_refused(tmp_path):
    """A pickle claiming a view larger than its storage must not read out of bounds."""
    payload = (
        b"\x80\x02ctorch._utils\n_rebuild_tensor_v2\n((X\x07\x00\x00\x00storage"
        b"ctorch\nFloatStorage\nX\x01\x00\x00\x000X\x03\x00\x00\x00cpuK\x04tQK\x00K\x64\x85K\x01\x85"
        b"\x89ccollections\nOrderedDict\n)RtR."
    )
    path = tmp_path / "oob.pt"
    _write_archive(path, payload, {"0": np.arange(4, dtype=np.float32).tobytes()})
    with pytest.raises(TensorReadError, match="exceeds its storage"):
        load_pt(path)
    # the same pickle with a matching size loads
    ok = payload.replace(b"K\x00K\x64\x85", b"K\x01K\x03\x85")
    path2 = tmp_path / "ok.pt"
    _write_archive(path2, ok, {"0": np.arange(4, dtype=np.float32).tobytes()})
    assert np.array_equal(load_pt(path2), np.array([1, 2, 3], np.float32))


def test_too_big_file_refused(tmp_path, monkeypatch):
    torch = _torch()
    path = _save(tmp_path, torch.randn(100))
    monkeypatch.setattr(tio, "MAX_FILE_BYTES", 64)
    with pytest.raises(TensorReadError, match="larger than"):
        load_pt(path)
    calls = []
    tio.register_fallback(lambda p: calls.append(p) or np.zeros(1))
    with pytest.raises(TensorReadError, match="larger than"):
        load_pt(path)
    assert calls == []  # size problems are not retried


def test_legacy_format_and_fallback(tmp_path):
    torch = _torch()
    t = torch.randn(4, 3).bfloat16()
    path = tmp_path / "legacy.pt"
    torch.save(t, path, _use_new_zipfile_serialization=False)
    with pytest.raises(UnsupportedTensorFormat, match="legacy"):
        load_pt(path)

    from msprobe.pytorch.tensor_io import install_fallback, load_pt_with_torch

    install_fallback()
    _assert_same(load_pt(path), t.float().numpy())
    _assert_same(load_tensor(path), t.float().numpy())
    _assert_same(load_pt_with_torch(path), t.float().numpy())


def test_fallback_only_for_format_errors(tmp_path):
    calls = []

    def fallback(p):
        calls.append(p)
        return np.arange(3)

    tio.register_fallback(fallback)
    evil = tmp_path / "evil.pt"
    _write_archive(evil, pickle.dumps(_OsSystem(), protocol=2))
    assert np.array_equal(load_pt(evil), np.arange(3))  # unknown global: retried
    assert calls == [str(evil)]
    with pytest.raises(TensorReadError, match="file not found"):
        load_pt(tmp_path / "missing.pt")
    garbage = tmp_path / "trunc.pt"
    garbage.write_bytes(b"PK\x03\x04" + b"\x00" * 20)
    with pytest.raises(TensorReadError, match="corrupt"):
        load_pt(garbage)
    assert calls == [str(evil)]

    def failing(p):
        raise TensorReadError(p, "torch exploded")

    tio.register_fallback(failing)
    with pytest.raises(TensorReadError, match="only plain tensors.*fallback also failed: torch exploded"):
        load_pt(evil)


def test_nothing_registered_at_import():
    code = "import msprobe.core.io.tensors as t, msprobe.pytorch.tensor_io; print(t._fallback)"
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(REPO)})
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "None"


def test_torch_fallback_errors(tmp_path):
    _torch()
    from msprobe.pytorch.tensor_io import load_pt_with_torch

    with pytest.raises(TensorReadError, match="file not found"):
        load_pt_with_torch(tmp_path / "missing.pt")
    evil = tmp_path / "evil.pt"
    _write_archive(evil, pickle.dumps(_OsSystem(), protocol=2))
    with pytest.raises(TensorReadError, match="torch.load failed"):
        load_pt_with_torch(evil)


# ------------------------------------------------------------------------------------------
# no torch
# ------------------------------------------------------------------------------------------


def test_core_reader_works_without_torch(tmp_path):
    torch = _torch()
    pt = tmp_path / "x.pt"
    torch.save(torch.arange(6, dtype=torch.float32).reshape(2, 3).bfloat16().t(), pt)
    npy = tmp_path / "x.npy"
    np.save(npy, np.arange(5, dtype=np.int16))
    legacy = tmp_path / "legacy.pt"
    torch.save(torch.ones(2), legacy, _use_new_zipfile_serialization=False)

    fake = tmp_path / "fake"
    (fake / "torch").mkdir(parents=True)
    (fake / "torch" / "__init__.py").write_text('raise ImportError("broken")\n')
    script = textwrap.dedent(
        f"""
        import sys
        import numpy as np
        import msprobe.core.io.tensors as t
        a = t.load_tensor({str(npy)!r})
        assert a.dtype == np.int16 and a.tolist() == [0, 1, 2, 3, 4], a
        b = t.load_tensor({str(pt)!r})
        assert b.dtype == np.float32 and b.tolist() == [[0, 3], [1, 4], [2, 5]], b
        from msprobe.pytorch.tensor_io import install_fallback
        install_fallback()
        try:
            t.load_tensor({str(legacy)!r})
        except t.TensorReadError as exc:
            assert "torch is not importable (ImportError: broken)" in str(exc), exc
        else:
            raise AssertionError("legacy file loaded without torch")
        try:
            import torch
        except ImportError as exc:
            assert str(exc) == "broken"
        print("OK", "torch" in sys.modules)
        """
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(fake), str(REPO)])}
    out = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True, env=env)
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.strip() == "OK False"
