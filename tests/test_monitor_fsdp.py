"""The training monitor (TrainerMon) and grad_probe under data-parallel wrappers: 2 processes on gloo (CPU), a
tiny random-init transformers Llama (no download) wrapped in DDP, FSDP2 (fully_shard) and FSDP1
(FullyShardedDataParallel, use_orig_params=True; without it the reference's ValueError).

Each worker trains 3 AdamW steps twice from the same initial weights: without and with the monitor (wg, xy, mv
distributions, csv).  Beside the training, an unwrapped replica loaded with the full weights of each step runs
the rank's batch: its gradients are the rank's local, unreduced ones (what ``grad_unreduced`` must hold); the
gradients and Adam moments the optimizer sees are read from the training itself (``grad_reduced``,
``exp_avg``, ``exp_avg_sq``; for FSDP the rank's shard).  Checked: the norms in the CSV files against these,
losses and gradients bit-identical with and without the monitor.  grad_probe (L1) under DDP, FSDP2 and FSDP1:
its norms and shapes are those of the gradients the optimizer sees (FSDP: the rank's shard).  One pair of
processes runs every case (about 10-30 s on 2 cores); a wrapper that cannot run on this torch's CPU is skipped
with the reason.  Also, in one process: xy_distribution's backward leaves a Llama's gradients bit-identical.
"""

from __future__ import annotations

import csv
import glob
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
WORLD = 2
STEPS = 3
WRAPPERS = ("module", "_fsdp_wrapped_module", "_checkpoint_wrapped_module", "_orig_mod")


def _config():
    from transformers import LlamaConfig
    return LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                       num_key_value_heads=2, vocab_size=128, max_position_embeddings=64)


def _model():
    from transformers import LlamaForCausalLM
    torch.manual_seed(0)
    return LlamaForCausalLM(_config())


def _bare(name):
    """The unwrapped model's name of a wrapped model's parameter."""
    return ".".join(x for x in name.split(".") if x not in WRAPPERS)


def _wrap(mode, model):
    if mode in ("ddp", "ddp_view"):
        from torch.nn.parallel import DistributedDataParallel
        return DistributedDataParallel(model, gradient_as_bucket_view=(mode == "ddp_view"))
    if mode == "fsdp2":
        from torch.distributed.fsdp import fully_shard
        for layer in model.model.layers:
            fully_shard(layer)
        fully_shard(model)
        return model
    if mode in ("fsdp1", "fsdp1_flat"):
        from torch.distributed.fsdp import FullyShardedDataParallel
        from torch.distributed.fsdp.wrap import ModuleWrapPolicy
        from transformers.models.llama.modeling_llama import LlamaDecoderLayer
        return FullyShardedDataParallel(model, use_orig_params=(mode == "fsdp1"),
                                        auto_wrap_policy=ModuleWrapPolicy({LlamaDecoderLayer}),
                                        device_id=torch.device("cpu"))
    raise ValueError(mode)


def _full_weights(mode, model):
    """{bare name: full tensor} of the wrapped model's current weights (collective for FSDP)."""
    if mode.startswith("ddp"):
        return {_bare(n): p.detach().clone() for n, p in model.named_parameters()}
    if mode == "fsdp2":
        return {_bare(n): p.full_tensor().detach().clone() for n, p in model.named_parameters()}
    from torch.distributed.fsdp import FullyShardedDataParallel
    with FullyShardedDataParallel.summon_full_params(model):
        return {_bare(n): p.detach().clone() for n, p in model.named_parameters()}


def _local(t):
    if t is None:
        return None
    to_local = getattr(t, "to_local", None)
    return (to_local() if callable(to_local) else t).detach()


def _norm(t):
    return float(t.double().norm()) if t is not None and t.numel() else None


def _train(mode, rank, out, monitor_cfg=None, tag="plain"):
    """3 steps; returns (losses, grads seen by the optimizer each step, expected statistics, rank folder)."""
    import torch.distributed as dist
    model = _wrap(mode, _model())
    replica = _model()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    mon = None
    if monitor_cfg is not None:
        path = os.path.join(out, f"cfg_{tag}_{rank}.json")
        with open(path, "w") as f:
            json.dump(monitor_cfg, f)
        os.environ["MONITOR_OUTPUT_DIR"] = os.path.join(out, f"monitor_{tag}")
        from msprobe.pytorch import TrainerMon
        mon = TrainerMon(path, params_have_main_grad=False)
        mon.set_monitor(model, optimizer=opt)
    gen = torch.Generator().manual_seed(100 + rank)
    losses, grads, expect = [], [], {}
    names = [n for n, _ in model.named_parameters()]
    for step in range(STEPS):
        x = torch.randint(0, 128, (2, 16), generator=gen)
        # the rank's local gradient: the unwrapped replica with this step's full weights on the same batch
        full = _full_weights(mode, model)
        with torch.no_grad():
            for n, p in replica.named_parameters():
                p.copy_(full[n])
        replica.zero_grad()
        replica(input_ids=x, labels=x).loss.backward()
        local = {n: p.grad for n, p in replica.named_parameters()}
        loss = model(input_ids=x, labels=x).loss
        loss.backward()
        params = dict(model.named_parameters())
        e = expect[step] = {}
        for n in names:
            p = params[n]
            st = opt.state.get(p, {})
            e[n] = {"unreduced": _norm(local[_bare(n)]), "reduced": _norm(_local(p.grad)),
                    "exp_avg": _norm(_local(st.get("exp_avg"))), "exp_avg_sq": _norm(_local(st.get("exp_avg_sq"))),
                    "bare": _bare(n)}
        grads.append([_local(params[n].grad).clone() if params[n].grad is not None else None for n in names])
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
    rank_dir = mon.rank_dir if mon is not None else None
    if mon is not None:
        mon.remove()
    dist.barrier()
    return losses, grads, expect, rank_dir


MON_CFG = {"targets": {}, "wg_distribution": True, "xy_distribution": True, "all_xy": True,
           "mv_distribution": True, "param_distribution": True, "mg_direction": True, "format": "csv", "ops": ["norm", "min", "max"], "step_count_per_record": 10,
           "ndigits": 12}
MODES = ("ddp", "ddp_view", "fsdp2", "fsdp1", "fsdp1_flat", "gp_ddp", "gp_fsdp2", "gp_fsdp1", "acc_fsdp2", "acc_fsdp1")


def _grad_probe(mode, rank, out):
    """grad_probe (L1) on a 2-step training; returns {step: {name: (norm, shape)}} of what the optimizer sees."""
    from msprobe.pytorch import PrecisionDebugger
    dump = os.path.join(out, f"grad_probe_{mode}")
    path = os.path.join(out, f"gp_{mode}_{rank}.json")
    with open(path, "w") as f:
        json.dump({"task": "grad_probe", "dump_path": dump, "rank": [], "step": [],
                   "grad_probe": {"grad_level": "L1", "param_list": [], "bounds": [-1, 0, 1]}}, f)
    model = _wrap(mode[3:], _model())
    debugger = PrecisionDebugger(path)
    debugger.monitor(model)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    gen = torch.Generator().manual_seed(100 + rank)
    seen = {}
    for step in range(2):
        x = torch.randint(0, 128, (2, 16), generator=gen)
        model(input_ids=x, labels=x).loss.backward()
        seen[step] = {n: (_norm(_local(p.grad)), list(_local(p.grad).shape)) for n, p in model.named_parameters()
                      if p.grad is not None}
        opt.step()
        opt.zero_grad()
    debugger.stop()
    PrecisionDebugger._reset_for_tests()
    return {"seen": seen, "dir": os.path.join(dump, f"rank{rank}")}


def _accumulate(mode, rank, out):
    """2 steps of 2 micro-batches (FSDP1 no_sync / FSDP2 set_requires_gradient_sync(False) on the first):
    {step: {name: norm of the replica's gradient summed over the micro-batches}} and the rank folder."""
    import contextlib
    model = _wrap(mode, _model())
    replica = _model()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    path = os.path.join(out, f"cfg_acc_{mode}_{rank}.json")
    with open(path, "w") as f:
        json.dump(dict(MON_CFG, xy_distribution=False), f)
    os.environ["MONITOR_OUTPUT_DIR"] = os.path.join(out, f"monitor_acc_{mode}")
    from msprobe.pytorch import TrainerMon
    mon = TrainerMon(path, params_have_main_grad=False)
    mon.set_monitor(model, optimizer=opt, grad_acc_steps=2)
    gen = torch.Generator().manual_seed(5 + rank)
    expect = {}
    for step in range(2):
        full = _full_weights(mode, model)
        with torch.no_grad():
            for n, p in replica.named_parameters():
                p.copy_(full[n])
        replica.zero_grad()
        for micro in range(2):
            x = torch.randint(0, 128, (2, 16), generator=gen)
            replica(input_ids=x, labels=x).loss.backward()
            ctx = contextlib.nullcontext()
            if mode == "fsdp2":
                model.set_requires_gradient_sync(micro == 1)
            elif micro == 0:
                ctx = model.no_sync()
            with ctx:
                model(input_ids=x, labels=x).loss.backward()
        expect[step] = {n: _norm(replica.get_parameter(_bare(n)).grad) for n, _ in model.named_parameters()}
        opt.step()
        opt.zero_grad()
    mon.remove()
    return {"expect": expect, "rank_dir": mon.rank_dir}


def _worker(rank, port, out, modes):
    import torch.distributed as dist
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=WORLD)
    torch.set_num_threads(1)
    for mode in modes.split(","):
        result = {"mode": mode}
        try:
            base = mode.split("_", 1)[1] if mode.startswith(("gp_", "acc_")) else mode
            if base.startswith("fsdp"):
                try:
                    _wrap(base, _model())
                except Exception as exc:   # noqa: BLE001 - e.g. a torch that cannot shard on the CPU
                    result["skip"] = f"{mode} cannot run on CPU/gloo with torch {torch.__version__}: {exc}"
            if "skip" in result:
                pass
            elif mode.startswith("gp_"):
                result.update(_grad_probe(mode, rank, out))
            elif mode.startswith("acc_"):
                result.update(_accumulate(base, rank, out))
            elif mode == "fsdp1_flat":
                try:
                    _train(mode, rank, out, MON_CFG, mode)
                    result["error"] = None
                except Exception as exc:   # noqa: BLE001
                    result["error"] = f"{type(exc).__name__}: {exc}"
                    result["is_value_error"] = isinstance(exc, ValueError)
            else:
                cfg = dict(MON_CFG, **json.loads(os.environ.get("FX_CFG", "{}")))
                losses0, grads0, expect, _ = _train(mode, rank, out)
                losses1, grads1, _, rank_dir = _train(mode, rank, out, cfg, mode)
                same = all((a is None and b is None) or (a is not None and b is not None and torch.equal(a, b))
                           for g0, g1 in zip(grads0, grads1) for a, b in zip(g0, g1))
                result.update({"losses": losses0, "losses_mon": losses1, "grads_identical": same,
                               "expect": expect, "rank_dir": rank_dir})
        except Exception:   # noqa: BLE001
            import traceback
            result["crash"] = traceback.format_exc()
        with open(os.path.join(out, f"result_{mode}_{rank}.json"), "w") as f:
            json.dump(result, f)
        dist.barrier()
    dist.destroy_process_group()


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_modes(modes, out):
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env["OMP_NUM_THREADS"] = "1"
    port = _free_port()
    procs = [subprocess.Popen([sys.executable, str(Path(__file__).resolve()), str(r), str(port), str(out), ",".join(modes)],
                              cwd=str(out), env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for r in range(WORLD)]
    logs = []
    for p in procs:
        try:
            logs.append(p.communicate(timeout=180)[0])
        except subprocess.TimeoutExpired:
            p.kill()
            logs.append(p.communicate()[0])
    assert all(p.returncode == 0 for p in procs), "\n".join(x[-4000:] for x in logs)
    return {m: [json.load(open(out / f"result_{m}_{r}.json")) for r in range(WORLD)] for m in modes}, logs


def read_csv(path):
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    return rows[0], rows[1:]


def csv_norms(rank_dir, prefix):
    """{(name, step): norm} of one CSV prefix (files of every step range)."""
    out = {}
    for path in sorted(glob.glob(os.path.join(rank_dir, f"{prefix}_[0-9]*-*.csv"))):
        head, rows = read_csv(path)
        col = head.index("norm")
        for r in rows:
            out[(r[1], int(r[2]))] = float(r[col])
    return out


# ------------------------------------------------------------------------------------------------ tests
@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    out = tmp_path_factory.mktemp("fsdp")
    res, logs = run_modes(MODES, out)
    for mode, rs in res.items():
        for r in rs:
            assert "crash" not in r, f"{mode}: {r['crash']}"
    return res, logs


def _of(runs, mode):
    rs = runs[0][mode]
    if "skip" in rs[0]:
        pytest.skip(rs[0]["skip"])
    return rs


def _close(got, want, rel=2e-6, abs_=0.0):
    return abs(got - want) <= rel * abs(want) + abs_


KINDS = (("grad_unreduced", "unreduced", 0.0), ("grad_reduced", "reduced", 0.0), ("exp_avg", "exp_avg", 0.0),
         ("exp_avg_sq", "exp_avg_sq", 1e-11))     # exp_avg_sq ~1e-9: 12 decimals in the CSV


def _check_mode(rs, mode):
    from msprobe.core.monitor.names import squash_name
    for rank, r in enumerate(rs):
        # the monitor changes nothing in the training: the same losses and gradients, to the bit
        assert r["losses"] == r["losses_mon"], (mode, rank)
        assert r["grads_identical"], (mode, rank)
        for prefix, key, abs_ in KINDS:
            got = csv_norms(r["rank_dir"], prefix)
            want = {(squash_name(n), int(step)): v[key] for step, e in r["expect"].items() for n, v in e.items()
                    if v[key] is not None}
            # a row for each parameter with a value on this rank (FSDP1: a parameter with no element in the
            # rank's shard has no gradient or state there, and no row), and nothing else
            assert set(got) == set(want), (mode, rank, prefix, sorted(set(got) ^ set(want))[:4])
            bad = [(k, got[k], w) for k, w in want.items() if not _close(got[k], w, abs_=abs_)]
            assert not bad, (mode, rank, prefix, bad[:3])
        # activations and their gradients recorded (the hooks did not fail)
        for prefix in ("actv", "actv_grad"):
            _, rows = read_csv(os.path.join(r["rank_dir"], f"{prefix}_0-9.csv"))
            assert len({int(x[2]) for x in rows}) == STEPS and len(rows) > 50 * STEPS, (mode, prefix)
        # parameters and mg_direction: a row per parameter with elements on this rank, every step
        n = len(csv_norms(r["rank_dir"], "grad_reduced"))
        for prefix in ("param_origin", "param_updated", "other"):
            assert len(csv_norms(r["rank_dir"], prefix)) == n, (mode, prefix)
        assert not os.path.exists(os.path.join(r["rank_dir"], "dump_error_info.log")), mode
    return rs


def test_ddp_unreduced_is_the_local_gradient(runs):
    rs = _check_mode(_of(runs, "ddp"), "ddp")
    # the two ranks' local gradients differ, their reduced ones are the same mean
    u0, u1 = (csv_norms(r["rank_dir"], "grad_unreduced") for r in rs)
    r0, r1 = (csv_norms(r["rank_dir"], "grad_reduced") for r in rs)
    key = ("module.model.embed_tokens.weight", 0)
    assert u0[key] != u1[key] and r0[key] == r1[key]


def test_ddp_gradient_as_bucket_view(runs):
    """p.grad is a view of DDP's bucket, all-reduced in place after the backward: the unreduced row still holds
    the local gradient."""
    _check_mode(_of(runs, "ddp_view"), "ddp_view")


def test_fsdp2_pre_grad_and_sharded_post_grad(runs):
    rs = _check_mode(_of(runs, "fsdp2"), "fsdp2")
    from msprobe.core.monitor.names import squash_name
    for rank, r in enumerate(rs):
        head, rows = read_csv(glob.glob(os.path.join(r["rank_dir"], "grad_unreduced_0-9.csv"))[0])
        shapes = {row[1]: row[head.index("shape")] for row in rows}
        _, red = read_csv(glob.glob(os.path.join(r["rank_dir"], "grad_reduced_0-9.csv"))[0])
        red_shapes = {row[1]: row[head.index("shape")] for row in red}
        # unreduced: the full (unsharded) parameter; reduced: this rank's shard of dim 0
        assert shapes["model.embed_tokens.weight"] == "[128, 64]"
        assert red_shapes["model.embed_tokens.weight"] == "[64, 64]"
    # the two ranks' shards make the full reduced gradient: at step 0 (same weights, same batches) the norm of
    # DDP's reduced gradient is the root of the sum of the squared shard norms
    r0, r1 = (csv_norms(r["rank_dir"], "grad_reduced") for r in rs)
    ddp = csv_norms(runs[0]["ddp"][0]["rank_dir"], "grad_reduced")
    for name in ("model.embed_tokens.weight", "model.layers.1.mlp.down_proj.weight", "lm_head.weight"):
        key = (squash_name(name), 0)
        assert r0[key] != r1[key]
        assert _close((r0[key] ** 2 + r1[key] ** 2) ** 0.5, ddp[(squash_name("module." + name), 0)], rel=1e-5)


def test_fsdp1_use_orig_params_pre_grad(runs):
    rs = _check_mode(_of(runs, "fsdp1"), "fsdp1")
    for r in rs:
        u = csv_norms(r["rank_dir"], "grad_unreduced")
        assert len(u) == 3 * 21           # every parameter, every step, on both ranks (unsharded)
        assert not glob.glob(os.path.join(r["rank_dir"], "dump_error_info.log"))


@pytest.mark.parametrize("mode", ["acc_fsdp2", "acc_fsdp1"])
def test_fsdp_gradient_accumulation_records_the_accumulated_local_gradient(runs, mode):
    from msprobe.core.monitor.names import squash_name
    for r in _of(runs, mode):
        got = csv_norms(r["rank_dir"], "grad_unreduced")
        want = {(squash_name(n), int(step)): v for step, e in r["expect"].items() for n, v in e.items()}
        assert set(got) == set(want)
        bad = [(k, got[k], w) for k, w in want.items() if not _close(got[k], w)]
        assert not bad, (mode, bad[:3])


def test_fsdp1_without_use_orig_params_is_refused(runs):
    for r in _of(runs, "fsdp1_flat"):
        assert r["error"] == "FsdpConfigError: Only Support fsdp1 with use_orig_params=True"
        assert r["is_value_error"]


@pytest.mark.parametrize("mode", ["gp_ddp", "gp_fsdp2", "gp_fsdp1"])
def test_grad_probe_records_what_the_optimizer_sees(runs, mode):
    from msprobe.core.grad_probe import stats
    for r in _of(runs, mode):
        for step, seen in r["seen"].items():
            rows = stats.read_summary(os.path.join(r["dir"], f"grad_summary_{step}.csv"))
            head, body = rows[0], rows[1:]
            got = {row[0]: (float(row[head.index("norm")]), row[head.index("shape")]) for row in body}
            assert set(got) == set(seen), (mode, step)
            for name, (norm, shape) in seen.items():
                assert _close(got[name][0], norm), (mode, step, name, got[name][0], norm)
                assert got[name][1] == str(shape), (mode, name, got[name][1], shape)
                assert os.path.isfile(os.path.join(r["dir"], f"step{step}", f"{name}.npy"))


def test_xy_backward_keeps_llama_gradients_bit_identical(tmp_path, monkeypatch):
    """Module input gradients were read through a view inserted in front of each module: autograd then added a
    tensor's gradient contributions in another grouping, and a Llama's gradients changed in their last bits
    (15 of 21 parameters at the first step, DDP or not).  Now nothing is inserted: gradients identical, and the
    recorded grad_input / grad_output are those of register_full_backward_hook (the reference's)."""
    torch.set_num_threads(1)
    from msprobe.pytorch import TrainerMon
    monkeypatch.setenv("MONITOR_OUTPUT_DIR", str(tmp_path / "out"))
    probes = ("model.layers.0.input_layernorm", "model.layers.1.mlp", "model.layers.0", "model.norm")

    def run(with_monitor):
        model = _model()
        opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
        want, mon = {}, None
        if with_monitor:
            path = tmp_path / "cfg.json"
            path.write_text(json.dumps(dict(MON_CFG, step_count_per_record=10)))
            mon = TrainerMon(str(path), params_have_main_grad=False)
            mon.set_monitor(model, optimizer=opt)
        else:
            mods = dict(model.named_modules())
            for name in probes:
                def hook(m, gin, gout, name=name):
                    want[name] = (_norm(gin[0]), _norm(gout[0]))
                mods[name].register_full_backward_hook(hook)
        gen = torch.Generator().manual_seed(7)
        grads, norms = [], []
        for step in range(2):
            x = torch.randint(0, 128, (2, 16), generator=gen)
            model(input_ids=x, labels=x).loss.backward()
            grads.append([p.grad.clone() for p in model.parameters()])
            norms.append(dict(want))
            opt.step()
            opt.zero_grad()
        if mon is not None:
            mon.remove()
        return grads, norms, mon

    plain = _model()      # without any hook, for the bit-identity check
    opt = torch.optim.AdamW(plain.parameters(), lr=1e-2)
    gen = torch.Generator().manual_seed(7)
    bare = []
    for step in range(2):
        x = torch.randint(0, 128, (2, 16), generator=gen)
        plain(input_ids=x, labels=x).loss.backward()
        bare.append([p.grad.clone() for p in plain.parameters()])
        opt.step()
        opt.zero_grad()
    _, want, _ = run(False)
    got_grads, _, mon = run(True)
    assert all(torch.equal(a, b) for ga, gb in zip(bare, got_grads) for a, b in zip(ga, gb))
    from msprobe.core.monitor.names import squash_name
    got = csv_norms(mon.rank_dir, "actv_grad")
    for step in range(2):
        for name in probes:
            sq = squash_name(name)
            gin, gout = want[step][name]
            assert _close(got[(f"{sq}.input", step)], gin, rel=1e-5), (name, step)
            assert _close(got[(f"{sq}.output", step)], gout, rel=1e-5), (name, step)


def test_foreach_reduce_wrapper_with_another_tool_wrapping_it(monkeypatch):
    """The dump wraps FSDP2's foreach_reduce too (and restores what it found when it ends): the monitor's wrapper
    is never wrapped around itself (that recursed), every call reaches the original once, and the module gets
    its original back when both are off."""
    pytest.importorskip("torch.distributed.fsdp._fully_shard._fsdp_param_group")
    from msprobe.pytorch.monitor import fsdp as F
    mod = F._group_module()
    calls = []

    def original(fsdp_params, grads, *args, **kwargs):
        calls.append("original")
        return "reduced"
    monkeypatch.setattr(mod, "foreach_reduce", original)
    seen = []
    h1 = F.hook_fsdp2(lambda p, g: seen.append(("a", p, g)))
    ours = mod.foreach_reduce

    def dump_wrapper(*args, **kwargs):
        calls.append("dump")
        return ours(*args, **kwargs)
    dump_wrapper.__msprobe_original__ = ours
    mod.foreach_reduce = dump_wrapper
    h1[0].remove()                                      # monitor off while the dump is on
    h2 = F.hook_fsdp2(lambda p, g: seen.append(("b", p, g)))
    assert mod.foreach_reduce is dump_wrapper           # not wrapped again
    assert mod.foreach_reduce([1], [2], "x") == "reduced"
    assert calls == ["dump", "original"] and seen == [("b", None, 2)]
    mod.foreach_reduce = ours                           # the dump ends
    h2[0].remove()
    assert mod.foreach_reduce is original and not F._saved and not F._listeners


if __name__ == "__main__":
    _worker(int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4])
