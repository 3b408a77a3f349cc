"""code_mapping: link MindSpore static-graph dump data to IR nodes, scopes and source lines.

Pure text processing: neither MindSpore nor pandas is needed.

* :mod:`.ir` reads a MindSpore text IR (``anf_after_graph_build_*.ir``, ``graph_build_*.ir`` or the
  ``ms_output_trace_code_graph_*.ir`` kept next to a dump) in one streaming pass and indexes every
  node that carries a ``# Fullname with scope: (...)`` line by its scope.
* :mod:`.bind` finds the dump files (``.npy`` tensors, ``statistic.csv``), takes the op name out of each
  and writes the results (``code_mapping_{ts}.csv``; a copy of each ``statistic.csv`` with two columns
  added).  Op names are matched exactly against scope keys, never by substring.
"""

from msprobe.core.code_mapping.ir import IrIndex, IrNode, parse_ir  # noqa: F401
