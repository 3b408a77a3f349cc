"""What the PyTorch and MindSpore collectors share (framework-free): the recording rules derived from
the config (task, data_mode, scope/list, tensor_list, overflow_check), the step directory, the
overflow_check filter and the dump.json header."""

from __future__ import annotations

import os

from msprobe.core.dump.records import record_overflows, tensor_leaves
from msprobe.core.dump.scope import Scope


class CollectorBase:
    framework = ""

    def _init_rules(self, cfg) -> None:
        self.cfg = cfg
        self.task = cfg.task
        self.level = cfg.level
        self.md5 = cfg.summary_mode == "md5"
        self.save_tensors = cfg.task == "tensor"
        self.overflow = cfg.task == "overflow_check"
        self.structure_only = cfg.task == "structure"
        self.tensor_list = tuple(cfg.tensor_list)
        self.overflow_left = cfg.overflow_nums
        self.fwd_in = cfg.dump_forward and cfg.dump_input
        self.fwd_out = cfg.dump_forward and cfg.dump_output
        self.bwd_in = cfg.dump_backward and cfg.dump_input
        self.bwd_out = cfg.dump_backward and cfg.dump_output
        self.want_backward = cfg.dump_backward
        self.mix_construct = cfg.level == "mix"
        self.module_construct = cfg.level in ("L0", "mix")
        self.scope = Scope(cfg.scope, cfg.list) if (cfg.scope or cfg.list) else None
        self.step_dir = None
        self.tensor_dir = None
        self.generation = 0
        self.terminated = False

    # ---------------------------------------------------------------- framework part
    def _settle_statistics(self) -> None:
        """Make pending statistics final (overflow_check reads them right away)."""

    def _settle_files(self) -> None:
        """Wait for tensor files being written in the background."""

    # ---------------------------------------------------------------- shared part
    def _reset_scope(self) -> None:
        self.generation += 1
        self.dirty = False
        if self.scope is not None:
            self.scope.in_range = self.scope.start is None
            self.scope.open_expanders = 0

    def set_dir(self, step_dir) -> None:
        self.step_dir = step_dir
        need_tensor_dir = self.save_tensors or self.overflow or bool(self.tensor_list)
        self.tensor_dir = os.path.join(step_dir, "dump_tensor_data") if need_tensor_dir else None
        if self.tensor_dir:
            os.makedirs(self.tensor_dir, mode=0o750, exist_ok=True)

    def wanted(self, name) -> bool:
        return self.scope is None or self.scope.check(name)

    def wanted_peek(self, name) -> bool:
        """Would ``name`` be recorded? (no change to the scope's range state)"""
        sc = self.scope
        if sc is None:
            return True
        if sc.start is not None and not sc.in_range and name != sc.start:
            return False
        return not sc.names or sc.open_expanders > 0 or any(item in name for item in sc.names)

    def _save_for(self, name) -> bool:
        """Whether the tensors of ``name`` are saved as files (overflow_check: saved, deleted unless it overflows)."""
        if self.save_tensors or self.overflow:
            return True
        if self.tensor_list:
            return any(item in name for item in self.tensor_list)
        return False

    def _overflow_check(self, name, rec) -> None:
        self._settle_statistics()
        if not record_overflows(rec):
            self._discard_files(rec)
            return
        self.data[name] = rec
        if self.overflow_left > 0:
            self.overflow_left -= 1
            if self.overflow_left == 0:
                self.terminated = True

    def _discard_files(self, rec) -> None:
        if self.tensor_dir is None:
            return
        self._settle_files()
        for leaf in tensor_leaves(rec):
            dn = leaf.get("data_name")
            if dn:
                try:
                    os.unlink(os.path.join(self.tensor_dir, dn))
                except OSError:
                    pass

    def header(self) -> dict:
        return {"task": self.task, "level": self.level, "framework": self.framework,
                "dump_data_dir": self.tensor_dir}
