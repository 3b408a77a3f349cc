"""The ``free_benchmark`` section of config.json (no framework imports).

Keys, defaults and rules are the reference's (spec checks_and_monitors.md section 2.2; user docs
``config_introduction_zh.md`` "task配置为free_benchmark").  Every problem is one MsprobeError line naming the
file, the key, the bad value and what is allowed.
"""

from __future__ import annotations

from dataclasses import dataclass

from msprobe.core.errors import MsprobeError

PERT_MODES = ("improve_precision", "add_noise", "bit_noise", "change_value", "no_change", "to_cpu")
MINDSPORE_PERT_MODES = ("improve_precision", "add_noise", "bit_noise", "change_value", "no_change")
HANDLER_TYPES = ("check", "fix")
FUZZ_DEVICES = ("npu", "cpu")
FUZZ_LEVELS = ("L1",)
FUZZ_STAGES = ("forward", "backward")
FIX_PERT_MODES = ("improve_precision", "to_cpu")
KEYS = ("scope", "list", "fuzz_device", "pert_mode", "handler_type", "fuzz_level", "fuzz_stage", "if_preheat",
        "preheat_step", "max_sample")
PREHEAT_KEYS = ("if_preheat", "preheat_step", "max_sample")
PREHEAT_STEP_MAX = 1_000_000


@dataclass(frozen=True)
class FreeBenchmarkConfig:
    scope: tuple = ()                 # exact API names ("Torch.matmul.0.forward"); () = all
    list: tuple = ()                  # substrings of API names ("relu"); () = all
    fuzz_device: str = "npu"          # npu (= the device the API runs on) | cpu (with to_cpu)
    pert_mode: str = "improve_precision"
    handler_type: str = "check"       # check | fix
    fuzz_level: str = "L1"
    fuzz_stage: str = "forward"       # forward | backward
    if_preheat: bool = False
    preheat_step: int = 15
    max_sample: int = 20              # the docs' default (the 8.x code uses 15)

    def selects(self, api_name: str) -> bool:
        """Whether the call named ``api_name`` ("Functional.gelu.0.forward") is checked."""
        if self.scope:
            return api_name in self.scope
        if self.list:
            return any(item in api_name for item in self.list)
        return True

    @property
    def fix(self) -> bool:
        return self.handler_type == "fix"

    @property
    def backward(self) -> bool:
        return self.fuzz_stage == "backward"


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def check_free_benchmark_section(section: dict, where, level: str, framework: str) -> FreeBenchmarkConfig:
    """Validate the ``free_benchmark`` section; ``where`` is core.dump.config's _Where for that section."""
    from msprobe.core.dump.config import API_NAME_PATTERN, _choice, _did_you_mean, _str_list

    source = where.source
    for key in section:
        if key not in KEYS:
            raise MsprobeError(f'{source}: unknown key "{key}" in the "free_benchmark" section'
                               f'{_did_you_mean(key, KEYS)}; allowed: ' + ", ".join(KEYS))
    if level != "L1":
        raise MsprobeError(f'{source}: "level" is "{level}"; task free_benchmark works at level L1 only: '
                           f'set "level": "L1"')
    values = {}
    scope = _str_list(where, "scope", section.get("scope", []), '["Torch.matmul.0.forward", "Tensor.pow.4.forward"]')
    for name in scope:
        if not API_NAME_PATTERN.match(name):
            raise where.fail("scope", list(scope), f'scope holds full API names like "Torch.matmul.0.forward"; '
                                                   f'"{name}" is not one')
    names = _str_list(where, "list", section.get("list", []), '["relu", "matmul"]')
    if scope and names:
        raise MsprobeError(f'{source}: "scope" and "list" are both set in the "free_benchmark" section; '
                           f'set only one of them (scope: exact API names, list: parts of names)')
    values["scope"], values["list"] = scope, names
    modes = PERT_MODES if framework == "pytorch" else MINDSPORE_PERT_MODES
    pert_mode = section.get("pert_mode", "improve_precision")
    if framework != "pytorch" and pert_mode == "to_cpu":
        raise where.fail("pert_mode", pert_mode, "to_cpu is PyTorch-only; allowed for MindSpore: " + ", ".join(modes))
    values["pert_mode"] = _choice(where, "pert_mode", pert_mode, modes)
    device = section.get("fuzz_device", "npu")
    if framework != "pytorch" and device == "cpu":
        raise where.fail("fuzz_device", device, 'fuzz_device cpu is PyTorch-only; MindSpore allows only "npu"')
    values["fuzz_device"] = _choice(where, "fuzz_device", device, FUZZ_DEVICES)
    if (values["fuzz_device"] == "cpu") != (values["pert_mode"] == "to_cpu"):
        raise MsprobeError(f'{source}: "fuzz_device" is "{values["fuzz_device"]}" with "pert_mode" '
                           f'"{values["pert_mode"]}"; pert_mode to_cpu needs fuzz_device cpu and fuzz_device cpu '
                           f'works only with pert_mode to_cpu')
    values["handler_type"] = _choice(where, "handler_type", section.get("handler_type", "check"), HANDLER_TYPES)
    values["fuzz_level"] = _choice(where, "fuzz_level", section.get("fuzz_level", "L1"), FUZZ_LEVELS)
    values["fuzz_stage"] = _choice(where, "fuzz_stage", section.get("fuzz_stage", "forward"), FUZZ_STAGES)
    preheat = section.get("if_preheat", False)
    if not isinstance(preheat, bool):
        raise where.fail("if_preheat", preheat, "it must be true or false")
    for key, default in (("preheat_step", 15), ("max_sample", 20)):
        value = section.get(key, default)
        if not _is_int(value) or not 0 < value <= PREHEAT_STEP_MAX:
            raise where.fail(key, value, f"it must be a positive integer (default {default})")
        values[key] = value
    if framework != "pytorch":
        given = [k for k in PREHEAT_KEYS if k in section]
        if preheat or given:
            raise MsprobeError(f'{source}: {", ".join(given)} in the "free_benchmark" section: preheat is PyTorch-only; '
                               f'remove these keys for MindSpore')
        if scope:
            raise where.fail("scope", list(scope), 'scope is PyTorch-only; for MindSpore name the APIs in "list"')
    values["if_preheat"] = preheat
    if values["fuzz_stage"] == "backward" and not names:
        raise MsprobeError(f'{source}: "fuzz_stage" is "backward" with an empty "list"; name the APIs to check in '
                           f'"list" (e.g. ["matmul"]): the backward stage re-runs each selected API twice')
    if values["handler_type"] == "fix":
        if values["fuzz_stage"] == "backward":
            raise MsprobeError(f'{source}: "handler_type" fix with "fuzz_stage" backward; fix replaces forward '
                               f'outputs only: set fuzz_stage to forward')
        if preheat:
            raise MsprobeError(f'{source}: "handler_type" fix with "if_preheat" true; preheat works only with '
                               f'handler_type check: set if_preheat to false')
        if values["pert_mode"] not in FIX_PERT_MODES:
            allowed = "improve_precision or to_cpu" if framework == "pytorch" else "improve_precision"
            raise MsprobeError(f'{source}: "handler_type" fix with "pert_mode" {values["pert_mode"]}; fix needs '
                               f'pert_mode {allowed} (a perturbed output must not replace the real one)')
    return FreeBenchmarkConfig(**values)


def check_free_benchmark(section: dict, where, level: str, framework: str) -> dict:
    """The DumpConfig fields of a free_benchmark config (called by core.dump.config.load_dump_config)."""
    fb = check_free_benchmark_section(section, where, level, framework)
    if framework != "pytorch" and fb.fuzz_stage == "backward":
        raise MsprobeError(f'{where.source}: "fuzz_stage" backward is not supported for MindSpore by this msprobe '
                           f'yet (the forward stage is); set fuzz_stage to forward, or use PyTorch')
    return {"free_benchmark": fb}
