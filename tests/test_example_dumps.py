"""examples/make_example_dumps.py writes a well-formed target/golden dump pair (reference statistics format)."""
import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "examples" / "make_example_dumps.py"
SIDES = ("target", "golden")
STAT_KEYS = ("Max", "Min", "Mean", "Norm")
LEAF_KEYS = ["type", "dtype", "shape", "Max", "Min", "Mean", "Norm", "requires_grad"]


def _run(outdir, *extra):
    proc = subprocess.run([sys.executable, str(SCRIPT), str(outdir), *extra],
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.split()


@pytest.fixture(scope="module", params=["g26", "g8"])
def dumps(request, tmp_path_factory):
    out = tmp_path_factory.mktemp("example_" + request.param)
    printed = _run(out, "--style", request.param)
    loaded = {}
    for side in SIDES:
        rank_dir = out / side / "step0" / "rank0"
        loaded[side] = {name: json.loads((rank_dir / (name + ".json")).read_text())
                        for name in ("dump", "stack", "construct")}
    return request.param, out, printed, loaded


def _leaves(value):
    """Every tensor record / scalar / None inside an entry section, depth first."""
    if value is None:
        yield None
    elif isinstance(value, bool):  # the G8 "is_recompute" flag of a forward body
        return
    elif isinstance(value, list):
        for item in value:
            yield from _leaves(item)
    elif isinstance(value, dict) and "type" in value:
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _leaves(item)
    else:
        raise AssertionError("unexpected value %r" % (value,))


def _tensors(entry):
    return [leaf for leaf in _leaves(entry) if leaf is not None and leaf["type"] == "torch.Tensor"]


def test_prints_the_two_dump_paths(dumps):
    _, out, printed, _ = dumps
    assert printed == [str(out / side / "step0" / "rank0" / "dump.json") for side in SIDES]


def test_top_level_layout(dumps):
    _, _, _, loaded = dumps
    for side in SIDES:
        dump = loaded[side]["dump"]
        assert list(dump) == ["task", "level", "framework", "dump_data_dir", "data"]
        assert dump["task"] == "statistics" and dump["level"] == "mix"
        assert dump["framework"] == "pytorch" and dump["dump_data_dir"] is None
    # both sides record the same calls in the same order
    assert list(loaded["target"]["dump"]["data"]) == list(loaded["golden"]["dump"]["data"])


def test_expected_entries_and_bodies(dumps):
    style, _, _, loaded = dumps
    data = loaded["golden"]["dump"]["data"]
    pg = "" if style == "g8" else ".0"
    for name in ("Functional.linear.0.forward", "Module.fc1.Linear.forward.0", "Functional.relu.0.forward",
                 "Module.act.ReLU.forward.0", "Tensor.__add__.0.forward", "Functional.linear.1.forward",
                 "Module.fc2.Linear.forward.0", "Functional.cross_entropy.0.forward",
                 "Functional.cross_entropy.0.backward", "Functional.linear.1.backward",
                 "Module.fc2.Linear.backward.0", "Tensor.__add__.0.backward", "Functional.relu.0.backward",
                 "Module.act.ReLU.backward.0", "Module.fc1.Linear.backward.0", "Functional.linear.0.backward",
                 "Module.fc1.Linear.parameters_grad" + pg, "Module.fc2.Linear.parameters_grad" + pg):
        assert name in data, name

    recompute = ["is_recompute"] if style == "g8" else []
    for name, body in data.items():
        if name.startswith("Module.") and ".forward." in name:
            expected = ["input_args", "input_kwargs", "output", "parameters"] + recompute
        elif name.endswith(".forward"):
            expected = ["input_args", "input_kwargs"] + recompute + ["output"]
        elif ".backward" in name:
            expected = ["input", "output"]
        else:
            assert ".parameters_grad" in name
            expected = ["weight", "bias"]
            assert all(isinstance(v, list) and len(v) == 1 for v in body.values())
        assert list(body) == expected, name

    fc1 = data["Module.fc1.Linear.forward.0"]
    assert list(fc1["parameters"]) == ["weight", "bias"]
    assert fc1["parameters"]["weight"]["shape"] == [32, 16]
    assert data["Module.act.ReLU.forward.0"]["parameters"] == {}
    # scalars and kwargs
    assert data["Tensor.__add__.0.forward"]["input_args"][1] == {"type": "int", "value": 1}
    assert data["Functional.relu.0.forward"]["input_kwargs"] == {"inplace": {"type": "bool", "value": False}}
    ce_kwargs = data["Functional.cross_entropy.0.forward"]["input_kwargs"]
    assert ce_kwargs["reduction"] == {"type": "str", "value": "mean"}
    assert ce_kwargs["label_smoothing"] == {"type": "float", "value": 0.0}
    # None output: the input of fc1 needs no grad
    assert data["Functional.linear.0.backward"]["output"][1] is None
    assert data["Module.fc1.Linear.backward.0"]["output"] == []
    # the loss is a 0-dim tensor whose four statistics equal its value
    loss = data["Functional.cross_entropy.0.forward"]["output"][0]
    assert loss["shape"] == [] and len({loss[k] for k in STAT_KEYS}) == 1


def test_tensor_records_and_statistics_are_consistent(dumps):
    style, _, _, loaded = dumps
    for side in SIDES:
        for name, entry in loaded[side]["dump"]["data"].items():
            for leaf in _tensors(entry):
                assert list(leaf) == LEAF_KEYS, name
                assert leaf["dtype"] in ("torch.float32", "torch.bfloat16", "torch.int64"), name
                assert all(isinstance(d, int) for d in leaf["shape"])
                assert isinstance(leaf["requires_grad"], bool)
                mx, mn, mean, norm = (leaf[k] for k in STAT_KEYS)
                if leaf["dtype"] == "torch.int64" and style == "g26":
                    assert isinstance(mx, int) and isinstance(mn, int) and mean is None and norm is None
                    assert mn <= mx
                    continue
                assert all(isinstance(v, float) and math.isfinite(v) for v in (mx, mn, mean, norm)), name
                assert mn <= mean <= mx, name
                if leaf["shape"]:
                    numel = int(np.prod(leaf["shape"]))
                    assert norm >= 0, name
                    # |mean| * sqrt(n) <= ||x||_2 <= max(|max|, |min|) * sqrt(n)  (a little slack for rounding)
                    assert norm <= max(abs(mx), abs(mn)) * math.sqrt(numel) * 1.01 + 1e-12, name
                    assert abs(mean) * math.sqrt(numel) <= norm * 1.01 + 1e-12, name
                if side == "target" and leaf["dtype"] == "torch.bfloat16":
                    for v in (mx, mn, mean, norm):  # bf16 values: the low 16 bits of the fp32 pattern are 0
                        assert np.array([v], np.float32).view(np.uint32)[0] & 0xFFFF == 0, (name, v)


def test_target_precision_and_injected_error(dumps):
    _, _, _, loaded = dumps
    tgt, gld = loaded["target"]["dump"]["data"], loaded["golden"]["dump"]["data"]

    def out_max(data, name, i=0):
        return data[name]["output"][i]["Max"]

    # golden is fp32 everywhere; target activations are bf16
    assert all(leaf["dtype"] != "torch.bfloat16" for e in gld.values() for leaf in _tensors(e))
    assert tgt["Functional.linear.0.forward"]["output"][0]["dtype"] == "torch.bfloat16"
    assert tgt["Functional.linear.0.forward"]["input_args"][1]["dtype"] == "torch.float32"  # fp32 master weight
    # identical inputs, small bf16 error in fc1, a large error from the broken relu onwards
    assert tgt["Functional.linear.0.forward"]["input_args"] == gld["Functional.linear.0.forward"]["input_args"]
    rel = abs(out_max(tgt, "Functional.linear.0.forward") / out_max(gld, "Functional.linear.0.forward") - 1)
    assert 0 < rel < 0.01
    rel = abs(out_max(tgt, "Functional.relu.0.forward") / out_max(gld, "Functional.relu.0.forward") - 1)
    assert rel > 0.5


def test_construct_json(dumps):
    style, _, _, loaded = dumps
    for side in SIDES:
        data, construct = loaded[side]["dump"]["data"], loaded[side]["construct"]
        assert list(construct) == [n for n in data if ".parameters_grad" not in n]
        assert construct["Functional.linear.0.forward"] == "Module.fc1.Linear.forward.0"
        assert construct["Functional.relu.0.backward"] == "Module.act.ReLU.backward.0"
        assert construct["Module.fc1.Linear.forward.0"] is None  # the root module is not dumped
        assert construct["Tensor.__add__.0.forward"] is None
        assert all(v is None or v in construct for v in construct.values())


def test_stack_json_new_format(dumps):
    _, _, _, loaded = dumps
    for side in SIDES:
        data, stack = loaded[side]["dump"]["data"], loaded[side]["stack"]
        assert list(stack) == [str(i) for i in range(len(stack))]
        names = []
        for value in stack.values():
            assert isinstance(value, list) and len(value) == 2
            api_names, frames = value
            assert api_names and frames
            assert all(f.startswith("File ") and ", line " in f and ", in " in f for f in frames)
            names.extend(api_names)
        # every forward entry has exactly one stack; backward and parameter-grad entries have none
        assert sorted(names) == sorted(n for n in data if ".forward" in n)


def test_deterministic(tmp_path):
    _run(tmp_path / "a")
    _run(tmp_path / "b")
    for side in SIDES:
        for name in ("dump.json", "stack.json", "construct.json"):
            rel = Path(side) / "step0" / "rank0" / name
            assert (tmp_path / "a" / rel).read_bytes() == (tmp_path / "b" / rel).read_bytes()
