"""TrainerMon for MindSpore (PyNative): the training monitor of spec checks_and_monitors.md 4.11.

    from msprobe.mindspore import TrainerMon
    monitor = TrainerMon("monitor_config.json", process_group=None, params_have_main_grad=False)
    monitor.set_monitor(net, optimizer=opt, grad_acc_steps=1)
    # then the usual loop: loss, grads = grad_fn(x, y); opt(grads)

A thin adapter over msprobe.core.monitor (config validation, names, anomaly rules, CSV writer, anomaly.json
are shared with the PyTorch monitor; the files are the same):

* The step is seen through the optimizer cell's forward pre-hook (it receives the gradients, in the order of
  the optimizer's parameters: ``grad_reduced``, Adam's moments, parameters before the update) and forward
  hook (parameters after the update, then the step's records are written).  On a step outside
  ``step_interval`` (or before ``start_step``, after ``collect_times``) both return after one flag check and
  no cell hook is installed; the cell hooks (activations) are installed before a collected step and removed
  after it.
* Each tensor is reduced with MindSpore ops on its own device to a small vector (``stats.StatPlan``); the
  vectors of the step are stacked and brought to the host with one ``asnumpy`` at the end of the step.
  On the CPU (no transfer to save, and PyNative ops cost far more than their arithmetic) each tensor is
  reduced with numpy over ``asnumpy``'s view of it instead.
* A hook never raises into the training and never changes a tensor (every hook returns None): a failure is
  logged once per cause (``dump_error_info.log`` in the rank folder) and that step's records are dropped.

Formats ``csv`` and ``api`` (``tensorboard`` is refused); PyNative mode only (GRAPH_MODE is refused).
"""

from __future__ import annotations

import logging
import os

import numpy as np
import mindspore as ms
from mindspore import ops

from msprobe.core.errors import MsprobeError
from msprobe.core.monitor import names as N
from msprobe.core.monitor.anomaly import AnomalyDetector
from msprobe.core.monitor.config import check_output_dir, load_config
from msprobe.core.monitor.trainer_base import (TrainerMonBase, checked_grad_acc_steps, module_target_hits,
                                               param_target_hits, raise_missing_target, remove_handles,
                                               tensors_in, vpp_of as _vpp, xy_directions)
from msprobe.core.monitor.writers import CsvWriter
from msprobe.mindspore.monitor.stats import StatPlan

log = logging.getLogger("msprobe")

# Adam-like optimizers' first/second moments, by attribute name (a ParameterTuple in parameter order)
MOMENT_ATTRS = (("moment1", "moment2"), ("moments1", "moments2"), ("exp_avg", "exp_avg_sq"))
# switches of the PyTorch monitor that this adapter does not implement (a warning, then ignored)
UNSUPPORTED = ("stack_info", "print_struct", "recording_l2_features", "monitor_mbs_grad")


def _is_tensor(x):
    return isinstance(x, ms.Tensor)


def _tensors(obj):
    return tensors_in(obj, ms.Tensor)


def _comm(fn, default, *args):
    try:
        from mindspore import communication as C
        return getattr(C, fn)(*args)
    except Exception:   # noqa: BLE001 - not initialised (one process): the default
        return default


def _opt_params(optimizer):
    """The optimizer's parameters, in the order of the gradients it receives."""
    params = getattr(optimizer, "_parameters", None)
    if params is not None and not callable(params):
        return list(params)
    groups = getattr(optimizer, "param_groups", None)
    if groups:
        return [p for g in groups for p in g["params"]]
    params = getattr(optimizer, "parameters", None)
    if params is not None and not callable(params):
        return list(params)
    raise MsprobeError(f"TrainerMon.set_monitor: optimizer {type(optimizer).__name__} has no '_parameters', "
                       f"'param_groups' or 'parameters'; pass the mindspore optimizer that updates the network")


class _Step:
    __slots__ = ("index", "vecs", "meta")

    def __init__(self):
        self.index = {}    # tag -> row
        self.vecs = []     # row -> raw statistics vector (device tensor) or None (NaN row)
        self.meta = []     # row -> (prefix, tag, vpp, micro, call_id, shape, dtype)


class TrainerMon(TrainerMonBase):
    _ALERT_NAMES_FILE = False

    def __init__(self, config_file_path, process_group=None, params_have_main_grad=True):
        self.config_file_path = config_file_path
        cfg = load_config(config_file_path)
        if cfg["format"] == "tensorboard":
            raise MsprobeError(f"monitor config {config_file_path}: format 'tensorboard' is not supported by the "
                               f"MindSpore monitor (as the reference); use \"csv\" or \"api\"")
        for key in UNSUPPORTED:
            if cfg[key]:
                log.warning("msprobe monitor: %s is not supported by the MindSpore monitor; ignored", key)
        if cfg["cc_distribution"].get("enable"):
            log.warning("msprobe monitor: cc_distribution is not supported by the MindSpore monitor; ignored")
        if str(os.environ.get("DYNAMIC_MONITOR", "")).lower() == "true":
            log.warning("msprobe monitor: DYNAMIC_MONITOR is not supported by the MindSpore monitor; the config is "
                        "read once")
        log.info("current config: %s", cfg)
        self.config = cfg
        self.ops = cfg["ops"]
        self.plan = StatPlan(self.ops, cfg["eps"])
        self.numeric_ops = self.plan.ops
        self.format = cfg["format"]
        self.detector = AnomalyDetector(cfg["alert"]["rules"], tuple(self.numeric_ops))
        self.process_group = process_group
        self.params_have_main_grad = bool(params_have_main_grad)   # accepted; the gradients are the optimizer's input
        self.output_base = check_output_dir(os.environ.get("MONITOR_OUTPUT_DIR", "./monitor_output"))
        self.rank = int(_comm("get_rank", 0))
        self.world = int(_comm("get_group_size", 1))
        self.enabled = not cfg["module_ranks"] or self.rank in cfg["module_ranks"]
        self.pp_stage = int(_comm("get_rank", 0, process_group)) if process_group is not None else 0
        mates = _comm("get_process_group_ranks", None, process_group) if self.world > 1 else None
        self.group_mates = list(mates) if mates else [self.rank]
        self._init_state(_Step())
        self.opt_names = []       # name (or None: not monitored) per optimizer parameter
        self._moments = None
        self._updates = 0         # optimizer calls seen (the moments are meaningful after the first)

    # ------------------------------------------------------------------------------------------ setup
    def set_monitor(self, model, optimizer=None, grad_acc_steps=1, tp_group=None, dp_group=None,
                    start_iteration=0):
        """Attach to ``model`` (a Cell or a list of model chunks) and ``optimizer`` (a mindspore optimizer)."""
        if ms.get_context("mode") != ms.PYNATIVE_MODE:
            raise MsprobeError("TrainerMon (MindSpore) needs PyNative mode: GRAPH_MODE is not supported; call "
                               "mindspore.set_context(mode=mindspore.PYNATIVE_MODE) before set_monitor")
        self.grad_acc_steps = grad_acc_steps = checked_grad_acc_steps(grad_acc_steps)
        chunks = list(model) if isinstance(model, (list, tuple)) else [model]
        if not chunks or not all(isinstance(c, ms.nn.Cell) for c in chunks):
            raise MsprobeError("TrainerMon.set_monitor: model must be a mindspore.nn.Cell or a list of them")
        if optimizer is None or not isinstance(optimizer, ms.nn.Cell):
            raise MsprobeError("TrainerMon.set_monitor: optimizer must be a mindspore optimizer (an nn.Cell such as "
                               "nn.Adam or mint.optim.AdamW; the monitor sees each step through its call)")
        self.model, self.optimizer = chunks, optimizer
        self.step = int(start_iteration)
        self._select(chunks, optimizer, tp_group, dp_group)
        self._moments = self._find_moments(optimizer)
        if not self.enabled:
            log.info("msprobe monitor: rank %d is not in module_ranks %s; not monitored", self.rank,
                     self.config["module_ranks"])
            return
        log.info("The optimizer type is %s", type(optimizer).__name__)
        self._open_outputs()
        self._opt_handles = [optimizer.register_forward_pre_hook(self._pre_step),
                             optimizer.register_forward_hook(self._post_step)]
        self._on = self._collecting(self.step)
        if self._on:
            self._install()
        log.info("> %d modules are monitored.", len(self.modules))

    def _select(self, chunks, optimizer, tp_group, dp_group):
        cfg = self.config
        targets = list(cfg["targets"])
        squash = cfg["squash_name"]
        dp_dup = dp_group is not None and int(_comm("get_rank", 0, dp_group)) != 0
        tp_rank = int(_comm("get_rank", 0, tp_group)) if tp_group is not None else 0
        matched = {""}
        all_modules, all_params = [], []
        by_id = {}
        for v, chunk in enumerate(chunks):
            pre = f"{v}:"
            for pname, p in chunk.parameters_and_names():
                if not p.requires_grad:
                    continue
                all_params.append(pname)
                sq = N.squash_name(pname, squash)
                hits = param_target_hits(targets, pre, pname, sq)
                if not hits:
                    continue
                matched.update(hits)
                name = pre + sq
                if name in self.name2param:
                    name = pre + pname
                self.name2param[name] = p
                by_id[id(p)] = name
                if dp_dup or (tp_rank != 0 and not getattr(p, "tensor_model_parallel", False)):
                    self.duplicate.add(name)
            for mname, cell in chunk.cells_and_names():
                sq = N.squash_name(mname, squash)
                all_modules.append(mname)
                hits = module_target_hits(targets, pre, mname, sq)
                matched.update(hits)
                if cfg["xy_distribution"] and (cfg["all_xy"] or hits):
                    self.modules.append((cell, pre + sq, v))
        raise_missing_target(self.config_file_path, targets, matched, all_modules, all_params)
        self.opt_names = [by_id.get(id(p)) for p in _opt_params(optimizer)]

    def _find_moments(self, optimizer):
        for m_attr, v_attr in MOMENT_ATTRS:
            m, v = getattr(optimizer, m_attr, None), getattr(optimizer, v_attr, None)
            if m is not None and v is not None and not callable(m):
                m, v = list(m), list(v)
                if len(m) == len(self.opt_names) == len(v):
                    return m, v
        if self.config["mv_distribution"] or self.config["mg_direction"]:
            log.warning("msprobe monitor: optimizer %s has no Adam moments (%s); mv_distribution and mg_direction "
                        "record nothing", type(optimizer).__name__,
                        ", ".join(f"{a}/{b}" for a, b in MOMENT_ATTRS))
        return None

    def _open_outputs(self):
        self._open_rank_dir()
        cfg = self.config
        if self.format == "csv":
            self.writer = CsvWriter(self.rank_dir, self.ops, cfg["ndigits"], cfg["step_count_per_record"])
        self._open_anomaly_file()

    # ------------------------------------------------------------------------------------------ stepping
    def _collecting(self, step):
        return (self.enabled and self.collected < self.config["collect_times"] and step >= self.config["start_step"]
                and (step - self.config["start_step"]) % self.config["step_interval"] == 0)

    def _install(self):
        if self._installed:
            return
        cfg = self.config
        try:
            if cfg["xy_distribution"]:
                fwd, bwd = xy_directions(cfg)
                for cell, name, vpp in self.modules:
                    ctx = {"name": name, "vpp": vpp, "fwd": 0, "bwd": 0}
                    if fwd:
                        self._handles.append(cell.register_forward_hook(self._fwd_hook(ctx), with_kwargs=True))
                    if bwd:
                        self._handles.append(cell.register_backward_hook(self._bwd_hook(ctx)))
        except Exception as exc:   # noqa: BLE001
            self._fail("monitor.install", exc)
        self._installed = True

    def _fail(self, where, exc):
        self.errlog.record(where, exc)

    def _pre_step(self, cell, inputs):
        if not self._on:
            return None
        try:
            grads = inputs[0] if len(inputs) == 1 and isinstance(inputs[0], (tuple, list)) else inputs
            self._optimizer_side(grads)
        except Exception as exc:   # noqa: BLE001
            self._fail("monitor.optimizer_pre_step", exc)
        return None

    def _post_step(self, cell, inputs, output):
        self._updates += 1
        if self._on:
            try:
                if self.config["param_distribution"]:
                    for name, p in self.name2param.items():
                        self._add("param_updated", N.tag(name, self.rank, "param_updated"), _vpp(name), 0, -1, p)
                self._finish_step()
            except Exception as exc:   # noqa: BLE001
                self._fail("monitor.step_end", exc)
            self._cur = _Step()
            self.collected += 1
            if self.collected >= self.config["collect_times"]:
                log.info("Finish monitor")
        self.step += 1
        try:
            nxt = self._arm(self.step)
        except Exception as exc:   # noqa: BLE001
            self._fail("monitor.next_step", exc)
            nxt = False
        self._on = nxt
        return None

    # ------------------------------------------------------------------------------------------ records
    def _add(self, prefix, tag, vpp, micro, call_id, t, vec=None):
        if _is_tensor(t):
            if vec is None:
                vec = self.plan(t)
            meta = (prefix, tag, vpp, micro, call_id, [int(d) for d in t.shape], _dtype(t))
        else:
            vec, meta = None, (prefix, tag, vpp, micro, call_id, None, None)
        return self._put_row(tag, vec, meta)

    def _io(self, prefix, ctx, role, tensors, micro):
        many = len(tensors) > 1
        for i, t in enumerate(tensors):
            r = f"{role}_{i}" if many else role
            self._add(prefix, N.tag(f"{ctx['name']}.{r}:{micro}", self.rank, prefix), ctx["vpp"], micro,
                      len(self._cur.vecs), t)

    def _fwd_hook(self, ctx):
        def hook(cell, inputs, kwargs, output):
            if not self._on:
                return None
            try:
                micro = ctx["fwd"] % self.grad_acc_steps
                ctx["fwd"] += 1
                self._io("actv", ctx, "input", _tensors(inputs) + _tensors(kwargs), micro)
                self._io("actv", ctx, "output", _tensors(output), micro)
            except Exception as exc:   # noqa: BLE001
                self._fail(f"monitor.forward.{ctx['name']}", exc)
            return None
        return hook

    def _bwd_hook(self, ctx):
        def hook(cell, grad_input, grad_output):
            if not self._on:
                return None
            try:
                micro = ctx["bwd"] % self.grad_acc_steps
                ctx["bwd"] += 1
                for role, grads in (("input", grad_input), ("output", grad_output)):
                    grads = list(grads) if isinstance(grads, (tuple, list)) else [grads]
                    many = len(grads) > 1
                    for i, g in enumerate(grads):
                        r = f"{role}_{i}" if many else role
                        self._add("actv_grad", N.tag(f"{ctx['name']}.{r}:{micro}", self.rank, "actv_grad"),
                                  ctx["vpp"], micro, len(self._cur.vecs), g if _is_tensor(g) else None)
            except Exception as exc:   # noqa: BLE001
                self._fail(f"monitor.backward.{ctx['name']}", exc)
            return None
        return hook

    def _optimizer_side(self, grads):
        cfg = self.config
        grads = list(grads)
        single = self.world == 1
        moments = self._moments if self._updates > 0 else None
        state_missing = False
        for i, name in enumerate(self.opt_names):
            if name is None:
                continue
            vpp = _vpp(name)
            p = self.name2param[name]
            g = grads[i] if i < len(grads) else None
            if cfg["wg_distribution"] and name not in self.duplicate:
                if g is None:
                    log.warning("grad is None: %s, maybe something wrong happened.", name)
                row = self._add("grad_reduced", N.tag(name, self.rank, "post_grad"), vpp, 0, -1, g)
                if single:
                    # one process: the optimizer's gradient is the accumulated, unreduced one too (same numbers)
                    self._add("grad_unreduced", N.tag(name, self.rank, "acc_grad"), vpp, 0, -1, g,
                              vec=self._cur.vecs[row])
            if cfg["param_distribution"]:
                self._add("param_origin", N.tag(name, self.rank, "param_origin"), vpp, 0, -1, p)
            if cfg["mv_distribution"] or cfg["mg_direction"]:
                m = moments[0][i] if moments else None
                if cfg["mv_distribution"]:
                    if moments is None:
                        state_missing = True
                    else:
                        self._add("exp_avg", N.tag(name, self.rank, "exp_avg"), vpp, 0, -1, m)
                        self._add("exp_avg_sq", N.tag(name, self.rank, "exp_avg_sq"), vpp, 0, -1, moments[1][i])
                if cfg["mg_direction"] and _is_tensor(g):
                    if m is None or self.step == 0:
                        d = ms.Tensor(1.0, ms.float32)
                    else:
                        agree = (ops.sign(g.astype(ms.float32)) * ops.sign(m.astype(ms.float32))).sum()
                        d = (agree / g.size + 1) / 2
                    self._add("other", N.tag(name, self.rank, "mg_direction"), vpp, 0, -1, d)
        if state_missing and self._moments is not None:
            log.warning("optimizer state can not accessed")

    # ------------------------------------------------------------------------------------------ step end
    def _gather(self):
        """One host transfer: (meta rows, float64 matrix rows x numeric ops)."""
        cur = self._cur
        k = len(self.numeric_ops)
        vals = np.full((len(cur.vecs), k), np.nan)
        have = [i for i, v in enumerate(cur.vecs) if v is not None]
        if have:
            raw = self.plan.to_host([cur.vecs[i] for i in have])
            numel = np.array([float(np.prod(cur.meta[i][5])) for i in have])
            vals[have] = self.plan.finish(raw, numel)
        return cur.meta, vals

    def _finish_step(self):
        meta, vals = self._gather()
        if not meta:
            return
        tags = self._write_rows(self.step, meta, vals)
        self._check_anomalies(self.step, meta, tags, vals)

    def remove(self):
        """Remove every hook (the network and the optimizer are left as they were)."""
        self._uninstall()
        remove_handles(self._opt_handles)
        self._opt_handles = []
        self._on = False


def _dtype(t):
    """MindSpore's name of the dtype ('Float32'), as the reference's MindSpore monitor writes it."""
    return str(t.dtype)

