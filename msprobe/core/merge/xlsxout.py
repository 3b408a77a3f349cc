"""The merged workbook: one sheet per compare index, written by the shared streaming xlsx writer."""

from __future__ import annotations

from typing import List, Sequence, Tuple

from msprobe.core.io.xlsx import write_workbook


def write_sheets(path: str, sheets: Sequence[Tuple[str, List[str], list]]) -> List[str]:
    """Write ``sheets`` = [(name, header, columns)] to ``path``; columns as for ``write_xlsx``."""
    return write_workbook(path, sheets)
