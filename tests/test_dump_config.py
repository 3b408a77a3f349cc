"""msprobe.core.dump.config: config.json parsing/validation for PrecisionDebugger and the dump path checks."""
import json
import os
import stat
import subprocess
import sys

import pytest

from conftest import ROOT
from msprobe.core.dump.config import (
    DumpConfig,
    load_dump_config,
    packaged_config_path,
    parse_step_or_rank,
    prepare_dump_path,
)
from msprobe.core.errors import MsprobeError


def write_cfg(tmp_path, body, name="config.json"):
    path = tmp_path / name
    path.write_text(json.dumps(body) if not isinstance(body, str) else body)
    return str(path)


def cfg(tmp_path, **top):
    body = {"task": "statistics", "dump_path": "./dump_path", "rank": [], "step": [], "level": "L1"}
    body.update(top)
    return write_cfg(tmp_path, body)


def err(tmp_path, *words, framework="pytorch", overrides=None, **top):
    path = cfg(tmp_path, **top)
    with pytest.raises(MsprobeError) as exc:
        load_dump_config(path, framework=framework, **(overrides or {}))
    msg = str(exc.value)
    assert "\n" not in msg
    for w in words:
        assert w in msg, (w, msg)
    return msg


# ------------------------------------------------------------------------------------- defaults / overrides

def test_default_config(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    c = load_dump_config()
    assert isinstance(c, DumpConfig)
    assert c.task == "statistics" and c.level == "L1"
    assert c.dump_path == os.path.join(str(tmp_path), "dump_path")
    assert os.path.isabs(c.dump_path)
    assert not os.path.exists(c.dump_path)  # not created by loading
    assert c.rank == () and c.step == () and c.async_dump is False
    assert c.precision == "low" and c.seed is None and c.is_deterministic is False
    assert c.scope == () and c.list == () and c.data_mode == ("all",)
    assert c.summary_mode == "statistics" and c.tensor_list == () and c.overflow_nums == 1
    assert c.framework == "pytorch"
    assert c.source == packaged_config_path()
    assert packaged_config_path() == str(ROOT / "msprobe" / "config" / "config.json")
    assert not c.saves_tensors


def test_default_config_is_frozen():
    c = load_dump_config()
    with pytest.raises(Exception):
        c.task = "tensor"


def test_overrides(tmp_path):
    c = load_dump_config(None, task="tensor", dump_path=str(tmp_path / "out"), level="mix", step=[1, "3-4"])
    assert c.task == "tensor" and c.level == "mix" and c.step == (1, 3, 4)
    assert c.dump_path == str(tmp_path / "out")
    assert c.saves_tensors


def test_override_task_reads_that_section(tmp_path):
    path = cfg(tmp_path, tensor={"scope": [], "list": ["relu"], "data_mode": ["forward"]},
               statistics={"list": ["conv"]})
    c = load_dump_config(path, task="tensor")
    assert c.task == "tensor" and c.list == ("relu",) and c.data_mode == ("forward",)
    assert load_dump_config(path).list == ("conv",)


def test_missing_task_section_gives_defaults(tmp_path):
    c = load_dump_config(cfg(tmp_path, task="tensor"))
    assert c.task == "tensor" and c.list == () and c.data_mode == ("all",)


def test_full_valid_config(tmp_path):
    path = cfg(tmp_path, rank=[3, "0-1"], step=["2"], async_dump=False, precision="high", seed=42,
               is_deterministic=True, enable_dataloader=False,
               statistics={"scope": ["Functional.relu.0.forward", "Tensor.__add__.0.forward"], "list": ["relu"],
                           "data_mode": ["backward", "input"], "summary_mode": "md5", "tensor_list": ["linear"]},
               run_ut={"anything": 1}, free_benchmark={"whatever": True})
    c = load_dump_config(path)
    assert c.rank == (0, 1, 3) and c.step == (2,)
    assert c.precision == "high" and c.seed == 42 and c.is_deterministic is True
    assert c.scope == ("Functional.relu.0.forward", "Tensor.__add__.0.forward")
    assert c.list == ("relu",) and c.summary_mode == "md5" and c.tensor_list == ("linear",)
    assert c.saves_tensors
    assert c.source == path


def test_seed_absent_and_bounds(tmp_path):
    assert load_dump_config(cfg(tmp_path, seed=0)).seed == 0
    assert load_dump_config(cfg(tmp_path, seed=2 ** 32 - 1)).seed == 2 ** 32 - 1
    err(tmp_path, '"seed"', "4294967296", "between 0 and 4294967295", seed=2 ** 32)
    err(tmp_path, '"seed"', "-1", seed=-1)
    err(tmp_path, '"seed"', "true", seed=True)
    err(tmp_path, '"seed"', '"1234"', seed="1234")


def test_overflow_check_section(tmp_path):
    c = load_dump_config(cfg(tmp_path, task="overflow_check", overflow_check={"overflow_nums": -1, "check_mode": "aicore"}))
    assert c.task == "overflow_check" and c.overflow_nums == -1 and c.saves_tensors
    assert load_dump_config(cfg(tmp_path, task="overflow_check", overflow_check={"overflow_nums": 5})).overflow_nums == 5
    for bad in (0, -2, 1.5, True, "3"):
        err(tmp_path, '"overflow_nums"', "-1", "positive", task="overflow_check", overflow_check={"overflow_nums": bad})
    err(tmp_path, '"check_mode"', '"x"', "aicore", task="overflow_check", overflow_check={"check_mode": "x"})


def test_structure_task(tmp_path):
    c = load_dump_config(cfg(tmp_path, task="structure", level="L0"))
    assert c.task == "structure" and c.level == "L0" and not c.saves_tensors
    # not L0/mix: forced to mix with a warning (reference behaviour)
    assert load_dump_config(cfg(tmp_path, task="structure", level="L1")).level == "mix"
    err(tmp_path, 'unknown key "list"', '"structure" section', "takes no options", task="structure", structure={"list": []})


def test_tensor_file_format_accepted(tmp_path):
    c = load_dump_config(cfg(tmp_path, task="tensor", tensor={"file_format": "bin", "backward_input": ""}))
    assert c.task == "tensor"
    err(tmp_path, '"file_format"', '"pt"', "npy, bin", task="tensor", tensor={"file_format": "pt"})


def test_mindspore_l2(tmp_path):
    c = load_dump_config(cfg(tmp_path, level="L2", statistics={"list": ["name-regex(Default/.+)", "Conv2D-op1"]}),
                         framework="mindspore")
    assert c.level == "L2" and c.framework == "mindspore" and len(c.list) == 2
    err(tmp_path, '"data_mode"', "L2", framework="mindspore", level="L2", statistics={"data_mode": ["forward"]})
    err(tmp_path, '"list"', "regular expression", framework="mindspore", level="L2", statistics={"list": ["name-regex(()"]})


def test_debug_level_ignores_scope_list(tmp_path):
    c = load_dump_config(cfg(tmp_path, level="debug", statistics={"scope": ["a", "b"], "list": ["x"], "tensor_list": ["y"]}))
    assert c.level == "debug" and c.scope == () and c.list == () and c.tensor_list == ()


# ------------------------------------------------------------------------------------- config file errors

def test_config_file_errors(tmp_path):
    with pytest.raises(MsprobeError, match="does not exist") as exc:
        load_dump_config(str(tmp_path / "nope.json"))
    assert "nope.json" in str(exc.value)
    txt = tmp_path / "config.txt"
    txt.write_text("{}")
    with pytest.raises(MsprobeError, match=r"config\.txt is not a \.json file"):
        load_dump_config(str(txt))
    bad = write_cfg(tmp_path, '{"task": ', name="bad.json")
    with pytest.raises(MsprobeError, match=r"bad\.json is not valid JSON"):
        load_dump_config(bad)
    arr = write_cfg(tmp_path, [1, 2], name="arr.json")
    with pytest.raises(MsprobeError, match=r"arr\.json holds a JSON list, not an object"):
        load_dump_config(arr)
    (tmp_path / "d.json").mkdir()
    with pytest.raises(MsprobeError, match=r"d\.json is a directory"):
        load_dump_config(str(tmp_path / "d.json"))


def test_config_symlink_refused(tmp_path):
    real = cfg(tmp_path)
    link = tmp_path / "link.json"
    link.symlink_to(real)
    with pytest.raises(MsprobeError, match="symbolic link"):
        load_dump_config(str(link))


def test_unknown_top_level_key(tmp_path):
    msg = err(tmp_path, 'unknown key "extra_info"', "allowed top-level keys", "task, dump_path", "enable_dataloader",
              "free_benchmark", extra_info=True)
    assert "config.json" in msg


def test_unknown_section_key(tmp_path):
    err(tmp_path, 'unknown key "summary_mode"', '"tensor" section', "scope, list, data_mode, file_format",
        task="tensor", tensor={"summary_mode": "md5"})
    err(tmp_path, 'unknown key "foo"', "summary_mode, tensor_list", statistics={"foo": 1})


def test_unselected_sections_only_need_to_be_objects(tmp_path):
    load_dump_config(cfg(tmp_path, tensor={"bogus": 1}, overflow_check={"overflow_nums": "many"}))
    err(tmp_path, '"tensor"', "JSON object", tensor=[1])


# ------------------------------------------------------------------------------------- field errors

def test_task_errors(tmp_path):
    for t in ("acc_check", "run_ut", "exception_dump"):
        msg = err(tmp_path, '"task"', f'"{t}"', "not supported by this msprobe yet",
                  "statistics, tensor, overflow_check, structure", task=t)
        assert "config.json" in msg
    err(tmp_path, '"task"', '"foo"', "unknown task", "statistics, tensor, overflow_check, structure", task="foo")
    err(tmp_path, '"task"', "3", "unknown task", task=3)
    err(tmp_path, 'PrecisionDebugger argument "task"', '"run_ut"', "not supported", overrides={"task": "run_ut"})
    err(tmp_path, 'PrecisionDebugger argument "task"', '"bad"', "unknown task", overrides={"task": "bad"})


def test_level_errors(tmp_path):
    msg = err(tmp_path, '"level" is "L3"; allowed: L0, L1, L2, mix, debug', level="L3")
    assert msg.startswith(str(tmp_path / "config.json") + ': "level"')
    err(tmp_path, 'PrecisionDebugger argument "level" is "l1"', "allowed: L0", overrides={"level": "l1"})


def test_dump_path_errors(tmp_path):
    err(tmp_path, '"dump_path" is 5', "non-empty path string", dump_path=5)
    err(tmp_path, '"dump_path" is ""', dump_path="")
    err(tmp_path, 'PrecisionDebugger argument "dump_path" is ""', overrides={"dump_path": ""})
    err(tmp_path, 'PrecisionDebugger argument "dump_path"', overrides={"dump_path": ["a"]})
    path = write_cfg(tmp_path, {"task": "statistics"})
    with pytest.raises(MsprobeError, match='"dump_path" is missing'):
        load_dump_config(path)
    assert load_dump_config(path, dump_path=str(tmp_path / "x")).dump_path == str(tmp_path / "x")


def test_dump_path_normalised(tmp_path):
    c = load_dump_config(cfg(tmp_path, dump_path=str(tmp_path) + "/a/../b/"))
    assert c.dump_path == str(tmp_path / "b")


def test_bool_fields(tmp_path):
    err(tmp_path, '"async_dump" is "true"', "true or false", async_dump="true")
    err(tmp_path, '"is_deterministic" is 1', "true or false", is_deterministic=1)
    err(tmp_path, '"enable_dataloader" is "no"', enable_dataloader="no")
    err(tmp_path, "enable_dataloader is not supported", "start()/stop()/step()", enable_dataloader=True)


def test_precision(tmp_path):
    assert load_dump_config(cfg(tmp_path, precision="high")).precision == "high"
    err(tmp_path, '"precision" is "medium"', "allowed: low, high", precision="medium")


def test_summary_mode(tmp_path):
    err(tmp_path, '"summary_mode"', '"xor"', "not supported", statistics={"summary_mode": "xor"})
    err(tmp_path, '"summary_mode"', '"sha"', "allowed: statistics, md5", statistics={"summary_mode": "sha"})


def test_async_dump_rules(tmp_path):
    assert load_dump_config(cfg(tmp_path, async_dump=True)).async_dump is True
    err(tmp_path, '"async_dump" is true with task tensor', '"list"', async_dump=True, task="tensor")
    c = load_dump_config(cfg(tmp_path, async_dump=True, task="tensor", tensor={"list": ["relu"]}))
    assert c.async_dump and c.list == ("relu",)
    assert load_dump_config(cfg(tmp_path, async_dump=True, task="tensor", level="debug")).level == "debug"
    err(tmp_path, "async_dump", "md5", async_dump=True, statistics={"summary_mode": "md5"})


def test_list_type_errors(tmp_path):
    err(tmp_path, '"list" in the "statistics" section is "relu"', "list of strings", statistics={"list": "relu"})
    err(tmp_path, '"list"', "[1]", "list of strings", statistics={"list": [1]})
    err(tmp_path, '"tensor_list"', "list of strings", statistics={"tensor_list": "x"})
    err(tmp_path, '"scope"', "list of strings", statistics={"scope": "Module.a.A.forward.0"})


def test_scope_rules(tmp_path):
    mods = ["Module.conv1.Conv2d.forward.0", "Module.fc.Linear.forward.0"]
    apis = ["Functional.relu.0.forward", "Tensor.__add__.0.backward"]
    assert load_dump_config(cfg(tmp_path, level="L0", statistics={"scope": mods})).scope == tuple(mods)
    assert load_dump_config(cfg(tmp_path, level="L1", statistics={"scope": apis})).scope == tuple(apis)
    assert load_dump_config(cfg(tmp_path, level="mix", statistics={"scope": [mods[0], apis[1]]})).level == "mix"
    err(tmp_path, '"scope"', "exactly 2", "not 1", statistics={"scope": apis[:1]})
    err(tmp_path, '"scope"', "exactly 2", "not 3", statistics={"scope": apis + apis[:1]})
    err(tmp_path, '"scope"', "level L1", "API names", '"Module.conv1.Conv2d.forward.0"', statistics={"scope": mods})
    err(tmp_path, '"scope"', "level L0", "module names", level="L0", statistics={"scope": apis})
    err(tmp_path, '"scope"', "level mix", '"relu"', level="mix", statistics={"scope": ["relu", mods[0]]})
    err(tmp_path, '"scope"', "L2", task="tensor", level="L2",
        tensor={"scope": apis, "list": ["Functional.conv2d.1.forward"]})


def test_level_l2_rules(tmp_path):
    c = load_dump_config(cfg(tmp_path, task="tensor", level="L2", tensor={"list": ["Functional.conv2d.1.forward"]}))
    assert c.level == "L2" and c.list == ("Functional.conv2d.1.forward",)
    err(tmp_path, '"level" is "L2"', 'task "tensor"', level="L2", statistics={"list": ["Functional.conv2d.1.forward"]})
    err(tmp_path, '"list"', "exactly one", task="tensor", level="L2", tensor={"list": []})
    err(tmp_path, '"list"', "exactly one", task="tensor", level="L2",
        tensor={"list": ["Functional.conv2d.1.forward", "Torch.matmul.0.forward"]})
    err(tmp_path, '"list"', "full API name", task="tensor", level="L2", tensor={"list": ["conv2d"]})


def test_data_mode_errors(tmp_path):
    err(tmp_path, '"data_mode"', "cannot be combined", statistics={"data_mode": ["all", "forward"]})
    err(tmp_path, '"data_mode"', '"fwd"', "all, forward, backward, input, output", statistics={"data_mode": ["fwd"]})
    err(tmp_path, '"data_mode"', "list of strings", statistics={"data_mode": "all"})
    err(tmp_path, '"data_mode"', "non-empty", statistics={"data_mode": []})


@pytest.mark.parametrize("modes, expected", [
    (["all"], (True, True, True, True)),
    (["forward"], (True, False, True, True)),
    (["backward"], (False, True, True, True)),
    (["input"], (True, True, True, False)),
    (["output"], (True, True, False, True)),
    (["forward", "output"], (True, False, False, True)),
    (["forward", "backward", "input", "output"], (True, True, True, True)),
    (["backward", "input"], (False, True, True, False)),
])
def test_data_mode_properties(tmp_path, modes, expected):
    c = load_dump_config(cfg(tmp_path, statistics={"data_mode": modes}))
    assert c.data_mode == tuple(modes)
    assert (c.dump_forward, c.dump_backward, c.dump_input, c.dump_output) == expected


def test_data_mode_properties_direct():
    c = DumpConfig(task="statistics", dump_path="/x", level="L1", data_mode=("input",))
    assert c.dump_forward and c.dump_backward and c.dump_input and not c.dump_output


# ------------------------------------------------------------------------------------- step / rank

def test_parse_step_or_rank():
    assert parse_step_or_rank([], "step") == ()
    assert parse_step_or_rank([1, "3-4"], "step") == (1, 3, 4)
    assert parse_step_or_rank([5, "2", 5, "0-1", "1-2"], "rank") == (0, 1, 2, 5)
    assert parse_step_or_rank(["7-7"], "step") == (7,)
    assert parse_step_or_rank([0, 1000000], "step") == (0, 1000000)


@pytest.mark.parametrize("value, words", [
    (["3-1"], ['"step"', '"3-1"', "reversed", "3", "1", '"1-3"']),
    (3, ['"step"', "must be a list"]),
    ("0-3", ['"step"', "must be a list"]),
    ([True], ['"step"', "true", "integer"]),
    ([1.0], ['"step"', "1.0", "integer"]),
    ([None], ['"step"', "null"]),
    ([-1], ['"step"', "-1", "between 0 and 1000000"]),
    ([1000001], ['"step"', "1000001", "between 0 and 1000000"]),
    (["0-1000001"], ['"step"', "between 0 and 1000000"]),
    (["a-b"], ['"step"', '"a-b"', '"3-5"']),
    (["1-2-3"], ['"step"', '"1-2-3"']),
    (["-1"], ['"step"', '"-1"']),
])
def test_parse_step_errors(value, words):
    with pytest.raises(MsprobeError) as exc:
        parse_step_or_rank(value, "step", source="cfg.json")
    msg = str(exc.value)
    assert msg.startswith('cfg.json: "step"')
    for w in words:
        assert w in msg, (w, msg)


def test_step_rank_in_config(tmp_path):
    err(tmp_path, '"step"', '"3-1"', "reversed", step=["3-1"])
    err(tmp_path, '"rank"', "must be a list", rank=0)
    err(tmp_path, 'PrecisionDebugger argument "step"', '"3-1"', "reversed", overrides={"step": ["3-1"]})
    assert load_dump_config(cfg(tmp_path, step=[1, "3-4"], rank=["0-2"])).step == (1, 3, 4)
    # the override replaces the file's step list
    assert load_dump_config(cfg(tmp_path, step=[9]), step=[0]).step == (0,)


# ------------------------------------------------------------------------------------- prepare_dump_path

def test_prepare_dump_path_creates(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    got = prepare_dump_path("./a/b/c")
    assert got == str(tmp_path / "a" / "b" / "c") and os.path.isdir(got)
    old = os.umask(0o022)
    try:
        got2 = prepare_dump_path(str(tmp_path / "m"))
    finally:
        os.umask(old)
    assert stat.S_IMODE(os.stat(got2).st_mode) == 0o750
    assert prepare_dump_path(got) == got  # existing directory is fine


def test_prepare_dump_path_file(tmp_path):
    f = tmp_path / "afile"
    f.write_text("x")
    with pytest.raises(MsprobeError, match="is a file, not a directory"):
        prepare_dump_path(str(f))
    with pytest.raises(MsprobeError, match="is a file, not a directory"):
        prepare_dump_path(str(f / "sub"))


@pytest.mark.skipif(hasattr(os, "geteuid") and os.geteuid() == 0,
                    reason="root can write into any directory, so an unwritable directory cannot be made")
def test_prepare_dump_path_unwritable(tmp_path):
    d = tmp_path / "ro"
    d.mkdir()
    d.chmod(0o500)
    try:
        with pytest.raises(MsprobeError, match="not writable"):
            prepare_dump_path(str(d))
        with pytest.raises(MsprobeError, match="cannot create dump_path"):
            prepare_dump_path(str(d / "sub"))
    finally:
        d.chmod(0o700)


def test_prepare_dump_path_special_chars_and_length(tmp_path):
    with pytest.raises(MsprobeError, match="special characters"):
        prepare_dump_path(str(tmp_path / "a b"))
    with pytest.raises(MsprobeError, match="special characters"):
        prepare_dump_path(str(tmp_path / "dump$"))
    assert not (tmp_path / "a b").exists()
    with pytest.raises(MsprobeError, match="limit is 255"):
        prepare_dump_path(str(tmp_path / ("x" * 256)))
    with pytest.raises(MsprobeError, match="limit is 4096"):
        prepare_dump_path(str(tmp_path) + ("/" + "y" * 200) * 21)
    with pytest.raises(MsprobeError):
        prepare_dump_path("")
    # ':' is allowed (reference FILE_VALID_PATTERN)
    assert os.path.isdir(prepare_dump_path(str(tmp_path / "run:1")))


def test_prepare_dump_path_symlink(tmp_path):
    real = tmp_path / "real"
    real.mkdir()
    link = tmp_path / "link"
    link.symlink_to(real)
    with pytest.raises(MsprobeError, match="symbolic link"):
        prepare_dump_path(str(link))
    dangling = tmp_path / "dangling"
    dangling.symlink_to(tmp_path / "missing")
    with pytest.raises(MsprobeError, match="symbolic link"):
        prepare_dump_path(str(dangling))
    assert not (tmp_path / "missing").exists()
    # a link in the middle of the path is fine
    assert prepare_dump_path(str(link / "sub")) == str(link / "sub")
    assert (real / "sub").is_dir()


# ------------------------------------------------------------------------------------- framework-free

def test_module_imports_without_torch(tmp_path):
    fake = tmp_path / "fake"
    for name in ("torch", "mindspore"):
        (fake / name).mkdir(parents=True)
        (fake / name / "__init__.py").write_text(f'raise ImportError("{name} must not be imported")\n')
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(fake), str(ROOT)]))
    code = ("import sys; from msprobe.core.dump.config import load_dump_config; c = load_dump_config(); "
            "assert 'torch' not in sys.modules and 'mindspore' not in sys.modules; print(c.task)")
    res = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "statistics"


# ------------------------------------------------------------------ issue 16 items 13 and 14 (b, c)


def test_truncated_config_names_the_file_and_position_not_a_dump(tmp_path):
    """A config.json is written by the user: an invalid one is to be corrected (at the JSON error position),
    not 're-run the dump'."""
    path = write_cfg(tmp_path, '{"task": "statistics",\n "dump_path": "./d",\n')
    with pytest.raises(MsprobeError) as exc:
        load_dump_config(path)
    msg = str(exc.value)
    assert path in msg and "line 3 column 1" in msg and "correct the file" in msg
    assert "re-run the dump" not in msg and "\n" not in msg
    empty = write_cfg(tmp_path, "", name="empty.json")
    with pytest.raises(MsprobeError) as exc:
        load_dump_config(empty)
    assert "is empty" in str(exc.value) and "re-run the dump" not in str(exc.value)


@pytest.mark.parametrize("body,words", [
    ({"task": "statistics", "dump_pth": "./d"}, ['unknown key "dump_pth"', 'did you mean "dump_path"']),
    ({"task": "statistics", "dump_path": "./d", "Level": "L1"}, ['did you mean "level"']),
    ({"task": "statistics", "dump_path": "./d", "statistic": {}}, ['did you mean "statistics"']),
    ({"task": "statistics", "dump_path": "./d", "statistics": {"summary_mod": "md5"}},
     ['unknown key "summary_mod" in the "statistics" section', 'did you mean "summary_mode"']),
    ({"task": "tensor", "dump_path": "./d", "tensor": {"scop": []}}, ['did you mean "scope"']),
    ({"task": "statistics", "dump_path": "./d", "scope": []}, ['"scope" belongs in the "statistics" section']),
])
def test_config_key_typos_get_did_you_mean(tmp_path, body, words):
    with pytest.raises(MsprobeError) as exc:
        load_dump_config(write_cfg(tmp_path, body))
    for w in words:
        assert w in str(exc.value), (w, str(exc.value))


class _Capture:
    def __init__(self):
        import logging

        self.records = []
        self.handler = logging.Handler()
        self.handler.emit = self.records.append
        self.logger = logging.getLogger("msprobe")

    def __enter__(self):
        self.logger.addHandler(self.handler)
        return self

    def __exit__(self, *exc):
        self.logger.removeHandler(self.handler)

    def warnings(self):
        return [r.getMessage() for r in self.records if r.levelname == "WARNING" and "already created" in r.getMessage()]


def test_second_debugger_with_other_settings_warns_once(tmp_path):
    """A second PrecisionDebugger(...) returns the first one; what it asked for differently is named in one
    warning (with what stays in force), once; the same arguments again warn nothing."""
    pytest.importorskip("torch")
    from msprobe.pytorch import PrecisionDebugger

    PrecisionDebugger._reset_for_tests()
    try:
        path = cfg(tmp_path, dump_path=str(tmp_path / "d1"))
        first = PrecisionDebugger(config_path=path)
        with _Capture() as cap:
            assert PrecisionDebugger(config_path=path) is first  # same settings: silent
            assert cap.warnings() == []
            second = PrecisionDebugger(config_path=path, task="tensor", level="mix", dump_path=str(tmp_path / "d2"))
            assert second is first
            again = PrecisionDebugger(config_path=path, task="tensor", level="mix", dump_path=str(tmp_path / "d2"))
            assert again is first
        (msg,) = cap.warnings()
        for w in ("task='tensor'", "level='mix'", "dump_path=", "d2", "ignores",
                  "In force: task='statistics', level='L1'", str(tmp_path / "d1")):
            assert w in msg, (w, msg)
        assert first.config.task == "statistics" and not (tmp_path / "d2").exists()
    finally:
        PrecisionDebugger._reset_for_tests()


def test_debugger_base_warning_is_framework_free(tmp_path):
    """The check lives in DebuggerBase, so MindSpore's PrecisionDebugger (same base) warns the same way."""
    from msprobe.core.dump.debugger_base import DebuggerBase

    class Fake(DebuggerBase):
        _instance = None

        def __init__(self, config_path=None, task=None, dump_path=None, level=None, step=None):
            self._init_once(lambda: self._setup(config_path, task, dump_path, level, step),
                            dict(config_path=config_path, task=task, dump_path=dump_path, level=level, step=step))

        def _setup(self, config_path, task, dump_path, level, step):
            self.config = load_dump_config(config_path, task=task, dump_path=dump_path, level=level, step=step,
                                           framework="mindspore")

    path = cfg(tmp_path, dump_path=str(tmp_path / "d1"))
    first = Fake(config_path=path, step=[0, 1])
    with _Capture() as cap:
        assert Fake(config_path=path, step=["0-1"]) is first  # the same steps, written differently
        assert Fake(config_path=write_cfg(tmp_path, {"task": "tensor", "dump_path": "x"}, "other.json")) is first
        assert Fake(config_path=path, step=[5]) is first
    msgs = cap.warnings()
    assert len(msgs) == 2, msgs
    assert "other.json" in msgs[0] and "step=[5]" in msgs[1] and "step=[0, 1]" in msgs[1]
