"""CRC-32 (zlib's polynomial and values) at the speed of the machine.

The dump's ``md5`` summary and every ``.pt`` (zip) entry hold the CRC-32 of a tensor's bytes; on big dumps
computing it with the standard library's zlib (byte-table code, ~4 GB/s) costs more than the statistics.
zlib-ng (a dependency) computes the same CRC with carry-less multiplication (tens of GB/s). When it cannot
be imported, python-isal is tried, then the standard library: the values are identical in every case.
"""
import zlib

crc32 = zlib.crc32
BACKEND = "zlib"
try:
    from zlib_ng import zlib_ng as _fast

    if _fast.crc32(b"123456789") == zlib.crc32(b"123456789"):
        crc32 = _fast.crc32
        BACKEND = "zlib-ng"
except Exception:   # noqa: BLE001 - not installed, or a broken build: the standard library's is right too
    try:
        from isal import isal_zlib as _fast

        if _fast.crc32(b"123456789") == zlib.crc32(b"123456789"):
            crc32 = _fast.crc32
            BACKEND = "isal"
    except Exception:   # noqa: BLE001
        pass


def crc32_hex(data) -> str:
    """CRC-32 of a bytes-like object as 8 lowercase hex digits (the dump's ``md5`` value)."""
    return "%08x" % (crc32(data) & 0xFFFFFFFF)
