"""Sort the monitor's anomalies of every rank (the reference's sorter, spec 4.8), framework-free.

    python -m msprobe.core.monitor.anomaly_processor -d monitor_output/anomaly_detected [-o OUT] [-k 8] [-s "[3, 4]"]

Reads every ``rank*/anomaly.json`` under ``-d``, keeps the ``k`` earliest anomalies (only those of the steps in
``-s`` when given) and writes them, in order, to ``anomaly_analyse.json`` in ``-o`` (default: ``-d``), entries as
in ``anomaly.json``.  Order: step, micro step, training stage (forward ``actv`` 0; backward ``actv_grad``,
``pre_grad``, ``post_grad``, ``acc_grad`` 1; optimizer ``exp_avg``, ``exp_avg_sq`` 2; any other kind -1, so
first), then the vpp and pp stages (ascending in the forward stage, descending otherwise), then the call id.
An existing ``anomaly_analyse.json`` is replaced with a warning (as the reference).  Bad input: one line, exit 2.
"""

from __future__ import annotations

import argparse
import ast
import json
import logging
import os
import sys
import tempfile

import numpy as np

from msprobe.core.errors import MsprobeError
from msprobe.core.fileio import load_json

log = logging.getLogger("msprobe")

ANALYSE_JSON = "anomaly_analyse.json"
STAGES = {"actv": 0, "actv_grad": 1, "pre_grad": 1, "post_grad": 1, "acc_grad": 1, "exp_avg": 2, "exp_avg_sq": 2}
FIELDS = ("rank", "step", "micro_step", "pp_stage", "vpp_stage", "call_id", "tag_name", "message", "group_mates")


def load_anomalies(data_dir) -> list:
    if not os.path.isdir(data_dir):
        raise MsprobeError(f"{data_dir}: not a folder; give the monitor's anomaly_detected folder")
    out = []
    for d in sorted(os.listdir(data_dir)):
        path = os.path.join(data_dir, d, "anomaly.json")
        if not os.path.isfile(path):
            continue
        data = load_json(path, "anomaly.json", remedy="re-run the monitor or remove the file")
        if not isinstance(data, dict):
            raise MsprobeError(f"{path}: not an object of anomalies")
        for key, v in data.items():
            if not isinstance(v, dict) or any(f not in v for f in FIELDS[:7]):
                log.warning("Missing key in anomaly data: %s (%s).", key, path)
                continue
            out.append(v)
    return out


def sort_anomalies(anomalies, top_k=8, steps=None) -> list:
    """The ``top_k`` earliest anomalies (of ``steps`` when given), in the reference's order."""
    if steps:
        wanted = set(steps)
        anomalies = [a for a in anomalies if a["step"] in wanted]
    if not anomalies:
        return []
    stage = np.array([STAGES.get(str(a["tag_name"]).split("/")[-1], -1) for a in anomalies])
    fwd = stage == 0
    vpp = np.array([a["vpp_stage"] for a in anomalies])
    pp = np.array([a["pp_stage"] for a in anomalies])
    keys = (np.array([a["call_id"] for a in anomalies]), np.where(fwd, pp, -pp), np.where(fwd, vpp, -vpp), stage,
            np.array([a["micro_step"] for a in anomalies]), np.array([a["step"] for a in anomalies]))
    order = np.lexsort(keys)[:top_k]
    return [anomalies[i] for i in order]


def write_analysis(out_dir, anomalies) -> str:
    if not os.path.isdir(out_dir):
        raise MsprobeError(f"{out_dir}: output folder does not exist")
    path = os.path.join(out_dir, ANALYSE_JSON)
    if os.path.exists(path):
        log.warning("The existing file will be deleted: %s.", path)
    data = {f"{a['tag_name']}_step_{a['step']}_call_{a['call_id']}": a for a in anomalies}
    fd, tmp = tempfile.mkstemp(prefix=".anomaly_analyse-", suffix=".tmp", dir=out_dir)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(data, f, indent=1)
        os.chmod(tmp, 0o640)
        os.replace(tmp, path)
    except OSError as exc:
        raise MsprobeError(f"{path}: cannot be written ({exc.strerror})") from None
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    log.info("%s is at %s.", ANALYSE_JSON, out_dir)
    return path


def _parse(argv):
    p = argparse.ArgumentParser(prog="python -m msprobe.core.monitor.anomaly_processor",
                                description="Sort the training monitor's anomalies of every rank.")
    p.add_argument("-d", "--data_path", dest="data_path_dir", required=True,
                   help="the anomaly_detected folder (holding rank*/anomaly.json)")
    p.add_argument("-o", "--out_path", dest="out_path", default=None,
                   help="where anomaly_analyse.json goes (default: the data folder)")
    p.add_argument("-k", "--topk", dest="top_k_number", type=int, default=8, help="how many anomalies (default 8)")
    p.add_argument("-s", "--step", dest="step_list", default="[]", help='only these steps, e.g. "[3, 4]"')
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = _parse(argv)
    if not logging.getLogger("msprobe").handlers:
        logging.basicConfig(level=logging.INFO, format="[msprobe] %(levelname)s %(message)s")
        logging.getLogger("msprobe").setLevel(logging.INFO)
    try:
        try:
            steps = ast.literal_eval(args.step_list)
        except (ValueError, SyntaxError, RecursionError):
            steps = None
        if not isinstance(steps, list) or not all(isinstance(s, int) for s in steps):
            raise MsprobeError("The step list must be a resolvable list type.")
        if args.top_k_number <= 0:
            raise MsprobeError("The top k number must be greater than 0.")
        top = sort_anomalies(load_anomalies(args.data_path_dir), args.top_k_number, steps)
        write_analysis(args.out_path or args.data_path_dir, top)
    except MsprobeError as exc:
        print(f"msprobe: error: {exc}", file=sys.stderr)
        return 2
    log.info("Top %d anomalies are listed as follows:", args.top_k_number)
    for i, a in enumerate(top):
        log.info("%d: %s", i, a["message"])
    log.info("Analyse task completed.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
