"""Name mappings for compares across frameworks and model versions (compare.md §3.1, §3.6-3.9).

A mapping gives each target (NPU) row a *compare key*: the golden row name it should pair with.
The rules, from the most specific to the least (the first that applies wins):

* ``-dm/--data_mapping FILE``: a yaml ``{target row name: golden row name}``;
* ``-lm/--layer_mapping [FILE]``: layer-name translation of modules and the APIs under them, computed
  from both dumps' construct.json and stack.json (:mod:`msprobe.core.compare.layer_mapping`);
* ``-am/--api_mapping [FILE]``: a user yaml of MindSpore->PyTorch API pairs with argument / output
  index remapping, then the built-in table (``config/ms_to_pt_api.yaml``) and the ``Mint`` ->
  ``Torch`` and ``MintFunctional`` -> ``Functional`` prefix rules;
* ``-cm/--cell_mapping [FILE]``: ``Cell`` -> ``Module`` with cell paths rewritten by a yaml
  ``{cell_path.CellClass: module_path.ModuleClass}`` (whole path first, else every key found in it);
* otherwise the row's own name.

Keys are computed once per dump entry (an API call or a module call) and extended by the row's
suffix (``.input.0``), so the cost is a dict lookup per row.  Each row also gets the name of the rule
that produced its key, shown in the report's ``Match`` column.
"""

from __future__ import annotations

import logging
import os
import re
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple

import yaml

from msprobe.core.errors import MsprobeError

log = logging.getLogger("msprobe")

RULE_API_TABLE = "api table"
RULE_API_USER = "user api yaml"
RULE_CELL = "cell"
RULE_DATA = "data"
RULE_LAYER = "layer"

# the built-in table ships with the package; a source checkout also has it under config/
_HERE = os.path.dirname(os.path.abspath(__file__))
_TABLE_PATHS = (
    os.path.join(_HERE, "..", "..", "config", "ms_to_pt_api.yaml"),
    os.path.join(_HERE, "..", "..", "..", "config", "ms_to_pt_api.yaml"),
)
_STATE_KEYS = {"input": "args", "output": "outputs", "parameters": "parameters", "parameters_grad": "parameters_grad"}
_USER_KEYS = ("ms_api", "pt_api", "ms_args", "pt_args", "ms_output", "pt_output", "ms_outputs", "pt_outputs",
              "ms_parameters", "pt_parameters", "ms_parameters_grad", "pt_parameters_grad")
_DIRECTIONS = ("forward", "backward")
_NUM_AFTER_GRAD = re.compile(r"\.parameters_grad\.\d+(?=\.|$)")


@dataclass(frozen=True)
class MappingOptions:
    """The mapping flags of one compare (None: off; "": the flag without a file)."""

    api_mapping: Optional[str] = None
    cell_mapping: Optional[str] = None
    data_mapping: Optional[str] = None
    layer_mapping: Optional[str] = None

    @property
    def any(self) -> bool:
        return any(v is not None for v in (self.api_mapping, self.cell_mapping, self.data_mapping, self.layer_mapping))


# ---------------------------------------------------------------------------------------------- yaml files

def _load_yaml(path: str, what: str):
    from msprobe.core.fileio import check_path, yaml_safe_load

    path = check_path(path, what, "file")
    try:
        with open(path, "r", encoding="utf-8") as fh:
            return yaml_safe_load(fh, what, path)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        raise MsprobeError(f"{what} {path} is not valid yaml{where}; fix the file")
    except (OSError, UnicodeDecodeError) as exc:
        raise MsprobeError(f"{what} {path} cannot be read ({exc}); check the file")


def _kind(obj) -> str:
    return {list: "a list", dict: "a mapping", str: "a string"}.get(type(obj), type(obj).__name__)


def load_api_table(path: Optional[str] = None) -> Dict[str, str]:
    """The built-in MindSpore->PyTorch API table (``{MSPrefix.api: PTPrefix.api}``)."""
    paths = (path,) if path else _TABLE_PATHS
    for p in paths:
        if p and os.path.isfile(p):
            with open(p, "r", encoding="utf-8") as fh:
                table = yaml.safe_load(fh) or {}
            if not isinstance(table, dict):
                raise MsprobeError(f"built-in api table {p} is damaged (not a mapping); reinstall msprobe")
            return {str(k): str(v) for k, v in table.items()}
    raise MsprobeError("the built-in api table config/ms_to_pt_api.yaml is missing; reinstall msprobe")


def _index_list(value, key: str, where: str) -> List[str]:
    if not isinstance(value, list):
        raise MsprobeError(f"{where}: '{key}' must be a list of indexes such as [0, 1], not {_kind(value)}")
    out = []
    for v in value:
        if isinstance(v, bool) or not (isinstance(v, int) or (isinstance(v, str) and v.isdigit())):
            raise MsprobeError(f"{where}: '{key}' holds {v!r}; indexes are non-negative integers")
        if int(v) < 0:
            raise MsprobeError(f"{where}: '{key}' holds {v}; indexes are non-negative integers")
        out.append(str(int(v)))
    if len(set(out)) != len(out):
        dup = sorted({x for x in out if out.count(x) > 1}, key=int)
        raise MsprobeError(f"{where}: '{key}' lists index {', '.join(dup)} more than once; each index may appear once")
    return out


@dataclass
class UserApi:
    ms_api: str
    pt_api: str
    lists: Dict[str, Tuple[List[str], List[str]]] = field(default_factory=dict)  # state key -> (ms, pt)


def load_user_api_yaml(path: str) -> List[UserApi]:
    """The user's ``-am`` yaml: a list of ``{ms_api, pt_api, ms_args, pt_args, ms_outputs, pt_outputs, ...}``.

    Both ``ms_output``/``pt_output`` (what the reference's code reads) and ``ms_outputs``/``pt_outputs``
    (what its length check reads) are accepted; index lists must have the same length on both sides
    and hold unique non-negative indexes."""
    obj = _load_yaml(path, "api-mapping yaml")
    where_file = f"api-mapping yaml {os.path.abspath(path)}"
    if obj is None:
        return []
    if not isinstance(obj, list):
        raise MsprobeError(f"{where_file} must be a list of entries like '- ms_api: Mint.add', not {_kind(obj)}")
    out = []
    for n, entry in enumerate(obj, 1):
        where = f"{where_file} entry {n}"
        if not isinstance(entry, dict):
            raise MsprobeError(f"{where} must be a mapping with ms_api and pt_api, not {_kind(entry)}")
        unknown = sorted(str(k) for k in entry if k not in _USER_KEYS)
        if unknown:
            raise MsprobeError(f"{where}: unknown key {', '.join(repr(k) for k in unknown)}; the keys are {', '.join(_USER_KEYS)}")
        for key in ("ms_api", "pt_api"):
            v = entry.get(key)
            if not isinstance(v, str) or not v.strip() or "." not in v:
                raise MsprobeError(f"{where}: '{key}' must be an API name such as 'Mint.add' / 'Torch.add', not {v!r}")
        item = UserApi(entry["ms_api"].strip(), entry["pt_api"].strip())
        for state, suffix in _STATE_KEYS.items():
            names = [suffix] + (["output"] if suffix == "outputs" else [])
            ms_val = pt_val = None
            for nm in names:
                for side in ("ms", "pt"):
                    key = f"{side}_{nm}"
                    if key in entry:
                        val = _index_list(entry[key], key, where)
                        cur = ms_val if side == "ms" else pt_val
                        if cur is not None and cur != val:
                            raise MsprobeError(f"{where}: '{side}_output' and '{side}_outputs' disagree; give one of them")
                        if side == "ms":
                            ms_val = val
                        else:
                            pt_val = val
            if ms_val is None and pt_val is None:
                continue
            ms_val, pt_val = ms_val or [], pt_val or []
            if len(ms_val) != len(pt_val):
                raise MsprobeError(f"{where}: ms_{suffix} has {len(ms_val)} indexes but pt_{suffix} has {len(pt_val)}; "
                                   f"give one PyTorch index per MindSpore index")
            item.lists[state] = (ms_val, pt_val)
        out.append(item)
    return out


def load_cell_yaml(path: str) -> Dict[str, str]:
    obj = _load_yaml(path, "cell-mapping yaml")
    where = f"cell-mapping yaml {os.path.abspath(path)}"
    if obj is None:
        return {}
    if not isinstance(obj, dict):
        raise MsprobeError(f"{where} must be a mapping like 'fc1.Dense: fc1.Linear', not {_kind(obj)}")
    for k, v in obj.items():
        if not isinstance(k, str) or not isinstance(v, str):
            raise MsprobeError(f"{where}: {k!r}: {v!r} is not 'cell_path.CellClass: module_path.ModuleClass' (two strings)")
    return dict(obj)


def load_data_yaml(path: str) -> Dict[str, str]:
    obj = _load_yaml(path, "data-mapping yaml")
    where = f"data-mapping yaml {os.path.abspath(path)}"
    if obj is None:
        return {}
    if not isinstance(obj, dict):
        raise MsprobeError(f"{where} must be a mapping of target row names to golden row names, not {_kind(obj)}")
    for k, v in obj.items():
        if not isinstance(k, str) or not isinstance(v, str):
            raise MsprobeError(f"{where}: {k!r}: {v!r} is not 'target row name: golden row name' (two strings)")
    return dict(obj)


@dataclass(frozen=True)
class LoadedMappings:
    """The files of a compare, read and checked once (before any worker starts)."""

    options: MappingOptions
    api_table: Optional[Dict[str, str]] = None
    user_api: Tuple[UserApi, ...] = ()
    cells: Optional[Dict[str, str]] = None
    data: Optional[Dict[str, str]] = None
    layer_rules: Optional[dict] = None


def load_mappings(options: MappingOptions) -> LoadedMappings:
    api_table = user_api = cells = data = layer_rules = None
    if options.api_mapping is not None:
        api_table = load_api_table()
        user_api = tuple(load_user_api_yaml(options.api_mapping)) if options.api_mapping else ()
    if options.cell_mapping is not None:
        cells = load_cell_yaml(options.cell_mapping) if options.cell_mapping else {}
    if options.data_mapping is not None:
        if not options.data_mapping:
            raise MsprobeError("-dm/--data_mapping needs a yaml file of 'target row name: golden row name' pairs")
        data = load_data_yaml(options.data_mapping)
    if options.layer_mapping is not None:
        from msprobe.core.compare.layer_mapping import load_layer_mapping_yaml

        layer_rules = load_layer_mapping_yaml(options.layer_mapping) if options.layer_mapping else {}
    return LoadedMappings(options, api_table, tuple(user_api or ()), cells, data, layer_rules)


# ---------------------------------------------------------------------------------------------- keys

def split_api_entry(entry: str) -> Optional[Tuple[str, str]]:
    """``Mint.add.0.forward`` -> (``Mint.add``, ``.0.forward``); None for modules and odd names."""
    parts = entry.split(".")
    if len(parts) >= 4 and parts[-1] in _DIRECTIONS and parts[-2].isdigit() and parts[0] not in ("Cell", "Module"):
        cut = len(parts[-1]) + len(parts[-2]) + 2
        return entry[:-cut], entry[-cut:]
    return None


def table_api(api: str, table: Dict[str, str]) -> Optional[str]:
    """The PyTorch API of a MindSpore one by the built-in rules, or None."""
    if api.startswith("MintFunctional."):
        return "Functional." + api[len("MintFunctional."):]
    if api.startswith("Mint."):
        return "Torch." + api[len("Mint."):]
    return table.get(api)


def cell_key(entry: str, cells: Dict[str, str]) -> Optional[str]:
    """``Cell.fc1.Dense.forward.0`` -> ``Module.fc1.Linear.forward.0`` (with the yaml), or None."""
    if not entry.startswith("Cell."):
        return None
    rest = entry[len("Cell."):]
    for marker in (".forward", ".backward", ".parameters_grad"):
        pos = rest.find(marker)
        if pos >= 0:
            path, tail = rest[:pos], rest[pos:]
            break
    else:
        return None
    if cells:
        if path in cells:
            path = cells[path]
        else:
            for k, v in cells.items():
                if k in path:
                    path = path.replace(k, v, 1)
    return "Module." + path + tail


#: MindSpore parameter names -> PyTorch's (nn.LayerNorm/BatchNorm gamma/beta, Embedding's table, BatchNorm's
#: moving statistics); -cm and -lm apply it to ``.parameters.<name>`` and ``.parameters_grad[.<n>].<name>`` rows
MS_PT_PARAMS = {"gamma": "weight", "beta": "bias", "embedding_table": "weight", "moving_mean": "running_mean",
                "moving_variance": "running_var"}
_PARAM_ROW = re.compile(r"^(.*\.parameters(?:_grad)?(?:\.\d+)?\.)([A-Za-z_]+)$")


def _pt_param_key(key: str) -> str:
    """``Module.ln.LayerNorm.forward.0.parameters.gamma`` -> ``....parameters.weight``,
    ``Module.ln.LayerNorm.parameters_grad.gamma`` -> ``....parameters_grad.weight`` (other rows unchanged)."""
    m = _PARAM_ROW.match(key)
    if m is None or m.group(2) not in MS_PT_PARAMS:
        return key
    return m.group(1) + MS_PT_PARAMS[m.group(2)]


def _user_row_key(row_suffix: str, state: str, lists) -> Optional[str]:
    """Remap the index after ``.<state>.`` by the user's lists; None means the index is not listed."""
    pair = lists.get(state)
    if pair is None:
        return row_suffix
    marker = f".{state}."
    if not row_suffix.startswith(marker):
        return row_suffix
    rest = row_suffix[len(marker):]
    first, dot, tail = rest.partition(".")
    ms_list, pt_list = pair
    if first in ms_list:
        return marker + pt_list[ms_list.index(first)] + dot + tail
    return None


def _grad_number_free(name: str) -> str:
    return _NUM_AFTER_GRAD.sub(".parameters_grad", name)


def target_keys(t, g, maps: LoadedMappings, layer_pairs: Optional[Dict[str, str]] = None) -> Tuple[List[str], List[str], List[bool]]:
    """(compare key, rule, name-only join) for every target row.

    ``t``/``g``: DumpRows of both sides; ``layer_pairs``: ``{target entry: golden entry}`` from the
    layer mapping.  Rows without a mapping keep their name and rule "" (exact or unmatched later)."""
    data = maps.data or {}
    user = {u.ms_api: u for u in maps.user_api}
    table = maps.api_table
    cells = maps.cells
    golden_entries = set(g.api)
    golden_grad_free = None
    entry_cache: Dict[str, Tuple[Optional[str], str, Optional[UserApi]]] = {}
    keys: List[str] = []
    rules: List[str] = []
    name_only: List[bool] = []
    for name, entry, state in zip(t.names, t.api, t.state):
        mapped = data.get(name)
        if mapped is not None:
            keys.append(mapped)
            rules.append(RULE_DATA)
            name_only.append(True)
            continue
        got = entry_cache.get(entry)
        if got is None:
            got = (None, "", None)
            if layer_pairs is not None and entry in layer_pairs:
                got = (layer_pairs[entry], RULE_LAYER, None)
            else:
                split = split_api_entry(entry)
                if split is not None and (user or table is not None):
                    api, tail = split
                    u = user.get(api)
                    if u is not None:
                        got = (u.pt_api + tail, RULE_API_USER, u)
                    elif table is not None:
                        pt = table_api(api, table)
                        if pt is not None and pt != api:
                            got = (pt + tail, RULE_API_TABLE, None)
                elif cells is not None:
                    ck = cell_key(entry, cells)
                    if ck is not None:
                        if ".parameters_grad" in ck and ck not in golden_entries:
                            # 26.x names parameter gradients parameters_grad.<n>, 8.x without the number
                            if golden_grad_free is None:
                                golden_grad_free = {_grad_number_free(e): e for e in golden_entries}
                            ck = golden_grad_free.get(_grad_number_free(ck), ck)
                        got = (ck, RULE_CELL, None)
            entry_cache[entry] = got
        mapped_entry, rule, u = got
        if mapped_entry is None:
            keys.append(name)
            rules.append("")
            name_only.append(False)
            continue
        suffix = name[len(entry):] if name.startswith(entry) else name
        if u is not None:
            new_suffix = _user_row_key(suffix, state if state in _STATE_KEYS else "", u.lists)
            if new_suffix is None:
                keys.append(name + "abandoned")  # an index the user's lists leave out: unmatched
                rules.append(RULE_API_USER)
                name_only.append(False)
                continue
            suffix = new_suffix
        keys.append(_pt_param_key(mapped_entry + suffix) if rule in (RULE_CELL, RULE_LAYER) else mapped_entry + suffix)
        rules.append(rule)
        # layer-mapped rows join on (key, shape) like -am/-cm: -lm guessed these pairs, the user did not name
        # them, and a guessed pair of two shapes is two different tensors (a 4-D torch.matmul's backward is
        # recorded at its bmm view, [4, 8, 8], MindSpore's at the [2, 2, 8, 8] inputs)
        name_only.append(False)
    return keys, rules, name_only


def check_user_ranges(t, g, maps: LoadedMappings) -> None:
    """Each user index list must stay within the APIs' recorded inputs/outputs (one clear line if not)."""
    if not maps.user_api:
        return
    seen: Dict[Tuple[str, str, str], int] = {}
    for rows, side in ((t, "ms"), (g, "pt")):
        for name, entry, state in zip(rows.names, rows.api, rows.state):
            split = split_api_entry(entry)
            if split is None or state not in _STATE_KEYS:
                continue
            rest = name[len(entry) + len(state) + 2:] if name.startswith(entry) else ""
            first = rest.split(".", 1)[0]
            if first.isdigit():
                k = (side, split[0], state)
                seen[k] = max(seen.get(k, -1), int(first))
    path = os.path.abspath(maps.options.api_mapping or "")
    for u in maps.user_api:
        for state, (ms_list, pt_list) in u.lists.items():
            for side, api, lst in (("ms", u.ms_api, ms_list), ("pt", u.pt_api, pt_list)):
                top = seen.get((side, api, state))
                if top is None:
                    continue  # the API is not in this dump: the entry is skipped, as in the reference
                bad = [i for i in lst if int(i) > top]
                if bad:
                    key = f"{side}_{_STATE_KEYS[state]}"
                    raise MsprobeError(f"api-mapping yaml {path}: {key} of {api} holds index {bad[0]}, but the "
                                       f"{'target' if side == 'ms' else 'golden'} dump records {state} 0..{top} only")


def write_data_mapping(pairs: Dict[str, str], path: str) -> str:
    """The layer mapping's row pairs as a reusable ``-dm`` yaml (atomic, never overwriting)."""
    from msprobe.core.fileio import atomic_write

    def write(tmp: str) -> None:
        with open(tmp, "w", encoding="utf-8") as fh:
            yaml.safe_dump(pairs, fh, sort_keys=False, allow_unicode=True, width=1 << 16)

    return atomic_write(path, write)


def rows_of_pairs(t, g, keys: Sequence[str], rules: Sequence[str], rule: str) -> Dict[str, str]:
    """{target row: golden row} of the rows a rule mapped onto an existing golden row."""
    golden = set(g.names)
    return {n: k for n, k, r in zip(t.names, keys, rules) if r == rule and k in golden}
