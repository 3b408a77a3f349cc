"""Judge a device's run_ut details against a GPU's by the precision standards.

Writes api_precision_compare_result/details_{ts}.csv.
"""

from __future__ import annotations

import argparse

EPILOG = """examples:
  msprobe -f pytorch api_precision_compare -npu npu/accuracy_checking_details_X.csv \\
          -gpu gpu/accuracy_checking_details_Y.csv -o out
"""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("-npu", "--npu_csv_path", dest="npu_csv_path", required=True, metavar="NPU_DETAILS_CSV",
                   help="accuracy_checking_details_*.csv of the device under test")
    p.add_argument("-gpu", "--gpu_csv_path", dest="gpu_csv_path", required=True, metavar="GPU_DETAILS_CSV",
                   help="accuracy_checking_details_*.csv of the reference device (GPU) on the same dump")
    p.add_argument("-o", "--out_path", dest="output_path", default="./", metavar="DIR",
                   help="folder of the two output CSVs (default ./)")


def run(args: argparse.Namespace) -> int:
    import logging

    from msprobe.core.acc_check.precision_compare import run as compare

    res = compare(args.npu_csv_path, args.gpu_csv_path, args.output_path)
    log = logging.getLogger("msprobe")
    for name in res["missing"][:20]:
        log.warning("This API : %s does not exist in the GPU data.", name)
    c = res["counts"]
    print(f"api_precision_compare: {res['apis']} APIs: {c['pass']} pass, {c['Warning']} warning, {c['error']} error, "
          f"{c['SKIP']} skip" + (f"; {len(res['missing'])} rows missing in the GPU data" if res["missing"] else ""))
    print(f"result: {res['result']}")
    print(f"details: {res['details']}")
    return 0
