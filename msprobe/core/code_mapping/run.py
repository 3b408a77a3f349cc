"""One code_mapping run: check the inputs, read the IR, bind the dump files, write the results."""

from __future__ import annotations

import os

from msprobe.core.code_mapping.bind import Binder, Summary, find_dump_files, write_statistic_csv, write_tensor_csv
from msprobe.core.code_mapping.ir import IrIndex, parse_ir
from msprobe.core.errors import MsprobeError
from msprobe.core.fileio import check_path, ensure_output_dir


def code_mapping(ir_path: str, dump_path: str, output_dir: str = "./") -> "tuple[IrIndex, Summary]":
    """Link the dump files at ``dump_path`` to the IR ``ir_path``; results go under ``output_dir``."""
    ir_path = check_path(ir_path, "IR file (--ir)", "file")
    dump_path = check_path(dump_path, "dump data (--dump_data)", "any")
    npy_files, stat_files = find_dump_files(dump_path)
    if not npy_files and not stat_files:
        if os.path.isfile(dump_path):
            raise MsprobeError(
                f"dump data {dump_path} is neither a .npy tensor file nor a statistic.csv; pass a MindSpore "
                "static-graph dump directory (e.g. dump/rank_0) or one of its files"
            )
        raise MsprobeError(
            f"dump data {dump_path} holds no dump file (no .npy tensor file and no statistic.csv under it); "
            "pass the directory MindSpore's dump wrote (e.g. dump/rank_0/<net>/<graph_id>/<iteration>)"
        )
    index = parse_ir(ir_path)
    output_dir = ensure_output_dir(output_dir or "./")
    binder = Binder(index)
    summary = Summary()
    if npy_files:
        write_tensor_csv(npy_files, binder, output_dir, summary)
    for stat in stat_files:
        write_statistic_csv(stat, dump_path, binder, output_dir, summary)
    return index, summary
