"""The PyTorch benchmark of the MindSpore pre-check (``run_ut --bench pytorch``): the PyTorch API that the
project's MindSpore-to-PyTorch API table (``config/ms_to_pt_api.yaml``, the one ``compare -am`` uses) names
for a MindSpore API, run on the CPU in higher precision (float64 for float32/64 inputs, else float32) on the
same inputs; its outputs come back as MindSpore tensors, so they are judged exactly like the MindSpore
benchmark's.  Runs in the checker processes; needs torch importable next to MindSpore.
"""

from __future__ import annotations

from typing import Any, List, Optional, Tuple

import numpy as np

from msprobe.core.compare.mapping import load_api_table, table_api

ROOTS = {"Torch": "torch", "Functional": "torch.nn.functional", "Tensor": "torch.Tensor"}


class NoTorchApi(Exception):
    """The MindSpore API has no PyTorch counterpart here (the message says why)."""


class TorchBench:
    def __init__(self):
        try:
            import torch
        except ImportError as exc:
            raise RuntimeError(f"--bench pytorch needs PyTorch importable next to MindSpore ({exc}); install torch "
                               f"or use the default MindSpore benchmark") from None
        self.torch = torch
        torch.set_num_threads(1)
        self.table = load_api_table()

    # ------------------------------------------------------------------ the API
    def resolve(self, kind: str, func: str) -> Tuple[Any, str]:
        """(the torch callable, its name such as torch.nn.functional.softmax) of MindSpore ``kind.func``."""
        mapped = table_api(f"{kind}.{func}", self.table)
        if mapped is None and kind == "Tensor":
            mapped = f"Tensor.{func}"  # Tensor methods mostly share their names
        if mapped is None:
            raise NoTorchApi(f"{kind}.{func} has no PyTorch counterpart in the MindSpore-to-PyTorch API table")
        pkind, _, pname = mapped.partition(".")
        root = {"Torch": self.torch, "Functional": self.torch.nn.functional, "Tensor": self.torch.Tensor}.get(pkind)
        fn = root
        for part in pname.split("."):
            fn = getattr(fn, part, None) if fn is not None else None
        if fn is None:
            raise NoTorchApi(f"{kind}.{func} maps to {ROOTS.get(pkind, pkind)}.{pname}, which this torch "
                             f"({self.torch.__version__}) does not have")
        return fn, f"{ROOTS.get(pkind, pkind)}.{pname}"

    # ------------------------------------------------------------------ running
    def _dtype(self, name: str, wide: bool):
        torch = self.torch
        name = str(name).rsplit(".", 1)[-1].lower()
        if name in ("float16", "bfloat16", "float32", "float64"):
            return torch.float64 if wide else torch.float32
        return getattr(torch, "bool" if name in ("bool", "bool_") else name)

    def place(self, rt, obj, wide: bool):
        """The checker's rebuilt values (rt.Value, rt.DType, ...) as torch objects, floating tensors in the
        benchmark dtype."""
        torch = self.torch
        if isinstance(obj, rt.Value):
            arr = np.asarray(obj.array)
            t = torch.from_numpy(np.array(arr, order="C", copy=True))  # (ascontiguousarray makes 0-d arrays 1-d)
            return t.to(self._dtype(obj.dtype, wide)) if arr.dtype.kind in "fiub" else t
        if isinstance(obj, rt.DType):
            return self._dtype(obj.name, wide)
        if isinstance(obj, rt.Unrecorded):
            return None
        if isinstance(obj, list):
            return [self.place(rt, v, wide) for v in obj]
        if isinstance(obj, tuple):
            return tuple(self.place(rt, v, wide) for v in obj)
        if isinstance(obj, dict):
            return {k: self.place(rt, v, wide) for k, v in obj.items()}
        return obj

    def run(self, rt, fn, args, kwargs, grads, propagation: str, wide: bool) -> List[Any]:
        """Forward outputs, or (``backward``) the gradients of the positional floating tensor inputs for the
        recorded output gradients; returned as MindSpore tensors / Python values."""
        torch = self.torch
        a = self.place(rt, args, wide)
        kw = self.place(rt, kwargs, wide)
        if propagation == "forward":
            with torch.no_grad():
                return [self._back(o) for o in rt.flatten(fn(*a, **kw))]
        idx = [i for i, v in enumerate(a) if isinstance(v, torch.Tensor) and v.is_floating_point()]
        if not idx:
            raise SystemExit("error: this API has no floating tensor input: there is no backward to reproduce")
        for i in idx:
            a[i] = a[i].detach().requires_grad_(True)
        with torch.enable_grad():
            outs = [o for o in rt.flatten(fn(*a, **kw))]
            sens = [g for g in rt.flatten(self.place(rt, grads, wide)) if isinstance(g, torch.Tensor)]
            if len(sens) != len(outs):
                raise SystemExit(f"error: {len(sens)} recorded output gradients for {len(outs)} outputs")
            pairs = [(o, s.to(o.dtype)) for o, s in zip(outs, sens) if isinstance(o, torch.Tensor) and o.requires_grad]
            got = torch.autograd.grad([p[0] for p in pairs], [a[i] for i in idx], [p[1] for p in pairs],
                                      allow_unused=True) if pairs else [None] * len(idx)
        return [self._back(g if g is not None else torch.zeros_like(a[i])) for g, i in zip(got, idx)]

    def _back(self, v) -> Optional[Any]:
        import mindspore as ms

        torch = self.torch
        if isinstance(v, torch.Tensor):
            t = v.detach().cpu()
            if t.dtype == torch.bfloat16:
                t = t.float()
            return ms.Tensor(t.numpy())
        if isinstance(v, torch.Size):
            return tuple(v)
        return v
