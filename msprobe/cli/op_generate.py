"""Write a standalone script that reproduces one API from a PyTorch dump and judges it by the precision standards.

The script rebuilds the API's inputs (random data from the recorded statistics, or the recorded .pt
tensors), runs the API on the device (NPU, else CUDA, else CPU) and on the CPU in higher precision,
and prints the metrics of the API's standard (binary consistency, absolute threshold, ULP error,
thousandth ratio or benchmark) with a pass / warning / error verdict.
"""

from __future__ import annotations

import argparse

EPILOG = """config_op.json:
  {"dump_json_path": "dump.json", "api_name": "Functional.softmax.0",
   "extract_api_path": "Functional.softmax.0.json", "propagation": "forward",
   "data_mode": "random_data", "random_seed": 1234, "iter_times": 1}

examples:
  msprobe -f pytorch op_generate -i config_op.json -o out     writes out/Functional.softmax.0.forward.py
  python out/Functional.softmax.0.forward.py                  run it (exit 1 when a verdict is error)
"""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("-i", "--config_input", required=True, metavar="CONFIG_OP_JSON",
                   help="config_op.json naming the dump, the API and the data mode")
    p.add_argument("-o", "--api_output_path", required=True, metavar="DIR",
                   help="directory for the generated script (created if missing; existing scripts are never replaced)")


def run(args: argparse.Namespace) -> int:
    from msprobe.core.errors import MsprobeError
    from msprobe.pytorch.op_generate.generator import generate, load_config

    if args.framework == "mindspore":
        raise MsprobeError("op_generate reproduces PyTorch APIs only; use '-f pytorch op_generate' (or no -f)")
    cfg = load_config(args.config_input, args.api_output_path)
    res = generate(cfg)
    c = res.case
    if cfg.dump_json_path:
        print(f"extracted: {res.extract_path}")
    print(f"{c.full_name}: {c.kind}.{c.func}, {res.standard} standard, {c.data_mode}"
          + (f", autocast {c.autocast}" if c.autocast else ""))
    print(f"written: {res.script}")
    print(f"run it:  python {res.script}")
    return 0
