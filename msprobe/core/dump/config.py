"""Dump configuration: parse and validate ``config.json`` for PrecisionDebugger (no framework imports).

The file format is the reference's (spec dump.md section 2; user docs ``config_introduction_zh.md``):
common top-level keys plus one section per task, of which only ``json[task]`` is read.  Everything is
checked up front and every problem is one :class:`MsprobeError` line naming the file (or the
``PrecisionDebugger`` argument), the key, the bad value and what is allowed.

The PyTorch and MindSpore debuggers call :func:`load_dump_config` at construction and then
:func:`prepare_dump_path` on the result's ``dump_path``.
"""

from __future__ import annotations

import difflib
import json
import logging
import os
import re
from dataclasses import dataclass
from typing import Any, Optional

from msprobe.core.errors import MsprobeError
from msprobe.core.fileio import load_json

log = logging.getLogger("msprobe")

SUPPORTED_TASKS = ("statistics", "tensor", "overflow_check", "structure", "grad_probe", "free_benchmark")
# Reference tasks (G8 and G26 names) this implementation does not run yet.
UNSUPPORTED_TASKS = ("run_ut", "exception_dump", "acc_check", "diff_check", "nan_check")
LEVELS = ("L0", "L1", "L2", "mix", "debug")
PRECISIONS = ("low", "high")
SUMMARY_MODES = ("statistics", "md5")
DATA_MODES = ("all", "forward", "backward", "input", "output")
FILE_FORMATS = ("npy", "bin")
CHECK_MODES = ("all", "aicore", "atomic")
FRAMEWORKS = ("pytorch", "mindspore")

COMMON_KEYS = ("task", "dump_path", "rank", "step", "level", "async_dump", "precision", "seed",
               "is_deterministic", "enable_dataloader", "api_capture")
# api_capture: "full" records every call msprobe sees (documented extras included); "reference" records
# exactly what MindStudio Probe 8.x records, in its order (docs/dump.md "api_capture")
API_CAPTURES = ("full", "reference")
SECTION_NAMES = ("tensor", "statistics", "overflow_check", "run_ut", "grad_probe", "free_benchmark", "structure")
TOP_LEVEL_KEYS = COMMON_KEYS + SECTION_NAMES
TASK_KEYS = {
    "statistics": ("scope", "list", "data_mode", "summary_mode", "tensor_list"),
    # file_format is only used by MindSpore static-graph L2 (PyTorch always writes .pt); backward_input
    # appears in the documented example config: both are accepted and ignored.
    "tensor": ("scope", "list", "data_mode", "file_format", "backward_input",
               # the online pre-check (msprobe.core.acc_check.online.config)
               "online_run_ut", "nfs_path", "host", "port", "tls_path", "online_run_ut_recompute"),
    "overflow_check": ("overflow_nums", "check_mode"),
    "structure": (),
    "free_benchmark": ("scope", "list", "fuzz_device", "pert_mode", "handler_type", "fuzz_level", "fuzz_stage",
                       "if_preheat", "preheat_step", "max_sample"),   # msprobe.core.free_benchmark.config
    "grad_probe": ("grad_level", "param_list", "bounds"),   # msprobe.core.grad_probe.config
}

STEP_RANK_MAX = 1_000_000
SEED_MAX = 2 ** 32 - 1
API_NAME_PATTERN = re.compile(
    r"^(Distributed|Functional|Torch|Tensor|Mint|MintFunctional|Primitive|Aten|VF|NPU|Jit)\..*\.\d+\.(forward|backward)$")
MODULE_NAME_PATTERN = re.compile(r"^(Cell|Module)\..*\.(forward|backward)\.\d+$")
PATH_PATTERN = re.compile(r"^[a-zA-Z0-9_.:/-]+$")
PATH_MAX = 4096
NAME_MAX = 255

_STEP_RANK_STR = re.compile(r"^(\d+)(?:-(\d+))?$")


@dataclass(frozen=True)
class DumpConfig:
    task: str                 # statistics | tensor | overflow_check | structure
    dump_path: str            # absolute, normalised
    level: str                # L0 | L1 | L2 | mix | debug
    rank: tuple = ()          # sorted unique ints; () = all ranks
    step: tuple = ()          # sorted unique ints; () = all steps
    async_dump: bool = False
    precision: str = "low"    # low | high
    seed: Optional[int] = None          # only when the key is present
    is_deterministic: bool = False
    scope: tuple = ()         # () or (start_name, end_name)
    list: tuple = ()          # names or substrings
    data_mode: tuple = ("all",)
    summary_mode: str = "statistics"   # statistics | md5
    tensor_list: tuple = ()
    overflow_nums: int = 1    # -1 = unlimited
    framework: str = "pytorch"
    api_capture: str = "full"           # full | reference
    source: str = ""          # the config file path, for messages
    free_benchmark: Any = None  # task free_benchmark: msprobe.core.free_benchmark.config.FreeBenchmarkConfig
    grad_level: str = "L1"    # grad_probe: L0 | L1 | L2
    param_list: tuple = ()    # grad_probe: parameter names; () = all
    bounds: tuple = (-1, 0, 1)  # grad_probe: histogram bounds (L2)
    online: Any = None        # tensor + online_run_ut: msprobe.core.acc_check.online.config.OnlineConfig

    # data_mode (spec 2.2): "all" is everything; if neither forward nor backward is named both are
    # implied, and likewise for input/output.
    def _mode(self, name: str, other: str) -> bool:
        modes = set(self.data_mode)
        return "all" in modes or name in modes or other not in modes

    @property
    def dump_forward(self) -> bool:
        return self._mode("forward", "backward")

    @property
    def dump_backward(self) -> bool:
        return self._mode("backward", "forward")

    @property
    def dump_input(self) -> bool:
        return self._mode("input", "output")

    @property
    def dump_output(self) -> bool:
        return self._mode("output", "input")

    @property
    def saves_tensors(self) -> bool:
        """Whether tensor files may be written (tensor task, overflow_check on overflow, or tensor_list)."""
        return self.task in ("tensor", "overflow_check") or bool(self.tensor_list)


# ---------------------------------------------------------------------------------------------- helpers

def packaged_config_path() -> str:
    import msprobe

    return os.path.join(os.path.dirname(os.path.abspath(msprobe.__file__)), "config", "config.json")


def _show(value: Any) -> str:
    """A value as the user wrote it (JSON spelling where possible)."""
    try:
        text = json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= 200 else text[:197] + "..."


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


class _Where:
    """Names the place a value came from, for error messages."""

    def __init__(self, source: str, section: Optional[str] = None, argument: bool = False):
        self.source = source
        self.section = section
        self.argument = argument

    def subject(self, key: str) -> str:
        if self.argument:
            return f'PrecisionDebugger argument "{key}"'
        if self.section:
            return f'{self.source}: "{key}" in the "{self.section}" section'
        return f'{self.source}: "{key}"'

    def fail(self, key: str, value: Any, advice: str) -> MsprobeError:
        return MsprobeError(f"{self.subject(key)} is {_show(value)}; {advice}")


def _choice(where: _Where, key: str, value: Any, allowed: tuple) -> str:
    if not isinstance(value, str) or value not in allowed:
        raise where.fail(key, value, "allowed: " + ", ".join(allowed))
    return value


def _bool(where: _Where, key: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise where.fail(key, value, "it must be true or false")
    return value


def _str_list(where: _Where, key: str, value: Any, example: str) -> tuple:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise where.fail(key, value, f"it must be a list of strings, e.g. {example}")
    return tuple(value)


# ---------------------------------------------------------------------------------------------- step/rank

def parse_step_or_rank(value, key: str, *, source: str = "") -> tuple:
    """Parse a ``step``/``rank`` list: ints in [0, 1000000] and ``"a"`` / ``"a-b"`` strings (inclusive).

    Returns the sorted, de-duplicated numbers; ``()`` means all.  ``source`` (the config file) prefixes
    the messages.
    """
    return _parse_step_or_rank(value, key, f'{source}: "{key}"' if source else f'"{key}"')


def _parse_step_or_rank(value, key: str, subject: str) -> tuple:
    what = "steps" if key == "step" else f"{key}s"
    if not isinstance(value, (list, tuple)):
        raise MsprobeError(f'{subject} is {_show(value)}; it must be a list of integers and "a-b" ranges, '
                           f'e.g. [0, 2, "4-6"] ([] means all {what})')
    if len(value) > STEP_RANK_MAX:
        raise MsprobeError(f"{subject} has {len(value)} entries; at most {STEP_RANK_MAX} are allowed, use \"a-b\" ranges")
    out = set()
    for item in value:
        if _is_int(item):
            lo = hi = item
        elif isinstance(item, str):
            m = _STEP_RANK_STR.match(item.strip())
            if not m:
                raise MsprobeError(f'{subject} element {_show(item)} is not valid; strings must look like "3" or "3-5"')
            lo = int(m.group(1))
            hi = int(m.group(2)) if m.group(2) is not None else lo
            if lo > hi:
                raise MsprobeError(f'{subject} element {_show(item)} is a reversed range: the left end {lo} is greater '
                                   f'than the right end {hi}; write it as "{hi}-{lo}"')
        else:
            raise MsprobeError(f'{subject} element {_show(item)} must be an integer or a string like "3-5"')
        for bound in (lo, hi):
            if not 0 <= bound <= STEP_RANK_MAX:
                raise MsprobeError(f"{subject} element {_show(item)} is out of range; each {key} must be between 0 and {STEP_RANK_MAX}")
        out.update(range(lo, hi + 1))
    return tuple(sorted(out))


# ---------------------------------------------------------------------------------------------- dump path

def prepare_dump_path(path: str) -> str:
    """Check the dump directory and create it (mode 0750) if missing; return its absolute path.

    Refused: an empty or non-str path, characters outside ``[a-zA-Z0-9_.:/-]``, a path over 4096
    characters or a component over 255, a symbolic link as the final component, an existing file,
    a directory this user cannot write into.
    """
    if not isinstance(path, str) or not path:
        raise MsprobeError(f"dump_path {_show(path)} is not a usable path; give a directory path string")
    abspath = os.path.abspath(path)
    if not PATH_PATTERN.match(abspath):
        bad = "".join(sorted({c for c in abspath if not PATH_PATTERN.match(c)}))
        raise MsprobeError(f"dump_path {abspath} contains special characters ({bad!r}); only letters, digits and "
                           f"_ . : / - are allowed: choose another dump_path")
    if len(abspath) > PATH_MAX:
        raise MsprobeError(f"dump_path {abspath[:80]}... is {len(abspath)} characters long; the limit is {PATH_MAX}: choose a shorter dump_path")
    for part in abspath.split("/"):
        if len(part) > NAME_MAX:
            raise MsprobeError(f"dump_path {abspath} has a name of {len(part)} characters ({part[:40]}...); the limit is "
                               f"{NAME_MAX} per name: choose a shorter dump_path")
    if os.path.islink(abspath):
        raise MsprobeError(f"dump_path {abspath} is a symbolic link; msprobe does not write through links for safety: "
                           f"pass the real path ({os.path.realpath(abspath)})")
    if os.path.lexists(abspath) and not os.path.isdir(abspath):
        raise MsprobeError(f"dump_path {abspath} exists and is a file, not a directory; choose another dump_path")
    if not os.path.isdir(abspath):
        # Create missing levels one by one so that each gets mode 0750 (os.makedirs only sets the leaf's).
        missing = []
        head = abspath
        while head and not os.path.lexists(head):
            missing.append(head)
            head = os.path.dirname(head)
        if head and not os.path.isdir(head):
            raise MsprobeError(f"dump_path {abspath}: {head} exists and is a file, not a directory; choose another dump_path")
        for directory in reversed(missing):
            try:
                os.mkdir(directory, 0o750)
            except FileExistsError:
                pass
            except OSError as exc:
                raise MsprobeError(f"cannot create dump_path {abspath}: {exc.strerror} ({directory}); "
                                   f"choose another dump_path or fix the permissions")
        if os.path.islink(abspath) or not os.path.isdir(abspath):  # replaced by something else meanwhile
            raise MsprobeError(f"dump_path {abspath} is not a plain directory after creating it; choose another dump_path")
    if not os.access(abspath, os.W_OK | os.X_OK):
        raise MsprobeError(f"dump_path {abspath} is not writable by this user; choose another dump_path or fix its permissions")
    return abspath


# ---------------------------------------------------------------------------------------------- loading

#: what to do with an empty or invalid config.json (a file the user writes, not one a dump wrote)
_MINIMAL_CONFIG = '{"task": "statistics", "dump_path": "./dump_path", "level": "L1"}'
CONFIG_JSON_REMEDY = ("correct the file at that position (usually a missing comma, quote or closing brace); "
                      "a minimal config is " + _MINIMAL_CONFIG)
CONFIG_EMPTY_REMEDY = "write the configuration into it, e.g. " + _MINIMAL_CONFIG


def _did_you_mean(key: str, allowed) -> str:
    """' (did you mean "dump_path"?)' for a key close to an allowed one (typos), else ''."""
    close = difflib.get_close_matches(key, list(allowed), n=1, cutoff=0.6)
    if not close and isinstance(key, str):  # case or separator slips: "Dump-Path", "summarymode"
        norm = {a.lower().replace("_", ""): a for a in allowed}
        hit = norm.get(key.lower().replace("-", "").replace("_", "").replace(" ", ""))
        close = [hit] if hit else []
    return f' (did you mean "{close[0]}"?)' if close else ""

def _read_config(config_path) -> tuple:
    if config_path is None:
        path = packaged_config_path()
    elif not isinstance(config_path, (str, os.PathLike)):
        raise MsprobeError(f"config_path {_show(config_path)} is not a file path; give the path of a config.json")
    else:
        path = os.fspath(config_path)
    if not path:
        raise MsprobeError("config_path is empty; give the path of a config.json or leave it out for the default")
    if not path.lower().endswith(".json"):
        raise MsprobeError(f"config file {path} is not a .json file; give the path of a config.json")
    data = load_json(path, "config file", remedy=CONFIG_JSON_REMEDY, empty_remedy=CONFIG_EMPTY_REMEDY)
    if not isinstance(data, dict):
        raise MsprobeError(f"config file {path} holds a JSON {type(data).__name__}, not an object; "
                           f'it must look like {{"task": "statistics", "dump_path": "./dump_path", ...}}')
    return path, data


def _check_scope(where: _Where, value: Any, level: str) -> tuple:
    scope = _str_list(where, "scope", value, '["Module.conv1.Conv2d.forward.0", "Module.fc.Linear.forward.0"]')
    if not scope:
        return ()
    if level == "debug":
        log.warning('"scope" is ignored at level debug (only save() is active)')
        return ()
    if level == "L2":
        raise where.fail("scope", value, 'scope cannot be set at level L2; use "list" with one API name')
    if len(scope) != 2:
        raise where.fail("scope", value, f"scope must hold exactly 2 names (start and end of the range), not {len(scope)}")
    if level == "L0":
        patterns, kind = (MODULE_NAME_PATTERN,), 'module names like "Module.conv1.Conv2d.forward.0"'
    elif level == "L1":
        patterns, kind = (API_NAME_PATTERN,), 'API names like "Functional.relu.0.forward"'
    else:  # mix
        patterns = (MODULE_NAME_PATTERN, API_NAME_PATTERN)
        kind = 'module names like "Module.conv1.Conv2d.forward.0" or API names like "Functional.relu.0.forward"'
    for name in scope:
        if not any(p.match(name) for p in patterns):
            raise where.fail("scope", value, f"at level {level} scope needs full {kind}; {_show(name)} is not one")
    return scope


def _check_data_mode(where: _Where, value: Any) -> tuple:
    if not isinstance(value, list) or not value or not all(isinstance(v, str) for v in value):
        raise where.fail("data_mode", value, 'it must be a non-empty list of strings from: ' + ", ".join(DATA_MODES)
                         + ', e.g. ["all"] or ["forward", "input"]')
    for item in value:
        if item not in DATA_MODES:
            raise where.fail("data_mode", value, f"the element {_show(item)} is not one of: " + ", ".join(DATA_MODES))
    modes = tuple(dict.fromkeys(value))
    if "all" in modes and len(modes) > 1:
        raise where.fail("data_mode", value, '"all" cannot be combined with other options; use ["all"] alone')
    return modes


def _check_section(where: _Where, task: str, section: dict, level: str, framework: str) -> dict:
    allowed = TASK_KEYS[task]
    for key in section:
        if key not in allowed:
            hint = "allowed: " + ", ".join(allowed) if allowed else f"the {task} task takes no options"
            raise MsprobeError(f'{where.source}: unknown key "{key}" in the "{task}" section'
                               f'{_did_you_mean(key, allowed)}; {hint}')
    out: dict = {}
    if task == "grad_probe":
        from msprobe.core.grad_probe.config import check_grad_probe_section
        return check_grad_probe_section(section, where.fail)
    if task == "tensor" and section.get("online_run_ut"):
        from msprobe.core.acc_check.online.config import client_config
        out["online"] = client_config(section, where.fail, where.source)
    if "scope" in section:
        out["scope"] = _check_scope(where, section["scope"], level)
    if "list" in section:
        names = _str_list(where, "list", section["list"], '["relu", "Functional.conv2d.1.forward"]')
        if level == "debug":
            if names:
                log.warning('"list" is ignored at level debug (only save() is active)')
            names = ()
        out["list"] = names
    if "data_mode" in section:
        out["data_mode"] = _check_data_mode(where, section["data_mode"])
    if "summary_mode" in section:
        value = section["summary_mode"]
        if value == "xor":
            raise where.fail("summary_mode", value, "xor is not supported by this msprobe; allowed: " + ", ".join(SUMMARY_MODES))
        out["summary_mode"] = _choice(where, "summary_mode", value, SUMMARY_MODES)
    if "tensor_list" in section:
        names = _str_list(where, "tensor_list", section["tensor_list"], '["relu", "Functional.linear.0"]')
        if level == "debug" and names:
            log.warning('"tensor_list" is ignored at level debug')
            names = ()
        out["tensor_list"] = names
    if "file_format" in section:
        _choice(where, "file_format", section["file_format"], FILE_FORMATS)
        if framework == "pytorch":
            log.debug("file_format is ignored for PyTorch: tensors are always written as .pt")
    if "backward_input" in section:
        value = section["backward_input"]
        if not isinstance(value, str):
            raise where.fail("backward_input", value, "it must be a path string (it is accepted and ignored)")
        if value:
            log.warning('"backward_input" is ignored by this msprobe')
    if "overflow_nums" in section:
        value = section["overflow_nums"]
        if not _is_int(value) or not (value == -1 or value > 0):
            raise where.fail("overflow_nums", value, "it must be -1 (unlimited) or a positive integer")
        out["overflow_nums"] = value
    if "check_mode" in section:
        _choice(where, "check_mode", section["check_mode"], CHECK_MODES)
    return out


def load_dump_config(config_path=None, *, task=None, dump_path=None, level=None, step=None,
                     framework="pytorch") -> DumpConfig:
    """Read and validate a dump config.json; ``task``/``dump_path``/``level``/``step`` override the file."""
    if framework not in FRAMEWORKS:
        raise MsprobeError(f"framework {_show(framework)} is not supported; allowed: " + ", ".join(FRAMEWORKS))
    path, data = _read_config(config_path)
    file_where = _Where(path)
    arg_where = _Where(path, argument=True)

    for key in data:
        if key not in TOP_LEVEL_KEYS:
            hint = _did_you_mean(key, TOP_LEVEL_KEYS)
            if not hint:  # an option of a task section written at the top level
                owners = [t for t, keys in TASK_KEYS.items() if key in keys]
                if owners:
                    hint = f' ("{key}" belongs in the "{owners[0]}" section)'
            raise MsprobeError(f'{path}: unknown key "{key}"{hint}; allowed top-level keys: ' + ", ".join(TOP_LEVEL_KEYS))

    # task
    task_where = arg_where if task is not None else file_where
    task_value = task if task is not None else data.get("task", "statistics")
    if task_value in UNSUPPORTED_TASKS:
        raise task_where.fail("task", task_value, "that task is not supported by this msprobe yet; supported tasks: "
                              + ", ".join(SUPPORTED_TASKS))
    if not isinstance(task_value, str) or task_value not in SUPPORTED_TASKS:
        raise task_where.fail("task", task_value, "unknown task; supported tasks: " + ", ".join(SUPPORTED_TASKS))

    # level
    level_where = arg_where if level is not None else file_where
    level_value = _choice(level_where, "level", level if level is not None else data.get("level", "L1"), LEVELS)

    # dump_path (not created here: PrecisionDebugger calls prepare_dump_path)
    path_where = arg_where if dump_path is not None else file_where
    if dump_path is not None:
        path_value = dump_path
    elif "dump_path" in data:
        path_value = data["dump_path"]
    else:
        raise MsprobeError(f'{path}: "dump_path" is missing; add e.g. "dump_path": "./dump_path" or pass dump_path=...')
    if not isinstance(path_value, str) or not path_value.strip():
        raise path_where.fail("dump_path", path_value, "it must be a non-empty path string, e.g. \"./dump_path\"")
    path_value = os.path.abspath(path_value)

    # rank / step
    rank_value = parse_step_or_rank(data.get("rank", []), "rank", source=path)
    if step is not None:
        step_value = _parse_step_or_rank(step, "step", arg_where.subject("step"))
    else:
        step_value = parse_step_or_rank(data.get("step", []), "step", source=path)

    async_dump = _bool(file_where, "async_dump", data.get("async_dump", False))
    precision = _choice(file_where, "precision", data.get("precision", "low"), PRECISIONS)
    is_deterministic = _bool(file_where, "is_deterministic", data.get("is_deterministic", False))
    api_capture = data.get("api_capture", "full")
    if not isinstance(api_capture, str) or api_capture not in API_CAPTURES:
        close = _did_you_mean(api_capture, API_CAPTURES) if isinstance(api_capture, str) else ""
        raise file_where.fail("api_capture", api_capture, "allowed: " + ", ".join(API_CAPTURES) + close)
    seed = None
    if "seed" in data:
        seed = data["seed"]
        if not _is_int(seed) or not 0 <= seed <= SEED_MAX:
            raise file_where.fail("seed", seed, f"it must be an integer between 0 and {SEED_MAX}")
    if _bool(file_where, "enable_dataloader", data.get("enable_dataloader", False)):
        raise MsprobeError(f'{path}: "enable_dataloader" is true; enable_dataloader is not supported; '
                           f"call start()/stop()/step() in the training loop and set it to false")

    # every task section present must at least be an object; only the selected one is validated further
    for name in SECTION_NAMES:
        if name in data and not isinstance(data[name], dict):
            raise file_where.fail(name, data[name], f'the "{name}" section must be a JSON object, e.g. {{}}')

    if task_value == "structure" and level_value not in ("L0", "mix"):
        log.warning("task structure needs level L0 or mix; level %s is changed to mix", level_value)
        level_value = "mix"

    section = data.get(task_value, {})
    if task_value == "free_benchmark":
        from msprobe.core.free_benchmark.config import check_free_benchmark
        values = check_free_benchmark(section, _Where(path, section=task_value), level_value, framework)
    else:
        values = _check_section(_Where(path, section=task_value), task_value, section, level_value, framework)
    section_where = _Where(path, section=task_value)

    # cross-field rules
    names = values.get("list", ())
    if level_value == "L2":
        if framework == "pytorch":
            if task_value != "tensor":
                raise level_where.fail("level", level_value, f'level L2 needs task "tensor", not "{task_value}"')
            if len(names) != 1 or not API_NAME_PATTERN.match(names[0]):
                raise section_where.fail("list", list(names), 'at level L2 list must hold exactly one full API name, '
                                         'e.g. ["Functional.conv2d.1.forward"]')
        else:
            modes = values.get("data_mode", ("all",))
            if len(modes) != 1 or modes[0] not in ("all", "input", "output"):
                raise section_where.fail("data_mode", list(modes), 'at level L2 (MindSpore kernel dump) data_mode must be '
                                         'one of ["all"], ["input"], ["output"]')
            for name in names:
                if name.startswith("name-regex(") and name.endswith(")"):
                    try:
                        re.compile(name[len("name-regex("):-1])
                    except re.error as exc:
                        raise section_where.fail("list", list(names), f"{_show(name)} is not a valid regular expression ({exc})")
    if async_dump:
        log.warning("async_dump is true: tensors are kept in memory until stop(); this may cause out-of-memory")
        if task_value == "tensor" and not names and level_value != "debug":
            raise MsprobeError(f'{path}: "async_dump" is true with task tensor and an empty "list"; '
                               f'name the APIs/modules to dump in "list" or set async_dump to false')
        if values.get("summary_mode") == "md5":
            raise MsprobeError(f'{path}: "async_dump" is true with summary_mode md5; '
                               f'set async_dump to false or summary_mode to statistics')

    return DumpConfig(
        task=task_value,
        dump_path=path_value,
        level=level_value,
        rank=rank_value,
        step=step_value,
        async_dump=async_dump,
        precision=precision,
        seed=seed,
        is_deterministic=is_deterministic,
        framework=framework,
        api_capture=api_capture,
        source=path,
        **values,
    )
