"""Check one API of a MindSpore PyNative dump: the MindSpore op_generate runtime rebuilds its inputs, runs it
(forward, then backward with the recorded output gradients) on the device in the dumped dtypes and again in
higher precision as the benchmark (float64 on the CPU when an input is float32/64, else float32), and every
output is judged by its precision standard; the result becomes the rows of accuracy_checking_result/details
(msprobe.core.acc_check.details, the same columns as PyTorch's run_ut).

Runs inside the worker processes of :mod:`msprobe.core.acc_check.pool` (``make_checker`` is the target);
MindSpore is imported there, never in the process that reads the dump.
"""

from __future__ import annotations

import os
from typing import Any, Dict, List, Optional

from msprobe.core.acc_check.details import detail_row, legacy_metrics_np, result_message
from msprobe.core.acc_check.plan import rebuild_case, skip_result
from msprobe.core.acc_check.results import worst_status
from msprobe.core.op_generate.generator import runtime_values
from msprobe.mindspore.op_generate.generator import case_from_records, standard_of


def make_checker(init: Dict[str, Any], k: int):
    """The worker's check(task) function (see msprobe.core.acc_check.runner for the task and result)."""
    os.environ.setdefault("GLOG_v", "3")
    import mindspore as ms

    from msprobe.mindspore.op_generate import runtime as rt

    device = rt.pick_device("auto")
    ids = init.get("devices") or [0]
    ms.set_context(mode=ms.PYNATIVE_MODE)
    if device == "CPU":
        ms.set_device("CPU")
    else:
        ms.set_device(device, ids[k % len(ids)])
    bench = None
    if init.get("benchmark") == "pytorch":
        from msprobe.mindspore.acc_check.torch_bench import TorchBench

        bench = TorchBench()
    return Checker(rt, device, bool(init["real_data"]), init.get("error_dir"), int(init.get("seed", 1234)),
                   init["dump_json"], bench).check


class Checker:
    def __init__(self, rt, device: str, real_data: bool, error_dir: Optional[str], seed: int, dump_json: str,
                 torch_bench=None):
        self.rt, self.device, self.real, self.error_dir, self.seed = rt, device, real_data, error_dir, seed
        self.dump_json = dump_json
        self.torch_bench = torch_bench  # None: the benchmark is the same MindSpore API in higher precision

    def check(self, task: Dict) -> Dict:
        rt = self.rt
        name = task["name"]
        mode = "real_data" if self.real else "random_data"
        case, with_bwd, bwd_note, skip = rebuild_case(
            task, lambda entries, propagation: case_from_records(self.dump_json, entries, propagation, mode,
                                                                 self.seed))
        if skip:
            return skip_result(skip)
        try:
            fn = rt.resolve_api(case.kind, case.func)
        except SystemExit as exc:
            return skip_result(f"API {name}: {str(exc.code).replace('error: ', '', 1)}. SKIP.")
        tfn = None
        if self.torch_bench is not None:
            from msprobe.mindspore.acc_check.torch_bench import NoTorchApi

            try:
                tfn = self.torch_bench.resolve(case.kind, case.func)
            except NoTorchApi as exc:
                return skip_result(f"API {name}: {exc}; no PyTorch benchmark. SKIP.")
        ns = vars(rt)
        std = standard_of(case.func)
        spec = dict(FULL_NAME=name, API=(case.kind, case.func), PROPAGATION="forward", STANDARD=std, DATA_MODE=mode,
                    SEED=self.seed, ITER_TIMES=1, ARGS=runtime_values(case.args, ns),
                    KWARGS=runtime_values(case.kwargs, ns), GRADS=runtime_values(case.grads, ns),
                    RECORDED_OUTPUTS=runtime_values(case.outputs, ns))
        everything = rt.flatten([spec["ARGS"], list(spec["KWARGS"].values()), spec["GRADS"],
                                 spec["RECORDED_OUTPUTS"] or []])
        bdtype = rt.bench_dtype([s for s in everything if isinstance(s, rt.T)]
                                + [rt.T(d.name, []) for d in everything if isinstance(d, rt.DType)], self.device)
        fwd_runs, failure = self._run(spec, fn, bdtype, tfn)
        if failure:
            return skip_result(f"Run {name} UT Error: {failure}")
        details = self._compare(f"{name}.forward", std, fwd_runs)
        forward = worst_status([d["Status"] for d in details])
        backward = " "
        bwd_runs = None
        if with_bwd:
            bwd_runs, failure = self._run(dict(spec, PROPAGATION="backward"), fn, bdtype, tfn)
            if failure:
                bwd_note = f"backward failed: {failure}"
                backward = "SKIP"
            else:
                bd = self._compare(f"{name}.backward", std, bwd_runs)
                details += bd
                backward = worst_status([d["Status"] for d in bd])
        elif task.get("backward") is not None and bwd_note:
            backward = "SKIP"
        message = result_message(forward, backward, bwd_note, details)
        if self.error_dir and (forward not in ("pass", "SKIP") or backward not in ("pass", " ", "SKIP")):
            self._save_error_data(name, spec, fwd_runs, bwd_runs)
        return {"forward": forward, "backward": backward, "message": message, "details": details}

    # ------------------------------------------------------------------ running
    def _make(self):
        rt = self.rt
        if self.real:
            return rt.load_array
        import numpy as np

        rng = np.random.RandomState(self.seed % (2 ** 32))  # every run rebuilds the same inputs
        return lambda s: rt.random_array(s, rng)

    def _run(self, spec, fn, bdtype, tfn=None):
        rt = self.rt
        import mindspore as ms

        ms.set_seed(self.seed % (2 ** 31))
        try:
            if tfn is not None:
                return self._run_torch_bench(spec, fn, tfn, bdtype), None
            return rt.run_iteration(spec, fn, self._make(), bdtype, self.device), None
        except rt.RunFailed as failed:
            text = str(failed.exc).strip().splitlines()[0] if str(failed.exc).strip() else ""
            return None, f"the {failed.label} run on {failed.device} failed: {type(failed.exc).__name__}: {text}"
        except SystemExit as exc:
            return None, str(exc.code).replace("error: ", "", 1)

    def _run_torch_bench(self, spec, fn, tfn, bdtype):
        """The device run of the MindSpore API and the PyTorch benchmark on the same rebuilt inputs."""
        rt = self.rt
        import mindspore as ms

        make = self._make()
        args = rt.materialise(spec["ARGS"], lambda t: rt.value_of(t, make))
        kwargs = rt.materialise(spec["KWARGS"], lambda t: rt.value_of(t, make))
        grads = rt.materialise(spec.get("GRADS", []), lambda t: rt.value_of(t, make))
        prop = spec["PROPAGATION"]
        device = rt.guarded("device", self.device, lambda: rt.settled(
            rt.run_once(fn, rt.place(args), rt.place(kwargs), prop, rt.place(grads))))
        torch_fn, torch_name = tfn
        wide = bdtype == ms.float64 or any(rt.dname(v.dtype) in ("float32", "float64")
                                           for v in rt.flatten([args, list(kwargs.values())])
                                           if isinstance(v, rt.Value))
        bench = rt.guarded("bench", f"the CPU ({torch_name})",
                           lambda: self.torch_bench.run(rt, torch_fn, args, kwargs, grads, prop, wide))
        return {"device": device, "bench": bench}

    # ------------------------------------------------------------------ judging
    def _compare(self, prefix: str, std: str, runs) -> List[Dict]:
        rt = self.rt
        dev, bench = runs["device"], runs["bench"]
        if len(dev) != len(bench):
            return [{"API Name": f"{prefix}.output.0", "Status": "error",
                     "Message": f"the device gave {len(dev)} outputs, the benchmark {len(bench)}"}]
        scale = runs.get("scale") or []
        rows = []
        for k, (d, b) in enumerate(zip(dev, bench)):
            res = rt.assess_output(std, d, b, scale[k] if k < len(scale) else None)
            rows.append(self._row(f"{prefix}.output.{k}", res, d, b))
        return rows

    def _row(self, api_name: str, res: Dict, d, b) -> Dict:
        rt = self.rt
        import mindspore as ms

        is_tensor = isinstance(d, ms.Tensor)
        legacy = None
        if "rows" in res and is_tensor and rt.dname(d.dtype) in rt.FLOAT_NAMES:
            legacy = lambda: legacy_metrics_np(rt.host(d)[0], rt.host(b)[0], rt.dname(d.dtype))  # noqa: E731
        return detail_row(api_name, res, self._dtype_text(d), self._dtype_text(b),
                          str(tuple(d.shape)) if is_tensor else None, is_tensor, d is None and b is None, legacy)

    @staticmethod
    def _dtype_text(v) -> str:
        import mindspore as ms

        if isinstance(v, ms.Tensor):
            return str(v.dtype)
        return str(type(v)) if v is not None else " "

    def _save_error_data(self, name: str, spec: Dict, fwd, bwd) -> None:
        """Inputs (rebuilt with the same seed) and outputs of a failing API as .npy files."""
        import numpy as np

        rt = self.rt
        make = self._make()
        inputs = rt.flatten(rt.materialise([spec["ARGS"], list(spec["KWARGS"].values())],
                                           lambda t: rt.value_of(t, make)))
        groups = [("forward.input", [v.array for v in inputs if isinstance(v, rt.Value)]),
                  ("forward.output.bench", fwd["bench"]), ("forward.output.device", fwd["device"])]
        if bwd is not None:
            groups += [("backward.output.bench", bwd["bench"]), ("backward.output.device", bwd["device"])]
        for label, values in groups:
            for k, t in enumerate(values or []):
                arr = rt.host(t)[0] if not isinstance(t, np.ndarray) else t
                if isinstance(arr, np.ndarray):
                    np.save(os.path.join(self.error_dir, f"{name}.{label}.{k}.npy"), arr, allow_pickle=False)
