"""Advisor and first-divergence analysis (``msprobe compare`` without ``-c``, and ``-da``).

Framework-free: works on the compare report tables in memory (:class:`msprobe.core.compare.engine.Report`),
never imports torch or MindSpore.

* :mod:`.table` turns a report into per-row numpy arrays (state, failing rows, relative errors, a scale-aware
  error per row), per-API groups and the execution order of the rows (parameter gradients after the
  backward that computes them).
* :mod:`.advisor` names the first failing row (verdict FAIL) in execution order, the op that produced it
  when it is an input, and says why (``advisor_{ts}.txt``; ``Line`` = the xlsx row).
* :mod:`.diff_analyze` writes the reference's ``compare_result_rank{N}_{ts}.json`` and
  ``diff_analyze_{ts}.json`` (first divergence before / during / after communication, across ranks) and
  ranks suspects by local error growth (:mod:`.growth`).
* :mod:`.config` holds the one frozen configuration object and the noise-op list.
"""
