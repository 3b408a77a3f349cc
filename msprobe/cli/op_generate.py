"""Write a standalone script that reproduces one API from a PyTorch or MindSpore dump and judges it by the precision standards.

The script rebuilds the API's inputs (random data from the recorded statistics, or the recorded .pt /
.npy tensors), runs the API on the device (PyTorch: NPU, else CUDA, else CPU; MindSpore: Ascend, else
GPU, else CPU) and again in higher precision, and prints the metrics of the API's standard (binary
consistency, absolute threshold, ULP error, thousandth ratio or benchmark) with a pass / warning / error
verdict.  -f mindspore (or a dump.json whose "framework" is "mindspore") writes a MindSpore script for
Mint.* / MintFunctional.* / Functional.* (mindspore.ops) / Tensor.* APIs.
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
  msprobe -f mindspore op_generate -i config_op.json -o out   api_name e.g. Mint.matmul.0: writes
                                                              out/Mint.matmul.0.forward.py (needs MindSpore to run)
"""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("-i", "--config_input", required=True, metavar="CONFIG_OP_JSON",
                   help="config_op.json naming the dump, the API and the data mode")
    p.add_argument("-o", "--api_output_path", required=True, metavar="DIR",
                   help="directory for the generated script (created if missing; existing scripts are never replaced)")


def run(args: argparse.Namespace) -> int:
    from msprobe.pytorch.op_generate.generator import generate, load_config

    cfg = load_config(args.config_input, args.api_output_path)
    framework = args.framework
    if framework is None:  # no -f: the dump.json's own "framework" field decides
        from msprobe.mindspore.op_generate.generator import dump_framework

        framework = "mindspore" if dump_framework(cfg.dump_json_path) in ("mindspore", "ms") else "pytorch"
    if framework == "mindspore":
        from msprobe.mindspore.op_generate.generator import generate
    res = generate(cfg)
    c = res.case
    if cfg.dump_json_path:
        print(f"extracted: {res.extract_path}")
    print(f"{c.full_name}: {c.kind}.{c.func}, {res.standard} standard, {c.data_mode}"
          + (f", autocast {c.autocast}" if c.autocast else ""))
    print(f"written: {res.script}")
    print(f"run it:  python {res.script}")
    return 0
