"""``dc``: convert dumped data to ``.npy``.

* an Ascend kernel dump (a file or a folder of them) is converted by CANN's own ``msaccucmp.py``
  (``python msaccucmp.py convert -d <path> -out <dir> [-f <format>]``), as the reference does; the script
  is run as a separate process, never imported, and must be a regular file the user named or CANN's
  default path;
* a ``.pt`` file (or a folder of ``.pt`` files) is converted by msprobe itself, without torch and
  without CANN, through the restricted torch-free reader.

Existing files are never replaced.
"""

from __future__ import annotations

import os
import subprocess
import sys
from typing import List

import numpy as np

from msprobe.core.errors import MsprobeError
from msprobe.core.fileio import atomic_write, check_path, ensure_output_dir, unique_path
from msprobe.core.io.tensors import load_pt

DEFAULT_MSACCUCMP = "/usr/local/Ascend/ascend-toolkit/latest/tools/operator_cmp/compare/msaccucmp.py"
DEFAULT_OUTPUT = os.path.join("parse_data", "dump_convert")
#: formats msaccucmp's convert accepts (-f)
FORMATS = ("NCHW", "NHWC", "ND", "NC1HWC0", "FRACTAL_Z", "FRACTAL_NZ", "HWCN", "NDC1HWC0", "NCDHW", "C1HWNCoC0",
           "NC1HWC0_C04", "FRACTAL_Z_C04", "NDHWC", "FRACTAL_Z_3D")
TIMEOUT_S = 3600


def _pt_files(path: str) -> List[str]:
    if os.path.isfile(path):
        return [path] if path.endswith(".pt") else []
    return sorted(os.path.join(path, f) for f in os.listdir(path)
                  if f.endswith(".pt") and os.path.isfile(os.path.join(path, f)))


def _convert_pt(files: List[str], out_dir: str) -> List[str]:
    written = []
    for f in files:
        arr = load_pt(f)
        target = unique_path(os.path.join(out_dir, os.path.basename(f)[:-3] + ".npy"))
        written.append(atomic_write(target, lambda tmp, a=arr: _save_npy(tmp, a)))
    return written


def _save_npy(tmp: str, arr: np.ndarray) -> None:
    with open(tmp, "wb") as fh:
        np.save(fh, arr, allow_pickle=False)


def _npy_names(out_dir: str) -> set:
    try:
        return {f for f in os.listdir(out_dir) if f.endswith(".npy")}
    except OSError:
        return set()


def convert(name: str, fmt: str = None, output: str = None, msaccucmp: str = None) -> dict:
    """Convert ``name``; returns {"source": path, "output": dir, "files": [new .npy names]}."""
    src = check_path(name, "dump data (-n)", "any")
    out_dir = ensure_output_dir(output or DEFAULT_OUTPUT)
    pts = _pt_files(src)
    if pts:
        if fmt:
            raise MsprobeError("-f (a format conversion) applies to Ascend kernel dumps only, not to .pt files")
        files = _convert_pt(pts, out_dir)
        return {"source": src, "output": out_dir, "files": [os.path.basename(f) for f in files]}
    if fmt and fmt not in FORMATS:
        raise MsprobeError(f"format {fmt!r} is not one msaccucmp converts to; choose one of {', '.join(FORMATS)}")
    script = msaccucmp or DEFAULT_MSACCUCMP
    if not os.path.isfile(script):
        raise MsprobeError(f"msaccucmp.py not found at {script}: converting an Ascend kernel dump needs CANN's "
                           f"msaccucmp.py (install the Ascend toolkit or pass -cmp_path); .pt files convert without it")
    if not script.endswith(".py"):
        raise MsprobeError(f"-cmp_path {script} is not a .py file; give CANN's msaccucmp.py")
    before = _npy_names(out_dir)
    cmd = [sys.executable, os.path.abspath(script), "convert", "-d", src, "-out", out_dir]
    if fmt:
        cmd += ["-f", fmt]
    try:
        proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              errors="replace", timeout=TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired:
        raise MsprobeError(f"msaccucmp.py did not finish converting {src} within {TIMEOUT_S} s") from None
    except OSError as exc:
        raise MsprobeError(f"cannot run {script}: {exc.strerror or exc}") from None
    if proc.returncode != 0:
        last = [l for l in proc.stdout.splitlines() if l.strip()]
        raise MsprobeError(f"msaccucmp.py failed to convert {src} (exit {proc.returncode}"
                           + (f": {last[-1].strip()[:300]}" if last else "") + ")")
    files = sorted(_npy_names(out_dir) - before)
    return {"source": src, "output": out_dir, "files": files}
