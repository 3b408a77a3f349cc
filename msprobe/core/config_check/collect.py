"""What a pack holds besides the training data: environment variables, installed packages and
hyperparameters parsed from launch scripts (``.sh``) and config files (``.yaml``/``.yml``).

Framework-free (no torch, no mindspore).
"""

from __future__ import annotations

import logging
import os
import re
import shlex
from typing import Dict, List, Optional

from msprobe.core.errors import MsprobeError

logger = logging.getLogger("msprobe")

#: environment variables whose names look like secrets are packed as this mask (the compare never looks
#: at them; a pack is meant to be copied to another machine)
SECRET_MASK = "******"
_SECRET_RE = re.compile(r"TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL|API_?KEY|ACCESS_?KEY|PRIVATE_?KEY|AUTH", re.I)


def log(msg: str) -> None:
    """The reference's prefix for config_check messages."""
    logger.info("[config checking log] %s", msg)


def collect_env(environ: Optional[Dict[str, str]] = None) -> Dict[str, str]:
    env = dict(os.environ if environ is None else environ)
    return {k: (SECRET_MASK if _SECRET_RE.search(k) else v) for k, v in sorted(env.items())}


def collect_pip() -> str:
    """``Name=version`` lines of the installed distributions (the reference's ``pip`` entry)."""
    try:
        import importlib.metadata as metadata
    except ImportError:  # pragma: no cover - Python < 3.8
        import importlib_metadata as metadata  # type: ignore
    lines = set()
    for dist in metadata.distributions():
        try:
            name = dist.metadata.get("Name") if dist.metadata else None
            version = dist.version
        except Exception:  # noqa: BLE001 - a broken dist-info must not stop the pack
            continue
        if name:
            lines.add(f"{name}={version}")
    return "".join(line + "\n" for line in sorted(lines, key=str.lower))


def parse_pip(text: str) -> Dict[str, str]:
    """``pip`` entry -> {normalised name: version}; normalised as PEP 503 (case, ``-``/``_``/``.``)."""
    out = {}
    for line in text.splitlines():
        line = line.strip()
        if not line:
            continue
        name, sep, version = line.partition("=")
        if version.startswith("="):  # "name==version" written by hand / pip freeze
            version = version[1:]
        out[normalise_package(name)] = version if sep else ""
    return out


def normalise_package(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name.strip()).lower()


# ---------------------------------------------------------------------------------- hyperparameters
_LAUNCHERS = (
    re.compile(r"(?:^|[\s;&|(])(torchrun|msrun)\s"),
    re.compile(r"(?:^|[\s;&|(])python[\d.]*\s+-m\s+torch\.distributed\.(?:launch|run)\s"),
)
_PLAIN_PYTHON = re.compile(r"(?:^|[\s;&|(])python[\d.]*\s+\S+\.py(?:\s|$)")
_ARGS_BLOCK = re.compile(r"^\s*(?:export\s+)?([A-Za-z0-9_]{1,40}_ARGS)=\s*([\"'])(.*?)\2", re.S | re.M)
_ASSIGN = re.compile(r"^\s*(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)=(.*)$", re.M)
_VAR_REF = re.compile(r"^\$\{?([A-Za-z_][A-Za-z0-9_]*)\}?$")


def _strip_comments(text: str) -> str:
    kept = []
    for line in text.splitlines():
        if line.lstrip().startswith("#"):
            continue
        # a '#' starting a word begins a comment (not one inside a word such as a URL fragment)
        line = re.sub(r"(^|\s)#.*$", "", line).rstrip()
        if line.strip():
            kept.append(line)
    return "\n".join(kept) + "\n"


def _unquote(value: str) -> str:
    value = value.strip()
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
        return value[1:-1]
    return value


def _command_line(script: str) -> Optional[str]:
    """The launch command (torchrun / msrun / python -m torch.distributed.launch, else the first
    ``python x.py``) with its continuation lines joined."""
    lines = script.splitlines()
    for patterns in (_LAUNCHERS, (_PLAIN_PYTHON,)):
        for line in lines:
            for pat in patterns:
                m = pat.search(line)
                if m:
                    return line[m.start():].split("|")[0]
    return None


def parse_shell(path: str) -> Dict[str, object]:
    """``--key value`` / ``--key=value`` / ``--flag`` pairs of a script's launch command; values naming a
    shell variable (``$LR``, ``${LR}``) take that variable's last assignment in the script."""
    with open(path, "r", encoding="utf-8", errors="replace") as fh:
        script = re.sub(r"\\[ \t]*\n", " ", _strip_comments(fh.read()))  # continuation lines joined
    blocks = {name: " ".join(body.split()) for name, _, body in _ARGS_BLOCK.findall(script)}
    command = _command_line(script)
    if command is None:
        return {}
    for name in sorted(blocks, key=len, reverse=True):
        command = command.replace("${" + name + "}", blocks[name]).replace("$" + name, blocks[name])
    assignments: Dict[str, str] = {}
    for name, value in _ASSIGN.findall(script):
        if not name.endswith("_ARGS") or name not in blocks:
            assignments[name] = _unquote(value.split(" #")[0])
    try:
        tokens = shlex.split(command, posix=True)
    except ValueError:
        tokens = command.split()
    out: Dict[str, object] = {}
    i = 0
    while i < len(tokens):
        tok = tokens[i]
        i += 1
        if not tok.startswith("--") or len(tok) < 3:
            continue
        key, eq, value = tok[2:].partition("=")
        if not re.fullmatch(r"[\w.-]+", key):
            continue
        if not eq:
            if i < len(tokens) and not tokens[i].startswith("--"):
                value = tokens[i]
                i += 1
            else:
                out[key] = True
                continue
        ref = _VAR_REF.match(value)
        if ref and ref.group(1) in assignments:
            value = assignments[ref.group(1)]
        out[key] = value
    return out


def _flatten_yaml(obj, prefix: str, out: Dict[str, object]) -> None:
    if isinstance(obj, dict):
        for key, value in obj.items():
            _flatten_yaml(value, f"{prefix}.{key}" if prefix else str(key), out)
    elif isinstance(obj, list):
        if all(isinstance(x, (int, float, str, bool, list)) for x in obj):
            out[prefix] = obj
        else:
            for idx, value in enumerate(obj):
                _flatten_yaml(value, f"{prefix}.{idx}" if prefix else str(idx), out)
    elif isinstance(obj, (int, float, str, bool)):
        out[prefix] = obj


def parse_yaml(path: str) -> Dict[str, object]:
    from msprobe.core.fileio import yaml_safe_load

    with open(path, "r", encoding="utf-8", errors="replace") as fh:
        obj = yaml_safe_load(fh, "yaml file", path)
    out: Dict[str, object] = {}
    _flatten_yaml(obj, "", out)
    return out


def merge_hyperparameters(into: Dict[str, object], new: Dict[str, object]) -> None:
    """Merge one file's parameters; a key seen with two values keeps both
    (``{"description": "duplicate_value", "values": [...]}``, the reference's form)."""
    for key, value in new.items():
        if key not in into or into[key] == value:
            into[key] = value
            continue
        old = into[key]
        if isinstance(old, dict) and old.get("description") == "duplicate_value":
            if value not in old["values"]:
                old["values"].append(value)
        else:
            into[key] = {"description": "duplicate_value", "values": [old, value]}


def hyperparameters_from_files(paths: List[str]) -> Dict[str, object]:
    """Parse launch scripts and yaml files (others are skipped with a warning, as the reference does)."""
    from msprobe.core.fileio import check_path

    result: Dict[str, object] = {}
    for path in paths:
        if not isinstance(path, str):
            raise MsprobeError(f"script path {path!r} is not a string; pass paths of .sh / .yaml files")
        if not os.path.isfile(path):
            log(f"Warning: Script path {path} is not a file.")
            continue
        path = check_path(path, "script", "file")
        ext = os.path.splitext(path)[1].lower()
        try:
            if ext == ".sh":
                parsed = parse_shell(path)
            elif ext in (".yaml", ".yml"):
                parsed = parse_yaml(path)
            else:
                log(f"Warning: {path} is neither a shell script (.sh) nor a yaml file (.yaml); skipped")
                continue
        except Exception as exc:  # noqa: BLE001 - MsprobeError, OSError, yaml.YAMLError ...: skipped, as the reference does
            text = " ".join(str(exc).split())[:300]
            log(f"Warning: parsing error, skip file path: {path}, error: {type(exc).__name__}: {text}")
            continue
        merge_hyperparameters(result, parsed)
    return result
