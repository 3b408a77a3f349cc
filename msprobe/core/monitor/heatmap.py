"""Heatmap images of ``ur_distribution`` (spec 4.5.3), framework-free: numpy and zlib, no plotting library.

Per parameter and kind (``adam_update``, ``adam_ratio``) the monitor keeps one 30-bin histogram over [-1, 1]
per collected step; :func:`heatmap_png` draws the history as an image (rows = bins, -1 at the top as the
reference's ``matshow``; columns = collected steps, oldest on the left; the 'hot' colour map, each column scaled
to the whole image's largest count) and encodes it as PNG for a TensorBoard image summary.
"""

from __future__ import annotations

import struct
import zlib

import numpy as np

BINS = 30
LOW, HIGH = -1.0, 1.0
CELL_H, CELL_W = 6, 4
MAX_COLUMNS = 1000          # the newest steps shown; older ones scroll out


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)


def encode_png(rgb: np.ndarray) -> bytes:
    """An (h, w, 3) uint8 array as PNG bytes."""
    h, w, _ = rgb.shape
    raw = np.concatenate([np.zeros((h, 1), dtype=np.uint8), rgb.reshape(h, w * 3)], axis=1).tobytes()
    return (b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0))
            + _chunk(b"IDAT", zlib.compress(raw, 6)) + _chunk(b"IEND", b""))


def hot(t: np.ndarray) -> np.ndarray:
    """matplotlib's 'hot' colour map (black - red - yellow - white) of values in [0, 1], as uint8 RGB."""
    t = np.clip(t, 0.0, 1.0)
    rgb = np.stack([np.clip(t * 3, 0, 1), np.clip(t * 3 - 1, 0, 1), np.clip(t * 3 - 2, 0, 1)], axis=-1)
    return (rgb * 255 + 0.5).astype(np.uint8)


def heatmap_png(columns) -> tuple:
    """``columns``: the histograms of the collected steps, oldest first. Returns (png bytes, height, width)."""
    m = np.asarray(columns, dtype=np.float64)[-MAX_COLUMNS:].T        # (bins, steps)
    top = m.max() if m.size else 0.0
    norm = m / top if top > 0 else m
    img = hot(np.repeat(np.repeat(norm, CELL_H, axis=0), CELL_W, axis=1))
    return encode_png(img), img.shape[0], img.shape[1]
