"""run_overflow_check on PyTorch: re-run one API whose dumped output overflowed, on the device and on the CPU
in higher precision, and say whether the overflow is normal (the benchmark, rounded to the output dtype,
overflows too) or abnormal (see msprobe.core.acc_check.overflow).  ``make_checker`` is the pool's target.
"""

from __future__ import annotations

from typing import Any, Dict, List

import torch

from msprobe.core.errors import MsprobeError
from msprobe.pytorch.acc_check.checker import case_spec, worker_device
from msprobe.pytorch.op_generate import runtime as rt
from msprobe.pytorch.op_generate.generator import case_from_records


def make_checker(init: Dict[str, Any], k: int):
    device = worker_device(init, k)
    return OverflowChecker(device, bool(init["real_data"]), int(init.get("seed", 1234)), init["dump_json"]).check


def overflows(t) -> bool:
    """A non-empty floating (or complex) tensor holding inf or nan, or a non-finite Python float."""
    if isinstance(t, torch.Tensor):
        if t.numel() == 0 or not (t.is_floating_point() or t.is_complex()):
            return False
        return not bool(torch.isfinite(t.detach()).all())
    if isinstance(t, float):
        return not (t == t and abs(t) != float("inf"))
    return False


def _magnitude(t) -> str:
    if isinstance(t, torch.Tensor) and t.numel() and t.is_floating_point():
        finite = t.detach().double()
        finite = finite[torch.isfinite(finite)]
        return f"max |x| {float(finite.abs().max()):.6g}" if finite.numel() else "no finite value"
    return repr(t)


class OverflowChecker:
    def __init__(self, device: str, real_data: bool, seed: int, dump_json: str):
        self.device, self.real, self.seed, self.dump_json = device, real_data, seed, dump_json

    def check(self, task: Dict) -> Dict:
        name = task["name"]
        mode = "real_data" if self.real else "random_data"
        try:
            case = case_from_records(self.dump_json, {f"{name}.forward": task["forward"]}, "forward", mode, self.seed)
        except MsprobeError as exc:
            return {"status": "SKIP", "message": f"{exc}. SKIP."}
        spec = case_spec(name, case, "forward", mode, self.seed)
        try:
            fn, autocast, bdtype, raise_dtype = rt.setup(spec)
        except (AttributeError, ValueError) as exc:
            return {"status": "SKIP", "message": f"API {name} cannot be called with this torch ({exc}). SKIP."}
        make = rt.load_tensor if self.real else (lambda s, g=torch.Generator().manual_seed(self.seed): rt.random_tensor(s, g))
        torch.manual_seed(self.seed)
        try:
            runs = rt.run_iteration(spec, fn, self.device, make, self.seed, autocast, bdtype, raise_dtype, "forward")
        except rt.RunFailed as failed:
            text = str(failed.exc).strip().splitlines()[0] if str(failed.exc).strip() else ""
            return {"status": "SKIP", "message": f"Run {name} UT Error: the {failed.label} run on {failed.device} "
                                                 f"failed: {type(failed.exc).__name__}: {text}"}
        except SystemExit as exc:
            return {"status": "SKIP", "message": f"Run {name} UT Error: {str(exc.code).replace('error: ', '', 1)}"}
        dev, bench = runs["device"], runs["bench"]
        recorded = rt.flatten(spec.get("RECORDED_OUTPUTS") or [])
        if all(d is None for d in dev) and all(b is None for b in bench):
            return {"status": "normal", "message": f"The {name} overflow is a normal overflow, out and npu_out is None.",
                    "overflowed": task["overflowed"], "device_overflow": [], "bench_overflow": []}
        if len(dev) != len(bench):
            return {"status": "SKIP", "message": f"the device gave {len(dev)} outputs, the benchmark {len(bench)}. SKIP."}
        over = list(task["overflowed"])
        for k in task.get("probe") or []:  # tensor dump without statistics: look at the recorded output file
            rec = recorded[k] if k < len(recorded) else None
            if isinstance(rec, rt.T) and rec.file:
                try:
                    if overflows(rt.load_tensor(rec)):
                        over.append(k)
                except SystemExit:
                    pass
        over.sort()
        if not over:
            return {"status": "no overflow", "message": "the recorded outputs hold no inf/nan", "overflowed": []}
        dev_over = [k for k, d in enumerate(dev) if overflows(d)]
        bench_over, notes = [], []
        for k, (d, b) in enumerate(zip(dev, bench)):
            rounded = b
            if isinstance(b, torch.Tensor) and b.is_floating_point():
                target = d.dtype if isinstance(d, torch.Tensor) and d.is_floating_point() else (
                    rt.parse_dtype(recorded[k].dtype) if k < len(recorded) and isinstance(recorded[k], rt.T) else b.dtype)
                with torch.no_grad():
                    rounded = b.detach().to(target)
            if overflows(rounded):
                bench_over.append(k)
            if k in over:
                what = (f"the CPU benchmark ({b.dtype if isinstance(b, torch.Tensor) else type(b).__name__}) "
                        f"{'overflows too' if k in bench_over else 'is finite'}"
                        + (f" in {rounded.dtype}" if isinstance(rounded, torch.Tensor) else "")
                        + f" ({_magnitude(b)})")
                notes.append(f"output.{k}: inf/nan in the dump; {what}")
        abnormal = [k for k in over if k not in bench_over]
        status = "abnormal" if abnormal else "normal"
        if task.get("input_overflow") and status == "normal":
            notes.append("an input already holds inf/nan")
        return {"status": status, "message": "; ".join(notes), "overflowed": over, "device_overflow": dev_over,
                "bench_overflow": bench_over}
