"""Helpers for comparing our graph files with the reference's (.vis JSON and .vis.db SQLite)."""

from __future__ import annotations

import json
import sqlite3
from typing import Dict, Tuple

from msprobe.core.graph.colors import bucket

# per side: {node id: (parent id or '', [children], node_type, partner id or None, precision_index)}
Side = Dict[str, Tuple[str, list, int, object, object]]


def read_vis(path: str) -> Tuple[Dict[str, Side], str]:
    with open(path, "rb") as f:
        obj = json.load(f)
    sides = {"NPU": obj["NPU"], "Bench": obj["Bench"]} if "NPU" in obj else {"NPU": obj}
    out = {}
    for name, g in sides.items():
        root = g["root"]
        reach = set()
        stack = [root]
        while stack:
            n = stack.pop()
            reach.add(n)
            stack.extend(g["node"][n]["subnodes"])
        t = {}
        for nid, n in g["node"].items():
            if nid not in reach:
                continue
            up = n.get("upnode")
            t[nid] = ("" if up in (None, "None") else up, list(n["subnodes"]), int(n["node_type"]),
                      n["matched_node_link"][-1] if n.get("matched_node_link") else None,
                      n.get("data", {}).get("precision_index"))
        out[name] = t
    return out, obj.get("task", "")


def read_db(path: str, step: int = 0, rank: int = 0) -> Tuple[Dict[str, Side], str]:
    con = sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True)
    try:
        task = con.execute("SELECT task FROM tb_config").fetchone()[0] or ""
        out = {}
        for side in ("NPU", "Bench"):
            rows = con.execute(
                "SELECT node_name, up_node, sub_nodes, node_type, matched_node_link, precision_index FROM tb_nodes "
                "WHERE step=? AND rank=? AND data_source=? ORDER BY node_order", (step, rank, side)).fetchall()
            if not rows:
                continue
            t = {}
            for name, up, subs, nt, link, pi in rows:
                link = json.loads(link) if link else []
                t[name] = (up or "", json.loads(subs) if subs else [], int(nt), link[-1] if link else None, pi)
            out[side] = t
        return out, task
    finally:
        con.close()


def diff_sides(ours: Dict[str, Side], ref: Dict[str, Side], mode: str, ignore=()) -> list:
    """Human-readable differences in ids, parents, children order, types, partners and colour buckets."""
    problems = []
    for side in ref:
        a, b = ours.get(side, {}), ref[side]
        for nid in sorted(set(a) ^ set(b)):
            if nid in ignore:
                continue
            problems.append(f"{side}: node {nid} only in {'ours' if nid in a else 'reference'}")
        for nid in set(a) & set(b):
            if nid in ignore:
                continue
            (pa, ca, ta, ma, ia), (pb, cb, tb, mb, ib) = a[nid], b[nid]
            if pa != pb:
                problems.append(f"{side}: {nid} parent {pa!r} vs {pb!r}")
            if [c for c in ca if c not in ignore] != [c for c in cb if c not in ignore]:
                problems.append(f"{side}: {nid} children {ca} vs {cb}")
            if ta != tb:
                problems.append(f"{side}: {nid} type {ta} vs {tb}")
            if ma != mb:
                problems.append(f"{side}: {nid} partner {ma} vs {mb}")
            if side == "NPU" and mode and bucket(mode, ia) != bucket(mode, ib):
                problems.append(f"{side}: {nid} precision {ia} vs {ib}")
    return problems
