"""l2 features of the training monitor (``recording_l2_features`` + ``l2_targets``, spec 4.5.7).

* ``attention_hook``: a forward hook on each listed module reads its first two inputs as Q and K (4-D, order
  ``sa_order``: ``s,b,h,d`` or ``b,s,h,d``); for batch 0 and head 0 it forms ``QK^T / sqrt(d)``, applies a causal
  mask and a softmax over each row; ``entropy`` = mean over rows of ``-sum p log p``, ``softmax_max`` = mean
  over rows of ``max p``.  Tag ``{module}.attention:{micro}/rank{R}/qkt``, output ``attention_hook`` (with a
  ``micro_step`` column).  An empty or missing list: not collected.
* ``linear_hook``: each listed module with a 2-D ``weight`` (or ``wg``), embeddings excluded (an empty list:
  every such module), at the last micro step: ``kernel_norm`` = the largest singular value of the weight,
  estimated by 3 power iterations on ``W^T W``; ``sr`` (stable rank) = ``||W||_F / kernel_norm``.  Tag
  ``{module}.linear/rank{R}/sr``, output ``linear_hook``.  The random start vector comes from the monitor's own
  generator (the reference draws it from the global one, which shifts the training's random numbers).

Both are computed on the device and travel in the step's one host transfer.
"""

from __future__ import annotations

import torch

ATTENTION_OPS = ("entropy", "softmax_max")
LINEAR_OPS = ("sr", "kernel_norm")


def linear_weight(module):
    """The name of the 2-D weight the linear hook reads, '' when the module has none (embeddings excluded)."""
    if isinstance(module, torch.nn.Embedding) or hasattr(module, "num_embeddings") or \
            hasattr(module, "vocab_start_index"):
        return ""
    for name in ("weight", "wg"):
        w = getattr(module, name, None)
        if isinstance(w, torch.Tensor) and w.dim() == 2:
            return name
    return ""


def attention_features(q, k, order="s,b,h,d"):
    """(entropy, softmax_max) of batch 0, head 0, as one vector on the device; None if q/k are not 4-D."""
    if not (isinstance(q, torch.Tensor) and isinstance(k, torch.Tensor) and q.dim() == 4 and k.dim() == 4):
        return None
    if order.replace(" ", "") == "b,s,h,d":
        q0, k0 = q[0, :, 0, :], k[0, :, 0, :]
    else:
        q0, k0 = q[:, 0, 0, :], k[:, 0, 0, :]
    qkt = (q0.detach().float() @ k0.detach().float().t()) / q.shape[-1] ** 0.5
    s = qkt.shape[1]
    mask = torch.ones(qkt.shape[0], s, dtype=torch.bool, device=qkt.device).tril()
    qkt = (qkt - qkt.amax(dim=1, keepdim=True)).masked_fill(~mask, float("-inf"))
    p = torch.softmax(qkt, dim=1)
    entropy = torch.mean(-torch.nansum(p * torch.log(p), dim=1))
    return torch.stack([entropy, p.amax(dim=1).mean()])


def linear_features(weight, generator, iterations=3):
    """(sr, kernel_norm) of a 2-D weight, as one vector on the device."""
    w = weight.detach().float()
    u = torch.randn(w.shape[1], generator=generator).to(w.device)
    u = u / u.norm()
    m = w.t() @ w
    spectral = torch.zeros((), device=w.device)
    for _ in range(iterations):
        v = m @ u
        spectral = v @ u
        u = v / v.norm().clamp_min(torch.finfo(torch.float32).tiny)
    kernel = spectral.clamp_min(0).sqrt()
    return torch.stack([torch.linalg.vector_norm(w) / kernel, kernel])
