"""Which APIs of a dump the accuracy pre-check runs, and why the others are skipped (framework-free).

``build_plan`` reads dump.json once and returns one :class:`ApiItem` per API in dump order: the API's
forward and backward records (tensor paths made absolute) and, when it cannot be re-run alone, the
reason, written into the result CSV as the skip message.  The config block ``run_ut`` (``acc_check`` in
26.x) supplies white_list / black_list / error_data_path.
"""

from __future__ import annotations

import difflib
import os
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Tuple

from msprobe.core.errors import MsprobeError
from msprobe.core.fileio import check_path, load_dump_json, load_json

#: prefixes the PyTorch runtime can call (torch.nn.functional, torch.Tensor, torch)
RUNNABLE = ("Functional", "Tensor", "Torch")
COMMUNICATION = ("Distributed", "MindSpeed")
#: random APIs: two calls never give the same values, so nothing can be compared element-wise
RANDOM_APIS = frozenset("""
rand rand_like randn randn_like randint randint_like randperm bernoulli bernoulli_ multinomial normal normal_
uniform_ exponential_ geometric_ cauchy_ log_normal_ random_ poisson rrelu rrelu_ gumbel_softmax
native_dropout fused_dropout npu_dropout_do_mask""".split())
DROPOUTS = frozenset(["dropout", "dropout_", "dropout1d", "dropout2d", "dropout3d", "alpha_dropout", "alpha_dropout_",
                      "feature_alpha_dropout", "feature_alpha_dropout_", "feature_dropout", "feature_dropout_"])
#: uninitialised memory (the reference black-lists these names too)
EMPTY_APIS = frozenset(["empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided", "empty_with_format"])
INPLACE_DUNDERS = frozenset(["__iadd__", "__isub__", "__imul__", "__idiv__", "__itruediv__", "__ifloordiv__",
                             "__imod__", "__ipow__", "__iand__", "__ior__", "__ixor__", "__ilshift__", "__irshift__",
                             "__imatmul__", "__setitem__"])
SUPPORTED_DTYPES = frozenset("""torch.float16 torch.bfloat16 torch.float32 torch.float64 torch.float torch.double
torch.half torch.complex64 torch.complex128 torch.int8 torch.int16 torch.int32 torch.int64 torch.long torch.int
torch.uint8 torch.bool""".split())
TENSOR_TYPES = ("torch.Tensor", "torch.nn.parameter.Parameter")
#: MindSpore PyNative dumps: the prefixes the MindSpore runtime can call (mindspore.mint, mint.nn.functional,
#: mindspore.ops, mindspore.Tensor), their tensor record types and dtypes
MS_RUNNABLE = ("Mint", "MintFunctional", "Functional", "Tensor")
MS_TENSOR_TYPES = ("mindspore.Tensor", "mindspore.Parameter", "mindspore.common.tensor.Tensor",
                   "mindspore.common.parameter.Parameter")
MS_SUPPORTED_DTYPES = frozenset("""Float16 BFloat16 Float32 Float64 Int8 Int16 Int32 Int64 UInt8 Bool""".split())
MS_RANDOM_APIS = frozenset("""uniform standard_normal standard_laplace random_gamma random_poisson random_categorical
gamma laplace""".split())
CONFIG_KEYS = ("white_list", "black_list", "error_data_path", "precision", "is_online", "nfs_path", "host", "port",
               "rank_list", "tls_path")
_NAME_RE = re.compile(r"^[A-Za-z0-9_]+(\.[A-Za-z0-9_]+){2,3}$")


@dataclass(frozen=True)
class Rules:
    """What a framework's checker can run: API prefixes, tensor record types, dtypes, random APIs."""

    framework: str
    runnable: tuple
    tensor_types: tuple
    dtypes: frozenset
    random_apis: frozenset
    what: str  # the runnable prefixes, for the skip message


RULES = {
    "pytorch": Rules("pytorch", RUNNABLE, TENSOR_TYPES, SUPPORTED_DTYPES, RANDOM_APIS,
                     "only Functional, Tensor and Torch APIs are re-run"),
    "mindspore": Rules("mindspore", MS_RUNNABLE, MS_TENSOR_TYPES, MS_SUPPORTED_DTYPES, RANDOM_APIS | MS_RANDOM_APIS,
                       "only Mint, MintFunctional, Functional (mindspore.ops) and Tensor APIs are re-run"),
}


@dataclass
class RunUtConfig:
    """The run_ut block of config.json (reference defaults)."""

    white_list: List[str] = field(default_factory=list)
    black_list: List[str] = field(default_factory=list)
    error_data_path: str = "./"


@dataclass
class ApiItem:
    """One API of the dump, in dump order."""

    index: int
    name: str                       # Functional.linear.0
    prefix: str                     # Functional
    api: str                        # linear (linalg.inv for 4-part names)
    forward: Optional[dict]
    backward: Optional[dict]
    skip: Optional[str] = None      # why it is not run (the result CSV's message)
    backward_skip: Optional[str] = None  # why its backward is not run (forward still is)


@dataclass
class Plan:
    dump_json: str
    framework: str
    real_data: bool
    items: List[ApiItem]
    names: frozenset = frozenset()  # every API name of the dump, those that -f left out too

    @property
    def runnable(self) -> List[ApiItem]:
        return [it for it in self.items if it.skip is None]


# ---------------------------------------------------------------------------------------- config
def load_run_ut_config(path: Optional[str]) -> RunUtConfig:
    """The ``run_ut`` (or ``acc_check``) block of a config.json; every problem is one MsprobeError line."""
    if not path:
        return RunUtConfig()
    obj = load_json(path, "config.json (-config)")
    where = f"config.json {os.path.abspath(path)}"
    if not isinstance(obj, dict):
        raise MsprobeError(f"{where}: the top level must be an object holding a \"run_ut\" block")
    block = obj.get("run_ut", obj.get("acc_check"))
    if block is None:
        return RunUtConfig()
    if not isinstance(block, dict):
        raise MsprobeError(f"{where}: \"run_ut\" must be an object with white_list, black_list, error_data_path")
    unknown = sorted(set(block) - set(CONFIG_KEYS))
    if unknown:
        close = difflib.get_close_matches(unknown[0], CONFIG_KEYS, n=1)
        raise MsprobeError(f"{where}: unknown key {unknown[0]!r} in \"run_ut\""
                           + (f" (did you mean {close[0]!r}?)" if close else "")
                           + f"; the keys are white_list, black_list, error_data_path")
    if block.get("is_online"):
        raise MsprobeError(f"{where}: \"is_online\": true (online pre-check) is not supported by this msprobe; "
                           f"dump with task \"tensor\" and run run_ut on the dump")
    cfg = RunUtConfig()
    for key in ("white_list", "black_list"):
        value = block.get(key, [])
        if value is None:
            value = []
        if not isinstance(value, list):
            raise MsprobeError(f"{where}: {key} must be a list type")
        if not all(isinstance(v, str) for v in value):
            raise MsprobeError(f"{where}: All elements in {key} must be string type")
        setattr(cfg, key, [v.strip() for v in value])
    edp = block.get("error_data_path", "./")
    if not isinstance(edp, str) or not edp:
        raise MsprobeError(f"{where}: error_data_path must be a non-empty string")
    if not os.path.isdir(edp):
        raise MsprobeError(f"{where}: error_data_path: {edp} does not exist")
    cfg.error_data_path = edp
    return cfg


# ---------------------------------------------------------------------------------------- tensor paths
def tensor_dir(dump: dict, dump_json_path: str) -> str:
    """Where the dump's .pt files are: dump_data_dir when it exists, else dump_tensor_data beside dump.json
    (a dump copied to another machine keeps the old absolute dump_data_dir)."""
    recorded = dump.get("dump_data_dir")
    if isinstance(recorded, str) and recorded and os.path.isdir(recorded):
        return recorded
    return os.path.join(os.path.dirname(os.path.abspath(dump_json_path)), "dump_tensor_data")


def absolute_data_names(obj: Any, directory: str) -> Any:
    """The record with every relative ``data_name`` joined to ``directory``."""
    if isinstance(obj, dict):
        out = {}
        for k, v in obj.items():
            if k == "data_name" and isinstance(v, str) and v and not os.path.isabs(v):
                out[k] = os.path.join(directory, v)
            else:
                out[k] = absolute_data_names(v, directory)
        return out
    if isinstance(obj, list):
        return [absolute_data_names(v, directory) for v in obj]
    return obj


def _tensor_records(obj: Any, types: tuple = TENSOR_TYPES) -> List[dict]:
    if isinstance(obj, dict):
        kind = obj.get("type")
        if isinstance(kind, str) and kind in types:
            return [obj]
        return [t for v in obj.values() for t in _tensor_records(v, types)]
    if isinstance(obj, list):
        return [t for v in obj for t in _tensor_records(v, types)]
    return []


# ---------------------------------------------------------------------------------------- the plan
def _arg(rec: dict, pos: int, name: str) -> Any:
    """The recorded value of an argument given by position or keyword (None when absent or a tensor)."""
    kwargs = rec.get("input_kwargs") or {}
    item = kwargs.get(name) if isinstance(kwargs, dict) else None
    if item is None:
        args = rec.get("input_args") or []
        item = args[pos] if isinstance(args, list) and len(args) > pos else None
    if isinstance(item, dict):
        return item.get("value")
    return item


def _random_reason(api: str, fwd: dict, random_apis: frozenset = RANDOM_APIS) -> Optional[str]:
    if api in random_apis:
        return f"random API {api}: two runs never give the same values, nothing to compare element-wise. SKIP."
    if api in DROPOUTS:
        p = _arg(fwd, 1, "p")
        training = _arg(fwd, 2, "training" if "train" not in (fwd.get("input_kwargs") or {}) else "train")
        if p in (0, 0.0) or training is False:
            return None  # deterministic: identity (or scaled identity)
        return f"random API {api} (p={p}): two runs never drop the same elements, nothing to compare. SKIP."
    return None


def _skip_reason(prefix: str, api: str, name: str, fwd: Optional[dict], cfg: RunUtConfig, real_data: bool,
                 rules: Rules = RULES["pytorch"]) -> Optional[str]:
    if fwd is None:
        return "no forward record in dump.json (only its backward was dumped): nothing to re-run. SKIP."
    if prefix in COMMUNICATION:
        return f"API {name} not support for run ut: communication API, it needs the other ranks. SKIP."
    if not _NAME_RE.match(name):
        return f"API {name} not support for run ut: the name is not Type.api.N. SKIP."
    if prefix not in rules.runnable:
        what = ("an NPU-only API (torch_npu)" if prefix == "NPU" else
                "a Primitive (its construction arguments are not recorded)" if prefix == "Primitive" else
                f"a {prefix} API")
        return f"API {name} not support for run ut: {what}; {rules.what}. SKIP."
    if api in cfg.black_list or name in cfg.black_list or (cfg.white_list and api not in cfg.white_list
                                                          and name not in cfg.white_list):
        return f"API {api} in black list or not in white list. SKIP."
    if api in EMPTY_APIS:
        return f"API {api} returns uninitialised memory: nothing to compare. SKIP."
    reason = _random_reason(api, fwd, rules.random_apis)
    if reason:
        return reason
    tensors = _tensor_records([fwd.get("input_args"), fwd.get("input_kwargs"), fwd.get("output")], rules.tensor_types)
    bad = sorted({str(t.get("dtype")) for t in tensors
                  if not isinstance(t.get("dtype"), str) or t.get("dtype") not in rules.dtypes})
    if bad:
        return f"unsupported dtype {bad[0]} in {name}: not re-run. SKIP."
    if real_data:
        inputs = _tensor_records([fwd.get("input_args"), fwd.get("input_kwargs")], rules.tensor_types)
        unnamed = [t for t in inputs if not t.get("data_name") or not isinstance(t.get("data_name"), str)]
        if unnamed:
            return f"no data: {len(unnamed)} input tensor(s) of {name} have no data_name (a file name) in the dump. SKIP."
        absent = [t["data_name"] for t in inputs if not os.path.isfile(t["data_name"])]
        if absent:
            return f"no data: tensor file {os.path.basename(absent[0])} of {name} is missing. SKIP."
    return None


def _backward_skip(api: str, fwd: dict, bwd: Optional[dict]) -> Optional[str]:
    if bwd is None:
        return None
    kwargs = fwd.get("input_kwargs") or {}
    if isinstance(kwargs, dict) and kwargs.get("out") is not None:
        return "function with out=... arguments don't support automatic differentiation, skip backward."
    if (api.endswith("_") and not api.endswith("__")) or api in INPLACE_DUNDERS:
        return ("in-place API: its gradient flows through the tensor it overwrote (often a view of another), "
                "which a re-run alone cannot rebuild; skip backward.")
    return None


def _dedupe_key(fwd: dict) -> str:
    """-f: the call's arguments without Max/Min of its positional arguments (the reference's rule)."""
    args = fwd.get("input_args") or []
    stripped = [{k: v for k, v in a.items() if k not in ("Max", "Min")} if isinstance(a, dict) else a for a in args]
    import json

    return json.dumps([stripped, fwd.get("input_kwargs") or {}], sort_keys=True, default=str)


def build_plan(dump_json: str, cfg: Optional[RunUtConfig] = None, filter_api: bool = False,
               data_mode: str = "auto") -> Plan:
    """Read dump.json and decide for every API whether and how it is run (see the module docstring).

    ``data_mode``: ``auto`` (real data when the dump has tensors), ``random_data`` or ``real_data``."""
    cfg = cfg or RunUtConfig()
    path = check_path(dump_json, "-api_info", "file")
    dump = load_dump_json(path)
    if not isinstance(dump, dict):
        raise MsprobeError(f"dump.json {path}: the top level must be an object with a 'data' field; pass a dump.json")
    data = dump.get("data")
    if not isinstance(data, dict):
        raise MsprobeError(f"dump.json {path}: something wrong with dump, no data found in dump.json")
    framework = str(dump.get("framework") or "pytorch")
    rules = RULES[_framework_name(framework, path)]
    has_tensors = dump.get("task") == "tensor" or bool(dump.get("dump_data_dir"))
    if data_mode == "real_data" and not has_tensors:
        raise MsprobeError(f"dump.json {path} holds statistics only (task {dump.get('task')!r}, no dump_data_dir): "
                           f"real-data mode needs a dump with task \"tensor\"; use --data_mode random_data")
    real = data_mode == "real_data" or (data_mode == "auto" and has_tensors)
    directory = tensor_dir(dump, path)
    if real and not os.path.isdir(directory):
        raise MsprobeError(f"dump.json {path} is a tensor dump but its tensors are missing (no {directory}); copy the "
                           f"dump's dump_tensor_data next to dump.json, or use --data_mode random_data")
    order: Dict[str, ApiItem] = {}
    for key, rec in data.items():
        if not isinstance(key, str) or key.split(".", 1)[0] in ("Module", "Cell"):
            continue
        if key.endswith(".forward"):
            name, direction = key[: -len(".forward")], "forward"
        elif key.endswith(".backward"):
            name, direction = key[: -len(".backward")], "backward"
        else:
            continue  # parameters_grad and other non-API records
        item = order.get(name)
        if item is None:
            parts = name.split(".")
            prefix = parts[0]
            api = ".".join(parts[1:-1]) if len(parts) >= 3 else name
            item = order[name] = ApiItem(index=len(order), name=name, prefix=prefix, api=api, forward=None, backward=None)
        rec = rec if isinstance(rec, dict) else {}
        rec = absolute_data_names(rec, directory) if real else rec
        setattr(item, direction, rec)
    items = list(order.values())
    if not items:
        raise MsprobeError(f"dump.json {path} records no API (level L1 dumps record Functional/Tensor/Torch APIs); "
                           f"dump with level \"L1\" or \"mix\"")
    if real and not any(t.get("data_name") for it in items for t in _tensor_records(it.forward, rules.tensor_types)):
        raise MsprobeError(f"dump.json {path}: real-data mode, but no tensor record has a data_name (a dump without "
                           f"tensors); dump with task \"tensor\" or use --data_mode random_data")
    _check_white_list(cfg, items, path)
    seen: Dict[str, set] = {}
    kept = []
    for it in items:
        if filter_api and it.forward is not None:
            group = it.name.rsplit(".", 1)[0]
            key = _dedupe_key(it.forward)
            if key in seen.setdefault(group, set()):
                continue  # -f: an identical call of the same API was kept already
            seen[group].add(key)
        it.skip = _skip_reason(it.prefix, it.api, it.name, it.forward, cfg, real, rules)
        if it.skip is None:
            it.backward_skip = _backward_skip(it.api, it.forward, it.backward)
        kept.append(it)
    for i, it in enumerate(kept):
        it.index = i
    return Plan(dump_json=path, framework=rules.framework, real_data=real, items=kept,
                names=frozenset(it.name for it in items))


def _check_white_list(cfg: RunUtConfig, items: List[ApiItem], path: str) -> None:
    """A white_list name that matches no API of the dump is a typo (the run would silently check nothing)."""
    known = {it.api for it in items} | {it.name for it in items}
    for name in cfg.white_list:
        if name not in known:
            close = difflib.get_close_matches(name, sorted(known), n=3, cutoff=0.6)
            raise MsprobeError(f"white_list: API {name!r} is not in dump.json {path}"
                               + (f" (close names: {', '.join(close)})" if close else "")
                               + "; names are short API names such as linear, conv2d, __matmul__")


def framework_of(dump_json: str) -> str:
    """The framework a dump names (26.x acc_check picks the checker by it): pytorch or mindspore."""
    path = check_path(dump_json, "-api_info", "file")
    dump = load_dump_json(path)
    fw = dump.get("framework") if isinstance(dump, dict) else None
    if fw is None:
        raise MsprobeError(f'Key "framework" not found in {path}; pass the dump.json of a dump made by msprobe')
    return _framework_name(fw, path)


def _framework_name(fw: Any, path: str) -> str:
    fw = str(fw).lower()
    if fw in ("pytorch", "pt"):
        return "pytorch"
    if fw in ("mindspore", "ms"):
        return "mindspore"
    if fw == "mindtorch":
        raise MsprobeError(f"dump.json {path} is a MindTorch dump: the pre-check of MindTorch dumps is not supported "
                           f"by this msprobe; dump with PyTorch or MindSpore")
    raise MsprobeError(f"Unsupported framework in api_info: {fw!r} ({path}); expected pytorch or mindspore")


def skip_result(message: str) -> Dict:
    """A checker's result for an API it does not run: SKIP both ways, with the reason as the message."""
    return {"forward": "SKIP", "backward": "SKIP", "message": message, "details": []}


def rebuild_case(task: Dict, build: Callable[[Dict, str], Any]) -> Tuple[Any, bool, str, Optional[str]]:
    """The case of one task (an :class:`ApiItem` as the checker gets it), rebuilt by the framework's
    ``build(records, propagation)`` ("both" or "forward"). When the backward record is what cannot be rebuilt
    (e.g. its gradient tensor is missing) the forward is kept and the backward noted as not run.

    Returns ``(case, with_backward, backward_note, skip_message)``; ``skip_message`` set means the API
    cannot be run at all (``case`` is then None)."""
    name = task["name"]
    with_bwd = task.get("backward") is not None and not task.get("backward_skip")
    records = {f"{name}.forward": task["forward"]}
    if with_bwd:
        records[f"{name}.backward"] = task["backward"]
    note = task.get("backward_skip") or ""
    try:
        return build(records, "both" if with_bwd else "forward"), with_bwd, note, None
    except MsprobeError as exc:
        if not with_bwd:
            return None, False, note, f"{exc}. SKIP."
        try:
            case = build({f"{name}.forward": task["forward"]}, "forward")
        except MsprobeError:
            return None, False, note, f"{exc}. SKIP."
        return case, False, f"backward not run: {exc}", None
