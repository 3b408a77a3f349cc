"""nan_analyze / overflow_check: which rank and which op made the first NaN or inf of a multi-rank step.

Framework-free (reads dump.json, construct.json and stack.json; never imports torch):

* :mod:`.dumps`    the step folder -> one :class:`~.dumps.RankRecords` per rank (records in execution order,
  per record: is an input / an output non-finite), read through :func:`msprobe.core.dump.reader.read_dump`;
* :mod:`.analyzer` the three phases (before, during, after communication) and the cross-rank linking of
  collectives and point-to-point ops;
* :mod:`.report`   ``anomaly_analyze_{time_ns}.json`` in the reference's layout and the console summary.
"""

from msprobe.core.nan_analyze.analyzer import Anomaly, Result, analyze, analyze_step, read_step  # noqa: F401
