"""Layer mapping (-lm): msprobe.core.compare.layer_mapping.

The dumps under tests/data/layer_mapping/ are hand-made: a MindSpore-style NPU model (``Cell.``
names, global ``layers.4/5`` numbering of a pipeline shard, ``input_norm``/``attention``/
``linear_qkv``/``head``/``embedding.word_embeddings``) against a PyTorch-style bench model (``Module.``
names, ``layers.0/1``, ``input_layernorm``/``self_attention``/``query_key_value``/``output_layer``/
``embed``). The expected dicts below were produced by the reference msprobe 8.3.3
(``generate_api_mapping_by_layer_mapping`` on these very files, ``N/A`` entries dropped) and are
written here as literal values.
"""

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from msprobe.core.compare.layer_mapping import compute_layer_mapping, load_layer_mapping_yaml
from msprobe.core.errors import MsprobeError

DATA = Path(__file__).resolve().parent / "data" / "layer_mapping"
ROOT = Path(__file__).resolve().parents[1]

# reference 8.3.3 result with mapping.yaml
EXPECTED_WITH_YAML = {
    "Functional.add.0.forward": "Torch.add.0.forward",
    "Cell.model.embedding.word_embeddings.VocabEmbedding.forward.0": "Module.model.embed.VocabEmbedding.forward.0",
    "Functional.gather.0.forward": "Torch.gather.0.forward",
    "Cell.model.transformer.layers.4.input_norm.RMSNorm.forward.0":
        "Module.model.transformer.layers.0.input_layernorm.RMSNorm.forward.0",
    "Mint.mul.0.forward": "Tensor.mul.0.forward",
    "Cell.model.transformer.layers.4.attention.linear_qkv.ColumnParallelLinear.forward.0":
        "Module.model.transformer.layers.0.self_attention.query_key_value.ColumnParallelLinear.forward.0",
    "MintFunctional.linear.0.forward": "Functional.linear.0.forward",
    "Cell.model.transformer.layers.4.attention.SelfAttention.forward.0":
        "Module.model.transformer.layers.0.self_attention.SelfAttention.forward.0",
    "Cell.model.transformer.layers.4.ParallelTransformerLayer.forward.0":
        "Module.model.transformer.layers.0.ParallelTransformerLayer.forward.0",
    "Cell.model.transformer.layers.5.input_norm.RMSNorm.forward.0":
        "Module.model.transformer.layers.1.input_layernorm.RMSNorm.forward.0",
    "Mint.mul.1.forward": "Tensor.mul.1.forward",
    "Cell.model.transformer.layers.5.attention.linear_qkv.ColumnParallelLinear.forward.0":
        "Module.model.transformer.layers.1.self_attention.query_key_value.ColumnParallelLinear.forward.0",
    "MintFunctional.linear.1.forward": "Functional.linear.1.forward",
    "Cell.model.transformer.layers.5.attention.SelfAttention.forward.0":
        "Module.model.transformer.layers.1.self_attention.SelfAttention.forward.0",
    "Cell.model.transformer.layers.5.ParallelTransformerLayer.forward.0":
        "Module.model.transformer.layers.1.ParallelTransformerLayer.forward.0",
    "Cell.model.transformer.ParallelTransformer.forward.0": "Module.model.transformer.ParallelTransformer.forward.0",
    "Cell.model.head.Dense.forward.0": "Module.model.output_layer.Linear.forward.0",
    "Cell.model.GPTModel.forward.0": "Module.model.GPTModel.forward.0",
    "Cell.model.head.Dense.backward.0": "Module.model.output_layer.Linear.backward.0",
    "Cell.model.head.Dense.parameters_grad": "Module.model.output_layer.Linear.parameters_grad",
    "MintFunctional.linear.1.backward": "Functional.linear.1.backward",
    "Cell.model.transformer.layers.5.attention.linear_qkv.ColumnParallelLinear.backward.0":
        "Module.model.transformer.layers.1.self_attention.query_key_value.ColumnParallelLinear.backward.0",
    "Cell.model.GPTModel.backward.0": "Module.model.GPTModel.backward.0",
}

# reference 8.3.3 result without a yaml (names only; layers.4/5 still renumbered to 0/1)
EXPECTED_NAME_ONLY = {
    "Functional.add.0.forward": "Torch.add.0.forward",
    "Cell.model.transformer.layers.4.ParallelTransformerLayer.forward.0":
        "Module.model.transformer.layers.0.ParallelTransformerLayer.forward.0",
    "Cell.model.transformer.layers.5.ParallelTransformerLayer.forward.0":
        "Module.model.transformer.layers.1.ParallelTransformerLayer.forward.0",
    "Cell.model.transformer.ParallelTransformer.forward.0": "Module.model.transformer.ParallelTransformer.forward.0",
    "Cell.model.GPTModel.forward.0": "Module.model.GPTModel.forward.0",
    "Cell.model.GPTModel.backward.0": "Module.model.GPTModel.backward.0",
}


def _side(name):
    d = DATA / name
    dump = json.loads((d / "dump.json").read_text())
    construct = json.loads((d / "construct.json").read_text())
    stack = json.loads((d / "stack.json").read_text())
    return dump, construct, stack


def _run(rules, npu=None, bench=None, **kw):
    npu = npu or _side("npu")
    bench = bench or _side("bench")
    return compute_layer_mapping(npu[0]["data"], bench[0]["data"], npu[1], bench[1], npu[2], bench[2], rules, **kw)


def _new_format(stack):
    """old {name: frames} -> the G8+ {"0": [[names], frames], ...} (identical stacks shared)."""
    groups = {}
    for name, frames in stack.items():
        groups.setdefault(tuple(frames), []).append(name)
    return {str(i): [names, list(frames)] for i, (frames, names) in enumerate(groups.items())}


# ---------------------------------------------------------------------------------------- mapping


def test_yaml_mapping_equals_reference():
    rules = load_layer_mapping_yaml(str(DATA / "mapping.yaml"))
    assert rules == {
        "ParallelTransformerLayer": {"input_norm": "input_layernorm", "attention": "self_attention"},
        "SelfAttention": {"linear_qkv": "query_key_value"},
        "GPTModel": {"head": "output_layer(the final projection)", "embedding.word_embeddings": "embed"},
    }
    assert _run(rules) == EXPECTED_WITH_YAML
    # the NPU-only wrapper layer 'embedding' has no bench counterpart: left out, not "N/A"
    assert "Cell.model.embedding.Embedding.forward.0" not in _run(rules)


def test_name_only_mapping_equals_reference():
    assert _run({}) == EXPECTED_NAME_ONLY
    assert _run(None) == EXPECTED_NAME_ONLY
    assert _run(True) == EXPECTED_NAME_ONLY          # a bare -lm flag


def test_new_stack_format_gives_the_same_result():
    npu, bench = _side("npu"), _side("bench")
    npu = (npu[0], npu[1], _new_format(npu[2]))
    bench = (bench[0], bench[1], _new_format(bench[2]))
    assert "0" in npu[2] and "0" in bench[2]
    assert _run(load_layer_mapping_yaml(str(DATA / "mapping.yaml")), npu, bench) == EXPECTED_WITH_YAML


def test_framework_function_from_stack_is_part_of_the_scope():
    # Both sides call mul from a framework function 'rms_norm' (NPU: after the wrapper's Template frame,
    # before the 'construct' frame; bench: leading torch frame). Without the torch frame the bench
    # scope loses 'rms_norm' and the two muls have no partner (reference: N/A).
    rules = load_layer_mapping_yaml(str(DATA / "mapping.yaml"))
    bench = _side("bench")
    stripped = {k: [f for f in v if "site-packages/torch" not in f] for k, v in bench[2].items()}
    got = _run(rules, bench=(bench[0], bench[1], stripped))
    expected = {k: v for k, v in EXPECTED_WITH_YAML.items() if not k.startswith("Mint.mul.")}
    assert got == expected


@pytest.mark.parametrize("home", ["/home/user/msprobe", "/srv/msprobe/jobs/.venv-msprobe", "C:\\Users\\u\\msprobe"])
def test_frames_under_a_folder_named_msprobe_are_kept(home):
    # A clone or venv in a folder named 'msprobe' (what `git clone .../msprobe.git` gives) must not make the
    # torch frames look like msprobe's own: the old path-text check dropped 'rms_norm' and lost the two mul pairs.
    rules = load_layer_mapping_yaml(str(DATA / "mapping.yaml"))
    sep = "\\" if "\\" in home else "/"

    def move(frame):
        frame = frame.replace("/usr/local/lib/python3.11/site-packages", sep.join([home, ".venv", "lib", "site-packages"]))
        return frame.replace("/home/user", home)

    bench = _side("bench")
    bench = (bench[0], bench[1], {k: [move(f) for f in v] for k, v in bench[2].items()})
    assert any(home in f and "torch" in f for v in bench[2].values() for f in v)
    assert _run(rules, bench=bench) == EXPECTED_WITH_YAML


def test_msprobe_and_mindspeed_modules_never_name_the_function():
    from msprobe.core.compare import layer_mapping as lm
    assert lm._is_own_frame("File /x/site-packages/msprobe/core/data_dump/api_registry.py")
    assert lm._is_own_frame("File /x/dist-packages/mindspeed/ops/fa.py")
    assert lm._is_own_frame("File " + lm._PKG_DIR + "core/compare/engine.py")        # this machine's msprobe
    assert not lm._is_own_frame("File /home/u/msprobe/train.py")                     # a user file in a folder msprobe
    assert not lm._is_own_frame("File /home/u/msprobe/.venv/lib/site-packages/torch/nn/functional.py")
    assert lm._frame_top_module("File /v/site-packages/torch/package/importer.py") == "torch"


def test_framework_detected_from_types_or_given():
    rules = load_layer_mapping_yaml(str(DATA / "mapping.yaml"))
    assert _run(rules, npu_framework="mindspore", bench_framework="pytorch") == EXPECTED_WITH_YAML
    # read as PyTorch, the NPU stack of mul ends at no 'forward' frame, so the user frame after rms_norm
    # ends the framework run anyway: same result
    assert _run(rules, npu_framework="pytorch") == EXPECTED_WITH_YAML


def test_missing_stack_or_construct_gives_no_pairs():
    npu, bench = _side("npu"), _side("bench")
    assert _run({}, npu=(npu[0], npu[1], {})) == {}
    assert _run({}, npu=(npu[0], {}, npu[2])) == {}
    assert _run({}, bench=(bench[0], bench[1], None)) == {}


def _mods(prefix, entries):
    """entries: [(name, parent)] -> (dump, construct, stack with one dummy user frame per API).

    Like the reference, a side whose stack.json is empty yields no pairs, so each case has an API."""
    data = {name: {} for name, _ in entries}
    construct = dict(entries)
    stack = {name: ["File /home/u/m.py, line 1, in forward, \n y = f(x)"] for name, _ in entries
             if not name.startswith(prefix)}
    return {"data": data}, construct, stack


def test_top_layer_rule_and_cell_alias(tmp_path):
    npu = _mods("Cell", [("Cell.net.Dense.forward.0", None), ("Functional.relu.0.forward", "Cell.net.Dense.forward.0")])
    bench = _mods("Module", [("Module.model.Linear.forward.0", None),
                             ("Functional.relu.0.forward", "Module.model.Linear.forward.0")])
    f = tmp_path / "lm.yaml"
    f.write_text("Cell:\n  net: model\n")
    rules = load_layer_mapping_yaml(str(f))
    assert rules == {"TopLayer": {"net": "model"}}
    want = {"Cell.net.Dense.forward.0": "Module.model.Linear.forward.0",
            "Functional.relu.0.forward": "Functional.relu.0.forward"}
    assert _run(rules, npu, bench) == want
    assert _run({"Cell": {"net": "model"}}, npu, bench) == want        # raw dict with the legacy key
    assert _run({}, npu, bench) == {}


def test_longest_rule_wins_and_dotted_target():
    # at the Block layer, 'a.b' (two parts) is tried before 'a'; the target may itself be dotted
    npu = _mods("Cell", [("Cell.blk.Block.forward.0", None),
                         ("Cell.blk.a.A.forward.0", "Cell.blk.Block.forward.0"),
                         ("Cell.blk.a.b.Lin.forward.0", "Cell.blk.a.A.forward.0"),
                         ("Cell.blk.a.c.Lin.forward.0", "Cell.blk.a.A.forward.0"),
                         ("Functional.relu.0.forward", "Cell.blk.a.b.Lin.forward.0")])
    bench = _mods("Module", [("Module.blk.Block.forward.0", None),
                             ("Module.blk.x.X.forward.0", "Module.blk.Block.forward.0"),
                             ("Module.blk.y.z.Lin.forward.0", "Module.blk.Block.forward.0"),
                             ("Module.blk.x.c.Lin.forward.0", "Module.blk.x.X.forward.0"),
                             ("Functional.relu.0.forward", "Module.blk.y.z.Lin.forward.0")])
    rules = {"Block": {"a": "x", "a.b": "y.z"}}
    assert _run(rules, npu, bench) == {
        "Cell.blk.Block.forward.0": "Module.blk.Block.forward.0",
        "Cell.blk.a.A.forward.0": "Module.blk.x.X.forward.0",
        "Cell.blk.a.b.Lin.forward.0": "Module.blk.y.z.Lin.forward.0",
        "Cell.blk.a.c.Lin.forward.0": "Module.blk.x.c.Lin.forward.0",
        "Functional.relu.0.forward": "Functional.relu.0.forward",
    }


def test_index_among_same_state_entries():
    # three relu calls in the NPU layer, two in the bench layer: paired by position, the third has none;
    # a second call of the layer itself pairs with the bench's second call
    npu = _mods("Cell", [("Cell.l.L.forward.0", None), ("Functional.relu.0.forward", "Cell.l.L.forward.0"),
                         ("Functional.relu.1.forward", "Cell.l.L.forward.0"),
                         ("Functional.relu.2.forward", "Cell.l.L.forward.1"), ("Cell.l.L.forward.1", None),
                         ("Functional.relu.1.backward", "Cell.l.L.backward.0"), ("Cell.l.L.backward.0", None)])
    bench = _mods("Module", [("Module.l.L.forward.0", None), ("Torch.relu.3.forward", "Module.l.L.forward.0"),
                             ("Torch.relu.7.forward", "Module.l.L.forward.0"), ("Module.l.L.forward.1", None),
                             ("Torch.relu.7.backward", "Module.l.L.backward.0"), ("Module.l.L.backward.0", None)])
    assert _run({}, npu, bench) == {
        "Cell.l.L.forward.0": "Module.l.L.forward.0",
        "Cell.l.L.forward.1": "Module.l.L.forward.1",
        "Cell.l.L.backward.0": "Module.l.L.backward.0",
        "Functional.relu.0.forward": "Torch.relu.3.forward",
        "Functional.relu.1.forward": "Torch.relu.7.forward",
        "Functional.relu.1.backward": "Torch.relu.7.backward",
    }


def test_bad_dump_name_is_a_clear_error():
    npu = ({"data": {"Functional.relu": {}}}, {"Functional.relu": None}, {"Functional.relu": ["x"]})
    with pytest.raises(MsprobeError, match=r"NPU dump.json: entry name 'Functional.relu' has fewer than 4"):
        _run({}, npu=npu)


def test_invalid_rules_dict_is_rejected():
    with pytest.raises(MsprobeError, match=r"the entry of layer 'Block' must be a mapping"):
        _run({"Block": ["a", "b"]})


# ---------------------------------------------------------------------------------------- yaml errors


@pytest.mark.parametrize("text, message", [
    ("- ParallelTransformerLayer\n- SelfAttention\n", r"the top level must be a mapping .* not a list"),
    ("SelfAttention: linear_qkv\n", r"the entry of layer 'SelfAttention' must be a mapping .* not a string"),
    ("SelfAttention:\n", r"the entry of layer 'SelfAttention' must be a mapping .* not an empty value"),
    ("SelfAttention:\n  - linear_qkv\n", r"the entry of layer 'SelfAttention' must be a mapping .* not a list"),
    ("SelfAttention:\n  linear_qkv: 3\n", r"layer 'SelfAttention', key 'linear_qkv' maps to a number 3, not a name"),
    ("SelfAttention:\n  linear_qkv:\n", r"key 'linear_qkv' maps to an empty value"),
    ("SelfAttention:\n  '': query_key_value\n", r"has the key '', which is not a non-empty name"),
    ("SelfAttention:\n  a..b: c\n", r"key 'a..b' with an empty dotted part"),
    ("SelfAttention:\n  linear_qkv: [query\n", r"invalid YAML at line \d+, column \d+"),
    ("SelfAttention:\n\tlinear_qkv: query_key_value\n", r"invalid YAML"),
])
def test_invalid_yaml_files(tmp_path, text, message):
    f = tmp_path / "bad.yaml"
    f.write_text(text)
    with pytest.raises(MsprobeError, match=message) as err:
        load_layer_mapping_yaml(str(f))
    msg = str(err.value)
    assert msg.startswith(f"layer mapping file '{f}': ")
    assert "\n" not in msg


def test_missing_file_and_directory(tmp_path):
    missing = tmp_path / "nope.yaml"
    with pytest.raises(MsprobeError, match=r"layer mapping file '.*nope.yaml': no such file; pass the path"):
        load_layer_mapping_yaml(str(missing))
    with pytest.raises(MsprobeError, match=r"is a directory, not a file"):
        load_layer_mapping_yaml(str(tmp_path))


def test_empty_yaml_means_no_rules(tmp_path):
    f = tmp_path / "empty.yaml"
    f.write_text("# nothing to rename\n")
    assert load_layer_mapping_yaml(str(f)) == {}


# ---------------------------------------------------------------------------------------- scale, imports


def test_large_and_deep_inputs_are_fast():
    def side(prefix, first_layer):
        data, construct, stack = {}, {}, {}
        top = f"{prefix}.model.transformer.ParallelTransformer.forward.0"
        data[top], construct[top] = {}, None
        n = 0
        for i in range(400):
            layer = f"{prefix}.model.transformer.layers.{first_layer + i}.ParallelTransformerLayer.forward.0"
            data[layer], construct[layer] = {}, top
            for j in range(60):
                api = f"Functional.op{j % 7}.{n}.forward"
                n += 1
                data[api], construct[api] = {}, layer
                stack[api] = ["File /home/u/m.py, line 1, in forward, \n y = f(x)"]
                back = api[:-7] + "backward"
                data[back], construct[back] = {}, layer.replace("forward", "backward")
        return {"data": data}, construct, stack

    npu, bench = side("Cell", 16), side("Module", 0)
    assert len(npu[0]["data"]) > 48000
    start = time.perf_counter()
    got = _run({"ParallelTransformerLayer": {"x": "y"}}, npu, bench)
    assert time.perf_counter() - start < 20
    assert len(got) == len(npu[0]["data"])
    assert got["Cell.model.transformer.layers.16.ParallelTransformerLayer.forward.0"] == \
        "Module.model.transformer.layers.0.ParallelTransformerLayer.forward.0"

    # a 1500-level chain: no recursion
    def chain(prefix):
        entries, path, parent = [], "a", None
        for _ in range(1500):
            name = f"{prefix}.{path}.Block.forward.0"
            entries.append((name, parent))
            parent, path = name, path + ".a"
        entries.append(("Functional.relu.0.forward", parent))
        return _mods(prefix, entries)

    got = _run({}, chain("Cell"), chain("Module"))
    assert len(got) == 1501 and got["Functional.relu.0.forward"] == "Functional.relu.0.forward"


def test_module_imports_no_framework():
    code = ("import sys; import msprobe.core.compare.layer_mapping; "
            "bad = [m for m in ('torch', 'mindspore') if m in sys.modules]; assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=str(ROOT))
