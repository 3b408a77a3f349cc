"""Call stacks for stack.json, deduplicated, cheap on repeat (framework-free; PyTorch and MindSpore).

A stack is identified by the tuple of (code object, line number) of its frames, so a call site that
was seen before costs one frame walk and one dict lookup; only new stacks are formatted (with
linecache). Frames of msprobe itself and of torch's module-call machinery that the reference also
shows are kept as the reference keeps them; msprobe's own frames are dropped.
"""
import linecache
import os
import sys

_PKG_DIR = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))) + os.sep   # msprobe/
_DISPATCH_FILE = os.path.join("torch", "overrides.py")
_FORMATTED = {}          # frame key -> formatted frames, kept across steps (call sites repeat every step)
_FORMATTED_MAX = 100_000


class StackTable:
    """Maps full names to deduplicated stacks; renders the ``{"0": [[names], [frames]], ...}`` format."""

    __slots__ = ("_by_key", "_entries")

    def __init__(self):
        self._by_key = {}    # frame key -> index into _entries
        self._entries = []   # [names list, frames list]

    def __len__(self):
        return len(self._entries)

    def add(self, name, skip=2):
        try:
            frame = sys._getframe(skip)
        except ValueError:
            return
        key = []
        f = frame
        while f is not None:
            key.append((f.f_code, f.f_lineno))
            f = f.f_back
        key = tuple(key)
        idx = self._by_key.get(key)
        if idx is None:
            frames = _FORMATTED.get(key)
            if frames is None:
                frames = _format(key)
                if len(_FORMATTED) < _FORMATTED_MAX:
                    _FORMATTED[key] = frames
            idx = self._by_key[key] = len(self._entries)
            self._entries.append(([], frames))
        self._entries[idx][0].append(name)

    def to_json(self):
        return {str(i): [names, frames] for i, (names, frames) in enumerate(self._entries)}

    def clear(self):
        self._by_key = {}
        self._entries = []


def _format(key):
    out = []
    for code, lineno in key:
        path = code.co_filename
        if path.startswith(_PKG_DIR) or path.endswith(_DISPATCH_FILE):
            continue   # msprobe itself, and torch's __torch_function__ dispatch that leads into it
        line = linecache.getline(path, lineno).strip()
        if not line:
            continue
        out.append(f"File {path}, line {lineno}, in {code.co_name}, \n {line}")
    return out
