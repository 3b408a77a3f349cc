"""Pre-check every API of a dump: re-run each alone, judge it against a CPU benchmark by its standard.

Each API runs on the device and on the CPU in higher precision; the outputs go to
accuracy_checking_result/details_{ts}.csv.
"""

from __future__ import annotations

import argparse

from msprobe.cli.options import add_quiet

EPILOG = """examples:
  msprobe -f pytorch run_ut -api_info dump/step0/rank0/dump.json -o out
  msprobe -f pytorch run_ut -api_info dump.json -o out -j 2 -save_error_data
  msprobe -f pytorch run_ut -api_info dump.json -csv_path out/accuracy_checking_result_20250101120000.csv   (resume)
  msprobe acc_check -api_info dump.json -o out                                        (26.x spelling)
  msprobe -f pytorch run_ut -config checker.json -o out   (online pre-check: the run_ut block has "is_online": true;
                                                        training streams its APIs here, docs/acc_check.md)
  msprobe -f mindspore run_ut -api_info ms_dump/step0/rank/dump.json -o out           (MindSpore PyNative dump)

The checker follows the dump's "framework" (PyTorch, or MindSpore: Mint/MintFunctional/Functional/Tensor APIs
against the same MindSpore API in higher precision); a -f that disagrees with it is an error.
Inputs come from the recorded tensors of a "tensor" dump, else are drawn from the statistics (Max/Min/Mean/Norm).
APIs that cannot be re-run alone (communication, random, uninitialised, unsupported dtypes, no data) are
written as SKIP with the reason. Exit status: 0 when the run completed (whatever the verdicts), 2 on bad input.
"""


def add_arguments(p: argparse.ArgumentParser, multi: bool = False) -> None:
    p.add_argument("-api_info", "--api_info_file", dest="api_info_file", default="", metavar="DUMP_JSON",
                   help="dump.json of a level L1 dump (statistics or tensor)")
    p.add_argument("-o", "--out_path", dest="output_path", default="./", metavar="DIR",
                   help="folder of the result/details CSVs (default ./; created)")
    p.add_argument("-save_error_data", dest="save_error_data", action="store_true",
                   help="save the inputs and outputs of APIs that do not pass as .pt files (ut_error_data{ts}/)")
    p.add_argument("-j", dest="jobs", nargs="?", type=int, const=0, default=None, metavar="N",
                   help="-j N: run the APIs in N processes (default 1). A bare -j is the reference's --jit_compile")
    p.add_argument("--jit_compile", dest="jit_compile", action="store_true",
                   help="NPU only: torch.npu.set_compile_mode(jit_compile=True)")
    p.add_argument("-d", "--device", dest="device_id", nargs="+", type=int, default=[0], metavar="ID",
                   help="device ids (NPU or CUDA; ignored on a CPU-only machine); processes take them in turn")
    p.add_argument("-csv_path", "--result_csv_path", dest="result_csv_path", default=None, metavar="RESULT_CSV",
                   help="resume an interrupted run: its accuracy_checking_result_{ts}.csv (APIs in it are not run again)")
    p.add_argument("-f", "--filter_api", dest="filter_api", action="store_true",
                   help="run only the first of calls of an API with the same arguments (Max/Min aside)")
    p.add_argument("-config", "--config_path", dest="config_path", default=None, metavar="CONFIG_JSON",
                   help="config.json whose \"run_ut\" block gives white_list, black_list, error_data_path "
                        "(with \"is_online\": true: the online checker, no -api_info)")
    if multi:
        p.add_argument("-n", "--num_splits", dest="num_splits", type=int, default=8, choices=range(1, 65),
                       metavar="N", help="Number of splits for parallel processing. Range: 1-64 (default 8; at most "
                                         "8 per device)")
    p.add_argument("--timeout", dest="timeout", type=float, default=300.0, metavar="SECONDS",
                   help="time limit of one API (default 300); a slower one is stopped and written as SKIP")
    p.add_argument("--data_mode", dest="data_mode", choices=("auto", "random_data", "real_data"), default="auto",
                   help="auto (default): the recorded tensors when the dump has them, else random data from statistics")
    p.add_argument("--bench", dest="benchmark", choices=("same", "pytorch"), default="same",
                   help="MindSpore dumps: the benchmark: same (default): the same MindSpore API in higher precision; "
                        "pytorch: the PyTorch API of the MindSpore-to-PyTorch API table on the CPU in higher precision "
                        "(needs torch next to MindSpore)")
    add_quiet(p)


def options(args: argparse.Namespace, command: str):
    from msprobe.core.acc_check.runner import Options
    from msprobe.core.errors import MsprobeError

    if not args.api_info_file:
        raise MsprobeError("Please provide api_info_file for offline run ut. (-api_info dump.json)")
    jobs = args.jobs if args.jobs else 1
    if jobs < 0:
        raise MsprobeError(f"-j: the number of processes must be >= 1, not {args.jobs}")
    if getattr(args, "num_splits", None):
        jobs = min(args.num_splits, 8 * len(args.device_id))
    return Options(api_info=args.api_info_file, out_path=args.output_path, save_error_data=args.save_error_data,
                   jobs=jobs, devices=list(args.device_id), csv_path=args.result_csv_path, filter_api=args.filter_api,
                   config=args.config_path, timeout=args.timeout, data_mode=args.data_mode,
                   jit_compile=bool(args.jit_compile or args.jobs == 0), command=command, quiet=args.quiet,
                   framework=getattr(args, "framework", None), benchmark=args.benchmark)


def run(args: argparse.Namespace) -> int:
    if _online(args):  # config.json whose run_ut block has "is_online": true: the online checker
        return 0
    from msprobe.core.acc_check.runner import run as run_check

    run_check(options(args, args.command))
    return 0


def _online(args: argparse.Namespace) -> bool:
    """The checker side of the online pre-check (docs/acc_check.md "Online pre-check"); False when offline."""
    if not getattr(args, "config_path", None):
        return False
    from msprobe.core.acc_check.online.config import load_server_config
    from msprobe.core.errors import MsprobeError

    cfg = load_server_config(args.config_path)
    if cfg is None:
        return False
    if args.api_info_file:
        raise MsprobeError(f"-config {args.config_path} has \"is_online\": true (the online checker receives the "
                           f"APIs from training): drop -api_info, or set is_online to false to check a dump")
    if getattr(args, "framework", None) == "mindspore":
        raise MsprobeError("the online pre-check is PyTorch only (-f pytorch)")
    from msprobe.core.acc_check.online.server import run_online

    run_online(cfg, args.output_path, "msprobe.pytorch.acc_check.online_checker:make_judge", quiet=args.quiet)
    return True
