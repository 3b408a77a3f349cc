"""Optional compiled helpers (built by ``pip install``; msprobe works without them).

``f32_stats``: Max, Min, sum and sum of squares of a contiguous float32 buffer in one pass (``_fstats.c``),
or None when the extension was not built (no compiler) or does not load.
"""
try:
    from msprobe._native._fstats import f32_stats
except Exception:  # noqa: BLE001 - not built, or built for another interpreter: the pure paths serve
    f32_stats = None
