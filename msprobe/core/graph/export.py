"""Writers: JSON ``.vis`` (one graph or one compare per file) and SQLite ``.vis.db`` (every graph of a run).

Both write the same node fields, formatted the same way (graph_and_tools.md A.8.3, 8.x rules: every leaf
value becomes a string, floats rounded to 6 decimals or ``{:.6e}``, ``md5`` kept only in md5 compares).
Files are written to a temporary name in the output directory and renamed into place when complete.
"""

from __future__ import annotations

import json
import os
import re
import sqlite3
from typing import Dict, Iterable, List, Optional

import orjson

from msprobe.core.graph.colors import colors_for, tool_tip
from msprobe.core.graph.compare import MODE_MD5
from msprobe.core.graph.model import ROOT_ID, Graph, Node

_SCI = re.compile(r"^[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)$")
_DECIMAL = re.compile(r"^\d{1,20}\.(\d{1,20})%?$")
_PG_KEEP = ("type", "group_ranks", "group_id", "data_name")
_P2P_DROP = ("op", "peer", "tag", "group_id")


def _fmt_str(s: str) -> str:
    if "'" in s:
        s = s.replace("'", "")
    if "None" in s:
        s = s.replace("None", "null")
    m = _DECIMAL.match(s)
    if m is not None and len(m.group(1)) > 6:
        pct = s.endswith("%")
        s = "{:.6f}".format(float(s.rstrip("%"))) + ("%" if pct else "")
    return s


def _fmt_value(v) -> str:
    c = v.__class__
    if c is str:
        return _fmt_str(v) if v != " " else "null"
    if v is None:
        return "null"
    if c is float:
        r = repr(v)
        if len(r) < 50 and ("e" in r or "E" in r) and _SCI.match(r) is not None:
            return "{:.6e}".format(v)
        return str(round(v, 6))
    if c is int:
        return str(v)
    return _fmt_str(str(v))


def format_item(item: dict, md5_mode: bool, p2p: bool = False) -> dict:
    """A node item as the viewer shows it (a new dict; the graph is not modified)."""
    if item.get("type") == "torch.ProcessGroup":
        src = {k: item[k] for k in _PG_KEEP if k in item}
    else:
        src = item
    out = {}
    for k, v in src.items():
        if k == "md5" and not md5_mode:
            continue
        if p2p and k in _P2P_DROP:
            continue
        out[k] = _fmt_value(v)
    if out.get("Max") == "null":
        return {"value": "null"}
    return out


def format_items(data: Dict[str, dict], md5_mode: bool, node_id: str) -> Dict[str, dict]:
    p2p = "batch_isend_irecv" in node_id
    return {k: format_item(v, md5_mode, p2p) for k, v in data.items()}


def node_dict(n: Node, md5_mode: bool) -> dict:
    d = {
        "id": n.id,
        "node_type": n.type,
        "output_data": format_items(n.output_data, md5_mode, n.id),
        "input_data": format_items(n.input_data, md5_mode, n.id),
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


def _graph_chunks(g: Graph, md5_mode: bool) -> Iterable[bytes]:
    """``{"root": ..., "dump_data_dir": ..., "node": {...}}`` as byte chunks (one node at a time)."""
    yield b'{"root": "' + ROOT_ID.encode() + b'", "dump_data_dir": ' + orjson.dumps(g.dump_data_dir) + b', "node": {'
    first = True
    for n in g.nodes.values():
        head = b"" if first else b", "
        first = False
        yield head + orjson.dumps(n.id) + b": " + orjson.dumps(node_dict(n, md5_mode), option=orjson.OPT_NON_STR_KEYS)
    yield b"}"


def write_vis(path: str, g_n: Graph, g_b: Optional[Graph], *, mode: Optional[str], micro_steps: int,
              overflow_check: bool) -> None:
    """Write one .vis (build when g_b is None, else compare) to ``path`` (a temp name; caller renames)."""
    md5_mode = mode == MODE_MD5
    with open(path, "wb", buffering=1 << 20) as f:
        w = f.write
        if g_b is None:
            for chunk in _graph_chunks(g_n, md5_mode):
                w(chunk)
            w(b', "MicroSteps": ' + orjson.dumps(micro_steps) + b', "OverflowCheck": ' + orjson.dumps(overflow_check) + b"}")
            return
        w(b'{"NPU": ')
        for chunk in _graph_chunks(g_n, md5_mode):
            w(chunk)
        w(b'}, "Bench": ')
        for chunk in _graph_chunks(g_b, md5_mode):
            w(chunk)
        w(b"}")
        w(b', "ToolTip": ' + orjson.dumps(tool_tip(mode)))
        w(b', "Colors": ' + orjson.dumps(colors_for(mode)))
        if micro_steps:
            w(b', "MicroSteps": ' + orjson.dumps(micro_steps))
        w(b', "task": ' + orjson.dumps(mode))
        w(b', "OverflowCheck": ' + orjson.dumps(overflow_check) + b"}")


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


class DbWriter:
    """Streams graphs into one SQLite file; call :meth:`close` to add the indexes and the config row."""

    def __init__(self, path: str):
        self.path = path
        self.con = sqlite3.connect(path)
        cur = self.con.cursor()
        cur.execute("PRAGMA journal_mode=OFF")
        cur.execute("PRAGMA synchronous=OFF")
        for table, cols in (("tb_nodes", NODE_COLUMNS), ("tb_stack", (("id", "TEXT PRIMARY KEY"), ("stack_info", "TEXT"))),
                            ("tb_config", CONFIG_COLUMNS)):
            body = ",\n".join(f"    {c} {t}" for c, t in cols)
            cur.execute(f"CREATE TABLE {table} (\n{body}\n)")

    def add_graph(self, g: Graph, source: str, step: int, rank: int, md5_mode: bool) -> None:
        graph_id = f"{source}_{step}_{rank}"
        stack_ids: Dict[str, str] = {}
        stack_rows = []
        rows = []
        for order, n in enumerate(g.postorder()):
            key = _dumps(n.stack)
            sid = stack_ids.get(key)
            if sid is None:
                sid = f"{graph_id}_{len(stack_ids)}"
                stack_ids[key] = sid
                stack_rows.append((sid, key))
            rows.append((
                f"{graph_id}_{n.id}", graph_id, order, n.id, str(n.type),
                n.up.id if n.up is not None else "",
                _dumps([c.id for c in n.subnodes]) if n.subnodes else "",
                n.data.get("precision_index"), n.data.get("overflow_level"),
                n.micro_step if n.micro_step is not None else 0,
                _dumps(n.link), sid, "", _dumps(n.distributed), 0,
                _dumps(format_items(n.input_data, md5_mode, n.id)),
                _dumps(format_items(n.output_data, md5_mode, n.id)),
                source, g.dump_data_dir, step, rank,
            ))
            if len(rows) >= 5000:
                self._flush(rows)
                rows = []
        self._flush(rows)
        self.con.executemany("INSERT INTO tb_stack VALUES (?, ?)", stack_rows)

    def _flush(self, rows: List[tuple]) -> None:
        if rows:
            self.con.executemany(f"INSERT INTO tb_nodes VALUES ({', '.join('?' * len(NODE_COLUMNS))})", rows)

    def close(self, *, compare: bool, mode: Optional[str], micro_steps: int, overflow_check: bool,
              ranks: List[int], steps: List[int]) -> None:
        cur = self.con.cursor()
        for name, cols in INDEXES.items():
            cur.execute(f"CREATE INDEX {name} ON tb_nodes ({', '.join(cols)})")
        cur.execute(
            "INSERT INTO tb_config VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            ("1", "compare" if compare else "build", mode or "", tool_tip(mode) if compare else "null",
             micro_steps, int(overflow_check), json.dumps(colors_for(mode)) if compare else "null",
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
