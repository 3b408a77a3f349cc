"""TrainerMon: the training monitor for PyTorch (spec checks_and_monitors.md section 4).

    from msprobe.pytorch import TrainerMon
    monitor = TrainerMon("monitor_config.json", process_group=None, params_have_main_grad=False)
    monitor.set_monitor(model, optimizer=optimizer, grad_acc_steps=1)
    # then the usual loop: loss.backward(); optimizer.step(); optimizer.zero_grad()

How it stays cheap:

* The step is seen through ``optimizer.register_step_pre_hook`` / ``register_step_post_hook`` (this optimizer
  instance only; the reference patches the class).  On a step outside ``step_interval`` (or before
  ``start_step``, or after ``collect_times`` collections) the two hooks return after one flag check and no
  module or gradient hook is installed at all: the forward, backward and update run as without the tool.
  The module and gradient hooks are installed before a collected step and removed after it.
* On a collected step every tensor is reduced on its own device to one small vector of statistics
  (``stats.StatPlan``); the vectors of the whole step are stacked and moved to the host in one transfer
  at the end of ``optimizer.step()``, then written (CSV / TensorBoard) and checked for anomalies (numpy).
* An activation seen twice in one step (a module's output is the next module's input) is reduced once.

A hook never raises into the training and never changes a tensor: a failure is logged once per cause
(``dump_error_info.log`` in the rank folder, one console warning, as the dump does) and that step's
records are dropped; training goes on.
"""

from __future__ import annotations

import atexit
import json
import logging
import math
import tempfile
import os
import weakref

import numpy as np
import torch

from msprobe.core.errors import MsprobeError
from msprobe.core.monitor import names as N
from msprobe.core.monitor.anomaly import AnomalyDetector
from msprobe.core.monitor import heatmap
from msprobe.core.monitor.config import check_output_dir, load_config
from msprobe.core.monitor.trainer_base import (TrainerMonBase, checked_grad_acc_steps, module_target_hits,
                                               param_target_hits, raise_missing_target, tensors_in,
                                               vpp_of as _vpp, xy_directions)
from msprobe.core.monitor.writers import CsvWriter, TensorBoardWriter
from msprobe.pytorch.monitor import features as FT
from msprobe.pytorch.monitor import fsdp as FSDP
from msprobe.pytorch.monitor.stats import StatPlan
from msprobe.pytorch.monitor.structure import StackRecorder, StructRecorder

log = logging.getLogger("msprobe")


def _msg(text):
    log.info(text)


# AccumulateGrad nodes (leaves) carry the largest sequence number
_ACC_GRAD_SEQ = 2 ** 64 - 1


def _gradient_edge(t):
    """(node, output_nr) through which autograd delivers ``t``'s gradient (a leaf: its AccumulateGrad)."""
    from torch.autograd.graph import get_gradient_edge
    return get_gradient_edge(t)


def _is_tensor(x):
    return isinstance(x, torch.Tensor)


def _tensors(obj):
    """Tensors of a module's inputs/outputs, in order (tuples, lists and dict values, one level deep)."""
    return tensors_in(obj, torch.Tensor)


class _Step:
    """What one collected step has gathered so far."""

    __slots__ = ("index", "vecs", "meta", "cache", "grads", "hists", "cc", "feats")

    def __init__(self):
        self.index = {}    # tag -> row (a tag seen again in the step replaces its row, as the reference's dict)
        self.vecs = []     # row -> statistics vector (device tensor) or None (NaN row)
        self.meta = []     # row -> (prefix, tag, vpp, micro, call_id, shape, dtype)
        self.cache = {}    # (data_ptr, shape, stride, dtype) -> (weakref, version, vector)
        self.grads = {}    # parameter name -> (gradient, version, vector) of its unreduced record
        self.hists = []    # ur_distribution: (tag, 30-bin histogram on the device)
        self.cc = {}       # cc_distribution: tag -> [(vector, shape, dtype)] of the step's calls
        self.feats = []    # l2 features: (prefix, tag, micro, 2-vector on the device)


class TrainerMon(TrainerMonBase):
    def __init__(self, config_file_path, process_group=None, params_have_main_grad=True, opt_ty=None):
        if tuple(int(x) for x in torch.__version__.split(".")[:2] if x.isdigit()) < (2, 0):
            raise ValueError("monitor require torch>=2.0")
        self.config_file_path = config_file_path
        self.config = load_config(config_file_path)
        self.process_group = process_group
        self.params_have_main_grad = bool(params_have_main_grad)
        self.output_base = check_output_dir(os.environ.get("MONITOR_OUTPUT_DIR", "./monitor_output"))
        self.dynamic = str(os.environ.get("DYNAMIC_MONITOR", "")).lower() == "true"
        self._dyn_on = False      # dynamic mode: a config update with dynamic_on true is in force
        self._dyn_mtime = None
        if self.dynamic:
            log.warning("DYNAMIC_MONITOR is set, please make sure you have 'dynamic_on' and 'collect_times' in %s",
                        config_file_path)
            self._dyn_mtime = self._mtime()
        self._apply_config(self.config)
        self.rank = torch.distributed.get_rank() if self._dist() else 0
        self._cc = None
        cc = self.config["cc_distribution"]
        if cc.get("enable") and torch.distributed.is_available():
            # as early as possible: before libraries keep their own references to the functions
            from msprobe.pytorch.monitor.collectives import Collectives
            self._cc = Collectives(self, cc.get("cc_codeline", []), cc.get("cc_pre_hook", False),
                                   cc.get("cc_log_only", False))
            self._cc.install()
        self.enabled = not self.module_ranks or self.rank in self.module_ranks
        self.group_mates = [self.rank]
        self.pp_stage = 0
        if self._dist():
            try:
                group = process_group or torch.distributed.group.WORLD
                self.group_mates = torch.distributed.get_process_group_ranks(group)
                self.pp_stage = torch.distributed.get_rank(group)
            except Exception:   # noqa: BLE001 - an odd group: keep the defaults
                pass
        self._init_state(_Step())
        self._fsdp1_flat, self._fsdp2 = [], False      # FSDP1 flat parameters, FSDP2 in the model
        self._fsdp1_set, self._fsdp_managed = set(), set()
        self._open_inputs = []    # actv_grad of module inputs whose gradient edges have not all run yet
        self._pending_none = []   # actv_grad NaN rows of inputs without gradient (written once backward runs)
        self._failed = False
        self.param2name = {}
        self.every_module = []    # (module, name) of every module of every chunk
        self._stack = None        # stack_info
        self._struct = None       # print_struct
        self._groups = (None, None)
        self._heat = {}           # ur_distribution: tag -> histogram columns of the collected steps
        self.l2_modules = {"attention_hook": [], "linear_hook": []}   # (module, name, vpp)
        self._feat_host = None
        self._feat_writers = {}
        self._gen = torch.Generator().manual_seed(0)   # linear_hook's power iteration (not the global RNG)
        self._hist_host = None

    # ------------------------------------------------------------------------------------------ setup
    def _apply_config(self, cfg):
        _msg(f"current config: {cfg}")
        self.config = cfg
        self.ops = cfg["ops"]
        self.plan = StatPlan(self.ops, cfg["eps"])
        self.numeric_ops = self.plan.ops
        self.start_step = cfg["start_step"]
        self.step_interval = cfg["step_interval"]
        self.collect_times = cfg["collect_times"]
        self.format = cfg["format"]
        self.detector = AnomalyDetector(cfg["alert"]["rules"], tuple(self.numeric_ops))
        self.module_ranks = cfg["module_ranks"]

    @staticmethod
    def _dist():
        return torch.distributed.is_available() and torch.distributed.is_initialized()

    def set_monitor(self, model, optimizer=None, grad_acc_steps=1, tp_group=None, dp_group=None,
                    start_iteration=0):
        """Attach to ``model`` (a module or a list of model chunks) and ``optimizer``."""
        self.grad_acc_steps = grad_acc_steps = checked_grad_acc_steps(grad_acc_steps)
        _msg(f"grad acc steps {grad_acc_steps}")
        chunks = list(model) if isinstance(model, (list, tuple)) else [model]
        if not chunks or not all(isinstance(c, torch.nn.Module) for c in chunks):
            raise MsprobeError("TrainerMon.set_monitor: model must be a torch.nn.Module or a list of them")
        if optimizer is None or not hasattr(optimizer, "register_step_post_hook"):
            raise MsprobeError("TrainerMon.set_monitor: optimizer must be a torch.optim.Optimizer (the monitor "
                               "counts steps with its step hooks)")
        # FSDP1 without use_orig_params: the reference's ValueError, before anything is hooked
        self._fsdp1_flat, self._fsdp2 = FSDP.find_fsdp(chunks)
        self._fsdp1_set = FSDP.fsdp1_params(self._fsdp1_flat)
        self._fsdp_managed = self._fsdp1_set | (FSDP.fsdp2_params(chunks) if self._fsdp2 else set())
        self.model, self.optimizer = chunks, optimizer
        self.step = int(start_iteration)
        self._first_step = self.step
        if self._dist():              # the process group may have been created after the constructor
            self.rank = torch.distributed.get_rank()
            self.enabled = not self.module_ranks or self.rank in self.module_ranks
        self._groups = (tp_group, dp_group)
        if self.dynamic:
            # dynamic mode: nothing is hooked until the config file changes with "dynamic_on": true
            self._opt_handles = [optimizer.register_step_pre_hook(self._pre_step),
                                 optimizer.register_step_post_hook(self._post_step)]
            _msg("msprobe monitor: dynamic mode, waiting for the config file to change with \"dynamic_on\": true")
            return
        self._select(chunks, tp_group, dp_group)
        if not self.enabled:
            _msg(f"msprobe monitor: rank {self.rank} is not in module_ranks {self.module_ranks}; not monitored")
            return
        _msg(f"The optimizer type is {type(optimizer).__name__}")
        self._open_outputs()
        if self.config["stack_info"]:
            self._stack = StackRecorder(self.every_module, self._fail)
        if self.config["print_struct"]:
            self._struct = StructRecorder(self.every_module, self._fail)
        self._opt_handles = [optimizer.register_step_pre_hook(self._pre_step),
                             optimizer.register_step_post_hook(self._post_step)]
        self._on = self._collecting(self.step)
        if self._on:
            self._install()
        _msg(f"> {len(self.modules)} modules are monitored.")

    # the reference's legacy entry points
    def set_wrapped_optimizer(self, optimizer):
        self.optimizer = optimizer

    def monitor_gnorm_with_ad(self, model, optimizer=None, grad_acc_steps=1, tp_group=None, dp_group=None,
                              start_iteration=0):
        return self.set_monitor(model, optimizer or self.optimizer, grad_acc_steps, tp_group, dp_group,
                                start_iteration)

    def _select(self, chunks, tp_group, dp_group):
        cfg = self.config
        targets = list(cfg["targets"])
        squash = cfg["squash_name"]
        dp_dup = False
        if dp_group is not None and self._dist():
            try:
                dp_dup = torch.distributed.get_rank(dp_group) != 0
            except Exception:   # noqa: BLE001
                dp_dup = False
        tp_rank = 0
        if tp_group is not None and self._dist():
            try:
                tp_rank = torch.distributed.get_rank(tp_group)
            except Exception:   # noqa: BLE001
                tp_rank = 0
        all_modules, all_params = [], []
        matched = set()
        for v, chunk in enumerate(chunks):
            pre = f"{v}:"
            self.every_module += [(m, pre + N.squash_name(n, squash)) for n, m in chunk.named_modules()]
            for pname, p in chunk.named_parameters():
                if not p.requires_grad:
                    continue
                sq = squash_name = N.squash_name(pname, squash)
                all_params.append(pname)
                hits = param_target_hits(targets, pre, pname, sq)
                if not hits:
                    continue
                matched.update(hits)
                name = pre + squash_name
                if name in self.name2param:
                    name = pre + pname
                self.param2name[p] = name
                self.name2param[name] = p
                if dp_dup or (tp_rank != 0 and not getattr(p, "tensor_model_parallel", False)):
                    self.duplicate.add(name)
            for mname, mod in chunk.named_modules():
                sq = N.squash_name(mname, squash)
                all_modules.append(mname)
                hits = module_target_hits(targets, pre, mname, sq)
                matched.update(hits)          # a module name is a valid target whatever is switched on
                if cfg["xy_distribution"] and (cfg["all_xy"] or hits):
                    self.modules.append((mod, pre + sq, v))
        matched.add("")
        if cfg["recording_l2_features"]:
            self._select_l2(chunks)
        raise_missing_target(self.config_file_path, targets, matched, all_modules, all_params)

    def _select_l2(self, chunks):
        squash = self.config["squash_name"]
        wanted = self.config["l2_targets"]
        names = set()
        for hook in ("attention_hook", "linear_hook"):
            if hook not in wanted or (hook == "attention_hook" and not wanted[hook]):
                continue
            listed = set(wanted[hook])
            for v, chunk in enumerate(chunks):
                pre = f"{v}:"
                for mname, mod in chunk.named_modules():
                    sq = N.squash_name(mname, squash)
                    names.add(mname)
                    hit = listed & {pre + sq, pre + mname, sq, mname}
                    if hook == "linear_hook" and not FT.linear_weight(mod):
                        if hit:
                            log.warning("msprobe monitor: l2_targets.linear_hook %s has no 2-D weight; skipped",
                                        sorted(hit)[0])
                        continue
                    if hit or (hook == "linear_hook" and not listed):
                        listed -= hit
                        self.l2_modules[hook].append((mod, pre + sq, v))
            if listed:
                bad = sorted(listed)[0]
                bare = bad.split(":", 1)[1] if ":" in bad and bad.split(":", 1)[0].isdigit() else bad
                close = N.close_names(bare, sorted(n for n in names if n))
                hint = f"; close names: {', '.join(close)}" if close else ""
                raise MsprobeError(f"monitor config {self.config_file_path}: l2_targets.{hook} names {bad!r}, which "
                                   f"is not a module of the model{hint}")

    def _open_outputs(self):
        self._open_rank_dir(announce_append=True)
        cfg = self.config
        if self.format == "csv":
            micro = N.MICRO_PREFIXES + (("grad_unreduced",) if cfg["monitor_mbs_grad"] else ())
            self.writer = CsvWriter(self.rank_dir, self.ops, cfg["ndigits"], cfg["step_count_per_record"], micro)
        elif self.format == "tensorboard":
            self.writer = TensorBoardWriter(self.rank_dir, self.ops)
            atexit.register(self._close_writer)
        self._open_anomaly_file()

    def _close_writer(self):
        try:
            if self.writer is not None:
                self.writer.close()
        except Exception:   # noqa: BLE001
            pass

    # ------------------------------------------------------------------------------------------ stepping
    def _collecting(self, step):
        return ((not self.dynamic or self._dyn_on) and self.enabled and self.collected < self.collect_times
                and step >= self.start_step and (step - self.start_step) % self.step_interval == 0)

    def _install(self):
        if self._installed:
            return
        cfg = self.config
        try:
            if cfg["xy_distribution"]:
                fwd, bwd = xy_directions(cfg)
                for mod, name, vpp in self.modules:
                    ctx = {"name": name, "vpp": vpp, "fwd": 0, "bwd": 0}
                    if bwd:
                        self._handles.append(mod.register_forward_pre_hook(self._grad_pre_hook(ctx),
                                                                           with_kwargs=True))
                    if fwd or bwd:
                        self._handles.append(mod.register_forward_hook(self._fwd_hook(ctx, fwd, bwd),
                                                                       with_kwargs=True))
            if cfg["recording_l2_features"]:
                for mod, name, vpp in self.l2_modules["attention_hook"]:
                    self._handles.append(mod.register_forward_hook(self._attention_hook(name, vpp)))
                for mod, name, vpp in self.l2_modules["linear_hook"]:
                    self._handles.append(mod.register_forward_hook(self._linear_hook(name, vpp)))
            if cfg["wg_distribution"]:
                counts = {}
                for p, name in self.param2name.items():
                    if name in self.duplicate or p in self._fsdp_managed:
                        continue
                    self._handles.append(p.register_post_accumulate_grad_hook(self._acc_hook(name, counts)))
                # FSDP: the rank's unsharded gradient before the reduce-scatter (kind pre_grad)
                if self._fsdp1_flat:
                    self._handles += FSDP.hook_fsdp1(self._fsdp1_flat, self._fsdp_record)
                if self._fsdp2:
                    self._handles += FSDP.hook_fsdp2(self._fsdp_record)
        except Exception as exc:   # noqa: BLE001
            self._fail("monitor.install", exc)
        self._installed = True

    def _fail(self, where, exc):
        self._failed = True
        self.errlog.record(where, exc)

    def _pre_step(self, optimizer, args, kwargs):
        if not self._on:
            return
        try:
            self._flush_inputs()
            self._optimizer_side(before=True)
        except Exception as exc:   # noqa: BLE001
            self._fail("monitor.optimizer_pre_step", exc)

    def _post_step(self, optimizer, args, kwargs):
        if self._on:
            try:
                if self.config["param_distribution"]:
                    self._optimizer_side(before=False)
                self._finish_step()
                if self._stack is not None and self.rank_dir and os.path.isdir(self.rank_dir):
                    self._stack.remove()
                    self._stack.write(self.rank_dir)
                    self._stack = None
            except Exception as exc:   # noqa: BLE001
                self._fail("monitor.step_end", exc)
            self._cur = _Step()
            self._pending_none = []
            self._open_inputs = []
            if self._cc is not None:
                self._cc.end_step()
            self.collected += 1
            if self.collected >= self.collect_times:
                _msg("Finish monitor")
                if self.dynamic and self._dyn_on:
                    self._dynamic_finish()
        self.step += 1
        try:
            if self._cc is not None and self._cc.log_only and self._cc.active and self.step - self._first_step >= 2:
                self._cc.remove()
                self._cc.log_stacks()
                log.warning("msprobe monitor: cc_log_only: communication stacks printed; collecting them stops "
                            "(training goes on; the reference stops the training here)")
            if self.dynamic:
                self._dynamic_check()
            if self._struct is not None:
                self._save_struct()
            nxt = self._arm(self.step)
        except Exception as exc:   # noqa: BLE001
            self._fail("monitor.next_step", exc)
            nxt = False
            self._uninstall()
        self._on = nxt

    # ------------------------------------------------------------------------------------------ dynamic mode
    def _mtime(self):
        try:
            return os.stat(self.config_file_path).st_mtime_ns
        except OSError:
            return None

    def _dynamic_check(self):
        """After each step (DYNAMIC_MONITOR=true): a changed config file with "dynamic_on": true is validated and
        applied from the next step on (new rank folder); a bad one keeps the current state."""
        m = self._mtime()
        if m is None or m == self._dyn_mtime:
            return
        self._dyn_mtime = m
        try:
            cfg = load_config(self.config_file_path)
        except Exception as exc:   # noqa: BLE001
            log.warning("get config.json wrong because %s, not updated, please check!!!", exc)
            return
        if not cfg["dynamic_on"]:
            return
        saved = dict(self.__dict__)
        self._uninstall()
        try:
            cfg["start_step"] = self.step
            self._apply_config(cfg)
            self.enabled = not self.module_ranks or self.rank in self.module_ranks
            self.param2name, self.name2param, self.duplicate, self.modules, self.every_module = {}, {}, set(), [], []
            self._select(self.model, *self._groups)
            self.anomalies = {}
            if self.enabled:
                self._open_outputs()
            self.collected = 0
            self._dyn_on = True
            self._cur, self._pending_none, self._open_inputs = _Step(), [], []
            _msg(f"config is updated at step{self.step - 1}, will start new hook at step{self.step}.")
        except Exception as exc:   # noqa: BLE001
            self.__dict__.update(saved)
            self._installed = False
            log.warning("set config wrong because %s, not updated, please check!!!", exc)

    def _dynamic_finish(self):
        """collect_times reached in dynamic mode: the config file gets "dynamic_on": false (the reference's
        way of saying the monitor is idle until the user turns it on again)."""
        self._dyn_on = False
        try:
            with open(self.config_file_path, encoding="utf-8") as f:
                raw = json.load(f)
            raw["dynamic_on"] = False
            directory = os.path.dirname(os.path.abspath(self.config_file_path))
            fd, tmp = tempfile.mkstemp(prefix=".monitor_config-", suffix=".tmp", dir=directory)
            try:
                with os.fdopen(fd, "w", encoding="utf-8") as f:
                    json.dump(raw, f, indent=2)
                os.chmod(tmp, os.stat(self.config_file_path).st_mode & 0o777)
                os.replace(tmp, self.config_file_path)
            finally:
                if os.path.exists(tmp):
                    os.unlink(tmp)
            self._dyn_mtime = self._mtime()
            _msg("Finish monitor, set config'dynamic_on=False, will restart by set it to True and update config")
        except Exception as exc:   # noqa: BLE001
            log.warning("Finish monitor, set config'dynamic_on=False fail because %s, please check!!!", exc)

    def _save_struct(self):
        """print_struct: after the first step, save the structure and stop monitoring (the reference raises
        'exit after first monitor step when print model struct' at the next step; training goes on here)."""
        rec, self._struct = self._struct, None
        try:
            rec.remove()
            path = rec.write(self.output_base, self.rank)
            _msg(f"> save module struct to {path}")
            log.warning("msprobe monitor: print_struct: the module structure is saved to %s and monitoring stops "
                        "(training goes on; the reference stops the training here)", path)
        except Exception as exc:   # noqa: BLE001
            self._fail("monitor.print_struct", exc)
        self.enabled = False

    # ------------------------------------------------------------------------------------------ records
    def _add(self, prefix, tag, vpp, micro, call_id, t):
        cur = self._cur
        if _is_tensor(t):
            t = FSDP.local(t)      # FSDP2 DTensor (gradient, moment, parameter): this rank's shard
            if prefix in ("actv", "actv_grad"):
                # an activation seen again in the step (a module's output is the next one's input): reduced once
                key = (t.data_ptr(), t.shape, t.stride(), t.dtype, t.device)
                hit = cur.cache.get(key)
                if hit is not None and hit[0]() is not None and hit[1] == t._version:
                    vec = hit[2]
                else:
                    vec = self.plan(t)
                    cur.cache[key] = (weakref.ref(t), t._version, vec)
            else:
                vec = self.plan(t)
            meta = (prefix, tag, vpp, micro, call_id, list(t.shape), str(t.dtype))
        else:
            vec, meta = None, (prefix, tag, vpp, micro, call_id, None, None)
        return self._put_row(tag, vec, meta)

    def _add_cc(self, tag, t):
        """One communication call's tensor (aggregated per tag at the end of the step)."""
        self._cur.cc.setdefault(tag, []).append((self.plan(t), list(t.shape), str(t.dtype)))

    def _add_vec(self, prefix, tag, vpp, t, vec):
        """A record whose statistics are already known (the same tensor, unchanged, reduced earlier)."""
        self._put_row(tag, vec, (prefix, tag, vpp, 0, -1, list(t.shape), str(t.dtype)))

    def _io(self, prefix, kind, ctx, role, tensors, micro):
        many = len(tensors) > 1
        for i, t in enumerate(tensors):
            r = f"{role}_{i}" if many else role
            self._add(prefix, N.tag(f"{ctx['name']}.{r}:{micro}", self.rank, kind), ctx["vpp"], micro,
                      len(self._cur.vecs), t)

    def _fwd_hook(self, ctx, fwd=True, bwd=False):
        def hook(module, args, kwargs, output):
            if not self._on or not module.training:
                return None
            try:
                micro = ctx["fwd"] % self.grad_acc_steps
                ctx["fwd"] += 1
                if fwd:
                    ins = _tensors(args) + _tensors(kwargs)
                    self._io("actv", "actv", ctx, "input", ins, micro)
                    self._io("actv", "actv", ctx, "output", _tensors(output), micro)
                if bwd:
                    outs = _tensors(output)
                    self._hook_output_grads(ctx, outs, micro)
                    stack = ctx.get("inputs")
                    if stack:
                        self._hook_input_grads(ctx, stack.pop(), outs)
            except Exception as exc:   # noqa: BLE001
                self._fail(f"monitor.forward.{ctx['name']}", exc)
            return None
        return hook

    # Gradients of a module's inputs and outputs ("actv_grad") are read without adding anything to the autograd
    # graph: an identity node in front of the module (register_full_backward_hook's BackwardHookFunction, or a
    # view of the input) makes autograd add the module's gradient contributions to the input's other ones in
    # another grouping, and the training's gradients change in their last bits (a transformers Llama: 15 of 21
    # parameter gradients differed at the first step).
    # * output: a hook on each output tensor (registered before any later in-place change, it receives the
    #   gradient of the value the module returned);
    # * input: the forward pre-hook notes each positional input's gradient edge (node, output_nr) and an
    #   autograd sequence number; the forward hook walks the nodes the module created (sequence number above
    #   it), from its outputs, and hooks every node with an edge into an input: the gradients those nodes send
    #   along these edges, summed, are the module's grad_input.  A module that wrote into its input (ReLU
    #   inplace) is covered too: the write's node sends the gradient of the value before the write.
    def _grad_pre_hook(self, ctx):
        def hook(module, args, kwargs):
            if not self._on or not module.training or not torch.is_grad_enabled():
                return None
            try:
                micro = ctx["bwd"] % self.grad_acc_steps
                ctx["bwd"] += 1
                pos = [a for a in args if _is_tensor(a)]
                if not pos:
                    return None
                many = len(pos) > 1
                wanted = []
                for j, a in enumerate(pos):
                    tag = N.tag(f"{ctx['name']}.{'input_%d' % j if many else 'input'}:{micro}", self.rank,
                                "actv_grad")
                    if a.requires_grad:
                        edge = _gradient_edge(a)
                        wanted.append((edge.node, edge.output_nr, tag))
                    else:
                        self._pending_none.append((tag, ctx["vpp"], micro))
                if wanted:
                    # a throw-away node: its sequence number is below those of every node the module creates
                    mark = torch.empty((), requires_grad=True).view(())
                    ctx.setdefault("inputs", []).append((wanted, mark.grad_fn._sequence_nr(), micro))
            except Exception as exc:   # noqa: BLE001
                self._fail(f"monitor.forward_pre.{ctx['name']}", exc)
            return None
        return hook

    def _hook_input_grads(self, ctx, entry, outs):
        wanted, seq0, micro = entry
        vpp = ctx["vpp"]
        targets = {(id(node), nr): k for k, (node, nr, _) in enumerate(wanted)}
        slots = {}            # node created by the module -> [(slot in its next_functions, input k)]
        count = [0] * len(wanted)
        identity = set()
        todo, seen = [], set()
        for o in outs:
            node = o.grad_fn
            if node is None:
                continue
            if node._sequence_nr() <= seq0:        # the module returned a tensor it did not compute
                k = targets.get((id(node), o.output_nr))
                if k is not None and k not in identity:
                    identity.add(k)                 # its input itself: grad_input is that output's gradient
                    o.register_hook(self._grad_hook(wanted[k][2], vpp, micro))
                continue
            todo.append(node)
        while todo:
            node = todo.pop()
            if id(node) in seen:
                continue
            seen.add(id(node))
            for j, (nxt, nr) in enumerate(node.next_functions):
                if nxt is None:
                    continue
                k = targets.get((id(nxt), nr))
                if k is not None:
                    slots.setdefault(node, []).append((j, k))
                    count[k] += 1
                elif id(nxt) not in seen and seq0 < nxt._sequence_nr() < _ACC_GRAD_SEQ:
                    todo.append(nxt)
        sums = [{"sum": None, "left": c, "count": c, "tag": wanted[k][2], "vpp": vpp, "micro": micro}
                for k, c in enumerate(count)]
        for k, c in enumerate(count):
            if c == 0 and k not in identity:
                self._pending_none.append((wanted[k][2], vpp, micro))
            elif c:
                self._open_inputs.append(sums[k])
        for node, pairs in slots.items():
            node.register_hook(self._input_grad_hook(pairs, sums))

    def _input_grad_hook(self, pairs, sums):
        def hook(grad_inputs, grad_outputs):
            if not self._on:
                return None
            try:
                self._flush_none()
                for j, k in pairs:
                    st = sums[k]
                    g = grad_inputs[j] if j < len(grad_inputs) else None
                    if g is not None:
                        if st["count"] == 1:          # one edge (the usual case): no copy
                            st["sum"] = g
                        else:
                            st["sum"] = g.detach().clone() if st["sum"] is None else st["sum"].add_(g)
                    st["left"] -= 1
                    if st["left"] == 0:
                        self._close_input(st)
            except Exception as exc:   # noqa: BLE001
                self._fail("monitor.backward.input_grad", exc)
            return None
        return hook

    def _close_input(self, st):
        """The module's grad_input is complete (or the step ends): its row; the running sum is dropped."""
        if st.get("done"):
            return
        st["done"] = True
        self._add("actv_grad", st["tag"], st["vpp"], st["micro"], len(self._cur.vecs), st["sum"])
        st["sum"] = None

    def _flush_inputs(self):
        """Before the optimizer step: inputs some of whose gradient edges never ran get the sum received."""
        for st in self._open_inputs:
            if not st.get("done") and st["left"] < st["count"]:
                self._close_input(st)
        self._open_inputs = []

    def _hook_output_grads(self, ctx, outs, micro):
        many = len(outs) > 1
        for j, o in enumerate(outs):
            if o.requires_grad:
                tag = N.tag(f"{ctx['name']}.{'output_%d' % j if many else 'output'}:{micro}", self.rank,
                            "actv_grad")
                o.register_hook(self._grad_hook(tag, ctx["vpp"], micro))

    def _grad_hook(self, tag, vpp, micro):
        def hook(grad):
            if self._on:
                try:
                    self._flush_none()
                    self._add("actv_grad", tag, vpp, micro, len(self._cur.vecs), grad)
                except Exception as exc:   # noqa: BLE001
                    self._fail(f"monitor.backward.{tag.split('/')[0]}", exc)
            return None
        return hook

    def _flush_none(self):
        """Inputs that need no gradient get the reference's NaN row (its grad_input is None), once the
        backward has started (a forward without backward writes none)."""
        if self._pending_none:
            for tag, vpp, micro in self._pending_none:
                self._add("actv_grad", tag, vpp, micro, len(self._cur.vecs), None)
            self._pending_none = []

    def _attention_hook(self, name, vpp):
        ctx = {"n": 0, "warned": False}

        def hook(module, inputs, output):
            if not self._on or not module.training:
                return
            try:
                micro = ctx["n"] % self.grad_acc_steps
                ctx["n"] += 1
                vec = FT.attention_features(inputs[0], inputs[1], self.config["sa_order"]) \
                    if len(inputs) >= 2 else None
                if vec is None:
                    if not ctx["warned"]:
                        ctx["warned"] = True
                        log.warning("msprobe monitor: attention_hook %s: its first two inputs are not 4-D Q and K; "
                                    "skipped", name)
                    return
                self._cur.feats.append(("attention_hook", N.tag(f"{name}.attention:{micro}", self.rank, "qkt"),
                                        micro, vec))
            except Exception as exc:   # noqa: BLE001
                self._fail(f"monitor.attention_hook.{name}", exc)
        return hook

    def _linear_hook(self, name, vpp):
        ctx = {"n": 0}

        def hook(module, inputs, output):
            if not self._on or not module.training:
                return
            try:
                micro = ctx["n"] % self.grad_acc_steps
                ctx["n"] += 1
                if micro == self.grad_acc_steps - 1:
                    w = getattr(module, FT.linear_weight(module))
                    self._cur.feats.append(("linear_hook", N.tag(f"{name}.linear", self.rank, "sr"), 0,
                                            FT.linear_features(w, self._gen)))
            except Exception as exc:   # noqa: BLE001
                self._fail(f"monitor.linear_hook.{name}", exc)
        return hook

    def _fsdp_record(self, p, grad):
        """FSDP's unreduced gradient of parameter ``p`` (the rank's unsharded local gradient)."""
        if not self._on:
            return
        name = self.param2name.get(p)
        if name is None or name in self.duplicate:
            return
        try:
            self._add("grad_unreduced", N.tag(name, self.rank, "pre_grad"), _vpp(name), 0, len(self._cur.vecs),
                      grad)
        except Exception as exc:   # noqa: BLE001
            self._fail(f"monitor.pre_grad.{name}", exc)

    def _grad_of(self, p):
        if self.params_have_main_grad:
            g = getattr(p, "main_grad", None)
            return g if g is not None else p.grad
        return p.grad

    def _acc_hook(self, name, counts):
        def hook(p):
            if not self._on:
                return
            try:
                c = counts.get(name, 0) + 1
                counts[name] = c
                micro = (c - 1) % self.grad_acc_steps
                last = micro == self.grad_acc_steps - 1
                if self.config["monitor_mbs_grad"]:
                    # every micro step: the gradient accumulated so far, tagged '{param}:{micro}'
                    row = self._add("grad_unreduced", N.tag(f"{name}:{micro}", self.rank, "acc_grad"), _vpp(name),
                                    micro, len(self._cur.vecs), self._grad_of(p))
                    g = self._grad_of(p)
                    if last and _is_tensor(g):
                        self._cur.grads[name] = (g, g._version, self._cur.vecs[row])
                elif last:                              # the last micro step: the accumulated gradient
                    g = self._grad_of(p)
                    row = self._add("grad_unreduced", N.tag(name, self.rank, "acc_grad"), _vpp(name), 0,
                                    len(self._cur.vecs), g)
                    if _is_tensor(g):
                        self._cur.grads[name] = (g, g._version, self._cur.vecs[row])
            except Exception as exc:   # noqa: BLE001
                self._fail(f"monitor.acc_grad.{name}", exc)
        return hook

    def _optimizer_side(self, before):
        cfg = self.config
        opt = self.optimizer
        if not before:
            for name, p in self.name2param.items():
                if p.numel() and not self._no_shard(p):
                    self._add("param_updated", N.tag(name, self.rank, "param_updated"), _vpp(name), 0, -1, p)
            return
        state_missing = False
        single = not self._dist()
        for name, p in self.name2param.items():
            if self._no_shard(p):
                continue
            vpp = _vpp(name)
            if cfg["wg_distribution"] and name not in self.duplicate:
                g = self._grad_of(p)
                if g is None:
                    log.warning("grad is None: %s, maybe something wrong happened.", name)
                seen = self._cur.grads.get(name) if single else None
                if seen is not None and seen[0] is g and seen[1] == g._version:
                    # one process: nothing reduced the gradient since its unreduced record (same tensor,
                    # same version): the same statistics.  Across processes a collective may write it without
                    # bumping the version, so it is always measured again there.
                    self._add_vec("grad_reduced", N.tag(name, self.rank, "post_grad"), vpp, g, seen[2])
                else:
                    self._add("grad_reduced", N.tag(name, self.rank, "post_grad"), vpp, 0, -1, g)
            if cfg["param_distribution"] and p.numel():
                self._add("param_origin", N.tag(name, self.rank, "param_origin"), vpp, 0, -1, p)
            if cfg["mv_distribution"] or cfg["mg_direction"]:
                st = opt.state.get(p) if hasattr(opt, "state") else None
                m = st.get("exp_avg") if st else None
                if cfg["mv_distribution"]:
                    v = st.get("exp_avg_sq") if st else None
                    if m is None or v is None:
                        state_missing = True
                    else:
                        self._add("exp_avg", N.tag(name, self.rank, "exp_avg"), vpp, 0, -1, m)
                        self._add("exp_avg_sq", N.tag(name, self.rank, "exp_avg_sq"), vpp, 0, -1, v)
                if cfg["mg_direction"]:
                    g = FSDP.local(self._grad_of(p))
                    m = FSDP.local(m)
                    if g is not None:
                        with torch.no_grad():
                            if m is None or self.step == 0:
                                d = torch.ones((), dtype=torch.float32, device=g.device)
                            else:
                                d = ((torch.sign(g) * torch.sign(m)).sum(dtype=torch.float32) / g.numel() + 1) / 2
                        self._add("other", N.tag(name, self.rank, "mg_direction"), vpp, 0, -1, d)
        if cfg["ur_distribution"]:
            self._update_ratio(opt)
        if state_missing:
            log.warning("optimizer state can not accessed")

    def _no_shard(self, p):
        """An FSDP1 parameter with no element in this rank's shard (no gradient, no optimizer state here)."""
        return p in self._fsdp1_set and p.numel() == 0

    def _update_ratio(self, opt):
        """ur_distribution: Adam's bias-corrected update m^/(sqrt(v^)+eps) and ratio m^/sqrt(v^) of every
        monitored parameter, as 30-bin histograms over [-1, 1] (on the device)."""
        defaults = getattr(opt, "defaults", {})
        betas, eps = defaults.get("betas"), defaults.get("eps")
        if not betas or eps is None:
            return
        for name, p in self.name2param.items():
            st = opt.state.get(p)
            if not st or st.get("exp_avg") is None or st.get("exp_avg_sq") is None:
                continue
            step = st.get("step", opt.param_groups[0].get("step") if opt.param_groups else None)
            if step is None:
                log.warning("step of %s is None, maybe something wrong happened.", name)
                continue
            step = float(step)
            m = FSDP.local(st["exp_avg"]).detach().float() / (1 - betas[0] ** step)
            v = torch.sqrt(FSDP.local(st["exp_avg_sq"]).detach().float() / (1 - betas[1] ** step))
            ratio = m / v
            update = m / (v + eps)
            for kind, t in (("adam_update", update), ("adam_ratio", ratio)):
                self._cur.hists.append((N.tag(name, self.rank, kind),
                                        torch.histc(t, bins=heatmap.BINS, min=heatmap.LOW, max=heatmap.HIGH)))

    # ------------------------------------------------------------------------------------------ step end
    def _gather(self):
        """One host transfer: (meta rows, float64 matrix rows x numeric ops); the ur_distribution histograms
        (self._hist_host) and the communication calls (aggregated into 'other' rows) travel in it too."""
        cur = self._cur
        k = len(self.numeric_ops)
        meta = cur.meta
        vals = np.full((len(cur.vecs), k), np.nan)
        have = [i for i, v in enumerate(cur.vecs) if v is not None]
        calls = [(tag, c) for tag, cs in cur.cc.items() for c in cs]
        if not have and not cur.hists and not calls and not cur.feats:
            return meta, vals
        parts = ([cur.vecs[i] for i in have] + [c[0] for _, c in calls] + [h for _, h in cur.hists]
                 + [f[3] for f in cur.feats])
        try:
            flat = torch.cat(parts).to(torch.float64).cpu().numpy()
        except RuntimeError:     # tensors on several devices: one transfer per tensor
            flat = np.concatenate([p.to("cpu", torch.float64).numpy() for p in parts])
        n, m = len(have) * k, len(calls) * k
        nh = len(cur.hists) * heatmap.BINS
        if cur.hists:
            self._hist_host = flat[n + m:n + m + nh].reshape(len(cur.hists), -1)
        if cur.feats:
            self._feat_host = flat[n + m + nh:].reshape(len(cur.feats), 2)
        if have:
            numel = np.array([math.prod(cur.meta[i][5]) for i in have], dtype=np.float64)
            vals[have] = self.plan.finish(flat[:n].reshape(len(have), k), numel)
        if calls:
            numel = np.array([math.prod(c[1]) for _, c in calls], dtype=np.float64)
            cc_vals = self.plan.finish(flat[n:n + m].reshape(len(calls), k), numel)
            tags = list(cur.cc)
            owner = np.repeat(np.arange(len(tags)), [len(cur.cc[t]) for t in tags])
            agg = np.full((len(tags), k), np.nan)
            # the reference's aggregation of one op's calls in a step
            how = {"min": np.minimum, "max": np.maximum, "norm": np.add, "nans": np.add, "zeros": np.add,
                   "mean": np.add}
            counts = np.bincount(owner, minlength=len(tags)).astype(np.float64)
            for j, op in enumerate(self.numeric_ops):
                ufunc = how.get(op)
                if ufunc is None:
                    continue
                init = {np.minimum: np.inf, np.maximum: -np.inf}.get(ufunc, 0.0)
                col = np.full(len(tags), init)
                ufunc.at(col, owner, cc_vals[:, j])
                agg[:, j] = col / counts if op in ("zeros", "mean") else col
            meta = list(meta) + [("other", t, 0, 0, -1, cur.cc[t][-1][1], cur.cc[t][-1][2]) for t in tags]
            vals = np.concatenate([vals, agg])
        return meta, vals

    def _finish_step(self):
        meta, vals = self._gather()
        if self._cur.feats:
            self._write_features(self.step)
        if not meta and not self._cur.hists:
            return
        step = self.step
        tags = self._write_rows(step, meta, vals)
        if self.writer is not None and self.format == "tensorboard":
            if self._cur.hists:
                self._write_heatmaps(step)
            self.writer.flush()
        self._check_anomalies(step, meta, tags, vals)

    def _write_features(self, step):
        feats, host = self._cur.feats, self._feat_host
        if self.format == "csv":
            for prefix, ops in (("attention_hook", FT.ATTENTION_OPS), ("linear_hook", FT.LINEAR_OPS)):
                rows = [i for i, f in enumerate(feats) if f[0] == prefix]
                if not rows:
                    continue
                w = self._feat_writers.get(prefix)
                if w is None:
                    w = self._feat_writers[prefix] = CsvWriter(self.rank_dir, list(ops), self.config["ndigits"],
                                                               self.config["step_count_per_record"])
                w.write(prefix, step, [feats[i][1] for i in rows], host[rows], [None] * len(rows),
                        [None] * len(rows), vpp=[_vpp(feats[i][1].split("/")[0]) for i in rows],
                        micro=[feats[i][2] for i in rows])
        elif self.format == "tensorboard":
            pairs = []
            for (prefix, tag, _, _), row in zip(feats, host.tolist()):
                ops = FT.ATTENTION_OPS if prefix == "attention_hook" else FT.LINEAR_OPS
                pairs += [(f"{tag}_{op}", v) for op, v in zip(ops, row)]
            self.writer.scalars(pairs, step)

    def _write_heatmaps(self, step):
        for (tag, _), col in zip(self._cur.hists, self._hist_host):
            cols = self._heat.setdefault(tag, [])
            cols.append(col)
            if len(cols) > heatmap.MAX_COLUMNS:
                del cols[0]
            png, h, w = heatmap.heatmap_png(cols)
            self.writer.image(tag, png, h, w, step)

    def remove(self):
        """Remove every hook (the model and optimizer are left as they were)."""
        self._uninstall()
        if self._cc is not None:
            self._cc.remove()
        for h in self._opt_handles:
            h.remove()
        self._opt_handles = []
        self._on = False
        self._close_writer()

