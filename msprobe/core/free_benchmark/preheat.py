"""Preheat: per-API thresholds learned from CPU comparisons during the first steps (spec 2.8).

Pure bookkeeping, no framework: the adapter asks :meth:`Preheat.plan` what to do with a call, runs the CPU
sample when told, reports it with :meth:`record`, and uses :meth:`threshold` for the verdict.  "Step" here is the
index of the checked step (0 for the first step free_benchmark sees).
"""

from __future__ import annotations

import math

from msprobe.core.free_benchmark import rules

INITIAL_THRESHOLD = 2.05


class Preheat:
    def __init__(self, preheat_step: int, max_sample: int):
        self.preheat_step = preheat_step
        self.max_sample = max_sample
        self.step = -1
        self.total = {}          # api -> calls in the first step
        self.seq = {}            # api -> calls so far in this step
        self.sampled = {}        # api -> samples taken in this step
        self.records = {}        # api -> {dtype: [(ratio, cpu_consistent)]}
        self.learned = {}        # api -> {dtype: threshold}
        self.stopped = {}        # api -> {dtype, ...} whose preheat has ended

    def new_step(self) -> None:
        self.step += 1
        self.seq.clear()
        self.sampled.clear()
        self.records.clear()

    def _samples(self, api: str) -> int:
        total = self.total.get(api, 0)
        if total <= 0:
            return 0
        return min(math.ceil(total / self.preheat_step), self.max_sample)

    def plan(self, api: str) -> tuple:
        """(compare, sample) for the next call of ``api`` (its name without ``.{n}.forward``)."""
        step = max(self.step, 0)
        if step == 0:
            self.total[api] = self.total.get(api, 0) + 1
            return False, False
        if step >= self.preheat_step:
            return True, False
        seq = self.seq[api] = self.seq.get(api, 0) + 1
        total = self.total.get(api, 0)
        k = self._samples(api)
        if not k or self.sampled.get(api, 0) >= k:
            return True, False
        picks = set()
        for i in range(1, k + 1):
            pick = (self.preheat_step * (i - 1) + step) % total
            picks.add(pick or total)
        return True, seq in picks

    def threshold(self, api: str, dtype) -> float:
        default = rules.threshold(dtype, "check")
        return max(self.learned.get(api, {}).get(rules.dtype_key(dtype), INITIAL_THRESHOLD), default)

    def record(self, api: str, dtype, ratio, cpu_consistent: bool) -> None:
        """A sampled call's perturbed ratio and whether its CPU comparison was consistent."""
        key = rules.dtype_key(dtype)
        if isinstance(ratio, (int, float)) and key not in self.stopped.get(api, ()):
            self.records.setdefault(api, {}).setdefault(key, []).append((float(ratio), bool(cpu_consistent)))

    def sample_done(self, api: str) -> None:
        """One sampled call of ``api`` is finished; after the step's last sample the thresholds are updated."""
        self.sampled[api] = self.sampled.get(api, 0) + 1
        if self.sampled[api] < self._samples(api):
            return
        learned = self.learned.setdefault(api, {})
        for key, pairs in self.records.pop(api, {}).items():
            old = learned.get(key, INITIAL_THRESHOLD)
            con = [r for r, ok in pairs if ok]
            incon = [r for r, ok in pairs if not ok]
            new = old
            if con and incon:
                if min(incon) > max(con):
                    new = min(min(incon), old)
                    self.stopped.setdefault(api, set()).add(key)
            elif con:
                new = 1 + (old - 1) * 2 if max(con) > old else 1 + (old - 1) / 2
            elif incon:
                new = min(min(incon), old)
                self.stopped.setdefault(api, set()).add(key)
            learned[key] = max(new, rules.threshold(key, "check"))
