"""The reference's ``parse`` output, drawn with rich: the ``pt`` panel, the ``cn`` tables and panel,
the ``pk`` statistics lines and the ``dc`` file list.  File names are printed as plain text (never as
rich markup)."""

from __future__ import annotations

from typing import List, Optional, TextIO

import numpy as np
from rich.columns import Columns
from rich.console import Console, Group
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from msprobe.core.parse.arrays import CompareResult, head_rows, summary_text


def console(file: Optional[TextIO] = None) -> Console:
    return Console(file=file, highlight=False, soft_wrap=False, emoji=False, markup=False)


def _table(title: str, columns: List[str]) -> Table:
    t = Table(title=title or None)
    for c in columns:
        t.add_column(c, overflow="fold")
    return t


def print_array(con: Console, arr: np.ndarray, path: str, txt_file: Optional[str]) -> None:
    """``pt``: the first 16 rows of 8 values, the summary, the path and the text file."""
    table = _table("", ["Index", "Data"])
    for index, values in head_rows(arr):
        table.add_row(index, values)
    lines = Text()
    lines.append(summary_text(arr), style="yellow")
    lines.append(f"\nPath: {path}")
    lines.append(f"\nTextFile: {txt_file}" if txt_file else "")
    con.print(Panel.fit(Columns([table, lines]), title=Text(path)))


def _side(title: str, path: str, txt: Optional[str], arr: np.ndarray) -> List[str]:
    out = [f"{title}:", f" ├─ NpyFile: {path}"]
    if txt:
        out.append(f" ├─ TxtFile: {txt}")
    out.append(f" └─ NpySpec: {summary_text(arr)}")
    return out


def print_compare(con: Console, res: CompareResult, left: np.ndarray, right: np.ndarray, left_path: str,
                  right_path: str, atol: float, rtol: float, left_txt: Optional[str] = None,
                  right_txt: Optional[str] = None) -> None:
    """``cn``: Error Item Table and Top Item Table side by side, then the panel."""
    cols = ["Index", "Left", "Right", "Diff"]
    err = _table("Error Item Table", cols)
    for row in res.errors:
        err.add_row(*row)
    top = _table("Top Item Table", cols)
    for row in res.top:
        top.add_row(*row)
    con.print(Columns([err, top]))
    lines = _side("Left", left_path, left_txt, left) + _side("Right", right_path, right_txt, right)
    lines += [
        f"NumCnt:   {res.total}",
        f"AllClose: {res.all_close}",
        f"CosSim:   {res.cos_sim}" + (f"  ({res.cos_message.strip()})" if res.cos_message else ""),
        f"ErrorPer: {res.error_ratio}  (rl= {rtol}, al= {atol})",
    ]
    con.print(Panel.fit(Text("\n".join(lines))))


def print_statistics(con: Console, stats: List[str], stack: List[str]) -> None:
    """``pk``: the stack (when known), then ``Statistic Info:`` and one line per tensor."""
    for line in stack:
        con.print(Text(line), soft_wrap=True)
    if stats:
        con.print(Text("Statistic Info:"), soft_wrap=True)
        for line in stats:
            con.print(Text(line), soft_wrap=True)


def print_converted(con: Console, result: dict) -> None:
    """``dc``: the source and the .npy files written."""
    lines = [f"SrcFile: {result['source']}"] + [f" - {f}" for f in result["files"]]
    if not result["files"]:
        lines.append(" (no new .npy file)")
    con.print(Panel.fit(Group(*(Text(line) for line in lines))))
    con.print(Text(f"The converted files are in {result['output']}"), soft_wrap=True)
