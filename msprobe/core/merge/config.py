"""The settings of one ``merge_result`` run, and the reading of its config.yaml.

config.yaml (the reference's format)::

    api:                      # required: API / module name prefixes, 1 to 4 of the name's fields
    - Distributed.all_reduce  #   {api_type}[.{api_name}[.{call_number}[.{forward|backward}]]]
    - Functional.linear
    compare_index:            # optional: metric columns to gather, one sheet each (default: all of the
    - Max diff                #   reports' mode)
    - MeanRelativeErr
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from typing import Optional, Tuple

from msprobe.core.errors import MsprobeError
from msprobe.core.fileio import check_path, yaml_safe_load

log = logging.getLogger("msprobe")

#: config.yaml is a few lines; anything bigger is the wrong file.
MAX_CONFIG_BYTES = 1024 * 1024

EXAMPLE = "e.g. 'api: [Distributed.all_reduce]'"


@dataclass(frozen=True)
class MergeConfig:
    """Everything ``merge_result`` needs; build it with :meth:`from_yaml` or directly."""

    input_dir: str
    output_dir: str
    apis: Tuple[str, ...]
    compare_index: Tuple[str, ...] = ()  # empty: every index of the reports' mode
    jobs: int = 0  # worker processes for reading reports; 0: one per core
    progress: bool = True
    config_path: str = ""
    backend: Optional[str] = None  # None/"local": forked processes; "ray[:ADDRESS]": --ray (msprobe.core.executor)

    @classmethod
    def from_yaml(cls, input_dir: str, output_dir: str, config_path: str, jobs: int = 0,
                  progress: bool = True, backend: Optional[str] = None) -> "MergeConfig":
        apis, indexes = load_merge_yaml(config_path)
        return cls(input_dir=input_dir, output_dir=output_dir, apis=apis, compare_index=indexes, jobs=jobs,
                   progress=progress, config_path=config_path, backend=backend)


def _str_list(value, key: str, path: str) -> Tuple[str, ...]:
    if isinstance(value, str):
        raise MsprobeError(f"config.yaml {path}: '{key}' must be a list (one '- item' per line), not the single "
                           f"string {value!r}; write '{key}: [{value}]'")
    if not isinstance(value, list):
        raise MsprobeError(f"config.yaml {path}: '{key}' must be a list of names, not {type(value).__name__}; {EXAMPLE}")
    out = []
    for item in value:
        if not isinstance(item, str) or not item.strip():
            raise MsprobeError(f"config.yaml {path}: every '{key}' entry must be a non-empty name, found {item!r}")
        item = item.strip()
        if item not in out:
            out.append(item)
    return tuple(out)


def load_merge_yaml(path: str) -> Tuple[Tuple[str, ...], Tuple[str, ...]]:
    """(api prefixes, compare indexes) from config.yaml; every problem is one MsprobeError line."""
    import yaml

    path = check_path(path, "config.yaml", "file")
    size = os.path.getsize(path)
    if size > MAX_CONFIG_BYTES:
        raise MsprobeError(f"config.yaml {path} is {size} bytes (limit {MAX_CONFIG_BYTES}); pass the merge config "
                           f"that lists 'api' and 'compare_index'")
    try:
        with open(path, "r", encoding="utf-8") as fh:
            obj = yaml_safe_load(fh, "config.yaml", path)
    except UnicodeDecodeError:
        raise MsprobeError(f"config.yaml {path} is not UTF-8 text; pass the merge config yaml")
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise MsprobeError(f"config.yaml {path} is not valid YAML{where} ({problem}); fix the syntax, {EXAMPLE}")
    except OSError as exc:
        raise MsprobeError(f"config.yaml {path} cannot be read: {exc.strerror}")
    if obj is None:
        raise MsprobeError(f"config.yaml {path} is empty; it must list the APIs to merge under 'api', {EXAMPLE}")
    if not isinstance(obj, dict):
        raise MsprobeError(f"config.yaml {path} must be a mapping with the keys 'api' and optionally 'compare_index', "
                           f"not a {type(obj).__name__}; {EXAMPLE}")
    unknown = sorted(str(k) for k in obj if k not in ("api", "compare_index"))
    if unknown:
        log.warning("config.yaml %s: ignoring unknown key(s) %s (known: api, compare_index)", path, ", ".join(unknown))
    if "api" not in obj or obj["api"] is None or obj["api"] == []:
        raise MsprobeError(f"config.yaml {path} has no 'api' list naming the APIs to merge; add one, {EXAMPLE}")
    apis = _str_list(obj["api"], "api", path)
    indexes = obj.get("compare_index")
    indexes = () if indexes is None else _str_list(indexes, "compare_index", path)
    return apis, indexes
