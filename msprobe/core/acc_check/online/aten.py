"""Backward aten ops of the online pre-check (framework-free): which ops the training side sends, how a call is
named, and which the checker agrees to re-run.

Between ``start()`` and ``stop()`` the training side runs ``torch.autograd.backward`` (``Tensor.backward`` goes
through it) inside a dispatch mode that sends every aten op executed during the backward as one call named
``Aten.{op}.{n}`` (``n`` counts per op and per step, from 0, as the forward calls' numbers do), with the op's
overload (``default``, ``dim_IntList`` ...) in the record. Left out: the ops of :data:`BLACKLIST` (creation,
copy, view, cast and communication ops, whose check says nothing about precision; the reference's
``torch_ops_config.yaml`` list plus ``broadcast_`` and the layout-dependent views such as ``as_strided``), ops
outside the ``aten`` namespace (``c10d``, ``prims`` ...), and ops run while the tool itself is working. For the
ops of :data:`GRAD_MODE_OPS` grad mode is switched on around the op, as the reference does (an NPU kernel of those
ops checks it; the values are the same).
"""

from __future__ import annotations

import re
from typing import Iterable, Optional, Tuple

PREFIX = "Aten"

#: aten ops never sent (the op's name without overload); the reference's list plus ``broadcast_`` and the views
#: whose result depends on the input's storage layout (strides, offset), which the sent contiguous copy does not keep
BLACKLIST = frozenset("""as_strided as_strided_ _reshape_alias
_cudnn_rnn _local_scalar_dense _pin_memory _to_copy _unsafe_view add_ allreduce_ broadcast_ clone contiguous copy_
cudnn_batch_norm cudnn_batch_norm_backward detach empty index_put_ lift_fresh max max_pool2d_with_indices
max_pool2d_with_indices_backward native_batch_norm_backward new_empty new_empty_strided new_full new_ones new_zeros
npu_dtype_cast npu_rotary_mul ones ones_like permute rand rand_like randint randint_like randn randn_like randperm
scalar_tensor select split_with_sizes to transpose unbind view zero zero_ zeros zeros_like
""".split())

#: aten ops run with grad mode on inside the capture (the reference's ``npu_adjust_autograd``)
GRAD_MODE_OPS = frozenset(["adaptive_avg_pool2d", "batch_norm", "log_softmax", "nll_loss", "to"])

#: string arguments an aten op may take and still be re-run by the checker (modes and the like); an op with any
#: other string argument (``aten::save(filename)``, ``aten::from_file``) is never called by the checker
SAFE_STR_ARGS = frozenset(["rounding_mode", "approximate", "equation", "side", "reduce", "mode", "padding",
                           "reduction", "indexing", "interpolation", "pad_mode", "UPLO", "uplo", "driver",
                           "padding_side", "norm", "ord", "p"])

_OP_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def sent(op: str, namespace: str = "aten") -> bool:
    """Whether the training side sends an op executed during backward."""
    return namespace == "aten" and op not in BLACKLIST


def call_name(op: str, n: int) -> str:
    return f"{PREFIX}.{op}.{n}"


def is_aten(name: str) -> bool:
    return name.startswith(PREFIX + ".")


def split(name: str) -> Optional[Tuple[str, int]]:
    """``Aten.mm.3`` -> ("mm", 3); None when the name is not of that form."""
    parts = name.split(".")
    if len(parts) != 3 or parts[0] != PREFIX or not _OP_RE.match(parts[1]) or not parts[2].isdigit():
        return None
    return parts[1], int(parts[2])


def overload_ok(overload) -> bool:
    return isinstance(overload, str) and bool(_OP_RE.match(overload))


def listed(items: Iterable[str], name: str) -> bool:
    """The dump config's ``list`` for a backward op: an item that is part of ``Aten.{op}.{n}`` selects it
    (``"Aten.mm"``, ``"threshold_backward"``); an empty list selects every op."""
    items = [i for i in items if i]
    return not items or any(i in name for i in items)
