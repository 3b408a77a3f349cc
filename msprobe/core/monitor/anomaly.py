"""Anomaly detection of the training monitor (the reference's rules, spec 4.8), vectorised with numpy.

For every written statistic (tag, op), ``shape``/``dtype`` excepted, a running mean of |value| is kept:
initialised with the first |value|, then ``avg <- 0.99 avg + 0.01 |value|``.  A value is checked against the
mean *before* its own update.  Rules, in the config's order, the first that fires wins:

* ``AnomalyTurbulence`` (``threshold`` required): ``|value| > avg * (1 + threshold)``; reported only for the
  ``norm`` and ``mean`` statistics;
* ``AnomalyNan``: the value is NaN or, with a threshold, ``|value| > threshold``.

One deliberate difference: a NaN or infinite value does not enter the running mean (in the reference one NaN
turns the mean into NaN and that statistic is never checked again).

A step's statistics come as one matrix (rows = tags, columns = ops); rows are mapped to the state once per
layout (the list of tags is normally the same at every collected step) and the rules run on whole arrays.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

BETA = 0.99
TURBULENCE_OPS = ("norm", "mean")
YELLOW, RESET = "\033[93m", "\033[0m"


@dataclass
class Anomaly:
    tag: str            # e.g. '0:blocks.1.fc2.weight/rank0/post_grad'
    op: str             # e.g. 'norm'
    step: int
    value: float
    history: float
    rule: str
    call_id: int = -1
    micro_step: int = 0

    @property
    def message(self) -> str:
        """The reference's message, word for word."""
        return (f"Rule {self.rule} reports anomaly signal in ({self.tag!r}, {self.op!r}) at step {self.step}, "
                f"current value {self.value}, history mean {self.history}.")

    @property
    def jump(self) -> float:
        return abs(self.value) / self.history if self.history else math.inf

    def console(self) -> str:
        """The reference's message plus the jump, e.g. '(x38.2 the history mean)'."""
        extra = ""
        if self.rule == "AnomalyTurbulence" and math.isfinite(self.value):
            extra = f" (x{self.jump:.3g} the history mean)"
        return f"> {self.message}{extra}"

    def record(self, rank: int, pp_stage: int, group_mates) -> tuple:
        """(key, value) of anomaly.json."""
        name = self.tag.split("/")[0]
        vpp = int(name.split(":")[0]) if ":" in name and name.split(":")[0].isdigit() else 0
        key = f"{self.tag}_step_{self.step}_call_{self.call_id}"
        return key, {"rank": rank, "step": self.step, "micro_step": self.micro_step, "pp_stage": pp_stage,
                     "vpp_stage": vpp, "call_id": self.call_id, "tag_name": self.tag, "message": self.message,
                     "group_mates": list(group_mates)}


@dataclass
class AnomalyDetector:
    rules: list                       # validated config['alert']['rules']
    ops: tuple                        # the numeric ops, in column order
    index: dict = field(default_factory=dict)    # tag -> row of the state
    avg: np.ndarray = None            # (n_tags, n_ops) running mean of |value|
    seen: np.ndarray = None           # (n_tags, n_ops) a value has been recorded
    _last_tags: list = None
    _last_rows: np.ndarray = None

    def __post_init__(self):
        k = len(self.ops)
        self.avg = np.zeros((0, k))
        self.seen = np.zeros((0, k), dtype=bool)
        self._turb_cols = np.array([op in TURBULENCE_OPS for op in self.ops], dtype=bool)

    @property
    def enabled(self) -> bool:
        return bool(self.rules)

    def _rows(self, tags: list) -> np.ndarray:
        if self._last_tags is not None and tags == self._last_tags:
            return self._last_rows
        rows = np.empty(len(tags), dtype=np.int64)
        new = 0
        for i, t in enumerate(tags):
            r = self.index.get(t)
            if r is None:
                r = self.index[t] = len(self.index)
                new += 1
            rows[i] = r
        if new:
            k = len(self.ops)
            self.avg = np.concatenate([self.avg, np.zeros((new, k))])
            self.seen = np.concatenate([self.seen, np.zeros((new, k), dtype=bool)])
        self._last_tags, self._last_rows = list(tags), rows
        return rows

    def check(self, tags: list, values: np.ndarray, step: int, call_ids=None) -> list:
        """Check one step's statistics (``values``: rows = ``tags``, columns = ``ops``); returns the anomalies
        in row order, and updates the running means."""
        if not self.rules or not len(tags):
            return []
        values = np.asarray(values, dtype=np.float64)
        rows = self._rows(tags)
        absv = np.abs(values)
        finite = np.isfinite(values)
        seen = self.seen[rows]
        hist = np.where(seen, self.avg[rows], absv)       # the mean before this value (first: the value)
        fired = np.zeros(values.shape, dtype=bool)
        which = np.full(values.shape, -1, dtype=np.int8)
        for i, rule in enumerate(self.rules):
            th = rule["args"].get("threshold")
            with np.errstate(invalid="ignore"):
                if rule["rule_name"] == "AnomalyTurbulence":
                    hit = absv > hist * (1 + th)
                else:
                    hit = np.isnan(values) | ((absv > th) if th is not None else False)
            hit &= ~fired
            which[hit] = i
            fired |= hit
        # the reference reports AnomalyTurbulence for norm and mean only (and a NaN never exceeds a bound)
        turb = np.array([r["rule_name"] == "AnomalyTurbulence" for r in self.rules] + [False])
        report = fired & ~(turb[which] & ~self._turb_cols[None, :])
        # update the running means (non-finite values stay out)
        new = np.where(seen, BETA * hist + (1 - BETA) * absv, absv)
        upd = finite
        avg = self.avg[rows]
        avg[upd] = new[upd]
        self.avg[rows] = avg
        self.seen[rows] = seen | finite
        out = []
        for r, c in zip(*np.nonzero(report)):
            out.append(Anomaly(tags[r], self.ops[c], step, float(values[r, c]), float(hist[r, c]),
                               self.rules[which[r, c]]["rule_name"],
                               int(call_ids[r]) if call_ids is not None else -1))
        return out
