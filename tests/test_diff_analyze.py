"""-da first-divergence analysis: reference outputs, cross-rank walk, growth ranking, noise list, bad input."""

import json
from pathlib import Path

import pytest

from conftest import fixtures_or_skip
from msprobe.cli.main import main

DATA = Path(__file__).parent / "data" / "diff_analyze"
MULTI = "multirank_mlp_bf16_stat_mix"


# ---------------------------------------------------------------- hand-made dumps (also used by test_advisor)
def tensor(scale=1.0, err=0.0, dtype="torch.float32", shape=(4, 4), nan=False):
    """A tensor record whose golden statistics are (scale, -scale, scale/10, 4*scale), times (1 + err)."""
    f = 1.0 + err
    mx = float("nan") if nan else scale * f
    return {"type": "torch.Tensor", "dtype": dtype, "shape": list(shape), "Max": mx, "Min": -scale * f,
            "Mean": scale / 10 * f, "Norm": 4 * scale * f, "requires_grad": False}


def entry(inputs, outputs, params=None):
    e = {"input_args": inputs, "input_kwargs": {}, "output": outputs}
    if params is not None:
        e["parameters"] = params
    return e


def write_dump(rank_dir: Path, data: dict, task="statistics", level="L1") -> Path:
    rank_dir.mkdir(parents=True, exist_ok=True)
    text = json.dumps({"task": task, "level": level, "framework": "pytorch", "dump_data_dir": None, "data": data},
                      indent=1)
    (rank_dir / "dump.json").write_text(text.replace("NaN", "NaN"))
    return rank_dir / "dump.json"


def chain(errors, names=None, dtype="torch.float32", extra_first=None):
    """A chain of ops: op k reads op k-1's output; errors[k] = relative error of op k's output (target side)."""
    names = names or [f"Functional.op{k}.0.forward" for k in range(len(errors))]
    data = dict(extra_first or {})
    prev = 0.0
    for name, e in zip(names, errors):
        data[name] = entry([tensor(1.0, prev, dtype)], [tensor(1.0, e, dtype)])
        prev = e
    return data


def run(argv, capsys):
    code = main([str(a) for a in argv])
    cap = capsys.readouterr()
    return code, cap.out, cap.err


def da_files(out: Path):
    analyze = sorted(out.glob("diff_analyze_*.json"))
    per_rank = sorted(out.glob("compare_result_rank*.json"))
    return analyze, per_rank


def pair(tmp_path, target_data, golden_data, task="statistics", ranks=None):
    """Write target/golden step dirs (ranks: list of rank numbers) or rank dirs; returns (t, g)."""
    t, g = tmp_path / "t", tmp_path / "g"
    if ranks is None:
        write_dump(t / "rank", target_data, task)
        write_dump(g / "rank", golden_data, task)
        return t / "rank", g / "rank"
    for r in ranks:
        write_dump(t / f"rank{r}", target_data[r], task)
        write_dump(g / f"rank{r}", golden_data[r], task)
    return t, g


# ---------------------------------------------------------------- (1) fixture: same first node as the reference
def test_fixture_first_divergence_matches_reference(tmp_path, capsys):
    fx = fixtures_or_skip() / MULTI
    out = tmp_path / "out"
    code, stdout, err = run(["compare", "-tp", fx / "target/step0", "-gp", fx / "golden/step0", "-o", out, "-q", "-da"],
                            capsys)
    assert code == 0, err
    (analyze,), per_rank = da_files(out)
    ours = json.loads(analyze.read_text())
    ref = json.loads((DATA / f"{MULTI}.v833.diff_analyze.json").read_text())
    suspects = ours.pop("msprobe_suspects")
    assert ours == ref  # same nodes, data_info and stack_info as mindstudio-probe 8.3.3
    assert [n["op_name"] for n in ours["rank_0"]] == ["Module.fc3.Linear.parameters_grad"]
    assert [n["op_name"] for n in ours["rank_1"]] == ["Module.fc1.Linear.parameters_grad"]
    # per-rank files: the reference's names and is_same for every API
    assert [p.name.split("_")[2] for p in per_rank] == ["rank0", "rank1"]
    ref_same = json.loads((DATA / f"{MULTI}.v833.is_same.json").read_text())
    for p in per_rank:
        doc = json.loads(p.read_text())
        rank = p.name.split("_")[2]
        assert {k: v["is_same"] for k, v in doc.items()} == ref_same[rank]
        item = doc["Functional.linear.0.forward"]["op_items"][0]
        assert item["state"] == "input" and item["api_origin_name"] == "Functional.linear.0.forward"
        assert item["NPU P2POp peer"] == "None" and item["Requires_grad Consistent"] is True
        assert isinstance(item["NPU_Stack_Info"], list)
    assert p.read_text().startswith('{\n    "Functional.linear.0.forward": {\n        "is_same": true,')
    # suspects by growth: only APIs with an output beyond rounding (the verdict's WARN / FAIL); this pair is bf16
    # against fp32 without a planted bug, so rank 0 has none
    assert suspects["ranks"]["rank_0"] == []
    assert all(s["op_name"].endswith(".backward") for s in suspects["ranks"]["rank_1"])
    assert "Torch.empty" in suspects["noise_ops"]
    # the reference rule's answer (dump order) on one line; msprobe's per rank, in execution order, where a
    # parameter gradient comes after the backward that computes it and is never the first divergence here
    assert ("  reference rule (first API above 50% relative error in dump order, before communication): "
            "rank_0: Module.fc3.Linear.parameters_grad; rank_1: Module.fc1.Linear.parameters_grad") in stdout
    assert "first divergence (first failing row in execution order):" in stdout
    for rk in ("rank_0", "rank_1"):
        fd = suspects["first_divergence"][rk]
        assert "parameters_grad" not in fd.get("row", "")
        assert (f"  {rk}: none (" if "none" in fd else f"  {rk}: {fd['row']} (report row {fd['report_row']})") in stdout


# ---------------------------------------------------------------- (2) growth ranking
def test_growth_ranks_the_injecting_op_first(tmp_path, capsys):
    errors = [0.0, 0.01, 0.03, 0.12, 0.84]  # op1 injects 1 %, later ops amplify it x3, x4, x7
    golden = chain([0.0] * 5)
    target = chain(errors)
    t, g = pair(tmp_path, target, golden)
    out = tmp_path / "out"
    code, stdout, err = run(["compare", "-tp", t, "-gp", g, "-o", out, "-q", "-da", "-c"], capsys)
    assert code == 0, err
    (analyze,), (per_rank,) = da_files(out)
    assert per_rank.name.startswith("compare_result_rank_")
    doc = json.loads(analyze.read_text())
    # the reference's rule names the first op above 50 % relative error: the end of the chain
    assert [n["op_name"] for n in doc["rank_0"]] == ["Functional.op4.0.forward"]
    ranked = doc["msprobe_suspects"]["ranks"]["rank_0"]
    assert [s["op_name"] for s in ranked] == [
        "Functional.op1.0.forward", "Functional.op4.0.forward", "Functional.op3.0.forward", "Functional.op2.0.forward"]
    first = ranked[0]
    assert first["input_error"] == 0.0 and first["output_error"] == pytest.approx(0.01)
    assert first["growth"] == pytest.approx((0.01 + 1.3e-6) / 1.3e-6, rel=1e-4)
    # later ops have larger absolute errors but grow only 3-7x
    assert all(s["output_error"] > first["output_error"] for s in ranked[1:])
    assert [s["growth"] for s in ranked[1:]] == [pytest.approx(7.0, rel=1e-3), pytest.approx(4.0, rel=1e-3),
                                                pytest.approx(3.0, rel=1e-3)]
    assert "rank_0 1. Functional.op1.0.forward: growth x7.69e+03 (input error 0 -> output error 0.01)" in stdout


def test_growth_floor_is_the_dtype_tolerance(tmp_path, capsys):
    # bf16 rounding (0.4 %) on every op is below bf16's floor (1.6 %): no suspect; a 10 % jump is one
    errors = [0.004, 0.004, 0.1, 0.1]
    t, g = pair(tmp_path, chain(errors, dtype="torch.bfloat16"), chain([0.0] * 4, dtype="torch.float32"))
    out = tmp_path / "out"
    code, _, err = run(["compare", "-tp", t, "-gp", g, "-o", out, "-q", "-da", "-c"], capsys)
    assert code == 0, err
    (analyze,), _ = da_files(out)
    ranked = json.loads(analyze.read_text())["msprobe_suspects"]["ranks"]["rank_0"]
    assert [s["op_name"] for s in ranked] == ["Functional.op2.0.forward"]
    assert ranked[0]["floor"] == pytest.approx(1.6e-2)
    assert ranked[0]["growth"] == pytest.approx((0.1 + 0.016) / (0.004 + 0.016), rel=1e-4)


# ---------------------------------------------------------------- noise list
def test_noise_ops_are_skipped_and_the_list_is_extensible(tmp_path, capsys):
    noise = {
        "Torch.empty.0.forward": entry([], [tensor(1.0, 5.0)]),             # uninitialised memory
        "Tensor.masked_fill.0.forward": entry([tensor()], [tensor(1.0, 2.0)]),  # mask with dtype minimum
        "Functional.my_mask.0.forward": entry([tensor()], [tensor(1.0, 3.0)]),  # user's own noise op
    }
    golden_noise = {k: entry(v["input_args"] and [tensor()], [tensor()]) for k, v in noise.items()}
    target = chain([0.0, 0.9], extra_first=noise)
    golden = chain([0.0, 0.0], extra_first=golden_noise)
    t, g = pair(tmp_path, target, golden)
    out = tmp_path / "out"
    code, _, err = run(["compare", "-tp", t, "-gp", g, "-o", out, "-q", "-da", "-c"], capsys)
    assert code == 0, err
    (analyze,), _ = da_files(out)
    doc = json.loads(analyze.read_text())
    assert [n["op_name"] for n in doc["rank_0"]] == ["Functional.my_mask.0.forward"]
    names = [s["op_name"] for s in doc["msprobe_suspects"]["ranks"]["rank_0"]]
    assert "Torch.empty.0.forward" not in names and "Tensor.masked_fill.0.forward" not in names
    # the user adds a name part on the command line ...
    out2 = tmp_path / "out2"
    code, _, err = run(["compare", "-tp", t, "-gp", g, "-o", out2, "-q", "-da", "-c", "--noise-op", "my_mask"], capsys)
    assert code == 0, err
    doc = json.loads(da_files(out2)[0][0].read_text())
    assert [n["op_name"] for n in doc["rank_0"]] == ["Functional.op1.0.forward"]
    assert doc["msprobe_suspects"]["noise_ops"][-1] == "my_mask"
    # ... or in a yaml, which can also drop the default list
    cfg = tmp_path / "da.yaml"
    cfg.write_text("default_noise: false\nnoise_ops: [my_mask]\ntop: 2\n")
    out3 = tmp_path / "out3"
    code, _, err = run(["compare", "-tp", t, "-gp", g, "-o", out3, "-q", "-da", "-c", "--da-config", cfg], capsys)
    assert code == 0, err
    doc = json.loads(da_files(out3)[0][0].read_text())
    assert [n["op_name"] for n in doc["rank_0"]] == ["Torch.empty.0.forward"]
    assert doc["msprobe_suspects"]["noise_ops"] == ["my_mask"]
    assert len(doc["msprobe_suspects"]["ranks"]["rank_0"]) == 2


def test_threshold_from_yaml(tmp_path, capsys):
    t, g = pair(tmp_path, chain([0.0, 0.2]), chain([0.0, 0.0]))
    cfg = tmp_path / "da.yaml"
    cfg.write_text("thresholds: {MaxRelativeErr: [0.1]}\n")  # the reference's one-element-list form
    out = tmp_path / "out"
    code, _, err = run(["compare", "-tp", t, "-gp", g, "-o", out, "-q", "-da", "-c", "--da-config", cfg], capsys)
    assert code == 0, err
    doc = json.loads(da_files(out)[0][0].read_text())
    assert [n["op_name"] for n in doc["rank_0"]] == ["Functional.op1.0.forward"]
    out2 = tmp_path / "out2"
    code, stdout, _ = run(["compare", "-tp", t, "-gp", g, "-o", out2, "-q", "-da", "-c"], capsys)
    doc = json.loads(da_files(out2)[0][0].read_text())
    assert "rank_0" not in doc  # 20 % is below the default 50 %; only the growth suspect remains
    assert doc["msprobe_suspects"]["ranks"]["rank_0"][0]["op_name"] == "Functional.op1.0.forward"


# ---------------------------------------------------------------- across ranks
def _comm_case():
    """rank0: op0 -> send(dst=1) -> op1 ; rank1: recv(src=0) -> op2.  rank0's op0 breaks before the send."""
    def dist_entry(kind, peer_arg, peer, err):
        return {"input_args": [tensor(1.0, err)],
                "input_kwargs": {peer_arg: {"type": "int", "value": peer}},
                "output": [tensor(1.0, err)] if kind != "send" else [None]}

    def ranks(e0, e_send, e_after):
        r0 = {"Functional.op0.0.forward": entry([tensor()], [tensor(1.0, e0)]),
              "Distributed.send.0.forward": dist_entry("send", "dst", 1, e_send),
              "Functional.op1.0.forward": entry([tensor()], [tensor(1.0, 0.0)])}
        r1 = {"Functional.op9.0.forward": entry([tensor()], [tensor()]),
              "Distributed.recv.0.forward": dist_entry("recv", "src", 0, e_send),
              "Functional.op2.0.forward": entry([tensor(1.0, e_send)], [tensor(1.0, e_after)])}
        return {0: r0, 1: r1}

    return ranks(0.0, 0.9, 0.9), ranks(0.0, 0.0, 0.0)


def test_divergence_during_communication_follows_the_peer(tmp_path, capsys):
    target, golden = _comm_case()
    t, g = pair(tmp_path, target, golden, ranks=[0, 1])
    out = tmp_path / "out"
    code, stdout, err = run(["compare", "-tp", t, "-gp", g, "-o", out, "-q", "-da", "-c"], capsys)
    assert code == 0, err
    (analyze,), per_rank = da_files(out)
    assert [p.name.split("_")[2] for p in per_rank] == ["rank0", "rank1"]
    doc = json.loads(analyze.read_text())
    expected = json.loads((DATA / "send_recv.v833.diff_analyze.json").read_text())
    doc.pop("msprobe_suspects")
    assert doc == expected
    assert "during communication" in stdout


# ---------------------------------------------------------------- other modes
def test_md5_mode(tmp_path, capsys):
    def md5_tensor(crc, err=0.0):
        t = tensor(1.0, err)  # md5 dumps hold the statistics too
        t["md5"] = crc
        return t
    golden = {f"Functional.op{k}.0.forward": entry([md5_tensor(f"{k:08x}")], [md5_tensor(f"{k + 1:08x}")]) for k in range(3)}
    target = json.loads(json.dumps(golden))
    target["Functional.op1.0.forward"]["output"][0] = md5_tensor("deadbeef", 0.9)
    target["Functional.op2.0.forward"]["input_args"][0] = md5_tensor("deadbeef", 0.9)
    target["Functional.op2.0.forward"]["output"][0] = md5_tensor("feedf00d", 0.9)
    t, g = pair(tmp_path, target, golden)
    out = tmp_path / "out"
    code, _, err = run(["compare", "-tp", t, "-gp", g, "-o", out, "-q", "-da", "-c"], capsys)
    assert code == 0, err
    (analyze,), (per_rank,) = da_files(out)
    doc = json.loads(analyze.read_text())
    node = doc["rank_0"][0]
    assert node["op_name"] == "Functional.op1.0.forward"
    assert node["data_info"]["output"] == {"Functional.op1.0.forward.output.0": {"NPU MD5": "deadbeef", "NPU P2POp peer": "None"}}
    assert [s["op_name"] for s in doc["msprobe_suspects"]["ranks"]["rank_0"]] == ["Functional.op1.0.forward"]
    items = json.loads(per_rank.read_text())["Functional.op2.0.forward"]["op_items"]
    assert list(items[0])[:12] == ["NPU Name", "Bench Name", "NPU Dtype", "Bench Dtype", "NPU Tensor Shape",
                                   "Bench Tensor Shape", "NPU Requires_grad", "Bench Requires_grad", "NPU MD5",
                                   "BENCH MD5", "Requires_grad Consistent", "Result"]


def test_tensor_mode_is_checked_by_statistics(tmp_path, capsys):
    fx = fixtures_or_skip() / "mlp_bf16_tensor_mix"
    out = tmp_path / "out"
    code, _, err = run(["compare", "-tp", fx / "target/step0/rank", "-gp", fx / "golden/step0/rank", "-o", out, "-q",
                        "-da", "-c"], capsys)
    assert code == 0, err
    _, (per_rank,) = da_files(out)
    doc = json.loads(per_rank.read_text())
    item = next(iter(doc.values()))["op_items"][0]
    assert "MinRelativeErr" in item and "Cosine" not in item and "Data_name" not in item
    assert item["MaxRelativeErr"].endswith("%")


# ---------------------------------------------------------------- (4) bad input: one clear line, exit 2, nothing written
def _one_line_error(code, stdout, err, out: Path, *needles):
    lines = [x for x in err.splitlines() if x.strip()]
    assert code == 2, (stdout, err)
    assert len(lines) == 1 and lines[0].startswith("msprobe: error: "), err
    for n in needles:
        assert n in lines[0], lines[0]
    assert not out.exists() or not any(out.iterdir())
    return lines[0]


def test_bad_input_mismatched_rank_sets(tmp_path, capsys):
    target, golden = _comm_case()
    t, g = pair(tmp_path, target, golden, ranks=[0, 1])
    import shutil
    shutil.rmtree(g / "rank1")
    out = tmp_path / "out"
    code, stdout, err = run(["compare", "-tp", t, "-gp", g, "-o", out, "-q", "-da"], capsys)
    _one_line_error(code, stdout, err, out, "rank1 only in the target")


def test_bad_input_rank_numbers_clash(tmp_path, capsys):
    target, golden = _comm_case()
    t, g = pair(tmp_path, target, golden, ranks=[0, 1])
    (t / "rank1").rename(t / "rank")
    (g / "rank1").rename(g / "rank")
    out = tmp_path / "out"
    code, stdout, err = run(["compare", "-tp", t, "-gp", g, "-o", out, "-q", "-da"], capsys)
    _one_line_error(code, stdout, err, out, "both map to rank 0")


@pytest.mark.parametrize("text,needle", [
    ("noise_ops: 5\n", "noise_ops must be a list"),
    ("top: 0\n", "top must be a positive"),
    ("threshold: -1\n", "threshold must be a non-negative number"),
    ("colour: red\n", "unknown key(s) colour"),
    ("noise_ops: [a\n", "is not valid yaml"),
    ("- a\n- b\n", "must hold a mapping"),
])
def test_bad_da_config(tmp_path, capsys, text, needle):
    t, g = pair(tmp_path, chain([0.0]), chain([0.0]))
    cfg = tmp_path / "da.yaml"
    cfg.write_text(text)
    out = tmp_path / "out"
    code, stdout, err = run(["compare", "-tp", t, "-gp", g, "-o", out, "-q", "-da", "--da-config", cfg], capsys)
    _one_line_error(code, stdout, err, out, needle)


def test_da_options_need_da(tmp_path, capsys):
    t, g = pair(tmp_path, chain([0.0]), chain([0.0]))
    out = tmp_path / "out"
    code, stdout, err = run(["compare", "-tp", t, "-gp", g, "-o", out, "-q", "--noise-op", "x"], capsys)
    _one_line_error(code, stdout, err, out, "add -da")


def test_no_divergence_writes_no_analysis_file(tmp_path, capsys):
    t, g = pair(tmp_path, chain([0.0, 0.0]), chain([0.0, 0.0]))
    out = tmp_path / "out"
    code, stdout, _ = run(["compare", "-tp", t, "-gp", g, "-o", out, "-q", "-da", "-c"], capsys)
    assert code == 0
    analyze, per_rank = da_files(out)
    assert analyze == [] and len(per_rank) == 1
    assert "suspects by local error growth: none" in stdout
