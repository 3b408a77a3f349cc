"""api_precision_compare: judge the device (NPU) run_ut details against the GPU's by the precision standards
(framework-free, numpy).  Writes api_precision_compare_result_{ts}.csv and api_precision_compare_details_{ts}.csv.

Each NPU detail row is paired with the GPU row of the same ``API Name``; the standard is chosen by the
device dtype (integers and bools: binary consistency) and the API's short name (the lists of
:mod:`msprobe.core.acc_check.standards`).  Ratios are ``|NPU| / max(|GPU|, floor of the dtype)``.
"""

from __future__ import annotations

import csv
import io
import os
import re
import time
from typing import Dict, List, Sequence

import numpy as np

from msprobe.core.acc_check.results import BOM, SPACE, _line, cell, worst_status
from msprobe.core.acc_check.standards import standard_for
from msprobe.core.errors import MsprobeError
from msprobe.core.fileio import atomic_write, check_path, commit_together, ensure_output_dir

REQUIRED = ["API Name", "DEVICE Dtype", "小值域错误占比", "均方根误差", "相对误差最大值", "相对误差平均值", "误差均衡性",
            "二进制一致错误率", "inf/nan错误率", "相对误差错误率", "绝对误差错误率", "ULP误差平均值", "ULP误差大于阈值占比", "双千指标"]
RESULT_HEADER = ["API Name", "Forward Test Success", "Backward Test Success", "Message"]
DETAILS_HEADER = ["API Name", "小值域错误比值", "小值域判定结果", "均方根误差比值", "均方根误差判定结果", "相对误差最大值比值",
                  "相对误差最大值判定结果", "相对误差平均值比值", "相对误差平均值判定结果", "误差均衡性比值", "误差均衡性判定结果",
                  "inf/nan错误率", "inf/nan判定结果", "相对误差错误率", "相对误差判定结果", "绝对误差错误率", "绝对误差判定结果",
                  "二进制一致错误率", "二进制一致错误率判定结果", "ULP误差平均值", "ULP误差大于阈值占比", "ULP误差大于阈值占比比值",
                  "ULP误差判定结果", "双千指标", "双千指标判定结果", "比对结果", "比对算法", "Message"]
ALGORITHM = {"benchmark": "标杆比对法", "ulp": "ULP误差比对法", "binary": "二进制一致法", "absolute": "绝对阈值法",
             "thousandth": "双千指标法"}
FLOATS = ("torch.float16", "torch.bfloat16", "torch.float32", "torch.float64", "torch.complex64", "torch.complex128")
UNSUPPORTED = ("torch.float64", "torch.complex64", "torch.complex128")
MIN_ERR = {"torch.float16": 2.0 ** -11, "torch.bfloat16": 2.0 ** -8}
MIN_ERR_DEFAULT = 2.0 ** -14
#: benchmark metrics: (input column, ratio column, status column, error threshold, message)
BENCH = [("小值域错误占比", "小值域错误比值", "小值域判定结果", 2.0, "ERROR: 小值域错误比值超过阈值\n"),
         ("均方根误差", "均方根误差比值", "均方根误差判定结果", 2.0, "ERROR: 均方根误差比值超过阈值\n"),
         ("相对误差最大值", "相对误差最大值比值", "相对误差最大值判定结果", 10.0, "ERROR: 相对误差最大值比值超过阈值\n"),
         ("相对误差平均值", "相对误差平均值比值", "相对误差平均值判定结果", 2.0, "ERROR: 相对误差平均值比值超过阈值\n"),
         ("误差均衡性", "误差均衡性比值", "误差均衡性判定结果", 2.0, "")]
ABS = [("inf/nan错误率", "inf/nan判定结果", "ERROR: inf/nan错误率超过阈值"),
       ("相对误差错误率", "相对误差判定结果", "ERROR: 相对误差错误率超过阈值"),
       ("绝对误差错误率", "绝对误差判定结果", "ERROR: 绝对误差错误率超过阈值")]
UNSUPPORTED_MESSAGE = "This data type does not support benchmark compare."
_NAME_RE = re.compile(r"^[^.]+(\.[^.]+){1,2}\.\d+\.(forward|backward)\.output\.\d+$")


def read_details(path: str, what: str) -> Dict[str, List[str]]:
    """A run_ut details CSV as columns of text (the reference's BOM and quoting)."""
    path = check_path(path, f"-{what[:3]}", "file")
    if not path.endswith(".csv"):
        raise MsprobeError(f"{what} {path} is not a .csv file; pass an accuracy_checking_details_*.csv")
    try:
        with open(path, "r", encoding="utf-8-sig", newline="") as fh:
            rows = list(csv.reader(io.StringIO(fh.read())))
    except (UnicodeDecodeError, csv.Error) as exc:
        raise MsprobeError(f"{what} {path} is not a readable UTF-8 CSV ({type(exc).__name__}); pass an "
                           f"accuracy_checking_details_*.csv")
    if not rows:
        raise MsprobeError(f"{what} {path} is empty; pass an accuracy_checking_details_*.csv")
    header = [h.strip() for h in rows[0]]
    missing = [c for c in REQUIRED if c not in header]
    if missing:
        raise MsprobeError(f"The following columns {','.join(missing)} are missing in{what} ({path})")
    width = len(header)
    body = [r + [""] * (width - len(r)) for r in rows[1:] if r]
    return {h: [r[i] for r in body] for i, h in enumerate(header)}


def _num(texts: Sequence[str]) -> np.ndarray:
    """Text cells -> float64 (blank or not a number -> nan)."""
    out = np.full(len(texts), np.nan)
    if not len(texts):
        return out
    cells = np.char.strip(np.asarray(texts, dtype=str))
    filled = cells != ""
    try:
        out[filled] = cells[filled].astype(np.float64)
    except ValueError:  # a text cell among the numbers: convert one by one
        for i in np.nonzero(filled)[0]:
            try:
                out[i] = float(cells[i])
            except ValueError:
                pass
    return out


#: MindSpore run_ut writes MindSpore's dtype names (Float16, BFloat16, ...): judged as the torch ones
_MS_DTYPES = {"Float16": "torch.float16", "BFloat16": "torch.bfloat16", "Float32": "torch.float32",
              "Float64": "torch.float64", "Complex64": "torch.complex64", "Complex128": "torch.complex128"}


def _torch_dtype(text: str) -> str:
    return _MS_DTYPES.get(text, text)


def _short_name(name: str) -> str:
    parts = name.split(".")
    return ".".join(parts[1:-4])


def _api_name(name: str) -> str:
    return ".".join(name.split(".")[:-3])


def compare(npu: Dict[str, List[str]], gpu: Dict[str, List[str]]):
    """(result rows, details rows) of the comparison; every row a list of cells."""
    names = npu["API Name"]
    n = len(names)
    gpu_names = gpu["API Name"]
    index: Dict[str, int] = {}
    dups = set()
    for i, g in enumerate(gpu_names):
        if g in index:
            dups.add(g)
        index[g] = i
    valid = np.array([bool(_NAME_RE.match(x)) for x in names], dtype=bool)
    gi = np.array([index.get(x, -1) for x in names], dtype=np.int64)
    for x in names:
        if x in dups:
            raise MsprobeError(f"This API : {x} has multiple records in the GPU data.")
    dtype = np.array([_torch_dtype(d.strip()) for d in npu["DEVICE Dtype"]], dtype=object)
    shape = np.array([s.strip() for s in npu.get("Shape", [""] * n)], dtype=object)
    msg_in = npu.get("Message", [""] * n)
    skip = (dtype == "") | np.isin(dtype, UNSUPPORTED) | (shape == "(0,)")
    std = np.array([("binary" if d not in FLOATS else standard_for(_short_name(x))) if v else "invalid"
                    for x, d, v in zip(names, dtype, valid)], dtype=object)
    std[valid & skip] = "skip"
    take = np.where(gi >= 0, gi, 0)

    def pair(col):
        a = _num(npu[col])
        b = _num(gpu[col])[take] if len(gpu_names) else np.full(n, np.nan)
        return a, b

    floor = np.array([MIN_ERR.get(d, MIN_ERR_DEFAULT) for d in dtype])
    cols: Dict[str, np.ndarray] = {h: np.full(n, None, dtype=object) for h in DETAILS_HEADER}
    cols["API Name"] = np.array(names, dtype=object)
    status = np.full(n, SPACE, dtype=object)
    message = np.full(n, "", dtype=object)

    # benchmark: ratio per metric, inf/nan consistency, error above the threshold (no warning band)
    m = std == "benchmark"
    bench_err = np.zeros(n, dtype=bool)
    errors = np.full(n, "", dtype=object)  # the ERROR lines follow every inf/nan note, as in the reference
    for col, rcol, scol, thr, text in BENCH:
        a, b = pair(col)
        nonfinite = ~np.isfinite(a) | ~np.isfinite(b)
        consistent = (np.isnan(a) & np.isnan(b)) | ((a == b) & np.isinf(a))
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = np.abs(a) / np.maximum(np.abs(b), floor)
        ratio[nonfinite] = np.nan
        err = np.where(nonfinite, ~consistent, ratio > thr)
        cols[rcol][m] = ratio[m]
        cols[scol][m] = np.where(err, "error", "pass")[m]
        if text:
            bench_err |= m & err
            errors[m & err] += text
        note = np.where(consistent, f"{col}同为同号inf或nan\n", f"{col}inf或nan不一致\n")
        message[m & nonfinite] += note[m & nonfinite]
    message[m] += errors[m]
    status[m] = np.where(bench_err, "error", "pass")[m]

    # absolute threshold: every error rate must be 0
    m = std == "absolute"
    abs_err = np.zeros(n, dtype=bool)
    for col, scol, text in ABS:
        a = _num(npu[col])
        err = a != 0
        cols[col][m] = a[m]
        cols[scol][m] = np.where(err, "error", "pass")[m]
        abs_err |= m & err
        message[m & err] += text
    status[m] = np.where(abs_err, "error", "pass")[m]

    # binary consistency
    m = std == "binary"
    a = _num(npu["二进制一致错误率"])
    err = a != 0
    cols["二进制一致错误率"][m] = a[m]
    cols["二进制一致错误率判定结果"][m] = np.where(err, "error", "pass")[m]
    status[m] = np.where(err, "error", "pass")[m]
    message[m & err] += "ERROR: 二进制一致错误率超过阈值\n"

    # ULP
    m = std == "ulp"
    mean = _num(npu["ULP误差平均值"])
    prop, gprop = pair("ULP误差大于阈值占比")
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = prop / np.maximum(gprop, floor)
    low = np.isin(dtype, ("torch.float16", "torch.bfloat16"))
    ok = np.where(low, (prop < 0.001) | (ratio < 1), (mean < 64) | (prop < 0.05) | (ratio < 1))
    cols["ULP误差平均值"][m] = mean[m]
    cols["ULP误差大于阈值占比"][m] = prop[m]
    cols["ULP误差大于阈值占比比值"][m] = ratio[m]
    cols["ULP误差判定结果"][m] = np.where(ok, "pass", "error")[m]
    status[m] = np.where(ok, "pass", "error")[m]
    message[m & ~ok] += "ERROR: ULP误差不满足标准\n"

    # thousandth
    m = std == "thousandth"
    a = _num(npu["双千指标"])
    ok = a >= 0.999
    cols["双千指标"][m] = a[m]
    cols["双千指标判定结果"][m] = np.where(ok, "pass", "error")[m]
    status[m] = np.where(ok, "pass", "error")[m]
    message[m & ~ok] += "ERROR: 双千指标不达标\n"

    # skipped and invalid rows
    m = std == "skip"
    status[m] = "SKIP"
    message[m] = np.array(msg_in, dtype=object)[m]
    m = std == "invalid"
    status[m] = "SKIP"
    message[m] = np.array([f"The API name {x} is invalid." for x in names], dtype=object)[m]
    cols["比对结果"] = status
    cols["比对算法"] = np.array([ALGORITHM.get(s, SPACE) for s in std], dtype=object)
    cols["Message"] = message

    keep = (gi >= 0) | ~valid  # rows missing on the GPU side are left out (the reference warns)
    details = [[cell(cols[h][i]) if h != "Message" else cols[h][i] for h in DETAILS_HEADER]
               for i in np.nonzero(keep)[0]]
    results = _results(names, valid, keep, std, status, dtype, msg_in)
    missing = [names[i] for i in np.nonzero(~keep)[0]]
    return results, details, missing


def _results(names, valid, keep, std, status, dtype, msg_in) -> List[List[str]]:
    """One row per API: forward and backward statuses aggregated over consecutive rows of the API."""
    out: List[List[str]] = []
    group: List[int] = []

    def close(rows: List[int]) -> None:
        if not rows:
            return
        api = _api_name(names[rows[0]])
        if dtype[rows[-1]] in UNSUPPORTED:
            out.append([api, "SKIP", "SKIP", UNSUPPORTED_MESSAGE])
            return
        fwd = [status[i] for i in rows if ".forward.output." in names[i] and std[i] != "skip_unsup"]
        bwd = [status[i] for i in rows if ".backward.output." in names[i]]
        f, b = _aggregate(fwd), _aggregate(bwd)
        note = ""
        if f == "SKIP":
            skipped = [msg_in[i] for i in rows if ".forward.output." in names[i] and status[i] == "SKIP"]
            note = skipped[-1] if skipped else ""
        out.append([api, f, b, note])

    for i in np.nonzero(keep)[0]:
        if not valid[i]:
            close(group)
            group = []
            out.append([names[i], "SKIP", "SKIP", f"The API name {names[i]} is invalid."])
            continue
        if group and _api_name(names[group[-1]]) != _api_name(names[i]):
            close(group)
            group = []
        group.append(int(i))
    close(group)
    return out


def _aggregate(statuses: List[str]) -> str:
    if not statuses:
        return SPACE
    if all(s == "SKIP" for s in statuses):
        return "SKIP"
    return worst_status([s for s in statuses if s != "SKIP"])


def run(npu_csv: str, gpu_csv: str, out_path: str = "./") -> Dict[str, object]:
    """Compare two details CSVs and write the result/details pair into ``out_path``; returns the paths and
    counts.  Nothing is written when an input is bad."""
    npu = read_details(npu_csv, "npu_csv")
    gpu = read_details(gpu_csv, "gpu_csv")
    results, details, missing = compare(npu, gpu)
    out = ensure_output_dir(out_path or "./")
    ts = time.strftime("%Y%m%d%H%M%S")
    res_path = os.path.join(out, f"api_precision_compare_result_{ts}.csv")
    det_path = os.path.join(out, f"api_precision_compare_details_{ts}.csv")

    def writer(header, rows):
        def write(tmp: str) -> None:
            with open(tmp, "w", encoding="utf-8", newline="") as fh:
                fh.write(BOM + _line(header))
                fh.writelines(_line(r) for r in rows)
        return write

    pending = [atomic_write(res_path, writer(RESULT_HEADER, results), defer=True),
               atomic_write(det_path, writer(DETAILS_HEADER, details), defer=True)]
    res_path, det_path = commit_together(pending)
    counts = {k: sum(1 for r in results if r[1] == k) for k in ("pass", "Warning", "error", "SKIP")}
    return {"result": res_path, "details": det_path, "missing": missing, "apis": len(results), "counts": counts,
            "results": results}
