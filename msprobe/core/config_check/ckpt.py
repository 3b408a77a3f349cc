"""Checkpoint similarity (``config_check -c CKPT_DIR1 CKPT_DIR2 [-o ckpt_similarity.json]``).

Two Megatron-LM / MindSpeed checkpoint folders (``iter_XXXXXXX/mp_rank_TT[_PPP][_EEE]/model_optim_rng.pt``,
or their parent holding ``latest_checkpointed_iteration.txt``) are merged into whole parameters (tensor
parallel shards concatenated, pipeline / virtual-pipeline layer and expert numbers made global) and
compared parameter by parameter: ``{"name": {"l2", "cos", "numel", "shape"}}``, the reference's file.

Framework-free: reading one ``.pt`` is done by a ``load(path) -> (weights, args)`` callable the caller
passes (``msprobe.pytorch.config_check.ckpt.load_state``, which never unpickles arbitrary objects).
"""

from __future__ import annotations

import json
import logging
import os
import re
from collections import defaultdict
from typing import Callable, Dict, Optional, Tuple

import numpy as np

from msprobe.core.errors import MsprobeError

logger = logging.getLogger("msprobe")

COLUMN_PARALLEL = ("linear_qkv", "linear_fc1", "word_embeddings.weight", "output_layer.weight")
ROW_PARALLEL = ("linear_fc2.weight", "linear_proj.weight")
#: legacy / other implementations' names -> megatron.core local names
NAME_MAPPING = (
    ("self_attention.linear_qkv.layer_norm_", "input_layernorm."),
    ("language_model.", ""),
    ("encoder", "decoder"),
    (".input_norm.", ".input_layernorm."),
    ("query_key_value", "linear_qkv"),
    (".dense.", ".linear_proj."),
    ("post_attention_norm", "pre_mlp_layernorm"),
    ("dense_h_to_4h", "linear_fc1"),
    ("dense_4h_to_h", "linear_fc2"),
    ("mlp.local_experts", "mlp.experts.local_experts"),
    ("final_norm", "final_layernorm"),
    ("word_embeddings_for_head", "output_layer"),
)
_LAYER = re.compile(r"layers\.(\d+)\.")
_EXPERT = re.compile(r"experts\.(\d+)\.")
_ITER = re.compile(r"iter_(\d{7})")
_RANK_DIR = re.compile(r"^mp_rank_(\d{2})(?:_(\d{3}))?(?:_(\d{3}))?$")
CKPT_FILE = "model_optim_rng.pt"

Loader = Callable[[str], Tuple[Dict[str, object], Optional[dict]]]


# ------------------------------------------------------------------------------------------ metrics
def metrics(a: np.ndarray, b: np.ndarray) -> dict:
    """l2 distance, cosine similarity, numel and shape of two parameters (float64 arithmetic)."""
    same = a.shape == b.shape
    out = {}
    if same:
        x, y = a.astype(np.float64).ravel(), b.astype(np.float64).ravel()
        out["l2"] = float(np.linalg.norm(x - y))
        na, nb = float(np.linalg.norm(x)), float(np.linalg.norm(y))
        if na == 0 and nb == 0:
            out["cos"] = 1.0
        elif na == 0 or nb == 0:
            out["cos"] = None
        else:
            out["cos"] = float(np.dot(x, y) / (na * nb))
    else:
        logger.warning("a, b are in different shape. a: %s, b: %s", a.shape, b.shape)
        out["l2"] = None
        out["cos"] = None
    out["numel"] = int(a.size) if a.size == b.size else [int(a.size), int(b.size)]
    out["shape"] = list(a.shape) if same else [list(a.shape), list(b.shape)]
    return out


# -------------------------------------------------------------------------------------- discovery
def iteration_dir(path: str) -> str:
    """The iteration folder: ``path`` itself (``iter_XXXXXXX``) or the one its tracker file names."""
    from msprobe.core.fileio import check_path

    path = check_path(path, "checkpoint folder", "dir")
    tracker = os.path.join(path, "latest_checkpointed_iteration.txt")
    if os.path.isfile(tracker):
        with open(tracker, "r", encoding="utf-8", errors="replace") as fh:
            text = fh.read().strip()
        if text == "release":
            path = os.path.join(path, "release")
        elif text.isdigit():
            path = os.path.join(path, f"iter_{int(text):07d}")
        else:
            raise MsprobeError(f"{tracker} holds {text[:40]!r}, neither an iteration number nor 'release'")
    if not os.path.isdir(path):
        raise MsprobeError(f"checkpoint folder {path} does not exist")
    return path


def rank_dirs(path: str) -> Dict[Tuple[int, int, int], str]:
    """{(tp, a, b): folder} of the ``mp_rank_*`` folders (a, b: the 2nd and 3rd numbers, -1 when absent)."""
    out = {}
    for name in sorted(os.listdir(path)):
        m = _RANK_DIR.match(name)
        if m and os.path.isfile(os.path.join(path, name, CKPT_FILE)):
            out[(int(m.group(1)), int(m.group(2) or -1), int(m.group(3) or -1))] = os.path.join(path, name, CKPT_FILE)
    if not out:
        raise MsprobeError(f"no mp_rank_*/{CKPT_FILE} in {path}: not a Megatron / MindSpeed checkpoint folder")
    return out


# ------------------------------------------------------------------------------------------ merging
def map_name(name: str) -> str:
    for old, new in NAME_MAPPING:
        name = name.replace(old, new)
    return name


def _global_layer(name: str, layers_per_stage: int, pp_size: int, pp_rank: int, vpp: int) -> str:
    m = _LAYER.search(name)
    if not m:
        return name
    local = int(m.group(1))
    return name.replace(f"layers.{local}.", f"layers.{local + (pp_size * vpp + pp_rank) * layers_per_stage}.", 1)


def _global_expert(name: str, per_rank: int, ep_rank: int) -> str:
    m = _EXPERT.search(name)
    if not m:
        return name
    local = int(m.group(1))
    return name.replace(f"experts.{local}.", f"experts.{local + ep_rank * per_rank}.", 1)


def _consolidate(name: str, shards: list) -> np.ndarray:
    if len(shards) == 1:
        return shards[0]
    try:
        if any(k in name for k in COLUMN_PARALLEL):
            return np.concatenate(shards, axis=0)
        if any(k in name for k in ROW_PARALLEL):
            return np.concatenate(shards, axis=1)
    except ValueError as exc:
        raise MsprobeError(f"tensor-parallel shards of {name} do not fit together ({exc})") from None
    if not all(s.shape == shards[0].shape and np.allclose(shards[0], s, equal_nan=True) for s in shards[1:]):
        logger.warning("Inconsistent values for %s across TP ranks", name)
    return shards[0]


def _arg(args: Optional[dict], key: str, default):
    if not args:
        return default
    value = args.get(key)
    return default if value is None else value


def load_megatron(path: str, load: Loader) -> Dict[str, np.ndarray]:
    """All parameters of one checkpoint, merged over tensor / pipeline / expert parallel ranks."""
    path = iteration_dir(path)
    files = rank_dirs(path)
    first_weights, args = load(files[min(files)])
    tp_size = max(k[0] for k in files) + 1
    tp_args = _arg(args, "tensor_model_parallel_size", 0)
    if isinstance(tp_args, int) and tp_args > tp_size:
        # a shard folder whose model_optim_rng.pt is missing (or not a file) past the last one found: merging
        # the others would give parameters of the wrong shape
        raise MsprobeError(f"{path}: the checkpoint's arguments say tensor_model_parallel_size {tp_args} but "
                           f"{CKPT_FILE} is found for tp 0..{tp_size - 1} only; the shard of tp {tp_size} is missing")
    pp_size = int(_arg(args, "pipeline_model_parallel_size", 0) or 0)
    ep_size = int(_arg(args, "expert_model_parallel_size", 0) or 0)
    seconds = max(k[1] for k in files) + 1 if any(k[1] >= 0 for k in files) else 1
    thirds = max(k[2] for k in files) + 1 if any(k[2] >= 0 for k in files) else 1
    if thirds > 1:
        pp_size, ep_size = seconds, thirds
    elif seconds > 1:  # one extra number: pipeline unless the arguments say expert parallel
        if ep_size > 1 and pp_size <= 1:
            pp_size = 1
        else:
            pp_size, ep_size = seconds, 1
    pp_size, ep_size = max(pp_size, 1), max(ep_size, 1)
    num_experts = _arg(args, "num_experts", None)

    def file_of(tp, pp, ep):
        if thirds > 1:
            return files.get((tp, pp, ep))
        if pp_size > 1:
            return files.get((tp, pp, -1))
        if ep_size > 1:
            return files.get((tp, ep, -1))
        return files.get((tp, -1, -1))

    combined: Dict[str, np.ndarray] = {}
    cache = {files[min(files)]: first_weights}
    for ep in range(ep_size):
        layers_per_stage = 0
        for pp in range(pp_size):
            shards = defaultdict(list)
            for tp in range(tp_size):
                f = file_of(tp, pp, ep)
                if f is None:
                    raise MsprobeError(f"{path}: the shard of tp {tp}, pp {pp}, ep {ep} is missing")
                weights = cache.pop(f, None)
                if weights is None:
                    weights, _ = load(f)
                for key, value in weights.items():
                    shards[key].append(value)
            if not shards:
                raise MsprobeError(f"{path}: no parameters found in the shards of pp {pp}, ep {ep}")
            if not layers_per_stage:
                found = [int(m.group(1)) for m in (_LAYER.search(k) for k in shards) if m]
                layers_per_stage = max(found) + 1 if found else 1
            for key, parts in shards.items():
                name, _, vpp = key.rpartition("|")
                name = _global_layer(name, layers_per_stage, pp_size, pp, int(vpp or 0))
                if num_experts:
                    name = _global_expert(name, int(num_experts) // ep_size, ep)
                combined[name] = _consolidate(name, parts)
    logger.info("Found %d total parameters across all ranks of %s", len(combined), path)
    return combined


def state_weights(state: dict) -> Dict[str, object]:
    """``{mapped name|vpp stage: tensor}`` of a Megatron state dict (``model`` or ``model0``, ``model1``...)."""
    def walk(obj, prefix, out, depth=0):
        if depth > 100:
            return
        if isinstance(obj, dict):
            for k, v in obj.items():
                walk(v, f"{prefix}.{k}" if prefix else str(k), out, depth + 1)
        elif isinstance(obj, np.ndarray):
            out[prefix] = obj

    out: Dict[str, object] = {}
    stages = []
    if "model" in state:
        stages.append(state["model"])
    else:
        while f"model{len(stages)}" in state:  # virtual pipeline stages
            stages.append(state[f"model{len(stages)}"])
    for vpp, model in enumerate(stages):
        flat: Dict[str, object] = {}
        walk(model, "", flat)
        for name, value in flat.items():
            out[f"{map_name(name)}|{vpp}"] = value
    return out


def compare_checkpoints(path1: str, path2: str, output: str, load: Loader) -> str:
    from msprobe.core.fileio import atomic_write

    output = os.path.abspath(output)
    if os.path.lexists(output):
        raise MsprobeError(f"output {output} already exists; choose another -o or remove it (nothing is overwritten)")
    parent = os.path.dirname(output)
    if not os.path.isdir(parent) or not os.access(parent, os.W_OK | os.X_OK):
        raise MsprobeError(f"folder {parent} does not exist or is not writable; choose another -o")
    w1 = load_megatron(path1, load)
    w2 = load_megatron(path2, load)
    only1, only2 = sorted(set(w1) - set(w2)), sorted(set(w2) - set(w1))
    if only1:
        logger.warning("Parameters not in ckpt2: %s", only1)
    if only2:
        logger.warning("Parameters not in ckpt1: %s", only2)
    results = {name: metrics(np.asarray(w1[name]), np.asarray(w2[name])) for name in sorted(set(w1) & set(w2))}
    text = json.dumps(results, indent=4)
    def write(tmp):
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write(text)

    written = atomic_write(output, write)
    logger.info("Comparison results written to %s", written)
    return written
