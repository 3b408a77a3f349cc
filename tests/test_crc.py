"""msprobe.core.crc: the accelerated CRC-32 gives zlib's values (the md5 summary and .pt entries rely on it)."""
import zlib

import numpy as np

from msprobe.core import crc


def test_crc32_equals_zlib_on_bytes_and_arrays():
    rng = np.random.default_rng(0)
    for n in (0, 1, 7, 64, 1000, 1 << 16, (1 << 20) + 3):
        data = rng.integers(0, 256, n, dtype=np.uint8)
        assert crc.crc32(data) == zlib.crc32(data)
        assert crc.crc32(data.tobytes()) == zlib.crc32(data.tobytes())
    arr = rng.standard_normal(12345).astype(np.float32)
    assert crc.crc32(arr) == zlib.crc32(arr)
    assert crc.crc32(b"abc", 12345) == zlib.crc32(b"abc", 12345)


def test_crc32_hex_format():
    assert crc.crc32_hex(b"") == "00000000"
    assert crc.crc32_hex(b"123456789") == "cbf43926"      # the CRC-32 check value
    assert crc.BACKEND in ("zlib-ng", "isal", "zlib")
