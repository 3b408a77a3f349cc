"""What the PyTorch and MindSpore collectors share (framework-free): the recording rules derived from
the config (task, data_mode, scope/list, tensor_list, overflow_check), the step directory, the
overflow_check filter and the dump.json header."""

from __future__ import annotations

import os

from msprobe.core.dump.records import record_overflows, tensor_leaves
from msprobe.core.dump.scope import Scope
from msprobe.core.dump.stack import StackTable


class CollectorBase:
    framework = ""
    forward_extra: dict = {}  # keys every module forward record ends with (PyTorch: is_recompute)

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
    def _reset_step(self) -> None:
        """The per-step state both frameworks keep: records, construct/stack, counters, module stacks."""
        self.data = {}
        self.debug = {}
        self.debug_count = {}
        self.construct = {}
        self.stack = StackTable()
        self.api_count = {}
        self.module_count = {}
        self.fwd_module_stack = []
        self.bwd_module_stack = []
        self.pending_backward = {}
        self._reset_scope()

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

    # ---------------------------------------------------------------- module (Cell) and backward records
    def kwargs_value(self, key, v, path, save):
        """A keyword argument's record (frameworks record dtype/device keywords specially)."""
        return self.convert(v, path, save)

    def module_enter(self, prefix, args, kwargs):
        """A module (Cell) call starts: its name ``{prefix}.forward.{n}``, the scope's range and expansion,
        its parent on the forward module stack, and its input records when they are wanted.
        Returns (name, n, parent, expand, inputs); :meth:`module_exit` undoes the stack and expansion."""
        n = self.module_count.get(prefix, 0)
        self.module_count[prefix] = n + 1
        name = f"{prefix}.forward.{n}"
        scope = self.scope
        expand = False
        if scope is not None:
            if scope.start == name:
                scope.in_range = True
            if self.level == "mix" and scope.module_matches(name):
                scope.open_expanders += 1
                expand = True
        parent = self.fwd_module_stack[-1] if self.fwd_module_stack else None
        self.fwd_module_stack.append(name)
        inputs = None
        if self.fwd_in and self.wanted_peek(name):
            inputs = self.module_inputs(name, args, kwargs)
        return name, n, parent, expand, inputs

    def module_exit(self, name, expand) -> None:
        stack = self.fwd_module_stack
        if stack and stack[-1] == name:
            stack.pop()
        elif name in stack:
            stack.remove(name)
        if expand:
            self.scope.open_expanders -= 1

    def module_inputs(self, name, args, kwargs):
        """The records of a module's forward inputs, taken at its pre-hook."""
        save = self._save_for(name)
        return ([self.convert(a, f"{name}.input.{i}", save) for i, a in enumerate(args)],
                {k: self.kwargs_value(k, v, f"{name}.kwargs.{k}", save) for k, v in kwargs.items()})

    def module_forward(self, name, parent, inputs, out, params):
        """A module's forward record (``inputs`` from :meth:`module_inputs`); False when not recorded."""
        if self.terminated:
            return False
        self.dirty = True
        if self.module_construct:
            self.construct.pop(name, None)
            self.construct[name] = parent
        if not self.wanted(name) or not (self.fwd_in or self.fwd_out):
            return False
        save = self._save_for(name)
        rec = {}
        if inputs is not None:
            rec["input_args"], rec["input_kwargs"] = inputs
        if self.fwd_out:
            outs = out if isinstance(out, (tuple, list)) else [out]
            rec["output"] = [self.convert(v, f"{name}.output.{i}", save) for i, v in enumerate(outs)]
        rec["parameters"] = {pn: self.convert(p, f"{name}.parameters.{pn}", save) for pn, p in params}
        rec.update(self.forward_extra)
        if self.overflow:
            self._overflow_check(name, rec)
        else:
            self.data.pop(name, None)
            self.data[name] = rec
        self.stack.add(name, skip=4)
        return True

    def _backward_record(self, name, grad_outputs, grad_inputs):
        """``input`` = grads of the forward outputs, ``output`` = grads of the forward inputs."""
        save = self._save_for(name)
        rec = {}
        if self.bwd_in:
            rec["input"] = [self.convert(g, f"{name}.input.{i}", save) for i, g in enumerate(grad_outputs)]
        if self.bwd_out:
            rec["output"] = [self.convert(g, f"{name}.output.{i}", save) for i, g in enumerate(grad_inputs)]
        if self.overflow:
            self._overflow_check(name, rec)
        else:
            self.data[name] = rec

    # ---------------------------------------------------------------- level debug (PrecisionDebugger.save)
    def debug_save(self, name, value):
        """Record ``value`` as ``{name}.{n}.debug``; returns ``n`` (the n-th save of ``name`` this step)."""
        self.dirty = True
        n = self.debug_count.get(name, 0)
        self.debug_count[name] = n + 1
        key = f"{name}.{n}.debug"
        self.debug[key] = self.convert(value, key, self.save_tensors)
        return n

    def debug_grad(self, key, value):
        self.dirty = True
        self.debug[key] = self.convert(value, key, self.save_tensors)

    def step_files(self) -> list:
        """(file name, content) of the step: debug.json at level debug, else dump/stack/construct.json."""
        out = self.header()
        if self.level == "debug":
            out["data"] = self.debug
            return [("debug.json", out)]
        out["data"] = self.data
        return [("dump.json", out), ("stack.json", self.stack.to_json()), ("construct.json", self.construct)]
