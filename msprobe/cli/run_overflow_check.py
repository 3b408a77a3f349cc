"""For every forward API whose dumped output overflowed (inf/nan), tell a normal overflow (the CPU benchmark
in higher precision, rounded to the output dtype, overflows too) from an abnormal one (it does not).

Each such API is rebuilt from the dump (the recorded tensors of a "tensor" dump, else random data following
the statistics, as run_ut does) and run again on the device and on the CPU in higher precision.
"""

from __future__ import annotations

import argparse

from msprobe.cli.options import add_quiet

EPILOG = """examples:
  msprobe -f pytorch run_overflow_check -api_info dump/step0/rank0/dump.json
  msprobe -f pytorch run_overflow_check -api_info dump.json -o out -j 2      (also writes out/overflow_check_result_{ts}.csv)

For each API whose forward output has inf/nan (a Max/Min of inf or nan in dump.json, or in the recorded output
file of a tensor dump without statistics) one log line: "The {api} overflow is a normal overflow." or
"The {api} overflow is an abnormal overflow."; APIs that cannot be re-run alone are named with the reason.
Exit status: 0 when the check ran (whatever the verdicts), 2 on bad input.
"""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("-api_info", "--api_info_file", dest="api_info_file", default="", metavar="DUMP_JSON",
                   help="dump.json of a level L1 dump (statistics, tensor or overflow_check task)")
    p.add_argument("-o", "--out_path", dest="output_path", default=None, metavar="DIR",
                   help="also write overflow_check_result_{ts}.csv (every API: its verdict and why) into DIR "
                        "(created); default: log lines only, as the reference")
    p.add_argument("-j", dest="jobs", type=int, default=1, metavar="N",
                   help="re-run the APIs in N processes (default 1)")
    p.add_argument("--jit_compile", dest="jit_compile", action="store_true",
                   help="NPU only: torch.npu.set_compile_mode(jit_compile=True)")
    p.add_argument("-d", "--device", dest="device_id", nargs="+", type=int, default=[0], metavar="ID",
                   help="device id(s) (NPU or CUDA; ignored on a CPU-only machine)")
    p.add_argument("--timeout", dest="timeout", type=float, default=300.0, metavar="SECONDS",
                   help="time limit of one API (default 300); a slower one is stopped and written as SKIP")
    p.add_argument("--data_mode", dest="data_mode", choices=("auto", "random_data", "real_data"), default="auto",
                   help="auto (default): the recorded tensors when the dump has them, else random data from statistics")
    add_quiet(p)


def run(args: argparse.Namespace) -> int:
    from msprobe.core.acc_check.overflow import OverflowOptions
    from msprobe.core.acc_check.overflow import run as run_check
    from msprobe.core.errors import MsprobeError

    if args.framework == "mindspore":
        raise MsprobeError("run_overflow_check: PyTorch dumps only (-f pytorch), as the reference")
    if not args.api_info_file:
        raise MsprobeError("Please provide api_info_file for run_overflow_check. (-api_info dump.json)")
    run_check(OverflowOptions(api_info=args.api_info_file, out_path=args.output_path, jobs=args.jobs,
                              devices=list(args.device_id), timeout=args.timeout, data_mode=args.data_mode,
                              jit_compile=args.jit_compile, quiet=args.quiet))
    return 0
