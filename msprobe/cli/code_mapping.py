"""Link MindSpore static-graph dump data to IR nodes, scopes and source lines (code_mapping).

Reads a text IR (anf_after_graph_build_*.ir, graph_build_*.ir, or the rank_0/graphs/
ms_output_trace_code_graph_*.ir the dumper keeps) and the dump files under --dump_data.  Tensor dumps
(.npy) give code_mapping_{ts}.csv (File Path, Code Stack, Scope Name); each statistic.csv gives a copy
with Code Stack and Scope Name columns added, under --output.  Inputs are never modified, and an op
name is matched to a node's scope exactly (op1 never matches op10).  MindSpore is not needed.
"""

from __future__ import annotations

import argparse
import sys

EPILOG = """examples:
  msprobe -f mindspore code_mapping --ir graphs/ms_output_trace_code_graph_0.ir --dump_data dump/rank_0 --output out
      tensor dump   -> out/code_mapping_{ts}.csv
      statistic dump -> out/<same relative dir>/statistic.csv (with Code Stack, Scope Name)
  msprobe code_mapping --ir anf_after_graph_build_0.ir --dump_data dump/rank_0/Net/0/0/statistic.csv
"""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--ir", required=True, metavar="IR_FILE",
                   help="MindSpore text IR file (.ir), e.g. anf_after_graph_build_0.ir")
    p.add_argument("--dump_data", required=True, metavar="PATH",
                   help="static-graph dump: a directory (searched recursively), one .npy file or one statistic.csv")
    p.add_argument("--output", default="./", metavar="DIR",
                   help="output directory (default ./; created if missing; existing files are never replaced)")


def run(args: argparse.Namespace) -> int:
    from msprobe.core.code_mapping.run import code_mapping
    from msprobe.core.errors import MsprobeError

    if getattr(args, "framework", None) == "pytorch":
        raise MsprobeError("code_mapping links MindSpore static-graph IR to dump data; use '-f mindspore code_mapping' (or no -f)")
    index, summary = code_mapping(args.ir, args.dump_data, args.output)
    print(f"IR: {index.path}: {index.node_lines} nodes, {len(index.nodes)} with a scope, "
          f"{len(index.graphs)} graph(s)"
          + (f", {index.backward_linked} backward node(s) given their forward node's code" if index.backward_linked else ""))
    if summary.csv_path:
        print(f"tensor files: {summary.tensor_files}, linked to IR nodes: {summary.tensor_matched}, "
              f"without a match: {summary.tensor_files - summary.tensor_matched}")
        print(f"written: {summary.csv_path}")
    for src, out, rows, matched in summary.statistic_outputs:
        print(f"statistic rows: {rows}, linked to IR nodes: {matched} ({src})")
        print(f"written: {out}")
    if summary.already_mapped:
        print(f"skipped {len(summary.already_mapped)} statistic.csv that already hold Code Stack and Scope Name "
              f"(earlier results), e.g. {summary.already_mapped[0]}", file=sys.stderr)
    if summary.missing_mapping:
        print(f"warning: shortened (all-digit) file names without a mapping.csv in {len(summary.missing_mapping)} "
              f"directory(ies), e.g. {summary.missing_mapping[0]}: those rows have no code stack", file=sys.stderr)
    if summary.unnamed:
        print(f"warning: {len(summary.unnamed)} file name(s) without an op name field, e.g. {summary.unnamed[0]}", file=sys.stderr)
    return 0
