"""Writers: JSON ``.vis`` (one graph or one compare per file) and SQLite ``.vis.db`` (every graph of a run).

Both write the same node fields, formatted the same way (graph_and_tools.md A.8.3, 8.x rules: every leaf
value becomes a string, floats rounded to 6 decimals or ``{:.6e}``, ``md5`` kept only in md5 compares).
Files are written to a temporary name in the output directory and renamed into place when complete.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sqlite3
from typing import Dict, List, Optional, Tuple

import orjson

from msprobe.core.graph.colors import colors_for, tool_tip
from msprobe.core.graph.model import MODE_MD5, ROOT_ID, Graph, Node, Text

_SCI = re.compile(r"^[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)$")
_DECIMAL = re.compile(r"^\d{1,20}\.(\d{1,20})%?$")
_PG_KEEP = ("type", "group_ranks", "group_id", "data_name")
_P2P_DROP = ("op", "peer", "tag", "group_id")


_STR_CACHE: Dict[str, str] = {" ": "null"}


def _fmt_str(s: str) -> str:
    out = _STR_CACHE.get(s)
    if out is not None:
        return out
    out = s
    if "'" in out:
        out = out.replace("'", "")
    if "None" in out:
        out = out.replace("None", "null")
    if out[:1].isdigit():
        m = _DECIMAL.match(out)
        if m is not None and len(m.group(1)) > 6:
            pct = out.endswith("%")
            out = "{:.6f}".format(float(out.rstrip("%"))) + ("%" if pct else "")
    if len(_STR_CACHE) < 100000:
        _STR_CACHE[s] = out
    return out


def _fmt_float(v: float) -> str:
    r = repr(v)
    if "e" in r and len(r) < 50 and _SCI.match(r) is not None:
        return "{:.6e}".format(v)
    if len(r) <= 8 and "." in r:  # at most 6 decimals already: round() would not change it
        return r
    return repr(round(v, 6))


def _fmt_value(v) -> str:
    c = v.__class__
    if c is str:
        return _fmt_str(v) if v != " " else "null"
    if c is float:
        return _fmt_float(v)
    if v is None:
        return "null"
    if c is int:
        return str(v)
    if c is list:
        return _fmt_str(str(v))
    return _fmt_str(str(v))


def format_item(item: dict, md5_mode: bool, p2p: bool = False) -> dict:
    """A node item as the viewer shows it (a new dict; the graph is not modified)."""
    if item.get("Max", 0) is None:
        return {"value": "null"}
    if item.get("type") == "torch.ProcessGroup":
        item = {k: item[k] for k in _PG_KEEP if k in item}
    fs, ff = _fmt_str, _fmt_float
    out = {}
    for k, v in item.items():
        c = v.__class__
        if c is Text:
            out[k] = v
        elif c is str:
            out[k] = fs(v) if v != " " else "null"
        elif c is float:
            out[k] = ff(v)
        else:
            out[k] = _fmt_value(v)
    if not md5_mode:
        out.pop("md5", None)
    if p2p:
        for k in _P2P_DROP:
            out.pop(k, None)
    if out.get("Max") == "null":
        return {"value": "null"}
    return out


def format_items(data: Dict[str, dict], md5_mode: bool, node_id: str) -> Dict[str, dict]:
    p2p = "batch_isend_irecv" in node_id
    return {k: format_item(v, md5_mode, p2p) for k, v in data.items()}


_TRAILING_ZEROS = re.compile(r"0+\n")


def _floats_to_text(values: List[float]) -> List[str]:
    """``_fmt_float`` over many values at C speed.

    repr switches to exponent form below 1e-4 and from 1e16 (those take ``{:.6e}``).  Between 1e-4 and 1e9,
    ``str(round(x, 6))`` equals ``"%.6f" % x`` without its trailing zeros (both round the exact binary
    value correctly, and a decimal of at most 15 digits is its own shortest repr): that is done on one
    joined string.  The rest (NaN, inf, 1e9..1e16) go through ``round``/``repr`` one by one.
    """
    import numpy as np

    if not values:
        return []
    arr = np.asarray(values, dtype=np.float64)
    a = np.abs(arr)
    with np.errstate(invalid="ignore"):
        sci = ((a < 1e-4) & (a > 0)) | ((a >= 1e16) & np.isfinite(a))
        fast = ~sci & (a < 1e9)
    out: List[Optional[str]]
    if fast.all():
        idx_fast = None
        fast_vals = values
    else:
        idx_fast = np.flatnonzero(fast).tolist()
        fast_vals = [values[i] for i in idx_fast]
    text = "\n".join(map("%.6f".__mod__, fast_vals)) + "\n"
    text = _TRAILING_ZEROS.sub("\n", text).replace(".\n", ".0\n")
    fast_txt = text.split("\n")
    fast_txt.pop()
    if idx_fast is None:
        return fast_txt
    out = [None] * len(values)
    for i, t in zip(idx_fast, fast_txt):
        out[i] = t
    fmt = "{:.6e}".format
    for i in np.flatnonzero(sci).tolist():
        out[i] = fmt(values[i])
    for i in np.flatnonzero(~sci & ~fast).tolist():
        out[i] = repr(round(values[i], 6))
    return out


def format_nodes(nodes: List[Node], md5_mode: bool) -> List[Tuple[Dict[str, dict], Dict[str, dict]]]:
    """(input_data, output_data) as the viewer shows them for many nodes at once.

    Same result as :func:`format_items` per node; floats (most of the values) are formatted in one batch.
    """
    cache = _STR_CACHE
    cget = cache.get
    fs = _fmt_str
    floats: List[float] = []
    slots: List[tuple] = []
    fadd = floats.append
    sadd = slots.append
    result = []
    radd = result.append
    for n in nodes:
        f = n.fmt
        if f is not None:  # formatted by the split child already
            radd(f.load() if f.__class__ is not tuple else f)
            continue
        p2p = "batch_isend_irecv" in n.id
        pair = []
        for data in (n.input_data, n.output_data):
            fdata = {}
            for name, item in data.items():
                if item.get("Max", 0) is None:
                    fdata[name] = {"value": "null"}
                    continue
                if p2p or item.get("type") == "torch.ProcessGroup":
                    fdata[name] = format_item(item, md5_mode, p2p)
                    continue
                out = {}
                for k, v in item.items():
                    c = v.__class__
                    if c is float:
                        out[k] = None
                        fadd(v)
                        sadd((out, k))
                    elif c is str:
                        out[k] = cget(v) or fs(v)
                    elif c is Text:
                        out[k] = v
                    elif c is list:
                        t = str(v)
                        out[k] = cget(t) or fs(t)
                    elif v is None:
                        out[k] = "null"
                    else:
                        out[k] = _fmt_value(v)
                if not md5_mode:
                    out.pop("md5", None)
                if out.get("Max") == "null":
                    out = {"value": "null"}
                fdata[name] = out
            pair.append(fdata)
        radd((pair[0], pair[1]))
    for (d, k), t in zip(slots, _floats_to_text(floats)):
        d[k] = t
    return result


class Packed:
    """A node's formatted (input_data, output_data) as one exact-size bytes object.

    orjson's result buffers are over-allocated (several KB each, whatever the length): kept for 100k nodes
    they would cost ten times their size, so the two texts are joined into a fresh object.
    """

    __slots__ = ("data", "cut")

    def __init__(self, fin: bytes, fout: bytes):
        self.data = fin + fout
        self.cut = len(fin)

    def load(self):
        return orjson.Fragment(self.data[:self.cut]), orjson.Fragment(self.data[self.cut:])


def preformat(g: Graph, md5_mode: bool = False) -> None:
    """Format every node's items now and keep them as JSON texts (``node.fmt``) for the writers."""
    nodes = [n for n in g.nodes.values() if n.fmt is None]
    dumps = orjson.dumps
    for a in range(0, len(nodes), 2000):
        chunk = nodes[a:a + 2000]
        for n, (fin, fout) in zip(chunk, format_nodes(chunk, md5_mode)):
            n.fmt = Packed(dumps(fin), dumps(fout))


def node_dict(n: Node, md5_mode: bool, formatted: Optional[tuple] = None) -> dict:
    fin, fout = formatted if formatted is not None else (
        format_items(n.input_data, md5_mode, n.id), format_items(n.output_data, md5_mode, n.id))
    d = {
        "id": n.id,
        "node_type": n.type,
        "output_data": fout,
        "input_data": fin,
        "upnode": n.up.id if n.up is not None else "None",
        "subnodes": [c.id for c in n.subnodes],
        "matched_node_link": n.link,
        "suggestions": {},
        "stack_info": n.stack,
    }
    if n.micro_step is not None:
        d["micro_step_id"] = n.micro_step
    d["data"] = n.data
    if n.distributed:
        d["matched_distributed"] = n.distributed
    return d


# ---------------------------------------------------------------------------------------------- .vis


def _node_bytes(nodes: List[Node], md5_mode: bool, first: bool) -> bytes:
    parts = []
    dumps = orjson.dumps
    opt = orjson.OPT_NON_STR_KEYS
    for n, f in zip(nodes, format_nodes(nodes, md5_mode)):
        parts.append((b"" if first else b", ") + dumps(n.id) + b": " + dumps(node_dict(n, md5_mode, f), option=opt))
        first = False
    return b"".join(parts)


# set before forking writer processes; the children read the graphs from here (copy-on-write)
_SHARED: dict = {}


def _write_slice(args) -> str:
    key, lo, hi, md5_mode, path = args
    nodes = _SHARED[key]
    with open(path, "wb") as f:
        step = 2000
        for a in range(lo, hi, step):
            f.write(_node_bytes(nodes[a:min(hi, a + step)], md5_mode, a == 0))
    return path


def _slices(n: int, parts: int) -> List[Tuple[int, int]]:
    parts = max(1, min(parts, n // 5000 or 1))
    bounds = [n * i // parts for i in range(parts + 1)]
    return [(a, b) for a, b in zip(bounds[:-1], bounds[1:]) if b > a]


def _parallel(tasks: list, fn, workers: int) -> list:
    """Run fn over tasks: this process takes the first share itself, forked children the others.

    The children read the graph copy-on-write; every page they touch (reference counts) is copied, so
    one child fewer than there are workers keeps that duplication to the children's share of the graph.
    Not a task of msprobe.core.executor: the slices are views of one graph in this process's memory (shared
    copy-on-write, never pickled), which only a fork can hand to a worker; inside a worker of the executor
    (a rank of a multi-rank graph, local or Ray) the slices are written here, one after the other.
    """
    import multiprocessing as mp

    from msprobe.core.executor import in_worker

    if workers <= 1 or len(tasks) <= 1 or "fork" not in mp.get_all_start_methods() or in_worker():
        return [fn(t) for t in tasks]
    from concurrent.futures import ProcessPoolExecutor

    mine = tasks[:: workers]
    theirs = [t for i, t in enumerate(tasks) if i % workers]
    results = {}
    with ProcessPoolExecutor(max_workers=min(workers - 1, len(theirs)), mp_context=mp.get_context("fork")) as pool:
        futures = [(id(t), pool.submit(fn, t)) for t in theirs]
        for t in mine:
            results[id(t)] = fn(t)
        for key, fut in futures:
            results[key] = fut.result()
    return [results[id(t)] for t in tasks]


def write_vis(path: str, g_n: Graph, g_b: Optional[Graph], *, mode: Optional[str], micro_steps: int,
              overflow_check: bool, workers: int = 1, verdict_colours: bool = False) -> None:
    """Write one .vis (build when g_b is None, else compare) to ``path`` (a temp name; caller renames).

    Nodes are formatted in ``workers`` forked processes, each writing a slice of the node table to a side
    file; the slices are then concatenated in order.
    """
    md5_mode = mode == MODE_MD5
    graphs = [("NPU", g_n)] + ([("Bench", g_b)] if g_b is not None else [])
    tasks = []
    for key, g in graphs:
        _SHARED[key] = list(g.nodes.values())
        for lo, hi in _slices(len(_SHARED[key]), workers):
            tasks.append((key, lo, hi, md5_mode, f"{path}.{key}.{lo}"))
    # one worker: format straight into the file; several: slices into side files, concatenated below
    direct = workers <= 1 or len(tasks) <= len(graphs)
    try:
        parts = [] if direct else _parallel(tasks, _write_slice, workers)
        by_key: Dict[str, List[str]] = {}
        for t, p in zip(tasks, parts):
            by_key.setdefault(t[0], []).append(p)
        with open(path, "wb", buffering=1 << 20) as f:
            w = f.write

            def graph(key: str, g: Graph, close: bool = True) -> None:
                w(b'{"root": "' + ROOT_ID.encode() + b'", "dump_data_dir": ' + orjson.dumps(g.dump_data_dir) + b', "node": {')
                if direct:
                    nodes = _SHARED[key]
                    for a in range(0, len(nodes), 2000):
                        w(_node_bytes(nodes[a:a + 2000], md5_mode, a == 0))
                else:
                    for p in by_key.get(key, []):
                        with open(p, "rb") as src:
                            shutil.copyfileobj(src, f, 1 << 20)
                w(b"}}" if close else b"}")

            if g_b is None:
                graph("NPU", g_n, close=False)
                w(b', "MicroSteps": ' + orjson.dumps(micro_steps) + b', "OverflowCheck": ' + orjson.dumps(overflow_check) + b"}")
                return
            w(b'{"NPU": ')
            graph("NPU", g_n)
            w(b', "Bench": ')
            graph("Bench", g_b)
            w(b', "ToolTip": ' + orjson.dumps(tool_tip(mode, verdict_colours)))
            w(b', "Colors": ' + orjson.dumps(colors_for(mode, verdict_colours)))
            if micro_steps:
                w(b', "MicroSteps": ' + orjson.dumps(micro_steps))
            w(b', "task": ' + orjson.dumps(mode))
            w(b', "OverflowCheck": ' + orjson.dumps(overflow_check) + b"}")
    finally:
        _SHARED.clear()
        for t in tasks:
            try:
                os.remove(t[4])
            except OSError:
                pass


# ---------------------------------------------------------------------------------------------- .vis.db

NODE_COLUMNS = (
    ("id", "TEXT PRIMARY KEY"), ("graph_id", "TEXT NOT NULL"), ("node_order", "INTEGER NOT NULL"),
    ("node_name", "TEXT NOT NULL"), ("node_type", "TEXT NOT NULL"), ("up_node", "TEXT"), ("sub_nodes", "TEXT"),
    ("precision_index", "INTEGER"), ("overflow_level", "TEXT"), ("micro_step_id", "INTEGER NOT NULL"),
    ("matched_node_link", "TEXT"), ("stack_id", "TEXT"), ("parallel_merge_info", "TEXT"),
    ("matched_distributed", "TEXT"), ("modified", "INTEGER NOT NULL"), ("input_data", "TEXT"),
    ("output_data", "TEXT"), ("data_source", "TEXT"), ("dump_data_dir", "TEXT"), ("step", "INTEGER NOT NULL"),
    ("rank", "INTEGER NOT NULL"),
)
CONFIG_COLUMNS = (
    ("id", "TEXT PRIMARY KEY"), ("graph_type", "TEXT NOT NULL"), ("task", "TEXT"), ("tool_tip", "TEXT"),
    ("micro_steps", "INTEGER"), ("overflow_check", "INTEGER"), ("node_colors", "TEXT NOT NULL"),
    ("rank_list", "TEXT NOT NULL"), ("step_list", "TEXT NOT NULL"),
)
INDEXES = {
    "index1": ("step", "rank", "data_source", "up_node", "node_order"),
    "index2": ("step", "rank", "data_source", "node_name"),
    "index3": ("step", "rank", "data_source", "node_order"),
    "index4": ("step", "rank", "node_order"),
    "index5": ("step", "rank", "micro_step_id", "node_order"),
    "index6": ("step", "rank", "modified", "matched_node_link"),
}


def _dumps(v) -> str:
    return orjson.dumps(v, option=orjson.OPT_NON_STR_KEYS).decode()


_TYPE_TEXT = {0: "0", 1: "1", 8: "8", 9: "9"}


def _json_text(v) -> str:
    """JSON text of a formatted item dict, or of a child's pre-serialised fragment."""
    c = v.__class__
    if c is dict:
        return orjson.dumps(v).decode() if v else "{}"
    return orjson.dumps(v).decode()


def _db_rows(lo: int, hi: int) -> List[tuple]:
    order, sids, graph_id, source, dump_data_dir, step, rank, md5_mode = _SHARED["db"]
    rows = []
    add = rows.append
    dumps = orjson.dumps
    formatted = format_nodes(order[lo:hi], md5_mode)
    prefix = graph_id + "_"
    for i in range(lo, hi):
        n = order[i]
        fin, fout = formatted[i - lo]
        add((
            prefix + n.id, graph_id, i, n.id, _TYPE_TEXT.get(n.type) or str(n.type),
            n.up.id if n.up is not None else "",
            dumps([c.id for c in n.subnodes]).decode() if n.subnodes else "",
            n.data.get("precision_index"), n.data.get("overflow_level"),
            n.micro_step if n.micro_step is not None else 0,
            dumps(n.link).decode() if n.link else "[]", sids[i], "",
            _dumps(n.distributed) if n.distributed else "{}", 0,
            _json_text(fin), _json_text(fout),
            source, dump_data_dir, step, rank,
        ))
    return rows


def _db_slice(args) -> str:
    lo, hi, path = args
    con = sqlite3.connect(path)
    try:
        con.execute("PRAGMA journal_mode=OFF")
        con.execute("PRAGMA synchronous=OFF")
        body = ", ".join(f"{c} {t}" for c, t in NODE_COLUMNS)
        con.execute(f"CREATE TABLE tb_nodes ({body})")
        ins = f"INSERT INTO tb_nodes VALUES ({', '.join('?' * len(NODE_COLUMNS))})"
        for a in range(lo, hi, 5000):
            con.executemany(ins, _db_rows(a, min(hi, a + 5000)))
        con.commit()
    finally:
        con.close()
    return path


class DbWriter:
    """Streams graphs into one SQLite file; call :meth:`close` to add the indexes and the config row."""

    def __init__(self, path: str):
        self.path = path
        self.con = sqlite3.connect(path)
        cur = self.con.cursor()
        # rows carry KBs of JSON before the step/rank/data_source columns the indexes read: with 64 KiB pages
        # they rarely spill into overflow pages (index builds ~30% faster, file ~15% smaller)
        cur.execute("PRAGMA page_size=65536")
        cur.execute("PRAGMA journal_mode=OFF")
        cur.execute("PRAGMA synchronous=OFF")
        for table, cols in (("tb_nodes", NODE_COLUMNS), ("tb_stack", (("id", "TEXT PRIMARY KEY"), ("stack_info", "TEXT"))),
                            ("tb_config", CONFIG_COLUMNS)):
            body = ",\n".join(f"    {c} {t}" for c, t in cols)
            cur.execute(f"CREATE TABLE {table} (\n{body}\n)")

    @classmethod
    def reopen(cls, path: str) -> "DbWriter":
        """A writer on an existing database (to finish it with :meth:`close`)."""
        w = cls.__new__(cls)
        w.path = path
        w.con = sqlite3.connect(path)
        return w

    def add_graph(self, g: Graph, source: str, step: int, rank: int, md5_mode: bool, workers: int = 1) -> None:
        """Insert one graph: post-order ``node_order``, stacks deduplicated per graph.

        With several workers the rows are formatted in forked processes, each into a part database that is
        then copied in with one INSERT ... SELECT.
        """
        graph_id = f"{source}_{step}_{rank}"
        stack_ids: Dict[int, str] = {}
        by_text: Dict[str, str] = {}
        stack_rows = []
        order = list(g.postorder())
        sids = []
        for n in order:
            sid = stack_ids.get(id(n.stack))
            if sid is None:
                key = _dumps(n.stack)
                sid = by_text.get(key)
                if sid is None:
                    sid = by_text[key] = f"{graph_id}_{len(by_text)}"
                    stack_rows.append((sid, key))
                stack_ids[id(n.stack)] = sid
            sids.append(sid)
        self.con.executemany("INSERT INTO tb_stack VALUES (?, ?)", stack_rows)
        _SHARED["db"] = (order, sids, graph_id, source, g.dump_data_dir, step, rank, md5_mode)
        try:
            slices = _slices(len(order), workers)
            if len(slices) <= 1 or workers <= 1:
                for lo in range(0, len(order), 2000):
                    self._flush(_db_rows(lo, min(len(order), lo + 2000)))
                return
            tasks = [(lo, hi, f"{self.path}.part{lo}") for lo, hi in slices]
            try:
                for part in _parallel(tasks, _db_slice, workers):
                    self.con.execute("ATTACH DATABASE ? AS part", (part,))
                    self.con.execute("INSERT INTO tb_nodes SELECT * FROM part.tb_nodes")
                    self.con.commit()
                    self.con.execute("DETACH DATABASE part")
            finally:
                for t in tasks:
                    for suffix in ("", "-journal"):
                        try:
                            os.remove(t[2] + suffix)
                        except OSError:
                            pass
        finally:
            _SHARED.pop("db", None)

    def _flush(self, rows: List[tuple]) -> None:
        if rows:
            self.con.executemany(f"INSERT INTO tb_nodes VALUES ({', '.join('?' * len(NODE_COLUMNS))})", rows)

    def close(self, *, compare: bool, mode: Optional[str], micro_steps: int, overflow_check: bool,
              ranks: List[int], steps: List[int], verdict_colours: bool = False) -> None:
        cur = self.con.cursor()
        # index builds sort the whole table: give them memory instead of temporary files.  No syncing: the
        # file is under a temporary name until it is complete.
        cur.execute("PRAGMA synchronous=OFF")
        cur.execute("PRAGMA temp_store=MEMORY")
        cur.execute("PRAGMA cache_size=-65536")
        for name, cols in INDEXES.items():
            cur.execute(f"CREATE INDEX {name} ON tb_nodes ({', '.join(cols)})")
        cur.execute(
            "INSERT INTO tb_config VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            ("1", "compare" if compare else "build", mode or "", tool_tip(mode, verdict_colours) if compare else "null",
             micro_steps, int(overflow_check), json.dumps(colors_for(mode, verdict_colours)) if compare else "null",
             json.dumps(sorted(set(ranks))), json.dumps(sorted(set(steps)))),
        )
        self.con.commit()
        # the reference's files (and the plugin) use WAL; switch now that the bulk load is done
        cur.execute("PRAGMA journal_mode=WAL")
        self.con.close()
        for suffix in ("-wal", "-shm"):
            try:
                os.remove(self.path + suffix)
            except OSError:
                pass

    def abort(self) -> None:
        try:
            self.con.close()
        finally:
            for suffix in ("", "-wal", "-shm", "-journal"):
                try:
                    os.remove(self.path + suffix)
                except OSError:
                    pass
