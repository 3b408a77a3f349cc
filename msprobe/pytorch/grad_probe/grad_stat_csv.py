"""The reference's ``msprobe.pytorch.grad_probe.grad_stat_csv.GradStatCsv``: one grad_summary header / row.

``level`` is ``"L0"``, ``"L1"`` or ``"L2"`` (the reference passes its level table entry; one with a
``"header"`` list naming ``MD5`` / ``distribution`` is understood too).  The recorder itself does not go
through here: it computes a whole step at once (:func:`msprobe.pytorch.grad_probe.grad_monitor.compute_step`).
"""
from __future__ import annotations

from msprobe.core.grad_probe import stats


def _level(level) -> str:
    if isinstance(level, str):
        return level
    header = [str(h).lower() for h in (level or {}).get("header", [])]
    if "md5" in header:
        return "L0"
    return "L2" if "distribution" in header else "L1"


class GradStatCsv:
    @staticmethod
    def generate_csv_header(level, bounds):
        return stats.csv_header(_level(level), list(bounds))

    @staticmethod
    def generate_csv_line(param_name, level, grad, bounds):
        import torch

        from msprobe.pytorch.grad_probe.grad_monitor import compute_step
        lvl = _level(level)
        g = grad.detach()
        with torch.no_grad():
            rec = compute_step(lvl, tuple(bounds), 0, [param_name], [tuple(g.shape)], [g])
        return stats.summary_rows(lvl, list(bounds), rec.names, rec.shapes, rec.numbers, rec.md5s)[1]
