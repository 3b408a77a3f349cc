"""Check one API of a dump on PyTorch: the op_generate runtime rebuilds its inputs, runs it forward and
backward on the device and as the CPU benchmark in higher precision, and judges every output by its
precision standard; the result becomes the rows of accuracy_checking_result/details.

Runs inside the worker processes of :mod:`msprobe.core.acc_check.pool` (``make_checker`` is the target).
"""

from __future__ import annotations

import os
from typing import Any, Dict, List, Optional

import torch

from msprobe.core.acc_check.details import (  # noqa: F401 - COLUMNS re-exported
    COLUMNS, detail_row as core_detail_row, ratio_indicators, result_message)
from msprobe.core.acc_check.plan import rebuild_case, skip_result
from msprobe.pytorch.op_generate import runtime as rt
from msprobe.pytorch.op_generate.generator import case_from_records, runtime_values, standard_of

LOW = (torch.float16, torch.bfloat16)


def pick_device(ids: List[int], k: int) -> str:
    """The device of worker k: an NPU, else CUDA, else the CPU (ids from -d, one per worker in turn)."""
    dev_id = ids[k % len(ids)] if ids else 0
    try:
        import torch_npu  # noqa: F401

        if torch.npu.is_available():
            return f"npu:{dev_id}"
    except Exception:  # noqa: BLE001 - no usable torch_npu
        pass
    if torch.cuda.is_available():
        return f"cuda:{dev_id}"
    return "cpu"


def worker_device(init: Dict[str, Any], k: int) -> str:
    """Set up worker ``k``'s device (one CPU thread, the NPU/CUDA device of ``init["devices"]``, the NPU
    compile mode) and return its name; shared by the run_ut and run_overflow_check workers."""
    # one CPU thread per process: the APIs of a dump are mostly small, where intra-op threads only spin
    # (2,016-API dump on a busy 2-core machine: 13 s with 1 thread, 83 s with 2); -j gives the parallelism
    torch.set_num_threads(1)
    device = pick_device(init.get("devices") or [0], k)
    if device.startswith("npu"):
        torch.npu.set_device(device)
        try:
            torch.npu.set_compile_mode(jit_compile=bool(init.get("jit_compile")))
        except Exception:  # noqa: BLE001 - older torch_npu
            pass
    elif device.startswith("cuda"):
        torch.cuda.set_device(device)
    return device


def make_checker(init: Dict[str, Any], k: int):
    """The worker's check(task) function (see msprobe.core.acc_check.runner for the task and result)."""
    device = worker_device(init, k)
    checker = Checker(device, bool(init["real_data"]), init.get("error_dir"), int(init.get("seed", 1234)),
                      init["dump_json"])
    return checker.check


def case_spec(name: str, case, propagation: str, mode: str, seed: int) -> Dict:
    """The runtime's data block of a case (what a generated script holds), for the runtime's calls."""
    ns = vars(rt)
    return dict(FULL_NAME=name, API=(case.kind, case.func), PROPAGATION=propagation, STANDARD=standard_of(case.func),
                DATA_MODE=mode, SEED=seed, ITER_TIMES=1, AUTOCAST=case.autocast,
                ARGS=runtime_values(case.args, ns), KWARGS=runtime_values(case.kwargs, ns),
                GRADS=runtime_values(case.grads, ns), RECORDED_OUTPUTS=runtime_values(case.outputs, ns))


class Checker:
    #: judge a CPU device's outputs against ``runs["reference"]`` too (the online checker's own CPU run)
    reference_on_cpu = False

    def __init__(self, device: str, real_data: bool, error_dir: Optional[str], seed: int, dump_json: str):
        self.device, self.real, self.error_dir, self.seed, self.dump_json = device, real_data, error_dir, seed, dump_json

    def check(self, task: Dict) -> Dict:
        name = task["name"]
        mode = "real_data" if self.real else "random_data"
        case, with_bwd, bwd_note, skip = rebuild_case(
            task, lambda entries, propagation: self._case(entries, propagation, mode))
        if skip:
            return skip_result(skip)
        std = standard_of(case.func)
        spec = self._spec(name, case, "both" if with_bwd else "forward", mode)
        try:
            fn, autocast, bdtype, raise_dtype = rt.setup(spec)
        except (AttributeError, ValueError) as exc:
            return skip_result(f"API {name} cannot be called with this torch ({type(exc).__name__}: {exc}). SKIP.")
        runs, failure = self._run(spec, fn, autocast, bdtype, raise_dtype, spec["PROPAGATION"])
        if failure and with_bwd:  # the backward may be what failed: keep the forward
            spec["PROPAGATION"] = "forward"
            runs, failure2 = self._run(spec, fn, autocast, bdtype, raise_dtype, "forward")
            if failure2 is None:
                bwd_note, failure, with_bwd = f"backward failed: {failure}", None, False
            else:
                failure = failure2
        if failure:
            return skip_result(f"Run {name} UT Error: {failure}")
        scale = runs.get("scale")
        if with_bwd:
            dev = runs["device"]
            fwd_d, bwd_d = dev
            fwd_b, bwd_b = runs["bench"]
            fwd_r, bwd_r = runs["reference"]
            fwd_s, bwd_s = scale if scale is not None else (None, None)
        else:
            fwd_d, fwd_b, fwd_r = runs["device"], runs["bench"], runs["reference"]
            bwd_d = bwd_b = bwd_r = bwd_s = None
            fwd_s = scale
        details = self._compare(f"{name}.forward", std, fwd_d, fwd_b, fwd_r, autocast, fwd_s)
        forward = _worst([d["Status"] for d in details])
        backward = " "
        if bwd_d is not None and bwd_b is not None:
            bd = self._compare(f"{name}.backward", std, bwd_d, bwd_b, bwd_r, autocast, bwd_s)
            details += bd
            backward = _worst([d["Status"] for d in bd])
        elif task.get("backward") is not None and bwd_note:
            backward = "SKIP"
        message = result_message(forward, backward, bwd_note, details)
        if self.error_dir and (forward not in ("pass", "SKIP") or backward not in ("pass", " ", "SKIP")):
            self._save_error_data(name, spec, (fwd_d, fwd_b), (bwd_d, bwd_b))
        return {"forward": forward, "backward": backward, "message": message, "details": details}

    def _case(self, entries: Dict, propagation: str, mode: str):
        """The records of one API -> its case (the online checker's aten calls name their function otherwise)."""
        return case_from_records(self.dump_json, entries, propagation, mode, self.seed)

    def _spec(self, name: str, case, propagation: str, mode: str) -> Dict:
        return case_spec(name, case, propagation, mode, self.seed)

    # ------------------------------------------------------------------ running
    def _make(self, seed: int):
        if self.real:
            return rt.load_tensor
        gen = torch.Generator().manual_seed(seed)
        return lambda s: rt.random_tensor(s, gen)

    def _run(self, spec, fn, autocast, bdtype, raise_dtype, propagation):
        torch.manual_seed(self.seed)
        try:
            runs = rt.run_iteration(spec, fn, self.device, self._make(self.seed), self.seed, autocast, bdtype,
                                    raise_dtype, propagation)
            return runs, None
        except rt.RunFailed as failed:
            text = str(failed.exc).strip().splitlines()[0] if str(failed.exc).strip() else ""
            return None, f"the {failed.label} run on {failed.device} failed: {type(failed.exc).__name__}: {text}"
        except SystemExit as exc:  # the runtime's one-line errors (missing tensor file, unmatched gradients)
            return None, str(exc.code).replace("error: ", "", 1)

    # ------------------------------------------------------------------ judging
    def _compare(self, prefix: str, std: str, dev, bench, ref, autocast, scale=None) -> List[Dict]:
        if len(dev) != len(bench):
            return [{"API Name": f"{prefix}.output.0", "Status": "error",
                     "Message": f"the device gave {len(dev)} outputs, the benchmark {len(bench)}"}]
        rows = []
        for k, (d, b) in enumerate(zip(dev, bench)):
            use_ref = (self.device != "cpu" or self.reference_on_cpu) and ref and k < len(ref)
            r = ref[k] if use_ref else None
            sc = scale[k] if scale and k < len(scale) else None
            rows.append(detail_row(f"{prefix}.output.{k}", rt.assess_output(std, d, b, r, autocast, sc), d, b))
        return rows

    def _save_error_data(self, name: str, spec: Dict, fwd, bwd) -> None:
        """Inputs (rebuilt with the same seed) and outputs of a failing API as .pt files."""
        make = self._make(self.seed)
        args = rt.materialise(spec["ARGS"], make)
        kwargs = rt.materialise(spec["KWARGS"], make)
        grads = rt.materialise(spec["GRADS"], make)
        groups = [("forward.input", rt.flatten([args, list(kwargs.values())])),
                  ("forward.output.bench", fwd[1]), ("forward.output.device", fwd[0])]
        if bwd[0] is not None:
            groups += [("backward.input", rt.flatten(grads)), ("backward.output.bench", bwd[1]),
                       ("backward.output.device", bwd[0])]
        for label, values in groups:
            for k, t in enumerate(values or []):
                if isinstance(t, torch.Tensor):
                    torch.save(t.detach().cpu().contiguous(), os.path.join(self.error_dir, f"{name}.{label}.{k}.pt"))


def _worst(statuses: List[str]) -> str:
    rank = {"SKIP": 0, "pass": 1, "Warning": 2, "error": 3}
    real = [s for s in statuses if s != "SKIP"]
    return max(real, key=rank.get) if real else "SKIP"


def _dtype_text(v) -> str:
    if isinstance(v, torch.Tensor):
        return str(v.dtype)
    return str(type(v)) if v is not None else " "


def detail_row(api_name: str, res: Dict, d, b) -> Dict:
    """One details CSV row (column -> value) from runtime.assess_output, plus the legacy metrics."""
    is_tensor = isinstance(d, torch.Tensor)
    legacy = None
    if "rows" in res and res["device"].is_floating_point():
        legacy = lambda: legacy_metrics(res["device"], res["bench"], res["judged"])  # noqa: E731
    return core_detail_row(api_name, res, _dtype_text(d), _dtype_text(b), str(tuple(d.shape)) if is_tensor else None,
                           is_tensor, d is None and b is None, legacy)


def legacy_metrics(d: torch.Tensor, b: torch.Tensor, judged) -> Dict[str, Optional[float]]:
    """The reference's single-run indicators (cosine, max abs error, 双百/双千/双万), for information."""
    d64, b64 = d.detach().double().flatten(), b.detach().double().flatten()
    ae = (d64 - b64).abs()
    eps = 2.0 ** -8 if judged == torch.bfloat16 else torch.finfo(b.dtype).eps if b.is_floating_point() else 2.0 ** -23
    rel = ae / (b64.abs() + eps)
    n = d64.numel()
    out: Dict[str, Optional[float]] = {"最大绝对误差": float(ae.max()) if n else None}
    if n > 1:
        dm, bm = d64.abs().max(), b64.abs().max()
        if torch.isfinite(dm) and torch.isfinite(bm) and dm > 0 and bm > 0:
            dn, bn = d64 / dm, b64 / bm
            cos = float((dn * bn).sum() / (dn.norm() * bn.norm()))
            out["余弦相似度"] = max(-1.0, min(1.0, cos))
    return ratio_indicators(out, lambda t: int((rel < t).sum()), n, judged in LOW)
