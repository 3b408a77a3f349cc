"""op_generate for every framework: config_op.json, the API's records from dump.json, records -> a Case,
the script's data block and writing the script.

The framework generators (msprobe.pytorch.op_generate.generator, msprobe.mindspore.op_generate.generator)
say which APIs exist, how framework-specific argument records (dtypes, devices, ...) become script source,
and the script's header; everything else is here.  Needs neither torch nor MindSpore.
"""

from __future__ import annotations

import difflib
import math
import os
import re
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import orjson

from msprobe.core.acc_check import op_standards, standards
from msprobe.core.acc_check.plan import absolute_data_names, tensor_dir
from msprobe.core.errors import MsprobeError
from msprobe.core.fileio import atomic_write, check_path, ensure_output_dir, load_dump_json, load_json, safe_name

CONFIG_KEYS = ("dump_json_path", "api_name", "extract_api_path", "propagation", "data_mode", "random_seed", "iter_times")
SCALAR_TYPES = ("int", "float", "bool", "str")
MAX_ITER_TIMES = 1000
_NAME_RE = re.compile(r"^[A-Za-z0-9_.\-]+$")
SCRIPT_RUNTIME_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "script_runtime.py")


@dataclass(frozen=True)
class OpGenConfig:
    """One validated config_op.json plus the output directory."""

    config_path: str
    output_dir: str
    extract_api_path: str
    dump_json_path: Optional[str] = None
    api_name: Optional[str] = None
    propagation: str = "forward"
    data_mode: str = "random_data"
    random_seed: int = 1234
    iter_times: int = 1


def _int_field(obj: dict, key: str, default: int, where: str, lo: int, hi: Optional[int] = None) -> int:
    value = obj.get(key, default)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        raise MsprobeError(f"{where}: '{key}' must be an integer, not {value!r}")
    if value < lo or (hi is not None and value > hi):
        rng = f">= {lo}" if hi is None else f"between {lo} and {hi}"
        raise MsprobeError(f"{where}: '{key}' must be {rng}, not {value}")
    return value


def load_config(config_path: str, output_dir: str) -> OpGenConfig:
    """Read and validate config_op.json; every problem is one MsprobeError line."""
    obj = load_json(config_path, "config_op.json", remedy="correct the file at that position (see "
                    "'msprobe op_generate -h' for an example)",
                    empty_remedy="write the configuration into it (see 'msprobe op_generate -h' for an example)")
    where = f"config_op.json {os.path.abspath(config_path)}"
    if not isinstance(obj, dict):
        raise MsprobeError(f"{where}: the top level must be an object with keys {', '.join(CONFIG_KEYS)}")
    unknown = sorted(set(obj) - set(CONFIG_KEYS))
    if unknown:
        hints = []
        for k in unknown:
            close = difflib.get_close_matches(k, CONFIG_KEYS, n=1)
            hints.append(f"{k!r}" + (f" (did you mean {close[0]!r}?)" if close else ""))
        raise MsprobeError(f"{where}: unknown key {', '.join(hints)}; the keys are {', '.join(CONFIG_KEYS)}")
    for key in ("dump_json_path", "api_name", "extract_api_path"):
        if obj.get(key) is not None and not isinstance(obj[key], str):
            raise MsprobeError(f"{where}: '{key}' must be a string")
    extract_path = obj.get("extract_api_path")
    if not extract_path:
        raise MsprobeError(f"{where}: 'extract_api_path' is required (where the extracted API json is written or read)")
    for key in ("dump_json_path", "extract_api_path"):
        if obj.get(key) and "\0" in obj[key]:
            raise MsprobeError(f"{where}: '{key}' holds a NUL character; correct the path")
    propagation = obj.get("propagation") or "forward"
    if propagation not in ("forward", "backward"):
        raise MsprobeError(f"{where}: propagation is invalid, it should be one of ['forward', 'backward'], not {propagation!r}")
    data_mode = obj.get("data_mode") or "random_data"
    if data_mode not in ("random_data", "real_data"):
        raise MsprobeError(f"{where}: data_mode is invalid, it should be one of ['random_data', 'real_data'], not {data_mode!r}")
    seed = _int_field(obj, "random_seed", 1234, where, 0, 2 ** 63 - 1)
    iters = _int_field(obj, "iter_times", 1, where, 1, MAX_ITER_TIMES)
    dump_path = obj.get("dump_json_path") or None
    api_name = obj.get("api_name") or None
    if dump_path:
        dump_path = check_path(dump_path, f"{where}: dump_json_path", "file")
        if not api_name:
            raise MsprobeError(f"{where}: 'api_name' is required with 'dump_json_path' (e.g. \"Functional.softmax.0\")")
    if api_name is not None:
        api_name = api_name.strip()
        for suffix in (".forward", ".backward"):
            if api_name.endswith(suffix):
                api_name = api_name[: -len(suffix)]
        if not _NAME_RE.match(api_name) or len(api_name) > 300:
            raise MsprobeError(f"{where}: api_name {api_name!r} is not a dump name such as Functional.softmax.0 "
                               f"(letters, digits, '_', '.', '-'; at most 300 characters)")
    if not dump_path:
        check_path(extract_path, f"{where}: extract_api_path (no dump_json_path given, so it must exist)", "file")
    return OpGenConfig(
        config_path=os.path.abspath(config_path), output_dir=output_dir,
        extract_api_path=os.path.abspath(extract_path),
        dump_json_path=dump_path, api_name=api_name, propagation=propagation, data_mode=data_mode,
        random_seed=seed, iter_times=iters,
    )


# ---- extraction ----

def extract(cfg: OpGenConfig, kinds: Dict[str, str]) -> Dict[str, dict]:
    """The API's forward (and backward) records from dump.json, with tensor file paths made absolute
    (``kinds``: the framework's API types, named when a module record is asked for).

    Written to extract_api_path (never replacing a different file); without dump_json_path the
    previously extracted (possibly hand-edited) file is read instead."""
    if not cfg.dump_json_path:
        entries = load_json(cfg.extract_api_path, "extracted API json (extract_api_path)")
        if not isinstance(entries, dict) or not entries:
            raise MsprobeError(f"extract_api_path {cfg.extract_api_path}: expected an object of the API's forward/backward records")
        return entries
    dump = load_dump_json(cfg.dump_json_path)
    data = dump.get("data") if isinstance(dump, dict) else None
    if not isinstance(data, dict):
        raise MsprobeError(f"dump.json {cfg.dump_json_path} has no 'data' object; pass the dump.json of a dump")
    prefix = cfg.api_name + "."
    entries = {k: v for k, v in data.items() if k.startswith(prefix) and k.count(".") == cfg.api_name.count(".") + 1}
    if not entries:
        _refuse_module_record(cfg, data, kinds)
        bare = {k.rsplit(".", 1)[0] for k in data if k.endswith((".forward", ".backward"))}
        close = difflib.get_close_matches(cfg.api_name, sorted(bare), n=3, cutoff=0.6)
        hint = f"; close names: {', '.join(close)}" if close else ""
        raise MsprobeError(f"api '{cfg.api_name}' is not in dump.json {cfg.dump_json_path}{hint} "
                           f"(names are as in the compare report without .forward/.backward, e.g. Functional.linear.0)")
    directory = tensor_dir(dump, cfg.dump_json_path)
    entries = {k: absolute_data_names(v, directory) for k, v in entries.items()}
    _write_extract(cfg.extract_api_path, entries)
    return entries


def _refuse_module_record(cfg: OpGenConfig, data: dict, kinds: Dict[str, str]) -> None:
    """A Module/Cell name is in dump.json but is a whole module, not one API: say so, and name the APIs
    the module called (from construct.json beside dump.json) as what can be reproduced instead."""
    name = cfg.api_name
    if name.split(".", 1)[0] not in ("Module", "Cell"):
        return
    records = [k for k in data if k == name or k.startswith(name + ".")]
    if not records:
        return
    inside: List[str] = []
    construct = os.path.join(os.path.dirname(os.path.abspath(cfg.dump_json_path)), "construct.json")
    if os.path.isfile(construct):
        try:
            parents = load_json(construct, "construct.json")
        except MsprobeError:
            parents = None
        if isinstance(parents, dict):
            wanted = set(records)
            inside = [k.rsplit(".", 1)[0] for k, parent in parents.items()
                      if parent in wanted and k.split(".", 1)[0] in kinds]
    hint = (f"; APIs it called: {', '.join(dict.fromkeys(inside[:5]))}" if inside
            else "; pick an API it called (construct.json names them)")
    raise MsprobeError(f"'{name}' is a module record in dump.json {cfg.dump_json_path} ({records[0]}), not an "
                       f"API; op_generate reproduces single APIs ({', '.join(k + '.*' for k in kinds)}){hint}")


def _write_extract(path: str, entries: Dict[str, dict]) -> None:
    text = orjson.dumps(entries, option=orjson.OPT_INDENT_2)
    if os.path.exists(path):
        try:
            with open(path, "rb") as fh:
                same = orjson.loads(fh.read()) == orjson.loads(text)
        except (OSError, orjson.JSONDecodeError):
            same = False
        if same:
            return
        raise MsprobeError(f"extract_api_path {path} exists and holds something else; remove it or choose another "
                           f"extract_api_path (msprobe never overwrites a file)")
    parent = os.path.dirname(path)
    try:
        os.makedirs(parent, exist_ok=True)
    except OSError as exc:
        raise MsprobeError(f"cannot create directory {parent} for extract_api_path: {exc.strerror}")

    def write(tmp: str) -> None:
        with open(tmp, "wb") as fh:
            fh.write(text)

    atomic_write(path, write)


def records_source(cfg: OpGenConfig) -> str:
    """The file the records came from (named in messages)."""
    return cfg.extract_api_path if not cfg.dump_json_path else cfg.dump_json_path


# ---- from records to a case ----

@dataclass(frozen=True)
class Case:
    full_name: str          # Functional.linear.0.forward (or .backward)
    api_name: str           # Functional.linear.0
    kind: str               # Functional / Tensor / Torch / Mint ...
    func: str               # linear, __add__, linalg.norm
    propagation: str
    data_mode: str
    seed: int
    iter_times: int
    args: Any
    kwargs: Any
    grads: Any
    outputs: Any
    autocast: Optional[str] = None  # PyTorch: the dtype the call evidently ran under autocast


def split_name(full: str, kinds: Dict[str, str], framework: str = "") -> Tuple[str, str]:
    """'Functional.linear.0.forward' -> ('Functional', 'linear'); the type must be one of ``kinds``."""
    parts = full.split(".")
    if len(parts) < 4:
        raise MsprobeError(f"API name {full!r} is not Type.name.N.direction; cannot tell which function to call")
    kind, func = parts[0], ".".join(parts[1:-2])
    if kind not in kinds:
        raise MsprobeError(f"API {full}: type {kind!r} is not supported; {framework}op_generate reproduces "
                           f"{', '.join(kinds)} APIs")
    return kind, func


class _Tensor:
    """A tensor record in the case (rendered as T(...))."""

    __slots__ = ("rec",)

    def __init__(self, rec: dict) -> None:
        self.rec = rec


class _Literal:
    """Python source emitted as-is (e.g. DType('torch.float16'))."""

    __slots__ = ("src",)

    def __init__(self, src: str) -> None:
        self.src = src


class UNHANDLED:
    """What a converter's ``special`` hook returns for a record type it does not know."""


class RecordConverter:
    """One recorded argument -> a value in the case (tensor records, literals, plain Python values).

    ``tensor_types``: the record types of tensors; ``special(typ, item, where)``: the framework's other
    types (dtype, device, ...) as a value or ``_Literal``, or UNHANDLED; ``not_scalar``: numpy-like type
    names that are not scalars even with a "value"."""

    def __init__(self, tensor_types: Sequence[str], special: Callable[[str, dict, str], Any],
                 not_scalar: Sequence[str] = ()) -> None:
        self.tensor_types, self.special, self.not_scalar = tuple(tensor_types), special, tuple(not_scalar)

    def __call__(self, item: Any, where: str) -> Any:
        if item is None:
            return None
        if isinstance(item, list):
            return [self(v, f"{where}[{i}]") for i, v in enumerate(item)]
        if not isinstance(item, dict):
            return item
        if not item:
            return _Literal("Unrecorded()")
        typ = item.get("type")
        if typ in self.tensor_types:
            if not isinstance(item.get("shape"), list) or not isinstance(item.get("dtype"), str):
                raise MsprobeError(f"{where}: tensor record without shape/dtype; the dump is damaged")
            bad = [s for s in item["shape"] if s.__class__ is not int or s < 0]
            if bad:
                raise MsprobeError(f"{where}: tensor shape {str(item['shape'])[:80]} holds {str(bad[0])[:40]!r}; a shape is "
                                   f"a list of non-negative integers: the dump is damaged or was edited, re-run the dump")
            return _Tensor(item)
        if typ in SCALAR_TYPES or (isinstance(typ, str) and typ not in self.not_scalar and "value" in item
                                   and typ.startswith(("numpy.", "float", "int", "uint", "bool", "complex"))):
            return item.get("value")  # Python and numpy scalars (numpy ones are recorded as e.g. "float32")
        if typ == "slice":
            v = item.get("value") or [None, None, None]
            return _Literal(f"slice({', '.join(repr(x) for x in v)})")
        if typ == "ellipsis":
            return _Literal("Ellipsis")
        if typ is None:
            # a dict argument (kwargs dict, namedtuple fields): convert its values
            return {k: self(v, f"{where}.{k}") for k, v in item.items()}
        value = self.special(typ, item, where)
        if value is not UNHANDLED:
            return value
        raise MsprobeError(f"{where}: argument type {typ!r} cannot be rebuilt by op_generate; reproduce this API by hand")


def tensors(obj: Any) -> List[dict]:
    """The tensor records of a converted argument structure."""
    if isinstance(obj, _Tensor):
        return [obj.rec]
    if isinstance(obj, list):
        return [t for v in obj for t in tensors(v)]
    if isinstance(obj, dict):
        return [t for v in obj.values() for t in tensors(v)]
    return []


def case_from_records(src: str, entries: Dict[str, dict], propagation: str, data_mode: str, seed: int,
                      iter_times: int, api_name: Optional[str], *, convert: RecordConverter,
                      split: Callable[[str], Tuple[str, str]], tensor_folder: str,
                      adjust_args: Optional[Callable[[str, Any], Any]] = None,
                      autocast: Optional[Callable[[str, Any, Any, Any], Optional[str]]] = None) -> Case:
    """One API's forward (and backward) records -> a Case (``src`` names the file in messages).
    ``propagation`` "both" (whole-dump checks) keeps the backward record when there is one.

    The framework supplies ``convert`` and ``split`` (record and name rules), ``tensor_folder`` (where a
    dump keeps its tensor files, for the message), ``adjust_args(func, args)`` (fix-ups of the recorded
    positional arguments) and ``autocast(func, args, kwargs, outputs)``."""
    forward = [k for k in entries if k.endswith(".forward")]
    backward = [k for k in entries if k.endswith(".backward")]
    if len(forward) > 1 or len(backward) > 1 or len(entries) > 2:
        raise MsprobeError(f"{src}: more than one API matched ({', '.join(sorted(entries))}); give the full api_name with its number")
    if not forward:
        raise MsprobeError(f"{src}: no forward record for {api_name or 'the API'}; op_generate needs the forward inputs")
    fkey = forward[0]
    fwd = entries[fkey]
    if not isinstance(fwd, dict) or not fwd:
        raise MsprobeError(f"{src}: the forward record {fkey} is empty")
    api_name = fkey[: -len(".forward")]
    kind, func = split(fkey)
    bwd = None
    full = fkey
    if propagation == "both" and backward and isinstance(entries[backward[0]], dict) and entries[backward[0]]:
        bwd = entries[backward[0]]
    if propagation == "backward":
        if not backward or not isinstance(entries[backward[0]], dict) or not entries[backward[0]]:
            raise MsprobeError(f"{src} has no backward record for {api_name} ({api_name}.backward), which propagation "
                               f"'backward' needs; dump with a backward pass, or use propagation 'forward'")
        full = backward[0]
        bwd = entries[full]
    args = convert(fwd.get("input_args", []), f"{fkey} input_args")
    if adjust_args is not None:
        args = adjust_args(func, args)
    kwargs_raw = fwd.get("input_kwargs") or {}
    if not isinstance(kwargs_raw, dict):
        raise MsprobeError(f"{src}: {fkey} input_kwargs must be an object")
    kwargs = {k: convert(v, f"{fkey} input_kwargs.{k}") for k, v in kwargs_raw.items()}
    outputs = convert(fwd.get("output", []), f"{fkey} output")
    grads: Any = []
    if bwd is not None:
        # backward records: "input" = gradients of the outputs ("grad_input" in older dumps)
        grads = convert(bwd.get("input", bwd.get("grad_input", [])) or [], f"{full} input")
    needed = tensors(args) + tensors(kwargs) + tensors(grads)
    if data_mode == "real_data":
        wrong = next((t["data_name"] for t in needed if t.get("data_name") and not isinstance(t["data_name"], str)), None)
        if wrong is not None:
            raise MsprobeError(f"{src}: {full}: a data_name must be a file name (a string), got "
                               f"{type(wrong).__name__} {str(wrong)[:80]}; use a dump.json written by the dump tool")
        missing = [t for t in needed if not t.get("data_name")]
        if missing:
            raise MsprobeError(f"{src}: real_data mode needs the recorded tensors, but {len(missing)} of the {len(needed)} "
                               f"input tensors of {full} have no data_name; dump with task 'tensor' or use data_mode 'random_data'")
        absent = [t["data_name"] for t in needed if not os.path.isfile(t["data_name"])]
        if absent:
            raise MsprobeError(f"real_data mode: tensor file {absent[0]} not found ({len(absent)} missing); "
                               f"copy the dump's {tensor_folder} next to dump.json or use data_mode 'random_data'")
    return Case(
        full_name=full, api_name=api_name, kind=kind, func=func, propagation=propagation,
        data_mode=data_mode, seed=seed, iter_times=1 if data_mode == "real_data" else iter_times,
        args=args, kwargs=kwargs, grads=grads, outputs=outputs,
        autocast=autocast(func, args, kwargs, outputs) if autocast is not None else None,
    )


def runtime_values(obj: Any, namespace: Dict[str, Any]) -> Any:
    """A converted argument structure as the runtime's objects (what the script's data block evaluates
    to), for running a case in-process: tensor records -> ``T``, literals evaluated in ``namespace`` (the
    runtime module's globals)."""
    if isinstance(obj, _Tensor):
        rec = obj.rec
        stats = {name: _stat(rec.get(key)) for key, name in (("Min", "min"), ("Max", "max"), ("Mean", "mean"),
                                                              ("Norm", "norm")) if rec.get(key) is not None}
        return namespace["T"](rec["dtype"], [int(x) for x in rec["shape"]], requires_grad=bool(rec.get("requires_grad")),
                              file=rec.get("data_name") or None, **stats)
    if isinstance(obj, _Literal):
        return eval(obj.src, namespace)  # noqa: S307 - only sources the converters made (reprs of dump values)
    if isinstance(obj, list):
        return [runtime_values(v, namespace) for v in obj]
    if isinstance(obj, dict):
        return {k: runtime_values(v, namespace) for k, v in obj.items()}
    return obj


def _stat(v: Any) -> Any:
    """A recorded statistic as the script's data block holds it (see _num)."""
    if isinstance(v, (bool, int, float)):
        return v
    if isinstance(v, str):
        try:
            return float(v)
        except ValueError:
            return None
    return None


# ---- rendering ----

def _num(v: Any) -> str:
    if isinstance(v, bool) or v is None:
        return repr(v)
    if isinstance(v, float):
        if math.isnan(v):
            return 'float("nan")'
        if math.isinf(v):
            return 'float("inf")' if v > 0 else 'float("-inf")'
        return repr(v)
    if isinstance(v, int):
        return repr(v)
    if isinstance(v, str):  # stats written as text by some dumps
        try:
            return _num(float(v))
        except ValueError:
            return "None"
    return "None"


def _tensor_src(rec: dict) -> str:
    parts = [repr(rec["dtype"]), repr([int(s) for s in rec["shape"]])]
    for key, name in (("Min", "min"), ("Max", "max"), ("Mean", "mean"), ("Norm", "norm")):
        if rec.get(key) is not None:
            parts.append(f"{name}={_num(rec[key])}")
    if rec.get("requires_grad"):
        parts.append("requires_grad=True")
    if rec.get("data_name"):
        parts.append(f"file={rec['data_name']!r}")
    return f"T({', '.join(parts)})"


def source(obj: Any, indent: int = 0) -> str:
    """A converted argument structure as the Python source of the script's data block."""
    pad = " " * indent
    if isinstance(obj, _Tensor):
        return _tensor_src(obj.rec)
    if isinstance(obj, _Literal):
        return obj.src
    if isinstance(obj, list):
        if not obj:
            return "[]"
        inner = ",\n".join(pad + "    " + source(v, indent + 4) for v in obj)
        return "[\n" + inner + ",\n" + pad + "]"
    if isinstance(obj, dict):
        if not obj:
            return "{}"
        inner = ",\n".join(f"{pad}    {k!r}: {source(v, indent + 4)}" for k, v in obj.items())
        return "{\n" + inner + ",\n" + pad + "}"
    if isinstance(obj, (int, float, bool)) or obj is None:
        return _num(obj)
    return repr(obj)


def _module_body(path: str) -> str:
    """A pasted module's text without its docstring and its '# msprobe-only' lines."""
    with open(path, "r", encoding="utf-8") as fh:
        text = fh.read()
    text = text[text.index('"""', 3) + 3:].strip("\n") + "\n"  # drop the module docstring
    return "".join(line for line in text.splitlines(True) if not line.rstrip().endswith("# msprobe-only"))


PASTED = (("msprobe.core.acc_check.standards", standards.__file__),
          ("msprobe.core.acc_check.op_standards", op_standards.__file__),
          ("msprobe.core.op_generate.script_runtime", SCRIPT_RUNTIME_FILE))


def runtime_source(runtime_file: str) -> str:
    """The code every script carries: the imports and runtime of ``runtime_file`` (a framework's
    runtime.py) with the standards lists of standards.py, the metrics and verdicts of op_standards.py and
    the framework-free runtime of script_runtime.py pasted in place of its msprobe imports (so the script
    needs no msprobe)."""
    with open(runtime_file, "r", encoding="utf-8") as fh:
        runtime = fh.read()
    for name, path in PASTED:
        marker = f"from {name} import *  # msprobe-only\n"
        if marker not in runtime:
            raise RuntimeError(f"{os.path.basename(runtime_file)} lost its {name} import marker")
        runtime = runtime.replace(marker, _module_body(path))
    return runtime


def standard_of(func: str) -> str:
    """The precision standard for a function name (same lists as the script uses)."""
    return standards.standard_for(func.rsplit(".", 1)[-1])


def render_script(case: Case, source_note: str, *, target: str, runtime: str, generated_by: str, runs: str,
                  needs: str, devices: str, autocast: bool) -> str:
    """The script: a header, the runtime code, and the data block of the recorded call (which the
    runtime's reproduce() gets as a dict).  The header names the framework's ``target`` function, how the
    script ``runs`` it, what it ``needs`` and its ``devices``; ``autocast``: the data block has an AUTOCAST line."""
    std = standard_of(case.func)
    header = (
        f'#!/usr/bin/env python3\n'
        f'"""Reproduce {case.full_name} ({target}) alone.\n\n'
        f'Generated by {generated_by} from {source_note}.\n'
        f'Runs the API on the device {runs},\n'
        f'then judges the outputs by the {std} standard and prints pass / warning / error per output.\n'
        f'Needs only {needs}.  Edit the data block at the end to try other inputs.\n\n'
        f'    python {case.full_name}.py [--device auto|{devices}] [--data-mode random_data|real_data]\n'
        f'                               [--iter-times N] [--seed S]\n\n'
        f'Exit status: 0 when every output passes or warns, 1 when any output is judged "error".\n'
        f'"""\n'
    )
    names = ["FULL_NAME", "API", "PROPAGATION", "STANDARD", "DATA_MODE", "SEED", "ITER_TIMES"]
    data = [
        "",
        "# ---- the recorded call ----",
        f"FULL_NAME = {case.full_name!r}",
        f"API = ({case.kind!r}, {case.func!r})  # {target}",
        f"PROPAGATION = {case.propagation!r}",
        f"STANDARD = {std!r}",
        f"DATA_MODE = {case.data_mode!r}",
        f"SEED = {case.seed!r}",
        f"ITER_TIMES = {case.iter_times!r}",
    ]
    if autocast:
        names.append("AUTOCAST")
        data.append(f"AUTOCAST = {case.autocast!r}  # recorded output dtypes show the call ran under autocast"
                    if case.autocast else "AUTOCAST = None")
    names += ["ARGS", "KWARGS", "GRADS", "RECORDED_OUTPUTS"]
    data += [
        f"ARGS = {source(case.args, 0)}",
        f"KWARGS = {source(case.kwargs, 0)}",
        f"GRADS = {source(case.grads, 0)}  # gradients of the outputs (backward only)",
        f"RECORDED_OUTPUTS = {source(case.outputs, 0)}",
        "",
        "",
        'if __name__ == "__main__":',
        "    sys.exit(reproduce(dict(" + ",\n                            ".join(
            ", ".join(f"{n}={n}" for n in names[i:i + 4]) for i in range(0, len(names), 4)) + ")))",
        "",
    ]
    return header + runtime + "\n".join(data)


@dataclass(frozen=True)
class OpGenResult:
    script: str
    extract_path: str
    case: Case
    standard: str


def generate(cfg: OpGenConfig, kinds: Dict[str, str], make_case: Callable[..., Case],
             render: Callable[[Case, str], str]) -> OpGenResult:
    """Extract the API (``kinds``: the framework's API types), make its case (``make_case``: the
    framework's case_from_records), render the script and write it atomically into the output folder."""
    out_dir = ensure_output_dir(cfg.output_dir)
    entries = extract(cfg, kinds)
    case = make_case(records_source(cfg), entries, cfg.propagation, cfg.data_mode, cfg.random_seed, cfg.iter_times,
                     cfg.api_name)
    text = render(case, cfg.dump_json_path or cfg.extract_api_path)
    compile(text, case.full_name, "exec")  # a generator bug must not leave a broken script behind

    def write(tmp: str) -> None:
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write(text)

    # the name comes from dump.json: never a path that leaves the output folder
    script = safe_name(f"{case.full_name}.py", "the script name of API")
    path = atomic_write(os.path.join(out_dir, script), write, mode=0o750)
    return OpGenResult(script=path, extract_path=cfg.extract_api_path, case=case, standard=standard_of(case.func))
