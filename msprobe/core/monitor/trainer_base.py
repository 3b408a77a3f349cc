"""What the PyTorch and MindSpore TrainerMon share, free of any framework (no torch, no mindspore here).

``TrainerMonBase`` holds the step's row bookkeeping, the writing of a step's records, the anomaly report, the
api-format metrics and the hook removal; each framework's TrainerMon keeps its own hooks and tensor code and
fills the attributes these methods read (``_cur``, ``_last``, ``numeric_ops``, ``writer``, ``detector``,
``anomaly_path``, ``anomalies``, ``rank``, ``pp_stage``, ``group_mates``, ``_handles``, ``_installed``,
``_gather``)."""

from __future__ import annotations

import logging
import os

import numpy as np

from msprobe.core.dump.errorlog import ErrorLog
from msprobe.core.errors import MsprobeError
from msprobe.core.monitor import names as N
from msprobe.core.monitor.anomaly import YELLOW, RESET
from msprobe.core.monitor.writers import write_anomalies

log = logging.getLogger("msprobe")

MAX_ALERT_LINES = 20          # console lines per step; the rest are counted (all are in anomaly.json)


def vpp_of(name):
    """The model chunk of a monitored name '{vpp}:{name}' (0 without that head)."""
    head = name.split(":", 1)[0]
    return int(head) if head.isdigit() else 0


def finish_stats(cols, raw: np.ndarray, numel: np.ndarray) -> np.ndarray:
    """Raw values (rows x ops, float64) -> statistics, in place: sqrt of the sums of squares, sums and
    counts divided by the element count.  ``cols``: op -> column."""
    with np.errstate(invalid="ignore", divide="ignore"):
        if "norm" in cols:
            raw[:, cols["norm"]] = np.sqrt(raw[:, cols["norm"]])
        for op in ("mean", "zeros"):
            if op in cols:
                raw[:, cols[op]] = raw[:, cols[op]] / numel
    return raw


def tensors_in(obj, tensor_type):
    """Tensors of a module's inputs/outputs, in order (tuples, lists and dict values, one level deep)."""
    if isinstance(obj, tensor_type):
        return [obj]
    if isinstance(obj, (tuple, list)):
        return [x for x in obj if isinstance(x, tensor_type)]
    if isinstance(obj, dict):
        return [x for x in obj.values() if isinstance(x, tensor_type)]
    return []


def xy_directions(cfg):
    """(forward, backward) activations to record: forward_only and backward_only both set record neither."""
    if cfg["forward_only"] and cfg["backward_only"]:
        return False, False
    return not cfg["backward_only"], not cfg["forward_only"]


def remove_handles(handles):
    """Remove every hook handle; one that fails to go is passed over."""
    for h in handles:
        try:
            h.remove()
        except Exception:   # noqa: BLE001
            pass


def checked_grad_acc_steps(grad_acc_steps):
    if not isinstance(grad_acc_steps, int) or isinstance(grad_acc_steps, bool) or grad_acc_steps < 1:
        log.warning("msprobe monitor: grad_acc_steps %r is not a positive integer; 1 is used", grad_acc_steps)
        return 1
    return grad_acc_steps


def raise_missing_target(config_file_path, targets, matched, all_modules, all_params):
    """The first of ``targets`` not in ``matched`` -> MsprobeError naming close module/parameter names."""
    missing = [t for t in targets if t not in matched]
    if not missing:
        return
    t = missing[0]
    bare = t.split(":", 1)[1] if ":" in t and t.split(":", 1)[0].isdigit() else t
    close = N.close_names(bare, [m for m in all_modules if m] + all_params)
    hint = f"; close names: {', '.join(close)}" if close else ""
    some = ", ".join([m for m in all_modules if m][:8])
    raise MsprobeError(f"monitor config {config_file_path}: targets key {t!r} is neither a module nor a "
                       f"parameter (prefix) of the model{hint} (modules: {some}, ...)")


def param_target_hits(targets, pre, pname, sq):
    """The targets that select parameter ``pname`` (squashed ``sq``) of chunk ``pre`` ('{vpp}:'): prefixes."""
    return [t for t in targets if pname.startswith(t) or (pre + sq).startswith(t) or
            (pre + pname).startswith(t) or sq.startswith(t)]


def module_target_hits(targets, pre, mname, sq):
    """The targets that name module ``mname`` (squashed ``sq``) of chunk ``pre``, with or without the chunk."""
    return [t for t in targets if t in (mname, sq, pre + mname, pre + sq)]


class TrainerMonBase:
    # the console line that counts the alerts beyond MAX_ALERT_LINES names anomaly.json (PyTorch) or not
    _ALERT_NAMES_FILE = True

    def _init_state(self, step_record):
        """The state before set_monitor (``self.output_base`` is set); ``step_record``: an empty step."""
        self.rank_dir = None
        self.errlog = ErrorLog(self.output_base)
        self.writer = None
        self.anomaly_path = None
        self.anomalies = {}
        self.step = 0
        self.collected = 0
        self.grad_acc_steps = 1
        self.model = None
        self.optimizer = None
        self.name2param = {}
        self.duplicate = set()
        self.modules = []         # (module or cell, name, vpp)
        self._on = False          # the current step is collected
        self._installed = False
        self._handles = []        # module / parameter hooks of a collected step
        self._opt_handles = []
        self._cur = step_record
        self._last = {}           # api format: the last written step's metrics

    # ------------------------------------------------------------------------------------------ outputs
    def _open_rank_dir(self, announce_append=False):
        """This rank's folder (``append_output``: the existing one in the given time range), created unless
        the format is api (nothing is written there: a failure log would create it); the error log goes there."""
        self.rank_dir = os.path.join(self.output_base, N.rank_dir_name(self.rank))
        if self.config["append_output"]:
            # continue this rank's folder whose time tag lies in the given closed range (the reference's way)
            from msprobe.core.monitor.csv2tb import rank_dirs
            lo, hi = self.config["append_output"]
            found = rank_dirs(self.output_base, lo, hi).get(self.rank)
            if found:
                self.rank_dir = found
                if announce_append:
                    log.info("msprobe monitor: append_output: writing into %s", found)
            else:
                log.warning("msprobe monitor: append_output %s: no folder of rank %d in that range; a new one is "
                            "written", self.config["append_output"], self.rank)
        if self.format != "api" and not os.path.isdir(self.rank_dir):
            try:
                os.makedirs(self.rank_dir, mode=0o750, exist_ok=False)
            except OSError as exc:
                raise MsprobeError(f"MONITOR_OUTPUT_DIR {self.output_base}: cannot create the rank folder "
                                   f"({exc.strerror})") from None
        self.errlog = ErrorLog(self.rank_dir)

    def _open_anomaly_file(self):
        """alert.dump: an empty anomaly.json of this rank, rewritten whole at each step with anomalies."""
        if self.config["alert"]["dump"]:
            adir = os.path.join(self.output_base, "anomaly_detected", f"rank{self.rank}")
            self.anomaly_path = os.path.join(adir, "anomaly.json")
            write_anomalies(self.anomaly_path, {})

    # ------------------------------------------------------------------------------------------ rows
    def _put_row(self, tag, vec, meta):
        """The step's row of ``tag`` (a tag seen again in the step replaces its row); returns the row."""
        cur = self._cur
        row = cur.index.get(tag)
        if row is None:
            row = cur.index[tag] = len(cur.vecs)
            cur.vecs.append(vec)
            cur.meta.append(meta)
        else:
            cur.vecs[row] = vec
            cur.meta[row] = meta
        return row

    def _arm(self, step):
        """Whether ``step`` is collected; its hooks are installed (or removed) accordingly."""
        nxt = self._collecting(step)
        if nxt and not self._installed:
            self._install()
        elif not nxt and self._installed:
            self._uninstall()
        return nxt

    def _uninstall(self):
        remove_handles(self._handles)
        self._handles = []
        self._installed = False

    # ------------------------------------------------------------------------------------------ step end
    def _write_rows(self, step, meta, vals):
        """Keep the step's metrics for the api format and write them, one call per prefix; returns the tags."""
        prefixes = np.array([m[0] for m in meta])
        tags = [m[1] for m in meta]
        self._last = {"meta": meta, "vals": vals}
        if self.writer is not None:
            for prefix in dict.fromkeys(prefixes.tolist()):
                rows = np.nonzero(prefixes == prefix)[0].tolist()
                self.writer.write(prefix, step, [tags[r] for r in rows], vals[rows],
                                  [meta[r][5] for r in rows], [meta[r][6] for r in rows],
                                  vpp=[meta[r][2] for r in rows], micro=[meta[r][3] for r in rows])
        return tags

    def _check_anomalies(self, step, meta, tags, vals):
        if self.detector.enabled:
            self._report(self.detector.check(tags, vals, step, call_ids=[m[4] for m in meta]))

    def _report(self, found):
        if not found:
            return
        for a in found[:MAX_ALERT_LINES]:
            log.warning("%s%s%s", YELLOW, a.console(), RESET)
        if len(found) > MAX_ALERT_LINES:
            where = f" (all in {self.anomaly_path})" if self._ALERT_NAMES_FILE and self.anomaly_path else ""
            log.warning("%s> ... and %d more anomalies at step %d%s%s", YELLOW, len(found) - MAX_ALERT_LINES,
                        found[0].step, where, RESET)
        if self.anomaly_path:
            for a in found:
                key, rec = a.record(self.rank, self.pp_stage, self.group_mates)
                self.anomalies[key] = rec
            write_anomalies(self.anomaly_path, self.anomalies)
            log.info("anomaly.json is at %s.", os.path.dirname(self.anomaly_path))

    # ------------------------------------------------------------------------------------------ api format
    def _metrics(self, prefixes):
        """{tag: {op: value}} of the current step's records with a prefix in ``prefixes`` (one transfer)."""
        if self._cur.vecs:
            meta, vals = self._gather()
        else:
            meta, vals = self._last.get("meta", []), self._last.get("vals", np.zeros((0, 0)))
        out = {}
        for (prefix, tag, *rest), row in zip(meta, vals):
            if prefix in prefixes:
                d = dict(zip(self.numeric_ops, row.tolist()))
                d["shape"], d["dtype"] = rest[3], rest[4]
                out[tag] = d
        return out

    def generate_xy_metrics(self):
        """(actv, actv_grad) of the current (or last collected) step: {tag: {op: value}}."""
        return self._metrics(("actv",)), self._metrics(("actv_grad",))

    def generate_wgrad_metrics(self, post_grad_dict=None):
        """(reduced, unreduced) weight-gradient statistics: {tag: {op: value}}."""
        return self._metrics(("grad_reduced",)), self._metrics(("grad_unreduced",))

    def generate_mv_metrics(self):
        return self._metrics(("exp_avg",)), self._metrics(("exp_avg_sq",))
