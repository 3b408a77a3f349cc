"""PrecisionDebugger in MindSpore GRAPH_MODE: MindSpore's own kernel dump, converted at every step().

In a static graph no Python runs per op, so no hook can record anything. Instead, at construction this
service writes a MindSpore dump config (a temporary file) and points ``MINDSPORE_DUMP_CONFIG`` at it;
MindSpore reads it when it compiles the first graph and then writes, for every graph run (iteration),
one ``.npy`` per kernel input/output (CPU) or one ``statistic.csv`` (GPU/Ascend, task statistics) under
``dump_path/mindspore_dump/rank_{R}/{net}/{graph}/{iteration}/``, with the kernel graph IR in
``rank_{R}/graphs/``. ``step()`` converts the iterations written since the previous step() into
``dump_path/step{N}/rank[{R}]/dump.json, stack.json, construct.json`` (msprobe.core.dump.ms_graph).

* task statistics on CPU: MindSpore's CPU dump stores tensors only, so the tensors are dumped, msprobe
  computes the statistics from them, and the tensor files are removed after the conversion (the IR stays);
* task tensor: the tensors are also copied to ``dump_tensor_data/``; MindSpore's files are kept, so
  ``msprobe -f mindspore code_mapping`` reads them with the IR;
* level L0: Cells only, L1: kernels only, mix and L2: both; data_mode all/input/output and list (kernel
  names, ``name-regex(...)``, at L2) go to MindSpore's config; step selects the iterations.

Nothing here may stop the training: a conversion failure is one warning line and the step goes on.
"""
import atexit
import json
import logging
import os
import shutil
import tempfile
import time

from msprobe.core.dump.errorlog import ErrorLog
from msprobe.core.dump.lifecycle import PREVIOUS_PREFIX, DumpLifecycle, rank_dir_name
from msprobe.core.errors import MsprobeError

log = logging.getLogger("msprobe")

RAW_DIR = "mindspore_dump"
DUMP_BACKENDS = ("CPU", "GPU", "Ascend")
_STAT_CATEGORY = ["max", "min", "avg", "l2norm"]


def _device_target():
    import mindspore as ms
    try:
        return ms.get_context("device_target")
    except Exception:
        return "CPU"


def _jit_level():
    import mindspore as ms
    try:
        cfg = ms.get_context("jit_config") or {}
        return str(cfg.get("jit_level", "")) if isinstance(cfg, dict) else ""
    except Exception:
        return ""


def _rank():
    try:
        from mindspore.communication import get_rank
        from mindspore.communication.management import GlobalComm
        if getattr(GlobalComm, "INITED", False):
            return get_rank()
    except Exception:
        pass
    return None


def check_static_config(cfg, device: str, jit_level: str = "") -> None:
    """Everything GRAPH_MODE cannot do with this config: one MsprobeError line."""
    if device not in DUMP_BACKENDS:
        raise MsprobeError(f"GRAPH_MODE dump needs MindSpore's own kernel dump, which the {device!r} backend does not "
                           f"have (it exists on {', '.join(DUMP_BACKENDS)}); run on one of them, or in PyNative mode "
                           "(mindspore.set_context(mode=mindspore.PYNATIVE_MODE)) with levels L0/L1/mix")
    if device == "Ascend" and jit_level.upper() == "O2":
        raise MsprobeError("GRAPH_MODE with jit_level O2 (GE) dumps through CANN's adump, whose layout this msprobe does "
                           "not convert; set jit_config jit_level O0 or O1 (mindspore.set_context(jit_config="
                           "{'jit_level': 'O0'})) for the kernel-by-kernel dump")
    if cfg.task not in ("statistics", "tensor", "structure"):
        raise MsprobeError(f'task "{cfg.task}" records Python calls and does not work in GRAPH_MODE (no Python runs per '
                           'op in a static graph); use task "statistics" or "tensor" there, or run in PyNative mode')
    if cfg.level == "debug":
        raise MsprobeError('level "debug" (PrecisionDebugger.save) needs PyNative mode; in GRAPH_MODE use level L0, L1, '
                           'mix or L2')
    if cfg.scope:
        raise MsprobeError('"scope" is not supported in GRAPH_MODE (MindSpore dumps whole graphs); use "list" with '
                           'kernel names or name-regex(...) at level L2')


def ms_dump_settings(cfg, raw_path: str, device: str) -> dict:
    """The MindSpore dump config (``MINDSPORE_DUMP_CONFIG``) for ``cfg``."""
    io_modes = [m for m in cfg.data_mode if m in ("input", "output")] if "all" not in cfg.data_mode else []
    io = {"input": 1, "output": 2}[io_modes[0]] if len(io_modes) == 1 else 0
    saved = "statistic" if (cfg.task == "statistics" and cfg.summary_mode == "statistics" and device != "CPU") \
        else "tensor"
    kernels = list(cfg.list) if cfg.level == "L2" else []
    return {
        "common_dump_settings": {
            "op_debug_mode": 0,
            "dump_mode": 1 if kernels else 0,
            "path": raw_path,
            "net_name": "Net",
            "iteration": "|".join(str(s) for s in cfg.step) if cfg.step else "all",
            "saved_data": saved,
            "input_output": io,
            "kernels": kernels,
            "support_device": list(cfg.rank) if cfg.rank else [0, 1, 2, 3, 4, 5, 6, 7],
            "statistic_category": list(_STAT_CATEGORY),
        },
        "e2e_dump_settings": {"enable": True, "trans_flag": True},
    }


class StaticGraphService:
    """start/stop/step/set_init_step/end of PrecisionDebugger in GRAPH_MODE (see the module docstring)."""

    def __init__(self, cfg):
        device = _device_target()
        check_static_config(cfg, device, _jit_level())
        self.cfg = cfg
        self.device = device
        self.raw_root = os.path.join(cfg.dump_path, RAW_DIR)
        self.errors = ErrorLog(cfg.dump_path)
        self._started = time.strftime("%Y%m%d%H%M%S")
        self._claimed = set()      # step rank dirs this process wrote (an earlier run's are moved aside)
        self._set_aside_done = False
        self._raw_aside()
        self.settings = ms_dump_settings(cfg, self.raw_root, device)
        self.keep_raw = cfg.task == "tensor"
        self.current = 0
        self.model_class = None
        self.done = set()          # (graph dir) already converted
        self.converted_steps = []
        self.ended = False
        if os.environ.get("MINDSPORE_DUMP_CONFIG"):
            log.warning("MINDSPORE_DUMP_CONFIG=%s is replaced by msprobe's dump config for this process",
                        os.environ["MINDSPORE_DUMP_CONFIG"])
        self._tmp = tempfile.mkdtemp(prefix="msprobe-msdump-")
        self.config_file = os.path.join(self._tmp, "mindspore_dump_config.json")
        with open(self.config_file, "w", encoding="utf-8") as fh:
            json.dump(self.settings, fh, indent=2)
        os.environ["MINDSPORE_DUMP_CONFIG"] = self.config_file
        os.environ.pop("MS_ACL_DUMP_CFG_PATH", None)
        if cfg.task == "statistics" and self.settings["common_dump_settings"]["saved_data"] == "tensor":
            why = ("MindSpore's CPU dump stores tensors only (its statistic mode needs GPU or Ascend)"
                   if device == "CPU" else "MindSpore's statistic dump has no md5")
            log.warning("task statistics in GRAPH_MODE on %s: %s; msprobe dumps the tensors, computes the "
                        "statistics from them at step() and then removes the tensor files", device, why)
        if cfg.list and cfg.level != "L2":
            log.warning('"list" is passed to MindSpore\'s kernel dump at level L2 only; at level %s in GRAPH_MODE every '
                        'kernel is dumped and "list" is ignored', cfg.level)
        atexit.register(self._at_exit)

    def rank(self):
        return _rank()

    def _raw_aside(self):
        """An earlier run's MindSpore dump under dump_path is moved to previous_<time>/ (never mixed, never lost):
        MindSpore would write this run's iterations into the same folders."""
        try:
            if not os.path.isdir(self.raw_root) or not os.listdir(self.raw_root):
                return
            dest = os.path.join(self.cfg.dump_path, f"{PREVIOUS_PREFIX}{self._started}", RAW_DIR)
            k = 1
            while os.path.lexists(dest):
                dest = os.path.join(self.cfg.dump_path, f"{PREVIOUS_PREFIX}{self._started}_{k}", RAW_DIR)
                k += 1
            os.makedirs(os.path.dirname(dest), mode=0o750, exist_ok=True)
            os.rename(self.raw_root, dest)
            log.warning("msprobe: dump_path %s already held %s of an earlier run; moved to %s so that runs are never "
                        "mixed", self.cfg.dump_path, RAW_DIR, os.path.relpath(dest, self.cfg.dump_path))
        except OSError as exc:
            raise MsprobeError(f"dump_path {self.cfg.dump_path}: the earlier run's {RAW_DIR} folder cannot be moved "
                               f"aside ({exc.strerror or exc}); remove it or choose another dump_path") from None

    # the step folders of an earlier run: moved aside as the PyNative dump does
    _set_aside = DumpLifecycle._set_aside

    # ------------------------------------------------------------------ lifecycle
    def start(self, model=None):
        """Nothing to switch on: MindSpore dumps every graph run (the iterations config.step selects). A Cell
        ``model`` that is part of the compiled graph roots the Cell names, as in a PyNative dump."""
        if model is not None and not isinstance(model, (list, tuple)):
            try:
                from mindspore import nn
                if isinstance(model, nn.Cell):
                    self.model_class = type(model).__name__
            except Exception:
                pass

    def stop(self):
        """Nothing to switch off (see start)."""

    def set_init_step(self, step):
        if isinstance(step, bool) or not isinstance(step, int) or step < 0:
            raise MsprobeError(f"set_init_step(step): step must be an int >= 0, got {step!r}")
        self.current = step

    def step(self):
        try:
            self._convert_new(self.current)
        except Exception as exc:   # noqa: BLE001 - never stop the training
            log.warning("msprobe: converting MindSpore's kernel dump of step %d failed (%s: %s); the raw dump stays "
                        "in %s", self.current, type(exc).__name__, exc, self.raw_root)
        self.current += 1

    def end(self):
        self._at_exit()

    def _at_exit(self):
        if self.ended:
            return
        self.ended = True
        try:
            self._convert_new(self.current, at_exit=True)
        except Exception as exc:   # noqa: BLE001
            log.warning("msprobe: converting MindSpore's kernel dump at exit failed (%s: %s)", type(exc).__name__, exc)
        shutil.rmtree(self._tmp, ignore_errors=True)
        if not self.keep_raw:
            _remove_empty_dirs(self.raw_root)


    # ------------------------------------------------------------------ conversion
    def _sync(self):
        if self.device == "CPU":       # CPU graphs run synchronously (and synchronize() logs an error there)
            return
        try:
            import mindspore as ms
            ms.runtime.synchronize()
        except Exception:
            pass

    def _rank_root(self):
        rank = self.rank()
        name = f"rank_{rank if rank is not None else 0}"
        return rank, os.path.join(self.raw_root, name)

    def _convert_new(self, step, at_exit=False):
        from msprobe.core.dump.ms_graph import StepRecords, ir_path, rank_iterations
        self._sync()
        rank, rank_root = self._rank_root()
        cfg = self.cfg
        found = rank_iterations(rank_root) if os.path.isdir(rank_root) else {}
        new = [(it, g, d) for it in sorted(found) for g, d in found[it] if d not in self.done]
        if cfg.rank and (rank or 0) not in cfg.rank:
            return
        if not new:
            # with "step" MindSpore itself dumps only those iterations (graph runs counted from 0): the other steps
            # are empty on purpose, and only a run that dumped nothing at all is worth a line
            if cfg.step and at_exit and not self.converted_steps:
                log.warning("msprobe: MindSpore dumped none of the iterations %s (graph runs counted from 0) under %s",
                            list(cfg.step), rank_root)
            if not at_exit and not cfg.step:
                log.warning("msprobe: MindSpore wrote no kernel dump for step %d under %s. MindSpore reads "
                            "MINDSPORE_DUMP_CONFIG when it compiles the first graph: create PrecisionDebugger before "
                            "the network's first call (and run it in GRAPH_MODE or under @mindspore.jit)", step,
                            rank_root)
            return
        if not self._set_aside_done:
            self._set_aside_done = True
            self._set_aside(rank_dir_name(rank))
        out_dir = os.path.join(cfg.dump_path, f"step{step}", rank_dir_name(rank))
        self._claimed.add(out_dir)
        records = StepRecords(task=cfg.task, level=cfg.level, summary_mode=cfg.summary_mode, data_mode=cfg.data_mode,
                              tensor_dir=os.path.join(out_dir, "dump_tensor_data") if cfg.task == "tensor" else None,
                              precision=cfg.precision, model_class=self.model_class)
        for _, graph_id, d in new:
            records.add_iteration(d, graph_id, ir_path(rank_root, graph_id))
        records.write(out_dir)
        self.done.update(d for _, _, d in new)
        self.converted_steps.append(step)
        if records.unbound:
            log.warning("msprobe: %d kernels of step %d have no node in the IR (%s/graphs); their records have no "
                        "Cell parent and no code lines", records.unbound, step, rank_root)
        if records.read_errors:
            log.warning("msprobe: %d kernel files of step %d could not be read (first: %s)", len(records.read_errors),
                        step, records.read_errors[0])
        if not self.keep_raw:
            for _, _, d in new:
                shutil.rmtree(d, ignore_errors=True)


def _remove_empty_dirs(root):
    """Remove the folders under ``root`` (itself included) left empty after the tensor files went."""
    for d, _, _ in sorted(os.walk(root), key=lambda t: -t[0].count(os.sep)):
        try:
            os.rmdir(d)
        except OSError:
            pass
