"""Matching target rows to golden rows (compare.md §3).

Every strategy returns a :class:`Matches`: for each output row the target row index, the golden row
index (-1 = unmatched) and the rule that paired them.  Output order always follows the target dump.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from msprobe.core.dump.reader import NO_VALUE, DumpRows
from msprobe.core.io.columns import CodedColumn

RULE_EXACT = "exact"
RULE_FUZZY = "fuzzy"
RULE_NONE = "unmatched"
RULE_WRAPPER = "wrapper"
#: path components that data-parallel and other wrappers insert into module names: DDP / DataParallel
#: (``module``), FSDP1 (``_fsdp_wrapped_module``), activation checkpointing, ``torch.compile``
WRAPPER_SEGMENTS = frozenset(("module", "_fsdp_wrapped_module", "_checkpoint_wrapped_module", "_orig_mod"))

# dtype groups that still count as "the same tensor" (G8 §3.3): mixed precision runs compare
# bf16/fp16 against fp32 on purpose.
_FLOAT_GROUPS = (
    frozenset({"torch.float16", "torch.float32", "torch.bfloat16"}),
    frozenset({"Float16", "Float32", "BFloat16"}),
)


@dataclass
class Matches:
    target: np.ndarray  # int64 target row index per output row
    golden: np.ndarray  # int64 golden row index, -1 when unmatched
    rule: List[str]

    def __len__(self) -> int:
        return len(self.target)

    @property
    def matched(self) -> np.ndarray:
        return self.golden >= 0


_FAMILIES = {}
for _fam, _names in (
    ("int", "Int8 UInt8 Int16 UInt16 Int32 UInt32 Int64 UInt64 torch.int8 torch.uint8 torch.int16 torch.uint16 "
            "torch.int32 torch.uint32 torch.int64 torch.uint64"),
    ("float", "Float16 Float32 Float64 BFloat16 torch.float16 torch.float32 torch.float64 torch.bfloat16"),
    ("bool", "Bool torch.bool"),
    ("complex", "Complex64 Complex128 torch.complex64 torch.complex128"),
):
    for _n in _names.split():
        _FAMILIES[_n] = _fam


def dtypes_compatible(a: str, b: str) -> bool:
    """Same dtype, one of the mixed-precision float groups, or (MindSpore vs PyTorch) the same family."""
    if a == b:
        return True
    if any(a in grp and b in grp for grp in _FLOAT_GROUPS):
        return True
    if a.startswith("torch.") != b.startswith("torch."):  # across frameworks: int vs int, float vs float ...
        fa, fb = _FAMILIES.get(a), _FAMILIES.get(b)
        return fa is not None and fa == fb
    return False


def _dtype_filter(t: DumpRows, g: DumpRows, target: np.ndarray, golden: np.ndarray,
                  skip: Optional[np.ndarray] = None) -> np.ndarray:
    """Unmatch pairs whose dtypes are incompatible (§3.3); rows in ``skip`` (explicit mappings) are kept."""
    out = golden.copy()
    ok = out >= 0
    if skip is not None:
        ok &= ~skip
    idx = np.nonzero(ok)[0]
    if len(idx):
        tdt = t.dtype
        gdt = g.dtype
        if isinstance(tdt, CodedColumn) and isinstance(gdt, CodedColumn):
            # the test once per distinct (target dtype, golden dtype) pair of codes
            tc = tdt.codes[target[idx]].astype(np.int64)
            gc = gdt.codes[out[idx]].astype(np.int64)
            pair = tc * (len(gdt.table) + 1) + gc
            kinds, inv = np.unique(pair, return_inverse=True)
            good = np.array([dtypes_compatible(tdt.table[int(k) // (len(gdt.table) + 1)],
                                               gdt.table[int(k) % (len(gdt.table) + 1)]) for k in kinds.tolist()],
                            dtype=bool)
            out[idx[~good[inv]]] = -1
            return out
        tg = target.tolist()
        # only the (few) pairs whose strings differ need the group test
        bad = [i for i in idx.tolist()
               if tdt[tg[i]] != gdt[out[i]] and not dtypes_compatible(tdt[tg[i]], gdt[out[i]])]
        if bad:
            out[bad] = -1
    return out


def _occurrences(keys: Sequence[Tuple]) -> List[Tuple]:
    """(key, k) where k counts earlier occurrences of the same key."""
    seen: Dict[Tuple, int] = {}
    out = []
    for key in keys:
        k = seen.get(key, 0)
        seen[key] = k + 1
        out.append((key, k))
    return out


def _join(tkeys: Sequence[Tuple], gkeys: Sequence[Tuple]) -> Tuple[np.ndarray, np.ndarray]:
    """Left join of target keys onto golden keys, in target order.

    A key that occurs several times (a module called twice under the same name) pairs its k-th
    occurrence on each side; the reference's outer merge multiplied such rows instead.
    """
    if len(set(gkeys)) != len(gkeys) or len(set(tkeys)) != len(tkeys):
        tkeys, gkeys = _occurrences(tkeys), _occurrences(gkeys)
    first: Dict[Tuple, int] = dict(zip(gkeys, range(len(gkeys))))
    golden = np.fromiter(map(first.get, tkeys, [-1] * len(tkeys)), dtype=np.int64, count=len(tkeys))
    return np.arange(len(tkeys), dtype=np.int64), golden


def _hash_join(t: DumpRows, g: DumpRows) -> Optional[np.ndarray]:
    """The golden row of each target row joined on (name, shape), or None when a name repeats on a side.

    Names are looked up by their hashes in sorted int64 arrays and confirmed by comparing the strings; shapes
    by their codes.  This gives what :func:`_join` gives on (name, shape) keys when every name is unique on
    each side (the usual case), without a tuple per row and a dict of them (~150 bytes a row on each side)."""
    if not (isinstance(t.shape, CodedColumn) and isinstance(g.shape, CodedColumn)):
        return None
    tn, gn = t.names, g.names
    gh = np.fromiter(map(hash, gn), dtype=np.int64, count=len(gn))
    order = np.argsort(gh, kind="stable")
    gs = gh[order]
    del gh
    if len(gs) > 1 and (gs[1:] == gs[:-1]).any():
        return None  # a name twice (or a hash collision): the general join counts occurrences
    th = np.fromiter(map(hash, tn), dtype=np.int64, count=len(tn))
    if len(th) > 1:
        ts = np.sort(th)
        if (ts[1:] == ts[:-1]).any():
            return None
        del ts
    golden = np.full(len(tn), -1, dtype=np.int64)
    if not len(gs) or not len(th):
        return golden
    pos = np.minimum(np.searchsorted(gs, th), len(gs) - 1)
    hit = np.flatnonzero(gs[pos] == th)
    del th
    cand = order[pos[hit]]
    same = np.fromiter((tn[i] == gn[j] for i, j in zip(hit.tolist(), cand.tolist())), dtype=bool, count=len(hit))
    hit, cand = hit[same], cand[same]
    # equal shape texts: the target's shape codes translated into the golden table's codes
    gcode = {v: k for k, v in enumerate(g.shape.table)}
    trans = np.array([gcode.get(v, -1) for v in t.shape.table], dtype=np.int64)
    ok = trans[t.shape.codes[hit].astype(np.int64)] == g.shape.codes[cand].astype(np.int64)
    golden[hit[ok]] = cand[ok]
    return golden


def unwrapped(name: str) -> str:
    """A module row's name without the components wrappers insert (``Module.module.fc.Linear.forward.0`` ->
    ``Module.fc.Linear.forward.0``); other names unchanged."""
    if not name.startswith(("Module.", "Cell.")):
        return name
    parts = name.split(".")
    return ".".join([parts[0]] + [p for p in parts[1:] if p not in WRAPPER_SEGMENTS])


def _wrappers(names) -> frozenset:
    """The wrapper components the module rows of a dump hold."""
    found = set()
    for n in names:
        if n.startswith(("Module.", "Cell.")):
            found.update(WRAPPER_SEGMENTS.intersection(n.split(".")[1:-1]))
            if len(found) == len(WRAPPER_SEGMENTS):
                break
    return frozenset(found)


def _wrapper_join(t: DumpRows, g: DumpRows, tidx: np.ndarray, gidx: np.ndarray) -> np.ndarray:
    """Module rows left unmatched when the two runs are wrapped differently (a DDP target, ``Module.module.x``,
    against an unwrapped or FSDP1 golden run, ``Module.x`` / ``Module._fsdp_wrapped_module.x``): joined on
    their names without the wrapper components and their shapes, golden rows not used yet."""
    todo = [k for k in np.flatnonzero(gidx < 0).tolist() if t.names[tidx[k]].startswith(("Module.", "Cell."))]
    if not todo or _wrappers(t.names) == _wrappers(g.names):
        return np.zeros(len(gidx), dtype=bool)
    used = set(gidx[gidx >= 0].tolist())
    free: Dict[Tuple[str, str], List[int]] = {}
    for j, (name, shape) in enumerate(zip(g.names, g.shape)):
        if j not in used and name.startswith(("Module.", "Cell.")):
            free.setdefault((unwrapped(name), shape), []).append(j)
    joined = np.zeros(len(gidx), dtype=bool)
    for k in todo:
        i = int(tidx[k])
        q = free.get((unwrapped(t.names[i]), t.shape[i]))
        if q:
            gidx[k] = q.pop(0)
            joined[k] = True
    return joined


def match_exact(t: DumpRows, g: DumpRows) -> Matches:
    """Join on (row name, shape), then the dtype filter (G8 semantics, target order kept).  Module rows of two
    runs wrapped differently (DDP, FSDP1, ...) join on their names without the wrapper components (rule
    ``wrapper``)."""
    gidx = _hash_join(t, g)
    if gidx is not None:
        tidx = np.arange(len(t), dtype=np.int64)
    else:
        tidx, gidx = _join(list(zip(t.names, t.shape)), list(zip(g.names, g.shape)))
    joined = _wrapper_join(t, g, tidx, gidx)
    gidx = _dtype_filter(t, g, tidx, gidx)
    rule = [RULE_NONE if j < 0 else RULE_WRAPPER if w else RULE_EXACT
            for j, w in zip(gidx.tolist(), joined.tolist())]
    return Matches(tidx, gidx, rule)


def fuzzy_key(name: str) -> str:
    """Drop the call number of an API or module name.

    ``Functional.linear.3.forward.input.0`` -> ``Functional.linear.forward.input.0``;
    ``Module.layer.Linear.forward.2.input.0`` -> ``Module.layer.Linear.forward.input.0``.
    Only a whole ``forward``/``backward`` segment counts (a module path like ``feed_forward`` is left
    alone), and module class names are kept: both are reference bugs (compare.md §3.5).
    """
    parts = name.split(".")
    for i, seg in enumerate(parts):
        if seg == "forward" or seg == "backward":
            if i > 0 and parts[i - 1].isdigit():
                del parts[i - 1]
            elif i + 1 < len(parts) and parts[i + 1].isdigit():
                del parts[i + 1]
            return ".".join(parts)
    return name


def _fuzzy_join(tkeys: Sequence[str], tshape: Sequence[str], g: DumpRows) -> np.ndarray:
    queues: Dict[Tuple[str, str], List[int]] = {}
    for j, (name, shape) in enumerate(zip(g.names, g.shape)):
        queues.setdefault((fuzzy_key(name), shape), []).append(j)
    heads: Dict[Tuple[str, str], int] = {}
    golden = np.full(len(tkeys), -1, dtype=np.int64)
    for i, (name, shape) in enumerate(zip(tkeys, tshape)):
        key = (fuzzy_key(name), shape)
        q = queues.get(key)
        if q is None:
            continue
        h = heads.get(key, 0)
        if h < len(q):
            golden[i] = q[h]
            heads[key] = h + 1
    return golden


def _aslist(col) -> list:
    return col if isinstance(col, list) else col.tolist() if hasattr(col, "tolist") else list(col)


class _CallRows:
    """One side's rows grouped by call (dump.json key: one API or module call, or a module's parameters_grad),
    with each row's (place in the call, shape, kind) read once: a call's structure is then built from plain
    lists (a compact column's element access per row made -fm 50x slower than the exact match)."""

    def __init__(self, rows: DumpRows, unwrap: bool = False):
        self.unwrap = unwrap  # the two runs are wrapped differently: module names without the wrapper components
        self.calls: Dict[str, List[int]] = {}
        for i, key in enumerate(_aslist(rows.api)):
            self.calls.setdefault(key, []).append(i)
        names, shapes, dtypes = _aslist(rows.names), _aslist(rows.shape), _aslist(rows.dtype)
        values = _aslist(rows.value)
        self.names = names
        self.shapes = shapes
        self.kind = ["" if v is NO_VALUE else d for v, d in zip(values, dtypes)]
        self._sig: Dict[Tuple[str, bool], tuple] = {}

    def signature(self, key: str, tensors_only: bool):
        """A call's fuzzy key and structure: each row's place in the call, shape and kind (a tensor, or the type
        of a non-tensor argument), in any order; ``tensors_only`` leaves the non-tensor rows out."""
        got = self._sig.get((key, tensors_only))
        if got is None:
            cut = len(key)
            names, shapes, kind = self.names, self.shapes, self.kind
            sig = [(names[i][cut:], shapes[i], kind[i]) for i in self.calls[key]
                   if not (tensors_only and kind[i])]
            got = (fuzzy_key(unwrapped(key) if self.unwrap else key),
                   tuple(sorted(sig)))  # (sorted: a parameters_grad entry may list bias before weight)
            self._sig[(key, tensors_only)] = got
        return got


def _twin(key: str, a: str, b: str) -> Optional[str]:
    """``key`` with its last ``a`` segment replaced by ``b`` (a backward call's forward twin), or None."""
    parts = key.split(".")
    for k in range(len(parts) - 1, -1, -1):
        if parts[k] == a:
            parts[k] = b
            return ".".join(parts)
    return None


def _pair_calls(t: _CallRows, g: _CallRows) -> Dict[str, str]:
    """Target call -> golden call.  Forward (and other) calls first: the k-th target call of a
    (call-number-free name, structure) pairs with the k-th golden call of the same, first with every argument's
    kind, then (for the calls left) with the tensors' alone (an argument given on one side only).  Then a
    backward call pairs with the backward of the golden call its forward paired with (backward calls run in
    another order, so their k-th pairing would join other calls), and the backward calls left by the k-th rule."""
    tcalls, gcalls = t.calls, g.calls
    pairs: Dict[str, str] = {}
    used: set = set()

    def by_order(left: List[str], gkeys: List[str]) -> List[str]:
        for tensors_only in (False, True):
            queues: Dict[tuple, List[str]] = {}
            for key in gkeys:
                if key not in used:
                    queues.setdefault(g.signature(key, tensors_only), []).append(key)
            heads: Dict[tuple, int] = {}
            rest = []
            for key in left:
                sig = t.signature(key, tensors_only)
                q, h = queues.get(sig), heads.get(sig, 0)
                if q is not None and h < len(q):
                    pairs[key] = q[h]
                    used.add(q[h])
                    heads[sig] = h + 1
                else:
                    rest.append(key)
            left = rest
        return left

    def is_backward(key: str) -> bool:
        return ".backward" in key and _twin(key, "backward", "forward") is not None

    by_order([k for k in tcalls if not is_backward(k)], [k for k in gcalls if not is_backward(k)])
    left = []
    for key in (k for k in tcalls if is_backward(k)):
        fwd = pairs.get(_twin(key, "backward", "forward"))
        gb = _twin(fwd, "forward", "backward") if fwd is not None else None
        if (gb is not None and gb in gcalls and gb not in used
                and t.signature(key, True)[1] == g.signature(gb, True)[1]):
            pairs[key] = gb
            used.add(gb)
        else:
            left.append(key)
    by_order(left, [k for k in gcalls if is_backward(k)])
    return pairs


def match_fuzzy(t: DumpRows, g: DumpRows) -> Matches:
    """Order-preserving fuzzy match of whole calls: the k-th target call with a given call-number-free name
    and structure (its rows' places, shapes, and whether each is a tensor or which Python type) pairs with the
    k-th golden call with the same, and their rows pair by place (a row needs the same shape).  An op run on
    one side only (``x * 1.05`` in a user's hook, between two ``x * y``) is left unmatched instead of shifting
    every later call of its API by one, as a row-by-row match does (the reference's); no row is dropped.
    """
    golden = np.full(len(t), -1, dtype=np.int64)
    unwrap = _wrappers(t.names) != _wrappers(g.names)
    tc, gc = _CallRows(t, unwrap), _CallRows(g, unwrap)
    for tkey, gkey in _pair_calls(tc, gc).items():
        cut_t, cut_g = len(tkey), len(gkey)
        by_place = {gc.names[j][cut_g:]: j for j in gc.calls[gkey]}
        for i in tc.calls[tkey]:
            j = by_place.get(tc.names[i][cut_t:])
            if j is not None and tc.shapes[i] == gc.shapes[j]:
                golden[i] = j
    golden = _dtype_filter(t, g, np.arange(len(t), dtype=np.int64), golden)
    rule = []
    for i, j in enumerate(golden.tolist()):
        if j < 0:
            rule.append(RULE_NONE)
        else:
            rule.append(RULE_EXACT if t.names[i] == g.names[j] else RULE_FUZZY)
    return Matches(np.arange(len(t), dtype=np.int64), golden, rule)


def match_mapped(t: DumpRows, g: DumpRows, keys: Sequence[str], rules: Sequence[str], name_only: Sequence[bool],
                 fuzzy: bool = False) -> Matches:
    """Join on mapped compare keys (:func:`msprobe.core.compare.mapping.target_keys`).

    Rows mapped by a data or layer mapping join on the name alone and skip the dtype filter (the user
    said which rows pair); the others join on (key, shape) -- with the call numbers dropped when
    ``fuzzy`` -- and go through the dtype filter, which accepts MindSpore vs PyTorch dtypes of one family."""
    n = len(t)
    only = np.fromiter(name_only, dtype=bool, count=n)
    golden = np.full(n, -1, dtype=np.int64)
    by_name = np.nonzero(only)[0]
    by_shape = np.nonzero(~only)[0]
    if len(by_name):
        tk = [(keys[i],) for i in by_name.tolist()]
        _, gi = _join(tk, [(x,) for x in g.names])
        golden[by_name] = gi
    if len(by_shape):
        sel = by_shape.tolist()
        if fuzzy:
            golden[by_shape] = _fuzzy_join([keys[i] for i in sel], [t.shape[i] for i in sel], g)
        else:
            _, gi = _join([(keys[i], t.shape[i]) for i in sel], list(zip(g.names, g.shape)))
            golden[by_shape] = gi
    golden = _dtype_filter(t, g, np.arange(n, dtype=np.int64), golden, skip=only)
    out_rules = []
    for i, j in enumerate(golden.tolist()):
        if j < 0:
            out_rules.append(RULE_NONE)
        elif rules[i]:
            out_rules.append(rules[i])
        else:
            out_rules.append(RULE_EXACT if t.names[i] == g.names[j] else RULE_FUZZY)
    return Matches(np.arange(n, dtype=np.int64), golden, out_rules)
