"""Advisor and first-divergence analysis (``msprobe compare`` without ``-c``, and ``-da``).

Framework-free: works on the compare report tables in memory (:class:`msprobe.core.compare.engine.Report`),
never imports torch or MindSpore.

* :mod:`.table` turns a report into per-row numpy arrays (state, failing rows, relative errors, a scale-aware
  error per row) and per-API groups.
* :mod:`.advisor` names the first row that fails the mode's accuracy test and says why
  (``advisor_{ts}.txt``).
* :mod:`.diff_analyze` writes the reference's ``compare_result_rank{N}_{ts}.json`` and
  ``diff_analyze_{ts}.json`` (first divergence before / during / after communication, across ranks) and
  ranks suspects by local error growth (:mod:`.growth`).
* :mod:`.config` holds the one frozen configuration object and the noise-op list.
"""
