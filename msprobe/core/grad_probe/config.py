"""The ``grad_probe`` section of config.json (framework-free).

Keys (spec checks_and_monitors.md 3.1): ``grad_level`` (L0 / L1 / L2, default L1), ``param_list`` (exact
parameter names, ``[]`` = all) and ``bounds`` (strictly ascending numbers within the int64 range, default
``[-1, 0, 1]``).  Each problem is one :class:`MsprobeError` line; ``fail(key, value, advice)`` builds it
(msprobe.core.dump.config passes the one that names the config file and the section).
"""
from __future__ import annotations

import math

from msprobe.core.errors import MsprobeError

GRAD_LEVELS = ("L0", "L1", "L2")
SECTION_KEYS = ("grad_level", "param_list", "bounds")
DEFAULT_BOUNDS = (-1, 0, 1)
BOUNDS_MIN = -2 ** 63
BOUNDS_MAX = 2 ** 63 - 1


def _default_fail(key, value, advice):
    return MsprobeError(f'"{key}" in the "grad_probe" section is {value!r}; {advice}')


def check_grad_level(value, fail=_default_fail) -> str:
    if not isinstance(value, str) or value not in GRAD_LEVELS:
        raise fail("grad_level", value, "grad_level must be one of " + ", ".join(GRAD_LEVELS))
    return value


def check_param_list(value, fail=_default_fail) -> tuple:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise fail("param_list", value, 'param_list must be a list of parameter names, e.g. ["0.weight", "0.bias"] '
                                        "([] means all parameters)")
    return tuple(dict.fromkeys(value))


def check_bounds(value, fail=_default_fail) -> tuple:
    if not isinstance(value, list):
        raise fail("bounds", value, "bounds must be a list of ascending numbers, e.g. [-1, 0, 1]")
    prev = None
    for item in value:
        if isinstance(item, bool) or not isinstance(item, (int, float)):
            raise fail("bounds", value, f"bounds element {item!r} is not int or float")
        if (isinstance(item, float) and not math.isfinite(item)) or not BOUNDS_MIN <= item <= BOUNDS_MAX:
            raise fail("bounds", value, f"bounds element {item!r} is out of int64 range")
        if prev is not None and item <= prev:
            raise fail("bounds", value, f"bounds list is not ascending ({prev!r} is followed by {item!r}); "
                                        "each element must be greater than the one before")
        prev = item
    return tuple(value)


def check_grad_probe_section(section: dict, fail=_default_fail) -> dict:
    """The validated values of a grad_probe section (unknown keys are checked by the caller)."""
    out = {"grad_level": "L1", "param_list": (), "bounds": DEFAULT_BOUNDS}
    if "grad_level" in section:
        out["grad_level"] = check_grad_level(section["grad_level"], fail)
    if "param_list" in section:
        out["param_list"] = check_param_list(section["param_list"], fail)
    if "bounds" in section:
        out["bounds"] = check_bounds(section["bounds"], fail)
    return out
