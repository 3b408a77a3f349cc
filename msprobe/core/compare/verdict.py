"""One verdict per report row, from which colour, Result, the console summary, "worst ops" and the advisor
all derive (docs/compare.md, "Rule set").

Verdicts (int8, ordered by severity):

* ``NOT_COMPARED`` - unmatched row, or nothing comparable (None values, no data file, empty tensor).
* ``PASS``   - both sides equal (identical -inf/inf/NaN included).
* ``NOISE``  - the sides differ, but no more than the two dtypes' rounding plus the error the API already
               received from its inputs explains.
* ``WARN``   - differs beyond noise, but the error is inherited from inputs that already differ beyond noise,
               or the evidence is weak (only one statistic, requires_grad inconsistent, ...).  Yellow.
* ``FAIL``   - this row introduces an error: its API's inputs agree within noise and it does not; or NaN/inf
               on the target side only; or a non-tensor argument (eps, dim, p, a shape) differs.  Red.

``Report.verdict`` holds one of these per row, ``Report.why`` a short human reason per row ("" for PASS and
NOT_COMPARED rows), ``Report.score`` the scaled error used for ranking (see :func:`judge`).
"""

from __future__ import annotations

import numpy as np

NOT_COMPARED = 0
PASS = 1
NOISE = 2
WARN = 3
FAIL = 4

NAMES = {NOT_COMPARED: "not compared", PASS: "pass", NOISE: "noise", WARN: "warn", FAIL: "fail"}


def failing(verdict: np.ndarray) -> np.ndarray:
    """Rows an advisor should consider as failing (verdict == FAIL)."""
    return np.asarray(verdict) == FAIL
