"""Training monitor configuration (``TrainerMon(config_file_path)``): parse and validate, framework-free.

The keys, defaults and meanings are the reference's (mindstudio-probe 8.3.3, spec checks_and_monitors.md 4.2).
Every problem a user can fix is one :class:`MsprobeError` line naming the file, the key, the bad value and
what is allowed: an unknown key (with the closest known one), a value of the wrong type, a number out of
range.  Where the reference only warns and falls back (an unknown ``ops`` entry, an unknown ``format``,
``ur_distribution`` without tensorboard, ``forward_only`` with ``backward_only``) we warn the same way, so a
config the reference accepts is accepted here.
"""

from __future__ import annotations

import copy
import difflib
import logging
import os

from msprobe.core.errors import MsprobeError
from msprobe.core.fileio import load_json

log = logging.getLogger("msprobe")

# statistics a tensor can be reduced to; shape and dtype are always appended (G8, G26)
OP_LIST = ("norm", "min", "max", "zeros", "nans", "id", "mean", "shape", "dtype")
NUMERIC_OPS = ("norm", "min", "max", "zeros", "nans", "id", "mean")
FORMATS = ("csv", "tensorboard", "api")
RULES = ("AnomalyTurbulence", "AnomalyNan")
CC_KEYS = ("enable", "cc_codeline", "cc_pre_hook", "cc_log_only")
L2_KEYS = ("attention_hook", "linear_hook")

_BOOL_KEYS = ("xy_distribution", "all_xy", "forward_only", "backward_only", "wg_distribution", "monitor_mbs_grad",
              "mv_distribution", "ur_distribution", "param_distribution", "mg_direction", "recording_l2_features",
              "stack_info", "print_struct", "dynamic_on", "squash_name")

DEFAULTS = {
    "targets": {}, "xy_distribution": False, "all_xy": False, "forward_only": False, "backward_only": False,
    "wg_distribution": False, "monitor_mbs_grad": False, "mv_distribution": False, "ur_distribution": False,
    "param_distribution": False, "mg_direction": False, "cc_distribution": {}, "l2_targets": {},
    "recording_l2_features": False, "sa_order": "s,b,h,d", "stack_info": False, "print_struct": False,
    "module_ranks": [], "format": "csv", "ops": [], "eps": 1e-8, "ndigits": 6, "step_count_per_record": 1,
    "start_step": 0, "step_interval": 1, "collect_times": 100000000, "dynamic_on": False,
    "alert": {"rules": []}, "append_output": [], "squash_name": True,
}
# keys of older releases the reference still reads (G1's dynamic switch, the validator's name of mg_direction)
LEGACY_KEYS = ("switch", "mg_distribution", "opt_ty")


def _err(where, msg):
    return MsprobeError(f"{where}: {msg}")


def _type_name(v):
    return {bool: "a boolean", int: "an integer", float: "a number", str: "a string", list: "a list",
            dict: "an object"}.get(type(v), type(v).__name__)


def _is_int(v):
    return isinstance(v, int) and not isinstance(v, bool)


def _is_num(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def validate_config(raw, where: str = "monitor config") -> dict:
    """Check a parsed config object and return it completed with the defaults (a new dict)."""
    if not isinstance(raw, dict):
        raise _err(where, f"the config must be a JSON object, not {_type_name(raw)}")
    known = set(DEFAULTS) | set(LEGACY_KEYS)
    for key in raw:
        if key not in known:
            close = difflib.get_close_matches(str(key), sorted(DEFAULTS), n=1, cutoff=0.6)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise _err(where, f"unknown key {key!r}{hint}; known keys: {', '.join(sorted(DEFAULTS))}")
    cfg = copy.deepcopy(DEFAULTS)
    cfg.update(copy.deepcopy(raw))
    if "mg_distribution" in raw and "mg_direction" not in raw:
        cfg["mg_direction"] = raw["mg_distribution"]
    if "switch" in raw and "dynamic_on" not in raw:
        cfg["dynamic_on"] = raw["switch"]
    for k in LEGACY_KEYS:
        cfg.pop(k, None)

    for key in _BOOL_KEYS:
        if not isinstance(cfg[key], bool):
            raise _err(where, f"{key} must be true or false, not {cfg[key]!r}")

    targets = cfg["targets"]
    if not isinstance(targets, dict):
        raise _err(where, f"targets must be an object {{module or parameter name: {{}}}}, not {_type_name(targets)}")
    for name, spec in targets.items():
        if not isinstance(spec, dict):
            raise _err(where, f"targets[{name!r}] must be an object (e.g. {{}}), not {_type_name(spec)}")

    fmt = cfg["format"]
    if not isinstance(fmt, str):
        raise _err(where, f"format must be one of {', '.join(FORMATS)}, not {fmt!r}")
    if fmt not in FORMATS:
        log.warning("msprobe monitor: format %r is not supported (one of %s); csv is used", fmt, ", ".join(FORMATS))
        cfg["format"] = "csv"
    if cfg["ur_distribution"] and cfg["format"] != "tensorboard":
        log.warning("can only set ur_distribution when format is 'tensorboard', cancel ur_distribution")
        cfg["ur_distribution"] = False
    if cfg["forward_only"] and cfg["backward_only"]:
        log.warning("not enable backward_only and forward_only simultaneously")

    ops = cfg["ops"]
    if not isinstance(ops, list) or not all(isinstance(o, str) for o in ops):
        raise _err(where, f"ops must be a list of names among {', '.join(OP_LIST)}, not {ops!r}")
    valid = []
    for op in ops:
        if op not in OP_LIST:
            log.warning("op %s is not supported. Optional ops: %s", op, list(OP_LIST))
        elif op not in valid and op not in ("shape", "dtype"):
            valid.append(op)
    if not valid:
        log.info("There is no valid ops, default op norm is used")
        valid = ["norm"]
    cfg["ops"] = valid + ["shape", "dtype"]

    if not _is_num(cfg["eps"]):
        raise _err(where, f"eps should be a float, not {cfg['eps']!r}")
    for key, lo, hi in (("ndigits", 1, 20), ("step_count_per_record", 1, 1_000_000), ("step_interval", 1, None),
                        ("start_step", 0, None), ("collect_times", 0, None)):
        v = cfg[key]
        if key == "collect_times" and isinstance(v, float) and v.is_integer():
            v = cfg[key] = int(v)
        if not _is_int(v):
            raise _err(where, f"{key} must be an integer, not {v!r}")
        if v < lo or (hi is not None and v > hi):
            rng = f"{lo}..{hi}" if hi is not None else f">= {lo}"
            raise _err(where, f"{key} must be {rng}, not {v}")

    mr = cfg["module_ranks"]
    if not isinstance(mr, list) or not all(_is_int(r) and r >= 0 for r in mr):
        raise _err(where, f"module_ranks must be a list of rank numbers (>= 0), not {mr!r}")

    cc = cfg["cc_distribution"]
    if not isinstance(cc, dict):
        raise _err(where, f"cc_distribution must be an object with keys {', '.join(CC_KEYS)}, not {_type_name(cc)}")
    for k, v in cc.items():
        if k not in CC_KEYS:
            raise _err(where, f"{k} of cc_distribution is not supported.")
        if k == "cc_codeline":
            if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
                raise _err(where, f"cc_distribution.cc_codeline must be a list of regular expressions, not {v!r}")
        elif not isinstance(v, bool):
            raise _err(where, f"cc_distribution.{k} must be true or false, not {v!r}")

    l2 = cfg["l2_targets"]
    if not isinstance(l2, dict) or not all(k in L2_KEYS and isinstance(v, list) for k, v in l2.items()):
        raise _err(where, f"l2_targets must be an object {{attention_hook|linear_hook: [module names]}}, not {l2!r}")
    sa = cfg["sa_order"]
    if not isinstance(sa, str) or sa.replace(" ", "") not in ("s,b,h,d", "b,s,h,d"):
        raise _err(where, f"sa_order must be 's,b,h,d' or 'b,s,h,d', not {sa!r}")

    cfg["alert"] = _validate_alert(cfg["alert"], where)

    ao = cfg["append_output"]
    if not isinstance(ao, list) or (ao and (len(ao) != 2 or not all(isinstance(x, str) for x in ao))):
        raise _err(where, f"append_output must be [] or two time tags like ['Dec03_21-34-40', 'Dec03_21-34-41'], "
                          f"not {ao!r}")

    if not targets:
        cfg["targets"] = {"": {}}
        if cfg["xy_distribution"]:
            cfg["all_xy"] = True
    return cfg


def _validate_alert(alert, where):
    if not isinstance(alert, dict):
        raise _err(where, f"alert must be an object {{\"rules\": [...], \"dump\": false}}, not {_type_name(alert)}")
    for k in alert:
        if k not in ("rules", "dump"):
            raise _err(where, f"unknown key alert.{k} (alert has 'rules' and 'dump')")
    rules = alert.get("rules", [])
    if not isinstance(rules, list):
        raise _err(where, f"alert.rules must be a list, not {_type_name(rules)}")
    dump = alert.get("dump", False)
    if not isinstance(dump, bool):
        raise _err(where, f"alert.dump must be true or false, not {dump!r}")
    out = []
    for i, r in enumerate(rules):
        if not isinstance(r, dict) or not isinstance(r.get("rule_name"), str):
            raise _err(where, f"alert.rules[{i}] must be {{\"rule_name\": ..., \"args\": {{\"threshold\": ...}}}}, "
                              f"not {r!r}")
        name = r["rule_name"]
        if name not in RULES:
            close = difflib.get_close_matches(name, RULES, n=1, cutoff=0.5)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise _err(where, f"alert.rules[{i}].rule_name {name!r} is not a rule{hint}; rules: {', '.join(RULES)}")
        args = r.get("args", {})
        if not isinstance(args, dict):
            raise _err(where, f"alert.rules[{i}].args must be an object, not {_type_name(args)}")
        th = args.get("threshold")
        if th is None:
            if name == "AnomalyTurbulence":
                log.warning("Spec is missing required keys: ['threshold'] (alert rule %s dropped)", name)
                continue
        elif not _is_num(th) or th < 0:
            raise _err(where, f"alert.rules[{i}].args.threshold must be a number >= 0, not {th!r}")
        out.append({"rule_name": name, "args": dict(args)})
    return {"rules": out, "dump": dump}


def load_config(path: str) -> dict:
    """Read and validate the config file ``path``."""
    cfg = load_json(path, "monitor config", remedy="correct the monitor config file")
    return validate_config(cfg, where=f"monitor config {path}")


def check_output_dir(path: str) -> str:
    """The monitor output folder (``MONITOR_OUTPUT_DIR``): created if needed, must be a writable folder."""
    where = f"MONITOR_OUTPUT_DIR {path}"
    if os.path.islink(path):
        raise MsprobeError(f"{where}: is a symbolic link; give a real folder")
    if os.path.exists(path) and not os.path.isdir(path):
        raise MsprobeError(f"{where}: exists and is not a folder; set MONITOR_OUTPUT_DIR to a folder")
    try:
        os.makedirs(path, mode=0o750, exist_ok=True)
    except OSError as exc:
        raise MsprobeError(f"{where}: cannot be created ({exc.strerror}); set MONITOR_OUTPUT_DIR to a writable "
                           f"folder") from None
    if not os.access(path, os.W_OK | os.X_OK):
        raise MsprobeError(f"{where}: is not writable; set MONITOR_OUTPUT_DIR to a writable folder")
    return os.path.abspath(path)
