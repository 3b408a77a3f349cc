"""The judge of the online pre-check's checker side (PyTorch): one received API call -> its result/details rows.

The received tensors (raw bytes, see msprobe.core.acc_check.online.protocol) become tensors again without any
unpickling, are written as .pt files in a private temporary folder (the offline checker reads recorded tensors
from files), and the offline :class:`~msprobe.pytorch.acc_check.checker.Checker` re-runs the call as the CPU
benchmark; the *training's* output (received) is judged against it by the call's standard, as ``run_ut`` judges a
device run (see :class:`OnlineCallChecker`). An ``Aten.{op}.{n}`` call (an aten op of the training's backward,
msprobe.core.acc_check.online.aten) is rebuilt as ``torch.ops.aten.{op}.{overload}`` and judged the same way
(:class:`AtenCallChecker`).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from typing import Any, Dict, List

import torch

from msprobe.core.acc_check.online import aten as A
from msprobe.core.op_generate import generator as core_generator
from msprobe.pytorch.acc_check.checker import Checker, pick_device
from msprobe.pytorch.op_generate.generator import _convert

_DTYPES = {"torch.float64": torch.float64, "torch.float32": torch.float32, "torch.float16": torch.float16,
           "torch.bfloat16": torch.bfloat16, "torch.complex64": torch.complex64,
           "torch.complex128": torch.complex128, "torch.int64": torch.int64, "torch.int32": torch.int32,
           "torch.int16": torch.int16, "torch.int8": torch.int8, "torch.uint8": torch.uint8, "torch.bool": torch.bool}
_RUNNABLE = ("Functional", "Tensor", "Torch")
try:
    from msprobe.core.acc_check.plan import EMPTY_APIS, RANDOM_APIS
except ImportError:  # pragma: no cover - the plan's tables moved
    EMPTY_APIS, RANDOM_APIS = frozenset(), frozenset()


def to_tensor(dtype: str, shape: List[int], data: memoryview) -> torch.Tensor:
    dt = _DTYPES[dtype]
    if data.nbytes == 0:
        return torch.empty(shape, dtype=dt)
    return torch.frombuffer(bytearray(data), dtype=torch.uint8).view(dt).reshape(shape)


def _skip(message: str) -> Dict:
    return {"forward": "SKIP", "backward": "SKIP", "message": message, "details": []}


def _relink(obj: Any, paths: List[str]) -> Any:
    """The record with every ``"@k"`` data_name replaced by the k-th file."""
    if isinstance(obj, dict):
        out = {}
        for k, v in obj.items():
            if k == "data_name" and isinstance(v, str) and v.startswith("@"):
                try:
                    out[k] = paths[int(v[1:])]
                except (ValueError, IndexError):
                    out[k] = ""
            else:
                out[k] = _relink(v, paths)
        return out
    if isinstance(obj, list):
        return [_relink(v, paths) for v in obj]
    return obj


_KNOWN = {}


def _known(prefix: str) -> frozenset:
    """The APIs the dump hooks for a prefix (msprobe/pytorch/dump/api_lists.json): the checker re-runs nothing
    else, whatever a client sends (no torch.load or other file access by name)."""
    if not _KNOWN:
        import json

        import msprobe.pytorch.dump as dump_pkg

        with open(os.path.join(os.path.dirname(dump_pkg.__file__), "api_lists.json"), encoding="utf-8") as fh:
            lists = json.load(fh)
        _KNOWN.update(Functional=frozenset(lists.get("functional", ())), Tensor=frozenset(lists.get("tensor", ())),
                      Torch=frozenset(lists.get("torch", ())))
    return _KNOWN.get(prefix, frozenset())


def aten_skip_reason(name: str, overload: Any = "default") -> str:
    """Why an ``Aten.{op}.{n}`` call is not re-run ("" when it is): the op must be an aten op of this torch
    that takes a tensor, is neither random nor a creation op, and has no string argument that could name a file."""
    parts = A.split(name)
    if parts is None:
        return f"API {name} not support for run ut: an aten call is named Aten.{{op}}.{{n}}. SKIP."
    op = parts[0]
    if not A.overload_ok(overload):
        return f"API {name}: the overload {str(overload)[:40]!r} is not a name. SKIP."
    if op in A.BLACKLIST:
        return f"aten op {op} creates, copies, views or casts a tensor (the training side does not send it). SKIP."
    if op in RANDOM_APIS or op in ("native_dropout", "bernoulli", "normal", "uniform", "exponential"):
        return f"random API {op}: two runs never give the same values, nothing to compare element-wise. SKIP."
    if op in EMPTY_APIS:
        return f"API {op} returns uninitialised memory: nothing to compare. SKIP."
    try:
        packet = getattr(torch.ops.aten, op)
        fn = getattr(packet, overload)
    except (AttributeError, RuntimeError):
        fn = None
    if not isinstance(fn, torch._ops.OpOverload):
        return f"aten op {op}.{overload} does not exist in this torch ({torch.__version__}). SKIP."
    args = fn._schema.arguments
    named = [a.name for a in args if "str" in str(a.type) and a.name not in A.SAFE_STR_ARGS]
    if named:
        return f"aten op {op}.{overload} takes the string argument {named[0]!r}: not re-run. SKIP."
    if not any("Tensor" in str(a.type) for a in args):
        return f"aten op {op}.{overload} takes no tensor: nothing to check. SKIP."
    return ""


def skip_reason(name: str) -> str:
    if A.is_aten(name):
        return aten_skip_reason(name)
    parts = name.split(".")
    prefix, api = parts[0], ".".join(parts[1:-1])
    if len(parts) < 3 or prefix not in _RUNNABLE:
        return f"API {name} not support for run ut: only Functional, Tensor and Torch APIs are re-run. SKIP."
    if api not in _known(prefix):
        return f"API {name} not support for run ut: {api} is not in the hooked API list. SKIP."
    if api in RANDOM_APIS:
        return f"random API {api}: two runs never give the same values, nothing to compare element-wise. SKIP."
    if api in EMPTY_APIS:
        return f"API {api} returns uninitialised memory: nothing to compare. SKIP."
    return ""


def _received_outputs(record: Dict, loaded: List[torch.Tensor]):
    """The training's outputs of the call, flattened as the runtime flattens a result (None when they are not
    all tensors)."""
    out = []

    def walk(v) -> bool:
        if v is None:       # an aten op's absent output (convolution_backward without a bias gradient)
            out.append(None)
            return True
        if isinstance(v, list):
            return all(walk(x) for x in v)
        if isinstance(v, dict) and isinstance(v.get("data_name"), str) and v["data_name"].startswith("@"):
            try:
                out.append(loaded[int(v["data_name"][1:])])
                return True
            except (ValueError, IndexError):
                return False
        return False
    return out if walk(record.get("output")) and any(t is not None for t in out) else None


class OnlineCallChecker(Checker):
    """The offline checker, with the training's own outputs as the device side: the received output is judged
    against the CPU benchmark (when it matches the re-run output for output in dtype and shape; otherwise the
    checker's device re-run is judged, as offline)."""

    def __init__(self, *args, received=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.received = received
        self.used_received = False

    def _run(self, spec, fn, autocast, bdtype, raise_dtype, propagation):
        runs, failure = super()._run(spec, fn, autocast, bdtype, raise_dtype, propagation)
        rec = self.received
        if failure is None and rec is not None and propagation == "forward":
            dev = runs["device"]
            same = isinstance(dev, list) and len(dev) == len(rec) and all(
                (d is None and r is None) or (isinstance(d, torch.Tensor) and isinstance(r, torch.Tensor)
                                              and d.dtype == r.dtype and d.shape == r.shape)
                for d, r in zip(dev, rec))
            if same:
                runs["device"] = [None if r is None else r.to(d.device) for r, d in zip(rec, dev)]
                self.used_received = True
                if self.device == "cpu" and spec["STANDARD"] in ("benchmark", "ulp"):
                    # the checker's own CPU run in the training's dtypes is a second implementation: the ratio
                    # standards compare the training's error with its error (as the reference's three-way check
                    # compares the NPU's with the GPU's), not with the benchmark rounded to the dtype
                    runs["reference"] = dev
                    self.reference_on_cpu = True
        return runs, failure


class AtenCallChecker(OnlineCallChecker):
    """An aten op of the training's backward: ``Aten.mm.0`` with overload ``default`` is
    ``torch.ops.aten.mm.default``, re-run on the received inputs (as recorded: no autocast guess, since an aten
    op's mixed dtypes are its own) and judged by the standard of the op's name, as the forward calls are."""

    def __init__(self, *args, op: str, overload: str, **kwargs):
        super().__init__(*args, **kwargs)
        self.op, self.overload = op, overload

    def _case(self, entries, propagation, mode):
        return core_generator.case_from_records(
            self.dump_json, entries, propagation, mode, self.seed, 1, None, convert=_convert,
            split=lambda full: (A.PREFIX, self.op), tensor_folder="the received call")

    def _spec(self, name, case, propagation, mode):
        spec = super()._spec(name, case, propagation, mode)
        spec["API"] = (A.PREFIX, f"{self.op}.{self.overload}")
        return spec


def make_judge(init: Dict[str, Any]):
    torch.set_num_threads(1)
    device = pick_device(init.get("devices") or [0], 0)
    if device.startswith("cuda"):
        torch.cuda.set_device(device)
    error_dir = init.get("error_dir")
    seed = int(init.get("seed", 1234))

    def judge(header: Dict[str, Any], tensors) -> Dict:
        name = header["name"]
        aten = A.is_aten(name)
        overload = header["record"].get("overload", "default") if aten else None
        reason = aten_skip_reason(name, overload) if aten else skip_reason(name)
        if reason:
            return _skip(reason)
        folder = tempfile.mkdtemp(prefix="msprobe-online-")
        try:
            paths, loaded = [], []
            for k, (dtype, shape, data) in enumerate(tensors):
                p = os.path.join(folder, f"{k}.pt")
                t = to_tensor(dtype, shape, data)
                torch.save(t, p)
                paths.append(p)
                loaded.append(t)
            record = _relink(header["record"], paths)
            where = f"online call {name} (rank {header['rank']}, step {header['step']})"
            received = _received_outputs(header["record"], loaded)
            if aten:
                checker = AtenCallChecker(device, True, error_dir, seed, where, received=received,
                                          op=A.split(name)[0], overload=overload)
            else:
                checker = OnlineCallChecker(device, True, error_dir, seed, where, received=received)
            return checker.check({"name": name, "forward": record, "backward": None, "backward_skip": None})
        finally:
            shutil.rmtree(folder, ignore_errors=True)

    return judge
